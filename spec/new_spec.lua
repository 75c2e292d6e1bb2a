-- new_spec.lua: the module (its version, hwt.new, the names of its
-- userdata, the methods it exposes) and hwt.new([opts]): each option's
-- default, range and error, unknown keys, and the options together.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, MAXINT, MININT, noop = compat.pack, compat.maxinteger, compat.mininteger, support.noop
local manual, show, error_of = support.manual, support.show, support.error_of
local assert_raises, assert_error = support.assert_raises, support.assert_error
local wrong_values, books = support.wrong_values, support.books

describe("module hwt", function()
  it("has _VERSION 'hwt 0.2.0'", function()
    assert.are.equal("hwt 0.2.0", hwt._VERSION)
  end)

  it("exposes new() and names its userdata hwt.Timer and hwt.Timeout", function()
    assert.are.equal("function", type(hwt.new))
    local timer = manual()
    assert.are.equal("userdata", type(timer))
    assert.are.equal("hwt.Timer", getmetatable(timer))
    assert.are.equal("hwt.Timer", tostring(timer):sub(1, 9))
    local t = timer:timeout(1, function() end)
    assert.are.equal(support.timeout_type, type(t))
    assert.is_true(hwt.is_timeout(t))
    if support.cdata_timeouts then
      assert.are_not.equal("table", type(getmetatable(t)))
    else
      assert.are.equal("hwt.Timeout", getmetatable(t))
    end
    timer:stop()
    assert.are.equal("hwt.Timer", tostring(timer):sub(1, 9))
  end)

  it("exposes the new methods on hwt.Timer and hwt.Timeout", function()
    assert.are.equal("function", type(hwt.Timer.run_for))
    assert.are.equal("function", type(hwt.Timer.now))
    assert.are.equal("function", type(hwt.Timer.timeouts))
    assert.are.equal("function", type(hwt.Timeout.reset))
    assert.are.equal("function", type(hwt.Timeout.deadline))
  end)
end)

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

describe("hwt.new with hostile options", function()
  it("rejects a non-table opts argument, naming argument #1", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    for _, case in ipairs(wrong_values({ Timer = tm, Timeout = t })) do
      local name, v = case[1], case[2]
      if v ~= nil and type(v) ~= "table" then
        local message = assert_error(hwt.new, pack(v), "bad argument #1 to ", compat.called_name("new"),
                                     "table expected")
        assert(message:find("got", 1, true), name .. ": " .. message)
      end
    end
    tm:stop()
  end)

  it("names an unknown option key (typos do not pass silently)", function()
    for _, key in ipairs({ "wheelsize", "Tick", "on_eror", "maxPending", "clocks", "" }) do
      assert_error(hwt.new, pack({ [key] = 1 }), "unknown option '" .. key .. "'")
    end
  end)

  it("rejects option names that are not strings", function()
    for _, key in ipairs({ 1, true, 1.5, io.stdout, print }) do
      assert_error(hwt.new, pack({ [key] = 1 }), "option names must be strings")
    end
    assert_error(hwt.new, pack({ 0.01 }), "option names must be strings")
  end)

  it("tick: wrong types name the option", function()
    local tm = manual()
    for _, v in ipairs({ "abc", "", {}, true, false, print, io.stdout, tm }) do
      assert_error(hwt.new, pack({ tick = v }), "bad option 'tick' to 'new'", "number expected")
    end
    tm:stop()
  end)

  it("tick: 0, negative, NaN, infinite, below 1e-6 and beyond 2^62 ns name the option", function()
    local bad = { 0, -0.0, -1, -1e-6, 1e-12, 1e-7, 9.99e-7, 0 / 0, -(0 / 0), math.huge, -math.huge,
                  1e308, -1e308, 2 ^ 63, MAXINT, MININT, 4.7e9, "0", "-1", "nan", "inf" }
    for _, v in ipairs(bad) do
      local ok, err = pcall(hwt.new, { tick = v })
      assert(not ok, "tick = " .. show(v) .. " was accepted")
      assert(tostring(err):find("bad option 'tick' to 'new'", 1, true), tostring(err))
    end
  end)

  it("tick: 1e-6 exactly is accepted and is the smallest tick", function()
    local tm = manual({ tick = 1e-6 })
    assert.are.equal(1e-6, tm:stats().tick)
    local ran = 0
    tm:timeout(1e-6, function() ran = ran + 1 end)
    assert.are.equal(0, tm:advance(0.999e-6))
    assert.are.equal(1, tm:advance(0.001e-6 + 1e-15))
    assert.are.equal(1, ran)
    tm:stop()
    hwt.new({ tick = 1e-6 }):stop()            -- the real clock takes it too
  end)

  it("tick: numeric strings are numbers", function()
    local tm = manual({ tick = "0.5" })
    assert.are.equal(0.5, tm:stats().tick)
    tm:stop()
    tm = manual({ tick = " 0x10 " })
    assert.are.equal(16, tm:stats().tick)
    tm:stop()
  end)

  it("tick: a huge tick (1e9 s) works; manual deadlines stay exact", function()
    local tm = manual({ tick = 1e9 })
    local b = books(tm)
    b:timeout(1, noop)
    assert.are.equal(0, tm:advance(0.5))
    assert.are.equal(1, tm:advance(0.5))
    assert.are.equal(0, tm:stats().ticks)
    b:timeout(2e9, noop)
    assert.are.equal(0, tm:advance(2e9 - 1))
    assert.are.equal(1, tm:advance(1))
    assert.are.equal(2, tm:stats().ticks)
    b:check()
    tm:stop()
  end)

  it("wheel_size: wrong types and values outside 1 .. 2^30 name the option", function()
    local bad = { 0, -1, 1.5, 0.5, 2 ^ 30 + 1, 2 ^ 31, 2 ^ 32, 0 / 0, math.huge, -math.huge, 1e308,
                  2 ^ 63, MAXINT, MININT, "abc", "1.5", "0", "", true, {}, print, io.stdout }
    for _, v in ipairs(bad) do
      local ok, err = pcall(hwt.new, { wheel_size = v, clock = "manual" })
      assert(not ok, "wheel_size = " .. show(v) .. " was accepted")
      assert(tostring(err):find("bad option 'wheel_size' to 'new'", 1, true), tostring(err))
    end
  end)

  it("wheel_size: rounded up to a power of two (stats().wheel_size), and the wheel works", function()
    local cases = { { 1, 1 }, { 2, 2 }, { 3, 4 }, { 5, 8 }, { 2.0, 2 }, { "8", 8 }, { "9", 16 },
                    { 1000, 1024 }, { 2 ^ 20 + 1, 2 ^ 21 } }
    for _, case in ipairs(cases) do
      local tm = manual({ wheel_size = case[1], tick = 0.001 })
      assert.are.equal(case[2], tm:stats().wheel_size, "wheel_size = " .. show(case[1]))
      local b = books(tm)
      local order = {}
      for _, d in ipairs({ 0.5, 0.003, 70, 0.002, 5000, 0.0021 }) do
        b:timeout(d, function() order[#order + 1] = d end)
      end
      tm:advance(6000)
      assert.are.same({ 0.002, 0.0021, 0.003, 0.5, 70, 5000 }, order)
      b:check()
      tm:stop()
    end
  end)

  it("wheel_size = 2^30 (8 GiB of address space) works once and is stopped at once", function()
    local ok, tm = pcall(hwt.new, { wheel_size = 2 ^ 30, clock = "manual" })
    if not ok then                             -- acceptable: a clear refusal
      assert(tostring(tm):find("not enough memory", 1, true), tostring(tm))
      return
    end
    assert.are.equal(2 ^ 30, tm:stats().wheel_size)
    local ran = 0
    tm:timeout(0.05, function() ran = ran + 1 end)
    assert.are.equal(1, tm:advance(0.1))
    assert.are.equal(1, ran)
    assert.are.same({}, tm:stop())
    tm = nil
    collectgarbage()
    collectgarbage()
  end)

  it("max_pending: wrong types, negative, fractional, NaN and out-of-range values name the option", function()
    local bad = { -1, 0.5, -0.5, 0 / 0, math.huge, -math.huge, 2 ^ 63, 1e308, MININT,
                  "x", "1.5", true, {}, print, io.stdout }
    for _, v in ipairs(bad) do
      local ok, err = pcall(hwt.new, { max_pending = v, clock = "manual" })
      assert(not ok, "max_pending = " .. show(v) .. " was accepted")
      assert(tostring(err):find("bad option 'max_pending' to 'new'", 1, true), tostring(err))
    end
  end)

  it("max_pending: 0 is unlimited, math.maxinteger works, \"2\" caps at two with nil, err", function()
    local tm = manual({ max_pending = 0 })
    for _ = 1, 2000 do assert.is_truthy(tm:timeout(1, noop)) end
    assert.are.equal(2000, #tm:stop())
    tm = manual({ max_pending = MAXINT })
    assert.is_truthy(tm:timeout(1, noop))
    assert.are.equal(MAXINT, tm:stats().max_pending)
    tm:stop()
    tm = manual({ max_pending = "2" })
    local b = books(tm)
    assert.is_truthy(b:timeout(1, noop))
    assert.is_truthy(b:every(1, noop))
    local t, err = b:timeout(1, noop)
    assert.is_nil(t)
    assert.matches("too many pending timeouts", err, 1, true)
    t, err = b:every(1, noop)
    assert.is_nil(t)
    assert.matches("too many pending timeouts", err, 1, true)
    b:check()
    tm:stop()
  end)

  it("clock: anything but \"monotonic\" or \"manual\" names the option", function()
    for _, v in ipairs({ "bogus", "MANUAL", "", 1, true, {}, print, io.stdout }) do
      assert_error(hwt.new, pack({ clock = v }), "bad option 'clock' to 'new'")
    end
  end)

  it("on_error: a non-callable names the option; a callable table is accepted and used", function()
    for _, v in ipairs({ 42, "f", true, {}, io.stdout }) do
      assert_error(hwt.new, pack({ on_error = v }), "bad option 'on_error' to 'new'")
    end
    local got
    local handler = setmetatable({}, { __call = function(_, err) got = err end })
    local tm = manual({ on_error = handler })
    tm:timeout(0, function() error("from task", 0) end)
    assert.are.equal(1, tm:advance(0))
    assert.are.equal("from task", got)
    tm:stop()
  end)
end)
