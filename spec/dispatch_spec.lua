-- dispatch_spec.lua: the draining calls that run due tasks: poll([max]),
-- advance(seconds), run(), run_for(seconds), with wait([seconds]) and fd()
-- that tell a host when to call them; what a drain runs and what it leaves
-- for the next call; drains called again from inside tasks and finalizers,
-- and nested past the C stack; the garbage a drain makes; and the dispatch
-- loop itself.
--
-- The dispatch loop keeps each anchored timeout until it runs or is
-- cancelled, whatever its task (on LuaJIT its FFI take reads the call from
-- the anchor table: the task beside the Timeout, or for one or two arguments
-- the Timeout's user value table alone, which holds the Timeout too; a slot
-- it lets go is cleared by the loop and given back later). On every VM each
-- task gets its own Timeout and exactly its arguments, timeouts(), reset()
-- and stop() find the Timeout of every kind of task, slots let go in a drain
-- are reused without mixing calls up, what ran or was cancelled is
-- collectable, and a task that is a userdata is never taken for a Timeout.
local hwt = require("hwt")
local core = require("hwt.core")
local compat = require("compat")
local support = require("support")

local pack, MAXINT, MININT, EPS = compat.pack, compat.maxinteger, compat.mininteger, support.EPS
local LATE, noop, manual = support.LATE, support.noop, support.manual
local manual_with_errors, error_of = support.manual_with_errors, support.error_of
local assert_raises, assert_error = support.assert_raises, support.assert_error
local close_to, assert_close, logger = support.close_to, support.assert_close, support.logger
local call, books, sleep = support.call, support.books, support.sleep
local eventfd_count, fd_readable = support.eventfd_count, support.fd_readable

-- A callable that is a userdata where the VM can make one (5.1, LuaJIT),
-- a callable table elsewhere.
local function callable_userdata(fn)
  if not newproxy then return setmetatable({}, { __call = fn }) end
  local proxy = newproxy(true)
  getmetatable(proxy).__call = fn
  return proxy
end

local function count_collected(weak, n)
  collectgarbage()
  collectgarbage()
  local left = 0
  for i = 1, n do if weak[i] ~= nil then left = left + 1 end end
  return n - left
end

-- Runs `code` in a separate interpreter (same LUA_PATH/LUA_CPATH and, under
-- the ASan run, the same LD_PRELOAD), killed after `seconds`. Returns its
-- output and whether it was killed.
local function run_isolated(code, seconds)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(code)
  f:close()
  local lua = compat.interpreter()
  local command = ("LUA_PATH='%s' LUA_CPATH='%s' timeout %d %s %s 2>&1; echo \"exit=$?\""):format(
    package.path, package.cpath, seconds, lua, path)
  local p = assert(io.popen(command))
  local out = p:read("*a")
  p:close()
  os.remove(path)
  return out, out:find("exit=124", 1, true) ~= nil
end

describe("poll()", function()
  it("a delay-0 timeout runs at the next poll() or at the next tick boundary", function()
    local timer = manual({ tick = 0.01 })
    local runs = 0
    timer:timeout(0, function() runs = runs + 1 end)  -- now = 0, a boundary
    local ran = timer:poll()
    assert.is_true(ran == 0 or ran == 1)
    timer:advance(0.01)
    assert.are.equal(1, runs)
    timer:advance(0.005)                              -- mid-tick
    timer:timeout(0, function() runs = runs + 1 end)
    local ran2 = timer:poll()
    assert.is_true(ran2 == 0 or ran2 == 1)
    assert.are.equal(1 + ran2, runs)
    timer:advance(0.005)                              -- the next boundary
    assert.are.equal(2, runs)
    timer:advance(1)
    assert.are.equal(2, runs)
  end)

  it("a timeout scheduled inside a task never runs in the same poll(), even with delay 0", function()
    local timer = manual()
    local log = {}
    timer:timeout(0, function()
      log[#log + 1] = "parent"
      timer:timeout(0, function() log[#log + 1] = "child" end)
    end)
    assert.are.equal(1, timer:poll())
    assert.are.same({ "parent" }, log)
    assert.are.equal(1, timer:poll())
    assert.are.same({ "parent", "child" }, log)
  end)

  it("the same rule holds for advance(): a task's new timeouts wait for the next call", function()
    local timer = manual({ tick = 0.01 })
    local log = {}
    timer:timeout(0.01, function()
      log[#log + 1] = "parent"
      timer:timeout(0, function() log[#log + 1] = "child0" end)
      timer:timeout(0.005, function() log[#log + 1] = "child5ms" end)
    end)
    assert.are.equal(1, timer:advance(1))   -- jumps far past both children's deadlines
    assert.are.same({ "parent" }, log)
    assert.are.equal(1, timer:stats().due)  -- child0 is due (the clock sits on a boundary)
    assert.is_true(timer:wait())
    assert.are.equal(2, timer:advance(0.01))
    assert.are.same({ "parent", "child0", "child5ms" }, log)
  end)

  it("a task that re-arms itself with delay 0 runs once per poll (no infinite loop)", function()
    local timer = manual()
    local runs = 0
    local function again()
      runs = runs + 1
      timer:timeout(0, again)
    end
    timer:timeout(0, again)
    for i = 1, 20 do
      assert.are.equal(1, timer:poll())
      assert.are.equal(i, runs)
    end
    assert.are.equal(1, timer:advance(1))
    assert.are.equal(21, runs)
    assert.are.equal(1, timer:pending())
  end)

  it("poll(max) runs at most max due tasks, in order; poll(0) runs nothing", function()
    local timer = manual()
    local log, task = logger()
    for i = 1, 5 do timer:timeout(0, task, i) end
    assert.are.equal(0, timer:poll(0))
    assert.are.same({}, log)
    assert.are.equal(5, timer:stats().due)
    assert.are.equal(2, timer:poll(2))
    assert.are.same({ 1, 2 }, log)
    assert.are.equal(3, timer:stats().due)
    assert.are.equal(3, timer:pending())
    assert.are.equal(1, timer:poll(1))
    assert.are.equal(2, timer:poll(10))
    assert.are.same({ 1, 2, 3, 4, 5 }, log)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:poll(0))
  end)

  it("poll(max) rejects a negative max", function()
    local timer = manual()
    error_of(timer.poll, timer, -1)
    error_of(timer.poll, timer, "x")
  end)

  it("poll() never blocks and returns 0 when nothing is due", function()
    local timer = manual()
    timer:timeout(3600, function() end)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:poll(5))
    assert.are.equal(1, timer:pending())
  end)

  it("poll(max): negative, fractional, NaN, infinite, 2^63 and non-numbers are named errors", function()
    local tm = manual()
    local b = books(tm)
    for _ = 1, 3 do b:timeout(0, noop) end
    for _, v in ipairs({ -1, MININT }) do
      assert_error(call.poll, pack(tm, v), "bad argument #1 to 'poll'", "max must be >= 0")
    end
    for _, v in ipairs({ 1.5, 0 / 0, math.huge, -math.huge, 2 ^ 63, 1e308, "1.5" }) do
      assert_error(call.poll, pack(tm, v), "bad argument #1 to 'poll'")
    end
    for _, v in ipairs({ "x", {}, true, print, io.stdout }) do
      assert_error(call.poll, pack(tm, v), "bad argument #1 to 'poll'", "number expected")
    end
    assert.are.equal(0, tm:poll(0))
    assert.are.equal(1, tm:poll("1"))
    assert.are.equal(1, tm:poll(1.0))
    assert.are.equal(1, tm:poll(MAXINT))
    assert.are.equal(0, tm:poll(nil))
    b:check()
    tm:stop()
  end)
end)

describe("drains called again from inside tasks and finalizers", function()
  it("poll() inside a task runs the other due tasks, never the same one twice", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local order, inner = {}, nil
    b:timeout(0.01, function() order[#order + 1] = "A"; inner = tm:poll() end)
    b:timeout(0.01, function() order[#order + 1] = "B" end)
    b:timeout(0.01, function()
      order[#order + 1] = "C"
      local ran = tm:poll()
      order[#order + 1] = ran
    end)
    b:timeout(0.02, function() order[#order + 1] = "late" end)
    assert.are.equal(1, tm:advance(0.01))       -- the outer pass ran A; A's poll ran B and C
    assert.are.same({ "A", "B", "C", 0 }, order)
    assert.are.equal(2, inner)
    b:check()
    tm:advance(0.01)
    assert.are.same({ "A", "B", "C", 0, "late" }, order)
    b:check()
    tm:stop()
  end)

  it("poll() inside a periodic task does not run that periodic again", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local p
    p = b:every(0.01, function() tm:poll(); tm:poll() end)
    local other = b:timeout(0.01, noop)
    tm:advance(0.01)
    assert.are.equal(1, b:runs_of(p))
    assert.are.equal(1, b:runs_of(other))
    tm:advance(0.01)
    assert.are.equal(2, b:runs_of(p))
    b:check()
    tm:stop()
  end)

  it("advance() inside a task on the manual clock runs what became due, each once, in order", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local order = {}
    local function log(_, name) order[#order + 1] = name end
    b:timeout(0.01, function()
      order[#order + 1] = "A"
      local ran = tm:advance(0.02)
      order[#order + 1] = ran
    end)
    b:timeout(0.01, log, "B")
    b:timeout(0.02, log, "C")
    b:timeout(0.03, log, "D")
    b:timeout(0.05, log, "E")
    tm:advance(0.01)
    assert.are.same({ "A", "B", "C", "D", 3 }, order)
    tm:advance(0.02)
    assert.are.same({ "A", "B", "C", "D", 3, "E" }, order)
    b:check()
    tm:stop()
  end)

  it("timeout() from a __gc during poll() or advance() never runs in that same pass, but in the next", function()
    for _, drive in ipairs({ "poll", "advance" }) do
      local tm = manual_with_errors()
      local b = books(tm)
      local from_gc
      local delay = drive == "poll" and 0 or 0.01
      b:timeout(delay, function()
        compat.gc_object(function() from_gc = b:timeout(0, noop) end)
        collectgarbage()
        collectgarbage()
      end)
      b:timeout(delay, noop)
      local ran = drive == "poll" and tm:poll() or tm:advance(0.01)
      assert.are.equal(2, ran, drive)
      assert.is_truthy(from_gc, "the finalizer did not run during " .. drive .. "()")
      assert.are.equal(0, b:runs_of(from_gc))
      b:check()
      assert.are.equal(1, tm:poll())
      assert.are.equal(1, b:runs_of(from_gc))
      b:check()
      tm:stop()
    end
  end)

  it("poll() and advance() from a __gc that runs inside a task: each task still runs once", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local inner = {}
    b:timeout(0.01, function()
      compat.gc_object(function()
        local polled = tm:poll()
        local advanced = tm:advance(0.01)
        inner[#inner + 1] = polled
        inner[#inner + 1] = advanced
      end)
      collectgarbage()
      collectgarbage()
    end)
    for i = 1, 3 do b:timeout(0.01, noop, i) end
    b:timeout(0.02, noop)
    tm:advance(0.01)
    assert.are.same({ 3, 1 }, inner)
    b:check()
    tm:stop()
  end)

  it("a task re-arming itself with delay 0 runs on the next pass, not the same one", function()
    local tm = manual_with_errors()
    local runs = 0
    local function again(t)
      runs = runs + 1
      if runs < 5 then t:timer():timeout(0, t:task()) end
    end
    tm:timeout(0, again)
    for i = 1, 5 do
      assert.are.equal(1, tm:advance(0))
      assert.are.equal(i, runs)
    end
    assert.are.equal(0, tm:poll())
    tm:stop()
  end)

  it("run() inside a task on the manual clock is an error for on_error; wait() returns at once", function()
    local tm, errors = manual_with_errors()
    local waited
    tm:timeout(0, function() waited = tm:wait(); tm:run() end)
    tm:timeout(0, noop)
    assert.are.equal(2, tm:advance(0))
    assert.is_true(waited)
    assert.matches("run() would never end", tostring(errors[1]), 1, true)
    tm:stop()
  end)
end)

describe("poll() nested past the C stack", function()
  it("every timeout poll() takes is run; the nested call that cannot run one raises", function()
    local errors = {}
    local tm = hwt.new{clock = "manual", on_error = function(err) errors[#errors + 1] = tostring(err) end}
    local started, hs = 0, {}
    for i = 1, 300 do hs[i] = tm:timeout(0, function() started = started + 1; tm:poll() end) end
    tm:advance(0)
    assert.are.equal(300, started)
    for i = 1, 300 do assert.is_true(hs[i]:is_expired(), "timeout " .. i) end
    -- Where the C stack ends (PUC Lua: about 200 C levels; LuaJIT's is deeper), the
    -- nested poll() raised in the task that called it, and on_error got it.
    for _, err in ipairs(errors) do assert.matches("stack overflow", err) end
    assert.are.equal(0, tm:pending())
    assert.are.equal(300, tm:stats().fired)
  end)

  it("a TimerTask (task:run) takes one C level more: still run, never lost", function()
    local errors, started = 0, 0
    local tm = hwt.new{clock = "manual", on_error = function() errors = errors + 1 end}
    local task = { run = function() started = started + 1; tm:poll() end }
    for _ = 1, 300 do tm:timeout(0, task) end
    tm:advance(0)
    assert.are.equal(300, started)
    assert.are.equal(300, tm:stats().fired)
  end)
end)

describe("timer:wait, run and advance", function()
  it("wait() on the manual clock returns at once: true iff something is due", function()
    local timer = manual()
    local started = hwt.now()
    assert.is_false(timer:wait())                 -- nothing pending
    timer:timeout(10, function() end)
    assert.is_false(timer:wait())                 -- pending, not due
    assert.is_false(timer:wait(30))
    for _ = 1, 3 do timer:timeout(0, function() end) end
    timer:poll(1)
    assert.is_true(timer:wait())
    assert.is_true(timer:wait(30))
    assert.is_true(timer:wait(0))
    timer:poll()
    assert.is_false(timer:wait(30))
    assert.is_true(hwt.now() - started < 15, "wait() blocked on a manual clock")
  end)

  it("wait() rejects a negative or NaN time", function()
    local timer = manual()
    error_of(timer.wait, timer, -1)
    error_of(timer.wait, timer, 0 / 0)
    error_of(timer.wait, timer, "soon")
  end)

  it("run() raises on a manual clock", function()
    local timer = manual()
    timer:timeout(1, function() end)
    local message = error_of(timer.run, timer)
    assert.is_truthy(message:find("manual", 1, true), message)
    assert.are.equal(1, timer:pending())
  end)

  it("advance() raises on a real-clock timer", function()
    local timer = hwt.new()
    local message = error_of(timer.advance, timer, 1)
    assert.is_truthy(message:find("manual", 1, true), message)
    timer:stop()
  end)

  it("advance() rejects negative, NaN, infinite and non-number amounts", function()
    local timer = manual()
    for _, bad in ipairs({ -1, -1e-9, 0 / 0, math.huge, -math.huge }) do
      error_of(timer.advance, timer, bad)
    end
    assert_raises("number expected", timer.advance, timer, "later")
    assert_raises("number expected", function() return timer:advance() end)
    assert.are.equal(0, timer:now())
  end)

  it("advance(s) is a jump then one poll: returns how many ran, in order", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    timer:timeout(0.3, task, "c")
    timer:timeout(0.1, task, "a")
    timer:timeout(0.2, task, "b")
    timer:timeout(0.4, task, "d")
    assert.are.equal(3, timer:advance(0.35))
    assert.are.same({ "a", "b", "c" }, log)
    assert.are.equal(0, timer:advance(0))
    assert.are.equal(1, timer:advance("0.05"))
    assert.are.same({ "a", "b", "c", "d" }, log)
  end)

  it("advance(0) runs what is already due", function()
    local timer = manual()
    local ran = 0
    timer:timeout(0, function() ran = ran + 1 end)
    timer:timeout(0, function() ran = ran + 1 end)
    assert.are.equal(2, timer:advance(0))
    assert.are.equal(2, ran)
  end)

  it("wait(seconds): negative/NaN name 'seconds'; huge values return at once on the manual clock", function()
    local tm = manual()
    for _, v in ipairs({ -1, 0 / 0, -math.huge, MININT, "-1" }) do
      assert_error(call.wait, pack(tm, v), "bad argument #1 to 'wait'", "seconds must be a number >= 0")
    end
    for _, v in ipairs({ "x", {}, true, print, io.stdout }) do
      assert_error(call.wait, pack(tm, v), "bad argument #1 to 'wait'", "number expected")
    end
    for _, v in ipairs({ math.huge, 1e308, 2 ^ 63, MAXINT, "5", 0 }) do
      assert.is_false(tm:wait(v))
    end
    tm:timeout(0, noop)
    assert.is_true(tm:wait(math.huge))
    tm:stop()
    assert.is_false(tm:wait())
  end)

  it("wait() on the real clock with nothing pending returns false at once; wait(tiny) too", function()
    local rt = hwt.new()
    local t0 = hwt.now()
    assert.is_false(rt:wait())
    assert.is_false(rt:wait(math.huge))
    assert.is_false(rt:wait(0))
    assert.is_false(rt:wait(1e-12))
    assert.is_false(rt:wait("0.001"))
    assert(hwt.now() - t0 < 1, "wait took too long")
    rt:stop()
  end)

  it("run(): raises on the manual clock; returns 0 at once on an idle real clock", function()
    local tm = manual()
    assert_error(tm.run, pack(tm, "ignored"), "run() would never end on a manual clock")
    tm:stop()
    local rt = hwt.new()
    assert.are.equal(0, rt:run())
    rt:stop()
    assert.are.equal(0, rt:run())
  end)

  it("advance(seconds): NaN, negative, infinite and non-numbers are named; the real clock refuses", function()
    local tm = manual()
    for _, v in ipairs({ 0 / 0, -1, -1e-300, math.huge, -math.huge, MININT, "-1", "1e999" }) do
      assert_error(call.advance, pack(tm, v), "bad argument #1 to 'advance'", "seconds must be a finite number >= 0")
    end
    local bad = pack(nil, "x", {}, true, io.stdout)
    for i = 1, bad.n do
      assert_error(call.advance, pack(tm, bad[i]), "bad argument #1 to 'advance'", "number expected")
    end
    assert.are.equal(0, tm:now())
    local rt = hwt.new()
    assert_error(call.advance, pack(rt, 1), "advance() needs a timer created with clock = \"manual\"")
    assert_error(call.advance, pack(rt, 0 / 0), "bad argument #1 to 'advance'")
    rt:stop()
    tm:stop()
  end)
end)

describe("timer:wait, poll and run on the real clock", function()
  it("fires a timeout through wait() and poll()", function()
    local t = hwt.new({ tick = 0.001 })
    local got
    local before = hwt.now()
    local to = t:timeout(0.02, function(timeout, a, b)
      got = { timeout = timeout, a = a, b = b, at = hwt.now() }
    end, "x", 42)
    assert.equals(1, t:pending())
    assert.is_true(t:wait(2))
    assert.is_nil(got)                          -- wait() does not run tasks
    assert.equals(1, t:poll())
    assert.is_table(got)
    assert.is_true(rawequal(to, got.timeout))
    assert.equals("x", got.a)
    assert.equals(42, got.b)
    assert.is_true(got.at >= before + 0.02 - EPS)
    assert.is_true(got.at <= before + 0.02 + LATE)
    assert.is_true(to:is_expired())
    assert.is_false(to:is_cancelled())
    assert.equals(0, t:pending())
    local s = t:stats()
    assert.equals(1, s.fired)
    assert.equals(0, s.due)
    assert.equals(0, s.pending)
    t:stop()
  end)

  it("run() returns how many ran and ends when nothing is pending", function()
    local t = hwt.new({ tick = 0.001 })
    local log = {}
    local before = hwt.now()
    t:timeout(0.03, function() log[#log + 1] = "c" end)
    t:timeout(0.01, function(to)
      log[#log + 1] = "a"
      to:timer():timeout(0.01, function() log[#log + 1] = "a2" end)
    end)
    t:timeout(0.02, function() log[#log + 1] = "b" end)
    assert.equals(4, t:run())
    assert.equals(0, t:pending())
    assert.equals(4, #log)
    local pos = {}
    for i, name in ipairs(log) do pos[name] = i end
    assert.is_true(pos.a < pos.b and pos.b < pos.c and pos.a < pos.a2)
    assert.is_true(hwt.now() >= before + 0.03 - EPS)
    -- nothing pending: returns 0 at once
    local t0 = hwt.now()
    assert.equals(0, t:run())
    assert.is_true(hwt.now() - t0 < LATE)
    t:stop()
  end)

  it("wait(s) returns false after s seconds when nothing is due", function()
    local t = hwt.new({ tick = 0.001 })
    local far = t:timeout(10, function() end)
    local t0 = hwt.now()
    assert.is_false(t:wait(0.05))
    local elapsed = hwt.now() - t0
    assert.is_true(elapsed >= 0.05 - 1e-6, "returned after " .. elapsed)
    assert.is_true(elapsed <= 0.05 + LATE, "returned after " .. elapsed)
    far:cancel()
    -- nothing pending at all: wait(s) sleeps s seconds
    t0 = hwt.now()
    assert.is_false(t:wait(0.05))
    elapsed = hwt.now() - t0
    assert.is_true(elapsed >= 0.05 - 1e-6, "returned after " .. elapsed)
    assert.is_true(elapsed <= 0.05 + LATE, "returned after " .. elapsed)
    -- nothing pending and no limit: returns false at once
    t0 = hwt.now()
    assert.is_false(t:wait())
    assert.is_true(hwt.now() - t0 < LATE)
    t:stop()
  end)

  it("wait() returns true as soon as something is due", function()
    local t = hwt.new({ tick = 0.001 })
    local before = hwt.now()
    t:timeout(0.03, function() end)
    assert.is_true(t:wait())
    local elapsed = hwt.now() - before
    assert.is_true(elapsed >= 0.03 - EPS, "returned after " .. elapsed)
    assert.is_true(elapsed <= 0.03 + LATE, "returned after " .. elapsed)
    assert.equals(1, t:stats().due)
    -- still due: returns true at once
    local t0 = hwt.now()
    assert.is_true(t:wait(5))
    assert.is_true(hwt.now() - t0 < LATE)
    assert.equals(1, t:poll())
    -- a limit longer than the delay: returns true early
    before = hwt.now()
    t:timeout(0.03, function() end)
    assert.is_true(t:wait(5))
    elapsed = hwt.now() - before
    assert.is_true(elapsed >= 0.03 - EPS and elapsed <= 0.03 + LATE, "returned after " .. elapsed)
    t:stop()
  end)
end)

describe("wait() when nothing can ever become due", function()
  it("returns false when the only pending timeout is never due (math.huge)", function()
    local out, killed = run_isolated([[
      local hwt = require("hwt")
      local tm = hwt.new()
      tm:timeout(math.huge, function() end)
      io.write("wait returned ", tostring(tm:wait()), "\n")
      tm:stop()
    ]], 3)
    assert(not killed and out:find("wait returned false", 1, true),
      "wait() blocked for ever with only a never-due timeout pending:\n" .. out)
  end)

  it("returns inside a periodic task whose own next run is the only thing pending", function()
    local out, killed = run_isolated([[
      local hwt = require("hwt")
      local tm = hwt.new({ tick = 0.001 })
      tm:every(0.001, function(t)
        io.write("wait returned ", tostring(tm:wait()), "\n")
        t:cancel()
      end)
      tm:wait(1)
      tm:poll()
      tm:stop()
    ]], 3)
    assert(not killed and out:find("wait returned", 1, true),
      "wait() inside the periodic task blocked for ever:\n" .. out)
  end)
end)

describe("timer:run_for() (manual clock)", function()
  it("runs each task with timer:now() at its own deadline, in order, and returns the count", function()
    local timer = manual({ tick = 0.01 })
    local seen = {}
    local expected = {}
    local function task(t, label)
      seen[#seen + 1] = { label, timer:now(), t:deadline() }
    end
    local a = timer:timeout(3, task, "a")
    local b = timer:timeout(0.5, task, "b")
    local c = timer:timeout(1.25, task, "c")
    local d = timer:timeout(0.123456, task, "d")
    expected = { { "d", d:deadline() }, { "b", 0.5 }, { "c", 1.25 }, { "a", 3 } }
    local late = timer:timeout(4.5, task, "late")
    assert.are.equal(4, timer:run_for(4))
    assert.are.equal(4, #seen)
    for i, e in ipairs(expected) do
      assert.are.equal(e[1], seen[i][1])
      assert.are.equal(e[2], seen[i][2], ("%s ran with now() = %.17g, deadline %.17g"):format(e[1], seen[i][2], e[2]))
    end
    assert_close(0.123456, seen[1][2], 1e-9, "now() in d")
    assert.are.equal(4, timer:now())
    assert.are.equal(1, timer:pending())
    assert.is_false(late:is_expired())
    assert.is_true(a:is_expired() and b:is_expired() and c:is_expired())
    timer:stop()
  end)

  it("ends with the clock at start + seconds", function()
    local timer = manual()
    timer:advance(0.25)
    assert.are.equal(0, timer:run_for(1.5))
    assert.are.equal(1.75, timer:now())
    timer:timeout(100, noop)
    assert.are.equal(0, timer:run_for(2))
    assert.are.equal(3.75, timer:now())
    timer:stop()
  end)

  it("runs timeouts due exactly at the end of the window, not those after it", function()
    local timer = manual({ tick = 1 / 60 })
    local log, task = logger()
    timer:timeout(2, task, "at end")
    timer:timeout(2.0000001, task, "after")
    assert.are.equal(1, timer:run_for(2))
    assert.are.same({ "at end" }, log)
    assert.are.equal(2, timer:now())
    timer:stop()
  end)

  it("runs a chain of tasks that schedule more within the window, each at its own deadline", function()
    local timer = manual({ tick = 0.1 })
    local times = {}
    local function step()
      times[#times + 1] = timer:now()
      if #times < 10 then timer:timeout(0.25, step) end
    end
    timer:timeout(0.25, step)
    assert.are.equal(10, timer:run_for(5))
    assert.are.equal(10, #times)
    for k = 1, 10 do
      assert.are.equal(0.25 * k, times[k], ("step %d at %.17g"):format(k, times[k]))
    end
    assert.are.equal(5, timer:now())
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("a chain whose delays grow (a retry pattern) runs whole within the window", function()
    local timer = manual({ tick = 0.01 })
    local times, wait = {}, 0.125
    local function try()
      times[#times + 1] = timer:now()
      if #times < 6 then
        timer:timeout(wait, try)
        wait = wait * 2
      end
    end
    timer:timeout(0, try)
    assert.are.equal(6, timer:run_for(10))
    -- 0, 0.125, 0.375, 0.875, 1.875, 3.875
    assert.are.same({ 0, 0.125, 0.375, 0.875, 1.875, 3.875 }, times)
    timer:stop()
  end)

  it("a periodic runs once per beat: every(1) over run_for(10.5) runs 10 times at 1..10", function()
    local timer = manual()
    local times = {}
    local e = timer:every(1, function() times[#times + 1] = timer:now() end)
    assert.are.equal(10, timer:run_for(10.5))
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, times)
    assert.are.equal(10.5, timer:now())
    assert.are.equal(11, e:deadline())
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("a periodic after an advance() jump continues beat by beat in run_for()", function()
    local timer = manual()
    local times = {}
    timer:every(1, function() times[#times + 1] = timer:now() end)
    assert.are.equal(1, timer:advance(2.5))      -- a jump: one run
    assert.are.equal(2, timer:run_for(2))        -- beats 3 and 4
    assert.are.same({ 2.5, 3, 4 }, times)
    timer:stop()
  end)

  it("interleaves periodics and one-shots by deadline, equal deadlines in scheduling order", function()
    local timer = manual()
    local log = {}
    local function at(label) return function() log[#log + 1] = ("%s%g"):format(label, timer:now()) end end
    timer:every(0.5, at("p"))
    timer:timeout(1, at("o"))
    timer:timeout(0.75, at("q"))
    assert.are.equal(4, timer:run_for(1))
    -- the beat at 1 was armed (after the run at 0.5) later than the one-shot at 1: it runs after it
    assert.are.same({ "p0.5", "q0.75", "o1", "p1" }, log)
    timer:stop()
  end)

  it("run_for(0) runs what is due now and what that schedules at the same instant", function()
    local timer = manual()
    local log = {}
    timer:advance(0.5)
    timer:timeout(0, function()
      log[#log + 1] = "a"
      timer:timeout(0, function()
        log[#log + 1] = "b"
        timer:timeout(0, function() log[#log + 1] = "c" end)
      end)
    end)
    timer:timeout(0.25, function() log[#log + 1] = "later" end)
    assert.are.equal(3, timer:run_for(0))
    assert.are.same({ "a", "b", "c" }, log)
    assert.are.equal(0.5, timer:now())
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("runs hundreds of passes at one instant (a task re-arming itself with delay 0, 500 times)", function()
    local timer = manual()
    local runs = 0
    local function again()
      runs = runs + 1
      if runs < 500 then timer:timeout(0, again) end
    end
    timer:timeout(0, again)
    assert.are.equal(500, timer:run_for(1))
    assert.are.equal(500, runs)
    timer:stop()
  end)

  it("raises after more than 1,000 passes at one instant (a task that re-schedules itself with delay 0)", function()
    local timer = manual()
    local runs = 0
    local function again()
      runs = runs + 1
      if runs < 100000 then timer:timeout(0, again) end
    end
    timer:timeout(0, again)
    local ok, err = pcall(timer.run_for, timer, 1)
    assert.is_false(ok, "run_for did not raise")
    assert.is_not_nil(err)
    assert.is_true(runs >= 1000 and runs < 100000, "runs: " .. runs)
    timer:stop()
  end)

  it("counts the passes per instant: 600 at t = 1 and 600 at t = 2 in one run_for() are fine", function()
    local timer = manual()
    local runs = 0
    local function chain(left)
      return function()
        runs = runs + 1
        if left > 1 then timer:timeout(0, chain(left - 1)) end
      end
    end
    timer:timeout(1, chain(600))
    timer:timeout(2, chain(600))
    assert.are.equal(1200, timer:run_for(3))
    assert.are.equal(1200, runs)
    timer:stop()
  end)

  it("the same with reset(0) inside the task", function()
    local timer = manual()
    local runs = 0
    timer:timeout(0, function(t)
      runs = runs + 1
      if runs < 100000 then assert(t:reset(0)) end
    end)
    assert.is_false((pcall(timer.run_for, timer, 1)))
    assert.is_true(runs >= 1000 and runs < 100000, "runs: " .. runs)
    timer:stop()
  end)

  it("many timeouts due at one instant are one pass, not many (5,000 at t = 1)", function()
    local timer = manual()
    local runs = 0
    for _ = 1, 5000 do timer:timeout(1, function() runs = runs + 1 end) end
    assert.are.equal(5000, timer:run_for(2))
    assert.are.equal(5000, runs)
    timer:stop()
  end)

  it("thousands of beats at distinct instants are fine: every(0.001) over run_for(2) runs 2000 times", function()
    -- (0.001 s is a whole number of nanoseconds: the README rounds delays to the nearest ns)
    local timer = manual()
    local runs, bad = 0, nil
    timer:every(0.001, function()
      runs = runs + 1
      if not close_to(runs / 1000, timer:now(), 1e-12) and not bad then
        bad = ("run %d at %.17g"):format(runs, timer:now())
      end
    end)
    assert.are.equal(2000, timer:run_for(2))
    assert.is_nil(bad, bad)
    assert.are.equal(2000, runs)
    timer:stop()
  end)

  it("a task that resets a later timeout into the window makes it run at its new deadline", function()
    local timer = manual()
    local log = {}
    local b = timer:timeout(5, function() log[#log + 1] = ("b%g"):format(timer:now()) end)
    timer:timeout(1, function()
      log[#log + 1] = ("a%g"):format(timer:now())
      assert(b:reset(0.5))
    end)
    assert.are.equal(2, timer:run_for(2))
    assert.are.same({ "a1", "b1.5" }, log)
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("a task that cancels a sibling due at the same instant wins (the sibling never runs)", function()
    local timer = manual()
    local log = {}
    local b
    timer:timeout(1, function() log[#log + 1] = "a"; assert.is_true(b:cancel()) end)
    b = timer:timeout(1, function() log[#log + 1] = "b" end)
    assert.are.equal(1, timer:run_for(2))
    assert.are.same({ "a" }, log)
    timer:stop()
  end)

  it("run_for(0) with nothing due runs nothing and leaves the clock", function()
    local timer = manual()
    timer:advance(0.5)
    timer:timeout(0.25, noop)
    assert.are.equal(0, timer:run_for(0))
    assert.are.equal(0.5, timer:now())
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("returns 0 on a stopped timer", function()
    local timer = manual()
    local ran = false
    timer:timeout(1, function() ran = true end)
    timer:stop()
    assert.are.equal(0, timer:run_for(5))
    assert.is_false(ran)
  end)

  it("a task that stops the timer ends the run", function()
    local timer = manual()
    local log, task = logger()
    timer:timeout(1, function() log[#log + 1] = "stop"; timer:stop() end)
    timer:timeout(2, task, "after")
    local ran = timer:run_for(5)
    assert.are.equal(1, ran)
    assert.are.same({ "stop" }, log)
  end)

  it("raises on a negative, NaN or non-number argument", function()
    local timer = manual()
    assert.is_function(timer.run_for)
    local ran = false
    timer:timeout(0, function() ran = true end)
    for _, bad in ipairs({ -1, -1e-9, -math.huge, 0 / 0 }) do
      error_of(timer.run_for, timer, bad)
    end
    for _, bad in ipairs({ "abc", {}, true }) do
      error_of(timer.run_for, timer, bad)
    end
    error_of(timer.run_for, timer)
    assert.is_false(ran)
    assert.are.equal(0, timer:now())
    timer:stop()
  end)

  it("a task's error goes to on_error and the run goes on", function()
    local errors = {}
    local timer = manual({ on_error = function(err) errors[#errors + 1] = err end })
    local log, task = logger()
    timer:timeout(1, function() error("boom", 0) end)
    timer:timeout(2, task, "two")
    assert.are.equal(2, timer:run_for(3))
    assert.are.same({ "boom" }, errors)
    assert.are.same({ "two" }, log)
    timer:stop()
  end)
end)

describe("timer:run_for() (real clock)", function()
  it("returns after about `seconds` when nothing is pending", function()
    local timer = hwt.new({ tick = 0.001 })
    local t0 = hwt.now()
    assert.are.equal(0, timer:run_for(0.1))
    local elapsed = hwt.now() - t0
    assert.is_true(elapsed >= 0.099 and elapsed < 1, "took " .. elapsed)
    timer:stop()
  end)

  it("runs what falls due within it, and not what falls due after it", function()
    local timer = hwt.new({ tick = 0.001 })
    local log, task = logger()
    timer:timeout(0.02, task, "a")
    timer:timeout(0.05, task, "b")
    timer:timeout(5, task, "late")
    local t0 = hwt.now()
    assert.are.equal(2, timer:run_for(0.15))
    local elapsed = hwt.now() - t0
    assert.are.same({ "a", "b" }, log)
    assert.is_true(elapsed >= 0.149 and elapsed < 1.5, "took " .. elapsed)
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("runs a periodic each beat", function()
    local timer = hwt.new({ tick = 0.001 })
    local runs = 0
    timer:every(0.02, function() runs = runs + 1 end)
    local n = timer:run_for(0.2)
    assert.are.equal(runs, n)
    assert.is_true(runs >= 3 and runs <= 10, "runs: " .. runs)
    timer:stop()
  end)

  it("returns early when a task stops the timer", function()
    local timer = hwt.new({ tick = 0.001 })
    timer:timeout(0.02, function() timer:stop() end)
    local t0 = hwt.now()
    assert.are.equal(1, timer:run_for(5))
    assert.is_true(hwt.now() - t0 < 2, "did not return early")
  end)

  it("run_for(math.huge) runs until a task stops the timer", function()
    local timer = hwt.new({ tick = 0.001 })
    local runs = 0
    timer:every(0.01, function()
      runs = runs + 1
      if runs == 3 then timer:stop() end
    end)
    local t0 = hwt.now()
    assert.are.equal(3, timer:run_for(math.huge))
    assert.is_true(hwt.now() - t0 < 2)
  end)

  it("returns 0 at once on a stopped timer", function()
    local timer = hwt.new()
    timer:stop()
    local t0 = hwt.now()
    assert.are.equal(0, timer:run_for(5))
    assert.is_true(hwt.now() - t0 < 1)
  end)

  it("raises on a negative or NaN argument", function()
    local timer = hwt.new()
    assert.is_function(timer.run_for)
    error_of(timer.run_for, timer, -1)
    error_of(timer.run_for, timer, 0 / 0)
    error_of(timer.run_for, timer, "abc")
    timer:stop()
  end)
end)

describe("timer:fd", function()
  it("is an integer >= 0, the same on every call, distinct per timer", function()
    local a, b = manual(), manual()
    local fd = a:fd()
    assert.is_true(compat.is_integer(fd), "fd: an integer")
    assert.is_true(fd >= 0)
    assert.are.equal(fd, a:fd())
    assert.are_not.equal(fd, b:fd())
  end)

  it("is readable exactly while due tasks wait for poll()", function()
    local timer = manual()
    assert.is_false(fd_readable(timer))
    timer:timeout(10, function() end)
    assert.is_false(fd_readable(timer))          -- pending, not due
    for _ = 1, 3 do timer:timeout(0, function() end) end
    assert.are.equal(1, timer:poll(1))
    assert.are.equal(2, timer:stats().due)
    assert.is_true(fd_readable(timer))
    assert.are.equal(1, timer:poll(1))
    assert.is_true(fd_readable(timer))
    assert.are.equal(1, timer:poll())
    assert.is_false(fd_readable(timer))
    -- becomes readable when a task scheduled inside a poll is left due
    timer:timeout(0, function() timer:timeout(0, function() end) end)
    timer:poll()
    assert.are.equal(1, timer:stats().due)
    assert.is_true(fd_readable(timer))
    timer:poll()
    assert.is_false(fd_readable(timer))
  end)

  it("stops being readable when the last due timeout is cancelled or the timer stops", function()
    local timer = manual()
    local a = timer:timeout(0, function() end)
    timer:stats()                                 -- not a poll: a stays due
    assert.is_true(fd_readable(timer))
    assert.is_true(a:cancel())
    assert.is_false(fd_readable(timer))
    timer:timeout(0, function() end)
    timer:timeout(0, function() end)
    timer:poll(1)
    assert.is_true(fd_readable(timer))
    local stopped = timer:stop()
    assert.are.equal(1, #stopped)
    assert.is_false(fd_readable(timer))
  end)

  it("makes fd() readable when the worker moves a timeout to the due queue, and clears it on poll()", function()
    local t = hwt.new({ tick = 0.001 })
    local fd = t:fd()
    assert.is_true(compat.is_integer(fd) and fd >= 0)
    assert.equals(0, eventfd_count(fd))
    t:timeout(0.03, function() end)
    t:timeout(0.03, function() end)
    assert.equals(0, eventfd_count(fd))       -- not due yet
    sleep(0.2)                                -- no call on t: only the worker moves time
    assert.is_true(eventfd_count(fd) > 0)
    assert.equals(2, t:stats().due)
    assert.equals(1, t:poll(1))
    assert.is_true(eventfd_count(fd) > 0)     -- one still due
    assert.equals(1, t:poll())
    assert.equals(0, eventfd_count(fd))
    assert.equals(fd, t:fd())                 -- the same descriptor throughout
    t:stop()
  end)
end)

describe("garbage of draining calls", function()
  local CALLS = 2000

  -- A poll that made objects of its own for each task would leave a few
  -- hundred bytes of garbage per call (160 B on 5.4, 261 B on LuaJIT); it
  -- reuses its drain, and must stay below this.
  local MOST_BYTES_PER_CALL = 16

  -- Bytes the Lua heap grew per call(), over CALLS calls, with the collector
  -- stopped. A first round sizes what is reused (the anchor table, the free
  -- slot list); one call before counting regrows the stack the collection
  -- shrank. call() must not raise or allocate when all is well (no luassert).
  local function bytes_per_call(prepare, call)
    local grown
    for _ = 1, 2 do
      prepare()
      collectgarbage()
      collectgarbage("stop")
      call()
      local before = collectgarbage("count")
      for _ = 1, CALLS do call() end
      grown = (collectgarbage("count") - before) * 1024 / CALLS
      collectgarbage("restart")
    end
    return grown
  end

  local function expect(ran, wanted, what)
    if ran ~= wanted then error(("%s ran %s tasks, expected %d"):format(what, tostring(ran), wanted)) end
  end

  it("advance() running one task makes none of its own", function()
    local timer = manual()
    local function task() end
    local grown = bytes_per_call(function()
      for i = 1, CALLS + 1 do timer:timeout(i * 0.001, task) end
    end, function() expect(timer:advance(0.001), 1, "advance") end)
    assert.are.equal(0, timer:pending())
    assert.is_true(grown < MOST_BYTES_PER_CALL, ("%.1f bytes per advance()"):format(grown))
  end)

  it("poll() running one task makes none of its own (the timeout re-armed by reset)", function()
    local timer = manual()
    local ran = 0
    timer:timeout(0, function(t)
      ran = ran + 1
      t:reset(0)
    end)
    local grown = bytes_per_call(function() end, function()
      expect(timer:poll(), 1, "poll")
    end)
    assert.are.equal(2 * (CALLS + 1), ran)
    assert.is_true(grown < MOST_BYTES_PER_CALL, ("%.1f bytes per reset() + poll()"):format(grown))
  end)
end)

describe("the dispatch", function()
  it("is the FFI path on LuaJIT, the classic take elsewhere", function()
    assert.are.equal(jit ~= nil, core.internal.ffi_abi ~= nil)
    assert.are.equal(jit == nil, core.internal.take ~= nil)
  end)

  it("calls each task with its own Timeout and exactly its arguments", function()
    local timer = manual()
    local seen, handles = {}, {}
    local function record(id)
      return function(t, ...) seen[id] = { t = t, n = select("#", ...), ... } end
    end
    handles[1] = timer:timeout(0.001, record(1))
    handles[2] = timer:timeout(0.001, record(2), "a")
    handles[3] = timer:timeout(0.001, record(3), nil)
    handles[4] = timer:timeout(0.001, record(4), "a", nil)
    handles[5] = timer:timeout(0.001, record(5), nil, "b")
    handles[6] = timer:timeout(0.001, record(6), 1, 2, 3)
    local timer_task = { run = function(self, t, a) seen[7] = { t = t, n = 1, a, self = self } end }
    handles[7] = timer:timeout(0.001, timer_task, "r")
    assert.are.equal(7, timer:advance(0.001))
    for id = 1, 7 do assert.are.equal(handles[id], seen[id].t) end
    assert.are.same({ 0, 1, 1, 2, 2, 3 }, { seen[1].n, seen[2].n, seen[3].n, seen[4].n, seen[5].n, seen[6].n })
    assert.are.same({ "a" }, { seen[2][1] })
    assert.is_nil(seen[3][1])
    assert.are.same({ "a", nil }, { seen[4][1], seen[4][2] })
    assert.are.same({ nil, "b" }, { seen[5][1], seen[5][2] })
    assert.are.same({ 1, 2, 3 }, { seen[6][1], seen[6][2], seen[6][3] })
    assert.are.equal("r", seen[7][1])
    assert.are.equal(timer_task, seen[7].self)
  end)

  it("keeps a timeout whose handle was dropped, whatever its task's shape, until it runs", function()
    local timer = manual()
    local seen = {}
    local function record(id)
      return function(t, ...) seen[id] = { t = t, n = select("#", ...), ... } end
    end
    local weak = setmetatable({}, { __mode = "v" })
    weak[1] = timer:timeout(0.001, record(1))
    weak[2] = timer:timeout(0.001, record(2), "a")
    weak[3] = timer:timeout(0.001, record(3), "a", "b")
    weak[4] = timer:timeout(0.001, record(4), "a", "b", "c")
    weak[5] = timer:timeout(0.001, { run = function(_, t, ...) seen[5] = { t = t, n = select("#", ...), ... } end }, "a")
    collectgarbage()
    collectgarbage()
    for id = 1, 5 do assert.is_not_nil(weak[id]) end
    assert.are.equal(5, timer:advance(0.001))
    for id = 1, 5 do assert.is_true(rawequal(weak[id], seen[id].t)) end
    assert.are.same({ 0, 1, 2, 3, 1 }, { seen[1].n, seen[2].n, seen[3].n, seen[4].n, seen[5].n })
    assert.are.same({ "a", "b", "c" }, { seen[4][1], seen[4][2], seen[4][3] })
    assert.are.same({ "a", "b" }, { seen[3][1], seen[3][2] })
    assert.are.same({ "a", "a" }, { seen[2][1], seen[5][1] })
    seen = nil
    assert.are.equal(5, count_collected(weak, 5))
  end)

  it("never takes a task that is a userdata for a Timeout", function()
    local timer = manual()
    local ran = 0
    local handles = {}
    for i = 1, 6 do
      local task = i % 2 == 0 and function() ran = ran + 1 end or callable_userdata(function() ran = ran + 1 end)
      handles[i] = timer:timeout(i, task)
    end
    assert.are.equal(6, #timer:timeouts())
    for _, t in ipairs(timer:timeouts()) do assert.are.equal(getmetatable(handles[1]), getmetatable(t)) end
    assert.are.equal(2, timer:advance(2))
    local never_ran = timer:stop()
    assert.are.equal(4, #never_ran)
    for i, t in ipairs(never_ran) do assert.are.equal(handles[i + 2], t) end
    assert.are.equal(2, ran)
  end)

  it("gives back each Timeout itself, whatever its task's shape", function()
    local timer = manual()
    local tasks = {
      function() end,                                   -- the Timeout alone
      callable_userdata(function() end),
      { function() end, "a" },                          -- one argument
      { function() end, "a", "b" },                     -- two
      { function() end, "a", "b", "c" },                -- more
      { { run = function() end }, "r" },                -- a TimerTask
    }
    local handles = {}
    for i, task in ipairs(tasks) do
      if type(task) == "table" and task[2] then
        handles[i] = timer:timeout(i, task[1], compat.unpack(task, 2))
      else
        handles[i] = timer:timeout(i, task)
      end
    end
    local listed = timer:timeouts()
    assert.are.equal(#tasks, #listed)
    for i = 1, #tasks do assert.is_true(rawequal(handles[i], listed[i])) end
    assert.are.equal(1, timer:advance(1))
    if support.cdata_timeouts then                      -- an ended one cannot be reset there
      support.reset_of_ended_raises(handles[1])
      for i = 2, #tasks do handles[i]:cancel() end
      for i = 2, #tasks do support.reset_of_ended_raises(handles[i]) end
      return
    end
    for i = 1, #tasks do assert.is_true(handles[i]:reset(#tasks + i)) end  -- anchored again
    local never_ran = timer:stop()
    assert.are.equal(#tasks, #never_ran)
    for i = 1, #tasks do assert.is_true(rawequal(handles[i], never_ran[i])) end
  end)

  it("reuses the slots it lets go within a drain without mixing calls up", function()
    local timer = manual()
    local x = 12345
    local function random(n)
      x = (x * 48271) % 2147483647
      return x % n + 1
    end
    local handle_of, payload_of, runs, cancelled, wrong = {}, {}, {}, {}, 0
    local next_id = 0
    local schedule
    local function task(t, id, payload)
      runs[id] = (runs[id] or 0) + 1
      if handle_of[id] ~= t or payload_of[id] ~= payload then wrong = wrong + 1 end
      handle_of[id] = nil
      local action = random(4)
      if action == 1 then
        schedule(random(3) * 0.001)
      elseif action == 2 then
        local victim = next(handle_of)
        if victim and handle_of[victim]:cancel() then
          handle_of[victim], cancelled[victim] = nil, true
        end
      elseif action == 3 then
        local other = next(handle_of)
        if other then assert(handle_of[other]:reset(random(3) * 0.001)) end
      end
    end
    schedule = function(delay)
      next_id = next_id + 1
      local id, payload = next_id, {}
      payload_of[id] = payload
      if id % 3 == 0 then
        handle_of[id] = timer:timeout(delay, function(t) task(t, id, payload) end)
      else
        handle_of[id] = timer:timeout(delay, task, id, payload)
      end
    end
    for _ = 1, 200 do
      for _ = 1, random(20) do schedule(random(3) * 0.001) end
      if random(2) == 1 then timer:advance(0.001) else timer:poll(random(5)) end
    end
    while timer:pending() > 0 do timer:advance(0.001) end
    assert.are.equal(0, wrong)
    for id = 1, next_id do
      assert.are.equal(cancelled[id] and 0 or 1, runs[id] or 0)
    end
    assert.is_nil(next(handle_of))
    assert.are.equal(0, #timer:timeouts())
  end)

  -- A poll reads the anchors of the timeouts due next in batches, before
  -- their takes: what it read may be cancelled, re-armed or let go first.
  it("runs a long poll in order while its tasks cancel, re-arm and let go of the ones due next", function()
    local timer = manual()
    local n = 60
    local ran, handles = {}, {}
    local function record(t, id)
      assert.are.equal(handles[id], t)
      ran[#ran + 1] = id
      if id % 5 == 0 and handles[id + 2] then handles[id + 2]:cancel() end
      if id % 7 == 0 and handles[id + 3] then assert(handles[id + 3]:reset(1)) end
      handles[id] = nil
      collectgarbage()
    end
    local function task_of(id)
      local shape = id % 4
      if shape == 0 then return function(t) record(t, id) end end
      if shape == 1 then return record, id end
      if shape == 2 then return function(t, a, b) record(t, a + b) end, id - 1, 1 end
      return { run = function(_, t, a, b, c) record(t, a + b + c) end }, id, 0, 0
    end
    for id = 1, n do handles[id] = timer:timeout(0.001, task_of(id)) end
    local expected, skipped = {}, {}
    for id = 1, n do
      if not skipped[id] then
        expected[#expected + 1] = id
        if id % 5 == 0 then skipped[id + 2] = true end     -- cancelled
        if id % 7 == 0 then skipped[id + 3] = true end     -- re-armed for later
      end
    end
    assert.are.equal(#expected, timer:advance(0.001))
    assert.are.same(expected, ran)
  end)

  it("lets what ran or was cancelled be collected", function()
    local timer = manual()
    local n = 300
    local weak = setmetatable({}, { __mode = "v" })
    local handles = {}
    for i = 1, n do
      local payload = {}
      weak[i] = payload
      if i % 2 == 0 then
        handles[i] = timer:timeout(i % 3 == 0 and 0.001 or 1, function() return payload end)
      else
        handles[i] = timer:timeout(i % 3 == 0 and 0.001 or 1, function() end, payload)
      end
    end
    assert.are.equal(0, count_collected(weak, n))
    local ran = timer:advance(0.001)
    for i = 1, n do
      if i % 3 ~= 0 then assert.is_true(handles[i]:cancel()) end
    end
    assert.are.equal(n / 3, ran)
    handles = nil
    assert.are.equal(n, count_collected(weak, n))
    assert.are.equal(0, timer:pending())
  end)

  it("runs the tasks after one that raises with their own Timeouts", function()
    local errors = {}
    local timer = manual({ on_error = function(err, t) errors[#errors + 1] = { err, t } end })
    local got, handles = {}, {}
    for i = 1, 30 do
      handles[i] = timer:timeout(0.001, function(t, id)
        got[id] = t
        if id % 3 == 0 then error("task " .. id, 0) end
      end, i)
    end
    assert.are.equal(30, timer:advance(0.001))
    for i = 1, 30 do assert.are.equal(handles[i], got[i]) end
    assert.are.equal(10, #errors)
    for k, e in ipairs(errors) do
      assert.are.equal("task " .. 3 * k, e[1])
      assert.are.equal(handles[3 * k], e[2])
    end
    assert.are.equal(0, #timer:timeouts())
  end)

  -- Only where tasks may yield: PUC 5.1 cannot suspend a task (yield_spec
  -- checks that the yield is then the task's error).
  if not compat.tasks_yield then return end

  it("finishes the task of a drain whose coroutine was dropped, and runs the rest later", function()
    local timer = manual()
    local weak, ran = setmetatable({}, { __mode = "v" }), {}
    for id = 1, 10 do
      local payload = {}
      weak[id] = payload
      timer:timeout(0.001, function(_, p)
        ran[#ran + 1] = id
        if p == weak[5] then coroutine.yield() end
      end, payload)
    end
    local co = coroutine.create(function() timer:advance(0.001) end)
    assert.is_true(coroutine.resume(co))
    assert.are.equal("suspended", coroutine.status(co))
    co = nil
    assert.are.equal(5, count_collected(weak, 10))
    for id = 11, 20 do timer:timeout(0.001, function() ran[#ran + 1] = id end) end
    assert.are.equal(15, timer:advance(0.001))
    for id = 1, 20 do assert.are.equal(id, ran[id]) end
    assert.are.equal(10, count_collected(weak, 10))
  end)
end)
