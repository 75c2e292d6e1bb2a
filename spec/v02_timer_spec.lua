-- v02_timer_spec.lua: black-box specs of the hwt 0.2 Timer/Timeout additions
-- of /work/shared/API.md ("Additions in hwt 0.2"): t:reset([delay]),
-- t:deadline(), timer:run_for(seconds) (both clocks), timer:now(),
-- timer:timeouts(), stats().late_p50 / late_p99, and exact deadlines on the
-- manual clock. Written from the contract only.
--
-- Exact checks use the manual clock and dyadic fractions (0.5, 0.25, 1.5 ...)
-- wherever a value is compared with ==, so that no float rounding can matter.
-- Real-clock checks use loose bounds only.
local hwt = require("hwt")
local compat = require("compat")

local unpack = compat.unpack

local support = require("support")
local manual, noop, error_of, assert_raises = support.manual, support.noop, support.error_of, support.assert_raises
local close_to, assert_close, logger = support.close_to, support.assert_close, support.logger
local assert_same_objects, includes = support.assert_same_objects, support.includes
local sleep = support.sleep

-- Raises, with a message containing at least one of the substrings.
local function assert_raises_any(substrings, f, ...)
  local message = error_of(f, ...)
  for _, s in ipairs(substrings) do
    if message:find(s, 1, true) then return message end
  end
  error(("error message %q includes none of %s"):format(message, table.concat(substrings, ", ")), 2)
end

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

-- ---- module ----------------------------------------------------------------

describe("hwt 0.2: module", function()
  it("has _VERSION 'hwt 0.2.0'", function()
    assert.are.equal("hwt 0.2.0", hwt._VERSION)
  end)

  it("exposes the new methods on hwt.Timer and hwt.Timeout", function()
    assert.are.equal("function", type(hwt.Timer.run_for))
    assert.are.equal("function", type(hwt.Timer.now))
    assert.are.equal("function", type(hwt.Timer.timeouts))
    assert.are.equal("function", type(hwt.Timeout.reset))
    assert.are.equal("function", type(hwt.Timeout.deadline))
  end)
end)

-- ---- timer:now() -------------------------------------------------------------

describe("timer:now()", function()
  it("manual clock: 0 at hwt.new, moved by advance() and run_for()", function()
    local timer = manual()
    assert.are.equal(0, timer:now())
    timer:advance(1.5)
    assert.are.equal(1.5, timer:now())
    timer:advance(0)
    assert.are.equal(1.5, timer:now())
    timer:run_for(2.25)
    assert.are.equal(3.75, timer:now())
    timer:poll()
    timer:wait()
    assert.are.equal(3.75, timer:now())   -- nothing else moves the manual clock
    timer:stop()
  end)

  it("manual clock: each timer has its own clock", function()
    local a, b = manual(), manual()
    a:advance(2)
    assert.are.equal(2, a:now())
    assert.are.equal(0, b:now())
  end)

  it("real clock: hwt.now()", function()
    local timer = hwt.new()
    for _ = 1, 100 do
      local before = hwt.now()
      local now = timer:now()
      local after = hwt.now()
      assert.is_number(now)
      assert.is_true(before <= now and now <= after,
        ("timer:now() %.9f not within [%.9f, %.9f]"):format(now, before, after))
    end
    timer:stop()
  end)
end)

-- ---- manual clock: exact deadlines ---------------------------------------------------

describe("manual clock: exact deadlines", function()
  it("tick = 1/60: timeout(0.5) runs at advance(0.5)", function()
    local timer = manual({ tick = 1 / 60 })
    local ran = 0
    timer:timeout(0.5, function() ran = ran + 1 end)
    assert.are.equal(1, timer:advance(0.5))
    assert.are.equal(1, ran)
    timer:stop()
  end)

  it("tick = 1/60: timeout(0.5) does not run at advance(0.49)", function()
    local timer = manual({ tick = 1 / 60 })
    local ran = 0
    timer:timeout(0.5, function() ran = ran + 1 end)
    assert.are.equal(0, timer:advance(0.49))
    assert.are.equal(0, ran)
    assert.are.equal(1, timer:pending())
    assert.are.equal(1, timer:advance(0.25))
    assert.are.equal(1, ran)
    timer:stop()
  end)

  it("a periodic's beats are exact too (tick = 1/60, every(0.5))", function()
    local timer = manual({ tick = 1 / 60 })
    local runs = 0
    timer:every(0.5, function() runs = runs + 1 end)
    assert.are.equal(1, timer:advance(0.5))
    assert.are.equal(0, timer:advance(0.25))
    assert.are.equal(1, timer:advance(0.25))
    assert.are.equal(2, runs)
    timer:stop()
  end)

  it("a deadline between tick boundaries is not rounded up to the next one (tick = 1)", function()
    local timer = manual({ tick = 1 })
    local ran = 0
    timer:timeout(0.25, function() ran = ran + 1 end)
    assert.are.equal(1, timer:advance(0.25))
    assert.are.equal(1, ran)
    timer:stop()
  end)

  it("next_due() on the manual clock is the exact time left", function()
    local timer = manual({ tick = 1 / 60 })
    timer:timeout(0.5, noop)
    assert.are.equal(0.5, timer:next_due())
    timer:advance(0.25)
    assert.are.equal(0.25, timer:next_due())
    timer:stop()
  end)

  it("an odd deadline (0.123456) runs exactly when the clock reaches it, never before", function()
    -- stepped in 1e-5 s advances: it must run at the first step at or past 0.123456
    local timer = manual({ tick = 0.01 })
    local ran_at
    local t = timer:timeout(0.123456, function() ran_at = timer:now() end)
    local steps = 0
    while not ran_at and steps < 20000 do
      timer:advance(1e-5)
      steps = steps + 1
    end
    assert.is_number(ran_at, "never ran")
    assert.is_true(ran_at >= t:deadline(), ("ran at %.12f, before its deadline %.12f"):format(ran_at, t:deadline()))
    assert.is_true(ran_at >= 0.123456 - 1e-12, ("ran at %.12f, before 0.123456"):format(ran_at))
    assert.is_true(ran_at < 0.123456 + 1e-5 + 1e-9,
      ("ran at %.12f, a step or more after 0.123456 (tick rounding?)"):format(ran_at))
    timer:stop()
  end)

  it("an odd deadline runs at one jump to exactly it, not at a jump just short of it", function()
    local timer = manual({ tick = 0.01 })
    local ran = false
    timer:timeout(0.123456, function() ran = true end)
    assert.are.equal(1, timer:advance(0.123456))
    assert.is_true(ran)
    local timer2 = manual({ tick = 0.01 })
    local ran2 = false
    timer2:timeout(0.123456, function() ran2 = true end)
    assert.are.equal(0, timer2:advance(0.123455))
    assert.is_false(ran2)
    assert.are.equal(1, timer2:advance(0.000002))
    assert.is_true(ran2)
    timer:stop()
    timer2:stop()
  end)

  it("orders by exact deadline within one tick, equal deadlines in scheduling order", function()
    local timer = manual({ tick = 1 })
    local log, task = logger()
    timer:timeout(0.3, task, "0.3")
    timer:timeout(0.1000001, task, "0.1000001")
    timer:timeout(0.1, task, "0.1 first")
    timer:timeout(0.10000005, task, "0.10000005")
    timer:timeout(0.1, task, "0.1 second")
    timer:timeout(0.123456, task, "0.123456")
    assert.are.equal(6, timer:advance(1))
    assert.are.same({ "0.1 first", "0.1 second", "0.10000005", "0.1000001", "0.123456", "0.3" }, log)
    timer:stop()
  end)

end)

-- ---- timer:run_for() on the manual clock ---------------------------------------------

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

  it("a task may yield (5.2+, LuaJIT): resuming continues the same run_for(); the clock stays at the task's deadline meanwhile", function()
    local timer = manual()
    local log = {}
    timer:timeout(1, function()
      log[#log + 1] = ("a%g"):format(timer:now())
      coroutine.yield("paused")
      log[#log + 1] = ("a'%g"):format(timer:now())
    end)
    timer:timeout(2, function() log[#log + 1] = ("b%g"):format(timer:now()) end)
    local errors = 0
    if not compat.tasks_yield then
      -- PUC 5.1: the yield is the task's error (on_error); run_for goes on
      local t2 = manual({ on_error = function() errors = errors + 1 end })
      t2:timeout(1, function() coroutine.yield() end)
      local co = coroutine.create(function() return t2:run_for(3) end)
      local ok, n = coroutine.resume(co)
      assert.is_true(ok)
      assert.are.equal(1, n)
      assert.are.equal(1, errors)
      t2:stop()
      timer:stop()
      return
    end
    local co = coroutine.create(function() return timer:run_for(3) end)
    local ok, what = coroutine.resume(co)
    assert.is_true(ok, tostring(what))
    assert.are.equal("paused", what)
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.same({ "a1" }, log)
    assert.are.equal(1, timer:now())
    local ok2, n = coroutine.resume(co)
    assert.is_true(ok2, tostring(n))
    assert.are.equal("dead", coroutine.status(co))
    assert.are.equal(2, n)
    assert.are.same({ "a1", "a'1", "b2" }, log)
    assert.are.equal(3, timer:now())
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

-- ---- timer:run_for() on the real clock --------------------------------------------------

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

-- ---- timer:timeouts() ------------------------------------------------------------------

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

-- ---- stats().late_p50 / late_p99 --------------------------------------------------

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
