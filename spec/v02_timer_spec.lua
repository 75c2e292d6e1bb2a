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

end)

-- ---- timer:run_for() on the manual clock ---------------------------------------------

describe("timer:run_for() (manual clock)", function()
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

end)
