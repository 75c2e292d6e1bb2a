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
