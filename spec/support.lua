-- Helpers shared by the real-clock specs.
local hwt = require("hwt")
local compat = require("compat")

local support = {}

-- A manual-clock timer with `opts` added.
function support.manual(opts)
  local o = { clock = "manual" }
  for k, v in pairs(opts or {}) do o[k] = v end
  return hwt.new(o)
end

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

-- Timers with thousands of pending timeouts, periodic ones, timeouts
-- scheduled from inside `every` tasks, a due-but-unpolled one, a sleeping
-- coroutine, a manual timer and a to-be-closed one, all left pending.

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

-- An object whose finalizer is f: a table where tables have __gc, a proxy
-- on 5.1 and LuaJIT.
function support.on_gc(f)
  if newproxy then
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = f
    return proxy
  end
  return setmetatable({}, { __gc = f })
end

-- With `on`, the collector starts a new cycle at once and steps at every
-- allocation (Lua 5.4) or every kilobyte or so (the others); without, the
-- default settings again.
-- Whether collector_steps_often makes the collector step at every
-- allocation: only Lua 5.4 has the step size to set (its "incremental"
-- option names the mode it leaves).
do
  local known, left_mode = pcall(collectgarbage, "incremental")
  support.steps_at_every_allocation = known and type(left_mode) == "string"
end

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
    support.on_gc(function()
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

return support
