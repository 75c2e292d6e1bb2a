-- Redis CPU per job of a queue over 3 shards against one shard, in one run
-- (the measures take turns, round after round; medians of ROUNDS), on three
-- private redis-servers (independent primaries: a cluster's bus would add
-- its own upkeep to both sides):
--   spread    3 shards on 3 servers ÷ 1 shard on 1 server;
--   together  3 shards on 1 server ÷ 1 shard on 1 server: what the shards
--             cost in Redis work, with no other process to share the CPUs;
--   floor     the same request stream without hwt (each request a script
--             of a PUMP's size of writes), sent to 3 servers in turn ÷ to
--             1: what spreading a load over 3 processes costs here.
-- Each hwt measure: N jobs written by schedule_many in batches of BATCH,
-- due at once, run to the last by one worker (concurrency 64, tick 1 ms);
-- Redis CPU is the servers' INFO used_cpu_user + used_cpu_sys, summed.
--   lua5.4 bench/jobs_shards.lua        (from the project root; make all first)
-- Env: ROUNDS (3), N (20000), BATCH (1000). Prints the rows on stdout
-- ("RESULT" lines per round first), progress on stderr; the servers are
-- stopped on any exit.
package.path = "lua/?.lua;test/host/?.lua;" .. package.path
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local redis_server = require("redis_server")

local ROUNDS = tonumber(os.getenv("ROUNDS")) or 3
local N = tonumber(os.getenv("N")) or 20000
local BATCH = tonumber(os.getenv("BATCH")) or 1000
local SERVERS = 3
local CONCURRENCY = 64
local FLOOR_REQUESTS = 2000
local FLOOR_WRITES = 60               -- writes per floor request: about a PUMP's for 20 jobs

local function log(...) io.stderr:write(table.concat({ ... }, " "), "\n") end

-- CPU seconds (user + system) the servers have used, as their INFO tells
-- (getrusage: finer than /proc's 10 ms ticks).
local function cpu_of(servers)
  local total = 0
  for _, server in ipairs(servers) do
    local info = redis_server.shell(("redis-cli -p %d info cpu"):format(server.port))
    total = total + tonumber(info:match("used_cpu_user:([%d.]+)")) + tonumber(info:match("used_cpu_sys:([%d.]+)"))
  end
  return total
end

local function connect_to(server)
  return function() return redis_server.redis.connect({ host = "127.0.0.1", port = server.port, timeout = 5 }) end
end

-- Redis CPU µs per job of a queue named `key` whose shards are on `on`
-- (one server each; one server: no shards).
local function run_jobs(all, on, key)
  local timer = hwt.new({ tick = 0.001 })
  local opts = { timer = timer, key = key, concurrency = CONCURRENCY }
  if #on == 1 then
    opts.connect = connect_to(on[1])
  else
    opts.shards = {}
    for i, server in ipairs(on) do opts.shards[i] = connect_to(server) end
  end
  local q = jobs.redis(opts)
  local ran = 0
  q:handle("job", function() ran = ran + 1 end)
  local before = cpu_of(all)
  for first = 1, N, BATCH do
    local list = {}
    for i = first, math.min(first + BATCH - 1, N) do list[#list + 1] = { name = "job", delay = 0, payload = i } end
    assert(q:schedule_many(list))
  end
  assert(q:start())
  while ran < N do q:run_for(0.05) end
  q:stop()
  q:run_for(0.1)                       -- the last outcomes reach Redis
  local used = cpu_of(all) - before
  timer:stop()
  return used / N * 1e6
end

local FLOOR_SCRIPT = [[
for i = 1, tonumber(ARGV[1]) do redis.call('HSET', KEYS[1], i, ARGV[2]) end
return redis.call('DEL', KEYS[1])
]]

-- Redis CPU µs per request of FLOOR_REQUESTS requests sent to `on` in turn.
local function run_floor(all, on)
  local clients = {}
  for i, server in ipairs(on) do clients[i] = assert(connect_to(server)()) end
  local sha = clients[1]:script("load", FLOOR_SCRIPT)
  for i = 2, #clients do clients[i]:script("load", FLOOR_SCRIPT) end
  local before = cpu_of(all)
  for r = 1, FLOOR_REQUESTS do
    local client = clients[(r - 1) % #clients + 1]
    client:evalsha(sha, 1, "bench:floor", FLOOR_WRITES, "a-payload-of-some-length")
  end
  local used = cpu_of(all) - before
  for _, client in ipairs(clients) do client:quit() end
  return used / FLOOR_REQUESTS * 1e6
end

local function median(list)
  local sorted = {}
  for i, v in ipairs(list) do sorted[i] = v end
  table.sort(sorted)
  return sorted[math.ceil(#sorted / 2)]
end

local servers = {}
local ok, err = pcall(function()
  for i = 1, SERVERS do servers[i] = redis_server.start() end
  local one = { servers[1] }
  local together = { servers[1], servers[1], servers[1] }
  local measures = {
    { "one", function(r) return run_jobs(servers, one, "bench:one:" .. r) end },
    { "spread", function(r) return run_jobs(servers, servers, "bench:spread:" .. r) end },
    { "together", function(r) return run_jobs(servers, together, "bench:together:" .. r) end },
    { "floor_one", function() return run_floor(servers, one) end },
    { "floor_spread", function() return run_floor(servers, servers) end },
  }
  local results = {}
  for r = 1, ROUNDS do
    for _, measure in ipairs(measures) do
      local name, run = measure[1], measure[2]
      local value = run(r)
      results[name] = results[name] or {}
      results[name][r] = value
      log(("round %d, %s: %.2f µs"):format(r, name, value))
      print(("RESULT %s %.3f"):format(name, value))
    end
  end
  local m = {}
  for name, values in pairs(results) do m[name] = median(values) end
  print(("Redis CPU per job (%d jobs, batches of %d, one worker; median of %d rounds):"):format(N, BATCH, ROUNDS))
  print(("| 3 shards on 3 servers ÷ 1 shard | %.2f µs ÷ %.2f µs = %.2f× |"):format(m.spread, m.one, m.spread / m.one))
  print(("| 3 shards on 1 server ÷ 1 shard | %.2f µs ÷ %.2f µs = %.2f× |"):format(m.together, m.one, m.together / m.one))
  print(("| floor: a script of %d writes, on 3 servers in turn ÷ on 1 | %.2f µs ÷ %.2f µs = %.2f× |")
    :format(FLOOR_WRITES, m.floor_spread, m.floor_one, m.floor_spread / m.floor_one))
end)
for _, server in ipairs(servers) do server:destroy() end
if not ok then error(err, 0) end
