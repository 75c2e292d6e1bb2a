-- hwt.jobs against a hand-written Redis polling loop, on one redis-server.
--   lua5.4 bench/jobs_bench.lua PORT SCRATCH_DIR       (the coordinator; see bench/jobs_bench.sh)
--   lua5.4 bench/jobs_bench.lua --worker IMPL PORT KEY POLL MODE DIR NAME [RATE COUNT DMAX SEED]
-- IMPL: hwt (hwt.jobs, tick 10 ms, concurrency 32) or peer (the polling loop).
-- MODE: run (runs jobs that others schedule) or self (also schedules COUNT jobs
-- itself, RATE a second, each due in uniform [0, DMAX) s).
-- The peer, as Lua users write it today: schedule = HSET payload + ZADD due;
-- worker = ZRANGEBYSCORE key -inf now LIMIT 0 100, then for each member ZREM
-- (the claim: it won when ZREM returns 1), HGET payload, run, HDEL payload;
-- it sleeps 100 ms after a batch of fewer than 100 (a full batch: next one at once).
-- The coordinator prints "RESULT measure impl value" lines, one per round,
-- and the table (median of ROUNDS rounds) on stdout; progress on stderr.
local socket = require("socket")
local redis = require("redis")
local cjson = require("cjson")

local gettime = socket.gettime
local ENV = function(name, default) return tonumber(os.getenv(name)) or default end

local PEER_POLL = 0.1           -- the hand-written loop's sleep
local PEER_BATCH = 100
local WORKER_LIFETIME = 120     -- seconds: a worker never outlives this
local SLICE = 0.05              -- a worker checks its stop file this often

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function touch(path)
  local f = assert(io.open(path, "w"))
  f:close()
end

local function connect(port)
  return redis.connect({ host = "127.0.0.1", port = tonumber(port), timeout = 5 })
end

local function fmt_score(seconds) return ("%.6f"):format(seconds) end

-- ---- the peer's two halves ------------------------------------------------

local function peer_keys(key) return key .. ":due", key .. ":payload" end

local peer_seq = 0
local function peer_schedule(client, key, delay, payload, prefix)
  local zkey, hkey = peer_keys(key)
  peer_seq = peer_seq + 1
  local id = prefix .. peer_seq
  client:hset(hkey, id, cjson.encode(payload))
  client:zadd(zkey, fmt_score(gettime() + delay), id)
  return id
end

-- One pass of the loop: returns how many members the range gave.
local function peer_pass(client, key, handler)
  local zkey, hkey = peer_keys(key)
  local items = client:zrangebyscore(zkey, "-inf", fmt_score(gettime()),
                                     { withscores = true, limit = { 0, PEER_BATCH } })
  for _, item in ipairs(items) do
    local id, due = item[1], tonumber(item[2])
    if client:zrem(zkey, id) == 1 then
      local json = client:hget(hkey, id)
      handler(json and cjson.decode(json), { id = id, due = due })
      client:hdel(hkey, id)
    end
  end
  return #items
end

-- ---- a worker process -----------------------------------------------------

local function worker(args)
  local impl, port, key, poll, mode, dir, name = args[2], args[3], args[4], tonumber(args[5]), args[6],
                                                 args[7], args[8]
  local rate, count, dmax, seed = tonumber(args[9]), tonumber(args[10]), tonumber(args[11]), tonumber(args[12])
  local stop_file, alive_file = dir .. "/stop." .. name, dir .. "/alive"
  local born = gettime()
  local starts, dues, ends, n = {}, {}, {}, 0
  local function handler(_, job)
    local start = gettime()
    n = n + 1
    starts[n], dues[n] = start, job.due
    ends[n] = gettime()
  end
  local function should_stop()
    return exists(stop_file) or not exists(alive_file) or gettime() - born > WORKER_LIFETIME
  end

  -- self mode: job k is scheduled at sched_base + k / rate
  local sched_base, scheduled = nil, 0
  local schedule_one
  local function schedule_due_ones()
    if mode ~= "self" or scheduled >= count then return end
    local now = gettime()
    while scheduled < count and sched_base + scheduled / rate <= now do
      scheduled = scheduled + 1
      schedule_one(math.random() * dmax, { n = scheduled })
    end
    if scheduled >= count then touch(dir .. "/scheduled." .. name) end
  end
  if seed then math.randomseed(seed) end

  if impl == "hwt" then
    local hwt = require("hwt")
    local jobs = require("hwt.jobs")
    local timer = hwt.new({ tick = tonumber(os.getenv("HWT_TICK")) })
    local q = jobs.redis({
      timer = timer, key = key, poll_interval = poll,
      connect = function() return connect(port) end,
      on_error = function(err) io.stderr:write("hwt worker ", name, ": ", tostring(err), "\n") end,
    })
    q:handle("job", handler)
    schedule_one = function(delay, payload) assert(q:schedule("job", delay, payload)) end
    assert(q:start())
    q:run_for(SLICE)                      -- the first pump has been made, the listener opened
    touch(dir .. "/ready." .. name)
    sched_base = gettime()
    while not should_stop() do            -- q:run_for: a plain worker's loop, which listens
      if mode == "self" and scheduled < count then
        schedule_due_ones()
        q:run_for(0.002)
      else
        q:run_for(SLICE)
      end
    end
    q:stop()
    q:run_for(0.1)                        -- outcomes reach Redis
  else
    local client = connect(port)
    schedule_one = function(delay, payload) peer_schedule(client, key, delay, payload, name .. ":") end
    touch(dir .. "/ready." .. name)
    sched_base = gettime()
    while not should_stop() do
      schedule_due_ones()
      if peer_pass(client, key, handler) < PEER_BATCH then
        local wake = gettime() + PEER_POLL
        if mode == "self" and scheduled < count then
          while gettime() < wake do           -- the same sleep, scheduling meanwhile
            schedule_due_ones()
            socket.sleep(0.002)
          end
        else
          socket.sleep(PEER_POLL)
        end
      end
    end
  end

  local tmp = dir .. "/out." .. name .. ".tmp"
  local out = assert(io.open(tmp, "w"))
  for i = 1, n do out:write(("%.6f %.6f %.6f\n"):format(starts[i], dues[i], ends[i])) end
  out:close()
  assert(os.rename(tmp, dir .. "/out." .. name))
end

if arg[1] == "--worker" then
  worker(arg)
  os.exit(0)
end

-- ---- the coordinator ------------------------------------------------------

local PORT, DIR = assert(tonumber(arg[1]), "port expected"), assert(arg[2], "scratch dir expected")
local LUA = os.getenv("LUA") or "lua5.4"
local ROUNDS = ENV("ROUNDS", 3)
local N_SCHEDULE = ENV("N_SCHEDULE", 10000)
local N_RUN = ENV("N_RUN", 5000)
local LATE_RATE, LATE_COUNT, LATE_DMAX = ENV("LATE_RATE", 250), ENV("LATE_COUNT", 500), ENV("LATE_DMAX", 2)
local PICKUP_RATE, PICKUP_COUNT = ENV("PICKUP_RATE", 100), ENV("PICKUP_COUNT", 200)
local IDLE_SECONDS = ENV("IDLE_SECONDS", 5)
local WAIT_LIMIT = 60           -- seconds for any one phase to finish
local PARTS = os.getenv("PARTS") or "schedule,run,late,self,pickup,idle"
local function part(name) return ("," .. PARTS .. ","):find("," .. name .. ",", 1, true) ~= nil end

local function log(...) io.stderr:write(os.date("%H:%M:%S "), table.concat({ ... }, " "), "\n") end

local client = connect(PORT)
touch(DIR .. "/alive")

-- INFO stats and commandstats in one reply, parsed by hand (redis-lua's
-- info() keeps only some sections).
local INFO_REQUEST = "INFO all"  -- sent inline: its bytes are taken off bytes_in deltas
local function counters()
  local text = client:raw_cmd(INFO_REQUEST)
  local flat = {}
  for k, v in tostring(text):gmatch("([%w_]+):([^\r\n]+)") do flat[k] = v end
  local function calls(cmd)
    local v = flat["cmdstat_" .. cmd]
    return v and tonumber(v:match("calls=(%d+)")) or 0
  end
  return { total = tonumber(flat.total_commands_processed), calls = calls, t = gettime(),
           bytes_in = tonumber(flat.total_net_input_bytes) }
end

-- hwt.jobs' round trips: its script calls (EVALSHA, and EVAL where Redis lacked the script).
local function script_calls(before, after)
  return after.calls("eval") - before.calls("eval") + after.calls("evalsha") - before.calls("evalsha")
end

local spawned = {}
local function spawn(impl, key, poll, mode, name, extra, env)
  os.remove(DIR .. "/out." .. name)
  os.remove(DIR .. "/ready." .. name)
  os.remove(DIR .. "/stop." .. name)
  os.remove(DIR .. "/scheduled." .. name)
  local command = ("%s %s bench/jobs_bench.lua --worker %s %d %s %s %s %s %s %s 2>>%s/workers.err & echo $!")
    :format(env or "", LUA, impl, PORT, key, tostring(poll), mode, DIR, name, extra or "", DIR)
  local pipe = assert(io.popen(command))
  local pid = tonumber(pipe:read("*l"))
  pipe:close()
  assert(pid, "worker did not start")
  local pids = assert(io.open(DIR .. "/pids", "a"))
  pids:write(pid, "\n")
  pids:close()
  spawned[#spawned + 1] = { pid = pid, name = name, key = key }
  return pid
end

local function wait_for(condition, seconds, what)
  local deadline = gettime() + seconds
  while not condition() do
    if gettime() > deadline then error("timed out waiting for " .. what, 0) end
    socket.sleep(0.01)
  end
end

local function alive(pid) return os.execute(("kill -0 %d 2>/dev/null"):format(pid)) == true end

-- Stops every spawned worker, reads their records (all, and by key), kills
-- what does not end.
local function finish_workers()
  for _, w in ipairs(spawned) do touch(DIR .. "/stop." .. w.name) end
  local records, by_key = {}, {}
  local deadline = gettime() + 10
  for _, w in ipairs(spawned) do
    local path = DIR .. "/out." .. w.name
    while not exists(path) and gettime() < deadline do socket.sleep(0.01) end
    local f = io.open(path, "r")
    if f then
      for line in f:lines() do
        local s, d, e = line:match("^(%S+) (%S+) (%S+)$")
        local r = { tonumber(s), tonumber(d), tonumber(e) }
        records[#records + 1] = r
        by_key[w.key] = by_key[w.key] or {}
        table.insert(by_key[w.key], r)
      end
      f:close()
    else
      log("worker " .. w.name .. " wrote no records")
    end
  end
  socket.sleep(0.05)
  for _, w in ipairs(spawned) do
    if alive(w.pid) then
      socket.sleep(0.2)
      if alive(w.pid) then os.execute(("kill -9 %d 2>/dev/null"):format(w.pid)) end
    end
  end
  spawned = {}
  return records, by_key
end

local function wait_ready()
  wait_for(function()
    for _, w in ipairs(spawned) do
      if not exists(DIR .. "/ready." .. w.name) then return false end
    end
    return true
  end, 10, "workers to be ready")
end

local function start_workers(impl, key, poll, mode, count, extra, env)
  for i = 1, count do spawn(impl, key, poll, mode, ("%s-%s-%d"):format(key, mode, i), extra, env) end
  wait_ready()
end

local hwt_jobs = require("hwt.jobs")
local hwt = require("hwt")
local producer_timer = hwt.new({})
local function hwt_producer(key)
  return hwt_jobs.redis({ timer = producer_timer, key = key, connect = function() return connect(PORT) end })
end

local function pending(impl, key)
  if impl == "hwt" then return client:hlen("{" .. key .. "}:jobs") end
  local _, hkey = peer_keys(key)
  return client:hlen(hkey)
end

local function median(list)
  local sorted = {}
  for i, v in ipairs(list) do sorted[i] = v end
  table.sort(sorted)
  local n = #sorted
  if n == 0 then return nil end
  if n % 2 == 1 then return sorted[(n + 1) / 2] end
  return (sorted[n / 2] + sorted[n / 2 + 1]) / 2
end

local function percentile(sorted, p)
  if #sorted == 0 then return nil end
  local rank = math.max(1, math.ceil(p / 100 * #sorted))
  return sorted[rank]
end

local results = {}              -- results[measure][impl] = { round values }
local function record(measure, impl, value)
  results[measure] = results[measure] or {}
  results[measure][impl] = results[measure][impl] or {}
  table.insert(results[measure][impl], value)
  print(("RESULT %s %s %s"):format(measure, impl, tostring(value)))
  io.stdout:flush()
end

local key_seq = 0
local function fresh_key(tag)
  key_seq = key_seq + 1
  return ("bench:%s:%d"):format(tag, key_seq)
end

-- 1. schedule throughput, one process, delay 1 h (nothing falls due)
local function measure_schedule(impl)
  local key = fresh_key("sched")
  local before = counters()
  local t0 = gettime()
  if impl == "hwt" then
    local q = hwt_producer(key)
    for i = 1, N_SCHEDULE do assert(q:schedule("job", 3600, { n = i })) end
  else
    for i = 1, N_SCHEDULE do peer_schedule(client, key, 3600, { n = i }, "c:") end
  end
  local elapsed = gettime() - t0
  local after = counters()
  record("schedule_per_s", impl, N_SCHEDULE / elapsed)
  record("schedule_cmds_per_job", impl, (after.total - before.total - 1) / N_SCHEDULE)
  record("schedule_bytes_per_job", impl, (after.bytes_in - before.bytes_in - #INFO_REQUEST - 2) / N_SCHEDULE)
  client:flushdb()
  return N_SCHEDULE / elapsed
end

local function wait_drained(impl, key, seconds)
  wait_for(function() return pending(impl, key) == 0 end, seconds, impl .. " jobs to be done")
end

-- 2. run throughput: N_RUN jobs all due at one instant, scheduled before the
-- W workers start (they start before that instant); empty handlers
local function measure_run(impl, workers, sched_rate, tag, env)
  local key = fresh_key("run")
  local lead = 0.6 + 1.3 * N_RUN / sched_rate
  local due_at = gettime() + lead
  local q = impl == "hwt" and hwt_producer(key)
  local zkey, hkey = peer_keys(key)
  for i = 1, N_RUN do
    if q then assert(q:schedule("job", math.max(0, due_at - gettime()), { n = i }))
    else
      local id = "c:" .. i
      client:hset(hkey, id, cjson.encode({ n = i }))
      client:zadd(zkey, fmt_score(due_at), id)
    end
  end
  local before = counters()
  start_workers(impl, key, impl == "hwt" and 1 or PEER_POLL, "run", workers, nil, env)
  if gettime() > due_at then log("warning: " .. tag .. ": workers started after the due time") end
  wait_drained(impl, key, WAIT_LIMIT)
  local after = counters()
  local records = finish_workers()
  local first_due, last_end = math.huge, -math.huge
  for _, r in ipairs(records) do
    first_due = math.min(first_due, r[2])
    last_end = math.max(last_end, r[3])
  end
  if #records ~= N_RUN then log(("warning: %s ran %d jobs of %d"):format(impl, #records, N_RUN)) end
  record(tag .. "_per_s", impl, #records / (last_end - first_due))
  local hlen_calls = after.calls("hlen") - before.calls("hlen")
  local commands = after.total - before.total - hlen_calls - 1
  local trips = impl == "hwt" and script_calls(before, after) or commands
  record(tag .. "_trips_per_job", impl, trips / N_RUN)
  record(tag .. "_cmds_per_job", impl, commands / N_RUN)
  client:flushdb()
end

local function lateness(records, tag, impl)
  local late = {}
  for i, r in ipairs(records) do late[i] = (r[1] - r[2]) * 1000 end
  table.sort(late)
  record(tag .. "_p50_ms", impl, percentile(late, 50))
  record(tag .. "_p99_ms", impl, percentile(late, 99))
  local early = 0
  for _, v in ipairs(late) do if v < 0 then early = early + 1 end end
  if early > 0 then log(("note: %s %s: %d jobs started before their due time"):format(impl, tag, early)) end
end

-- 3. lateness, side by side on separate keys, one worker per case: cases
-- { impl, poll, tag }; `count` jobs scheduled by this process at `rate`/s
-- (job i at the same instant for every case), each due delay_of(i) later.
local function measure_late_cross(cases, count, rate, delay_of, seed)
  local queues = {}
  for _, case in ipairs(cases) do
    case.key = fresh_key(case.tag)
    spawn(case.impl, case.key, case.poll, "run", case.key .. "-w")
    queues[#queues + 1] = case.impl == "hwt" and hwt_producer(case.key) or false
  end
  wait_ready()
  math.randomseed(seed)
  local base = gettime()
  for i = 1, count do
    local wait = base + (i - 1) / rate - gettime()
    if wait > 0 then socket.sleep(wait) end
    local delay = delay_of(i)
    for c, case in ipairs(cases) do
      if queues[c] then assert(queues[c]:schedule("job", delay, { n = i }))
      else peer_schedule(client, case.key, delay, { n = i }, "c:") end
    end
  end
  for _, case in ipairs(cases) do wait_drained(case.impl, case.key, LATE_DMAX + 10) end
  local _, by_key = finish_workers()
  for _, case in ipairs(cases) do
    local records = by_key[case.key] or {}
    if #records ~= count then log(("warning: %s %s ran %d of %d"):format(case.impl, case.tag, #records, count)) end
    lateness(records, case.tag, case.impl)
  end
  client:flushdb()
end

-- 4. the same, each worker scheduling its own jobs (hwt.jobs and peer side by side)
local function measure_late_self(seed)
  local keys = {}
  for _, impl in ipairs({ "hwt", "peer" }) do
    keys[impl] = fresh_key("self-" .. impl)
    spawn(impl, keys[impl], impl == "hwt" and 1 or PEER_POLL, "self", keys[impl] .. "-w",
          ("%s %d %s %d"):format(LATE_RATE, LATE_COUNT, LATE_DMAX, seed))
  end
  wait_ready()
  for _, impl in ipairs({ "hwt", "peer" }) do
    wait_for(function() return exists(DIR .. "/scheduled." .. keys[impl] .. "-w") end,
             LATE_COUNT / LATE_RATE + 10, "the worker to schedule its jobs")
  end
  for _, impl in ipairs({ "hwt", "peer" }) do wait_drained(impl, keys[impl], LATE_DMAX + 10) end
  local _, by_key = finish_workers()
  for _, impl in ipairs({ "hwt", "peer" }) do
    local records = by_key[keys[impl]] or {}
    if #records ~= LATE_COUNT then log(("warning: %s self ran %d of %d"):format(impl, #records, LATE_COUNT)) end
    lateness(records, "late_self", impl)
  end
  client:flushdb()
end

-- 5. idle: Redis commands a worker makes while nothing is due
local function measure_idle(impl, poll, tag)
  local key = fresh_key("idle")
  start_workers(impl, key, poll, "run", 1)
  socket.sleep(0.3)
  local before = counters()
  socket.sleep(IDLE_SECONDS)
  local after = counters()
  finish_workers()
  local elapsed = after.t - before.t
  local commands = after.total - before.total - 1
  local trips = impl == "hwt" and script_calls(before, after) or commands
  record(tag .. "_cmds_per_s", impl, commands / elapsed)
  record(tag .. "_trips_per_s", impl, trips / elapsed)
  record(tag .. "_bytes_per_s", impl, (after.bytes_in - before.bytes_in - #INFO_REQUEST - 2) / elapsed)
  client:flushdb()
end

local started = gettime()
client:flushdb()
for round = 1, ROUNDS do
  log(("round %d of %d (%.0f s so far)"):format(round, ROUNDS, gettime() - started))
  local rate = {}
  for _, impl in ipairs({ "hwt", "peer" }) do
    rate[impl] = part("schedule") and measure_schedule(impl) or 5000
  end
  if part("run") then
    for _, w in ipairs({ 1, 3 }) do
      for _, impl in ipairs({ "hwt", "peer" }) do measure_run(impl, w, rate[impl], "run_w" .. w) end
    end
    measure_run("hwt", 1, rate.hwt, "run_w1_tick1ms", "HWT_TICK=0.001")
  end
  local seed = 1000 + round
  if part("late") then
    measure_late_cross({ { impl = "hwt", poll = 1, tag = "late_cross_poll1" },
                         { impl = "hwt", poll = 0.1, tag = "late_cross_poll01" },
                         { impl = "peer", poll = PEER_POLL, tag = "late_cross_poll1" } },
                       LATE_COUNT, LATE_RATE, function() return math.random() * LATE_DMAX end, seed)
  end
  if part("self") then measure_late_self(seed) end
  if part("pickup") then
    measure_late_cross({ { impl = "hwt", poll = 1, tag = "pickup_poll1" },
                         { impl = "hwt", poll = 0.1, tag = "pickup_poll01" },
                         { impl = "peer", poll = PEER_POLL, tag = "pickup_poll1" } },
                       PICKUP_COUNT, PICKUP_RATE, function() return 0 end, seed)
  end
  if part("idle") then
    measure_idle("hwt", 1, "idle_poll1")
    measure_idle("hwt", 0.1, "idle_poll01")
    measure_idle("peer", PEER_POLL, "idle_poll1")
  end
end
local total_seconds = gettime() - started

-- ---- the table --------------------------------------------------------------

local function med(measure, impl)
  -- the peer has one loop (100 ms): its poll-1 s figure stands for both
  -- rows; the tick-1-ms row is compared with its usual figure
  local by_impl = results[measure] or {}
  if impl == "peer" and not by_impl.peer then
    by_impl = results[(measure:gsub("poll01", "poll1"):gsub("_tick1ms", ""))] or {}
  end
  return median(by_impl[impl] or {})
end

local function show(v)
  if v == nil then return "-" end
  local a = math.abs(v)
  if a >= 1000 then return ("%.0f"):format(v) end
  if a >= 100 then return ("%.0f"):format(v) end
  if a >= 10 then return ("%.1f"):format(v) end
  if a >= 1 then return ("%.2f"):format(v) end
  return ("%.3f"):format(v)
end

local function ratio(a, b)
  if not a or not b then return "-" end
  if b == 0 then return a == 0 and "=" or "inf" end
  return ("%.2f"):format(a / b)
end

local ROWS = {
  { "schedule_per_s", ("schedule: jobs/s, 1 process (N=%d)"):format(N_SCHEDULE) },
  { "schedule_cmds_per_job", "  Redis commands per schedule" },
  { "schedule_bytes_per_job", "  bytes sent to Redis per schedule" },
  { "run_w1_per_s", ("run: jobs/s, 1 worker (%d due at once)"):format(N_RUN) },
  { "run_w1_trips_per_job", "  round trips per job" },
  { "run_w1_cmds_per_job", "  Redis commands per job" },
  { "run_w1_tick1ms_per_s", "  the same, hwt tick 1 ms instead of 10 ms" },
  { "run_w3_per_s", "run: jobs/s, 3 workers" },
  { "run_w3_trips_per_job", "  round trips per job" },
  { "run_w3_cmds_per_job", "  Redis commands per job" },
  { "late_cross_poll1_p50_ms", "lateness p50 ms, other process, poll 1 s" },
  { "late_cross_poll1_p99_ms", "lateness p99 ms, other process, poll 1 s" },
  { "late_cross_poll01_p50_ms", "lateness p50 ms, other process, poll 0.1 s" },
  { "late_cross_poll01_p99_ms", "lateness p99 ms, other process, poll 0.1 s" },
  { "late_self_p50_ms", "lateness p50 ms, scheduled by the worker" },
  { "late_self_p99_ms", "lateness p99 ms, scheduled by the worker" },
  { "pickup_poll1_p50_ms", "pickup p50 ms (delay 0, other proc), poll 1 s" },
  { "pickup_poll1_p99_ms", "pickup p99 ms (delay 0, other proc), poll 1 s" },
  { "pickup_poll01_p50_ms", "pickup p50 ms (delay 0, other proc), poll 0.1 s" },
  { "pickup_poll01_p99_ms", "pickup p99 ms (delay 0, other proc), poll 0.1 s" },
  { "idle_poll1_cmds_per_s", "idle: Redis commands/s, poll 1 s" },
  { "idle_poll1_trips_per_s", "idle: round trips/s, poll 1 s" },
  { "idle_poll1_bytes_per_s", "idle: bytes/s sent to Redis, poll 1 s" },
  { "idle_poll01_cmds_per_s", "idle: Redis commands/s, poll 0.1 s" },
  { "idle_poll01_trips_per_s", "idle: round trips/s, poll 0.1 s" },
  { "idle_poll01_bytes_per_s", "idle: bytes/s sent to Redis, poll 0.1 s" },
}

print()
print(("%-48s %10s %10s %9s"):format("measure (median of " .. ROUNDS .. ")", "hwt.jobs", "peer", "hwt/peer"))
print(("%-48s %10s %10s %9s"):format(("-"):rep(48), ("-"):rep(10), ("-"):rep(10), ("-"):rep(9)))
for _, row in ipairs(ROWS) do
  local h, p = med(row[1], "hwt"), med(row[1], "peer")
  print(("%-48s %10s %10s %9s"):format(row[2], show(h), show(p), ratio(h, p)))
end
print()
print(("hwt.jobs: tick 10 ms, concurrency 32, lease 30 s; peer: %d ms sleep, batch %d (its poll-1 s and 0.1 s rows are one loop)")
  :format(PEER_POLL * 1000, PEER_BATCH))
print(("lateness: %d jobs scheduled at %d/s, delay uniform [0, %g) s; pickup: %d jobs at %d/s, delay 0;")
  :format(LATE_COUNT, LATE_RATE, LATE_DMAX, PICKUP_COUNT, PICKUP_RATE))
print(("  the cases of one lateness/pickup row run side by side (separate keys, one worker each); idle: %g s")
  :format(IDLE_SECONDS))
print(("%d rounds in %.0f s"):format(ROUNDS, total_seconds))
