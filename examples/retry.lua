-- Failback retry, as Dubbo's FailbackRegistry does it: register with a flaky
-- registry; on failure retry with exponential backoff; give up after N tries.
-- Run: make demo   (or: LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 examples/retry.lua)
local hwt = require("hwt")

local timer = hwt.new({ tick = 0.01 })
local started = hwt.now()
local function log(fmt, ...)
  io.write(("[%6.3fs] "):format(hwt.now() - started), fmt:format(...), "\n")
end

-- A registry that is down for its first two calls.
local calls = 0
local function register(attempt)
  calls = calls + 1
  if calls <= 2 then
    log("register attempt %d: connection refused", attempt)
    return nil, "connection refused"
  end
  log("register attempt %d: ok", attempt)
  return "session-42"
end

local session
hwt.retry(timer, register, {
  retries = 5, delay = 0.05, backoff = 2, max_delay = 1, jitter = 0.1,
  on_success = function(id) session = id; log("registered as %s", id) end,
  on_give_up = function(err) log("giving up: %s", err) end,
})

-- A second retry loop that will never succeed; a request timeout cancels it.
local subscribe = hwt.retry(timer, function() return nil, "no provider" end, {
  retries = 100, delay = 0.02,
  on_give_up = function() error("must not be reached: cancelled first") end,
})
timer:timeout(0.15, function()
  log("subscribe: %d attempts so far, cancelling", subscribe.attempts)
  subscribe:cancel()
end)

local ran = timer:run()                     -- wait()+poll() until nothing is pending
log("timer ran %d tasks; pending now %d", ran, timer:pending())
assert(session == "session-42", "registration should succeed on the third try")
assert(calls == 3, "three calls expected, got " .. calls)
assert(subscribe.attempts >= 3, "subscribe should have been retried before the cancel")
timer:stop()
print("retry example: ok")
