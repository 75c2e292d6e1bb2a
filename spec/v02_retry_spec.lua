-- v02_retry_spec.lua: black-box specs of the hwt 0.2 additions to hwt.retry
-- (/work/shared/API.md, "Additions in hwt 0.2" / "hwt.retry"):
--   * fn may be any callable; it is called as fn(attempt, handle);
--   * opts.on_retry(err, attempt, wait) before each wait;
--   * retries = math.huge; wait = min(b * (1 +- jitter), max_delay) with
--     b = min(delay * backoff^(k-1), max_delay);
--   * without on_give_up the last error goes to on_error (or stderr);
--   * a stop gives the retry up: on_give_up("timer is stopped") once, by
--     stop(), handle.done, handle:cancel() false.
-- Timings are checked exactly on the manual clock with timer:run_for(), which
-- runs every call of fn with timer:now() at its own deadline (the use case:
-- testing a user's retry logic).
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local manual, close_to, has_text = support.manual, support.close_to, support.has_text
local assert_raises = support.assert_raises

-- ---- fn: any callable, called as fn(attempt, handle) ------------------------------

describe("hwt.retry 0.2: fn", function()
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

-- ---- on_retry ------------------------------------------------------------------------

describe("hwt.retry 0.2: opts.on_retry(err, attempt, wait)", function()
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

-- ---- exact waits on the manual clock ----------------------------------------------------

describe("hwt.retry 0.2: waits (manual clock, run_for)", function()
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

-- ---- retries = math.huge ---------------------------------------------------------------

describe("hwt.retry 0.2: retries = math.huge", function()
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

-- ---- without on_give_up: never silent -----------------------------------------------------

describe("hwt.retry 0.2: without on_give_up the last error goes to on_error", function()
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

-- ---- stop() gives the retry up ------------------------------------------------------------

-- opts (default: a delay of 1 s) whose on_give_up and on_success write
-- "give up <err>" and "success <value>" to log.
local function logged(log, opts)
  opts = opts or {}
  opts.delay = opts.delay or 1
  opts.on_give_up = function(err) log[#log + 1] = "give up " .. tostring(err) end
  opts.on_success = function(v) log[#log + 1] = "success " .. tostring(v) end
  return opts
end

describe("hwt.retry 0.2: when the timer stops", function()
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
end)

-- ---- option checks for the additions --------------------------------------------------------

describe("hwt.retry 0.2: options", function()
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
