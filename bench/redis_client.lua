-- hwt.redis against redis-lua, side by side in one run, on one private
-- redis-server (test/host/redis_server.lua):
--   1. EVALSHA round trips: calls/s and the client's CPU µs per call, for a
--      small reply ({tag, 1}) and a PUMP-sized one (hwt.jobs' claim of 32
--      jobs: {tag, {{}, 32 rows of 5 strings, next, now}}), the script's
--      arguments as hwt.jobs sends them;
--   2. an hwt.jobs worker (q:run_for, tick 1 ms, concurrency 128) running N
--      jobs that were scheduled before it started: the process CPU per job.
-- Rounds alternate the clients; each figure is the median of ROUNDS. CPU is
-- os.clock() (getrusage: user + system of this process, so a round trip's
-- sleep and wake-up in recv count too: most of a small call's).
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.3/?.so;;' lua5.3 bench/redis_client.lua
-- (lua5.3: the newest Lua that Debian's redis-lua is packaged for.)
-- Environment: ROUNDS (3), CALLS (20000 small calls; a fifth as many PUMP
-- calls), JOBS (20000).
package.path = "test/host/?.lua;" .. package.path
local redis_server = require("redis_server")
local hiredis = require("hwt.redis")
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local socket = require("socket")

local ROUNDS = tonumber(os.getenv("ROUNDS")) or 3
local CALLS = tonumber(os.getenv("CALLS")) or 20000
local JOBS = tonumber(os.getenv("JOBS")) or 20000
local PUMP_ROWS, PUMP_FIELDS = 32, 5

local SMALL_SCRIPT = "return {ARGV[#ARGV], 1}"
-- A claim's reply: 32 rows of id, name, payload (JSON), attempt, due.
local PUMP_SCRIPT = [[
local rows = {}
for i = 1, tonumber(ARGV[1]) do
  rows[i] = {tostring(1000000 + i), 'send-email', '{"user":42,"template":"welcome","ratio":0.5}', '1', '1764633600123456'}
end
return {ARGV[#ARGV], {{}, rows, 10000, 1764633600123456}}]]

local server = redis_server.start()

local clients = {
  { name = "hwt.redis", connect = function() return hiredis.connect("127.0.0.1", server.port, 5) end },
  { name = "redis-lua", connect = function()
      return redis_server.redis.connect({ host = "127.0.0.1", port = server.port, timeout = 5 })
    end },
}

local function median(values)
  local sorted = { table.unpack(values) }
  table.sort(sorted)
  return sorted[(#sorted + 1) // 2]
end

-- `calls` EVALSHAs of `sha` with hwt.jobs' kind of arguments (1 key, 3
-- numbers, a tag): calls/s and CPU µs per call.
local function round_trips(client, sha, calls, rows)
  local reply
  local wall, cpu = socket.gettime(), os.clock()
  for i = 1, calls do
    reply = client:evalsha(sha, 1, "{bench}:due", rows, 5000000, 0, ("%.0f"):format(i))
  end
  wall, cpu = socket.gettime() - wall, os.clock() - cpu
  assert(type(reply) == "table" and reply[1] == ("%.0f"):format(calls), "a reply not of its request")
  return calls / wall, cpu / calls * 1e6
end

-- An hwt.jobs worker with `connect` runs JOBS jobs scheduled beforehand:
-- CPU µs per job (the run only).
local key_number = 0
local function worker_cpu(connect)
  key_number = key_number + 1
  local key = "bench:redis_client:" .. key_number
  local timer = hwt.new({ tick = 0.001 })
  local q = jobs.redis({ timer = timer, key = key, connect = connect, concurrency = 128 })
  local batch = {}
  for i = 1, JOBS do batch[#batch + 1] = { name = "job", delay = 0, payload = { n = i, user = "someone" } } end
  for first = 1, JOBS, 1000 do assert(q:schedule_many({ table.unpack(batch, first, math.min(first + 999, JOBS)) })) end
  local ran = 0
  q:handle("job", function() ran = ran + 1 end)
  local cpu = os.clock()
  assert(q:start())
  local deadline = socket.gettime() + 120
  while ran < JOBS do
    assert(socket.gettime() < deadline, "the worker did not finish")
    q:run_for(0.01)
  end
  while q:stats().unsettled > 0 or q:stats().running > 0 do q:run_for(0.01) end
  cpu = os.clock() - cpu
  q:stop()
  timer:stop()
  return cpu / JOBS * 1e6
end

local results = {}            -- results[measure][client] = { values }
local function record(measure, client, value)
  results[measure] = results[measure] or {}
  results[measure][client] = results[measure][client] or {}
  table.insert(results[measure][client], value)
end

local loader = clients[1].connect()
local small_sha, pump_sha = loader:script("load", SMALL_SCRIPT), loader:script("load", PUMP_SCRIPT)
loader:close()

for round = 1, ROUNDS do
  local order = round % 2 == 1 and { 1, 2 } or { 2, 1 }
  for _, i in ipairs(order) do
    local c = clients[i]
    local client = c.connect()
    round_trips(client, small_sha, CALLS // 10, 0)          -- warm-up
    local rate, cpu = round_trips(client, small_sha, CALLS, 0)
    record("small: calls/s", c.name, rate)
    record("small: CPU us/call", c.name, cpu)
    rate, cpu = round_trips(client, pump_sha, CALLS // 5, PUMP_ROWS)
    record("PUMP-sized: calls/s", c.name, rate)
    record("PUMP-sized: CPU us/call", c.name, cpu)
    client:quit()
    record("worker: CPU us/job", c.name, worker_cpu(c.connect))
    io.stderr:write(("round %d: %s done\n"):format(round, c.name))
  end
end
server:destroy()

local MEASURES = { "small: calls/s", "small: CPU us/call", "PUMP-sized: calls/s", "PUMP-sized: CPU us/call",
                   "worker: CPU us/job" }
print(("%s, medians of %d rounds; N = %d small calls, %d PUMP-sized (%d rows of %d strings), %d jobs")
      :format(_VERSION, ROUNDS, CALLS, CALLS // 5, PUMP_ROWS, PUMP_FIELDS, JOBS))
-- The last column is hwt.redis' advantage: its rate ÷ redis-lua's, or
-- redis-lua's CPU ÷ its CPU (above 1: hwt.redis is ahead).
print(("%-26s %12s %12s %10s"):format("measure", "hwt.redis", "redis-lua", "advantage"))
for _, measure in ipairs(MEASURES) do
  local h, r = median(results[measure]["hwt.redis"]), median(results[measure]["redis-lua"])
  local advantage = measure:find("calls/s", 1, true) and h / r or r / h
  print(("%-26s %12.1f %12.1f %9.2fx"):format(measure, h, r, advantage))
end
