-- support.lua: the helpers the specs share (each spec file requires it):
-- timers, error checks, logs, the timeout books, coroutines that drive
-- tasks that yield, finalizers, threads and child interpreters.
local hwt = require("hwt")
local compat = require("compat")
-- busted's own assert (luassert), for the helpers that check as they go.
local assert = require("luassert")

local pack, unpack = compat.pack, compat.unpack

local support = {}

-- On LuaJIT a Timeout is a cdata (lua/hwt/jit.lua), elsewhere a userdata.
support.cdata_timeouts = jit ~= nil
support.timeout_type = support.cdata_timeouts and "cdata" or "userdata"

-- On LuaJIT an ended Timeout (run, cancelled, stopped) has let go of its
-- task: resetting it raises, and that is what a test of such a reset checks
-- there (`t` must have ended).
function support.reset_of_ended_raises(t)
  local ok, err = pcall(t.reset, t)
  assert.is_false(ok)
  assert.matches("timeout has ended", tostring(err), 1, true)
  assert.is_nil(t:task())
end

function support.noop() end

-- Loose bounds of the real-clock specs: "never early" at nanosecond
-- resolution, and lateness from OS scheduling on a loaded machine.
support.EPS = 1e-9
support.LATE = 0.5

-- The clamp of delays: 2^62 ns (~146 years), in seconds.
support.MAX_DELAY = 2 ^ 62 / 1e9

-- A manual-clock timer with `opts` added.
function support.manual(opts)
  local o = { clock = "manual" }
  for k, v in pairs(opts or {}) do o[k] = v end
  return hwt.new(o)
end

-- A manual-clock timer whose on_error keeps each error value as it came
-- (nil included): errors[1 .. errors.n].
function support.manual_with_errors(opts)
  local errors = { n = 0 }
  local o = { on_error = function(err) errors.n = errors.n + 1; errors[errors.n] = err end }
  for k, v in pairs(opts or {}) do o[k] = v end
  return support.manual(o), errors
end

-- Two full collections: what is garbage is collected, finalizers included.
function support.full_gc()
  collectgarbage()
  collectgarbage()
end

-- ---- values and errors ------------------------------------------------------

-- A value as a message shows it: strings quoted, floats in full.
function support.show(v)
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) == "number" and not compat.is_integer(v) then return ("%.17g"):format(v) end
  return tostring(v)
end

-- Calls f(...) and returns its error message; fails if f does not raise.
function support.error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error, got none (first result: " .. support.show(err) .. ")")
  return tostring(err)
end

-- f(...) must raise an error whose message contains `substring`; returns it.
function support.assert_raises(substring, f, ...)
  local message = support.error_of(f, ...)
  assert.is_truthy(message:find(substring, 1, true),
    ("error message %q does not contain %q"):format(message, substring))
  return message
end

-- The error of f(unpack(args)) must contain every one of the substrings.
function support.assert_error(f, args, ...)
  local message = support.error_of(f, unpack(args, 1, args.n))
  for i = 1, select("#", ...) do
    local needle = select(i, ...)
    assert(message:find(needle, 1, true),
      ("error message %q does not contain %q"):format(message, needle))
  end
  return message
end

-- Whether the string s contains `substring` (plain).
function support.has_text(s, substring)
  return type(s) == "string" and s:find(substring, 1, true) ~= nil
end

-- Whether `list` holds x (rawequal).
function support.includes(list, x)
  for _, v in ipairs(list) do if rawequal(v, x) then return true end end
  return false
end

-- Whether list holds exactly the given userdata, in that order (rawequal).
function support.assert_same_objects(expected, actual, what)
  assert.are.equal(#expected, #actual, (what or "list") .. ": length")
  for i = 1, #expected do
    assert.is_true(rawequal(expected[i], actual[i]),
      ("%s: element %d is %s, expected %s"):format(what or "list", i, tostring(actual[i]), tostring(expected[i])))
  end
end

function support.close_to(expected, actual, tolerance)
  return type(actual) == "number" and math.abs(expected - actual) <= (tolerance or 1e-9)
end

function support.assert_close(expected, actual, tolerance, what)
  assert.is_true(support.close_to(expected, actual, tolerance),
    ("%s: expected %.17g, got %s"):format(what or "value", expected, tostring(actual)))
end

-- Seconds as whole nanoseconds, rounded to the nearest.
function support.ns(seconds) return math.floor(seconds * 1e9 + 0.5) end

-- A task that appends its label (first extra argument) to a log.
function support.logger()
  local log = {}
  local function task(_, label) log[#log + 1] = label end
  return log, task
end

-- Values of every wrong kind; `extra` adds hwt objects.
function support.wrong_values(extra)
  local values = {
    { "nil", nil }, { "string", "x" }, { "numeric string", "12" }, { "table", {} },
    { "boolean", true }, { "function", print }, { "userdata", io.stdout }, { "number", 42 },
  }
  for name, v in pairs(extra or {}) do values[#values + 1] = { name, v } end
  return values
end

-- call.name(obj, ...) calls obj:name(...) with the colon syntax, so that an
-- argument error is numbered as the user sees it ("bad argument #1 to
-- 'timeout'" is the delay).
-- Not a tail call: LuaJIT drops a tail-called function's name and the
-- method adjustment of the argument numbers with it.
support.call = setmetatable({}, { __index = function(self, name)
  local f = assert(compat.load(("local pack, unpack = ...\n" ..
    "return function(o, ...) local r = pack(o:%s(...)) return unpack(r, 1, r.n) end"):format(name)))(pack, unpack)
  rawset(self, name, f)
  return f
end })

-- ---- the timeout books ------------------------------------------------------

-- The state word of tostring(timeout): pending, pending (periodic), due,
-- running, expired, cancelled.
function support.state_of(t)
  return (tostring(t):match("^hwt%.Timeout %((.-), "))
end

-- Books: schedules through a timer while counting every task start, then
-- checks that the timer's counters and every timeout's state add up.
local Books = {}
Books.__index = Books

function support.books(timer)
  return setmetatable({ timer = timer, all = {}, runs = {}, periodic = {},
                        returned = {}, total_runs = 0 }, Books)
end

function Books:wrap(task)
  return function(t, ...)
    self.runs[t] = (self.runs[t] or 0) + 1
    self.total_runs = self.total_runs + 1
    return task(t, ...)
  end
end

function Books:timeout(delay, task, ...)
  local t, err = self.timer:timeout(delay, self:wrap(task), ...)
  if t then self.all[#self.all + 1] = t end
  return t, err
end

function Books:every(interval, task, ...)
  local t, err = self.timer:every(interval, self:wrap(task), ...)
  if t then
    self.all[#self.all + 1] = t
    self.periodic[t] = true
  end
  return t, err
end

function Books:record_stop(list)
  for _, t in ipairs(list) do self.returned[t] = true end
  return list
end

function Books:stop()
  return self:record_stop(self.timer:stop())
end

function Books:runs_of(t) return self.runs[t] or 0 end

-- Outside any poll: every timeout ended exactly one way or is pending, and
-- pending(), stats().pending/fired/cancelled agree with the timeouts.
function Books:check()
  local stats = self.timer:stats()
  local pending, cancelled = 0, 0
  for i, t in ipairs(self.all) do
    local state, runs = support.state_of(t), self:runs_of(t)
    local label = ("timeout #%d (%s, ran %d times)"):format(i, tostring(t), runs)
    assert(state ~= "running" and state ~= nil, label .. ": running outside any poll")
    assert(runs == 0 or t:is_expired(), label .. ": ran but is not expired")
    if not self.periodic[t] then
      assert(runs <= 1, label .. ": a one-shot ran more than once")
      local live = state == "pending" or state == "due"
      local ways = (t:is_expired() and 1 or 0) + (t:is_cancelled() and 1 or 0) + (live and 1 or 0)
      assert(ways == 1, label .. ": ended in " .. ways .. " ways")
    end
    if self.returned[t] then
      assert(t:is_cancelled() and runs == 0 and not t:is_expired(),
        label .. ": returned by stop() but it had run")
    end
    if t:is_cancelled() then cancelled = cancelled + 1 end
    if state == "pending" or state == "due" or state == "pending (periodic)" then
      pending = pending + 1
    end
  end
  assert.are.equal(pending, stats.pending, "stats().pending vs the timeouts")
  assert.are.equal(self.timer:pending(), stats.pending, "pending() vs stats().pending")
  assert.are.equal(self.total_runs, stats.fired, "stats().fired vs task starts")
  assert.are.equal(cancelled, stats.cancelled, "stats().cancelled vs cancelled timeouts")
  assert(stats.due <= stats.pending, "more due than pending")
  return stats
end

-- ---- tasks that yield -------------------------------------------------------
-- On PUC Lua 5.1, where pcall cannot be yielded across, a yield inside a task
-- is that task's error (it goes to on_error and the drain goes on); the specs
-- check that instead (compat.tasks_yield).

-- A manual-clock timer whose on_error records { err =, timeout = } entries.
function support.collecting(opts)
  local errors = {}
  local o = { on_error = function(err, t) errors[#errors + 1] = { err = err, timeout = t } end }
  for k, v in pairs(opts or {}) do o[k] = v end
  return support.manual(o), errors
end

-- Whether the running code is on the main thread (5.1 and LuaJIT return nil
-- there, 5.2+ a thread and true). A task run from the main thread cannot
-- yield: tasks that drains on both run yield only elsewhere.
function support.in_main()
  local co, is_main = coroutine.running()
  return co == nil or is_main == true
end

-- Runs f(...) in a new coroutine; returns it and the packed results of the
-- first resume.
function support.start(f, ...)
  local co = coroutine.create(f)
  return co, pack(coroutine.resume(co, ...))
end

function support.resume(co, ...)
  return pack(coroutine.resume(co, ...))
end

-- The first n values of a packed table, as a plain array for assert.same.
function support.first(p, n)
  local out = {}
  for i = 1, n do out[i] = p[i] end
  return out
end

-- There are n errors, each a yield that could not happen (PUC 5.1, the main
-- thread, a C call in between).
function support.assert_yield_errors(errors, n)
  assert.are.equal(n, #errors)
  for i = 1, n do
    assert.matches("yield", tostring(errors[i].err), 1, true)
  end
end

-- A task that appends `name` to log, yields `name` out of the draining call
-- (when not on the main thread), then appends name .. ":" .. what it was
-- resumed with.
function support.yielder(log, name)
  return function()
    log[#log + 1] = name
    if support.in_main() then return end
    local got = coroutine.yield(name)
    log[#log + 1] = name .. ":" .. tostring(got)
  end
end

function support.appender(log, name)
  return function() log[#log + 1] = name end
end

-- Resumes co until it is dead; returns the yielded values' first fields in
-- order, and the packed results of the last resume.
function support.resume_to_end(co, first_result)
  local yielded, last = {}, first_result
  while coroutine.status(co) == "suspended" do
    yielded[#yielded + 1] = last[2]
    last = support.resume(co, "r")
  end
  return yielded, last
end

-- ---- time, threads and descriptors ------------------------------------------

-- A timer with nothing pending: wait(s) just sleeps s seconds. Passes time
-- without touching the timer under test, and without fork (os.execute).
local sleeper = hwt.new()
function support.sleep(seconds)
  local deadline = hwt.now() + seconds
  while true do
    local left = deadline - hwt.now()
    if left <= 0 then return end
    sleeper:wait(left)
  end
end

-- Threads of this process (the entries of /proc/self/task). Reads the file
-- whole and closes it: an io.lines loop left early would keep a descriptor
-- open until collected.
function support.threads()
  local f = assert(io.open("/proc/self/status"))
  local status = f:read("*a")
  f:close()
  local count = assert(status:match("\nThreads:%s*(%d+)"), "no Threads: line")
  return tonumber(count)
end

-- A joined thread may linger in /proc for a moment: polls up to `limit` s
-- for the count to fall to at_most; returns the last count.
function support.threads_settle(at_most, limit)
  local deadline = hwt.now() + (limit or 2)
  local n = support.threads()
  while n > at_most and hwt.now() < deadline do
    support.sleep(0.01)
    n = support.threads()
  end
  return n
end

-- The eventfd counter of fd, from /proc/self/fdinfo (nonzero = readable).
function support.eventfd_count(fd)
  local f = assert(io.open("/proc/self/fdinfo/" .. fd, "r"))
  local info = f:read("*a")
  f:close()
  local hex = info:match("eventfd%-count:%s*(%x+)")
  assert(hex, "fd " .. fd .. " is not an eventfd:\n" .. info)
  return tonumber(hex, 16)
end

function support.fd_readable(timer) return support.eventfd_count(timer:fd()) ~= 0 end

-- ---- child interpreters -----------------------------------------------------

-- Runs `code` in a child interpreter that loads this very build of hwt,
-- with `environment` ("NAME=value ...", optional) added to its own.
-- Returns stdout, stderr, and the three results close() gives on 5.2+
-- (ok, "exit" or "signal", code); the shell reports them, so that they are
-- the same on 5.1 and LuaJIT, whose close() returns only true.
function support.run_child(code, environment)
  local lua = compat.interpreter()
  if environment then lua = "env " .. environment .. " " .. lua end
  local script, errfile = os.tmpname(), os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(("package.path = %q\npackage.cpath = %q\n"):format(package.path, package.cpath))
  f:write(code)
  f:close()
  local p = assert(io.popen(("%s %s 2>%s; echo \"HWT-CHILD-EXIT=$?\""):format(lua, script, errfile), "r"))
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("HWT%-CHILD%-EXIT=(%d+)\n$"))
  out = out:gsub("HWT%-CHILD%-EXIT=%d+\n$", "")
  local how, status = nil, nil
  if code then
    how, status = code > 128 and "signal" or "exit", code > 128 and code - 128 or code
  end
  local ok = (how == "exit" and status == 0) or nil
  local e = assert(io.open(errfile, "r"))
  local err = e:read("*a")
  e:close()
  os.remove(script)
  os.remove(errfile)
  return out, err, ok, how, status
end

-- What a child wrote, stdout then stderr.
function support.child_output(code)
  local out, err = support.run_child(code)
  return out .. err
end

-- For the children: a state full of timers left pending when it closes:
-- thousands of timeouts, periodic ones, timeouts scheduled from inside
-- `every` tasks, a due-but-unpolled one, a sleeping coroutine, a manual
-- timer, a dropped one and a to-be-closed one.
support.CHILD_SETUP = [[
local hwt = require("hwt")
math.randomseed(tonumber(arg and arg[1]) or 7)
local timers = {}
for k = 1, 3 do
  local t = hwt.new({ tick = k == 1 and 1e-5 or 0.001 })
  timers[k] = t
  for i = 1, 2000 do t:timeout(math.random() * 0.2, function() end) end
  for i = 1, 500 do t:timeout(100 + i, function() end) end
  for i = 1, 20 do
    t:every(0.001 * i, function(to)
      to:timer():timeout(math.random() * 5, function() end)
      to:timer():every(0.002, function() end)
    end)
  end
  t:timeout(math.huge, function() end)
end
local busy = hwt.new({ tick = 1e-6 })
busy:every(1e-6, function() end)
for i = 1, 1000 do busy:timeout(i * 1e-5, function() end) end
local m = hwt.new({ clock = "manual" })
for i = 1, 3000 do m:timeout(i * 0.01, function() end) end
m:every(0.5, function(to) to:timer():timeout(1, function() end) end)
m:advance(3)
local deadline = hwt.now() + 0.1
while hwt.now() < deadline do
  for _, t in ipairs(timers) do
    if t:wait(0.002) then t:poll(100) end
  end
end
timers[1]:timeout(0, function() end)
assert(timers[1]:wait(1))                    -- due, never polled
coroutine.wrap(function() timers[2]:sleep(50) end)()
]] .. (compat.has_close and "local closing <close> = hwt.new()\n"
  or "local closing = hwt.new()   -- no <close> before Lua 5.4\n") .. [[
closing:timeout(30, function() end)
local dropped = hwt.new()
for i = 1, 100 do dropped:timeout(i, function() end) end
dropped = nil
collectgarbage()
io.write("pending:", timers[1]:pending() + timers[2]:pending() + m:pending(), "\n")
]]

-- A child's result must be a clean exit: status 0, no sanitizer report.
-- Under `make test` the specs also run against the ASan+UBSan build, whose
-- runtime the child interpreters inherit (LD_PRELOAD), so a child that
-- touches freed memory fails with a report on its stderr.
function support.assert_clean_exit(out, err, ok, how, status)
  assert(not err:find("Sanitizer", 1, true), "sanitizer report:\n" .. err)
  assert(ok, ("child ended by %s %s\nstdout: %s\nstderr: %s"):format(
    tostring(how), tostring(status), out, err))
end

-- For the children: an object whose finalizer is f (a table where tables
-- have __gc, a proxy on 5.1 and LuaJIT).
support.ON_GC = [[
local function on_gc(f)
  if newproxy then
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = f
    return proxy
  end
  return setmetatable({}, { __gc = f })
end
]]

-- ---- calls that meet a stop or a finalizer ----------------------------------

-- For the duration of body(), timer:timeout(...) is replacement(timeout,
-- timer, ...), where timeout is the method itself.
function support.with_timeout_of(timer, replacement, body)
  local timeout = hwt.Timer.timeout
  hwt.Timer.timeout = function(self, ...)
    if self ~= timer then return timeout(self, ...) end
    return replacement(timeout, self, ...)
  end
  local ok, err = pcall(body)
  hwt.Timer.timeout = timeout
  if not ok then error(err, 0) end
end

-- A finalizer can run at any allocation inside timer:timeout(). For the
-- duration of body(), timer's timeout() stops timer from a coroutine at the
-- point `when` names: "before" the timeout is armed (the call then raises
-- "timer is stopped") or "after" (armed, then ended by the stop).
function support.with_stop_in_timeout(timer, when, body)
  local function stop() coroutine.wrap(function() timer:stop() end)() end
  support.with_timeout_of(timer, function(timeout, self, ...)
    if when == "before" then stop() end
    local t, err = timeout(self, ...)
    if when == "after" then stop() end
    return t, err
  end, body)
end

-- Whether collector_steps_often makes the collector step at every
-- allocation: only Lua 5.4 has the step size to set (its "incremental"
-- option names the mode it leaves).
do
  local known, left_mode = pcall(collectgarbage, "incremental")
  support.steps_at_every_allocation = known and type(left_mode) == "string"
end

-- With `on`, the collector starts a new cycle at once and steps at every
-- allocation (Lua 5.4) or every kilobyte or so (the others); without, the
-- default settings again.
function support.collector_steps_often(on)
  collectgarbage("setpause", on and 0 or 200)
  collectgarbage("setstepmul", on and 100 or 200)
  pcall(collectgarbage, "incremental", on and 0 or 200, 100, on and 1 or 13)  -- 5.4: the step size
end

-- Finalizers queued to run at the next allocations: `count` objects whose
-- finalizer calls attack() while the control is armed (control.hits counts
-- those calls). The collector is stepped until the first of them has run,
-- so the others run a few at each later step, that is at the allocations
-- of whatever the caller does next. The collector steps at nearly every
-- allocation until control:finish(). Only on Lua 5.4 is that sure (see
-- steps_at_every_allocation): 5.1-5.3 and LuaJIT step every kilobyte or
-- more, and 5.2 and 5.3 may run every pending finalizer at once.
function support.finalizers_at_next_allocations(count, attack)
  local control = { armed = false, hits = 0, ran = 0 }
  function control.arm() control.armed = true end
  function control.finish()
    control.armed = false
    support.collector_steps_often(false)
    collectgarbage("collect")
  end
  for _ = 1, count do
    compat.gc_object(function()
      control.ran = control.ran + 1
      if control.armed then
        control.hits = control.hits + 1
        attack()
      end
    end)
  end
  support.collector_steps_often(true)
  for _ = 1, 1e6 do
    if control.ran > 0 then break end
    collectgarbage("step", 0)
  end
  return control
end

-- ---- host drivers -----------------------------------------------------------

-- The delays of `scheduled` ({at, delay} each; `at` read just before the
-- timeout() call, which reads the clock first) by deadline: 0.01, 0.02, 0.03,
-- unless the process stalled between two calls (the first one opens the
-- driver's handles from inside timeout(), which may take a while on a loaded
-- machine).
function support.deadline_order(scheduled)
  table.sort(scheduled, function(a, b) return a.at < b.at end)
  local delays = {}
  for i, s in ipairs(scheduled) do delays[i] = s.delay end
  return delays
end

-- A real-clock timer whose on_error appends each error, as a string, to errors.
function support.quiet_timer(errors)
  return hwt.new({ tick = 0.005, on_error = function(err) errors[#errors + 1] = tostring(err) end })
end

-- Runs luv's loop (the module `uv`) under a watchdog of `limit` seconds.
-- Returns the seconds it took; raises if the watchdog had to end it.
function support.run_uv_loop(uv, limit)
  local hung = false
  local watchdog = uv.new_timer()
  watchdog:start(limit * 1000, 0, function() hung = true; uv.stop() end)
  watchdog:unref()
  local started = hwt.now()
  uv.run()
  local took = hwt.now() - started
  watchdog:close()
  uv.run("nowait")                              -- its close callback
  assert(not hung, "uv.run() hung (watchdog)")
  return took
end

return support
