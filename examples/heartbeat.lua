-- A connection with a periodic heartbeat and an idle timeout that is
-- re-armed with reset() on every bit of activity (Netty's IdleStateHandler):
-- the same Timeout each time, no allocation.
local hwt = require("hwt")

local timer = hwt.new({ tick = 0.005 })
local started = hwt.now()
local function log(fmt, ...)
  io.write(("[%6.3fs] "):format(hwt.now() - started), fmt:format(...), "\n")
end

local IDLE_AFTER, HEARTBEAT_EVERY = 0.12, 0.04
local conn = { open = true, heartbeats = 0, activity = 0 }

local function on_idle()
  log("idle for %.2fs: closing the connection", IDLE_AFTER)
  conn.open = false
  conn.heartbeat:cancel()                   -- ends the periodic series
end

local function touch()                      -- called on every read or write
  conn.idle:reset()                         -- IDLE_AFTER from now, again
end

conn.heartbeat = timer:every(HEARTBEAT_EVERY, function()
  conn.heartbeats = conn.heartbeats + 1
  log("heartbeat %d", conn.heartbeats)
end)
conn.idle = timer:timeout(IDLE_AFTER, on_idle)

-- The peer talks five times, 50 ms apart, then goes quiet.
for i = 1, 5 do
  timer:timeout(0.05 * i, function()
    conn.activity = conn.activity + 1
    log("data from peer (%d)", conn.activity)
    touch()
  end)
end

timer:run()
local lived = hwt.now() - started
log("connection lived %.3fs with %d heartbeats", lived, conn.heartbeats)
assert(not conn.open, "the idle timeout should have closed the connection")
assert(lived >= 0.25 + IDLE_AFTER, "closed too early: " .. lived)
assert(conn.heartbeats >= 5, "heartbeats should run while the connection is open")
assert(timer:pending() == 0)
print("heartbeat example: ok")
