-- hwt.retry in a coroutine host (luv): a client that reconnects for real.
-- The server's port is bound but not listening yet, so connects are refused;
-- it starts listening SERVER_UP_AFTER later. retry's fn connects with
-- straight-line code: it waits for luv's callback by yielding its coroutine
-- (the first call runs in the coroutine that calls hwt.retry, the retries in
-- the coroutines that hwt.luv's spawn gives each task). Tasks, and so fn,
-- may yield on Lua 5.2+ and LuaJIT; on PUC 5.1, where pcall cannot be
-- yielded across, the yield is the attempt's error: see the end of the file.
local uv = require("luv")
local hwt = require("hwt")

local SERVER_UP_AFTER = 0.3

-- A task's error must not pass unnoticed: poll() would report it and go on.
local timer = hwt.new({ tick = 0.005, on_error = function(err)
  io.stderr:write("hwt task failed: ", tostring(err), "\n")
  os.exit(1)
end })
local started = hwt.now()
local function log(fmt, ...)
  io.write(("[%6.3fs] "):format(hwt.now() - started), fmt:format(...), "\n")
end

-- Each due task in a coroutine of its own, so that it may wait for luv.
assert(require("hwt.luv").attach(timer, { spawn = function(run) coroutine.wrap(run)() end }))

-- Starts a luv call with a callback that resumes this coroutine; returns
-- what the callback was given.
local function await(start)
  local co = coroutine.running()
  start(function(...)
    local ok, err = coroutine.resume(co, ...)
    if not ok then error(err, 0) end
  end)
  return coroutine.yield()
end

-- The server: bound now (so the port is known), listening later; echoes a line.
local server = uv.new_tcp()
assert(server:bind("127.0.0.1", 0))
local port = server:getsockname().port
local server_up = timer:timeout(SERVER_UP_AFTER, function()
  log("server: listening on port %d", port)
  assert(server:listen(8, function(err)
    assert(not err, err)
    local conn = uv.new_tcp()
    assert(server:accept(conn))
    conn:read_start(function(read_err, data)
      if read_err or not data then return conn:close() end
      conn:write("echo: " .. data)
    end)
  end))
end)

-- retry's fn: one connect; the socket, or nil and luv's error.
local function connect(attempt)
  local sock = uv.new_tcp()
  local err = await(function(done) sock:connect("127.0.0.1", port, done) end)
  if err then
    sock:close()
    log("client: attempt %d: %s", attempt, err)
    return nil, err
  end
  log("client: attempt %d: connected", attempt)
  return sock
end

-- on_success: says hello through the new connection and waits for the echo.
local reply
local function talk(sock)
  sock:write("hello\n")
  local err, data = await(function(done) sock:read_start(done) end)
  sock:read_stop()
  sock:close()
  assert(not err and data, err or "the server closed first")
  reply = data:match("^([^\n]*)")
  log("client: reply %q", reply)
  server:close()                             -- the last handle: uv.run() may return
end

-- If something hangs, a plain libuv timer (not hwt) ends the run; unref():
-- it does not keep uv.run() going by itself.
local watchdog = uv.new_timer()
watchdog:start(5000, 0, function() log("hung"); os.exit(1) end)
watchdog:unref()

local pcall_yields = coroutine.wrap(function() return pcall(coroutine.yield, true) end)() == true

if pcall_yields then
  local handle, gave_up
  coroutine.wrap(function()                  -- the first attempt waits too
    handle = hwt.retry(timer, connect, {
      retries = 10, delay = 0.05, backoff = 2, max_delay = 0.2,
      on_success = talk,                     -- in the coroutine of the call that connected
      on_give_up = function(err) gave_up = err end,
    })
  end)()
  uv.run()                                   -- returns once the retry is done and all is closed
  assert(gave_up == nil, "the retry gave up: " .. tostring(gave_up))
  assert(reply == "echo: hello", "no reply through the reconnected socket: " .. tostring(reply))
  assert(handle.done and handle.attempts >= 2, "the first attempts should have been refused")
  log("reconnected after %d attempts", handle.attempts)
else
  -- PUC Lua 5.1: fn cannot wait; its yield fails every attempt, and the
  -- retry gives up with that error.
  server_up:cancel()
  server:close()
  local gave_up
  hwt.retry(timer, function() return coroutine.yield() end, {
    retries = 2, delay = 0.01, on_give_up = function(err) gave_up = err end,
  })
  uv.run()
  assert(tostring(gave_up):find("yield"), "expected the yield error, got " .. tostring(gave_up))
  log("Lua 5.1: fn cannot yield (%s)", gave_up)
end
watchdog:close()
uv.run()
assert(uv.loop_close())                      -- nothing of hwt.luv's is left open
print("retry_reconnect example: ok")
