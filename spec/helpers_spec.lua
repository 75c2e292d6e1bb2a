-- Specs of the Lua helpers: timer:sleep() in coroutines and hwt.retry().
-- Exact schedules are checked on a manual clock; the real clock only loosely.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local EPS, LATE = support.EPS, support.LATE
local noop, assert_raises, close_to = support.noop, support.assert_raises, support.close_to

describe("timer:sleep()", function()
  -- A finalizer that stops the timer inside sleep()'s timeout(): the sleep
  -- must not wait for a wake-up that the stop already took away.
  it("a stop inside its timeout(): raises 'timer is stopped' before arming, returns nil, 'timer is stopped' after", function()
    for _, when in ipairs({ "before", "after" }) do
      local t = hwt.new({ clock = "manual" })
      local co = coroutine.create(function() return t:sleep(1) end)
      local resumed, a, b
      support.with_stop_in_timeout(t, when, function() resumed, a, b = coroutine.resume(co) end)
      assert.equals("dead", coroutine.status(co), when .. ": the coroutine did not finish")
      if when == "before" then
        assert.is_false(resumed)
        assert.matches("timer is stopped", a)
      else
        assert.is_true(resumed)
        assert.same({ nil, "timer is stopped" }, { a, b })
      end
    end
  end)

  it("interleaves coroutines on a manual clock, waking them in order of their deadlines", function()
    local t = hwt.new({ clock = "manual" })
    local log = {}
    local function sleeper(name, ...)
      local lengths = { ... }
      return coroutine.create(function()
        for _, seconds in ipairs(lengths) do
          local ok = t:sleep(seconds)
          log[#log + 1] = { name, t:now(), ok }
        end
        return "done " .. name
      end)
    end
    local cos = {
      a = sleeper("a", 3),
      b = sleeper("b", 1, 1.5),
      c = sleeper("c", 2),
      d = sleeper("d", 1),
    }
    for _, name in ipairs({ "a", "b", "c", "d" }) do
      assert.is_true(coroutine.resume(cos[name]))
      assert.equals("suspended", coroutine.status(cos[name]))
    end
    assert.equals(4, t:pending())
    assert.equals(0, t:advance(0.5))
    assert.equals(0, #log)
    assert.equals(2, t:advance(0.5))           -- t = 1: b, then d (same deadline, later)
    assert.equals(1, t:advance(1))             -- t = 2: c
    assert.equals(1, t:advance(0.5))           -- t = 2.5: b's second sleep
    assert.equals(1, t:advance(0.5))           -- t = 3: a
    assert.equals(0, t:advance(10))
    local names, times = {}, {}
    for i, entry in ipairs(log) do
      names[i], times[i] = entry[1], entry[2]
      assert.is_true(entry[3], "sleep() returns true")
    end
    assert.same({ "b", "d", "c", "b", "a" }, names)
    for i, expected in ipairs({ 1, 1, 2, 2.5, 3 }) do
      assert.is_true(close_to(expected, times[i], 1e-6), ("wake-up %d at %s"):format(i, times[i]))
    end
    for _, co in pairs(cos) do assert.equals("dead", coroutine.status(co)) end
    assert.equals(0, t:pending())
  end)

  it("does not wake a coroutine before its sleep is over (manual clock)", function()
    local t = hwt.new({ clock = "manual", tick = 0.01 })
    local woke = false
    local co = coroutine.wrap(function() woke = t:sleep(0.25) end)
    co()
    assert.equals(0, t:advance(0.24))
    assert.is_false(woke)
    assert.equals(1, t:advance(0.01))
    assert.is_true(woke)
  end)

  it("sleeps on the real clock within loose bounds", function()
    local t = hwt.new({ tick = 0.001 })
    local result = {}
    local co = coroutine.create(function()
      local t0 = hwt.now()
      result.first = t:sleep(0.05)
      result.t1 = hwt.now() - t0
      result.second = t:sleep(0.02)
      result.t2 = hwt.now() - t0
    end)
    assert.is_true(coroutine.resume(co))
    assert.equals(2, t:run())
    assert.equals("dead", coroutine.status(co))
    assert.is_true(result.first)
    assert.is_true(result.second)
    assert.is_true(result.t1 >= 0.05 - EPS and result.t1 <= 0.05 + LATE, "slept " .. result.t1)
    assert.is_true(result.t2 >= 0.07 - EPS and result.t2 <= 0.07 + 2 * LATE, "slept " .. result.t2)
    t:stop()
  end)

  it("raises an error mentioning 'coroutine' when called outside a coroutine", function()
    local t = hwt.new({ clock = "manual" })
    assert_raises("coroutine", t.sleep, t, 1)
    assert.equals(0, t:pending())
    local rt = hwt.new()
    assert_raises("coroutine", rt.sleep, rt, 0.01)
    assert.equals(0, rt:pending())
    rt:stop()
  end)

  it("passes an error raised by the resumed coroutine to on_error", function()
    local errors = {}
    local t = hwt.new({
      clock = "manual",
      on_error = function(err, to) errors[#errors + 1] = { err = err, to = to } end,
    })
    local co = coroutine.create(function()
      t:sleep(1)
      error("after-sleep-boom")
    end)
    assert.is_true(coroutine.resume(co))
    local later = false
    t:timeout(1, function() later = true end)
    assert.equals(2, t:advance(1))               -- the failing resume counts as run
    assert.equals(1, #errors)
    assert.matches("after%-sleep%-boom", tostring(errors[1].err))
    assert.equals("hwt.Timeout", getmetatable(errors[1].to))
    assert.is_true(later)                         -- poll went on
    assert.equals("dead", coroutine.status(co))
  end)

  it("returns nil and a message without yielding when the timer refuses (max_pending)", function()
    local t = hwt.new({ clock = "manual", max_pending = 1 })
    t:timeout(100, noop)
    local r1, r2
    local co = coroutine.create(function() r1, r2 = t:sleep(1) end)
    assert.is_true(coroutine.resume(co))
    assert.equals("dead", coroutine.status(co))
    assert.is_nil(r1)
    assert.matches("too many pending", r2)
  end)
end)

describe("hwt.retry()", function()
  it("calls fn before returning; on success on_success gets all of fn's results", function()
    local t = hwt.new({ clock = "manual" })
    local calls, got = {}, nil
    local gave_up = false
    local h = hwt.retry(t, function(attempt)
      calls[#calls + 1] = attempt
      return 1, nil, "three"
    end, {
      on_success = function(...) got = compat.pack(...) end,
      on_give_up = function() gave_up = true end,
    })
    assert.same({ 1 }, calls)                 -- already called
    assert.is_table(got)
    assert.equals(3, got.n)
    assert.equals(1, got[1])
    assert.is_nil(got[2])
    assert.equals("three", got[3])
    assert.equals(1, h.attempts)
    assert.equals(0, t:pending())
    assert.is_false(gave_up)
    t:advance(100)
    assert.same({ 1 }, calls)
    assert.is_false(h:cancel())               -- nothing left to cancel
  end)

  it("succeeds after failures (raised errors and nil/false returns)", function()
    local t = hwt.new({ clock = "manual" })
    local calls = {}
    local success, gave_up = nil, false
    local h = hwt.retry(t, function(attempt)
      calls[#calls + 1] = attempt
      if attempt == 1 then error({ code = 1 }) end
      if attempt == 2 then return nil, "e2" end
      if attempt == 3 then return false, "e3" end
      return "ok", "extra"
    end, {
      on_success = function(...) success = { ... } end,
      on_give_up = function() gave_up = true end,
    })                                         -- defaults: delay 1, backoff 2
    assert.same({ 1 }, calls)
    assert.equals(1, t:pending())
    t:advance(1)
    assert.same({ 1, 2 }, calls)
    t:advance(2)
    assert.same({ 1, 2, 3 }, calls)
    assert.is_nil(success)
    t:advance(4)
    assert.same({ 1, 2, 3, 4 }, calls)
    assert.same({ "ok", "extra" }, success)
    assert.is_false(gave_up)
    assert.equals(4, h.attempts)
    assert.equals(0, t:pending())
    t:advance(100)
    assert.equals(4, #calls)
  end)

  it("gives up after retries + 1 raised errors, passing the last error to on_give_up", function()
    local t = hwt.new({ clock = "manual" })
    local errs, gave = {}, {}
    local h = hwt.retry(t, function(attempt)
      local e = { attempt = attempt }
      errs[attempt] = e
      error(e)
    end, {
      retries = 2, delay = 0.5,
      on_give_up = function(...) gave[#gave + 1] = compat.pack(...) end,
    })
    t:advance(0.5)
    t:advance(1)
    assert.equals(3, h.attempts)
    assert.equals(1, #gave)
    assert.is_true(rawequal(errs[3], gave[1][1]))
    assert.equals(0, t:pending())
    t:advance(100)
    assert.equals(3, h.attempts)
    assert.equals(1, #gave)
    assert.is_false(h:cancel())
  end)

  it("gives up after retries + 1 nil, err returns with on_give_up(err)", function()
    local t = hwt.new({ clock = "manual" })
    local calls, gave = 0, {}
    local h = hwt.retry(t, function(attempt)
      calls = calls + 1
      return nil, "bad " .. attempt
    end, { retries = 3, delay = 1, backoff = 1, on_give_up = function(e) gave[#gave + 1] = e end })
    for _ = 1, 10 do t:advance(1) end
    assert.equals(4, calls)
    assert.equals(4, h.attempts)
    assert.same({ "bad 4" }, gave)
    -- a raised string error arrives as it was raised
    local gave2
    hwt.retry(t, function() error("plain", 0) end,
      { retries = 1, delay = 1, on_give_up = function(e) gave2 = e end })
    t:advance(1)
    assert.equals("plain", gave2)
  end)

  it("with retries = 0 calls fn once and gives up before returning", function()
    local t = hwt.new({ clock = "manual" })
    local calls, gave = 0, nil
    local h = hwt.retry(t, function() calls = calls + 1; return false, "no" end,
      { retries = 0, on_give_up = function(e) gave = e end })
    assert.equals(1, calls)
    assert.equals("no", gave)
    assert.equals(1, h.attempts)
    assert.equals(0, t:pending())
  end)

  it("waits min(delay * backoff^(k-1), max_delay) before retry k (manual clock)", function()
    local t = hwt.new({ clock = "manual", tick = 0.01 })
    local times, gave = {}, nil
    local h = hwt.retry(t, function(attempt)
      times[#times + 1] = t:now()
      error("fail " .. attempt, 0)
    end, { retries = 5, delay = 1, backoff = 2, max_delay = 5, on_give_up = function(e) gave = e end })
    assert.equals(1, #times)
    local waits = { 1, 2, 4, 5, 5 }
    for k, wait in ipairs(waits) do
      t:advance(wait - 0.01)
      assert.equals(k, #times, ("retry %d came before its wait of %g s"):format(k, wait))
      t:advance(0.01)
      assert.equals(k + 1, #times, ("retry %d did not come after %g s"):format(k, wait))
    end
    local expected = { 0, 1, 3, 7, 12, 17 }
    for i, at in ipairs(expected) do
      assert.is_true(close_to(at, times[i], 1e-6), ("call %d at %s, expected %g"):format(i, times[i], at))
    end
    assert.equals("fail 6", gave)
    assert.equals(6, h.attempts)
    t:advance(1000)
    assert.equals(6, #times)
  end)

  it("applies jitter as a fraction of the wait, with the given random function", function()
    local t = hwt.new({ clock = "manual", tick = 0.001 })
    local values, used = { 0, 0.75, 0.5 }, 0
    local times = {}
    hwt.retry(t, function() times[#times + 1] = t:now(); return nil end, {
      retries = 3, delay = 1, backoff = 1, jitter = 0.5,
      random = function() used = used + 1; return values[used] end,
    })
    -- waits 1 * (1 + 0.5 * (2r - 1)): 0.5, 1.25, 1.0
    for k, wait in ipairs({ 0.5, 1.25, 1.0 }) do
      t:advance(wait - 0.001)
      assert.equals(k, #times)
      t:advance(0.001)
      assert.equals(k + 1, #times)
    end
    assert.equals(3, used)
    for i, at in ipairs({ 0, 0.5, 1.75, 2.75 }) do
      assert.is_true(close_to(at, times[i], 1e-6), ("call %d at %s, expected %g"):format(i, times[i], at))
    end
  end)

  it("keeps jittered waits within [w * (1 - jitter), w * (1 + jitter)], capped at max_delay", function()
    local tick = 0.001
    local t = hwt.new({ clock = "manual", tick = tick })
    local seed = 12345
    local draws = {}
    local function lcg()
      seed = (seed * 1103515245 + 12345) % 2147483648
      local r = seed / 2147483648
      draws[#draws + 1] = r
      return r
    end
    local times = {}
    local retries, delay, jitter = 20, 0.4, 0.25
    hwt.retry(t, function() times[#times + 1] = t:now(); error("x") end,
      { retries = retries, delay = delay, backoff = 1.1, max_delay = 0.6, jitter = jitter, random = lcg })
    local steps = 0
    while #times < retries + 1 and steps < 100000 do
      t:advance(tick)
      steps = steps + 1
    end
    assert.equals(retries + 1, #times)
    assert.equals(retries, #draws)
    for k = 1, retries do
      local base = math.min(delay * 1.1 ^ (k - 1), 0.6)
      local wait = times[k + 1] - times[k]
      local exact = math.min(base * (1 + jitter * (2 * draws[k] - 1)), 0.6)
      assert.is_true(wait >= base * (1 - jitter) - 1e-6 and wait <= math.min(base * (1 + jitter), 0.6) + tick + 1e-6,
        ("retry %d waited %g, base %g"):format(k, wait, base))
      assert.is_true(wait >= exact - 1e-6 and wait <= exact + tick + 1e-6,
        ("retry %d waited %g, expected %g"):format(k, wait, exact))
    end
  end)

  it("handle:cancel() stops further tries and does not call on_give_up", function()
    local t = hwt.new({ clock = "manual" })
    local calls, gave = 0, false
    local h = hwt.retry(t, function() calls = calls + 1; return nil, "no" end,
      { retries = 5, delay = 1, on_give_up = function() gave = true end })
    assert.equals(1, calls)
    assert.equals(1, t:pending())
    assert.is_true(h:cancel())
    assert.equals(0, t:pending())
    t:advance(1000)
    assert.equals(1, calls)
    assert.equals(1, h.attempts)
    assert.is_false(gave)
    assert.is_false(h:cancel())
  end)

  it("handle:cancel() from inside fn stops further tries", function()
    local t = hwt.new({ clock = "manual" })
    local calls, gave, cancelled = 0, false, nil
    local h
    h = hwt.retry(t, function(attempt)
      calls = calls + 1
      if attempt == 2 then cancelled = h:cancel() end
      return nil, "no"
    end, { retries = 5, delay = 1, on_give_up = function() gave = true end })
    t:advance(1)
    assert.equals(2, calls)
    assert.is_true(cancelled)
    t:advance(1000)
    assert.equals(2, calls)
    assert.is_false(gave)
    assert.equals(0, t:pending())
  end)

  it("handle:cancel() from inside fn on the last try does not call on_give_up", function()
    local t = hwt.new({ clock = "manual" })
    local calls, gave = 0, false
    local h
    h = hwt.retry(t, function(attempt)
      calls = calls + 1
      if attempt == 2 then h:cancel() end
      return nil, "no"
    end, { retries = 1, delay = 1, on_give_up = function() gave = true end })
    t:advance(1)
    assert.equals(2, calls)
    assert.is_false(gave, "on_give_up was called after handle:cancel()")
  end)

  it("fn may yield; a stop while fn is suspended gives the retry up, and its late result does not count", function()
    local tm = hwt.new({ clock = "manual" })
    local log = {}
    local h = hwt.retry(tm, function(attempt)
      if attempt == 1 then return nil, "down" end
      coroutine.yield("connecting")            -- a cosocket connect, say
      return "connected"
    end, {
      delay = 1,
      on_give_up = function(err) log[#log + 1] = "gave up: " .. tostring(err) end,
      on_success = function(v) log[#log + 1] = "success: " .. tostring(v) end,
    })
    local co = coroutine.create(function() return tm:advance(1) end)
    local ok, yielded = coroutine.resume(co)   -- the retry task calls fn, which yields
    assert.is_true(ok)
    if not compat.tasks_yield then             -- PUC 5.1: the yield is fn's error
      assert.are.equal(2, h.attempts)
      assert.are.equal("dead", coroutine.status(co))
      tm:stop()
      assert.are.same({ "gave up: timer is stopped" }, log)
      return
    end
    assert.are.equal("connecting", yielded)
    assert.are.equal(2, h.attempts)
    assert.is_false(h.done)
    tm:stop()                                  -- from outside fn's coroutine
    assert.is_true(h.done)
    assert.are.same({ "gave up: timer is stopped" }, log)
    assert.is_true((coroutine.resume(co)))     -- fn returns "connected", too late
    assert.are.same({ "gave up: timer is stopped" }, log)
    assert.is_false(h:cancel())
  end)

  it("a retry cancelled while its fn is suspended does not give up when the timer stops", function()
    local tm = hwt.new({ clock = "manual" })
    local gave_up = 0
    local h = hwt.retry(tm, function(attempt)
      if attempt == 1 then return nil, "down" end
      coroutine.yield()
      return true
    end, { delay = 1, on_give_up = function() gave_up = gave_up + 1 end })
    local co = coroutine.create(function() return tm:advance(1) end)
    assert.is_true((coroutine.resume(co)))
    if compat.tasks_yield then
      assert.is_true(h:cancel())               -- fn still suspended
      tm:stop()
      assert.are.equal(0, gave_up)
      assert.is_true((coroutine.resume(co)))
      assert.are.equal(0, gave_up)
    else
      tm:stop()                                -- PUC 5.1: the yield failed; waiting
      assert.are.equal(1, gave_up)
    end
  end)

  it("fn that yields and then succeeds reconnects for real (a poll from a coroutine)", function()
    local tm = hwt.new({ clock = "manual" })
    local up, got = false, nil
    local h = hwt.retry(tm, function()
      if not up then return nil, "refused" end
      coroutine.yield()                        -- the connect in flight
      return "conn"
    end, { delay = 1, on_success = function(conn) got = conn end })
    up = true
    local co = coroutine.create(function() return tm:advance(1) end)
    assert.is_true((coroutine.resume(co)))
    if compat.tasks_yield then
      assert.is_nil(got)
      assert.are.same({ true, 1 }, { coroutine.resume(co) })
      assert.are.equal("conn", got)
    else
      assert.is_nil(got)                       -- PUC 5.1: yield refused, retried later
      assert.are.equal(2, h.attempts)
    end
    tm:stop()
  end)

  it("gives up with the timer's refusal when the timer is full", function()
    local t = hwt.new({ clock = "manual", max_pending = 1 })
    t:timeout(100, noop)
    local gave
    local h = hwt.retry(t, function() return nil, "no" end,
      { retries = 3, on_give_up = function(e) gave = e end })
    assert.equals(1, h.attempts)
    assert.matches("too many pending", gave)
  end)

  it("works on the real clock", function()
    local t = hwt.new({ tick = 0.001 })
    local calls, result = 0, nil
    local t0 = hwt.now()
    hwt.retry(t, function(attempt)
      calls = calls + 1
      if attempt < 3 then return nil, "not yet" end
      return "done"
    end, { delay = 0.01, backoff = 2, on_success = function(r) result = r end })
    assert.equals(2, t:run())
    local elapsed = hwt.now() - t0
    assert.equals(3, calls)
    assert.equals("done", result)
    assert.is_true(elapsed >= 0.03 - EPS and elapsed <= 0.03 + LATE, "took " .. elapsed)
    t:stop()
  end)

  it("validates its arguments and options before calling fn", function()
    local t = hwt.new({ clock = "manual" })
    local called = false
    local function fn() called = true; return true end
    local function try(opts) return hwt.retry(t, fn, opts) end
    local err = assert_raises("unknown option", try, { retry = 3 })
    assert.matches("retry", err)
    assert_raises("wheelsize", try, { wheelsize = 1 })
    assert_raises("retries", try, { retries = "x" })
    assert_raises("delay", try, { delay = {} })
    assert_raises("backoff", try, { backoff = true })
    assert_raises("max_delay", try, { max_delay = "soon" })
    assert_raises("jitter", try, { jitter = {} })
    assert_raises("on_give_up", try, { on_give_up = 1 })
    assert_raises("on_success", try, { on_success = "f" })
    assert_raises("random", try, { random = true })
    assert_raises("jitter", try, { jitter = 1.5 })
    assert_raises("jitter", try, { jitter = -0.1 })
    assert_raises("jitter", try, { jitter = 0 / 0 })
    assert_raises("retries", try, { retries = -1 })
    assert_raises("retries", try, { retries = 1.5 })
    assert_raises("delay", try, { delay = -1 })
    assert_raises("backoff", try, { backoff = 0.5 })
    assert_raises("max_delay", try, { max_delay = -1 })
    assert_raises("Timer", hwt.retry, {}, fn)
    assert_raises("Timer", hwt.retry, nil, fn)
    assert_raises("function", hwt.retry, t, nil)
    assert_raises("function", hwt.retry, t, "fn")
    assert_raises("table", hwt.retry, t, fn, "opts")
    assert.is_false(called)
    assert.equals(0, t:pending())
    -- the edges of the ranges are accepted
    for _, opts in ipairs({ { jitter = 0 }, { jitter = 1 }, { retries = 0 }, { backoff = 1 },
                            { delay = 0 }, { max_delay = 0 }, {} }) do
      called = false
      try(opts)
      assert.is_true(called)
    end
    hwt.retry(t, fn)                            -- opts may be omitted
  end)
end)
