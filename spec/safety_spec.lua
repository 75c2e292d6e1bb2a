-- safety_spec.lua: hostile use that no single subject covers: the
-- metatables are protected (getmetatable() gives a name; hwt.Timer and
-- hwt.Timeout still extend every object), every method checks its self, and
-- methods ignore extra arguments and still answer after stop(). Hostile
-- arguments to one method are in that method's spec.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, unpack, noop, manual = compat.pack, compat.unpack, support.noop, support.manual
local assert_error, wrong_values = support.assert_error, support.wrong_values

describe("the metatables are protected", function()
  it("getmetatable() on a Timer or a Timeout gives its name, not the metatable", function()
    local tm = manual()
    assert.are.equal("hwt.Timer", getmetatable(tm))
    if support.cdata_timeouts then
      assert.are_not.equal("table", type(getmetatable(tm:timeout(1, noop))))
    else
      assert.are.equal("hwt.Timeout", getmetatable(tm:timeout(1, noop)))
    end
    assert.is_false(pcall(function() getmetatable(tm).__gc = nil end))
    assert.are.equal(1, tm:pending())
    tm:stop()
  end)

  it("removing __gc fails, so dropping the timer cannot free what the worker uses (a fresh process)", function()
    local out, err = support.run_child([[
      local hwt = require("hwt")
      local t = hwt.new{tick = 0.001}
      getmetatable(t).__gc = nil
      for i = 1, 100 do t:timeout(0.02, function() end) end
      t = nil; collectgarbage(); collectgarbage()
      local t0 = hwt.now(); while hwt.now() - t0 < 0.2 do end
      print("finished")
    ]])
    assert(not err:find("Sanitizer", 1, true), err)
    assert.are.equal("", out)
    assert.matches("attempt to index a string value", err)
  end)

  it("hwt.Timer and hwt.Timeout still extend every timer and timeout", function()
    local tm = manual()
    hwt.Timer.spec_probe = function(self) return self:pending() end
    hwt.Timeout.spec_probe = function(self) return self:is_cancelled() end
    local t = tm:timeout(1, noop)
    assert.are.equal(1, tm:spec_probe())
    assert.is_false(t:spec_probe())
    hwt.Timer.spec_probe, hwt.Timeout.spec_probe = nil, nil
    tm:stop()
  end)
end)

describe("methods called on the wrong object", function()
  local timer_calls = {
    { "timeout", 1, noop }, { "every", 1, noop }, { "poll" }, { "wait", 0 }, { "run" },
    { "advance", 1 }, { "pending" }, { "fd" }, { "stats" }, { "stop" }, { "now" },
  }

  local timeout_calls = { "cancel", "is_cancelled", "is_expired", "timer", "task", "remaining" }

  it("every Timer method raises 'hwt.Timer expected' for a wrong self", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    for _, call in ipairs(timer_calls) do
      local method = hwt.Timer[call[1]]
      assert.is_function(method, call[1])
      for _, case in ipairs(wrong_values({ Timeout = t })) do
        local message = assert_error(method, pack(case[2], unpack(call, 2)), "hwt.Timer expected")
        assert(message:find("bad argument #1", 1, true) or message:find("bad self", 1, true),
          call[1] .. "(" .. case[1] .. "): " .. message)
      end
      assert_error(method, pack(), "hwt.Timer expected")            -- no self at all
    end
    tm:stop()
  end)

  it("a Timeout passed where a Timer is expected is named as such", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    assert_error(hwt.Timer.timeout, pack(t, 1, noop), "hwt.Timer expected, got hwt.Timeout")
    assert_error(hwt.Timer.stop, pack(t), "hwt.Timer expected, got hwt.Timeout")
    assert.are.equal(1, tm:pending())
    tm:stop()
  end)

  it("Timer metamethods (__tostring, __close, __gc) check self too", function()
    local tm = manual()
    local mt = debug.getmetatable(tm)
    for _, name in ipairs({ "__tostring", "__close", "__gc" }) do
      for _, case in ipairs(wrong_values({ Timeout = tm:timeout(1, noop) })) do
        assert_error(mt[name], pack(case[2]), "hwt.Timer expected")
      end
    end
    assert.are.equal(3, tm:pending())            -- one Timeout per metamethod, untouched
    tm:stop()
  end)

  it("every Timeout method raises 'hwt.Timeout expected' for a wrong self, a Timer included", function()
    local tm = manual()
    for _, name in ipairs(timeout_calls) do
      local method = hwt.Timeout[name]
      assert.is_function(method, name)
      for _, case in ipairs(wrong_values({ Timer = tm })) do
        assert_error(method, pack(case[2]), "hwt.Timeout expected")
      end
      assert_error(method, pack(tm), "hwt.Timeout expected, got hwt.Timer")
      assert_error(method, pack(), "hwt.Timeout expected")
    end
    local mt = debug.getmetatable(tm:timeout(1, noop))
    for _, name in ipairs({ "__tostring", "__close" }) do
      for _, case in ipairs(wrong_values({ Timer = tm })) do
        -- a cdata's metatable is the FFI's own, which checks its self
        assert_error(mt[name], pack(case[2]), support.cdata_timeouts and "cdata expected" or "hwt.Timeout expected")
      end
      if support.cdata_timeouts then break end           -- the FFI's has no __close
    end
    tm:stop()
  end)
end)

describe("methods called with extra arguments", function()
  it("now(), fd(), stats() and stop() ignore extra arguments and survive stop()", function()
    local tm = manual()
    assert.are.equal(0, tm:now("x", {}))
    local fd = tm:fd(io.stdout)
    assert.is_true(compat.is_integer(fd), "fd: an integer")
    assert(fd >= 0)
    local stats = tm:stats({})
    for _, k in ipairs({ "pending", "due", "fired", "cancelled", "ticks", "worker_wakeups", "wheel_size",
                         "max_pending" }) do
      assert.is_true(compat.is_integer(stats[k]), k)
    end
    assert.are.equal("number", type(stats.late_max))
    assert.are.equal("manual", stats.clock)
    assert.is_false(stats.stopped)
    tm:timeout(1, noop)
    assert.are.equal(1, #tm:stop(42))
    assert.are.same({}, tm:stop())
    assert.are.equal(fd, tm:fd())
    assert.is_true(tm:stats().stopped)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, tm:poll())
    assert.are.equal(0, tm:advance(1))
    assert.matches("stopped", tostring(tm), 1, true)
    local ok, now = pcall(tm.now, tm)            -- a number, or a clear error
    assert(ok and type(now) == "number" or tostring(now):find("timer is stopped", 1, true), tostring(now))
  end)
end)
