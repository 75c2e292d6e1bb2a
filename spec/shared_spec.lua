-- Shared engines: timers with the same tick and wheel_size share one worker
-- thread, yet each keeps its own queue, fd, counters and stop().
local hwt = require("hwt")
local support = require("support")
local sleep, threads, threads_settle = support.sleep, support.threads, support.threads_settle
local LATE, full_gc = support.LATE, support.full_gc

-- Each spec uses its own tick, so that no other spec's timers share its engine.
describe("shared engines", function()
  it("1000 timers in one state use one worker thread; each fires only through its own poll()", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0037
    local timers, fired_by = {}, {}
    local function make(count)
      for i = 1, count do
        local t = hwt.new({ tick = tick })
        t:fd()                                     -- the worker drives the wheel for it
        local deadline = hwt.now() + 0.05
        t:timeout(0.05, function(_, id)
          fired_by[#fired_by + 1] = { id = id, late = hwt.now() - deadline }
        end, i)
        timers[i] = t
      end
    end
    make(1000)
    assert.equals(base + 1, threads())
    sleep(0.05 + 4 * tick)
    for i = 1, 1000 do
      assert.equals(1, timers[i]:stats().due)      -- due, waiting for its own poll
      assert.is_true(timers[i]:stats().shared)
    end
    for i = 1, 1000 do
      assert.equals(1, timers[i]:poll())
      assert.equals(i, fired_by[i].id)
      assert.is_true(fired_by[i].late >= -1e-9 and fired_by[i].late <= LATE + 0.1)
    end
    for i = 1, 1000 do timers[i]:stop() end
    assert.equals(base, threads_settle(base))       -- the last stop joined it
  end)

  it("stopping one timer returns its timeouts and leaves the others firing", function()
    local tick = 0.0041
    local a, b, c = hwt.new({ tick = tick }), hwt.new({ tick = tick }), hwt.new({ tick = tick })
    local ran = { a = 0, b = 0, c = 0 }
    for i = 1, 20 do
      a:timeout(i * 0.002, function() ran.a = ran.a + 1 end)
      b:timeout(i * 0.002, function() ran.b = ran.b + 1 end)
      c:timeout(i * 0.002, function() ran.c = ran.c + 1 end)
    end
    assert.equals(20, #b:stop())
    assert.equals(20, a:run())
    assert.equals(20, c:run())
    assert.same({ a = 20, b = 0, c = 20 }, ran)
    a:stop(); c:stop()
  end)

  it("timers collected while others fire: the rest fire on time, then the thread exits", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0043
    local kept, ran = {}, 0
    local function make()
      for i = 1, 50 do
        local t = hwt.new({ tick = tick })
        t:fd()
        for k = 1, 20 do t:timeout(k * 0.003, function() ran = ran + 1 end) end
        if i % 2 == 0 then kept[#kept + 1] = t end
      end
    end
    make()
    assert.equals(base + 1, threads())
    full_gc()                                      -- 25 timers collected now
    local ticks_done = 0
    for _, t in ipairs(kept) do ticks_done = ticks_done + t:run() end
    assert.equals(25 * 20, ticks_done)
    assert.equals(25 * 20, ran)
    kept = nil
    full_gc()
    assert.equals(base, threads_settle(base))
  end)

  it("a stopped engine's worker comes back for a new timer with the same settings", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0047
    local first = hwt.new({ tick = tick })
    first:fd()
    first:timeout(0, function() end)
    first:stop()
    assert.equals(base, threads_settle(base))
    local second = hwt.new({ tick = tick })
    second:fd()
    assert.equals(base + 1, threads())
    local ran = false
    second:timeout(0.01, function() ran = true end)
    assert.equals(1, second:run())
    assert.is_true(ran)
    second:stop()
    first = nil
  end)

  it("a timer that joins a running engine counts ticks from its own creation", function()
    local tick = 0.0059
    local old = hwt.new({ tick = tick })
    old:timeout(60, function() end)
    sleep(0.2)
    local created = hwt.now()
    local new = hwt.new({ tick = tick })
    sleep(0.05)
    local ticks = new:stats().ticks
    assert.is_true(ticks <= (hwt.now() - created) / tick + 1, "ticks " .. ticks)
    assert.is_true(old:stats().ticks >= ticks + math.floor(0.2 / tick) - 1)
    old:stop(); new:stop()
  end)

  it("shared = false gives a timer its own worker; manual timers never share", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0053
    local private1 = hwt.new({ tick = tick, shared = false })
    local private2 = hwt.new({ tick = tick, shared = false })
    private1:fd()
    private2:fd()
    assert.equals(base + 2, threads())
    assert.is_false(private1:stats().shared)
    assert.is_false(hwt.new({ clock = "manual", tick = tick }):stats().shared)
    private1:stop(); private2:stop()
    assert.equals(base, threads_settle(base))
    assert.has_error(function() hwt.new({ shared = "yes" }) end,
      "bad option 'shared' to 'new' (boolean expected, got string)")
  end)
end)
