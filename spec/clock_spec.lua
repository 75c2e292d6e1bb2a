-- clock_spec.lua: the clocks. hwt.now() and timer:now(); the manual clock,
-- moved only by advance() and run_for(), where a deadline is exactly the
-- scheduling time plus the delay (the tick does not round it) and huge
-- advances clamp; the real clock, where a task never starts before its
-- deadline, lateness stays within loose bounds, and an idle worker is not
-- woken.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local MAXINT, EPS, LATE, MAX_DELAY = compat.maxinteger, support.EPS, support.LATE, support.MAX_DELAY
local noop, manual, show, ns = support.noop, support.manual, support.show, support.ns
local logger, books, sleep = support.logger, support.books, support.sleep

describe("hwt.now", function()
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

  it("returns a finite, non-decreasing float, whatever the arguments", function()
    local a = hwt.now("x", {}, nil, io.stdout)
    local b = hwt.now()
    assert.is_true(compat.is_float(a), "a: float")
    assert(a == a and a < math.huge and a >= 0)
    assert(b >= a)
  end)
end)

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

  it("advance() by huge amounts clamps the manual clock at ~146 years and stays consistent", function()
    local tm = manual()
    local b = books(tm)
    local far = b:timeout(1e308, noop)           -- clamped to the same 146 years
    b:timeout(1, noop)
    assert.are.equal(1, tm:advance("1"))
    for _, v in ipairs({ 1e308, 2 ^ 63, MAXINT, 1e308 }) do
      local ran = tm:advance(v)
      assert.is_true(compat.is_integer(ran), "ran: an integer")
      local now = tm:now()
      assert(now <= MAX_DELAY + 1e-6 and now >= MAX_DELAY - 1, "now() = " .. show(now))
    end
    assert.is_true(far:is_expired() or far:remaining() >= 0)
    b:check()
    b:stop()
    b:check()
  end)
end)

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

describe("real clock", function()
  for _, tick in ipairs({ 0.001, 0.01 }) do
    it("never runs a task early (tick " .. tick .. ")", function()
      local t = hwt.new({ tick = tick })
      local delays = { 0, 0.001, 0.005, 0.02, 0.05 }
      local records = {}
      for round = 1, 3 do
        for _, delay in ipairs(delays) do
          local r = { delay = delay }
          records[#records + 1] = r
          r.before = hwt.now()
          t:timeout(delay, function() r.start = hwt.now() end)
          r.after = hwt.now()
        end
        if round == 2 then sleep(0.0037) end    -- vary the phase within a tick
      end
      assert.equals(#records, t:run())
      for _, r in ipairs(records) do
        assert.is_number(r.start)
        assert.is_true(r.start >= r.before + r.delay - EPS,
          ("delay %g started %.9f s early"):format(r.delay, r.before + r.delay - r.start))
      end
      t:stop()
    end)
  end

  it("runs tasks within loose bounds after their deadline (bounded lateness)", function()
    local t = hwt.new({ tick = 0.01 })
    local records = {}
    for _, delay in ipairs({ 0, 0.003, 0.01, 0.015, 0.04, 0.1 }) do
      local r = { delay = delay }
      records[#records + 1] = r
      r.before = hwt.now()
      t:timeout(delay, function() r.start = hwt.now() end)
      r.after = hwt.now()
    end
    assert.equals(#records, t:run())
    for _, r in ipairs(records) do
      local late = r.start - (r.after + r.delay)
      assert.is_true(late <= 0.01 + LATE, ("delay %g ran %.3f s late"):format(r.delay, late))
    end
    local s = t:stats()
    assert.is_number(s.late_max)
    assert.is_true(s.late_max >= 0)
    assert.is_true(s.late_max <= 0.01 + LATE)
    t:stop()
  end)

  it("does not wake the worker of an idle timer", function()
    local t = hwt.new()
    local ran = false
    t:timeout(0.01, function() ran = true end)
    assert.equals(1, t:run())
    assert.is_true(ran)
    assert.equals(0, t:pending())
    sleep(0.05)                          -- let the worker settle
    local w0 = t:stats().worker_wakeups
    assert.is_number(w0)
    sleep(1)
    assert.equals(w0, t:stats().worker_wakeups)
    t:stop()
  end)

  it("does not wake the worker before a far-away timeout (60 s)", function()
    local t = hwt.new()                              -- defaults
    local small = hwt.new({ tick = 0.001, wheel_size = 8 })  -- many wheel turns in 60 s
    local a = t:timeout(60, function() end)
    local b = small:timeout(60, function() end)
    sleep(0.05)
    local wa, wb = t:stats().worker_wakeups, small:stats().worker_wakeups
    sleep(1)
    assert.equals(wa, t:stats().worker_wakeups)
    assert.equals(wb, small:stats().worker_wakeups)
    assert.equals(1, t:pending())
    assert.equals(1, small:pending())
    assert.is_true(a:remaining() > 57 and a:remaining() <= 60)
    assert.is_true(b:remaining() > 57 and b:remaining() <= 60)
    t:stop()
    small:stop()
  end)
end)
