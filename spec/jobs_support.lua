-- The helpers of the hwt.jobs specs (spec/jobs_spec.lua, spec/jobs_calls_spec.lua):
-- queues on a real redis-server that a spec file starts and names with
-- use(server), clients of it, and waits bounded in time.
--
-- The queues' client is redis_server.CLIENT: hwt.redis on Lua 5.4, redis-lua
-- elsewhere (HWT_JOBS_CLIENT picks one). The specs' own checks of Redis use
-- redis-lua.
package.path = "test/host/?.lua;" .. package.path
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local redis_server = require("redis_server")
local socket = require("socket")

local unpack = table.unpack or unpack
local M = {}

local TICK = 0.005
local WITHIN = 5                -- seconds: a bound for "soon"; a run longer has failed

local CLIENT = redis_server.CLIENT

local server                    -- the spec file's: use(server)
local key_number = 0

local function fresh_key()
  key_number = key_number + 1
  return "spec:jobs:" .. key_number
end

-- A client (CLIENT) of `on` (default: the spec's server) that gives up
-- waiting for a reply after `timeout` seconds (default 1).
local function connect_to(on, timeout)
  return redis_server.connect_client((on or server).port, timeout or 1)
end

-- Sends `command` on a client of connect_to and leaves its reply unread.
local function send_unread(client, command)
  if CLIENT == "hwt.redis" then return assert(client:send(command[1], unpack(command, 2))) end
  local resp = { "*" .. #command .. "\r\n" }
  for _, part in ipairs(command) do resp[#resp + 1] = "$" .. #part .. "\r\n" .. part .. "\r\n" end
  assert(client.network.socket:send(table.concat(resp)))
end

-- The queues earlier tests dropped keep their clients' sockets open until
-- they are collected; LuaJIT's collector lets more than 1,024 pile up in
-- one busted run, past what socket.select() takes (listeners, and
-- spec/redis_client_spec.lua, wait with it).
local function collect_dropped_clients() collectgarbage() end

-- A queue on `server` (or opts.server) with a fresh key (or opts.key) and a
-- real-clock timer: q, timer, the errors it reported, its key. opts.module:
-- another instance of hwt.jobs; opts.timeout: the client's; opts.connect,
-- opts.release: the queue's; opts.shards = n: n shards, all on that server.
local function new_queue(opts)
  opts = opts or {}
  collect_dropped_clients()
  local timer = opts.timer or hwt.new({ tick = TICK })
  local errors = {}
  local key = opts.key or fresh_key()
  local connect = opts.connect or function() return connect_to(opts.server, opts.timeout) end
  local shards
  if opts.shards then
    shards = {}
    for i = 1, opts.shards do shards[i] = connect end
  end
  local q = (opts.module or jobs).redis({
    timer = timer, key = key, release = opts.release,
    connect = not shards and connect or nil, shards = shards,
    poll_interval = opts.poll_interval or 0.2, lease = opts.lease or 5,
    retry = opts.retry or { retries = 2, delay = 0.05 },
    on_error = function(err, job) errors[#errors + 1] = { err = err, job = job } end,
  })
  return q, timer, errors, key
end

-- Runs `timer` until `condition()` holds; fails the test after WITHIN seconds.
local function run_until(timer, condition)
  local deadline = hwt.now() + WITHIN
  while not condition() do
    assert(hwt.now() < deadline, "not within " .. WITHIN .. " s")
    timer:run_for(TICK)
  end
end

-- Registers a handler for `name` that counts its runs; returns the count's reader.
local function count_runs(q, name)
  local runs = 0
  q:handle(name, function() runs = runs + 1 end)
  return function() return runs end
end

-- The worker has nothing claimed and nothing waiting to reach Redis.
local function settled(q)
  local stats = q:stats()
  return stats.running == 0 and stats.unsettled == 0
end

local function redis_count(command, key)
  local client = assert(server:connect())
  local n = tonumber(client[command](client, key))
  client:quit()
  return n
end

-- A new instance of hwt.jobs and its parts, whose process-wide state (the
-- scripts' SHA1s) is as in a process that has not called Redis yet.
local function fresh_jobs_module()
  local kept = {}
  for name, module in pairs(package.loaded) do
    if name == "hwt.jobs" or name:find("^hwt%.jobs_") then kept[name], package.loaded[name] = module, nil end
  end
  local fresh = require("hwt.jobs")
  for name, module in pairs(kept) do package.loaded[name] = module end
  return fresh
end

-- Makes Redis stall for `seconds` (DEBUG SLEEP, sent without waiting for
-- its reply); returns once it sleeps.
local function stall(on, seconds)
  local sleeper = assert(socket.connect("127.0.0.1", on.port))
  assert(sleeper:send(("DEBUG SLEEP %s\r\n"):format(seconds)))
  socket.sleep(0.05)
  return sleeper
end

-- The redis-server the helpers use by default.
function M.use(started) server = started end

M.TICK, M.WITHIN, M.CLIENT = TICK, WITHIN, CLIENT
M.send_unread, M.collect_dropped_clients = send_unread, collect_dropped_clients
M.fresh_key, M.connect_to, M.new_queue, M.run_until = fresh_key, connect_to, new_queue, run_until
M.count_runs, M.settled, M.redis_count, M.fresh_jobs_module, M.stall =
  count_runs, settled, redis_count, fresh_jobs_module, stall
return M
