-- Idle timeouts with t:reset(): a TCP echo server (luv) that closes a
-- connection after IDLE seconds without a read. Each connection has one
-- Timeout, made when it is accepted; every read calls idle:reset(), which
-- re-arms that same Timeout (no new object: luv's timer:again(), Node's
-- refresh()). hwt.luv runs the timer in luv's loop, beside the sockets.
--
-- The script checks itself: in the same loop, a chatty client sends
-- CHAT_LINES lines, one every CHAT_EVERY (longer in all than IDLE), and must
-- never be cut off, while a quiet client says hello once and must be closed
-- by the server after IDLE. It exits 0, or raises if anything went wrong.
-- Run from the repository root (any of lua5.1-5.4, luajit; needs luv):
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 examples/echo_server.lua
local uv = require("luv")
local hwt = require("hwt")

local IDLE = 0.2             -- the server closes a connection this long without a read
local CHAT_EVERY = 0.05      -- the chatty client sends a line this often,
local CHAT_LINES = 10        -- this many lines in all, then hangs up
local WATCHDOG_MS = 5000     -- a hung run ends here

-- A task's error must not pass unnoticed: poll() would report it and go on.
local timer = hwt.new({ tick = 0.005, on_error = function(err)
  io.stderr:write("hwt task failed: ", tostring(err), "\n")
  os.exit(1)
end })
assert(require("hwt.luv").attach(timer))

local started = timer:now()
local function log(fmt, ...)
  io.write(("[%5.3fs] "):format(timer:now() - started), fmt:format(...), "\n")
end

-- The server ------------------------------------------------------------------
local server = uv.new_tcp()
assert(server:bind("127.0.0.1", 0))
local port = server:getsockname().port
local closed_for_idleness = {}                 -- the first line of each connection closed

assert(server:listen(8, function(err)
  assert(not err, err)
  local sock = uv.new_tcp()
  assert(server:accept(sock))
  local first_line
  local idle = timer:timeout(IDLE, function()
    log("server: no read for %.1fs from %q: closing", IDLE, first_line)
    closed_for_idleness[#closed_for_idleness + 1] = first_line
    sock:close()
  end)
  sock:read_start(function(read_err, data)
    assert(not read_err, read_err)
    if not data then                           -- the client hung up
      idle:cancel()
      return sock:close()
    end
    idle:reset()                               -- the idiom: re-arm on every read
    first_line = first_line or data:match("^[^\n]*")
    sock:write(data)
  end)
end))

-- The clients -----------------------------------------------------------------
local clients_left = 2
local function client_done()
  clients_left = clients_left - 1
  if clients_left == 0 then server:close() end -- the last handle: uv.run() may return
end

-- Connects, says `hello`; on_data(data) for each echo, on_closed(why) if
-- the server closes first (an EOF, or ECONNRESET when lines were in flight).
-- Returns the socket.
local function connect(hello, on_data, on_closed)
  local sock = uv.new_tcp()
  sock:connect("127.0.0.1", port, function(err)
    assert(not err, err)
    sock:read_start(function(read_err, data)
      if data then return on_data(data) end
      on_closed(read_err or "EOF")
    end)
    sock:write(hello .. "\n")
  end)
  return sock
end

local function count_lines(data)
  return select(2, data:gsub("\n", ""))
end

-- Quiet: one line, then silence, until the server closes the connection.
local quiet = { echoed = 0 }
quiet.sock = connect("quiet: hello", function(data)
  quiet.echoed = quiet.echoed + count_lines(data)
end, function(why)
  quiet.closed_at = timer:now()
  log("quiet client: the server closed the connection (%s)", why)
  quiet.sock:close()
  client_done()
end)

-- Chatty: a line every CHAT_EVERY; hangs up itself once all are echoed.
local chatty = { sent = 1, echoed = 0 }
chatty.sock = connect("chatty: 1", function(data)
  chatty.echoed = chatty.echoed + count_lines(data)
  if chatty.echoed < CHAT_LINES then return end
  log("chatty client: %d lines echoed, hanging up", chatty.echoed)
  chatty.done_at = timer:now()
  chatty.sock:close()
  client_done()
end, function(why)
  chatty.cut_off = true
  log("chatty client: cut off after %d lines (%s)", chatty.echoed, why)
  chatty.sock:close()
  client_done()
end)
timer:every(CHAT_EVERY, function(beat)
  if chatty.cut_off then return beat:cancel() end
  chatty.sent = chatty.sent + 1
  chatty.sock:write(("chatty: %d\n"):format(chatty.sent))
  if chatty.sent == CHAT_LINES then beat:cancel() end
end)

-- If something hangs, a plain libuv timer ends the run; unref(): it does
-- not keep uv.run() going by itself.
local watchdog = uv.new_timer()
watchdog:start(WATCHDOG_MS, 0, function() error("the example hung") end)
watchdog:unref()

uv.run()                                       -- returns once all is closed and nothing can fall due
watchdog:close()
uv.run()

-- The checks --------------------------------------------------------------------
assert(quiet.echoed == 1, "the quiet client's hello was not echoed")
assert(quiet.closed_at, "the quiet connection was never closed")
assert(quiet.closed_at - started >= IDLE, "the quiet connection was closed before IDLE")
assert(not chatty.cut_off, "the chatty connection was closed while it talked")
assert(chatty.echoed == CHAT_LINES, ("chatty: %d of %d lines echoed"):format(chatty.echoed, CHAT_LINES))
assert(quiet.closed_at < chatty.done_at, "the quiet one should be closed while the chatty one talks")
assert(#closed_for_idleness == 1 and closed_for_idleness[1] == "quiet: hello",
  "the server should close exactly the quiet connection for idleness")
assert(timer:pending() == 0, "nothing should be left pending")
assert(uv.loop_close())                        -- nothing of hwt.luv's is left open
log("quiet closed at %.3fs (IDLE %.1fs); chatty talked until %.3fs, never cut off",
  quiet.closed_at - started, IDLE, chatty.done_at - started)
print("echo_server example: ok")
