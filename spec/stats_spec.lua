-- stats_spec.lua: what a timer tells of itself: pending(), timeouts() (the
-- pending timeouts in (deadline, seq) order) and stats() (the counters,
-- ticks, lateness and its percentiles). Exact on the manual clock, within
-- loose bounds on the real clock.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local unpack, noop, manual = compat.unpack, support.noop, support.manual
local manual_with_errors, includes = support.manual_with_errors, support.includes
local assert_same_objects, assert_close = support.assert_same_objects, support.assert_close
local state_of, books, sleep = support.state_of, support.books, support.sleep

-- Nearest-rank percentile of a list of numbers (p in 0..100).
local function nearest_rank(values, p)
  local sorted = { unpack(values) }
  table.sort(sorted)
  local rank = math.ceil(p / 100 * #sorted)
  if rank < 1 then rank = 1 end
  return sorted[rank]
end

local function within_eighth(expected, actual, what)
  assert.is_number(actual, what)
  assert.is_true(math.abs(actual - expected) <= expected / 8 + 1e-9,
    ("%s: %.9g is not within 1/8 of %.9g"):format(what, actual, expected))
end

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

  it("pending(), stats() and tostring() from inside a task exclude the running one-shot", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local seen
    local t
    t = b:timeout(0.01, function()
      seen = { pending = tm:pending(), stats = tm:stats().pending, state = state_of(t), text = tostring(tm) }
    end)
    b:timeout(1, noop)
    tm:advance(0.01)
    assert.are.same({ pending = 1, stats = 1, state = "running", text = seen.text }, seen)
    b:check()
    tm:stop()
  end)
end)

describe("timer:timeouts()", function()
  it("lists exactly the pending timeouts in (deadline, seq) order", function()
    local timer = manual()
    assert.are.same({}, timer:timeouts())
    local a = timer:timeout(3, noop)
    local b = timer:timeout(1, noop)
    local c = timer:timeout(2, noop)
    local d = timer:timeout(1, noop)
    local e = timer:every(1.5, noop)
    local list = timer:timeouts()
    assert_same_objects({ b, d, e, c, a }, list, "timeouts()")
    assert.are.equal(timer:pending(), #list)
    timer:stop()
  end)

  it("excludes cancelled and run one-shots", function()
    local timer = manual()
    local a = timer:timeout(1, noop)
    local b = timer:timeout(2, noop)
    local c = timer:timeout(3, noop)
    assert.is_true(b:cancel())
    assert_same_objects({ a, c }, timer:timeouts())
    timer:advance(1)
    assert_same_objects({ c }, timer:timeouts())
    assert.are.equal(timer:pending(), #timer:timeouts())
    timer:stop()
  end)

  it("includes a due timeout that was not polled", function()
    local timer = manual()
    local t = timer:timeout(0, noop)
    assert_same_objects({ t }, timer:timeouts())
    timer:poll()
    assert.are.same({}, timer:timeouts())
    timer:stop()
  end)

  it("includes never-firing (math.huge) timeouts, at the end", function()
    local timer = manual()
    local never = timer:timeout(math.huge, noop)
    local five = timer:timeout(5, noop)
    local never2 = timer:timeout(math.huge, noop)
    local one = timer:timeout(1, noop)
    assert_same_objects({ one, five, never, never2 }, timer:timeouts())
    timer:stop()
  end)

  it("includes a periodic while armed, also during its own run; not a one-shot during its own", function()
    local timer = manual()
    local in_periodic, in_oneshot, pending_in_periodic
    local p
    p = timer:every(1, function(self)
      in_periodic = includes(timer:timeouts(), self)
      pending_in_periodic = #timer:timeouts() == timer:pending()
    end)
    local o = timer:timeout(2, function(self) in_oneshot = includes(timer:timeouts(), self) end)
    timer:advance(1)
    assert.is_true(in_periodic, "periodic not listed during its run")
    assert.is_true(pending_in_periodic)
    timer:advance(1)
    assert.is_false(in_oneshot, "one-shot listed during its run")
    assert.is_true(includes(timer:timeouts(), p))
    assert.is_false(includes(timer:timeouts(), o))
    assert.is_true(p:cancel())
    assert.are.same({}, timer:timeouts())
    timer:stop()
  end)

  it("changes nothing: listing runs, cancels and fires nothing", function()
    local timer = manual()
    local ran = 0
    local due = timer:timeout(0, function() ran = ran + 1 end)
    local later = timer:timeout(1, function() ran = ran + 1 end)
    local before = timer:stats()
    for _ = 1, 5 do timer:timeouts() end
    local after = timer:stats()
    assert.are.equal(0, ran)
    assert.are.equal(before.pending, after.pending)
    assert.are.equal(before.fired, after.fired)
    assert.are.equal(before.cancelled, after.cancelled)
    assert.are.equal(before.due, after.due)
    assert.is_false(due:is_cancelled() or due:is_expired())
    assert.is_false(later:is_cancelled() or later:is_expired())
    assert.are.equal(1, timer:poll())
    assert.are.equal(1, timer:advance(1))
    assert.are.equal(2, ran)
    timer:stop()
  end)

  it("returns a fresh array each call (editing it changes nothing)", function()
    local timer = manual()
    local a = timer:timeout(1, noop)
    local list = timer:timeouts()
    list[1] = nil
    list[2] = "x"
    assert_same_objects({ a }, timer:timeouts())
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("follows reset(): a reset timeout moves in the order", function()
    local timer = manual()
    local a = timer:timeout(1, noop)
    local b = timer:timeout(2, noop)
    a:reset(3)
    assert_same_objects({ b, a }, timer:timeouts())
    local c = timer:timeout(2, noop)
    b:reset(2)                                    -- same deadline, new sequence number: after c
    assert_same_objects({ c, b, a }, timer:timeouts())
    timer:stop()
  end)

  it("is empty after stop()", function()
    local timer = manual()
    timer:timeout(1, noop)
    timer:every(1, noop)
    timer:timeout(math.huge, noop)
    timer:stop()
    assert.are.same({}, timer:timeouts())
  end)

  it("works on the real clock", function()
    local timer = hwt.new()
    local a = timer:timeout(20, noop)
    local b = timer:timeout(10, noop)
    assert_same_objects({ b, a }, timer:timeouts())
    timer:stop()
    assert.are.same({}, timer:timeouts())
  end)
end)

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

  it("never counts more ticks than elapsed / tick + 1, idle ticks included", function()
    local tick = 0.005
    local t0 = hwt.now()
    local t = hwt.new({ tick = tick })
    local t1 = hwt.now()
    t:timeout(0.05, function() end)
    local last
    for _ = 1, 8 do
      sleep(0.025)
      local lower = hwt.now() - t1
      local s = t:stats()
      local upper = hwt.now() - t0
      assert.is_true(compat.is_integer(s.ticks))
      assert.is_true(s.ticks <= upper / tick + 1, ("%d ticks after %.4f s"):format(s.ticks, upper))
      assert.is_true(s.ticks >= lower / tick - 1, ("%d ticks after %.4f s"):format(s.ticks, lower))
      if last then assert.is_true(s.ticks >= last) end
      last = s.ticks
    end
    assert.equals(1, t:run())
    t:stop()
  end)
end)

describe("stats().late_p50 / late_p99", function()
  it("are 0 before any task has started", function()
    local timer = manual()
    local s = timer:stats()
    assert.are.equal(0, s.late_p50)
    assert.are.equal(0, s.late_p99)
    local t = timer:timeout(1, noop)
    t:cancel()
    timer:advance(5)
    s = timer:stats()
    assert.are.equal(0, s.late_p50)
    assert.are.equal(0, s.late_p99)
    timer:stop()
    local real = hwt.new()
    assert.are.equal(0, real:stats().late_p50)
    assert.are.equal(0, real:stats().late_p99)
    real:stop()
  end)

  it("manual clock with run_for(): every task starts at its deadline (lateness 0)", function()
    local timer = manual({ tick = 1 / 60 })
    for i = 1, 50 do timer:timeout(i * 0.0123457, noop) end
    timer:every(0.3, noop)
    timer:run_for(3)
    local s = timer:stats()
    assert.is_true(s.fired > 50)
    assert.is_true(s.late_p50 >= 0 and s.late_p50 < 1e-6, "late_p50 " .. s.late_p50)
    assert.is_true(s.late_p99 >= 0 and s.late_p99 < 1e-6, "late_p99 " .. s.late_p99)
    assert.is_true(s.late_max >= 0 and s.late_max < 1e-6, "late_max " .. s.late_max)
    timer:stop()
  end)

  it("manual clock, one advance(1) over timeouts at 1..100 ms: lateness 0.900..0.999 s", function()
    local timer = manual()
    local lateness = {}
    for i = 1, 100 do
      timer:timeout(i / 1000, noop)
      lateness[i] = 1 - i / 1000
    end
    assert.are.equal(100, timer:advance(1))
    local s = timer:stats()
    within_eighth(nearest_rank(lateness, 50), s.late_p50, "late_p50")
    within_eighth(nearest_rank(lateness, 99), s.late_p99, "late_p99")
    assert.is_true(s.late_p50 <= s.late_p99)
    assert_close(0.999, s.late_max, 1e-6, "late_max")
    timer:stop()
  end)

  it("manual clock, lateness 1..100 ms: p50 ~ 50 ms, p99 ~ 99 ms", function()
    local timer = manual()
    local lateness = {}
    for i = 1, 100 do
      timer:timeout(1 - i / 1000, noop)
      lateness[i] = i / 1000
    end
    timer:advance(1)
    local s = timer:stats()
    within_eighth(0.050, s.late_p50, "late_p50")
    within_eighth(0.099, s.late_p99, "late_p99")
    within_eighth(nearest_rank(lateness, 50), s.late_p50, "late_p50")
    timer:stop()
  end)

  it("are percentiles, not means: 90 tasks 1 ms late and 10 tasks 500 ms late", function()
    local timer = manual()
    for _ = 1, 90 do timer:timeout(0.999, noop) end
    for _ = 1, 10 do timer:timeout(0.5, noop) end
    timer:advance(1)
    local s = timer:stats()
    within_eighth(0.001, s.late_p50, "late_p50")
    within_eighth(0.5, s.late_p99, "late_p99")
    assert_close(0.5, s.late_max, 1e-6, "late_max")
    timer:stop()
  end)

  it("count every task started, across calls (on-time ones included)", function()
    local timer = manual()
    -- 60 on time (run_for), then 40 one second late (advance)
    for i = 1, 60 do timer:timeout(i / 64, noop) end
    timer:run_for(1)
    for _ = 1, 40 do timer:timeout(1, noop) end
    timer:advance(2)
    local s = timer:stats()
    assert.is_true(s.late_p50 < 1e-6, "late_p50 " .. s.late_p50)   -- rank 50 of 100: on time
    within_eighth(1, s.late_p99, "late_p99")
    timer:stop()
  end)

  it("use the nearest rank exactly at the boundaries (N = 100)", function()
    -- `late` of 100 tasks start 0.5 s late (advance), the rest on time (run_for)
    local function percentiles(late)
      local timer = manual()
      for i = 1, 100 - late do timer:timeout(i / 256, noop) end
      timer:run_for(1)
      for _ = 1, late do timer:timeout(1, noop) end
      timer:advance(1.5)
      local s = timer:stats()
      timer:stop()
      return s.late_p50, s.late_p99
    end
    local p50, p99 = percentiles(1)             -- rank 99 is on time
    assert.is_true(p99 < 1e-6, "1 late of 100: late_p99 " .. p99)
    p50, p99 = percentiles(2)                   -- rank 99 is late
    within_eighth(0.5, p99, "2 late of 100: late_p99")
    assert.is_true(p50 < 1e-6, "2 late of 100: late_p50 " .. p50)
    p50 = percentiles(50)                       -- rank 50 is on time
    assert.is_true(p50 < 1e-6, "50 late of 100: late_p50 " .. p50)
    p50 = percentiles(51)                       -- rank 50 is late
    within_eighth(0.5, p50, "51 late of 100: late_p50")
  end)

  it("with a single task, p50 = p99 = its lateness", function()
    local timer = manual()
    timer:timeout(0.25, noop)
    timer:advance(1)
    within_eighth(0.75, timer:stats().late_p50, "late_p50")
    within_eighth(0.75, timer:stats().late_p99, "late_p99")
    timer:stop()
  end)

  it("are per timer", function()
    local a, b = manual(), manual()
    a:timeout(0.5, noop)
    b:timeout(1, noop)
    a:advance(1)
    b:run_for(1)
    within_eighth(0.5, a:stats().late_p50, "a late_p50")
    assert.is_true(b:stats().late_p50 < 1e-6)
    assert.is_true(b:stats().late_p99 < 1e-6)
    a:stop()
    b:stop()
  end)

  it("count a periodic's late run from its beat (every(0.25), advance(1): 0.75 s late)", function()
    local timer = manual()
    timer:every(0.25, noop)
    timer:advance(1)
    within_eighth(0.75, timer:stats().late_p50, "late_p50")
    within_eighth(0.75, timer:stats().late_p99, "late_p99")
    timer:stop()
  end)

  it("real clock: non-negative, p50 <= p99 <= late_max (within 1/8)", function()
    local timer = hwt.new({ tick = 0.001 })
    for i = 1, 30 do timer:timeout(i * 0.002, noop) end
    timer:run_for(0.1)
    local s = timer:stats()
    assert.are.equal(30, s.fired)
    assert.is_number(s.late_p50)
    assert.is_number(s.late_p99)
    assert.is_true(s.late_p50 >= 0, "late_p50 " .. s.late_p50)
    assert.is_true(s.late_p99 >= 0, "late_p99 " .. s.late_p99)
    assert.is_true(s.late_p50 <= s.late_p99, ("p50 %g > p99 %g"):format(s.late_p50, s.late_p99))
    assert.is_true(s.late_p99 <= s.late_max * 9 / 8 + 1e-6,
      ("p99 %g > late_max %g"):format(s.late_p99, s.late_max))
    timer:stop()
  end)
end)
