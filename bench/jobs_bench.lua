-- make bench-jobs' coordinator: hwt.jobs beside BullMQ on one redis-server,
-- each measure ROUNDS times, the table of medians on stdout, progress on
-- stderr (bench/jobs_bench.sh starts the server and this):
--   lua5.4 bench/jobs_bench.lua PORT SCRATCH_DIR [BULLMQ_NODE_PATH | -]
-- Each side's producer and worker are processes of their own, started here
-- alike and told what to do through files (bench/jobs_files.lua):
-- bench/jobs_producer.lua and bench/jobs_worker.lua for hwt.jobs,
-- bench/bullmq/producer.js and bench/bullmq/worker.js for BullMQ. The sides
-- run one after the other, never at once. Without BULLMQ_NODE_PATH ("-":
-- BullMQ could not be installed) the BullMQ column reads "-".
-- Every record is made by the worker with this machine's clock: a job's start
-- and end, and the due time its producer put in its payload.
local socket = require("socket")
local redis = require("redis")   -- this process's own client, the instrument
local files = require("jobs_files")
local redis_client = require("jobs_redis")

local now, path, exists, touch = files.now, files.path, files.exists, files.touch

local PORT, DIR = assert(tonumber(arg[1]), "port expected"), assert(arg[2], "scratch dir expected")
local BULLMQ_NODE_PATH = arg[3] ~= "-" and arg[3] or nil
local LUA = os.getenv("LUA") or "lua5.4"
local ENV = function(name, default) return tonumber(os.getenv(name)) or default end
local ROUNDS = ENV("ROUNDS", 3)
local N_SCHEDULE_BATCH = ENV("N_SCHEDULE_BATCH", 20000)
local N_SCHEDULE_ONE = ENV("N_SCHEDULE_ONE", 5000)
local N_RUN = ENV("N_RUN", 10000)
local N_CPU = ENV("N_CPU", 40000)     -- CPU in 10 ms ticks: hwt tuned uses ~0.6 s for these
local LATE_COUNT, LATE_RATE, LATE_DELAY = ENV("LATE_COUNT", 500), ENV("LATE_RATE", 100), ENV("LATE_DELAY", 0.1)
local IDLE_SECONDS = ENV("IDLE_SECONDS", 30)   -- BullMQ's longest idle period: its stalled-job check, 30 s
local PARTS = os.getenv("PARTS") or "schedule,run,late,idle,cpu,shards"

local BATCH = 1000              -- jobs a list in the schedule row: schedule_many / addBulk
local RUN_LEAD = 2              -- seconds from a run's jobs being scheduled to their due time,
local SCHEDULE_FLOOR = 10000    -- plus a second per this many jobs (the slower side's lists: ~15,000/s)
local WAIT_LIMIT = 90           -- seconds for any one phase to finish
local DRAIN_POLL = 0.05         -- seconds between looks at what is left of a run
local IDLE_SETTLE = 1           -- seconds from a worker's ready to the idle window
local STOP_GRACE = 10           -- seconds for workers to write their records once stopped
local CLK_TCK = tonumber(io.popen("getconf CLK_TCK"):read("*l")) or 100

local function part(name) return ("," .. PARTS .. ","):find("," .. name .. ",", 1, true) ~= nil end
local function log(...) io.stderr:write(os.date("%H:%M:%S "), table.concat({ ... }, " "), "\n") end

local client = redis.connect({ host = "127.0.0.1", port = PORT, timeout = 10 })
touch(path(DIR, "alive"))

-- ---- the two sides ----------------------------------------------------------

-- BullMQ's keys for a queue's jobs that are not finished (the default prefix "bull").
local function bullmq_pending(queue)
  local k = "bull:" .. queue .. ":"
  return client:zcard(k .. "delayed") + client:llen(k .. "wait") + client:llen(k .. "active")
    + client:zcard(k .. "prioritized")
end

local SIDES = { "hwt", "bullmq" }
local SIDE = {
  hwt = {
    env = "",
    worker = LUA .. " bench/jobs_worker.lua",
    producer = LUA .. " bench/jobs_producer.lua",
    pending = function(key) return client:hlen("{" .. key .. "}:jobs") end,
    tuned = "tick=0.001 concurrency=128",
  },
  bullmq = BULLMQ_NODE_PATH and {
    env = "NODE_PATH=" .. BULLMQ_NODE_PATH,
    worker = "node bench/bullmq/worker.js",
    producer = "node bench/bullmq/producer.js",
    pending = bullmq_pending,
    tuned = "concurrency=32 remove=1",
  },
}
local function sides()
  local list = {}
  for _, name in ipairs(SIDES) do
    if SIDE[name] then list[#list + 1] = name end
  end
  return list
end

-- ---- processes ----------------------------------------------------------------

local spawned = {}              -- workers running: { pid, name, key }

-- The pids of the processes started and not yet seen to end, in DIR/pids
-- for the shell's trap (an ended one leaves, so that the trap never kills a
-- pid the system gave to another process since).
local running = {}
local function write_pids()
  local lines = {}
  for pid in pairs(running) do lines[#lines + 1] = pid .. "\n" end
  files.write_whole(path(DIR, "pids"), table.concat(lines))
end

local function start_process(command)
  local line = ("%s 2>>%s & echo $!"):format(command, path(DIR, "workers.err"))
  local pipe = assert(io.popen(line))
  local pid = tonumber(pipe:read("*l"))
  pipe:close()
  assert(pid, "a process did not start: " .. command)
  running[pid] = true
  write_pids()
  return pid
end

-- A process's /proc/PID/stat fields after its name (field 3 on), or nil once it is gone.
local function proc_stat(pid)
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if not f then return nil end
  local stat = f:read("a")
  f:close()
  local fields = {}
  for field in stat:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = field end
  return fields
end

-- Running: an exited process is a zombie until this machine's init reaps it,
-- which takes it up to 2 s.
local function alive(pid)
  local fields = proc_stat(pid)
  return fields ~= nil and fields[1] ~= "Z"
end
-- Ends process `pid` unless it has ended, and forgets it.
local function reap(pid)
  if alive(pid) then os.execute(("kill -9 %d 2>/dev/null"):format(pid)) end
  running[pid] = nil
  write_pids()
end

local function wait_for(condition, seconds, what)
  local deadline = now() + seconds
  while not condition() do
    if now() > deadline then error("timed out waiting for " .. what, 0) end
    socket.sleep(0.01)
  end
end

local names = 0
local function fresh_name(tag)
  names = names + 1
  return ("%s-%d"):format(tag, names)
end

local function start_workers(side, key, count, options)
  local s = SIDE[side]
  for _ = 1, count do
    local name = fresh_name(side .. "-w")
    local pid = start_process(("%s %s %d %s %s %s %s"):format(s.env, s.worker, PORT, key, DIR, name, options or ""))
    spawned[#spawned + 1] = { pid = pid, name = name, key = key }
  end
  wait_for(function()
    for _, w in ipairs(spawned) do
      if not exists(path(DIR, "ready", w.name)) then return false end
    end
    return true
  end, 20, side .. " workers to be ready")
end

local function read_records(name, into)
  local f = io.open(path(DIR, "out", name), "r")
  if not f then return log("worker " .. name .. " wrote no records") end
  for line in f:lines() do
    local s, d, e = line:match("^(%S+) (%S+) (%S+)$")
    into[#into + 1] = { tonumber(s), tonumber(d), tonumber(e) }
  end
  f:close()
end

-- Stops every worker; their records ({ start, due, end } each); kills what
-- does not end.
local function finish_workers()
  for _, w in ipairs(spawned) do touch(path(DIR, "stop", w.name)) end
  local records, deadline = {}, now() + STOP_GRACE
  for _, w in ipairs(spawned) do
    while not exists(path(DIR, "out", w.name)) and now() < deadline do socket.sleep(0.01) end
    read_records(w.name, records)
  end
  socket.sleep(0.2)
  for _, w in ipairs(spawned) do reap(w.pid) end
  spawned = {}
  return records
end

-- Runs a producer to its end (it closes its connections after writing its
-- result): the seconds it took, by its own clock.
local function produce(side, key, mode, count, mode_arg)
  local s, name = SIDE[side], fresh_name(side .. "-p")
  local pid = start_process(("%s %s %d %s %s %s %s %d %s"):format(s.env, s.producer, PORT, key, DIR, name, mode,
                                                                  count, mode_arg or ""))
  local ended, err = pcall(wait_for, function() return not alive(pid) end, WAIT_LIMIT,
                           side .. " producer (" .. mode .. ")")
  reap(pid)
  if not ended then error(err, 0) end
  local f = io.open(path(DIR, "result", name), "r")
  if not f then error(side .. " producer (" .. mode .. ") failed: see its stderr below", 0) end
  local seconds = f:read("n")
  f:close()
  return seconds
end

local function wait_drained(side, key, seconds)
  local pending = SIDE[side].pending
  local deadline = now() + seconds
  while pending(key) > 0 do
    if now() > deadline then log(("warning: %s: %d jobs left after %d s"):format(side, pending(key), seconds)) return end
    socket.sleep(DRAIN_POLL)
  end
end

-- ---- CPU ----------------------------------------------------------------------

-- Seconds of CPU (user + system, all its threads) process `pid` has used.
local function process_cpu(pid)
  local fields = proc_stat(pid)
  if not fields then return 0 end
  return (tonumber(fields[12]) + tonumber(fields[13])) / CLK_TCK   -- utime, stime: fields 14, 15
end

local function workers_cpu()
  local total = 0
  for _, w in ipairs(spawned) do total = total + process_cpu(w.pid) end
  return total
end

local function redis_cpu()
  local text = tostring(client:raw_cmd("INFO cpu"))
  return tonumber(text:match("used_cpu_sys:([%d.]+)")) + tonumber(text:match("used_cpu_user:([%d.]+)"))
end

-- ---- figures -------------------------------------------------------------------

local results = {}              -- results[measure][side] = { a value a round }
local function record(measure, side, value)
  results[measure] = results[measure] or {}
  results[measure][side] = results[measure][side] or {}
  table.insert(results[measure][side], value)
  print(("RESULT %s %s %s"):format(measure, side, tostring(value)))
  io.stdout:flush()
end

local function percentile(sorted, p)
  if #sorted == 0 then return nil end
  return sorted[math.max(1, math.ceil(p / 100 * #sorted))]
end

local function median(list)
  local sorted = { table.unpack(list) }
  table.sort(sorted)
  local n = #sorted
  if n == 0 then return nil end
  if n % 2 == 1 then return sorted[(n + 1) / 2] end
  return (sorted[n / 2] + sorted[n / 2 + 1]) / 2
end

local keys = 0
local function fresh_key(tag)
  keys = keys + 1
  return ("bench-%s-%d"):format(tag, keys)
end

-- ---- the measures --------------------------------------------------------------

-- Scheduling: one producer, jobs due in an hour (none falls due): jobs/s.
local function measure_schedule(side, mode, count, tag, mode_arg)
  local seconds = produce(side, fresh_key(tag), mode, count, mode_arg)
  record(tag .. "_per_s", side, count / seconds)
  client:flushdb()
end

-- Running: `count` jobs due at one instant, scheduled before the workers
-- start, empty handlers. jobs/s from the due time to the last handler's end;
-- the workers' and Redis' CPU from just before the due time to the drain,
-- per job.
local function measure_run(side, workers, options, count, tag)
  local key = fresh_key(tag)
  local due_at = now() + RUN_LEAD + count / SCHEDULE_FLOOR
  produce(side, key, "at", count, ("%.6f"):format(due_at))
  start_workers(side, key, workers, options)
  local before_due = due_at - now()
  if before_due < 0.1 then log(("warning: %s %s: workers ready %.2f s after the due time"):format(side, tag, -before_due)) end
  socket.sleep(math.max(0, before_due - 0.1))
  local worker_cpu0, redis_cpu0 = workers_cpu(), redis_cpu()
  wait_drained(side, key, WAIT_LIMIT)
  local worker_cpu, redis_cpu_used = workers_cpu() - worker_cpu0, redis_cpu() - redis_cpu0
  local records = finish_workers()
  if #records ~= count then log(("warning: %s %s ran %d jobs of %d"):format(side, tag, #records, count)) end
  local last_end = -math.huge
  for _, r in ipairs(records) do last_end = math.max(last_end, r[3]) end
  record(tag .. "_per_s", side, #records / (last_end - due_at))
  record(tag .. "_worker_cpu_us", side, worker_cpu / #records * 1e6)
  record(tag .. "_redis_cpu_us", side, redis_cpu_used / #records * 1e6)
  client:flushdb()
end

-- Lateness: one worker (defaults); another process schedules LATE_COUNT jobs
-- at LATE_RATE a second, each due LATE_DELAY s later. Start - due, ms.
local function measure_late(side)
  local key = fresh_key("late")
  start_workers(side, key, 1)
  produce(side, key, "paced", LATE_COUNT, ("%g,%g"):format(LATE_RATE, LATE_DELAY))
  wait_drained(side, key, LATE_DELAY + 10)
  local records = finish_workers()
  if #records ~= LATE_COUNT then log(("warning: %s late ran %d of %d"):format(side, #records, LATE_COUNT)) end
  local late = {}
  for i, r in ipairs(records) do late[i] = (r[1] - r[2]) * 1000 end
  table.sort(late)
  record("late_p50_ms", side, percentile(late, 50))
  record("late_p99_ms", side, percentile(late, 99))
  client:flushdb()
end

-- The requests Redis receives over `seconds`, from clients other than
-- scripts, counted by MONITOR (each command a client sends is one line;
-- a script's own calls are marked "lua" and not counted).
local function requests_over(seconds)
  local monitor = assert(socket.connect("127.0.0.1", PORT))
  monitor:send("MONITOR\r\n")
  monitor:settimeout(5)
  assert(monitor:receive("*l") == "+OK", "MONITOR refused")
  local count, deadline = 0, now() + seconds
  while true do
    local left = deadline - now()
    if left <= 0 then break end
    monitor:settimeout(left)
    local who = (monitor:receive("*l") or ""):match("^%+[%d.]+ %[%d+ (%S+)%]")
    if who and who ~= "lua" then count = count + 1 end
  end
  monitor:close()
  return count
end

-- Idle: one worker (defaults), nothing scheduled: its requests a second.
local function measure_idle(side)
  local key = fresh_key("idle")
  start_workers(side, key, 1)
  socket.sleep(IDLE_SETTLE)
  local requests = requests_over(IDLE_SECONDS)
  finish_workers()
  record("idle_requests_per_s", side, requests / IDLE_SECONDS)
  client:flushdb()
end

-- Redis CPU per job, a queue of 3 shards against 1 (and beside it 3
-- shards on one server, and the floor of spreading a load over three
-- redis-servers): one round of bench/jobs_shards.lua, which starts servers
-- of its own.
local function measure_redis_cpu_shards()
  local pipe = assert(io.popen("ROUNDS=1 timeout " .. WAIT_LIMIT * 2 .. " " .. LUA .. " bench/jobs_shards.lua"))
  local got = {}
  for line in pipe:lines() do
    local name, value = line:match("^RESULT (%S+) (%S+)$")
    if name then got[name] = tonumber(value) end
  end
  pipe:close()
  if not (got.one and got.spread and got.together and got.floor_one and got.floor_spread) then
    error("bench/jobs_shards.lua gave no figures: see its stderr above", 0)
  end
  record("shards_redis_cpu_ratio", "hwt", got.spread / got.one)
  record("shards_together_ratio", "hwt", got.together / got.one)
  record("shards_floor_ratio", "hwt", got.floor_spread / got.floor_one)
end

-- ---- the rounds -----------------------------------------------------------------

local started = now()
client:flushdb()
for round = 1, ROUNDS do
  log(("round %d of %d (%.0f s so far)"):format(round, ROUNDS, now() - started))
  for _, side in ipairs(sides()) do
    if part("schedule") then
      log(side .. ": schedule")
      measure_schedule(side, "batch", N_SCHEDULE_BATCH, "schedule_batch", BATCH)
      measure_schedule(side, "one", N_SCHEDULE_ONE, "schedule_one")
      if side == "hwt" then measure_schedule(side, "floor", N_SCHEDULE_ONE, "schedule_floor") end
    end
    if part("run") then
      log(side .. ": run")
      measure_run(side, 1, nil, N_RUN, "run_w1")
      measure_run(side, 3, nil, N_RUN, "run_w3")
    end
    if part("late") then log(side .. ": late") measure_late(side) end
    if part("idle") then log(side .. ": idle") measure_idle(side) end
    if part("cpu") then
      log(side .. ": cpu (tuned)")
      measure_run(side, 1, SIDE[side].tuned, N_CPU, "tuned")
    end
  end
  if part("shards") then measure_redis_cpu_shards() end
end
local total_seconds = now() - started

-- ---- the table --------------------------------------------------------------------

local function med(measure, side) return median((results[measure] or {})[side] or {}) end

local function show(v)
  if v == nil then return "-" end
  local a = math.abs(v)
  if a >= 100 then return ("%.0f"):format(v) end
  if a >= 10 then return ("%.1f"):format(v) end
  if a >= 1 then return ("%.2f"):format(v) end
  return ("%.3f"):format(v)
end

-- A row's verdict: "met", "missed" or "-" (not measured); `target` compares
-- the ratio hwt / BullMQ (">=", "<=") or hwt's own figure ("hwt<=").
local function verdict(target, h, b)
  if not target then return "" end
  local kind, bound = target[1], target[2]
  local value
  if kind == "hwt<=" then value = h else value = h and b and b ~= 0 and h / b end
  if not value then return "-" end
  local met = (kind == ">=" and value >= bound) or (kind ~= ">=" and value <= bound)
  return met and "met" or "missed"
end

local function target_text(target)
  if not target then return "" end
  if target[1] == "hwt<=" then return ("hwt <= %g"):format(target[2]) end
  return ("%s %gx"):format(target[1], target[2])
end

local ROWS = {
  { "schedule_batch_per_s", ("schedule: jobs/s, lists of %d (schedule_many / addBulk)"):format(BATCH), { ">=", 3 } },
  { "schedule_one_per_s", "schedule: jobs/s, one call per job (schedule / add)", { ">=", 2 } },
  { "schedule_floor_per_s", "  floor: a script that does nothing, one call each", nil, "schedule_one_per_s" },
  { "run_w1_per_s", "run: jobs/s, 1 worker, defaults", { ">=", 3 } },
  { "run_w3_per_s", "run: jobs/s, 3 workers, defaults", { ">=", 4 } },
  { "late_p99_ms", ("lateness p99 ms, due %g ms after another process schedules"):format(LATE_DELAY * 1000),
    { "hwt<=", 25 } },
  { "late_p50_ms", "  lateness p50 ms, the same jobs" },
  { "idle_requests_per_s", "idle: requests/s per worker, defaults", { "hwt<=", 0.5 } },
  { "tuned_worker_cpu_us", "worker CPU us per job run, tuned", { "<=", 0.15 } },
  { "tuned_per_s", "  run: jobs/s, 1 worker, tuned" },
  { "tuned_redis_cpu_us", "  Redis CPU us per job run, 1 worker, tuned" },
  { "run_w1_worker_cpu_us", "  worker CPU us per job run, 1 worker, defaults" },
  { "run_w1_redis_cpu_us", "  Redis CPU us per job run, 1 worker, defaults" },
  { "shards_redis_cpu_ratio", "Redis CPU per job, 3 shards on 3 servers / 1 shard", { "hwt<=", 1.1 } },
  { "shards_together_ratio", "  3 shards on 1 server / 1 shard" },
  { "shards_floor_ratio", "  floor: a script's load on 3 servers / on 1" },
}

local function ratio(h, b)
  if not h or not b or b == 0 then return "-" end
  return ("%.2f"):format(h / b)
end

local FORMAT = "%-58s %10s %10s %8s  %-12s %s"
print()
print(FORMAT:format("measure (median of " .. ROUNDS .. ")", "hwt.jobs", "BullMQ", "hwt/Bull", "target", ""))
print(FORMAT:format(("-"):rep(58), ("-"):rep(10), ("-"):rep(10), ("-"):rep(8), ("-"):rep(12), "------"))
for _, row in ipairs(ROWS) do
  local h, b = med(row[1], "hwt"), med(row[4] or row[1], "bullmq")   -- row[4]: BullMQ's figure it faces
  print(FORMAT:format(row[2], show(h), show(b), ratio(h, b), target_text(row[3]), verdict(row[3], h, b)))
end
print()
print("hwt.jobs: client " .. redis_client.name .. "; defaults tick 10 ms, concurrency 32, poll_interval 1 s;"
  .. " tuned tick 1 ms, concurrency 128")
if BULLMQ_NODE_PATH then
  print("BullMQ: ioredis; defaults concurrency 1, completed jobs kept; tuned concurrency 32,"
    .. " removeOnComplete { count: 0 }")
else
  print("BullMQ: skipped (not installed: the reason is on stderr)")
end
print(("schedule: %d jobs in lists / %d one by one, due in 1 h; run: %d jobs due at once (tuned: %d),"
  .. " scheduled before the workers start"):format(N_SCHEDULE_BATCH, N_SCHEDULE_ONE, N_RUN, N_CPU))
print(("lateness: %d jobs at %g/s, one worker; idle: %g s counted by MONITOR (not a script's own calls)")
  :format(LATE_COUNT, LATE_RATE, IDLE_SECONDS))
print("shards: bench/jobs_shards.lua, one round each (20000 jobs, one worker; its own three redis-servers)")
print(("%d rounds in %.0f s"):format(ROUNDS, total_seconds))
