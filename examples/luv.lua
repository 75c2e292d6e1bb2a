-- hwt in a libuv loop (luv): require("hwt.luv").attach(timer) puts the
-- timer into luv's loop, so hwt's timeouts live beside sockets. A TCP echo
-- server and its client share the loop: the server closes a connection after
-- IDLE_AFTER without reads (the idle timeout is cancelled and re-armed on
-- every read), the client gives each request REQUEST_TIMEOUT to be answered,
-- and a heartbeat ticks meanwhile. Like a uv timer, the attachment keeps
-- uv.run() going only while a timeout can fall due: once the client is done
-- and the heartbeat cancelled, uv.run() returns by itself.
local uv = require("luv")
local hwt = require("hwt")

-- A task's error must not pass unnoticed: poll() would report it and go on.
local timer = hwt.new({ tick = 0.005, on_error = function(err)
  io.stderr:write("hwt task failed: ", tostring(err), "\n")
  os.exit(1)
end })
local started = hwt.now()
local events = {}
local function log(fmt, ...)
  local line = fmt:format(...)
  events[#events + 1] = line
  io.write(("[%6.3fs] "):format(hwt.now() - started), line, "\n")
end

local GAP, REQUEST_TIMEOUT, IDLE_AFTER, HEARTBEAT_EVERY = 0.05, 0.1, 0.25, 0.05

-- The bridge: a uv poll handle on timer:fd(), open while a timeout is pending.
assert(require("hwt.luv").attach(timer))

local beats = 0
local heartbeat = timer:every(HEARTBEAT_EVERY, function() beats = beats + 1 end)

-- Splits a stream into lines; TCP keeps no message boundaries.
local function line_reader(on_line)
  local buffer = ""
  return function(data)
    buffer = buffer .. data
    for line in buffer:gmatch("([^\n]*)\n") do on_line(line) end
    buffer = buffer:match("[^\n]*$")
  end
end

-- Server: echoes each line, except "drop ..." lines, which it ignores.
local server = uv.new_tcp()
assert(server:bind("127.0.0.1", 0))
local port = server:getsockname().port
assert(server:listen(8, function(err)
  assert(not err, err)
  local sock = uv.new_tcp()
  assert(server:accept(sock))
  local idle
  local function touch()                       -- on every read
    if idle then idle:cancel() end
    idle = timer:timeout(IDLE_AFTER, function()
      log("server: idle for %.2fs, closing", IDLE_AFTER)
      sock:close()
    end)
  end
  touch()
  local feed = line_reader(function(line)
    if line:match("^drop") then
      log("server: ignores %q", line)
    else
      log("server: echoes %q", line)
      sock:write(line .. "\n")
    end
  end)
  sock:read_start(function(read_err, data)
    assert(not read_err, read_err)
    assert(data, "the client never closes first here")
    touch()
    feed(data)
  end)
end))

-- Client: three pings GAP apart, each answered before its request timeout;
-- then one the server drops, whose timeout fires; then it goes quiet.
local client = uv.new_tcp()
local request                                  -- the request timeout in flight
local timed_out = 0
local finish                                   -- defined below

local function send(n)
  local text = (n <= 3 and "ping " or "drop ") .. n
  client:write(text .. "\n")
  request = timer:timeout(REQUEST_TIMEOUT, function()
    log("client: request %d timed out", n)
    timed_out = timed_out + 1
    request = nil
  end)
end

local on_reply = line_reader(function(line)
  assert(request and request:cancel(), "a reply must beat its request timeout")
  request = nil
  log("client: reply %q", line)
  local n = tonumber(line:match("%d+"))
  timer:timeout(GAP, function() send(n + 1) end)
end)

assert(client:connect("127.0.0.1", port, function(err)
  assert(not err, err)
  client:read_start(function(read_err, data)
    assert(not read_err, read_err)
    if data then return on_reply(data) end
    log("client: server closed the connection")
    client:close()
    finish()
  end)
  send(1)
end))

-- If something hangs, a plain libuv timer (not hwt) ends the run. unref():
-- it does not keep uv.run() going by itself.
local watchdog = uv.new_timer()
local hung = false
watchdog:start(5000, 0, function() hung = true; uv.stop() end)
watchdog:unref()

function finish()
  heartbeat:cancel()                           -- nothing pending now: the loop may end
  server:close()
end

uv.run()                                       -- returns once nothing can fall due
assert(not hung, "the loop hung; events so far: " .. table.concat(events, "; "))
watchdog:close()
uv.run()                                       -- runs the close callback
assert(timer:pending() == 0, "nothing should be left pending")
local closed, close_err = uv.loop_close()      -- no handle of hwt.luv's is left open
assert(closed, close_err)
local lived = hwt.now() - started
log("done after %.3fs: %d heartbeats", lived, beats)

local expected = {
  'server: echoes "ping 1"', 'client: reply "ping 1"',
  'server: echoes "ping 2"', 'client: reply "ping 2"',
  'server: echoes "ping 3"', 'client: reply "ping 3"',
  'server: ignores "drop 4"', "client: request 4 timed out",
  ("server: idle for %.2fs, closing"):format(IDLE_AFTER),
  "client: server closed the connection",
}
for i, line in ipairs(expected) do
  assert(events[i] == line, ("event %d: expected %q, got %q"):format(i, line, tostring(events[i])))
end
assert(timed_out == 1, "exactly the dropped request should time out")
assert(lived >= 3 * GAP + IDLE_AFTER, "closed too early: " .. lived)
assert(beats >= 5, "the heartbeat should have run meanwhile: " .. beats)
print("luv example: ok")
