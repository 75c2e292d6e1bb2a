-- next_due_spec.lua: timer:next_due(), the seconds until the next timeout
-- is due (0 when one is, nil when none ever will be), and timer:on_earlier(fn),
-- the watcher a host driver sets to hear, synchronously, of an arming earlier
-- than the next_due() it last read.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local YIELDS, noop, manual = compat.tasks_yield, support.noop, support.manual
local collecting, start, resume = support.collecting, support.start, support.resume
local assert_yield_errors, yielder = support.assert_yield_errors, support.yielder
local appender = support.appender

describe("timer:next_due()", function()
  it("is nil with nothing pending, with only math.huge delays, and after stop", function()
    local tm = support.manual()
    assert.is_nil(tm:next_due())
    local never = tm:timeout(math.huge, noop)
    tm:every(math.huge, noop)
    assert.are.equal(2, tm:pending())
    assert.is_nil(tm:next_due())
    never:cancel()
    tm:timeout(2, noop)
    assert.are.equal(2, tm:next_due())
    tm:stop()
    assert.is_nil(tm:next_due())
  end)

  it("is nil once the last timeout is cancelled or has run", function()
    local tm = support.manual()
    local t = tm:timeout(1, noop)
    assert.are.equal(1, tm:next_due())
    t:cancel()
    assert.is_nil(tm:next_due())
    tm:timeout(1, noop)
    tm:advance(1)
    assert.is_nil(tm:next_due())
  end)

  it("is 0 when something is due: a delay-0 timeout, or one scheduled by a task for now", function()
    local tm = support.manual()
    tm:timeout(0, noop)
    assert.are.equal(0, tm:next_due())
    assert.are.equal(1, tm:poll())
    assert.is_nil(tm:next_due())
    local inside
    tm:timeout(1, function()
      tm:timeout(0, noop)
      inside = tm:next_due()
    end)
    tm:timeout(5, noop)
    assert.are.equal(1, tm:advance(1))
    assert.are.equal(0, inside)
    assert.are.equal(0, tm:next_due())                   -- not run by that advance()
    assert.are.equal(1, tm:poll())
    assert.are.equal(4, tm:next_due())
  end)

  it("is exact on the manual clock and decreases as the clock advances", function()
    local tm = support.manual()
    tm:timeout(1.5, noop)
    tm:timeout(0.25, noop)
    tm:timeout(0.75, noop)
    assert.are.equal(0.25, tm:next_due())
    tm:advance(0.1)
    assert.are.equal(0.15, tm:next_due())
    tm:advance(0.15)                                     -- runs the first
    assert.are.equal(0.5, tm:next_due())
    local last = tm:next_due()
    for _ = 1, 4 do
      tm:advance(0.1)
      local now = tm:next_due()
      assert.is_true(now < last, ("%s then %s"):format(last, now))
      last = now
    end
    assert.are.equal(0.1, tm:next_due())
    tm:advance(0.1)
    assert.are.equal(0.75, tm:next_due())
  end)

  it("reports the next one after the earliest is cancelled", function()
    local tm = support.manual()
    local first_one = tm:timeout(0.5, noop)
    local second = tm:timeout(1, noop)
    tm:timeout(2, noop)
    assert.are.equal(0.5, tm:next_due())
    first_one:cancel()
    assert.are.equal(1, tm:next_due())
    second:cancel()
    assert.are.equal(2, tm:next_due())
  end)

  it("follows a periodic timeout beat by beat", function()
    local tm = support.manual()
    tm:every(0.5, noop)
    assert.are.equal(0.5, tm:next_due())
    tm:advance(0.5)
    assert.are.equal(0.5, tm:next_due())
    tm:advance(0.25)
    assert.are.equal(0.25, tm:next_due())
  end)

  it("is 0 while a drain is suspended with due tasks left", function()
    local tm, errors = collecting()
    local log = {}
    tm:timeout(0, yielder(log, "a"))
    tm:timeout(0, appender(log, "b"))
    tm:timeout(3, noop)
    local co = start(function() return tm:poll() end)
    if YIELDS then
      assert.are.equal(0, tm:next_due())                 -- b
      resume(co)
    else
      assert_yield_errors(errors, 1)
    end
    assert.are.equal("dead", coroutine.status(co))
    assert.are.equal(3, tm:next_due())
  end)

  it("on the real clock: within a tick above the delay, and 0 once due", function()
    local tm = hwt.new({ tick = 0.01 })
    tm:timeout(0.2, noop)
    local d = tm:next_due()
    assert.is_true(d > 0.1 and d <= 0.2 + 0.01 + 1e-9, tostring(d))
    support.sleep(0.25)
    assert.are.equal(0, tm:next_due())
    assert.are.equal(1, tm:poll())
    assert.is_nil(tm:next_due())
    tm:stop()
  end)

  it("with a shared engine, one timer's value ignores another timer's earlier timeouts", function()
    local a, b = hwt.new(), hwt.new()
    assert.is_true(a:stats().shared and b:stats().shared)
    a:timeout(10, noop)
    b:timeout(0.02, noop)
    local da, db = a:next_due(), b:next_due()
    assert.is_true(da > 9 and da <= 10.01 + 1e-9, tostring(da))
    assert.is_true(db >= 0 and db <= 0.03 + 1e-9, tostring(db))
    support.sleep(0.06)                                  -- b's is due, not polled
    assert.are.equal(0, b:next_due())
    da = a:next_due()
    assert.is_true(da > 9 and da < 10, tostring(da))
    local c = hwt.new()
    assert.is_nil(c:next_due())                          -- nothing of its own
    a:stop()
    b:stop()
    c:stop()
  end)

  it("next_due() on the manual clock is the exact time left", function()
    local timer = manual({ tick = 1 / 60 })
    timer:timeout(0.5, noop)
    assert.are.equal(0.5, timer:next_due())
    timer:advance(0.25)
    assert.are.equal(0.25, timer:next_due())
    timer:stop()
  end)
end)

describe("timer:on_earlier()", function()
  local function watched(opts)
    local tm, errors = collecting(opts)
    local heard = {}
    tm:on_earlier(function(seconds) heard[#heard + 1] = seconds end)
    return tm, heard, errors
  end

  it("hears, synchronously, of a timeout earlier than the last reported, not of a later one", function()
    local tm, heard = watched()
    tm:timeout(1, noop)
    assert.are.same({ 1 }, heard)                         -- baseline "never": any arming is earlier
    tm:timeout(2, noop)
    assert.are.same({ 1 }, heard)
    tm:timeout(0.5, noop)
    assert.are.same({ 1, 0.5 }, heard)
    tm:timeout(0.5, noop)                                 -- not earlier: the same
    tm:timeout(math.huge, noop)
    assert.are.same({ 1, 0.5 }, heard)
    tm:timeout(0, noop)
    assert.are.same({ 1, 0.5, 0 }, heard)
  end)

  it("compares with what next_due() last returned", function()
    local tm, heard = watched()
    local t = tm:timeout(1, noop)
    tm:timeout(3, noop)
    heard[1] = nil
    t:cancel()
    assert.are.equal(3, tm:next_due())
    tm:timeout(2, noop)
    assert.are.same({ 2 }, heard)
    assert.are.equal(2, tm:next_due())
    tm:timeout(2.5, noop)
    assert.are.same({ 2 }, heard)
    tm:advance(1)                                        -- next_due is now 1
    tm:timeout(0.5, noop)
    assert.are.same({ 2, 0.5 }, heard)
  end)

  it("on_earlier(fn) resets the baseline to never; next_due() sets it again", function()
    local tm = support.manual()
    tm:timeout(1, noop)
    assert.are.equal(1, tm:next_due())
    local heard = {}
    tm:on_earlier(function(s) heard[#heard + 1] = s end)
    tm:timeout(2, noop)
    assert.are.same({ 2 }, heard)
    assert.are.equal(1, tm:next_due())
    tm:timeout(1.5, noop)
    assert.are.same({ 2 }, heard)
  end)

  it("hears of a delay-0 timeout with 0; not of one due no earlier than the time last read", function()
    local tm, heard = watched()
    tm:timeout(1, function() tm:timeout(0, noop) end)
    assert.are.same({ 1 }, heard)
    tm:timeout(5, noop)
    assert.are.equal(1, tm:next_due())             -- the host wakes at 1
    assert.are.equal(1, tm:advance(1))             -- its wake: the task's delay-0 timeout
    assert.are.same({ 1 }, heard)                  -- is due at 1, not earlier: not told
    assert.are.equal(0, tm:next_due())             -- the host reads again after its poll
    tm:advance(0.5)
    tm:timeout(0.25, noop)
    assert.are.same({ 1 }, heard)                  -- 1.75 is not earlier than 1 (due)
    local tm2, heard2 = watched()
    tm2:timeout(0, noop)
    assert.are.same({ 0 }, heard2)
  end)

  it("does not hear a second time of a delay-0 timeout when next_due() already read 0", function()
    local tm, heard = watched()
    tm:advance(1)
    tm:timeout(0, noop)
    assert.are.same({ 0 }, heard)
    assert.are.equal(0, tm:next_due())
    tm:timeout(0, noop)                                  -- next_due() stays 0: not earlier
    assert.are.same({ 0 }, heard)
  end)

  it("hears of a periodic's re-arm when it is earlier than what was last read", function()
    local tm, heard = watched()
    local read
    tm:every(1, function() read = tm:next_due() end)
    tm:timeout(5, noop)
    assert.are.same({ 1 }, heard)
    assert.are.equal(1, tm:next_due())
    assert.are.equal(1, tm:advance(1))
    assert.are.equal(4, read)                            -- read during the run: the one at 5
    assert.are.same({ 1, 1 }, heard)                     -- the re-arm at 2 is earlier than 5
    assert.are.equal(1, tm:next_due())
  end)

  it("does not hear of a periodic's re-arm that is later than what was last read", function()
    local tm, heard = watched()
    tm:every(1, noop)
    tm:timeout(5, noop)
    assert.are.equal(1, tm:next_due())
    assert.are.equal(1, tm:advance(1))                   -- re-armed at 2: later than 1
    assert.are.same({ 1 }, heard)
  end)

  it("hears with 0 of a hand-off given back (spawn raised, or fn collected)", function()
    local tm, heard = watched()
    tm:timeout(0, noop)
    heard[1] = nil
    local read
    local ok = pcall(tm.poll, tm, nil, function()
      read = tm:next_due()                               -- handed: nothing due, nothing armed
      error("no room")
    end)
    assert.is_false(ok)
    assert.is_nil(read)
    assert.are.same({ 0 }, heard)
    heard[1] = nil
    collectgarbage("stop")                               -- no give-back before the read below
    tm:poll(nil, function() end)
    assert.is_nil(tm:next_due())
    collectgarbage("restart")
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.same({ 0 }, heard)
    assert.are.equal(0, tm:next_due())
    assert.are.equal(1, tm:poll())
  end)

  it("is not called after on_earlier(nil); a new fn replaces the old", function()
    local tm, heard = watched()
    tm:on_earlier(nil)
    tm:timeout(1, noop)
    assert.are.same({}, heard)
    local other = {}
    tm:on_earlier(function(s) other[#other + 1] = s end)
    tm:on_earlier(function(s) heard[#heard + 1] = s end)
    tm:timeout(0.5, noop)
    assert.are.same({ 0.5 }, heard)
    assert.are.same({}, other)
    local callable_heard
    tm:on_earlier(setmetatable({}, { __call = function(_, s) callable_heard = s end }))
    tm:timeout(0.25, noop)
    assert.are.equal(0.25, callable_heard)
  end)

  it("does not hear of another timer's timeouts on a shared engine", function()
    local a, b = hwt.new(), hwt.new()
    assert.is_true(a:stats().shared and b:stats().shared)
    local heard = {}
    a:on_earlier(function(s) heard[#heard + 1] = s end)
    a:timeout(10, noop)
    assert.are.equal(1, #heard)
    assert.is_true(heard[1] > 9 and heard[1] <= 10.01 + 1e-9, tostring(heard[1]))
    b:timeout(0, noop)
    b:timeout(0.5, noop)
    assert.are.equal(1, #heard)
    a:stop()
    b:stop()
  end)

  it("errors in fn go to on_error (with no Timeout); the timeout is scheduled all the same", function()
    local tm, errors = collecting()
    local oops = {}
    tm:on_earlier(function() error(oops) end)
    local ran = false
    local t = tm:timeout(1, function() ran = true end)
    assert.is_true(hwt.is_timeout(t))
    assert.are.equal(1, #errors)
    assert.is_true(rawequal(oops, errors[1].err))
    assert.is_nil(errors[1].timeout)
    assert.are.equal(1, tm:pending())
    assert.are.equal(1, tm:advance(1))
    assert.is_true(ran)
  end)

  it("a bad argument raises \"bad argument #1 to 'on_earlier' (function or nil expected)\"", function()
    local tm = support.manual()
    for _, bad in ipairs({ 42, "f", {}, true }) do
      local ok, err = pcall(function() tm:on_earlier(bad) end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'on_earlier' (function or nil expected)", tostring(err), 1, true)
    end
  end)

  it("a watcher told of a periodic's next beat runs before the next due timeout is taken", function()
    local timer = manual()
    local ran = {}
    timer:every(1, function() ran[#ran + 1] = "periodic" end)
    local one = timer:timeout(1, function() ran[#ran + 1] = "one-shot" end)
    local stopped
    timer:on_earlier(function() stopped = stopped or timer:stop() end)
    timer:advance(1)
    assert.are.same({ "periodic" }, ran)
    assert.are.equal(1, #stopped)
    assert.are.equal(one, stopped[1])
    assert.is_true(one:is_cancelled())
  end)

  it("on_earlier(nil) removes the watcher", function()
    local errors, told = {}, 0
    local timer = manual{ on_error = function(err) errors[#errors + 1] = err end }
    timer:on_earlier(function() told = told + 1 end)
    timer:timeout(2, noop)
    assert.are.equal(1, told)
    timer:on_earlier(nil)
    timer:timeout(1, noop)
    timer:on_earlier()
    timer:timeout(0.5, noop)
    assert.are.equal(1, told)
    assert.are.same({}, errors)
  end)
end)
