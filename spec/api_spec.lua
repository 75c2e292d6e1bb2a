-- api_spec.lua: the contract of /work/shared/API.md, checked on the manual
-- clock (time moves only by timer:advance(), so every check is exact).
-- Real-clock, thread and helper (sleep/retry) specs live in other files.
local hwt = require("hwt")
local compat = require("compat")

local support = require("support")

local unpack = compat.unpack
local manual, error_of, assert_raises = support.manual, support.error_of, support.assert_raises
local has_text, fd_readable = support.has_text, support.fd_readable
local logger, ns, child_output = support.logger, support.ns, support.child_output

-- ---- module -----------------------------------------------------------------

describe("module hwt", function()
  it("has _VERSION 'hwt 0.2.0'", function()
    assert.are.equal("hwt 0.2.0", hwt._VERSION)
  end)

  it("now() is a monotonic float clock in seconds, never decreasing", function()
    local previous = hwt.now()
    assert.is_true(compat.is_float(previous), "a float")
    assert.is_true(previous >= 0)
    for _ = 1, 2000 do
      local t = hwt.now()
      assert.is_true(compat.is_float(t), "a float")
      assert.is_true(t >= previous, "hwt.now() went backwards")
      previous = t
    end
  end)

  it("exposes new() and names its userdata hwt.Timer and hwt.Timeout", function()
    assert.are.equal("function", type(hwt.new))
    local timer = manual()
    assert.are.equal("userdata", type(timer))
    assert.are.equal("hwt.Timer", getmetatable(timer))
    assert.are.equal("hwt.Timer", tostring(timer):sub(1, 9))
    local t = timer:timeout(1, function() end)
    assert.are.equal("userdata", type(t))
    assert.are.equal("hwt.Timeout", getmetatable(t))
    timer:stop()
    assert.are.equal("hwt.Timer", tostring(timer):sub(1, 9))
  end)
end)

-- ---- options ------------------------------------------------------------------

describe("hwt.new options", function()
  it("has the documented defaults and accepts nil or an empty table", function()
    for _, timer in ipairs({ hwt.new(), hwt.new(nil), hwt.new({}) }) do
      local s = timer:stats()
      assert.are.equal(0.01, s.tick)
      assert.are.equal(512, s.wheel_size)
      assert.are.equal(0, s.max_pending)
      assert.are.equal("monotonic", s.clock)
      assert.is_false(s.stopped)
      assert.are.equal(0, timer:pending())
      assert.are.same({}, timer:stop())
    end
  end)

  it("rejects a non-table argument", function()
    assert.is_truthy(error_of(hwt.new, "tick"):find("table expected", 1, true))
    assert.is_truthy(error_of(hwt.new, 0.01):find("table expected", 1, true))
  end)

  it("tick: accepts numbers >= 1e-6 (and numeric strings)", function()
    assert.are.equal(1e-6, manual({ tick = 1e-6 }):stats().tick)
    assert.are.equal(0.5, manual({ tick = 0.5 }):stats().tick)
    assert.are.equal(0.02, manual({ tick = "0.02" }):stats().tick)
    assert.are.equal(2, manual({ tick = 2 }):stats().tick)
  end)

  it("tick: rejects 0, negatives, < 1e-6, NaN and non-numbers, naming the option", function()
    for _, bad in ipairs({ 0, -1, -0.01, 1e-7, 0.5e-6, 0 / 0, "abc", true, {} }) do
      local message = assert_raises("bad option 'tick' to 'new'", manual, { tick = bad })
      assert.is_truthy(message:find("tick", 1, true))
    end
  end)

  it("wheel_size: an integer in [1, 2^30], rounded up to a power of two", function()
    local cases = { [1] = 1, [2] = 2, [3] = 4, [5] = 8, [512] = 512, [513] = 1024, [1000] = 1024 }
    for size, rounded in pairs(cases) do
      assert.are.equal(rounded, manual({ wheel_size = size }):stats().wheel_size)
    end
    assert.are.equal(16, manual({ wheel_size = "16" }):stats().wheel_size)
    assert.are.equal(64, manual({ wheel_size = 64.0 }):stats().wheel_size)
  end)

  it("wheel_size: rejects 0, negatives, fractions, > 2^30 and non-numbers", function()
    for _, bad in ipairs({ 0, -1, 1.5, 2 ^ 30 + 1, 2 ^ 40, math.huge, 0 / 0, "x", false }) do
      assert_raises("bad option 'wheel_size' to 'new'", manual, { wheel_size = bad })
    end
  end)

  it("max_pending: an integer >= 0 (0 = unlimited)", function()
    assert.are.equal(0, manual({ max_pending = 0 }):stats().max_pending)
    assert.are.equal(5, manual({ max_pending = 5 }):stats().max_pending)
    assert.are.equal(7, manual({ max_pending = "7" }):stats().max_pending)
    local unlimited = manual({ max_pending = 0 })
    for i = 1, 1000 do assert.is_not_nil(unlimited:timeout(i, function() end)) end
    assert.are.equal(1000, unlimited:pending())
  end)

  it("max_pending: any integer >= 0 is accepted and reported as given, even beyond 32 bits", function()
    for _, big in ipairs({ 2 ^ 31, 2 ^ 40, compat.maxinteger }) do
      local ok, timer = pcall(manual, { max_pending = big })
      assert.is_true(ok, tostring(timer))
      assert.are.equal(compat.tointeger(big), timer:stats().max_pending)
      assert.is_not_nil(timer:timeout(1, function() end))
    end
  end)

  it("max_pending: rejects negatives, fractions, NaN and non-numbers", function()
    for _, bad in ipairs({ -1, 1.5, 0 / 0, "many", true }) do
      assert_raises("bad option 'max_pending' to 'new'", manual, { max_pending = bad })
    end
  end)

  it("clock: 'monotonic' or 'manual' only", function()
    assert.are.equal("manual", hwt.new({ clock = "manual" }):stats().clock)
    local real = hwt.new({ clock = "monotonic" })
    assert.are.equal("monotonic", real:stats().clock)
    real:stop()
    for _, bad in ipairs({ "Manual", "realtime", "", 1, true, {} }) do
      assert_raises("bad option 'clock' to 'new'", hwt.new, { clock = bad })
    end
  end)

  it("on_error: a function or a callable; anything else is rejected", function()
    assert.is_not_nil(manual({ on_error = function() end }))
    assert.is_not_nil(manual({ on_error = setmetatable({}, { __call = function() end }) }))
    for _, bad in ipairs({ 1, "print", {}, true }) do
      assert_raises("bad option 'on_error' to 'new'", manual, { on_error = bad })
    end
  end)

  it("unknown option keys (typos) raise an error that names the key", function()
    for _, typo in ipairs({ "wheelsize", "ticks", "maxPending", "max_pendings", "onerror", "Clock", "tick_size" }) do
      assert_raises("unknown option '" .. typo .. "'", hwt.new, { [typo] = 1 })
      assert_raises("unknown option '" .. typo .. "'", hwt.new, { clock = "manual", [typo] = 1 })
    end
    -- non-string keys do not pass silently either
    error_of(hwt.new, { 0.01 })
    error_of(hwt.new, { [true] = 1 })
  end)

  it("the options are honoured together", function()
    local errors = {}
    local timer = manual({ tick = 0.5, wheel_size = 4, max_pending = 2,
                           on_error = function(e) errors[#errors + 1] = e end })
    local s = timer:stats()
    assert.are.same({ 0.5, 4, 2, "manual" }, { s.tick, s.wheel_size, s.max_pending, s.clock })
    assert.is_not_nil(timer:timeout(0.1, function() error("x", 0) end))
    assert.is_not_nil(timer:timeout(10, function() end))
    assert.is_nil((timer:timeout(1, function() end)))
    assert.are.equal(0, timer:advance(0.09))  -- manual clock: at its exact deadline, whatever the tick
    assert.are.equal(1, timer:advance(0.01))
    assert.are.same({ "x" }, errors)
  end)
end)

-- ---- time conversion, never early ---------------------------------------------

describe("manual clock time", function()
  it("timer:now() starts at 0 and advance(s) adds s", function()
    local timer = manual()
    assert.are.equal(0, timer:now())
    timer:advance(0.25)
    assert.are.equal(0.25, timer:now())
    timer:advance(1)
    assert.are.equal(1.25, timer:now())
    timer:advance(0)
    assert.are.equal(1.25, timer:now())
  end)

  it("a deadline between tick boundaries runs exactly at it: the tick does not round it", function()
    local timer = manual({ tick = 0.01 })
    local ran = false
    timer:timeout(0.015, function() ran = true end)
    assert.are.equal(0, timer:advance(0.0149999))
    assert.is_false(ran)
    assert.are.equal(1, timer:advance(0.0000001))  -- 0.015
    assert.is_true(ran)
  end)

  it("tick = 1/60: timeout(0.5) runs after advance(0.5) but not after advance(0.4999)", function()
    local a, b = manual({ tick = 1 / 60 }), manual({ tick = 1 / 60 })
    local ran_a, ran_b = false, false
    a:timeout(0.5, function() ran_a = true end)
    b:timeout(0.5, function() ran_b = true end)
    a:advance(0.4999)
    b:advance(0.5)
    assert.is_false(ran_a)
    assert.is_true(ran_b)
  end)

  it("a deadline exactly on a tick boundary runs when the clock reaches it (not a tick later)", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    timer:timeout(0.02, task, "0.02")
    timer:timeout(0.01, task, "0.01")
    timer:timeout(1, task, "1")
    assert.are.equal(1, timer:advance(0.01))
    assert.are.same({ "0.01" }, log)
    assert.are.equal(0, timer:advance(0.0099999))
    assert.are.equal(1, timer:advance(0.0000001))  -- exactly 0.02
    assert.are.same({ "0.01", "0.02" }, log)
    assert.are.equal(1, timer:advance(0.98))
    assert.are.same({ "0.01", "0.02", "1" }, log)
  end)

  it("converts seconds to nanoseconds rounded to the nearest", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    timer:timeout(0.0200000004, task, "rounds down")   -- 20000000 ns
    timer:timeout(0.0200000006, task, "rounds up")     -- 20000001 ns
    assert.are.equal(1, timer:advance(0.02))
    assert.are.same({ "rounds down" }, log)
    assert.are.equal(1, timer:advance(1e-9))
    assert.are.same({ "rounds down", "rounds up" }, log)
  end)

  it("a deadline is the scheduling time plus the delay, also mid-tick", function()
    local timer = manual({ tick = 0.01 })
    local ran = false
    timer:advance(0.005)
    timer:timeout(0.01, function() ran = true end)    -- deadline 0.015
    assert.are.equal(0, timer:advance(0.0099))
    assert.is_false(ran)
    assert.are.equal(1, timer:advance(0.0001))          -- now 0.015
    assert.is_true(ran)
  end)

  it("never starts a task before its deadline (whatever the delay and the advance steps)", function()
    local timer = manual({ tick = 0.01, wheel_size = 8 })
    local delays = { 0, 1e-9, 0.001, 0.0099, 0.01, 0.0101, 0.015, 0.02, 0.079, 0.08, 0.081,
                     0.5, 0.64, 0.65, 1, 3.333, 5.12, 10, 40.96, 41 }
    local deadline_ns, started_ns = {}, {}
    local now = 0
    for round = 1, 3 do
      for i, d in ipairs(delays) do
        local id = round * 100 + i
        deadline_ns[id] = ns(now) + ns(d)
        timer:timeout(d, function() started_ns[id] = ns(timer:now()) end)
      end
      local steps = { 0.003, 0.007, 0.0101, 0.05, 0.3, 1.7, 0.01 }
      for k = 1, 40 do
        timer:advance(steps[k % #steps + 1])
      end
      now = timer:now()
    end
    timer:advance(100)
    local count = 0
    for id, deadline in pairs(deadline_ns) do
      assert.is_not_nil(started_ns[id], "timeout " .. id .. " never ran")
      assert.is_true(started_ns[id] >= deadline,
        ("timeout %d started at %d ns, before its deadline %d ns"):format(id, started_ns[id], deadline))
      count = count + 1
    end
    assert.are.equal(3 * #delays, count)
  end)

  it("with prompt advances, a task starts within one tick after its deadline", function()
    local tick = 0.01
    local timer = manual({ tick = tick, wheel_size = 16 })
    local late = {}
    local delays = { 0.0001, 0.005, 0.013, 0.16, 0.161, 0.3, 2.57, 2.6 }
    for i, d in ipairs(delays) do
      timer:timeout(d, function() late[i] = ns(timer:now()) - ns(d) end)
    end
    for _ = 1, 300 do timer:advance(tick) end
    for i = 1, #delays do
      assert.is_not_nil(late[i])
      assert.is_true(late[i] >= 0 and late[i] < ns(tick), "late by " .. late[i] .. " ns")
    end
  end)
end)

-- ---- order ------------------------------------------------------------------

describe("order", function()
  it("runs by exact deadline within one tick, not by tick", function()
    local timer = manual({ tick = 1 })
    local log, task = logger()
    for _, d in ipairs({ 0.7, 0.2, 0.5, 0.1, 0.9, 0.3 }) do timer:timeout(d, task, d) end
    assert.are.equal(6, timer:advance(1))
    assert.are.same({ 0.1, 0.2, 0.3, 0.5, 0.7, 0.9 }, log)
  end)

  it("runs by deadline across ticks collected in one advance", function()
    local timer = manual({ tick = 0.01, wheel_size = 4 })
    local log, task = logger()
    local delays = { 0.55, 0.015, 0.3, 0.011, 0.04, 0.0101, 0.16, 0.039, 0.02, 5, 0.64 }
    for _, d in ipairs(delays) do timer:timeout(d, task, d) end
    assert.are.equal(#delays, timer:advance(10))
    local sorted = { unpack(delays) }
    table.sort(sorted)
    assert.are.same(sorted, log)
  end)

  it("runs equal deadlines in scheduling order", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    for i = 1, 50 do timer:timeout(0.25, task, i) end
    assert.are.equal(50, timer:advance(0.3))
    for i = 1, 50 do assert.are.equal(i, log[i]) end
  end)

  it("orders by the absolute deadline of timeouts scheduled at different times", function()
    local timer = manual({ tick = 0.1 })
    local log, task = logger()
    timer:timeout(0.05, task, "A")     -- deadline 0.05
    timer:advance(0.013)
    timer:timeout(0.03, task, "B")     -- deadline 0.043
    timer:timeout(0.037, task, "C")    -- deadline 0.05, scheduled after A
    assert.are.equal(3, timer:advance(0.1))
    assert.are.same({ "B", "A", "C" }, log)
  end)

  it("keeps deadline order between due-but-unpolled timeouts and newly due ones", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    timer:timeout(0.01, task, 1)
    timer:timeout(0.01, task, 2)
    timer:timeout(0.02, task, 4)
    timer:timeout(0.015, task, 3)
    timer:timeout(0.02, task, 5)
    timer:advance(0.01)  -- runs 1, 2 (advance polls all)
    assert.are.same({ 1, 2 }, log)
    timer:timeout(0.005, task, 6)       -- deadline 0.015, after 3 by sequence
    timer:timeout(0, task, 0)           -- deadline 0.01: the clock is on a boundary, so due at once
    assert.are.equal(1, timer:poll(1))  -- the delay-0 one is due at once
    assert.are.same({ 1, 2, 0 }, log)
    assert.are.equal(0, timer:poll())
    assert.are.equal(4, timer:advance(0.01))
    assert.are.same({ 1, 2, 0, 3, 6, 4, 5 }, log)
  end)

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
end)

-- ---- pending() -------------------------------------------------------------------

describe("timer:pending", function()
  it("counts timeouts scheduled and neither run nor cancelled", function()
    local timer = manual()
    assert.are.equal(0, timer:pending())
    local a = timer:timeout(1, function() end)
    timer:timeout(2, function() end)
    timer:timeout(math.huge, function() end)
    timer:timeout(0, function() end)
    assert.are.equal(4, timer:pending())
    a:cancel()
    assert.are.equal(3, timer:pending())
    timer:poll()               -- the delay-0 one
    assert.are.equal(2, timer:pending())
    timer:advance(2)
    assert.are.equal(1, timer:pending())
    assert.are.equal(timer:pending(), timer:stats().pending)
  end)

  it("inside a one-shot's task excludes that task; a due sibling is still counted", function()
    local timer = manual()
    local seen = {}
    timer:timeout(1, function() seen[#seen + 1] = timer:pending() end)
    timer:timeout(1, function() seen[#seen + 1] = timer:pending() end)
    timer:timeout(5, function() end)
    timer:advance(1)
    assert.are.same({ 2, 1 }, seen)
  end)

end)

-- ---- errors in tasks -----------------------------------------------------------------

describe("errors in tasks", function()
  it("go to on_error with the error value unchanged and the timeout; the others still run", function()
    local reports = {}
    local timer = manual({ on_error = function(err, t) reports[#reports + 1] = { err, t } end })
    local log, task = logger()
    local payload = { code = 42 }
    timer:timeout(1, task, 1)
    local t_str = timer:timeout(1, function() error("plain", 0) end)
    timer:timeout(1, task, 2)
    local t_tab = timer:timeout(1, function() error(payload) end)
    local t_num = timer:timeout(1, function() error(17, 0) end)  -- 5.1/5.2 add a position at level 1
    local t_pos = timer:timeout(1, function() error("with position") end)
    timer:timeout(1, task, 3)
    assert.are.equal(7, timer:advance(1))
    assert.are.same({ 1, 2, 3 }, log)
    assert.are.equal(4, #reports)
    assert.are.equal("plain", reports[1][1])
    assert.is_true(rawequal(t_str, reports[1][2]))
    assert.is_true(rawequal(payload, reports[2][1]))
    assert.is_true(rawequal(t_tab, reports[2][2]))
    assert.are.equal(17, reports[3][1])
    assert.is_true(compat.is_integer(reports[3][1]), "reports[3][1]: an integer")
    assert.is_true(rawequal(t_num, reports[3][2]))
    assert.is_truthy(reports[4][1]:find("with position", 1, true))
    assert.is_true(rawequal(t_pos, reports[4][2]))
  end)

  it("a raised nil or false reaches on_error unchanged", function()
    local reports = {}
    local timer = manual({ on_error = function(err, t) reports[#reports + 1] = { n = 2, err, t } end })
    timer:timeout(1, function() error(nil) end)
    timer:timeout(1, function() error(false) end)
    assert.are.equal(2, timer:advance(1))
    assert.are.equal(2, #reports)
    assert.is_nil(reports[1][1])
    assert.is_false(reports[2][1])
  end)

  it("a task that raised counts as run: in poll()'s return and in stats().fired", function()
    local timer = manual({ on_error = function() end })
    local t = timer:timeout(0, function() error("x") end)
    timer:timeout(0, function() end)
    assert.are.equal(2, timer:poll())
    assert.are.equal(2, timer:stats().fired)
    assert.is_true(t:is_expired())
    assert.is_false(t:is_cancelled())
    assert.are.equal(0, timer:pending())
    assert.is_true(has_text(tostring(t), "expired"))
  end)

  it("a callable on_error is called too, and errors of TimerTask tables reach it", function()
    local reports = {}
    local handler = setmetatable({}, { __call = function(_, err, t) reports[#reports + 1] = { err, t } end })
    local timer = manual({ on_error = handler })
    local tt = { run = function() error("from run", 0) end }
    local t = timer:timeout(0, tt)
    assert.are.equal(1, timer:poll())
    assert.are.equal("from run", reports[1][1])
    assert.is_true(rawequal(t, reports[1][2]))
  end)

  it("a TimerTask whose run is gone when it falls due: on_error gets an error naming 'run'", function()
    local reports = {}
    local timer = manual({ on_error = function(err, t) reports[#reports + 1] = { err, t } end })
    local tt = { run = function() end }
    local t = timer:timeout(0, tt)
    local ran = false
    timer:timeout(0, function() ran = true end)
    tt.run = nil
    assert.are.equal(2, timer:poll())
    assert.are.equal(1, #reports)
    assert.matches("'run'", reports[1][1])
    assert.is_true(rawequal(t, reports[1][2]))
    assert.is_true(ran)
  end)

  it("tasks can use the timer from on_error", function()
    local timer
    local retried = false
    timer = manual({ on_error = function(_, t)
      timer:timeout(1, function() retried = true end)
      assert.is_true(rawequal(timer, t:timer()))
    end })
    timer:timeout(1, function() error("x") end)
    timer:advance(1)
    timer:advance(1)
    assert.is_true(retried)
  end)

  it("without on_error, the error and a traceback go to stderr and poll goes on", function()
    local out = child_output([[
      local hwt = require("hwt")
      local timer = hwt.new({ clock = "manual" })
      local after = false
      timer:timeout(1, function() error("boom-marker") end)
      timer:timeout(1, function() error({}) end)
      timer:timeout(1, function() after = true end)
      local n = timer:advance(1)
      io.stdout:write("ran=", n, " after=", tostring(after), " fired=", timer:stats().fired, "\n")
    ]])
    assert.is_truthy(out:find("boom-marker", 1, true), out)
    assert.is_truthy(out:find("traceback", 1, true), out)
    assert.is_truthy(out:find("ran=3 after=true fired=3", 1, true), out)
  end)

  it("poll goes on even when on_error itself raises", function()
    local out = child_output([[
      local hwt = require("hwt")
      local calls = 0
      local timer = hwt.new({ clock = "manual", on_error = function(e)
        calls = calls + 1
        error("handler-failed-marker")
      end })
      local after = false
      timer:timeout(1, function() error("task-failed") end)
      timer:timeout(1, function() after = true end)
      local n = timer:advance(1)
      io.stdout:write("ran=", n, " after=", tostring(after), " calls=", calls, "\n")
    ]])
    assert.is_truthy(out:find("ran=2 after=true calls=1", 1, true), out)
  end)
end)

-- ---- wait / run / advance -----------------------------------------------------------

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
end)

describe("garbage of draining calls", function()
  local CALLS = 2000
  -- One task's call is a few hundred bytes of garbage if a poll makes its
  -- own objects (before its drain was reused: 160 B on 5.4, 261 B on LuaJIT).
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
    local t = timer:timeout(0, function() ran = ran + 1 end)
    local grown = bytes_per_call(function() end, function()
      t:reset(0)
      expect(timer:poll(), 1, "poll")
    end)
    assert.are.equal(2 * (CALLS + 1), ran)
    assert.is_true(grown < MOST_BYTES_PER_CALL, ("%.1f bytes per reset() + poll()"):format(grown))
  end)
end)

-- ---- fd -----------------------------------------------------------------------

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
end)

-- ---- stats -----------------------------------------------------------------------

describe("timer:stats", function()
  it("has the documented fields with the right types", function()
    local timer = manual({ tick = 0.02, wheel_size = 100, max_pending = 9 })
    local s = timer:stats()
    for _, key in ipairs({ "pending", "due", "fired", "cancelled", "ticks", "worker_wakeups", "wheel_size", "max_pending" }) do
      assert.is_true(compat.is_integer(s[key]), key)
    end
    assert.are.equal("number", type(s.late_max))
    assert.are.equal(0, s.late_max)
    assert.are.same({ 0, 0, 0, 0, 0 }, { s.pending, s.due, s.fired, s.cancelled, s.ticks })
    assert.are.equal(0.02, s.tick)
    assert.are.equal(128, s.wheel_size)
    assert.are.equal(9, s.max_pending)
    assert.are.equal("manual", s.clock)
    assert.is_false(s.stopped)
  end)

  it("pending, due, fired and cancelled follow the timeouts' lives", function()
    local timer = manual({ on_error = function() end })
    local ts = {}
    for i = 1, 6 do ts[i] = timer:timeout(0, function() if i == 2 then error("x") end end) end
    timer:timeout(1, function() end)
    local s = timer:stats()
    assert.are.same({ 7, 6, 0, 0 }, { s.pending, s.due, s.fired, s.cancelled })
    timer:poll(2)
    ts[3]:cancel()
    s = timer:stats()
    assert.are.same({ 4, 3, 2, 1 }, { s.pending, s.due, s.fired, s.cancelled })
    assert.are.equal(timer:pending(), s.pending)
    timer:advance(1)
    s = timer:stats()
    assert.are.same({ 0, 0, 6, 1 }, { s.pending, s.due, s.fired, s.cancelled })
  end)

  it("late_max is the largest start - deadline, in seconds", function()
    local timer = manual({ tick = 0.01 })
    timer:timeout(0.015, function() end)
    timer:timeout(0.05, function() end)
    timer:advance(0.05)
    assert.is_near(0.035, timer:stats().late_max, 1e-12)
    timer:timeout(0.001, function() end)
    timer:advance(0.01)              -- late 0.009 < 0.035
    assert.is_near(0.035, timer:stats().late_max, 1e-12)
    timer:timeout(0.1, function() end)
    timer:advance(1)                 -- late 0.9
    assert.is_near(0.9, timer:stats().late_max, 1e-12)
  end)

  it("ticks counts the ticks passed, idle ones included, never more than elapsed / tick + 1", function()
    local timer = manual({ tick = 0.01, wheel_size = 8 })
    assert.are.equal(0, timer:stats().ticks)
    timer:advance(1)
    local ticks = timer:stats().ticks
    assert.is_true(ticks >= 99 and ticks <= 101, "ticks = " .. ticks)
    timer:timeout(0.333, function() end)
    local elapsed = 1
    for _, step in ipairs({ 0.005, 0.005, 0.0001, 0.3, 2.5, 0.0199, 7 }) do
      timer:advance(step)
      elapsed = elapsed + step
      ticks = timer:stats().ticks
      assert.is_true(ticks <= elapsed / 0.01 + 1, ("ticks %d > elapsed %g / tick + 1"):format(ticks, elapsed))
      assert.is_true(ticks >= elapsed / 0.01 - 1, ("ticks %d << elapsed %g / tick"):format(ticks, elapsed))
    end
  end)

  it("reports the rounded wheel size and the stop state", function()
    local timer = manual({ wheel_size = 3 })
    assert.are.equal(4, timer:stats().wheel_size)
    timer:stop()
    local s = timer:stats()
    assert.is_true(s.stopped)
    assert.are.equal(4, s.wheel_size)
  end)
end)

-- ---- stop -----------------------------------------------------------------------

describe("timer:stop", function()
  it("returns the never-run timeouts in deadline order, each now cancelled", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    local by_label = {}
    for _, d in ipairs({ 5, 0.5, math.huge, 0.25, 3, 0.5, 1e300 }) do
      by_label[#by_label + 1] = timer:timeout(d, task, d)
    end
    local ran = timer:timeout(0.1, task, "ran")
    local cancelled = timer:timeout(0.2, task, "cancelled")
    local due = timer:timeout(0, task, "due")      -- due, waiting for poll
    local periodic = timer:every(0.3, task, "every")
    timer:advance(0.1)                               -- runs "due", then "ran"
    assert.are.same({ "due", "ran" }, log)
    local due2 = timer:timeout(0, task, "due2")
    cancelled:cancel()
    local cancels_before = timer:stats().cancelled
    local stopped = timer:stop()
    local expected = { due2, by_label[4], periodic, by_label[2], by_label[6], by_label[5],
                       by_label[1], by_label[7], by_label[3] }
    assert.are.equal(#expected, #stopped)
    for i, t in ipairs(expected) do
      assert.is_true(rawequal(t, stopped[i]), "position " .. i)
      assert.is_true(t:is_cancelled())
      assert.is_false(t:is_expired())
      assert.is_false(t:cancel())
      assert.are.equal(0, t:remaining())
      assert.is_true(has_text(tostring(t), "cancelled"))
    end
    assert.is_false(ran:is_cancelled())
    assert.are.equal(cancels_before + #expected, timer:stats().cancelled)
    assert.are.same({ "due", "ran" }, log)
  end)

  it("a second call returns an empty array; afterwards the timer refuses work", function()
    local timer = manual()
    timer:timeout(1, function() end)
    assert.are.equal(1, #timer:stop())
    assert.are.same({}, timer:stop())
    assert.are.same({}, timer:stop())
    assert_raises("timer is stopped", timer.timeout, timer, 1, function() end)
    assert_raises("timer is stopped", timer.every, timer, 1, function() end)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:pending())
    assert.are.equal(0, timer:advance(10))
    assert.is_false(timer:wait())
    local s = timer:stats()
    assert.is_true(s.stopped)
    assert.are.equal(0, s.pending)
    assert.are.equal(0, s.due)
    assert.are.equal(1, s.cancelled)
    assert.are.equal("hwt.Timer", tostring(timer):sub(1, 9))
  end)

  it("inside a task returns the due-but-not-started siblings; they never run", function()
    local timer = manual()
    local log, task = logger()
    local result
    local cancelled_sibling = timer:timeout(1, task, "cancelled")
    timer:timeout(1, task, "before")
    timer:timeout(1, function() result = timer:stop(); log[#log + 1] = "stopper" end)
    local s1 = timer:timeout(1, task, "sibling1")
    local s2 = timer:timeout(1.5, task, "sibling2")
    local later = timer:timeout(3, task, "later")
    assert.is_true(cancelled_sibling:cancel())
    assert.are.equal(2, timer:advance(2))
    assert.are.same({ "before", "stopper" }, log)
    assert.are.equal(3, #result)
    assert.is_true(rawequal(s1, result[1]))
    assert.is_true(rawequal(s2, result[2]))
    assert.is_true(rawequal(later, result[3]))
    for _, t in ipairs(result) do assert.is_true(t:is_cancelled()) end
    assert.are.equal(0, timer:advance(5))
    assert.are.same({ "before", "stopper" }, log)
    assert.are.same({}, timer:stop())
    assert.are.equal(2, timer:stats().fired)
  end)

  it("returns a periodic timeout only if it never ran", function()
    local timer = manual()
    local ran_one = timer:every(1, function() end)
    local fresh = timer:every(5, function() end)
    timer:advance(1)
    local stopped = timer:stop()
    assert.are.equal(1, #stopped)
    assert.is_true(rawequal(fresh, stopped[1]))
    assert.is_true(fresh:is_cancelled())
    assert.is_true(ran_one:is_expired())
    assert.is_false(ran_one:is_cancelled())
    assert.is_false(ran_one:cancel())
    assert.are.equal(1, timer:stats().cancelled)
  end)

  it("a periodic that stops its timer from inside is ended, not returned", function()
    local timer = manual()
    local result
    local p
    p = timer:every(1, function() result = timer:stop() end)
    local other = timer:timeout(10, function() end)
    timer:advance(1)
    assert.are.equal(1, #result)
    assert.is_true(rawequal(other, result[1]))
    assert.is_true(p:is_expired())
    assert.is_false(p:is_cancelled())
    assert.are.equal(0, timer:advance(5))
    assert.are.equal(1, timer:stats().fired)
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("a to-be-closed timer stops on scope exit", compat.compile([[
    return function()
      local handle, tm_ref
      do
        local timer <close> = manual()
        tm_ref = timer
        handle = timer:timeout(1, function() end)
      end
      assert.is_true(tm_ref:stats().stopped)
      assert.is_true(handle:is_cancelled())
      assert_raises("timer is stopped", tm_ref.timeout, tm_ref, 1, function() end)
    end
    ]], "@api_spec.lua", { manual = manual, assert_raises = assert_raises }, _ENV))
  end

  it("a timer that is never stopped is collected (its __gc stops it)", function()
    local weak = setmetatable({}, { __mode = "k" })
    do
      local timer = manual()
      timer:timeout(1, function() end)
      timer:every(1, function() end)
      timer:timeout(0, function() end)
      weak[timer] = true
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_nil(next(weak))
  end)
end)

-- ---- nothing lost, dropped handles --------------------------------------------

describe("nothing lost", function()
  it("a timeout whose handle was dropped still fires, with a usable timeout", function()
    local timer = manual()
    local got
    local count = 0
    for i = 1, 50 do
      timer:timeout(1, function(t, n) count = count + 1; if n == 50 then got = t end end, i)
    end
    timer:every(0.5, function() count = count + 1 end)
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(51, timer:pending())
    assert.are.equal(1, timer:advance(0.5))
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(51, timer:advance(0.5))
    assert.are.equal(52, count)
    assert.are.equal("hwt.Timeout", getmetatable(got))
    assert.is_true(got:is_expired())
    assert.is_true(rawequal(timer, got:timer()))
    collectgarbage("collect")
    assert.are.equal(1, timer:advance(0.5))       -- the dropped periodic keeps going
    assert.are.equal(53, count)
  end)

  it("a handle dropped after cancel or run can be collected without effect", function()
    local timer = manual()
    do
      local t = timer:timeout(1, function() end)
      t:cancel()
    end
    timer:timeout(0, function() end)
    timer:poll()
    collectgarbage("collect")
    collectgarbage("collect")
    local s = timer:stats()
    assert.are.same({ 0, 1, 1 }, { s.pending, s.fired, s.cancelled })
  end)
end)
