-- every_spec.lua: timer:every(): periodic timeouts. The first run after one
-- interval, then a fixed rate on the grid of the first deadline; missed beats
-- skipped after a late run, whose next beat is never already due; the same
-- Timeout and arguments at every run; cancel; bad intervals. Exact on the
-- manual clock, loosely on the real clock.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, MININT, EPS, noop = compat.pack, compat.mininteger, support.EPS, support.noop
local manual, show, assert_raises = support.manual, support.show, support.assert_raises
local assert_error, has_text, ns = support.assert_error, support.has_text, support.ns
local call, books = support.call, support.books

-- Calls wait()+poll() until `until_time` (absolute hwt.now()) has passed.
local function drive(t, until_time)
  local ran = 0
  while true do
    local left = until_time - hwt.now()
    if left <= 0 then return ran end
    if t:wait(left) then ran = ran + t:poll() end
  end
end

describe("timer:every", function()
  it("rejects interval <= 0 or NaN naming 'interval', and non-numbers", function()
    local timer = manual()
    for _, bad in ipairs({ 0, -1, -math.huge, 0 / 0 }) do
      assert_raises("interval", timer.every, timer, bad, function() end)
    end
    assert_raises("number expected", timer.every, timer, "often", function() end)
    assert_raises("number expected", timer.every, timer, nil, function() end)
    assert.are.equal(0, timer:pending())
  end)

  it("accepts any interval > 0, even one below a nanosecond", function()
    local timer = manual({ tick = 0.001 })
    local runs = 0
    local ok, t = pcall(timer.every, timer, 1e-10, function() runs = runs + 1 end)
    assert.is_true(ok, tostring(t))
    assert.are.equal(1, timer:advance(0.001))   -- at most one run per draining call
    local again = timer:poll()
    assert.is_true(again == 0 or again == 1)
    assert.are.equal(1 + again, runs)
    assert.is_true(t:cancel())
  end)

  it("first run after interval, then at a fixed rate", function()
    local timer = manual({ tick = 0.01 })
    local at = {}
    timer:every(0.25, function() at[#at + 1] = ns(timer:now()) end)
    assert.are.equal(0, timer:advance(0.24))
    for _ = 1, 4 do timer:advance(0.01); timer:advance(0.24) end
    assert.are.same({ ns(0.25), ns(0.5), ns(0.75), ns(1.0) }, at)
  end)

  it("keeps the grid of the first deadline when a run is late by at most one interval", function()
    local timer = manual({ tick = 0.01 })
    local at = {}
    timer:every(1, function() at[#at + 1] = ns(timer:now()) end)
    timer:advance(1.3)     -- late 0.3
    timer:advance(0.69)    -- 1.99
    assert.are.equal(1, #at)
    timer:advance(0.01)    -- 2.0: on the grid, not 2.3
    timer:advance(1.95)    -- 3.95, late 0.95
    timer:advance(0.05)    -- 4.0
    assert.are.same({ ns(1.3), ns(2.0), ns(3.95), ns(4.0) }, at)
  end)

  it("advance(10.5 * interval) runs it once; missed beats are skipped, the grid is kept", function()
    local timer = manual({ tick = 0.01 })
    local runs = 0
    local t = timer:every(0.1, function() runs = runs + 1 end)
    assert.are.equal(1, timer:advance(1.05))
    assert.are.equal(1, runs)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:advance(0.04))   -- 1.09
    assert.is_near(0.01, t:remaining(), 1e-9)  -- next beat at 1.1
    assert.are.equal(1, timer:advance(0.01))   -- 1.1
    assert.are.equal(2, runs)
    assert.are.equal(1, timer:advance(0.1))    -- 1.2
    assert.are.equal(3, runs)
  end)

  it("one run per advance however long the jump", function()
    local timer = manual({ tick = 0.001, wheel_size = 8 })
    local runs = 0
    timer:every(0.003, function() runs = runs + 1 end)
    for i = 1, 20 do
      assert.are.equal(1, timer:advance(0.0035 * i))
      assert.are.equal(i, runs)
    end
  end)

  it("passes the same timeout and the extra arguments to every run", function()
    local timer = manual()
    local seen = {}
    local t = timer:every(1, function(self, a, b) seen[#seen + 1] = { self, a, b } end, "x", 7)
    timer:advance(1); timer:advance(1); timer:advance(1)
    assert.are.equal(3, #seen)
    for _, s in ipairs(seen) do
      assert.is_true(rawequal(t, s[1]))
      assert.are.equal("x", s[2])
      assert.are.equal(7, s[3])
    end
  end)

  it("counts as one in pending() while armed and during its own run", function()
    local timer = manual()
    local inside = {}
    local t = timer:every(1, function() inside[#inside + 1] = timer:pending() end)
    assert.are.equal(1, timer:pending())
    timer:advance(1)
    assert.are.equal(1, timer:pending())
    timer:advance(1)
    assert.are.same({ 1, 1 }, inside)
    assert.is_true(t:is_expired())
    assert.is_false(t:is_cancelled())
    assert.are.equal(1, t:remaining())
    assert.is_true(has_text(tostring(t), "pending"))
    t:cancel()
    assert.are.equal(0, timer:pending())
  end)

  it("cancel from inside its own task returns true and ends the series", function()
    local timer = manual()
    local runs, result = 0, nil
    local t = timer:every(1, function(self)
      runs = runs + 1
      if runs == 3 then result = self:cancel() end
    end)
    for _ = 1, 10 do timer:advance(1) end
    assert.are.equal(3, runs)
    assert.is_true(result)
    assert.is_true(t:is_cancelled())
    assert.is_false(t:cancel())
    assert.are.equal(0, timer:pending())
    assert.are.equal(0, t:remaining())
    assert.are.equal(1, timer:stats().cancelled)
    assert.are.equal(3, timer:stats().fired)
  end)

  it("cancel from outside ends the series, even when its next beat is due", function()
    local timer = manual()
    local runs = 0
    local t = timer:every(1, function() runs = runs + 1 end)
    timer:advance(1)
    assert.is_true(t:cancel())
    timer:advance(5)
    assert.are.equal(1, runs)
    -- due but not polled
    local p = timer:every(1, function() runs = runs + 1 end)
    timer:timeout(1, function() assert.is_true(p:cancel()) end)  -- scheduled after p: runs after it
    timer:advance(1)   -- p runs (2), killer cancels p while p's next beat is pending
    timer:advance(10)
    assert.are.equal(2, runs)
    assert.are.equal(0, timer:pending())
  end)

  it("an error inside the task does not end the series", function()
    local errors = {}
    local timer = manual({ on_error = function(e) errors[#errors + 1] = e end })
    local runs = 0
    local t = timer:every(1, function()
      runs = runs + 1
      error("beat " .. runs, 0)
    end)
    for _ = 1, 4 do timer:advance(1) end
    assert.are.equal(4, runs)
    assert.are.same({ "beat 1", "beat 2", "beat 3", "beat 4" }, errors)
    assert.are.equal(1, timer:pending())
    assert.is_false(t:is_cancelled())
  end)

  it("the next beat gets its sequence number when re-armed: an earlier one-shot with the same deadline runs first", function()
    local timer = manual()
    local log = {}
    timer:every(1, function() log[#log + 1] = "P" end)        -- beats at 1, 2, 3
    timer:timeout(2, function() log[#log + 1] = "O" end)      -- deadline 2, scheduled before P's 2nd beat is armed
    timer:advance(1)
    timer:advance(1)
    assert.are.same({ "P", "O", "P" }, log)
  end)

  it("max_pending applies to every()", function()
    local timer = manual({ max_pending = 1 })
    assert.is_not_nil(timer:every(1, function() end))
    local t, err = timer:every(1, function() end)
    assert.is_nil(t)
    assert.are.equal("too many pending timeouts (max_pending = 1)", err)
    timer:advance(3)                 -- the periodic stays armed: still full
    assert.is_nil((timer:timeout(1, function() end)))
  end)

  it("accepts a numeric-string interval and TimerTask / callable tasks", function()
    local timer = manual()
    local log = {}
    local tt = { run = function(self, _, tag) log[#log + 1] = tag end }
    local callable = setmetatable({}, { __call = function(_, _, tag) log[#log + 1] = tag end })
    timer:every("0.5", tt, "run")
    timer:every(0.5, callable, "call")
    timer:advance(0.5)
    timer:advance(0.5)
    assert.are.same({ "run", "call", "run", "call" }, log)
  end)
end)

describe("timer:every with hostile arguments", function()
  it("every: 0, negative, NaN and -inf intervals name the interval", function()
    local tm = manual()
    for _, v in ipairs({ 0, -0.0, -1, -1e-300, 0 / 0, -math.huge, MININT, "0", "-1" }) do
      local ok, err = pcall(call.every, tm, v, noop)
      assert(not ok, "interval " .. show(v) .. " was accepted")
      assert(tostring(err):find("interval", 1, true), tostring(err))
    end
    assert_error(call.every, pack(tm), "bad argument #1 to 'every'", "number expected")
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("every: math.huge never runs; huge finite intervals clamp; 1e-12 runs once per pass, no burst", function()
    local tm = manual()
    local b = books(tm)
    local never = b:every(math.huge, noop)
    local far = b:every(1e308, noop)
    local count = 0
    local tiny = b:every(1e-12, function() count = count + 1 end)
    local str = b:every("0.25", noop)
    for _ = 1, 3 do tm:advance(1) end
    assert.are.equal(3, count)
    assert.are.equal(3, b:runs_of(str))
    assert.are.equal(0, b:runs_of(never) + b:runs_of(far))
    assert.are.equal(math.huge, never:remaining())
    assert(far:remaining() > 4.6e9)
    tm:advance(1e9)
    assert.are.equal(0, b:runs_of(far))
    assert.are.equal(4, b:check().pending)
    assert.is_true(tiny:cancel())
    b:check()
    b:stop()
    b:check()
  end)
end)

describe("a late periodic run never leaves its own next beat due", function()
  it("every(1), advance(2), advance(0) runs it once", function()
    local tm = manual()
    local runs = 0
    local t = tm:every(1, function() runs = runs + 1 end)
    assert.are.equal(1, tm:advance(2))
    assert.are.equal(0, tm:advance(0))
    assert.are.equal(1, runs)
    assert.are.equal(1, t:remaining())               -- next beat at 3: strictly after 2
    tm:stop()
  end)

  it("a run exactly on its deadline: the next beat is one interval later", function()
    local tm = manual()
    local at = {}
    local t = tm:every(0.25, function() at[#at + 1] = tm:now() end)
    assert.are.equal(1, tm:advance(0.25))
    assert.are.equal(0, tm:advance(0))
    assert.are.equal(0.25, t:remaining())
    assert.are.equal(1, tm:advance(0.25))
    assert.are.same({ 0.25, 0.5 }, at)
    tm:stop()
  end)

  it("late by exact multiples: one run, the next beat the grid point after now", function()
    local tm = manual()
    local runs = 0
    local t = tm:every(1, function() runs = runs + 1 end)
    for k = 1, 4 do
      local before = runs
      tm:advance(t:remaining() + k)     -- k whole intervals past the deadline
      assert.are.equal(before + 1, runs)
      assert.are.equal(1, t:remaining())
      assert.are.equal(0, tm:advance(0))
    end
    tm:stop()
  end)
end)

describe("timer:every on the real clock", function()
  it("runs every() repeatedly at fixed rate, and cancel() ends the series", function()
    local t = hwt.new({ tick = 0.001 })
    local starts = {}
    local interval = 0.02
    local before = hwt.now()
    local to = t:every(interval, function() starts[#starts + 1] = hwt.now() end)
    drive(t, before + 0.3)
    local n = #starts
    assert.is_true(n >= 3, "ran " .. n .. " times in 0.3 s")
    assert.is_true(n <= 0.3 / interval + 2, "ran " .. n .. " times in 0.3 s")
    for k, start in ipairs(starts) do
      -- beat k is at first_deadline + (k-1) * interval or later (skipped beats)
      assert.is_true(start >= before + k * interval - EPS, "beat " .. k .. " early")
    end
    assert.equals(1, t:pending())
    assert.is_true(to:is_expired())
    assert.is_true(to:cancel())
    assert.equals(0, t:pending())
    drive(t, hwt.now() + 0.1)
    assert.equals(n, #starts)
    assert.is_false(to:cancel())
    t:stop()
  end)
end)
