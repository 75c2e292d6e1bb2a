-- reset_spec.lua: Timeout:reset([delay]): re-arms a timeout in any state
-- (pending, due, running, expired, cancelled, handed to spawn) at now + delay
-- with a new sequence number; the default delay; periodic series; max_pending;
-- reset inside draining calls, across drains and yields; bad delays.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local YIELDS, noop, manual = compat.tasks_yield, support.noop, support.manual
local collecting, error_of = support.collecting, support.error_of
local assert_raises, assert_same_objects = support.assert_raises, support.assert_same_objects
local logger, start, resume, first = support.logger, support.start, support.resume, support.first
local sleep = support.sleep

-- Raises, with a message containing at least one of the substrings.
local function assert_raises_any(substrings, f, ...)
  local message = error_of(f, ...)
  for _, s in ipairs(substrings) do
    if message:find(s, 1, true) then return message end
  end
  error(("error message %q contains none of %s"):format(message, table.concat(substrings, ", ")), 2)
end

-- On LuaJIT an ended Timeout cannot be reset (support.reset_of_ended_raises):
-- a test whose scenario resets one checks that error there, and ends.
local ENDED = {}
local function reset_ended(t, ...)
  if not support.cdata_timeouts then return t:reset(...) end
  support.reset_of_ended_raises(t)
  error(ENDED)
end

local function it_ended(name, fn)
  it(name, function()
    local ok, err = pcall(fn)
    if not ok and err ~= ENDED then error(err, 0) end
    if ok then assert.is_false(support.cdata_timeouts, "no ended reset on LuaJIT") end
  end)
end

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

  it_ended("takes an explicit delay", function()
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
    assert.is_true(reset_ended(t, 0.25))
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

  it_ended("keeps the same userdata, task and arguments", function()
    local timer = manual()
    local calls = {}
    local function task(self, ...)
      calls[#calls + 1] = { self = self, args = compat.pack(...) }
    end
    local marker = {}
    local t = timer:timeout(1, task, "x", nil, marker)
    timer:advance(1)
    assert.is_true(reset_ended(t, 1))
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

  it_ended("re-arms an expired one-shot: pending again, not expired until it runs again", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function() runs = runs + 1 end)
    timer:advance(1)
    assert.is_true(t:is_expired())
    assert.are.equal(0, timer:pending())
    assert.is_true(reset_ended(t))
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

  it_ended("re-arms a cancelled one-shot: pending again, runs at its new deadline", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function() runs = runs + 1 end)
    assert.is_true(t:cancel())
    assert.are.equal(0, timer:pending())
    assert.is_true(reset_ended(t, 2))
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

  it_ended("re-arms a cancelled periodic: the series resumes from now + delay, then every interval", function()
    local timer = manual()
    local times = {}
    local e = timer:every(1, function() times[#times + 1] = timer:now() end)
    timer:run_for(2)
    assert.is_true(e:cancel())
    timer:run_for(1)                     -- to 3: nothing
    assert.is_true(reset_ended(e, 0.5))
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
      if support.cdata_timeouts then
        support.reset_of_ended_raises(a)
        log[#log + 1] = "ended"
      else
        assert(a:reset(0))
      end
    end)
    assert.are.equal(2, timer:poll())
    if support.cdata_timeouts then
      assert.are.same({ "a", "b", "ended" }, log)
      return
    end
    assert.are.same({ "a", "b" }, log)
    assert.are.equal(1, timer:poll())
    assert.are.same({ "a", "b", "a" }, log)
    timer:stop()
  end)

  it_ended("stop() returns a reset timeout (a fresh arming), cancelled", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    timer:advance(1)
    assert.is_true(reset_ended(t, 5))
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

  it_ended("keeps pending() and stats().pending right", function()
    local timer = manual()
    local a = timer:timeout(1, noop)
    local b = timer:timeout(1, noop)
    assert.are.equal(2, timer:pending())
    for _ = 1, 5 do assert.is_true(a:reset(3)) end   -- pending: no change
    assert.are.equal(2, timer:pending())
    timer:advance(1)                                  -- b ran
    assert.are.equal(1, timer:pending())
    assert.is_true(reset_ended(b))                    -- expired -> pending
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

  it_ended("returns nil, err when not pending and pending() >= max_pending; succeeds when pending at the cap", function()
    local timer = manual({ max_pending = 2 })
    local runs = 0
    local a = timer:timeout(1, function() runs = runs + 1 end)
    timer:advance(1)                                 -- a ran
    local b = timer:timeout(5, noop)
    local c = timer:timeout(6, noop)
    assert.are.equal(2, timer:pending())
    local ok, err = reset_ended(a)
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

  it_ended("a reset timeout fires even when its handle is dropped (expired, cancelled and pending ones)", function()
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
    assert.is_true(reset_ended(expired, 1))
    assert.is_true(cancelled:reset(1))
    assert.is_true(pending:reset(1))
    expired, cancelled, pending = nil, nil, nil
    collectgarbage()
    collectgarbage()
    assert.are.equal(3, timer:advance(1))
    assert.are.same({ 2, 1, 2 }, runs)
    timer:stop()
  end)

  it_ended("a reset is not a cancel: stats().cancelled and fired count as usual", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    assert.is_true(t:reset(2))
    assert.are.equal(0, timer:stats().cancelled)
    timer:advance(2)
    assert.are.equal(1, timer:stats().fired)
    assert.is_true(reset_ended(t, 1))
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

describe("t:reset() across drains and yields", function()
  it("a one-shot that resets itself and yields is taken again by another drain; both runs end cleanly", function()
    if not YIELDS then return end
    local timer, errors = collecting()
    local log, runs = {}, 0
    local t = timer:timeout(1, function(self)
      runs = runs + 1
      local run = runs == 1 and "first" or "second"
      log[#log + 1] = run
      assert.is_true(self:reset(1))
      coroutine.yield(run)
      log[#log + 1] = run .. " resumed"
    end)
    local co_a, got_a = start(function() return timer:advance(1) end)
    assert.are.same({ true, "first" }, first(got_a, 2))
    assert.are.equal(1, timer:pending())
    local co_b, got_b = start(function() return timer:advance(1) end)
    assert.are.same({ true, "second" }, first(got_b, 2))
    assert.are.same({ true, 1 }, first(resume(co_a), 2))   -- A's run ends: t stays armed
    assert.are.equal(1, timer:pending())
    assert.is_false(t:is_expired())
    assert.are.same({ true, 1 }, first(resume(co_b), 2))
    assert.are.same({ "first", "second", "first resumed", "second resumed" }, log)
    assert.are.equal(1, timer:pending())                             -- the second reset holds
    assert.are.equal(timer:now() + 1, t:deadline())
    assert.is_true(t:cancel())
    collectgarbage()
    assert.are.same({}, timer:timeouts())
    assert.are.equal(0, #errors)
  end)

  it("a reset while its task is suspended re-arms it; the run, resumed, does not end it", function()
    if not YIELDS then return end
    local timer = collecting()
    local runs = 0
    local t = timer:timeout(1, function()
      runs = runs + 1
      if runs == 1 then coroutine.yield() end
    end)
    local co = start(function() return timer:advance(1) end)
    assert.are.equal(0, timer:pending())
    assert.is_true(t:reset(2))                     -- from outside, mid-run
    assert.are.equal(1, timer:pending())
    resume(co)
    assert.are.equal(1, timer:pending())
    assert.are.same({ t }, timer:timeouts())
    assert.are.equal(1, timer:advance(2))
    assert.are.equal(2, runs)
    assert.are.equal(0, timer:pending())
  end)

  it("a cancel after such a reset releases the timeout once no drain holds it", function()
    if not YIELDS then return end
    local timer = collecting()
    local collected = setmetatable({}, { __mode = "k" })
    local co
    do
      local t = timer:timeout(1, function() coroutine.yield() end)
      collected[t] = true
      co = start(function() return timer:advance(1) end)
      assert.is_true(t:reset(5))
      assert.is_true(t:cancel())
    end
    collectgarbage(); collectgarbage()
    assert.is_not_nil(next(collected))              -- the suspended drain still holds it
    resume(co)
    co = nil
    collectgarbage(); collectgarbage()
    assert.is_nil(next(collected))
    assert.are.equal(0, timer:pending())
  end)

  it("a reset of a timeout handed to spawn voids the hand-off; it runs at its new deadline", function()
    local timer = collecting()
    local fns, ran = {}, 0
    local t = timer:timeout(0, function() ran = ran + 1 end)
    assert.are.equal(1, timer:poll(nil, function(fn) fns[#fns + 1] = fn end))
    assert.is_true(t:reset(1))
    assert.are.equal(1, timer:pending())
    fns[1]()
    assert.are.equal(0, ran)
    assert.is_false(t:is_expired())
    assert.are.equal(0, timer:advance(0.999))
    assert.are.equal(1, timer:advance(0.001))
    assert.are.equal(1, ran)
    assert.are.equal(0, timer:pending())
  end)

  it("on_earlier hears of a reset that makes the next deadline earlier", function()
    local timer = collecting()
    local heard = {}
    local t = timer:timeout(10, noop)
    timer:timeout(5, noop)
    timer:on_earlier(function(seconds) heard[#heard + 1] = seconds end)
    assert.are.equal(5, timer:next_due())
    assert.is_true(t:reset(8))
    assert.are.same({}, heard)
    assert.is_true(t:reset(2))
    assert.are.same({ 2 }, heard)
  end)
end)
