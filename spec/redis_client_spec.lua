-- hwt.redis, the Redis client over libhiredis, against a real redis-server
-- started on 127.0.0.1 for this file (test/host/redis_server.lua): every
-- reply type as redis-lua maps it, big and nested replies, binary-safe
-- strings, numbers sent exactly, error replies told from transport failures
-- (a timeout, a server killed under a call, bytes nested past hiredis'
-- limit), use after close, collected clients, bad arguments, Pub/Sub
-- without blocking; then hwt.jobs with it, end to end, on every Lua (the
-- jobs specs run whole with it on Lua 5.4: spec/jobs_support.lua). Run under
-- ASan+UBSan too (test/run.sh).
package.path = "test/host/?.lua;" .. package.path
local redis                     -- hwt.redis, loaded in lazy_setup: a run that leaves out #redis never loads it
local redis_server = require("redis_server")
local js = require("jobs_support")
local socket = require("socket")
local hwt = require("hwt")
local jobs = require("hwt.jobs")

local TIMEOUT = 0.2             -- seconds: the clients' reply timeout where a test waits it out

local server

local function connect(timeout) return redis.connect("127.0.0.1", server.port, timeout or 2) end

-- The error f() raised, as a string; fails when it raised none.
local function raised(f)
  local ok, err = pcall(f)
  assert(not ok, "raised nothing")
  return tostring(err)
end

-- Makes `on` stall for `seconds` (DEBUG SLEEP, its reply left unread).
local function stall(on, seconds)
  local sleeper = redis.connect("127.0.0.1", on.port, 2)
  sleeper:send("DEBUG", "SLEEP", seconds)
  socket.sleep(0.02)
  return sleeper
end

local function client_count(c) return tonumber(c:info("clients"):match("connected_clients:(%d+)")) end

describe("hwt.redis #redis", function()
  lazy_setup(function()
    js.collect_dropped_clients()
    redis = require("hwt.redis")
    server = redis_server.start({ unix = true })
  end)
  lazy_teardown(function() server:destroy() end)

  describe("replies", function()
    it("are mapped as redis-lua maps them: status, bulk, nil, integer, array (nil a hole), empty", function()
      local c = connect()
      assert.is_true(c:set("k", "v"))                       -- +OK
      assert.equals("PONG", c:ping())                        -- another status: its text
      assert.equals("v", c:get("k"))
      assert.is_nil(c:get("no such key"))
      assert.equals(3, c:incrby("n", 3))
      if math.type then assert.equals("integer", math.type(c:incr("n"))) end
      assert.same({}, c:lrange("no such list", 0, -1))
      assert.is_nil(c:blpop("no such list", 0.01))           -- a nil array
      local reply = c:eval("return {1, 'two', {3, {'four'}}, false, redis.status_reply('FINE'), 6}", 0)
      assert.equals(1, reply[1])
      assert.equals("two", reply[2])
      assert.same({ 3, { "four" } }, reply[3])
      assert.is_nil(reply[4])                                 -- Lua's false is a nil bulk: a hole
      assert.equals("FINE", reply[5])
      assert.equals(6, reply[6])
      assert.equals(2 ^ 53, c:eval("return 9007199254740992", 0))
      c:close()
    end)

    it("an error reply raises 'redis error: ...', nested too, and leaves the client in step", function()
      local c = connect()
      c:set("k", "text")
      assert.equals("redis error: ERR value is not an integer or out of range", raised(function() c:incr("k") end))
      assert.matches("^redis error: ", raised(function() c:eval("return {1, redis.error_reply('inner')}", 0) end))
      assert.matches("^redis error: ERR unknown command", raised(function() c:call("NO-SUCH-COMMAND") end))
      assert.equals("text", c:get("k"))                       -- each reply was read whole
      c:close()
    end)

    it("big, nested as deep as hiredis reads (7), binary-safe", function()
      local c = connect(5)
      local rows = c:eval("local t = {} for i = 1, 100000 do t[i] = {tostring(i), i} end return t", 0)
      assert.equals(100000, #rows)
      assert.same({ "100000", 100000 }, rows[100000])
      local deep = c:eval("return " .. ("{"):rep(7) .. "'bottom'" .. ("}"):rep(7), 0)
      for _ = 1, 6 do deep = deep[1] end
      assert.same({ "bottom" }, deep)
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
      local all = table.concat(bytes) .. "\r\n$-1\r\n\0"
      local big = all:rep(40000)                             -- 10 MB
      assert.is_true(c:set("bytes", big))
      assert.equals(big, c:get("bytes"))
      assert.is_true(c:set("bytes-short", all))
      assert.same({ all, all }, c:mget("bytes-short", "bytes-short"))
      c:close()
    end)

    it("nested deeper than hiredis reads: a protocol error, the client unusable", function()
      local c = connect()
      local err = raised(function() c:eval("return " .. ("{"):rep(9) .. "1" .. ("}"):rep(9), 0) end)
      assert.matches("^hwt%.redis: protocol error from 127%.0%.0%.1:%d+", err)
      assert.matches("^hwt%.redis: unusable after a failure: protocol error", raised(function() c:ping() end))
      c:close()
    end)
  end)

  describe("arguments", function()
    it("strings as they are, integers as integers, floats with every digit", function()
      local c = connect()
      assert.equals("\0a\0", c:echo("\0a\0"))
      local cases = { { 42, "42" }, { -7, "-7" }, { 2 ^ 53, "9007199254740992" }, { 3.0, "3" },
                      { 0.1, "0.1" }, { 1 / 3, "0.3333333333333333" }, { -2.5e-300, "-2.5e-300" },
                      { 1e300, "1e+300" }, { 2 ^ 70, "1.1805916207174113e+21" } }
      if math.maxinteger then cases[#cases + 1] = { math.maxinteger, "9223372036854775807" } end
      for _, case in ipairs(cases) do
        assert.equals(case[2], c:echo(case[1]))
        assert.equals(case[1], tonumber(c:echo(case[1])))
      end
      assert.equals(1, c:zadd("z", 0.1 + 0.2, "m"))
      assert.equals(0.1 + 0.2, tonumber(c:zscore("z", "m")))
      c:close()
    end)

    it("of a bad type or value raise, naming them, and send nothing", function()
      local c = connect()
      assert.matches("bad argument #2 to 'set' %(string or number expected, got table%)$",
                     raised(function() c:set("k", {}) end))
      assert.matches("bad argument #1 to 'call' %(string expected, got no value%)$", raised(function() c:call() end))
      assert.matches("bad argument #3 to 'send' %(string or number expected, got nil%)$",
                     raised(function() c:send("SET", "k", nil, "v") end))
      assert.matches("bad argument #1 to '%S+' %(hwt%.redis%.Client expected, got table%)",
                     raised(function() c.get({}, "k") end))
      assert.equals("PONG", c:ping())                         -- nothing was sent
      assert.matches("bad argument #2 to '[%w.]*connect' %(number expected, got string%)",
                     raised(function() redis.connect("127.0.0.1", "6379") end))
      assert.matches("bad argument #2 to '[%w.]*connect' %(port 1%-65535 expected, got 70000",
                     raised(function() redis.connect("127.0.0.1", 70000) end))
      assert.matches("bad argument #3 to '[%w.]*connect' %(seconds > 0", raised(function() redis.connect("127.0.0.1", 1, 0) end))
      assert.matches("bad argument #1 to '[%w.]*connect' %(host: string expected, got number%)",
                     raised(function() redis.connect({ host = 1 }) end))
      assert.matches("bad argument #1 to '[%w.]*connect' %(host: a string without NUL bytes expected",
                     raised(function() redis.connect({ host = "a\0b" }) end))
      assert.matches("bad argument #1 to '[%w.]*connect' %(unknown option 'tcp_nodelay'%)",
                     raised(function() redis.connect({ port = server.port, tcp_nodelay = true }) end))
      assert.matches("bad argument #1 to '[%w.]*connect' %(path: not with host or port%)",
                     raised(function() redis.connect({ path = server.path, port = server.port }) end))
      c:close()
    end)
  end)

  describe("connections", function()
    it("connect by host and port, with options, or by a unix socket's path; a refusal raises", function()
      local by_options = redis.connect({ host = "127.0.0.1", port = server.port, timeout = 1 })
      local by_path = redis.connect({ path = server.path })
      assert.equals("PONG", by_options:ping())
      assert.equals("PONG", by_path:ping())
      assert.equals("hwt.redis.Client: " .. server.path, tostring(by_path))
      assert.is_true(redis.is_client(by_path))
      assert.is_false(redis.is_client({}))
      by_options:close()
      by_path:close()
      local probe = assert(socket.bind("127.0.0.1", 0))
      local _, free = probe:getsockname()
      probe:close()
      assert.matches("^hwt%.redis: cannot connect to 127%.0%.0%.1:" .. free .. " %(Connection refused%)",
                     raised(function() redis.connect("127.0.0.1", tonumber(free), 1) end))
      assert.matches("^hwt%.redis: cannot connect to /nonexistent/redis%.sock",
                     raised(function() redis.connect({ path = "/nonexistent/redis.sock" }) end))
    end)

    it("a reply later than the timeout: 'hwt.redis: timeout', no 'redis error', and the client unusable", function()
      local c = connect(TIMEOUT)
      local sleeper = stall(server, TIMEOUT * 2)
      local started = socket.gettime()
      local err = raised(function() c:ping() end)
      local waited = socket.gettime() - started
      assert.matches("^hwt%.redis: timeout: no reply from 127%.0%.0%.1:%d+ within 0%.2 s$", err)
      assert.is_nil(err:find("redis error", 1, true))
      assert.is_true(waited >= TIMEOUT * 0.9 and waited < TIMEOUT * 2, waited .. " s")
      socket.sleep(TIMEOUT)                                   -- the late PONG has come
      assert.matches("^hwt%.redis: unusable after a failure: timeout", raised(function() c:ping() end))
      assert.is_true(c:dirty())                               -- select returns at once, the read raises
      assert.equals("hwt.redis.Client: 127.0.0.1:" .. server.port .. " (failed)", tostring(c))
      c:close()
      sleeper:close()
    end)

    it("a server killed under a call: 'closed', no 'redis error'", function()
      local own = redis_server.start()
      finally(function() own:destroy() end)                   -- stopped by PID, even when the spec fails
      local c = redis.connect("127.0.0.1", own.port, 5)
      local sleeper = stall(own, 1)
      redis_server.execute(("(sleep 0.1; kill -KILL %d) >/dev/null 2>&1 &"):format(own.pid))
      local err = raised(function() c:ping() end)
      assert.matches("^hwt%.redis: 127%.0%.0%.1:%d+ closed the connection", err)
      assert.is_nil(err:find("redis error", 1, true))
      assert.matches("unusable after a failure", raised(function() c:set("k", "v") end))
      c:close()
      sleeper:close()
    end)

    it("after close: every call raises 'the client is closed'; close again is fine", function()
      local c = connect()
      assert.is_true(c:close())
      assert.is_true(c:close())
      assert.equals("hwt.redis: the client is closed", raised(function() c:ping() end))
      assert.equals("hwt.redis: the client is closed", raised(function() c:ready_replies() end))
      assert.equals("hwt.redis: the client is closed", raised(function() c:send("PING") end))
      assert.equals(-1, c:getfd())                            -- socket.select leaves it out
      assert.is_false(c:dirty())
      assert.matches("%(closed%)$", tostring(c))
    end)

    it("collected without close: their connections close", function()
      collectgarbage()
      collectgarbage()
      local c = connect()
      local before = client_count(c)
      for _ = 1, 20 do connect():ping() end
      collectgarbage()
      collectgarbage()
      redis_server.wait_until(function() return client_count(c) == before end, 2)
      assert.equals(before, client_count(c))
      c:close()
    end)

    it("a finalizer that closes the client while it works never breaks it: the call ends or raises 'closed'", function()
      if _VERSION == "Lua 5.1" then return end                -- tables have no __gc before 5.2
      for round = 1, 30 do
        local c = connect()
        setmetatable({}, { __gc = function() c:close() end })  -- garbage: its finalizer runs at some allocation
        collectgarbage("step", round)
        local ok, reply = pcall(function() return c:eval("local t = {} for i = 1, 2000 do t[i] = {i, 'x'} end return t", 0) end)
        if ok then
          assert.equals(2000, #reply)
        else
          assert.equals("hwt.redis: the client is closed", reply)
        end
        collectgarbage()
        assert.equals("hwt.redis: the client is closed", raised(function() c:ping() end))
      end
    end)
  end)

  describe("Pub/Sub and event loops", function()
    it("send, then ready_replies as the replies come, socket.select on getfd, never blocking", function()
      local subscriber, publisher = connect(), connect()
      assert.is_true(subscriber:send("SUBSCRIBE", "news"))
      local readable = socket.select({ subscriber }, nil, 2)
      assert.equals(subscriber, readable[1])
      socket.sleep(0.02)
      assert.same({ { "subscribe", "news", 1 } }, subscriber:ready_replies())
      assert.equals(1, publisher:publish("news", "one"))
      assert.equals(1, publisher:publish("news", "two\0bytes"))
      socket.select({ subscriber }, nil, 2)
      socket.sleep(0.02)
      assert.same({ { "message", "news", "one" }, { "message", "news", "two\0bytes" } }, subscriber:ready_replies())
      local started = socket.gettime()
      assert.same({}, subscriber:ready_replies())
      assert.is_true(socket.gettime() - started < 0.05)
      subscriber:close()
      assert.equals(0, publisher:publish("news", "nobody"))
      publisher:close()
    end)

    it("replies come in order; one already read is dirty(), and select returns at once for it", function()
      local c = connect()
      c:send("ECHO", "first")
      c:send("ECHO", "second")
      socket.sleep(0.05)
      assert.is_false(c:dirty())                              -- on the socket, not read yet
      assert.equals("first", c:echo("third"))                 -- the reply owed first comes first
      assert.is_true(c:dirty())                               -- "second" came in the same read
      local readable = socket.select({ c }, nil, 0)
      assert.equals(c, readable[1])
      local rest = c:ready_replies()
      while #rest < 2 do                                      -- "third" may come later
        socket.select({ c }, nil, 1)
        rest[#rest + 1] = c:ready_replies()[1]
      end
      assert.same({ "second", "third" }, rest)
      assert.is_false(c:dirty())
      assert.equals("fourth", c:echo("fourth"))
      c:close()
    end)

    it("ready_replies raises 'closed' once the server closes the connection", function()
      local c = connect()
      c:send("QUIT")
      socket.select({ c }, nil, 2)
      socket.sleep(0.02)
      assert.same({ true }, c:ready_replies())                 -- QUIT's +OK
      socket.select({ c }, nil, 2)
      assert.matches("^hwt%.redis: 127%.0%.0%.1:%d+ closed the connection", raised(function() c:ready_replies() end))
      c:close()
    end)
  end)

  describe("hwt.jobs with it", function()
    local function queue(key, poll_interval)
      return jobs.redis({ timer = hwt.new({ tick = 0.005 }), key = key, poll_interval = poll_interval,
        connect = function() return connect(1) end })
    end

    it("runs a job, and q:run_for hears of one another process schedules before its next round", function()
      local key = "spec:redis_client:" .. tostring(os.time())
      local worker, scheduler = queue(key, 30), queue(key, 30)
      local ran = {}
      worker:handle("x", function(payload, job) ran[#ran + 1] = { payload = payload, id = job.id } end)
      local first = assert(scheduler:schedule("x", 0, { n = 1 }))
      assert(worker:start())
      local started = hwt.now()
      while #ran < 1 and hwt.now() - started < 5 do worker:run_for(0.05) end
      assert.same({ { payload = { n = 1 }, id = first } }, ran)
      assert.is_true(redis.is_client(worker.listener.socket))   -- it listens through hwt.redis
      local second = assert(scheduler:schedule("x", 0.05, "soon"))
      started = hwt.now()
      while #ran < 2 and hwt.now() - started < 5 do worker:run_for(0.05) end
      assert.equals(second, ran[2] and ran[2].id)
      assert.is_true(hwt.now() - started < 2, "heard only at the next round")
      worker:stop()
      worker.timer:stop()
      scheduler.timer:stop()
    end)
  end)
end)
