-- retry_spec.lua: hwt.retry(timer, fn [, opts]): fn is called at once, then
-- again after each failure (a raised error, or nil/false and an error) with
-- waits min(b * (1 +- jitter), max_delay), b = min(delay * backoff^(k-1),
-- max_delay), until it succeeds or `retries` are used up; fn may be any
-- callable, called as fn(attempt, handle), and may yield; opts.on_retry,
-- on_success, on_give_up (without it the last error goes to on_error, or
-- stderr); handle:cancel(); a stop gives a retry up, once, before stop()
-- returns, whatever the moment it comes at; bad arguments and options.
-- Waits are checked exactly on the manual clock with timer:run_for(), which
-- runs every call of fn with timer:now() at its own deadline.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, EPS, LATE, noop = compat.pack, support.EPS, support.LATE, support.noop
local manual, show, error_of = support.manual, support.show, support.error_of
local assert_raises, assert_error = support.assert_raises, support.assert_error
local has_text, close_to, wrong_values = support.has_text, support.close_to, support.wrong_values

-- opts (default: a delay of 1 s) whose on_give_up and on_success write
-- "give up <err>" and "success <value>" to log.
local function logged(log, opts)
  opts = opts or {}
  opts.delay = opts.delay or 1
  opts.on_give_up = function(err) log[#log + 1] = "give up " .. tostring(err) end
  opts.on_success = function(v) log[#log + 1] = "success " .. tostring(v) end
  return opts
end

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

describe("hwt.retry: fn", function()
  it("may be a callable table (called with the table, then attempt and handle)", function()
    local timer = manual()
    local seen = {}
    local fn = setmetatable({}, {
      __call = function(self, attempt, handle)
        seen[#seen + 1] = { self = self, attempt = attempt, handle = handle, now = timer:now() }
        if attempt < 3 then return nil, "not yet" end
        return "ok", 42
      end,
    })
    local got
    local h = hwt.retry(timer, fn, { delay = 1, backoff = 2, on_success = function(...) got = { ... } end })
    assert.are.equal(1, #seen)
    timer:run_for(10)
    assert.are.equal(3, #seen)
    for i, call in ipairs(seen) do
      assert.is_true(rawequal(fn, call.self), "call " .. i .. ": self is not the table")
      assert.are.equal(i, call.attempt)
    end
    assert.is_true(rawequal(h, seen[2].handle), "call 2: handle is not the returned handle")
    assert.is_true(rawequal(h, seen[3].handle), "call 3: handle is not the returned handle")
    assert.are.same({ 0, 1, 3 }, { seen[1].now, seen[2].now, seen[3].now })
    assert.are.same({ "ok", 42 }, got)
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("a callable table that raises is retried like a function", function()
    local timer = manual()
    local calls = 0
    local fn = setmetatable({}, {
      __call = function(_, attempt)
        calls = calls + 1
        if attempt < 2 then error("first fails", 0) end
        return true
      end,
    })
    local ok
    hwt.retry(timer, fn, { delay = 0.5, on_success = function() ok = true end })
    timer:run_for(1)
    assert.are.equal(2, calls)
    assert.is_true(ok)
    timer:stop()
  end)

  it("is called as fn(attempt, handle), handle being the returned handle", function()
    local timer = manual()
    local seen = {}
    local h = hwt.retry(timer, function(...)
      seen[#seen + 1] = compat.pack(...)
      if #seen < 4 then return nil, "again" end
      return "done"
    end, { delay = 0.25, backoff = 1 })
    timer:run_for(1)
    assert.are.equal(4, #seen)
    for i = 2, 4 do
      assert.are.equal(i, seen[i][1])
      assert.is_true(rawequal(h, seen[i][2]), "call " .. i .. ": second argument is not the handle")
    end
    assert.are.equal(1, seen[1][1])
    timer:stop()
  end)

  it("gets the handle already in the first call (made before hwt.retry returns)", function()
    -- The contract: "called as fn(attempt, handle)" and "makes its first call to
    -- fn before it returns": the handle object exists before it is returned.
    local timer = manual()
    local first
    local h = hwt.retry(timer, function(attempt, handle)
      if attempt == 1 then first = { handle = handle, n = handle ~= nil } end
      return nil, "no"
    end, { retries = 1, delay = 1, on_give_up = function() end })
    assert.is_table(first)
    assert.is_not_nil(first.handle, "no handle in the first call")
    assert.is_true(rawequal(h, first.handle), "the first call's handle is not the returned handle")
    timer:stop()
  end)

  it("handle:cancel() in the first call stops further tries and does not give up", function()
    local timer = manual()
    local calls, gave, cancelled = 0, 0, nil
    local h = hwt.retry(timer, function(_, handle)
      calls = calls + 1
      cancelled = handle:cancel()
      return nil, "no"
    end, { retries = 3, delay = 1, on_give_up = function() gave = gave + 1 end })
    assert.is_true(cancelled)
    assert.are.equal(0, timer:pending())
    timer:run_for(100)
    assert.are.equal(1, calls)
    assert.are.equal(0, gave)
    assert.is_false(h:cancel())
    timer:stop()
  end)
end)

describe("hwt.retry: opts.on_retry(err, attempt, wait)", function()
  it("is called before each wait with the error, the failed attempt and the wait", function()
    local timer = manual()
    local log = {}
    local calls = {}
    local success
    hwt.retry(timer, function(attempt)
      calls[#calls + 1] = { attempt, timer:now() }
      if attempt == 1 then error("e1", 0) end
      if attempt == 2 then return nil, "e2" end
      if attempt == 3 then return false, "e3" end
      return "ok"
    end, {
      retries = 5, delay = 1, backoff = 2,
      on_retry = function(err, attempt, wait)
        log[#log + 1] = { err, attempt, wait, timer:now(), #calls }
      end,
      on_success = function(v) success = v end,
    })
    timer:run_for(20)
    assert.are.equal("ok", success)
    assert.are.same({ { 1, 0 }, { 2, 1 }, { 3, 3 }, { 4, 7 } }, calls)
    assert.are.equal(3, #log)
    -- err, failed attempt, wait, the clock at the call (that of the failure), calls made so far
    assert.are.same({ "e1", 1, 1, 0, 1 }, log[1])
    assert.are.same({ "e2", 2, 2, 1, 2 }, log[2])
    assert.are.same({ "e3", 3, 4, 3, 3 }, log[3])
    timer:stop()
  end)

  it("passes a raised error value unchanged", function()
    local timer = manual()
    local e = { code = 7 }
    local got
    hwt.retry(timer, function(attempt)
      if attempt == 1 then error(e) end
      return true
    end, { delay = 1, on_retry = function(err) got = err end })
    assert.is_true(rawequal(e, got))
    timer:stop()
  end)

  it("is not called after the last failure (on_give_up is) nor on success", function()
    local timer = manual()
    local log = {}
    hwt.retry(timer, function(attempt) return nil, "f" .. attempt end, {
      retries = 2, delay = 1, backoff = 1,
      on_retry = function(err, attempt) log[#log + 1] = "retry " .. err .. " " .. attempt end,
      on_give_up = function(err) log[#log + 1] = "give up " .. tostring(err) end,
    })
    timer:run_for(10)
    assert.are.same({ "retry f1 1", "retry f2 2", "give up f3" }, log)
    local log2 = {}
    hwt.retry(timer, function() return "fine" end, {
      on_retry = function() log2[#log2 + 1] = "retry" end,
    })
    timer:run_for(10)
    assert.are.same({}, log2)
    timer:stop()
  end)

  it("is called before the retry runs: its wait is the time to the next call", function()
    local timer = manual()
    local waits, times = {}, {}
    hwt.retry(timer, function(attempt)
      times[#times + 1] = timer:now()
      return attempt >= 5
    end, {
      retries = 10, delay = 0.125, backoff = 3, max_delay = 2,
      on_retry = function(_, attempt, wait) waits[attempt] = wait end,
    })
    timer:run_for(10)
    assert.are.equal(5, #times)
    for k = 1, 4 do
      assert.are.equal(times[k + 1] - times[k], waits[k], "wait " .. k)
    end
    timer:stop()
  end)
end)

describe("hwt.retry: waits (manual clock, run_for)", function()
  it("retry k waits min(delay * backoff^(k-1), max_delay) exactly; fn sees now() at each deadline", function()
    local timer = manual({ tick = 1 / 60 })
    local times, waits, gave = {}, {}, nil
    local gave_at
    hwt.retry(timer, function(attempt)
      times[#times + 1] = timer:now()
      error("fail " .. attempt, 0)
    end, {
      retries = 4, delay = 0.5, backoff = 3, max_delay = 4,
      on_retry = function(_, _, wait) waits[#waits + 1] = wait end,
      on_give_up = function(err) gave, gave_at = err, timer:now() end,
    })
    local ran = timer:run_for(20)
    assert.are.equal(4, ran)                         -- the four retries (the first call was in hwt.retry)
    assert.are.same({ 0, 0.5, 2, 6, 10 }, times)     -- waits 0.5, 1.5, 4 (4.5 capped), 4
    assert.are.same({ 0.5, 1.5, 4, 4 }, waits)
    assert.are.equal("fail 5", gave)
    assert.are.equal(10, gave_at)
    assert.are.equal(20, timer:now())
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("a retry chain runs whole within one run_for(), success included", function()
    local timer = manual()
    local done_at, result
    hwt.retry(timer, function(attempt)
      if attempt < 6 then return nil, "down" end
      return "conn", attempt
    end, {
      retries = 10, delay = 1, backoff = 2, max_delay = 60,
      on_success = function(conn, attempt) result = { conn, attempt }; done_at = timer:now() end,
    })
    assert.are.equal(5, timer:run_for(100))
    assert.are.same({ "conn", 6 }, result)
    assert.are.equal(1 + 2 + 4 + 8 + 16, done_at)
    timer:stop()
  end)

  it("jitter: every wait within [b * (1 - jitter), min(b * (1 + jitter), max_delay)], max_delay capping after jitter", function()
    local delay, backoff, max_delay = 10, 2, 15
    for _, jitter in ipairs({ 0.5, 1 }) do
      local timer = manual()
      local times, waits, attempts = {}, {}, {}
      local retries = 40
      hwt.retry(timer, function()
        times[#times + 1] = timer:now()
        return nil, "no"
      end, {
        retries = retries, delay = delay, backoff = backoff, max_delay = max_delay, jitter = jitter,
        on_retry = function(_, attempt, wait) attempts[#attempts + 1] = attempt; waits[#waits + 1] = wait end,
        on_give_up = function() end,
      })
      timer:run_for(retries * max_delay + 1)
      assert.are.equal(retries + 1, #times)
      assert.are.equal(retries, #waits)
      for k = 1, retries do
        assert.are.equal(k, attempts[k])
        local b = math.min(delay * backoff ^ (k - 1), max_delay)
        local lo, hi = b * (1 - jitter), math.min(b * (1 + jitter), max_delay)
        local w = waits[k]
        assert.is_true(w >= lo - 1e-9 and w <= hi + 1e-9,
          ("jitter %g, retry %d: wait %.9g outside [%.9g, %.9g]"):format(jitter, k, w, lo, hi))
        assert.is_true(w <= max_delay, ("jitter %g, retry %d: wait %.9g > max_delay"):format(jitter, k, w))
        local measured = times[k + 1] - times[k]
        assert.is_true(close_to(w, measured, 1e-6),
          ("jitter %g, retry %d: on_retry said %.9g, the call came %.9g later"):format(jitter, k, w, measured))
      end
      timer:stop()
    end
  end)

  it("jitter spreads the waits (not always the same value)", function()
    local timer = manual()
    local waits = {}
    hwt.retry(timer, function() return nil end, {
      retries = 30, delay = 1, backoff = 1, jitter = 0.5,
      on_retry = function(_, _, wait) waits[#waits + 1] = wait end,
      on_give_up = function() end,
    })
    timer:run_for(100)
    assert.are.equal(30, #waits)
    local distinct = {}
    local n = 0
    for _, w in ipairs(waits) do
      if not distinct[w] then distinct[w] = true; n = n + 1 end
    end
    assert.is_true(n > 1, "all 30 jittered waits equal")
    timer:stop()
  end)
end)

describe("hwt.retry: retries = math.huge", function()
  it("keeps retrying: succeeds on attempt 50", function()
    local timer = manual()
    local calls, success, gave = 0, nil, false
    hwt.retry(timer, function(attempt)
      calls = calls + 1
      if attempt < 50 then return nil, "not yet" end
      return "finally"
    end, {
      retries = math.huge, delay = 1, backoff = 1,
      on_success = function(v) success = v end,
      on_give_up = function() gave = true end,
    })
    assert.are.equal(49, timer:run_for(100))
    assert.are.equal(50, calls)
    assert.are.equal("finally", success)
    assert.is_false(gave)
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)

  it("with the default backoff the waits grow to max_delay and stay there (attempt 20 at 843 s)", function()
    local timer = manual()
    local times = {}
    hwt.retry(timer, function(attempt)
      times[#times + 1] = timer:now()
      return attempt >= 20
    end, { retries = math.huge })                     -- delay 1, backoff 2, max_delay 60, jitter 0
    timer:run_for(2000)
    assert.are.equal(20, #times)
    -- 1, 2, 4, 8, 16, 32, then 60 each
    assert.are.equal(63, times[7])
    assert.are.equal(63 + 60 * 13, times[20])
    timer:stop()
  end)

  it("stays finite and capped after thousands of retries (backoff^k overflowing)", function()
    for _, jitter in ipairs({ 0, 0.5 }) do
      local timer = manual()
      local calls, bad = 0, nil
      hwt.retry(timer, function(attempt)
        calls = calls + 1
        return attempt >= 1500
      end, {
        retries = math.huge, delay = 0.001, backoff = 2, max_delay = 0.002, jitter = jitter,
        on_retry = function(_, attempt, wait)
          if not (wait >= 0 and wait <= 0.002) and not bad then
            bad = ("attempt %d: wait %s"):format(attempt, tostring(wait))
          end
        end,
      })
      timer:run_for(10)
      assert.is_nil(bad, bad)
      assert.are.equal(1500, calls, "jitter " .. jitter)
      timer:stop()
    end
  end)

  it("a stop gives an endless retry up, once", function()
    local timer = manual()
    local gave = {}
    local h = hwt.retry(timer, function() return nil end,
      { retries = math.huge, delay = 1, backoff = 1, on_give_up = function(e) gave[#gave + 1] = e end })
    timer:run_for(5)
    timer:stop()
    assert.are.same({ "timer is stopped" }, gave)
    assert.is_true(h.done)
  end)

  it("handle:cancel() ends an endless retry", function()
    local timer = manual()
    local calls, gave = 0, false
    local h = hwt.retry(timer, function() calls = calls + 1; return nil end,
      { retries = math.huge, delay = 1, backoff = 1, on_give_up = function() gave = true end })
    timer:run_for(9)
    assert.are.equal(10, calls)
    assert.is_true(h:cancel())
    timer:run_for(100)
    assert.are.equal(10, calls)
    assert.is_false(gave)
    timer:stop()
  end)
end)

describe("hwt.retry: without on_give_up the last error goes to on_error", function()
  it("a nil, err failure: on_error gets it once, after the last retry", function()
    local errs = {}
    local timer = manual({ on_error = function(err) errs[#errs + 1] = err end })
    local calls = 0
    hwt.retry(timer, function(attempt)
      calls = calls + 1
      return nil, "boom" .. attempt
    end, { retries = 2, delay = 1 })                -- calls at 0, 1, 3
    timer:run_for(2.5)
    assert.are.equal(2, calls)
    assert.are.equal(0, #errs, "on_error called before the last retry")
    timer:run_for(1)
    assert.are.equal(3, calls)
    assert.are.equal(1, #errs)
    assert.is_truthy(has_text(tostring(errs[1]), "boom3"), tostring(errs[1]))
    timer:run_for(100)
    assert.are.equal(1, #errs)
    timer:stop()
  end)

  it("a typo in fn (an error raised every time) is reported after the last retry", function()
    local errs = {}
    local timer = manual({ on_error = function(err) errs[#errs + 1] = err end })
    local calls = 0
    hwt.retry(timer, function()
      calls = calls + 1
      return hwt_v02_undefined_global_xyz.field     -- luacheck: ignore (the typo)
    end, { retries = 2, delay = 1 })
    assert.are.equal(1, calls)
    assert.are.equal(0, #errs)
    timer:run_for(2.5)
    assert.are.equal(0, #errs)
    timer:run_for(1)
    assert.are.equal(3, calls)
    assert.are.equal(1, #errs)
    assert.is_truthy(has_text(tostring(errs[1]), "hwt_v02_undefined_global_xyz"), tostring(errs[1]))
    timer:stop()
  end)

  it("with retries = 0 the one failure is reported", function()
    local errs = {}
    local timer = manual({ on_error = function(err) errs[#errs + 1] = err end })
    hwt.retry(timer, function() return nil, "only-once" end, { retries = 0 })
    timer:run_for(0)
    assert.are.equal(1, #errs)
    assert.is_truthy(has_text(tostring(errs[1]), "only-once"), tostring(errs[1]))
    timer:stop()
  end)

  it("is not used when on_give_up is given, nor on success, nor for the failures before the last", function()
    local errs = {}
    local timer = manual({ on_error = function(err) errs[#errs + 1] = err end })
    local gave
    hwt.retry(timer, function() return nil, "x" end,
      { retries = 2, delay = 1, on_give_up = function(e) gave = e end })
    hwt.retry(timer, function(a) if a < 3 then error("y", 0) end return true end,
      { retries = 5, delay = 1 })
    timer:run_for(100)
    assert.are.equal("x", gave)
    assert.are.same({}, errs)
    timer:stop()
  end)

  it("without on_error either, the last error is written to stderr", function()
    local out, err = support.run_child([[
      local hwt = require("hwt")
      local timer = hwt.new({ clock = "manual" })
      hwt.retry(timer, function() return nil, "retry-last-error-visible" end, { retries = 1, delay = 1 })
      timer:run_for(5)
      io.stdout:write("finished\n")
    ]])
    assert.is_truthy(has_text(out, "finished"), "child: " .. tostring(out) .. tostring(err))
    assert.is_truthy(has_text(err, "retry-last-error-visible"), "stderr: " .. tostring(err))
  end)
end)

describe("hwt.retry: when the timer stops", function()
  it("on_give_up('timer is stopped') is called once, by stop() before it returns", function()
    local timer = manual()
    local log = {}
    local calls = 0
    local h = hwt.retry(timer, function() calls = calls + 1; return nil, "down" end, {
      retries = 5, delay = 1,
      on_give_up = function(err) log[#log + 1] = err end,
    })
    timer:run_for(1.5)
    assert.are.equal(2, calls)
    assert.is_falsy(h.done)
    assert.are.same({}, log)
    timer:stop()
    assert.are.same({ "timer is stopped" }, log)   -- already there when stop() returned
    assert.is_true(h.done)
    assert.is_false(h:cancel())
    timer:stop()
    assert.are.same({ "timer is stopped" }, log)
    assert.are.equal(2, calls)
  end)

  it("on_give_up runs inside stop() (not at some later call)", function()
    local timer = manual()
    local in_stop = false
    local seen
    hwt.retry(timer, function() return nil end, {
      delay = 1, on_give_up = function(err) seen = { err, in_stop } end,
    })
    in_stop = true
    timer:stop()
    in_stop = false
    assert.is_table(seen)
    assert.are.equal("timer is stopped", seen[1])
    assert.is_true(seen[2])
  end)

  it("a stop by fn itself, then a failure: gives up once with 'timer is stopped'", function()
    local timer = manual()
    local log = {}
    local h = hwt.retry(timer, function(attempt)
      if attempt == 2 then timer:stop() end
      return nil, "failed " .. attempt
    end, { retries = 5, delay = 1, on_give_up = function(err) log[#log + 1] = err end })
    timer:run_for(5)
    assert.are.same({ "timer is stopped" }, log)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
  end)

  it("a stop by fn in its last call, then a failure: gives up with 'timer is stopped', not reported", function()
    local timer = manual()
    local log, errors = {}, {}
    hwt.retry(timer, function() timer:stop(); return nil, "failed" end, logged(log, { retries = 0 }))
    assert.are.same({ "give up timer is stopped" }, log)
    local quiet = manual({ on_error = function(e) errors[#errors + 1] = e end })
    local h = hwt.retry(quiet, function() quiet:stop(); return nil, "failed" end, { retries = 0 })
    assert.is_true(h.done)
    assert.are.same({}, errors)
  end)

  it("a stop by fn in the first call (inside hwt.retry): gives up once", function()
    local timer = manual()
    local log = {}
    local h = hwt.retry(timer, function()
      timer:stop()
      return nil, "failed"
    end, { retries = 5, delay = 1, on_give_up = function(err) log[#log + 1] = err end })
    assert.are.same({ "timer is stopped" }, log)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
  end)

  it("an fn that stops the timer and then succeeds has succeeded", function()
    local timer = manual()
    local log = {}
    hwt.retry(timer, function(attempt)
      if attempt == 1 then return nil, "not yet" end
      timer:stop()
      return "ok"
    end, logged(log))
    timer:run_for(5)
    assert.are.same({ "success ok" }, log)
  end)

  it("a stop from a coroutine that fn resumes is fn's own: fn then succeeds and has succeeded", function()
    local timer = manual()
    local log = {}
    local calls = 0
    local h
    h = hwt.retry(timer, function(attempt)
      calls = calls + 1
      if attempt == 1 then return nil, "not yet" end
      coroutine.wrap(function() timer:stop() end)()
      log[#log + 1] = "after the stop, done " .. tostring(h.done)
      return "ok"
    end, logged(log))
    timer:run_for(5)
    assert.are.same({ "after the stop, done false", "success ok" }, log)
    assert.are.equal(2, calls)
    assert.is_true(h.done)
  end)

  it("a stop from a coroutine that fn resumes, then a failure: gives up once, when fn returns", function()
    local timer = manual()
    local log = {}
    local h
    h = hwt.retry(timer, function()
      coroutine.wrap(function() timer:stop() end)()
      log[#log + 1] = "fn goes on, done " .. tostring(h and h.done)
      return nil, "failed"
    end, logged(log, { retries = 5 }))
    assert.are.same({ "fn goes on, done nil", "give up timer is stopped" }, log)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
  end)

  -- A finalizer runs wherever the collector steps, inside fn's call too: a
  -- stop from a coroutine it resumes must not end the call under fn's feet.
  it("a finalizer that stops the timer from a coroutine while fn runs: fn's result still counts", function()
    local timer = manual()
    local log = {}
    local stopped = false
    local function stop_from_coroutine()
      coroutine.wrap(function() timer:stop(); stopped = true end)()
    end
    local h = hwt.retry(timer, function(attempt)
      if attempt == 1 then return nil, "not yet" end
      compat.gc_object(stop_from_coroutine)    -- garbage at once
      collectgarbage()
      collectgarbage()
      log[#log + 1] = "stopped " .. tostring(stopped)
      return "ok"
    end, logged(log))
    timer:run_for(5)
    assert.are.same({ "stopped true", "success ok" }, log)
    assert.are.equal(2, h.attempts)
  end)

  it("an fn that stops the timer and then yields decides when it is resumed and returns", function()
    if not compat.tasks_yield then return end  -- PUC 5.1: a task cannot yield
    local timer = manual()
    local log = {}
    local h = hwt.retry(timer, function(attempt)
      if attempt == 1 then return nil, "not yet" end
      timer:stop()
      coroutine.yield()
      return "ok"
    end, logged(log))
    local co = coroutine.create(function() return timer:run_for(5) end)
    assert.is_true((coroutine.resume(co)))
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.same({}, log)
    assert.is_false(h.done)
    assert.is_true((coroutine.resume(co)))
    assert.are.same({ "success ok" }, log)
    assert.is_true(h.done)
  end)

  for _, when in ipairs({ "before", "after" }) do
    it("a stop inside timeout() " .. when .. " the next try is armed gives up once, never orphaned", function()
      local timer = manual()
      local log = {}
      local h
      support.with_stop_in_timeout(timer, when, function()
        h = hwt.retry(timer, function() return nil, "down" end, logged(log, { retries = 3 }))
      end)
      assert.are.same({ "give up timer is stopped" }, log)
      assert.is_true(h.done)
      assert.is_nil(h.pending)
      assert.is_false(h:cancel())
      timer:stop()
      assert.are.same({ "give up timer is stopped" }, log)
    end)
  end

  it("an on_retry that stops the timer: gives up once with 'timer is stopped', nothing armed", function()
    local timer = manual()
    local log = {}
    local h = hwt.retry(timer, function() return nil, "down" end,
      logged(log, { retries = 3, on_retry = function() timer:stop() end }))
    assert.are.same({ "give up timer is stopped" }, log)
    assert.is_true(h.done)
    assert.is_nil(h.pending)
    assert.are.equal(1, h.attempts)
  end)

  it("an error arming the next try (out of memory) gives up with it, once", function()
    local timer = manual()
    local log = {}
    local h
    support.with_timeout_of(timer, function() error("not enough memory", 0) end, function()
      h = hwt.retry(timer, function() return nil, "down" end, logged(log, { retries = 3 }))
    end)
    assert.are.same({ "give up not enough memory" }, log)
    assert.is_true(h.done)
    assert.are.equal(1, h.attempts)
    assert.is_false(h:cancel())
  end)

  -- A finalizer can also run inside stop() itself, before the core stops:
  -- a call hook on the core's stop function runs one there on purpose. In a
  -- child process, so that no other spec's retry or sleeper is waiting.
  it("a retry armed inside stop() (by a finalizer, before the core stops) gives up once, before stop() returns", function()
    local out, err, ok = support.run_child([[
      local hwt = require("hwt")
      local core_stop
      for i = 1, math.huge do
        local name, value = debug.getupvalue(hwt.Timer.stop, i)
        if name == nil or name == "core_stop" then core_stop = value; break end
      end
      local timer = hwt.new({ clock = "manual" })
      local log, h = {}, nil
      debug.sethook(function()
        if not h and debug.getinfo(2, "f").func == core_stop then
          h = hwt.retry(timer, function() return nil, "down" end,
            { delay = 1, on_give_up = function(e) log[#log + 1] = e end })
        end
      end, "c")
      local ended = timer:stop()
      debug.sethook()
      print(type(core_stop), h ~= nil, #ended, h and h.done, table.concat(log, ","))
    ]])
    assert(ok, err)
    assert.are.equal("function\ttrue\t1\ttrue\ttimer is stopped\n", out)
  end)

  it("a retry cancelled before the stop does not give up", function()
    local timer = manual()
    local gave = 0
    local h = hwt.retry(timer, function() return nil end,
      { delay = 1, on_give_up = function() gave = gave + 1 end })
    assert.is_true(h:cancel())
    timer:stop()
    assert.are.equal(0, gave)
  end)

  it("a retry that already succeeded or gave up is not given up again", function()
    local timer = manual()
    local log = {}
    hwt.retry(timer, function() return true end,
      { on_give_up = function(e) log[#log + 1] = "a " .. tostring(e) end })
    hwt.retry(timer, function() return nil, "x" end,
      { retries = 1, delay = 1, on_give_up = function(e) log[#log + 1] = "b " .. tostring(e) end })
    timer:run_for(5)
    timer:stop()
    assert.are.same({ "b x" }, log)
  end)

  it("several waiting retries each give up once", function()
    local timer = manual()
    local gave = {}
    for i = 1, 5 do
      hwt.retry(timer, function() return nil end,
        { delay = i, on_give_up = function(err) gave[#gave + 1] = { i, err } end })
    end
    timer:stop()
    assert.are.equal(5, #gave)
    for _, g in ipairs(gave) do assert.are.equal("timer is stopped", g[2]) end
  end)

  local function failing() return nil, "down" end

  it("stop() makes a waiting retry give up, once, before stop() returns", function()
    local tm = manual()
    local gave_up, returned = {}, false
    local h = hwt.retry(tm, failing, { on_give_up = function(err)
      assert.is_false(returned)
      gave_up[#gave_up + 1] = err
    end })
    local list = tm:stop()
    returned = true
    assert.are.same({ "timer is stopped" }, gave_up)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
    assert.are.equal(1, #list)                       -- the retry's wait, cancelled
    tm:stop()
    assert.are.equal(1, #gave_up)
  end)

  it("fn stops the timer and fails: gives up with 'timer is stopped', nothing goes to on_error", function()
    local errors, gave_up = {}, {}
    local tm = manual({ on_error = function(err) errors[#errors + 1] = err end })
    local h = hwt.retry(tm, function(attempt)
      if attempt == 2 then tm:stop() end
      return nil, "down"
    end, { delay = 1, on_give_up = function(err) gave_up[#gave_up + 1] = err end })
    tm:advance(1)
    assert.are.same({ "timer is stopped" }, gave_up)
    assert.are.same({}, errors)
    assert.are.equal(2, h.attempts)
    assert.is_true(h.done)
  end)

  it("fn stops the timer and then succeeds: that is a success", function()
    local tm = manual()
    local succeeded, gave_up = {}, 0
    hwt.retry(tm, function() tm:stop() return "ok" end, {
      on_success = function(v) succeeded[#succeeded + 1] = v end,
      on_give_up = function() gave_up = gave_up + 1 end })
    assert.are.same({ "ok" }, succeeded)
    assert.are.equal(0, gave_up)
  end)

  -- The retry's next try holds its timer (it arms the try after it), so a
  -- dropped timer with a retry waiting is not collected: a collection calls
  -- no on_give_up, and only stop() ends the retry.
  it("a collection neither collects a timer whose retry waits nor calls on_give_up", function()
    local gave_up = 0
    local held = setmetatable({}, { __mode = "v" })
    do
      local tm = hwt.new{ tick = 0.001 }
      held[1] = tm
      hwt.retry(tm, failing, { delay = 60, on_give_up = function() gave_up = gave_up + 1 end })
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_not_nil(held[1], "the timer was collected while its retry waited")
    assert.are.equal(0, gave_up)
    held[1]:stop()                             -- ends the retry and lets its engine go
    assert.are.equal(1, gave_up)
  end)

  it("an on_give_up that raises inside stop(): the error goes to on_error, the other retries are told", function()
    local errors, told = {}, 0
    local tm = manual({ on_error = function(err, t) errors[#errors + 1] = { err = err, t = t } end })
    hwt.retry(tm, failing, { on_give_up = function() error("give-up-boom", 0) end })
    hwt.retry(tm, failing, { on_give_up = function() told = told + 1 end })
    local list = tm:stop()
    assert.are.equal(2, #list)
    assert.are.equal(1, told)
    assert.are.equal(1, #errors)
    assert.are.equal("give-up-boom", errors[1].err)
    assert.is_true(hwt.is_timeout(errors[1].t))
  end)

  if compat.has_close then
    it("a timer closed by <close> stops like stop(): the retry gives up", compat.compile([[
    return function()
      local gave_up = {}
      do
        local tm <close> = hwt.new{clock = "manual"}
        hwt.retry(tm, function() return false end,
                  { on_give_up = function(err) gave_up[#gave_up + 1] = err end })
      end
      assert.are.same({ "timer is stopped" }, gave_up)
    end
    ]], "@retry_spec.lua", { hwt = hwt }, _ENV))
  end
end)

describe("hwt.retry: options", function()
  it("on_retry must be a function (the error names it)", function()
    local timer = manual()
    local called = false
    local function fn() called = true; return true end
    assert_raises("on_retry", hwt.retry, timer, fn, { on_retry = 1 })
    assert_raises("on_retry", hwt.retry, timer, fn, { on_retry = "f" })
    assert.is_false(called)
    hwt.retry(timer, fn, { on_retry = function() end })
    assert.is_true(called)
    timer:stop()
  end)

  it("retries accepts math.huge but not NaN, negatives or fractions", function()
    local timer = manual()
    local function fn() return true end
    hwt.retry(timer, fn, { retries = math.huge })
    assert_raises("retries", hwt.retry, timer, fn, { retries = 0 / 0 })
    assert_raises("retries", hwt.retry, timer, fn, { retries = -math.huge })
    assert_raises("retries", hwt.retry, timer, fn, { retries = 2.5 })
    timer:stop()
  end)

  it("a non-callable fn (a table without __call) raises before anything runs", function()
    local timer = manual()
    local ok = pcall(hwt.retry, timer, {})
    assert.is_false(ok)
    ok = pcall(hwt.retry, timer, setmetatable({}, { __index = { __call = function() end } }))
    assert.is_false(ok)
    assert.are.equal(0, timer:pending())
    timer:stop()
  end)
end)

describe("hwt.retry with hostile arguments", function()
  local function fails() return nil, "no" end

  it("names argument #1 when it is not an hwt.Timer (a Timeout included)", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    for _, case in ipairs(wrong_values({ Timeout = t })) do
      assert_error(hwt.retry, pack(case[2], fails), "bad argument #1 to 'retry'", "hwt.Timer expected")
    end
    tm:stop()
  end)

  it("names argument #2 when fn is not callable", function()
    local tm = manual()
    local bad = pack(nil, "x", {}, 42, true, io.stdout, setmetatable({}, { __call = 42 }))
    for i = 1, bad.n do
      assert_error(hwt.retry, pack(tm, bad[i]), "bad argument #2 to 'retry'", "function or callable expected")
    end
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("names argument #3 when opts is not a table", function()
    local tm = manual()
    for _, v in ipairs({ "x", 42, true, print, io.stdout }) do
      assert_error(hwt.retry, pack(tm, fails, v), "bad argument #3 to 'retry'", "table expected")
    end
    tm:stop()
  end)

  it("names the option for unknown keys and bad values", function()
    local tm = manual()
    local cases = {
      { "retires", 3 }, { "retries", -1 }, { "retries", 1.5 }, { "retries", 0 / 0 },
      { "retries", -math.huge }, { "retries", true }, { "delay", -1 }, { "delay", 0 / 0 },
      { "delay", -math.huge }, { "delay", {} }, { "backoff", 0.5 }, { "backoff", 0 }, { "backoff", -1 },
      { "backoff", 0 / 0 }, { "max_delay", -1 }, { "max_delay", 0 / 0 }, { "jitter", -0.1 },
      { "jitter", 1.5 }, { "jitter", 0 / 0 }, { "jitter", math.huge }, { "on_give_up", 42 },
      { "on_success", "x" }, { "random", 1 },
    }
    local calls = 0
    for _, case in ipairs(cases) do
      local message = error_of(hwt.retry, tm, function() calls = calls + 1 end, { [case[1]] = case[2] })
      assert(message:find(case[1], 1, true), ("%s = %s: %s"):format(case[1], show(case[2]), message))
      assert(message:find("retry", 1, true), message)
    end
    assert.are.equal(0, calls)                   -- refused before the first call
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("numeric-string options: used as numbers, or refused naming the option", function()
    local tm = manual()
    for _, key in ipairs({ "retries", "delay", "backoff", "max_delay", "jitter" }) do
      local ok, err = pcall(hwt.retry, tm, fails, { [key] = "1" })
      assert(ok or tostring(err):find(key, 1, true), tostring(err))
    end
    tm:stop()
  end)

  it("delay = math.huge is capped by max_delay; 1e308 with max_delay = math.huge clamps, never fires", function()
    local tm = manual()
    local h = hwt.retry(tm, fails, { delay = math.huge, retries = 1 })
    assert.are.equal(1, h.attempts)
    assert.are.equal(1, tm:pending())
    tm:advance(60)
    assert.are.equal(2, h.attempts)
    local h2 = hwt.retry(tm, fails, { delay = 1e308, max_delay = math.huge, retries = 1 })
    for _ = 1, 3 do tm:advance(1e9) end
    assert.are.equal(1, h2.attempts)
    assert.is_true(h2:cancel())
    assert.is_false(h2:cancel())
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("never stalls silently: with delay = 0 and backoff = math.huge it keeps trying, then gives up", function()
    local errors, gave_up = {}, {}
    local tm = manual({ on_error = function(err) errors[#errors + 1] = tostring(err) end })
    local h = hwt.retry(tm, fails, { delay = 0, backoff = math.huge, retries = 3,
                                     on_give_up = function(err) gave_up[#gave_up + 1] = err end })
    for _ = 1, 10 do tm:advance(100) end
    assert.are.same({}, errors)
    assert.are.equal(4, h.attempts)
    assert.are.same({ "no" }, gave_up)
    tm:stop()
  end)

  it("a retry on a stopped timer makes its first call, then gives up with 'timer is stopped'", function()
    local tm = manual()
    tm:stop()
    local calls, gave_up = 0, {}
    local h = hwt.retry(tm, function() calls = calls + 1 return false end,
                        { on_give_up = function(err) gave_up[#gave_up + 1] = err end })
    assert.are.equal(1, calls)
    assert.are.same({ "timer is stopped" }, gave_up)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
  end)

  it("a cancel from the on_earlier watcher while the next try is armed: no give-up, nothing left armed", function()
    local timer = manual()
    local handle, cancelled, gave_up
    handle = hwt.retry(timer, function() return nil, "fail" end,
      { retries = 5, delay = 1, on_give_up = function() gave_up = true end })
    timer:on_earlier(function() if cancelled == nil then cancelled = handle:cancel() end end)
    timer:advance(1)                             -- the second call fails; arming its next try tells the watcher
    assert.is_true(cancelled)
    assert.are.equal(0, timer:pending())
    timer:stop()
    assert.is_nil(gave_up)
    assert.are.equal(2, handle.attempts)
  end)
end)
