-- Real-clock specs: the worker thread path end to end. Timing assertions are
-- deliberately loose (the machine may be loaded): "never early" is checked
-- strictly, lateness only against generous upper bounds.
local hwt = require("hwt")
local compat = require("compat")

local support = require("support")
local EPS, LATE = support.EPS, support.LATE
local sleep, eventfd_count = support.sleep, support.eventfd_count

-- Calls wait()+poll() until `until_time` (absolute hwt.now()) has passed.
local function drive(t, until_time)
  local ran = 0
  while true do
    local left = until_time - hwt.now()
    if left <= 0 then return ran end
    if t:wait(left) then ran = ran + t:poll() end
  end
end

describe("real clock", function()
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

  it("runs tasks across ticks in exact deadline order, equal delays in scheduling order", function()
    local t = hwt.new({ tick = 0.01 })
    local order = {}
    local lo, hi = {}, {}
    local function rec(_, name) order[#order + 1] = name end
    local function schedule(delay, name)
      local before = hwt.now()
      t:timeout(delay, rec, name)
      lo[name], hi[name] = before + delay, hwt.now() + delay
    end
    local t0 = hwt.now()
    -- 0.011, 0.012 and 0.013 share a tick: order by exact deadline anyway
    local delays = { 0.05, 0.013, 0.03, 0.011, 0.012, 0.001, 0.04, 0.021 }
    for _, d in ipairs(delays) do schedule(d, d) end
    for i = 1, 5 do schedule(0.025, "eq" .. i) end
    local scheduling_time = hwt.now() - t0
    assert.equals(#delays + 5, t:run())
    assert.equals(#delays + 5, #order)
    -- always: no task ran before one whose deadline was surely earlier
    for k = 2, #order do
      local prev, cur = order[k - 1], order[k]
      assert.is_true(lo[prev] <= hi[cur] + EPS,
        ("%s ran before %s"):format(tostring(prev), tostring(cur)))
    end
    -- equal delays: scheduling order, whatever the load
    local eq = {}
    for _, name in ipairs(order) do
      if type(name) == "string" then eq[#eq + 1] = name end
    end
    assert.same({ "eq1", "eq2", "eq3", "eq4", "eq5" }, eq)
    if scheduling_time < 0.0009 then   -- not preempted while scheduling: exact order
      assert.same({ 0.001, 0.011, 0.012, 0.013, 0.021,
                    "eq1", "eq2", "eq3", "eq4", "eq5",
                    0.03, 0.04, 0.05 }, order)
    end
    t:stop()
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

  it("still fires timeouts whose handles were dropped and collected", function()
    local t = hwt.new({ tick = 0.001 })
    local count = 0
    local seen_expired = true
    for i = 1, 100 do
      t:timeout(0.01 + i * 1e-4, function(to)
        count = count + 1
        seen_expired = seen_expired and to:is_expired()
      end)
    end
    collectgarbage()
    collectgarbage()
    assert.equals(100, t:pending())
    assert.equals(100, t:run())
    assert.equals(100, count)
    assert.is_true(seen_expired)
    t:stop()
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

  it("fires 10000 pending timeouts with random delays in deadline order", function()
    local t = hwt.new({ tick = 0.001 })
    local N = 10000
    local lo, hi, start = {}, {}, {}
    local order = {}
    local function task(_, i)
      order[#order + 1] = i
      start[i] = hwt.now()
    end
    math.randomseed(20240601)
    for i = 1, N do
      local delay = 0.2 + math.random() * 0.3
      local before = hwt.now()
      t:timeout(delay, task, i)
      lo[i] = before + delay
      hi[i] = hwt.now() + delay
    end
    assert.equals(N, t:pending())
    assert.equals(N, t:run())
    assert.equals(N, #order)
    assert.equals(0, t:pending())
    assert.equals(N, t:stats().fired)
    local seen = {}
    for k, i in ipairs(order) do
      assert.is_nil(seen[i])
      seen[i] = true
      if start[i] < lo[i] - EPS then
        error(("timeout %d started %.9f s early"):format(i, lo[i] - start[i]))
      end
      if start[i] > hi[i] + LATE then
        error(("timeout %d started %.3f s late"):format(i, start[i] - hi[i]))
      end
      if k > 1 then
        local prev = order[k - 1]
        -- prev's real deadline must not be after i's real deadline
        if lo[prev] > hi[i] + EPS then
          error(("timeout %d (deadline >= %.6f) ran before %d (deadline <= %.6f)")
            :format(prev, lo[prev], i, hi[i]))
        end
      end
    end
    t:stop()
  end)

  it("timer:now() reads the monotonic clock on the same base as hwt.now()", function()
    local t = hwt.new()
    local before = hwt.now()
    local now = t:now()
    local after = hwt.now()
    assert.is_number(now)
    assert.is_true(now >= before - 1e-6 and now <= after + 1e-6,
      ("timer:now() = %.6f, hwt.now() between %.6f and %.6f"):format(now, before, after))
    t:stop()
  end)
end)
