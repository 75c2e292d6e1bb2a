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

-- ---- t:deadline() -------------------------------------------------------------

describe("t:deadline()", function()
  it("manual clock: exactly now + delay", function()
    local timer = manual()
    assert.are.equal(0.5, timer:timeout(0.5, noop):deadline())
    assert.are.equal(0, timer:timeout(0, noop):deadline())
    timer:advance(0.25)
    assert.are.equal(0.75, timer:timeout(0.5, noop):deadline())
    assert.are.equal(10.25, timer:timeout(10, noop):deadline())
    assert.are.equal(1.25, timer:every(1, noop):deadline())
    timer:stop()
  end)

  it("manual clock: an odd delay is not rounded to the tick", function()
    local timer = manual({ tick = 1 / 60 })
    assert_close(0.123456, timer:timeout(0.123456, noop):deadline(), 1e-9, "deadline")
    assert_close(0.5, timer:timeout(0.5, noop):deadline(), 0, "deadline")
    timer:stop()
  end)

  it("is math.huge for a timeout that never fires", function()
    local timer = manual()
    assert.are.equal(math.huge, timer:timeout(math.huge, noop):deadline())
    local real = hwt.new()
    assert.are.equal(math.huge, real:timeout(math.huge, noop):deadline())
    real:stop()
    timer:stop()
  end)

  it("real clock: close to hwt.now() + delay, on the timer:now() scale", function()
    local timer = hwt.new()
    local before = hwt.now()
    local t = timer:timeout(2, noop)
    local after = hwt.now()
    local d = t:deadline()
    assert.is_number(d)
    assert.is_true(d >= before + 2 - 1e-6 and d <= after + 2 + 1e-6,
      ("deadline %.9f not within [%.9f, %.9f] + 2"):format(d, before, after))
    assert.is_true(math.abs((d - timer:now()) - t:remaining()) < 0.05)
    timer:stop()
  end)

  it("moves with reset()", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    timer:advance(0.5)
    assert.is_true(t:reset(4))
    assert.are.equal(4.5, t:deadline())
    assert.is_true(t:reset())
    assert.are.equal(1.5, t:deadline())
    timer:stop()
  end)

  it("periodic: the next beat", function()
    local timer = manual()
    local e = timer:every(1, noop)
    assert.are.equal(1, e:deadline())
    timer:advance(1)
    assert.are.equal(2, e:deadline())
    timer:advance(1.5)                 -- clock 2.5: beat 2 ran, next is 3
    assert.are.equal(3, e:deadline())
    timer:advance(2.5)                 -- clock 5: one run (missed beats skipped), next beat strictly later
    assert.are.equal(6, e:deadline())
    timer:run_for(2)                   -- beats 6 and 7
    assert.are.equal(8, e:deadline())
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

  it("cancelling a never-firing timeout that once waited for its exact deadline loses no other", function()
    local timer = manual({ tick = 1 })
    local log, task = logger()
    local once = timer:timeout(0.75, task, "once")
    assert.are.equal(0, timer:advance(0.5))        -- its tick is reached: it waits for 0.75
    assert.are.equal(1, timer:advance(0.25))
    assert.is_true(once:reset(math.huge))          -- pending again, never due
    timer:timeout(0.875, task, "later")            -- deadline 1.625
    assert.are.equal(0, timer:advance(0.5))        -- its tick is reached: it waits for 1.625
    assert.is_true(once:cancel())
    assert.are.equal(1, timer:pending())
    assert.are.equal(1, timer:advance(0.375))
    assert.are.same({ "once", "later" }, log)
    assert.are.equal(0, timer:pending())
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

-- ---- t:reset() ----------------------------------------------------------------------

describe("t:reset()", function()
  it("defaults to the delay the timeout was created with", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(2, function() runs = runs + 1 end)
    timer:advance(1)
    assert.is_true(t:reset())
    assert.are.equal(3, t:deadline())
    timer:advance(1.5)                  -- clock 2.5: the old deadline (2) has passed
    assert.are.equal(0, runs)
    timer:advance(0.5)                  -- clock 3
    assert.are.equal(1, runs)
    timer:stop()
  end)

  it("defaults to the interval for a periodic", function()
    local timer = manual()
    local times = {}
    local e = timer:every(2, function() times[#times + 1] = timer:now() end)
    timer:advance(1)
    assert.is_true(e:reset())
    assert.are.equal(3, e:deadline())
    timer:run_for(6)                    -- to 7
    assert.are.same({ 3, 5, 7 }, times)
    timer:stop()
  end)

  it("takes an explicit delay", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(2, function() runs = runs + 1 end)
    timer:advance(0.5)
    assert.is_true(t:reset(5))
    assert.are.equal(5.5, t:deadline())
    timer:advance(4.75)
    assert.are.equal(0, runs)
    timer:advance(0.25)
    assert.are.equal(1, runs)
    assert.is_true(t:reset(0.25))
    assert.are.equal(5.75, t:deadline())
    timer:advance(0.25)
    assert.are.equal(2, runs)
    timer:stop()
  end)

  it("accepts a numeric string and reset(nil) as the default", function()
    local timer = manual()
    local t = timer:timeout(2, noop)
    assert.is_true(t:reset("0.5"))
    assert.are.equal(0.5, t:deadline())
    assert.is_true(t:reset(nil))
    assert.are.equal(2, t:deadline())
    timer:stop()
  end)

  it("keeps the same userdata, task and arguments", function()
    local timer = manual()
    local calls = {}
    local function task(self, ...)
      calls[#calls + 1] = { self = self, args = compat.pack(...) }
    end
    local marker = {}
    local t = timer:timeout(1, task, "x", nil, marker)
    timer:advance(1)
    assert.is_true(t:reset(1))
    assert.is_true(rawequal(task, t:task()))
    assert.is_true(rawequal(timer, t:timer()))
    timer:advance(1)
    assert.are.equal(2, #calls)
    for i = 1, 2 do
      assert.is_true(rawequal(t, calls[i].self))
      assert.are.equal(3, calls[i].args.n)
      assert.are.equal("x", calls[i].args[1])
      assert.is_nil(calls[i].args[2])
      assert.is_true(rawequal(marker, calls[i].args[3]))
    end
    timer:stop()
  end)

  it("re-arms a pending timeout with a new sequence number (after an earlier one of the same deadline)", function()
    local timer = manual()
    local log, task = logger()
    local a = timer:timeout(1, task, "a")
    timer:timeout(1, task, "b")
    assert.is_true(a:reset(1))
    assert.are.equal(1, a:deadline())
    timer:advance(1)
    assert.are.same({ "b", "a" }, log)
    timer:stop()
  end)

  it("re-arms a due timeout (deadline passed, not yet polled): it does not run at the poll", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(0, function() runs = runs + 1 end)
    assert.are.equal(0, timer:next_due())   -- due
    assert.is_true(t:reset(1))
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, runs)
    assert.are.equal(1, timer:pending())
    assert.are.equal(1, timer:next_due())
    timer:advance(1)
    assert.are.equal(1, runs)
    timer:stop()
  end)

  it("re-arms a due timeout on the real clock (the worker already moved it to due)", function()
    local timer = hwt.new({ tick = 0.001 })
    local runs = 0
    local t = timer:timeout(0.005, function() runs = runs + 1 end)
    sleep(0.05)
    assert.is_true(timer:wait(0))
    assert.is_true(t:reset(30))
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, runs)
    assert.are.equal(1, timer:pending())
    assert.are.equal(0, timer:stats().due)
    assert.is_true(t:remaining() > 25)
    timer:stop()
  end)

  it("re-arms an expired one-shot: pending again, not expired until it runs again", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function() runs = runs + 1 end)
    timer:advance(1)
    assert.is_true(t:is_expired())
    assert.are.equal(0, timer:pending())
    assert.is_true(t:reset())
    assert.is_false(t:is_expired())
    assert.is_false(t:is_cancelled())
    assert.are.equal(1, timer:pending())
    assert.are.equal(1, t:remaining())
    timer:advance(0.5)
    assert.is_false(t:is_expired())
    timer:advance(0.5)
    assert.are.equal(2, runs)
    assert.is_true(t:is_expired())
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("re-arms a cancelled one-shot: pending again, runs at its new deadline", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function() runs = runs + 1 end)
    assert.is_true(t:cancel())
    assert.are.equal(0, timer:pending())
    assert.is_true(t:reset(2))
    assert.is_false(t:is_cancelled())
    assert.is_false(t:is_expired())
    assert.are.equal(1, timer:pending())
    assert.is_truthy(tostring(t):find("pending", 1, true), tostring(t))
    timer:advance(1.5)
    assert.are.equal(0, runs)
    timer:advance(0.5)
    assert.are.equal(1, runs)
    -- and it can be cancelled again
    assert.is_true(t:reset(1))
    assert.is_true(t:cancel())
    timer:advance(5)
    assert.are.equal(1, runs)
    timer:stop()
  end)

  it("re-arms a cancelled periodic: the series resumes from now + delay, then every interval", function()
    local timer = manual()
    local times = {}
    local e = timer:every(1, function() times[#times + 1] = timer:now() end)
    timer:run_for(2)
    assert.is_true(e:cancel())
    timer:run_for(1)                     -- to 3: nothing
    assert.is_true(e:reset(0.5))
    timer:run_for(2)                     -- to 5: 3.5, 4.5
    assert.are.same({ 1, 2, 3.5, 4.5 }, times)
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("periodic: the next beat moves to now + delay, then every interval from there", function()
    local timer = manual()
    local times = {}
    local e = timer:every(1, function() times[#times + 1] = timer:now() end)
    timer:advance(0.5)
    assert.is_true(e:reset(2))
    assert.are.equal(2.5, e:deadline())
    timer:advance(0.5)                   -- clock 1: the old beat must not run
    assert.are.same({}, times)
    timer:run_for(3)                     -- to 4: 2.5, 3.5
    assert.are.same({ 2.5, 3.5 }, times)
    assert.are.equal(4.5, e:deadline())
    timer:stop()
  end)

  it("periodic: reset inside its own task moves the next beat", function()
    local timer = manual()
    local times = {}
    local e
    e = timer:every(1, function()
      times[#times + 1] = timer:now()
      if #times == 2 then assert(e:reset(3)) end
    end)
    timer:run_for(9)
    -- 1, 2 (reset to 5), 5, then every 1: 6, 7, 8, 9
    assert.are.same({ 1, 2, 5, 6, 7, 8, 9 }, times)
    timer:stop()
  end)

  it("a one-shot may reset itself inside its own task; it runs again later, not in the same poll", function()
    local timer = manual()
    local runs, results = 0, {}
    timer:timeout(0, function(self)
      runs = runs + 1
      assert.is_true(self:is_expired())
      if runs < 3 then
        results[#results + 1] = self:reset(0)
        results[#results + 1] = self:is_expired()
      end
    end)
    assert.are.equal(1, timer:poll())
    assert.are.equal(1, runs)
    assert.are.same({ true, false }, results)
    assert.are.equal(1, timer:pending())
    assert.are.equal(1, timer:poll())
    assert.are.equal(2, runs)
    assert.are.equal(1, timer:poll())
    assert.are.equal(3, runs)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("a one-shot resetting itself with the default delay runs at its own deadline + delay", function()
    local timer = manual()
    local times = {}
    timer:timeout(0.75, function(self)
      times[#times + 1] = timer:now()
      if #times < 4 then self:reset() end
    end)
    timer:run_for(10)
    assert.are.same({ 0.75, 1.5, 2.25, 3 }, times)
    timer:stop()
  end)

  it("a reset inside its own task works at max_pending (the running one-shot is not pending)", function()
    local timer = manual({ max_pending = 1 })
    local ok, err
    local t = timer:timeout(1, function(self) ok, err = self:reset(1) end)
    timer:advance(1)
    assert.is_true(ok, tostring(err))
    assert.are.equal(1, timer:pending())
    assert.is_false(t:is_expired())
    timer:stop()
  end)

  it("a reset during a draining call does not run in that call (advance)", function()
    local timer = manual()
    local log = {}
    local b
    timer:timeout(1, function()
      log[#log + 1] = "a"
      assert(b:reset(0))                  -- b is due in this same advance
    end)
    b = timer:timeout(1, function() log[#log + 1] = "b" end)
    assert.are.equal(1, timer:advance(1))
    assert.are.same({ "a" }, log)
    assert.are.equal(1, timer:pending())
    assert.are.equal(1, timer:poll())
    assert.are.same({ "a", "b" }, log)
    timer:stop()
  end)

  it("a reset during poll() of a timeout that already ran in it does not run again in that call", function()
    local timer = manual()
    local log = {}
    local a
    a = timer:timeout(0, function() log[#log + 1] = "a" end)
    timer:timeout(0, function()
      log[#log + 1] = "b"
      assert(a:reset(0))
    end)
    assert.are.equal(2, timer:poll())
    assert.are.same({ "a", "b" }, log)
    assert.are.equal(1, timer:poll())
    assert.are.same({ "a", "b", "a" }, log)
    timer:stop()
  end)

  it("stop() returns a reset timeout (a fresh arming), cancelled", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    timer:advance(1)
    assert.is_true(t:reset(5))
    local other = timer:timeout(2, noop)
    local stopped = timer:stop()
    assert_same_objects({ other, t }, stopped, "stop()")
    assert.is_true(t:is_cancelled())
    assert.is_false(t:is_expired())
  end)

  it("stop() returns a periodic that ran and was then reset", function()
    local timer = manual()
    local e = timer:every(1, noop)
    timer:advance(1)
    assert.is_true(e:reset(5))
    assert.is_false(e:is_expired())
    local stopped = timer:stop()
    assert_same_objects({ e }, stopped, "stop()")
  end)

  it("keeps pending() and stats().pending right", function()
    local timer = manual()
    local a = timer:timeout(1, noop)
    local b = timer:timeout(1, noop)
    assert.are.equal(2, timer:pending())
    for _ = 1, 5 do assert.is_true(a:reset(3)) end   -- pending: no change
    assert.are.equal(2, timer:pending())
    timer:advance(1)                                  -- b ran
    assert.are.equal(1, timer:pending())
    assert.is_true(b:reset())                         -- expired -> pending
    assert.are.equal(2, timer:pending())
    assert.is_true(b:cancel())
    assert.are.equal(1, timer:pending())
    assert.is_true(b:reset())                         -- cancelled -> pending
    assert.are.equal(2, timer:pending())
    assert.are.equal(2, timer:stats().pending)
    assert.are.equal(2, #timer:timeouts())
    timer:advance(5)
    assert.are.equal(0, timer:pending())
    assert.are.equal(0, timer:stats().pending)
    timer:stop()
  end)

  it("returns nil, err when not pending and pending() >= max_pending; succeeds when pending at the cap", function()
    local timer = manual({ max_pending = 2 })
    local runs = 0
    local a = timer:timeout(1, function() runs = runs + 1 end)
    timer:advance(1)                                 -- a ran
    local b = timer:timeout(5, noop)
    local c = timer:timeout(6, noop)
    assert.are.equal(2, timer:pending())
    local ok, err = a:reset()
    assert.is_nil(ok)
    assert.are.equal("string", type(err))
    assert.is_true(err ~= "")
    assert.are.equal(2, timer:pending())
    assert.is_true(a:is_expired())                   -- unchanged
    assert.is_true(b:reset(2))                       -- pending at the cap: fine
    assert.are.equal(3, b:deadline())
    assert.is_true(c:cancel())
    local ok2, err2 = c:reset()                      -- cancelled, room for one: fine
    assert.is_true(ok2, tostring(err2))
    local ok3, err3 = a:reset()                      -- still full
    assert.is_nil(ok3)
    assert.are.equal("string", type(err3))
    assert.is_true(c:cancel())
    assert.is_true(a:reset())                        -- room again
    timer:advance(1)
    assert.are.equal(2, runs)
    timer:stop()
  end)

  it("raises on a stopped timer", function()
    local timer = manual()
    local pending = timer:timeout(1, noop)
    local ran = timer:timeout(0.5, noop)
    timer:advance(0.5)
    assert.is_function(pending.reset)
    assert.is_true(pending:reset(2))
    timer:stop()
    error_of(pending.reset, pending)
    error_of(ran.reset, ran, 1)
    assert.are.equal(0, timer:pending())
  end)

  it("raises on a negative, NaN or non-number delay, naming the argument", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    assert.is_function(t.reset)
    for _, bad in ipairs({ -1, -1e-9, -math.huge, 0 / 0 }) do
      assert_raises("delay", t.reset, t, bad)
    end
    for _, bad in ipairs({ "abc", {}, true }) do
      assert_raises_any({ "delay", "number expected" }, t.reset, t, bad)
    end
    assert.are.equal(1, t:deadline())                -- unchanged
    assert.are.equal(1, timer:pending())
    timer:stop()
  end)

  it("reset(math.huge) means never (until cancel/stop)", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function() runs = runs + 1 end)
    assert.is_true(t:reset(math.huge))
    assert.are.equal(math.huge, t:deadline())
    assert.are.equal(math.huge, t:remaining())
    timer:advance(1e9)
    assert.are.equal(0, runs)
    assert.are.equal(1, timer:pending())
    assert.is_nil(timer:next_due())
    assert.is_true(t:reset(1))                        -- and back
    timer:advance(1)
    assert.are.equal(1, runs)
    timer:stop()
  end)

  it("a huge finite delay clamps (never wraps to now)", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function() runs = runs + 1 end)
    assert.is_true(t:reset(1e300))
    timer:advance(1e6)
    assert.are.equal(0, runs)
    assert.is_true(t:deadline() > 1e6)
    timer:stop()
  end)

  it("a reset timeout fires even when its handle is dropped (expired, cancelled and pending ones)", function()
    local timer = manual()
    local runs = { 0, 0, 0 }
    local function task(_, i) runs[i] = runs[i] + 1 end
    local expired = timer:timeout(1, task, 1)
    local cancelled = timer:timeout(1, task, 2)
    local pending = timer:timeout(1, task, 3)
    assert.is_true(cancelled:cancel())
    timer:advance(1)
    assert.are.same({ 1, 0, 1 }, runs)
    pending = timer:timeout(5, task, 3)
    assert.is_true(expired:reset(1))
    assert.is_true(cancelled:reset(1))
    assert.is_true(pending:reset(1))
    expired, cancelled, pending = nil, nil, nil
    collectgarbage()
    collectgarbage()
    assert.are.equal(3, timer:advance(1))
    assert.are.same({ 2, 1, 2 }, runs)
    timer:stop()
  end)

  it("a reset is not a cancel: stats().cancelled and fired count as usual", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    assert.is_true(t:reset(2))
    assert.are.equal(0, timer:stats().cancelled)
    timer:advance(2)
    assert.are.equal(1, timer:stats().fired)
    assert.is_true(t:reset(1))
    timer:advance(1)
    assert.are.equal(2, timer:stats().fired)
    assert.are.equal(0, timer:stats().cancelled)
    timer:stop()
  end)

  it("a periodic may reset itself inside its own task at max_pending (it is pending while it runs)", function()
    local timer = manual({ max_pending = 1 })
    local ok, err
    local e
    e = timer:every(1, function() if not ok then ok, err = e:reset(0.5) end end)
    timer:advance(1)
    assert.is_true(ok, tostring(err))
    assert.are.equal(1.5, e:deadline())
    timer:stop()
  end)

  it("a timeout handed to spawn is still pending: reset succeeds at max_pending", function()
    local timer = manual({ max_pending = 1 })
    local runs = 0
    local t = timer:timeout(0, function() runs = runs + 1 end)
    local handed
    assert.are.equal(1, timer:poll(nil, function(fn) handed = fn end))
    local ok, err = t:reset(1)
    assert.is_true(ok, tostring(err))
    handed()
    assert.are.equal(0, runs)
    timer:advance(1)
    assert.are.equal(1, runs)
    timer:stop()
  end)

  it("voids a periodic's spawn hand-off; the series goes on from the new deadline", function()
    local timer = manual()
    local times = {}
    local e = timer:every(1, function() times[#times + 1] = timer:now() end)
    timer:advance(1)                                  -- beat 1 runs (no spawn)
    local handed
    timer:advance(1.5)                                -- clock 2.5: ran beat 2; next 3
    assert.are.same({ 1, 2.5 }, times)
    timer:advance(0.5)                                -- clock 3: ran beat 3
    -- hand beat 4 to spawn: move the clock with run_for(0)? No: make it due by advance without poll is
    -- impossible on the manual clock, so schedule a due beat with reset(0) and poll with spawn.
    assert.is_true(e:reset(0))
    assert.are.equal(1, timer:poll(nil, function(fn) handed = fn end))
    assert.is_true(e:reset(2))                        -- voids the hand-off; next at 5, then 6, 7
    handed()
    assert.are.same({ 1, 2.5, 3 }, times)
    timer:run_for(4)                                  -- to 7
    assert.are.same({ 1, 2.5, 3, 5, 6, 7 }, times)
    timer:stop()
  end)

  it("voids a spawn hand-off that has not started; the timeout runs at its new deadline", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(0, function() runs = runs + 1 end)
    local handed
    local n = timer:poll(nil, function(fn) handed = fn end)
    assert.are.equal(1, n)
    assert.are.equal("function", type(handed))
    assert.are.equal(1, timer:pending())             -- handed, not started: still pending
    assert_same_objects({ t }, timer:timeouts())
    assert.is_true(t:reset(1))
    handed()                                         -- voided: does nothing
    assert.are.equal(0, runs)
    assert.is_false(t:is_expired())
    assert.are.equal(1, timer:pending())
    assert.are.equal(0, timer:advance(0.5))
    assert.are.equal(1, timer:advance(0.5))
    assert.are.equal(1, runs)
    handed()                                         -- still nothing
    assert.are.equal(1, runs)
    timer:stop()
  end)

  it("real clock: a reset to later is not woken for at the old deadline; a reset to earlier is", function()
    local timer = hwt.new({ tick = 0.001 })
    local a = timer:timeout(0.05, noop)
    assert.is_true(a:reset(10))
    assert.is_false(timer:wait(0.2))
    assert.are.equal(0, timer:poll())
    local b = timer:timeout(10, noop)
    local t0 = hwt.now()
    assert.is_true(b:reset(0.05))
    assert.is_true(timer:wait(3))
    local waited = hwt.now() - t0
    assert.is_true(waited >= 0.05 - 1e-3 and waited < 1, "waited " .. waited)
    assert.are.equal(1, timer:poll())
    timer:stop()
  end)

  it("a due timeout reset to later no longer makes fd() readable", function()
    local timer = manual()
    local f = io.open("/proc/self/fdinfo/" .. timer:fd())
    if not f then timer:stop(); return end         -- no /proc: nothing to check
    f:close()
    local function readable()
      local fh = assert(io.open("/proc/self/fdinfo/" .. timer:fd()))
      local text = fh:read("*a")
      fh:close()
      local hex = text:match("eventfd%-count:%s*(%x+)")
      if not hex then return nil end
      return tonumber(hex, 16) ~= 0
    end
    local t = timer:timeout(0, noop)
    local before = readable()
    if before == nil then timer:stop(); return end  -- not an eventfd (a pipe): skip
    assert.is_true(before)
    assert.is_true(t:reset(1))
    assert.is_false(readable())
    assert.are.equal(0, timer:stats().due)
    timer:advance(1)
    timer:stop()
  end)

  it("works on the real clock", function()
    local timer = hwt.new({ tick = 0.001 })
    local runs = 0
    local t = timer:timeout(10, function() runs = runs + 1 end)
    assert.is_true(t:reset(0.02))
    assert.is_true(t:remaining() <= 0.02 + 1e-6)
    local t0 = hwt.now()
    timer:run()
    assert.are.equal(1, runs)
    assert.is_true(hwt.now() - t0 < 5)
    timer:stop()
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
