-- A private redis-server for the tests of hwt.jobs: on a free 127.0.0.1 port,
-- in a scratch directory, every wait bounded. Also puts Debian's redis-lua on
-- package.path for Lua 5.4 (Debian ships it for 5.1-5.3; it is plain Lua over
-- LuaSocket, which Debian ships for 5.4 too), and names the client the
-- tests' queues use (M.CLIENT, M.connect_client): hwt.redis on Lua 5.4
-- (Debian packages no other client for it), redis-lua on 5.1-5.3 and
-- LuaJIT; HWT_JOBS_CLIENT=hwt.redis or redis-lua picks one.
local socket = require("socket")

local M = {}

local START_TIMEOUT = 10        -- seconds for redis-server to answer PING
local STOP_TIMEOUT = 10

if not package.path:find("/usr/share/lua/5.3/?.lua", 1, true) then
  package.path = package.path .. ";/usr/share/lua/5.3/?.lua"
end
local redis = require("redis")
M.redis = redis

M.CLIENT = os.getenv("HWT_JOBS_CLIENT") or (_VERSION == "Lua 5.4" and "hwt.redis" or "redis-lua")

-- A client (M.CLIENT) of the server on `port` whose calls give up after
-- `timeout` seconds.
function M.connect_client(port, timeout)
  local module = M.CLIENT == "hwt.redis" and require("hwt.redis") or redis
  return module.connect({ host = "127.0.0.1", port = tonumber(port), timeout = timeout })
end

local function bindable(port)
  local probe = socket.bind("127.0.0.1", port)
  if not probe then return false end
  probe:close()
  return true
end

local function free_port()
  local probe = assert(socket.bind("127.0.0.1", 0))
  local _, port = probe:getsockname()
  probe:close()
  return tonumber(port)
end

-- A Redis Cluster node listens on its port and on the port 10000 above it
-- (the cluster bus): a free pair, both below 65536.
local CLUSTER_BUS_OFFSET = 10000
local function free_cluster_port()
  for _ = 1, 1000 do
    local port = math.random(20000, 50000)
    if bindable(port) and bindable(port + CLUSTER_BUS_OFFSET) then return port end
  end
  error("no free port pair for a cluster node")
end

-- Commands run without LD_PRELOAD: under `make test`'s ASan run it holds
-- the sanitizer runtimes, which `ps` or redis-server must not get.
local function unpreloaded(command) return "unset LD_PRELOAD; " .. command end

local function shell(command)
  local pipe = assert(io.popen(unpreloaded(command)))
  local out = pipe:read("*a")
  pipe:close()
  return out
end

local Server = {}
Server.__index = Server

-- A client, or nil and the error.
function Server:connect()
  local ok, client = pcall(redis.connect, { host = "127.0.0.1", port = self.port, timeout = 2 })
  if ok then return client end
  return nil, client
end

function Server:alive()
  local client = self:connect()
  if not client then return false end
  local ok = pcall(client.ping, client)
  pcall(client.quit, client)
  return ok
end

local function wait_until(condition, seconds)
  local deadline = socket.gettime() + seconds
  while not condition() do
    if socket.gettime() > deadline then return false end
    socket.sleep(0.02)
  end
  return true
end

-- Starts (or restarts, same port and directory) the server; with the
-- append-only file when self.durable, so that a restart (SIGTERM) loses
-- nothing. (appendfsync always would survive a SIGKILL too, at one fsync per
-- write: 1 ms each on this machine.)
function Server:start()
  local args = { "redis-server", "--port", self.port, "--bind", "127.0.0.1", "--dir", self.dir,
                 "--save", "''", "--daemonize", "no", "--logfile", self.dir .. "/redis.log",
                 "--enable-debug-command", "local" }
  if self.cluster then
    for _, a in ipairs({ "--cluster-enabled", "yes", "--cluster-config-file", self.dir .. "/nodes.conf",
                         "--cluster-node-timeout", self.cluster_node_timeout_ms }) do
      args[#args + 1] = a
    end
  end
  if self.path then for _, a in ipairs({ "--unixsocket", self.path }) do args[#args + 1] = a end end
  if self.durable then
    for _, a in ipairs({ "--appendonly", "yes", "--appendfsync", "everysec" }) do args[#args + 1] = a end
  else
    for _, a in ipairs({ "--appendonly", "no" }) do args[#args + 1] = a end
  end
  self.pid = tonumber(shell(table.concat(args, " ") .. " >/dev/null 2>&1 & echo $!"))
  assert(self.pid, "redis-server did not start")
  assert(wait_until(function() return self:alive() end, START_TIMEOUT),
         "redis-server did not answer within " .. START_TIMEOUT .. " s (see " .. self.dir .. "/redis.log)")
end

-- os.execute's success: true on Lua 5.2+, 0 on 5.1.
local function execute(command)
  local result = os.execute(unpreloaded(command))
  return result == true or result == 0
end
M.execute = execute

-- Gone, or a zombie waiting to be reaped.
local function process_gone(pid)
  local stat = io.open(("/proc/%d/stat"):format(pid))
  if not stat then return true end
  local state = stat:read("*l"):match("%) (%a)")
  stat:close()
  return state == "Z"
end

-- Stops the server with SIGNAL (default TERM) and waits until it is gone.
function Server:stop(signal)
  if not self.pid then return end
  os.execute(("kill -%s %d 2>/dev/null"):format(signal or "TERM", self.pid))
  local pid = self.pid
  wait_until(function() return process_gone(pid) end, STOP_TIMEOUT)
  self.pid = nil
end

-- Stops the server and removes its directory.
function Server:destroy()
  self:stop("KILL")
  os.execute("rm -rf '" .. self.dir .. "'")
end

-- M.start{ durable = bool, unix = bool, cluster_node_timeout_ms = n } -> a
-- running server: .port, .path (its unix socket, with opts.unix),
-- :connect(), :stop([signal]), :start(), :destroy(). With
-- cluster_node_timeout_ms it is a Redis Cluster node
-- (test/host/redis_cluster.lua joins nodes into a cluster).
function M.start(opts)
  opts = opts or {}
  local dir = shell("mktemp -d /tmp/hwt-redis.XXXXXX"):gsub("%s+$", "")
  local cluster = opts.cluster_node_timeout_ms ~= nil
  local server = setmetatable({ port = cluster and free_cluster_port() or free_port(), dir = dir,
                                durable = opts.durable, cluster = cluster,
                                cluster_node_timeout_ms = opts.cluster_node_timeout_ms,
                                path = opts.unix and dir .. "/redis.sock" or nil }, Server)
  server:start()
  return server
end

M.wait_until, M.shell = wait_until, shell

return M
