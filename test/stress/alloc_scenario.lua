-- alloc_scenario.lua — the Lua half of test/stress/alloc_host.c.
--
-- The host loads this file with its allocator disarmed and gets a table of
-- three functions:
--   setup()     disarmed: creates the bookkeeping globals, every table already
--               sized, so that recording a result never allocates;
--   scenario()  armed: the allocator fails the Nth allocation; the function
--               must end normally or with "not enough memory";
--   check()     disarmed again, on the SAME state: the timers the scenario left
--               in _G.timers must still work, and nothing may be lost.
--
-- Bookkeeping rule: a global is updated only after the operation it records
-- has returned, with statements that cannot allocate (assignments to existing
-- fields and array slots, integer arithmetic, no calls in between). So if the
-- failure strikes anywhere, the books describe exactly what happened.
--   S.created / T[k] / B[k]     one-shot timeouts and the box their task counts in
--   S.cancelled                 cancel() calls (on one-shots) that returned true
--   S.pcreated / P[k] / PB[k]   periodic timeouts and their boxes
--   S.pcancelled                cancel() calls (on periodic ones) that returned true
--   S.closed / C[k]             one-shots handed to a <close> variable
--   S.lists / STOPS[j]          the arrays stop() returned
--   S.timers / timers[j]        every timer created
local M = {}

local SLOTS = 256          -- room in T, B, P, PB, C; the scenario stays far below

function M.setup()
  S = {
    phase = "setup",
    created = 0, cancelled = 0, pcreated = 0, pcancelled = 0, closed = 0,
    lists = 0, timers = 0, errors = 0, slept = 0, succeeded = 0, gave_up = 0,
    refused = 0, gc_made = 0, resets = 0, reset_runs = 0,
  }
  T, B, P, PB, C = {}, {}, {}, {}, {}
  for i = 1, SLOTS do
    T[i] = false; B[i] = false; P[i] = false; PB[i] = false; C[i] = false
  end
  timers, STOPS = {}, {}
  for i = 1, 32 do timers[i] = false; STOPS[i] = false end
end

-- ---- the scenario (runs with the failing allocator) -----------------------

function M.scenario()
  S.phase = "scenario"
  local hwt = require("hwt")

  local function on_error(err)
    S.errors = S.errors + 1
    -- on_error itself raises a number, a new one each time (its conversion
    -- to a string then allocates)
    if err == "boom-on-error" then error(1000 + S.errors) end
  end

  -- One-shot task: counts its runs in its box.
  local function once(_, box, a, b)
    box.n = box.n + 1
    box.sum = a + b
  end
  -- A task that raises (a string without position, or a table).
  local function raiser(_, box, message)
    box.n = box.n + 1
    if message then error(message, 0) end
    error({ code = 1 })
  end
  -- Periodic task: cancels itself after `limit` runs.
  local function beat(t, box, limit)
    box.n = box.n + 1
    if box.n >= limit then
      if t:cancel() then S.pcancelled = S.pcancelled + 1 end
    end
  end
  local task_table = { run = function(_, _, box) box.n = box.n + 1 end }
  local callable = setmetatable({}, { __call = function(_, _, box) box.n = box.n + 1 end })

  -- 1. A manual-clock timer, left alive for check().
  local tm = hwt.new({ clock = "manual", tick = 0.01, wheel_size = 64, on_error = on_error })
  do local j = S.timers + 1; timers[j] = tm; S.timers = j end

  for i = 1, 8 do                                  -- timeouts with arguments
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(i * 0.01, once, box, i, 100)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.015, raiser, box, "boom")
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.015, raiser, box, "boom-on-error")
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.016, raiser, box, false)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.012, task_table, box)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.012, callable, box)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(math.huge, once, box, 1, 1)       -- never
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0 }
    local p = tm:every(0.02, beat, box, 3)
    if p then local k = S.pcreated + 1; P[k] = p; PB[k] = box; S.pcreated = k end
  end
  do
    local box = { n = 0 }
    local p = tm:every(0.03, beat, box, 1000)              -- still armed at the end
    if p then local k = S.pcreated + 1; P[k] = p; PB[k] = box; S.pcreated = k end
  end

  -- A task that schedules, cancels a sibling, polls and advances from inside,
  -- and collects garbage (finalizers run inside the poll).
  local function nester(_, box, victim)
    box.n = box.n + 1
    local nb = { n = 0, sum = 0 }
    local nt = tm:timeout(0, once, nb, 1, 2)
    if nt then local k = S.created + 1; T[k] = nt; B[k] = nb; S.created = k end
    if victim:cancel() then S.cancelled = S.cancelled + 1 end
    tm:poll()
    tm:advance(0.001)
    collectgarbage()
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.011, nester, box, T[8])
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end

  -- An object whose finalizer schedules a timeout on tm.
  setmetatable({}, { __gc = function()
    if S.phase ~= "scenario" then return end
    local gb = { n = 0, sum = 0 }
    local gt = tm:timeout(0, once, gb, 3, 4)
    if gt then
      local k = S.created + 1; T[k] = gt; B[k] = gb; S.created = k
      S.gc_made = S.gc_made + 1
    end
  end })

  -- Introspection.
  local text = tostring(tm) .. tostring(T[1]) .. tostring(P[1])
  local stats = tm:stats()
  local sum = T[1]:remaining() + tm:now() + hwt.now() + tm:pending() + tm:fd()
    + stats.pending + #text
  tm:wait(0)
  S.sum = sum

  if T[2]:cancel() then S.cancelled = S.cancelled + 1 end
  do                                               -- a <close> Timeout
    local box = { n = 0, sum = 0 }
    local t = tm:timeout(0.5, once, box, 1, 1)
    if t then local k = S.closed + 1; C[k] = t; S.closed = k end
    do local closing <close> = t end
  end

  -- sleep() in a coroutine.
  local co = coroutine.create(function(timer)
    timer:sleep(0.05)
    S.slept = S.slept + 1
    timer:sleep(100)                               -- still asleep at the end
  end)
  do local ok, err = coroutine.resume(co, tm); if not ok then error(err, 0) end end

  -- hwt.retry: succeeds on the 3rd call; always fails; cancelled at once.
  hwt.retry(tm, function(attempt)
    if attempt < 3 then return nil, "not yet" end
    return "done"
  end, {
    retries = 4, delay = 0.01, backoff = 2, jitter = 0.5,
    random = function() return 0.25 end,
    on_success = function() S.succeeded = S.succeeded + 1 end,
    on_give_up = function() S.gave_up = S.gave_up + 1 end,
  })
  hwt.retry(tm, function() error("always", 0) end, {
    retries = 1, delay = 0.01,
    on_give_up = function() S.gave_up = S.gave_up + 1 end,
  })
  local h = hwt.retry(tm, function() return false end, { retries = 5, delay = 1 })
  h:cancel()

  -- Drive the manual clock.
  tm:advance(0.01)
  tm:poll()
  tm:advance(0.011)
  tm:poll(1)
  tm:advance(0.03)
  tm:advance(0.1)
  tm:advance(0.1)

  -- 2. max_pending, and stop() from inside a task.
  local tm2 = hwt.new({ clock = "manual", max_pending = 6, on_error = on_error })
  do local j = S.timers + 1; timers[j] = tm2; S.timers = j end
  local function stopper(_, box)
    box.n = box.n + 1
    local list = tm2:stop()
    local j = S.lists + 1; STOPS[j] = list; S.lists = j
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm2:timeout(0.005, stopper, box)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  for i = 1, 7 do
    local box = { n = 0, sum = 0 }
    local t = tm2:timeout((i % 3) * 0.005, once, box, i, 1)
    if t then
      local k = S.created + 1; T[k] = t; B[k] = box; S.created = k
    else
      S.refused = S.refused + 1
    end
  end
  tm2:advance(0.01)
  tm2:advance(0.01)

  -- 3. stop() from on_error; an on_error that polls.
  local tm3
  tm3 = hwt.new({ clock = "manual", on_error = function()
    S.errors = S.errors + 1
    local list = tm3:stop()
    local j = S.lists + 1; STOPS[j] = list; S.lists = j
  end })
  do local j = S.timers + 1; timers[j] = tm3; S.timers = j end
  for i = 1, 3 do
    local box = { n = 0, sum = 0 }
    local t
    if i == 2 then t = tm3:timeout(0.01, raiser, box, "err3")
    else t = tm3:timeout(0.01, once, box, i, 0) end
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  tm3:advance(0.02)

  local tm4
  tm4 = hwt.new({ clock = "manual", on_error = function()
    S.errors = S.errors + 1
    tm4:poll()
  end })
  do local j = S.timers + 1; timers[j] = tm4; S.timers = j end
  for i = 1, 3 do
    local box = { n = 0, sum = 0 }
    local t
    if i == 1 then t = tm4:timeout(0.01, raiser, box, "err4")
    else t = tm4:timeout(0.01, once, box, i, 0) end
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  tm4:advance(0.02)
  do
    local list = tm4:stop()
    local j = S.lists + 1; STOPS[j] = list; S.lists = j
  end

  -- 4. Odd corners on a fifth manual timer: a periodic whose error makes
  -- on_error raise, many task arguments, numeric strings, never-due and
  -- sub-nanosecond periodic timeouts, a sleep ended by hand, a retry refused
  -- by max_pending, a to-be-closed timer.
  local tm5 = hwt.new({ clock = "manual", tick = "0.001", wheel_size = "8", max_pending = 12,
                        on_error = on_error })
  do local j = S.timers + 1; timers[j] = tm5; S.timers = j end
  do
    local box = { n = 0 }
    local p = tm5:every("0.002", raiser, box, "boom-on-error")
    if p then local k = S.pcreated + 1; P[k] = p; PB[k] = box; S.pcreated = k end
  end
  do
    local box = { n = 0 }
    local p = tm5:every(1e-12, beat, box, 2)
    if p then local k = S.pcreated + 1; P[k] = p; PB[k] = box; S.pcreated = k end
  end
  do
    local box = { n = 0 }
    local p = tm5:every(math.huge, beat, box, 1)
    if p then local k = S.pcreated + 1; P[k] = p; PB[k] = box; S.pcreated = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm5:timeout(0.001, function(timeout, b, ...)
      b.n = b.n + 1
      b.sum = select("#", ...) + (timeout:timer() == tm5 and 1 or 0)
    end, box, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
    local same = t:task() ~= nil and t:timer() == tm5
    S.sum = S.sum + (same and 1 or 0)
  end
  do
    local box = { n = 0, sum = 0 }
    local t = tm5:timeout(1e308, once, box, 1, 1)          -- clamps: never within the test
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  local co2 = coroutine.create(function(timer) return timer:sleep(10) end)
  do local ok, err = coroutine.resume(co2, tm5); if not ok then error(err, 0) end end
  do local ok, err = coroutine.resume(co2, "by hand"); if not ok then error(err, 0) end end
  local tm6 = hwt.new({ clock = "manual", max_pending = 1, on_error = on_error })
  do local j = S.timers + 1; timers[j] = tm6; S.timers = j end
  do
    local box = { n = 0, sum = 0 }
    local t = tm6:timeout(5, once, box, 1, 1)              -- takes the only place
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  hwt.retry(tm6, function() return nil, "no" end, {
    delay = 0.01, on_give_up = function() S.gave_up = S.gave_up + 1 end,
  })
  do
    local t7 <close> = hwt.new({ clock = "manual" })
    do local j = S.timers + 1; timers[j] = t7; S.timers = j end
    for i = 1, 3 do
      local box = { n = 0, sum = 0 }
      local t = t7:timeout(i, once, box, i, i)
      if t then local k = S.closed + 1; C[k] = t; S.closed = k end
    end
    t7:advance(1)
  end
  tm5:advance(0.002)
  tm5:advance(0.002)
  tm5:advance(1e6)
  S.sum = S.sum + #tostring(tm5:stats().late_max) + #tostring(timers[S.timers])

  -- 5. The real clock: the default on_error (stderr), a periodic, a delay 0.
  local rt = hwt.new({ tick = 0.001 })
  do local j = S.timers + 1; timers[j] = rt; S.timers = j end
  do
    local box = { n = 0, sum = 0 }
    local t = rt:timeout(0, once, box, 5, 6)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  do
    local box = { n = 0, sum = 0 }
    local t = rt:timeout(0.001, raiser, box, "real-boom")
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end
  local rp
  do
    local box = { n = 0 }
    rp = rt:every(0.001, beat, box, 2)
    if rp then local k = S.pcreated + 1; P[k] = rp; PB[k] = box; S.pcreated = k end
  end
  local spins = 0
  while rt:pending() > 0 and spins < 100 do
    rt:wait(0.005)
    rt:poll()
    spins = spins + 1
  end
  if rp:cancel() then S.pcancelled = S.pcancelled + 1 end  -- so that run() surely ends
  do
    local box = { n = 0, sum = 0 }
    local t = rt:timeout(0.001, once, box, 1, 1)
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
    rt:run()
  end
  do
    local box = { n = 0, sum = 0 }
    local t = rt:timeout(3600, once, box, 1, 1)            -- left for check()
    if t then local k = S.created + 1; T[k] = t; B[k] = box; S.created = k end
  end

  -- 6. The 0.2 calls: reset() of a pending, a run and a cancelled timeout
  -- (re-anchoring may fail), timeouts(), deadline(), run_for() stepping
  -- through a periodic, late_p50/p99. Each reset's run is counted in R.
  local tm6 = hwt.new({ clock = "manual", on_error = on_error })
  do local j = S.timers + 1; timers[j] = tm6; S.timers = j end
  do
    local box = { n = 0 }
    local r = tm6:timeout(0.01, function() box.n = box.n + 1; S.reset_runs = S.reset_runs + 1 end)
    if r:reset(0.02) then S.resets = S.resets + 1 end
    local listed = tm6:timeouts()
    S.sum = S.sum + #listed + r:deadline()
    tm6:run_for(0.03)                                -- runs r once
    if r:reset() then S.resets = S.resets + 1 end     -- anchored again
    r:cancel()
    if r:reset(0.01) then S.resets = S.resets + 1 end
    local p = tm6:every(0.01, beat, { n = 0 }, 1000)
    tm6:run_for(0.05)                                -- r again, the periodic 5 times
    p:cancel()
    local stats = tm6:stats()
    S.sum = S.sum + stats.late_p50 + stats.late_p99
  end

  S.phase = "scenario done"
end

-- ---- the check (allocator disarmed, same state) ---------------------------

local function state_of(t)
  return (tostring(t):match("^hwt%.Timeout %((.-), "))
end

function M.check(clean)
  local scenario_phase = S.phase
  S.phase = "check"
  local hwt = require("hwt")

  -- After a run without a refusal, the scenario did everything it meant to.
  if clean then
    assert(scenario_phase == "scenario done", "the clean run ended in phase " .. tostring(scenario_phase))
    local expected = { slept = 1, succeeded = 1, gave_up = 2, refused = 2, gc_made = 1,
                       timers = 9, pcancelled = 3, resets = 3, reset_runs = 2 }
    for key, value in pairs(expected) do
      assert(S[key] == value, ("clean run: S.%s = %s, expected %s"):format(key, tostring(S[key]), value))
    end
  end

  -- No task is running now, so no timeout may say "running": a poll() that
  -- raised must not leave the one it was running behind (stuck for ever, and
  -- a periodic one still counted by pending() but never run again).
  for _, books in ipairs({ { T, S.created }, { P, S.pcreated }, { C, S.closed } }) do
    for k = 1, books[2] do
      local t = books[1][k]
      assert(state_of(t) ~= "running", ("a timeout is stuck running outside any poll: %s"):format(
        tostring(t)))
    end
  end

  -- Every timer the scenario created still answers, then stops.
  local returned = {}
  for j = 1, S.timers do
    local tm = timers[j]
    local pending = tm:pending()
    assert(math.type(pending) == "integer" and pending >= 0, "pending() is not a count")
    local stats = tm:stats()
    assert(stats.pending == pending, "stats().pending ~= pending()")
    assert(stats.due <= pending, "more due than pending")
    assert(math.type(tm:poll()) == "integer", "poll() did not return an integer")
    if stats.clock == "manual" and not stats.stopped then
      assert(math.type(tm:advance(1)) == "integer", "advance() did not return an integer")
      assert(math.type(tm:advance(1)) == "integer", "advance() did not return an integer")
    end
    assert(type(tostring(tm)) == "string")
    local before = tm:pending()
    local list = tm:stop()
    assert(type(list) == "table" and #list <= before, "stop() returned more than was pending")
    for i = 1, #list do
      assert(list[i]:is_cancelled() and not list[i]:is_expired(), "stop() returned a timeout that ran")
      returned[list[i]] = true
    end
    assert(tm:pending() == 0 and #tm:stop() == 0 and tm:stats().stopped, "stop() did not stop")
    local ok, err = pcall(tm.timeout, tm, 1, print)
    assert(not ok and tostring(err):find("timer is stopped", 1, true), "timeout() after stop()")
  end

  -- Tasks run by the polls above may have stopped a timer themselves.
  for j = 1, S.lists do
    local list = STOPS[j]
    for i = 1, #list do returned[list[i]] = true end
  end

  -- Nothing lost: every one-shot ran once, or was cancelled by the scenario,
  -- or was returned by stop().
  local ran, cancelled, by_stop = 0, 0, 0
  for k = 1, S.created do
    local t, box = T[k], B[k]
    local state = state_of(t)
    assert(state == "expired" or state == "cancelled",
      ("one-shot #%d left in state %q: %s"):format(k, tostring(state), tostring(t)))
    local expired, is_cancelled = t:is_expired(), t:is_cancelled()
    assert(expired ~= is_cancelled, ("one-shot #%d: expired=%s cancelled=%s"):format(
      k, tostring(expired), tostring(is_cancelled)))
    assert(box.n <= 1, ("one-shot #%d ran %d times"):format(k, box.n))
    assert(box.n == 0 or expired, ("one-shot #%d ran but is not expired"):format(k))
    assert(t:remaining() == 0, "remaining() ~= 0 after the end")
    if expired then
      assert(not returned[t], "stop() returned a timeout that ran")
      ran = ran + 1
    elseif returned[t] then
      by_stop = by_stop + 1
    else
      cancelled = cancelled + 1
    end
  end
  assert(ran + S.cancelled + by_stop == S.created,
    ("nothing lost: created %d ~= ran %d + cancelled %d + returned by stop %d"):format(
      S.created, ran, S.cancelled, by_stop))
  assert(cancelled == S.cancelled, ("cancelled %d, but cancel() returned true %d times"):format(
    cancelled, S.cancelled))

  local p_cancelled = 0
  for k = 1, S.pcreated do
    local t, box = P[k], PB[k]
    local state = state_of(t)
    assert(state == "expired" or state == "cancelled",
      ("periodic #%d left in state %q"):format(k, tostring(state)))
    assert(box.n == 0 or t:is_expired(), "periodic ran but is not expired")
    if returned[t] then
      assert(t:is_cancelled() and box.n == 0 and not t:is_expired(), "periodic returned by stop() had run")
    elseif t:is_cancelled() then
      p_cancelled = p_cancelled + 1
    else
      assert(t:is_expired(), "periodic neither cancelled, returned nor ended")
    end
  end
  assert(p_cancelled == S.pcancelled, ("periodic: cancelled %d, cancel() returned true %d times"):format(
    p_cancelled, S.pcancelled))

  for k = 1, S.closed do         -- a <close> Timeout, or one of a <close> timer
    local t = C[k]
    local state = state_of(t)
    assert(state == "expired" or state == "cancelled",
      ("closed #%d left in state %q"):format(k, tostring(state)))
    assert(t:is_expired() ~= t:is_cancelled(), "<close> timeout ended two ways or none")
  end

  -- A new timer works, on both clocks.
  local nt = hwt.new({ clock = "manual" })
  local got = {}
  nt:timeout(0.5, function(_, a, b) got[#got + 1] = a + b end, 1, 2)
  nt:every(0.25, function(t) got[#got + 1] = "beat"; if #got >= 4 then t:cancel() end end)
  nt:advance(0.25); nt:advance(0.25); nt:advance(0.25)
  assert(got[1] == "beat" and got[2] == 3 and got[3] == "beat" and got[4] == "beat" and #got == 4,
    "a new manual timer misbehaves")
  assert(nt:pending() == 0 and #nt:stop() == 0)
  local rt = hwt.new({ tick = 0.001 })
  local fired = false
  rt:timeout(0, function() fired = true end)
  local spins = 0
  while not fired and spins < 1000 do rt:wait(0.01); rt:poll(); spins = spins + 1 end
  assert(fired, "a new real-clock timer did not fire")
  rt:stop()
  collectgarbage()
  collectgarbage()
  S.phase = "done"
end

return M
