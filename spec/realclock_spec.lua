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
