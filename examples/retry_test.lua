-- Testing your own retry logic without waiting for it. On a timer made with
-- hwt.new{clock = "manual"} time moves only when the test says so:
-- timer:run_for(seconds) lets `seconds` pass in steps, running every
-- timeout at its own deadline (timer:now() inside a task reads exactly that
-- deadline). So a retry loop that waits 1, 2, 4, 8 ... seconds is tested in
-- microseconds, with exact times, the same on every run.
--
-- Below: connect_with_retry(), written as an application would write it,
-- then its tests, with a fake connect that fails a given number of times.
-- Plain Lua and assert (Lua 5.1-5.4, LuaJIT): prints a report and exits 0,
-- or raises at the first expectation that does not hold. Run:
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 examples/retry_test.lua
local hwt = require("hwt")

-- The code under test ---------------------------------------------------------
local RETRIES, FIRST_WAIT, BACKOFF, MAX_WAIT = 5, 1, 2, 10

-- Calls connect(attempt) until it returns a connection, waiting FIRST_WAIT,
-- then BACKOFF times longer after each failure (at most MAX_WAIT), RETRIES
-- times at most. Ends with done(conn), or done(nil, last error).
local function connect_with_retry(timer, connect, done, log)
  return hwt.retry(timer, connect, {
    retries = RETRIES, delay = FIRST_WAIT, backoff = BACKOFF, max_delay = MAX_WAIT,
    on_retry = function(err, attempt, wait)
      log(("attempt %d failed (%s), next in %g s"):format(attempt, tostring(err), wait))
    end,
    on_success = done,
    on_give_up = function(err) done(nil, err) end,
  })
end

-- The tests ---------------------------------------------------------------------
local REFUSED = "connection refused"

-- A connect that fails `failures` times, then connects; it records the
-- timer's clock at each call.
local function fake_connect(timer, failures)
  local called_at = {}
  local function connect(attempt)
    called_at[#called_at + 1] = timer:now()
    if attempt <= failures then return nil, REFUSED end
    return { attempt = attempt }
  end
  return connect, called_at
end

-- Runs connect_with_retry on a fresh manual-clock timer; returns what a
-- test looks at.
local function start(failures)
  local timer = hwt.new({ clock = "manual" })
  local connect, called_at = fake_connect(timer, failures)
  local run = { timer = timer, called_at = called_at, log = {} }
  local function log(line)
    run.log[#run.log + 1] = ("[t=%g] %s"):format(timer:now(), line)
  end
  run.handle = connect_with_retry(timer, connect, function(conn, err)
    run.ended_at, run.conn, run.err = timer:now(), conn, err
  end, log)
  return run
end

local function show(list)
  local parts = {}
  for i = 1, #list do
    local v = list[i]
    parts[i] = type(v) == "number" and ("%g"):format(v) or ("%q"):format(tostring(v))
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function assert_same(actual, expected, what)
  local ok = #actual == #expected
  for i = 1, #expected do ok = ok and actual[i] == expected[i] end
  assert(ok, ("%s: expected %s, got %s"):format(what, show(expected), show(actual)))
end

-- Runs one test; `body` may return lines to show under its name.
local report = {}
local function test(name, body)
  local details = body() or {}
  report[#report + 1] = "ok  " .. name
  for _, line in ipairs(details) do report[#report + 1] = "      " .. line end
end

test("connects on the 4th attempt, after waits of 1, 2 and 4 s", function()
  local run = start(3)
  assert_same(run.called_at, { 0 }, "the first attempt is made at once")
  run.timer:run_for(6.999)
  assert_same(run.called_at, { 0, 1, 3 }, "attempt times before t=7")
  run.timer:run_for(0.001)
  assert_same(run.called_at, { 0, 1, 3, 7 }, "attempt times")
  assert(run.conn and run.conn.attempt == 4 and run.ended_at == 7, "connected at t=7 by attempt 4")
  assert(run.handle.done and run.handle.attempts == 4, "the handle tells the same")
  assert_same(run.log, {
    "[t=0] attempt 1 failed (connection refused), next in 1 s",
    "[t=1] attempt 2 failed (connection refused), next in 2 s",
    "[t=3] attempt 3 failed (connection refused), next in 4 s",
  }, "on_retry's (err, attempt, wait)")
  assert(run.timer:pending() == 0, "nothing left to run")
  return run.log
end)

test("gives up after RETRIES retries; waits stop growing at MAX_WAIT", function()
  local run = start(math.huge)
  run.timer:run_for(3600)
  assert_same(run.called_at, { 0, 1, 3, 7, 15, 25 }, "attempt times")
  assert(run.conn == nil and run.err == REFUSED and run.ended_at == 25, "gave up at t=25 with the last error")
  assert(run.handle.attempts == RETRIES + 1, "RETRIES + 1 calls in all")
  local waits = {}
  for _, line in ipairs(run.log) do waits[#waits + 1] = tonumber(line:match("next in (%S+) s")) end
  assert_same(waits, { 1, 2, 4, 8, 10 }, "waits seen by on_retry")
  assert(run.timer:now() == 3600 and run.timer:pending() == 0, "an hour passed, nothing left")
end)

test("a cancelled retry makes no further attempt and does not report", function()
  local run = start(math.huge)
  run.timer:run_for(2)
  assert(run.handle:cancel(), "a try was still to come")
  run.timer:run_for(3600)
  assert_same(run.called_at, { 0, 1 }, "attempt times")
  assert(run.ended_at == nil, "done() is not called after a cancel")
end)

print(table.concat(report, "\n"))
print("retry_test example: ok")
