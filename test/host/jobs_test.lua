-- hwt.jobs across processes, against a real redis-server (AOF on) on
-- 127.0.0.1, or with --cluster a queue sharded over a real 3-node Redis
-- Cluster (AOF on):
--  1. 3 workers, 10,000 jobs due over 0-3 s, every other block of 500
--     scheduled by one schedule_many() with ids (the rest one schedule()
--     each); one worker is killed with SIGKILL mid-run (while it runs a slow
--     job), Redis (one node of the cluster) is stopped and restarted
--     mid-run, and Redis (another node) stalls for longer than a client's
--     timeout. Every job runs, none early, none twice except those the
--     killed worker held (run again after the lease); a job cancelled here
--     never runs on a worker; schedule() and schedule_many() to the stopped
--     Redis return nil, err (refused), and that batch, sent again once Redis
--     is back (as is any batch that failed), has each of its jobs run once;
--     a recurring job (every 0.25 s) ran through it all: each occurrence
--     once (but those the killed worker held), never early, on after the
--     restart, and cancel() ended it; at the end Redis holds nothing but the
--     dead-letter-free, empty queue. With --cluster: each shard's keys are
--     on a node of their own, and a queue that names the nodes in another
--     order is refused (MOVED) and writes nothing.
--  2. (one redis-server) A job scheduled 5 s ahead survives stopping every
--     worker: new workers run it, not early, once.
-- Prints each check and "jobs: N passed, N failed"; exits non-zero on a failure.
--   lua5.4 test/host/jobs_test.lua [--cluster]    (from the repository's top directory)
package.path = "lua/?.lua;test/host/?.lua;" .. package.path
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local redis_server = require("redis_server")
local redis_cluster = require("redis_cluster")
local shards = require("hwt.jobs_shards")
local socket = require("socket")

local CLUSTER = arg[1] == "--cluster"

local LUA = os.getenv("LUA") or "lua5.4"
local JOBS = 10000
local SPREAD = 3                -- seconds over which the jobs fall due
local LEASE = 3
local WORKERS = 3
local SLOW_JOBS = 2             -- jobs that sleep SLOW_SECONDS: the kill lands in one
local SLOW_SECONDS = 1          -- (both on one worker still end within the lease)
local KILL_AT = 0.6             -- seconds after the first job is scheduled
local REDIS_DOWN_AT = 1.0
local REDIS_DOWN_FOR = 0.5
local ALL_DONE_WITHIN = 40      -- seconds, for phase 1
local SURVIVOR_DELAY = 5
local NEVER_EARLY_SLACK = 0     -- a start before the deadline is a failure, however small
local BATCH = 500               -- jobs per schedule_many(), every other block of BATCH
local RESEND_WITHIN = 10        -- seconds a failed batch is sent again for
local SERIES_ID, SERIES_INTERVAL = "series-1", 0.25
local SHARDS = 3                -- with --cluster: the cluster's nodes
local STALL_AT, STALL_FOR = 1.8, 1.5   -- seconds: longer than a client's 1 s timeout

local passed, failed = 0, 0
local function check(ok, label, detail)
  if ok then
    passed = passed + 1
    print("ok     " .. label)
  else
    failed = failed + 1
    print("FAIL   " .. label .. (detail and (": " .. detail) or ""))
  end
end

local KEY = "test:jobs"
local cluster = CLUSTER and redis_cluster.start(SHARDS, { durable = true }) or nil
local servers = cluster and cluster.nodes or { redis_server.start({ durable = true }) }
local scratch = servers[1].dir
local RESTARTED, STALLED = 1, #servers  -- which server is restarted, which one stalls
local ports, tags = {}, {}              -- each server's port, and the hash tag of its keys
for i, server in ipairs(servers) do ports[i], tags[i] = server.port, shards.tag(KEY, i, #servers) end
local workers = {}

local function spawn_worker(log_path)
  local command = ("%s test/host/jobs_worker.lua %s %s %d %s 2>>%s/workers.err & echo $!"):format(
    LUA, table.concat(ports, ","), KEY, LEASE, log_path, scratch)
  local pipe = assert(io.popen(command))
  local pid = tonumber(pipe:read("*l"))
  pipe:close()
  workers[#workers + 1] = pid
  return pid
end

local function kill(pid, signal)
  redis_server.execute(("kill -%s %d 2>/dev/null"):format(signal, pid))
end

local function cleanup()
  for _, pid in ipairs(workers) do kill(pid, "KILL") end
  for _, server in ipairs(servers) do server:destroy() end
end

local function connect_to(server)
  return function() return redis_server.connect_client(server.port, 1) end   -- hwt.redis on Lua 5.4
end

-- A queue on the servers, named in `order` (default: as started).
local timer = hwt.new()
local function queue_on(order)
  local connects = {}
  for i, at in ipairs(order or {}) do connects[i] = connect_to(servers[at]) end
  if not order then
    for i, server in ipairs(servers) do connects[i] = connect_to(server) end
  end
  return jobs.redis({ timer = timer, key = KEY, connect = not cluster and connects[1] or nil,
                      shards = cluster and connects or nil })
end
-- A queue for scheduling and cancelling from this process (it never starts).
local queue = queue_on()

-- `count` ids that start with `prefix` and live on server i.
local function ids_on(i, prefix, count)
  local ids, k = {}, 0
  while #ids < count do
    k = k + 1
    local id = prefix .. k
    if shards.index_of(id, #servers) == i then ids[#ids + 1] = id end
  end
  return ids
end

-- Reads the workers' logs: starts[id] = { {start, due, pid, log}, ... }, done[id] = count.
local function read_logs(paths)
  local starts, done = {}, {}
  for _, path in ipairs(paths) do
    local file = io.open(path)
    if file then
      for line in file:lines() do
        local id, start, due, pid = line:match("^S (%S+) (%S+) (%S+) (%S+)$")
        if id then
          starts[id] = starts[id] or {}
          table.insert(starts[id], { start = tonumber(start), due = tonumber(due), pid = tonumber(pid) })
        else
          id = line:match("^D (%S+)$")
          if id then done[id] = (done[id] or 0) + 1 end
        end
      end
      file:close()
    end
  end
  return starts, done
end

local function count_done(paths, ids)
  local _, done = read_logs(paths)
  local n = 0
  for _, id in ipairs(ids) do
    if done[id] then n = n + 1 end
  end
  return n
end

-- The size of the queue's key `key` (e.g. "due" with "zcard"), summed over the servers.
local function redis_size(command, key)
  local total = 0
  for i, server in ipairs(servers) do
    local client = assert(server:connect())
    total = total + tonumber(client[command](client, "{" .. tags[i] .. "}:" .. key))
    client:quit()
  end
  return total
end

-- Makes server i stall for `seconds` (DEBUG SLEEP, its reply not awaited).
local function stall(i, seconds)
  local sleeper = assert(socket.connect("127.0.0.1", servers[i].port))
  assert(sleeper:send(("DEBUG SLEEP %s\r\n"):format(seconds)))
  return sleeper
end

-- The pid of a worker inside a slow job now, or nil.
local function running_slow(logs, slow_ids)
  local starts, done = read_logs(logs)
  for _, id in ipairs(slow_ids) do
    if starts[id] and not done[id] then return starts[id][1].pid end
  end
end

local function phase_one()
  local logs = {}
  for i = 1, WORKERS do
    logs[i] = ("%s/worker%d.log"):format(scratch, i)
    spawn_worker(logs[i])
  end
  local victim
  local killed, redis_restarted, cancelled = false, false, nil
  local ids, earliest, slow_ids = {}, {}, {}
  local cancelled_id = assert(queue:schedule("job", SPREAD + 1, { cancel = true }))
  local series_id = assert(queue:every("job", SERIES_INTERVAL, { series = true }, { id = SERIES_ID }))
  local first = socket.gettime()
  for i = 1, SLOW_JOBS do
    slow_ids[i] = assert(queue:schedule("job", KILL_AT / 2, { sleep = SLOW_SECONDS }))
    ids[#ids + 1], earliest[slow_ids[i]] = slow_ids[i], first + KILL_AT / 2
  end
  local function kill_a_busy_worker()
    victim = running_slow(logs, slow_ids)
    if victim then
      kill(victim, "KILL")
      killed = true
      cancelled = queue:cancel(cancelled_id)
    end
  end
  local refused_while_down, written_while_down = nil, nil
  local restarted_at
  local sleeper                  -- the connection that made Redis stall
  local unknown = 0              -- schedule() calls whose outcome is unknown (the stall)
  local batch_refused_while_down, batch_written_after = nil, nil
  local down_batch = {}          -- sent while Redis is down, and again once it is back
  for k, id in ipairs(ids_on(RESTARTED, "while-down-", 100)) do
    down_batch[k] = { name = "job", delay = SPREAD, payload = { n = "down " .. k }, id = id }
  end
  local function restart_redis()
    local down = servers[RESTARTED]
    down:stop("TERM")
    local id_down, err = queue:schedule("job", 0, { n = "while down" }, { id = ids_on(RESTARTED, "down-", 1)[1] })
    refused_while_down = id_down == nil and type(err) == "string"
    written_while_down = id_down
    local ids_down, _, kind = queue:schedule_many(down_batch)
    batch_refused_while_down = ids_down == nil and kind == "refused"
    socket.sleep(REDIS_DOWN_FOR)
    down:start()
    redis_restarted = true
    restarted_at = socket.gettime()
    local before = socket.gettime()
    local written = queue:schedule_many(down_batch)
    while not written and socket.gettime() < restarted_at + RESEND_WITHIN do   -- a node rejoins its cluster
      socket.sleep(0.05)
      written = queue:schedule_many(down_batch)
    end
    batch_written_after = written and #written == #down_batch
    for k, id in ipairs(written or {}) do
      ids[#ids + 1] = id
      earliest[id] = before + down_batch[k].delay
    end
  end
  -- The kill and the restart happen at their times whether scheduling is
  -- still going on or not (it takes 1-4 s here): the jobs are due until ~3 s.
  local function events_due()
    local elapsed = socket.gettime() - first
    if not killed and elapsed >= KILL_AT then kill_a_busy_worker() end
    if not redis_restarted and elapsed >= REDIS_DOWN_AT then restart_redis() end
    if not sleeper and redis_restarted and elapsed >= STALL_AT then sleeper = stall(STALLED, STALL_FOR) end
    return killed and redis_restarted and sleeper ~= nil
  end
  local function schedule_batch(from, to)
    local list = {}
    for i = from, to do
      list[#list + 1] = { name = "job", delay = (i - 1) * SPREAD / JOBS, payload = { n = i }, id = "batch-" .. i }
    end
    local before = socket.gettime()
    local written = queue:schedule_many(list)
    local give_up = before + RESEND_WITHIN
    while not written and socket.gettime() < give_up do   -- the same list again writes each job once
      events_due()
      socket.sleep(0.05)
      written = queue:schedule_many(list)
    end
    for k, id in ipairs(written or {}) do
      ids[#ids + 1] = id
      earliest[id] = before + list[k].delay
    end
    events_due()
  end
  for block = 0, math.ceil(JOBS / BATCH) - 1 do
    local from, to = block * BATCH + 1, math.min((block + 1) * BATCH, JOBS)
    if block % 2 == 1 then
      schedule_batch(from, to)
    else
      for i = from, to do
        local delay = (i - 1) * SPREAD / JOBS
        local before = socket.gettime()
        local id, _, kind = queue:schedule("job", delay, { n = i })
        if id then
          ids[#ids + 1] = id
          earliest[id] = before + delay
        elseif kind == "unknown" then
          unknown = unknown + 1   -- written or not, it has no id here to check
        end
        if i % 100 == 0 then events_due() end
      end
    end
  end
  local scheduled_in = socket.gettime() - first
  redis_server.wait_until(events_due, RESEND_WITHIN + STALL_AT + SLOW_SECONDS)   -- a node may take a while to rejoin
  if sleeper then sleeper:close() end
  check(#ids + unknown == JOBS + SLOW_JOBS + #down_batch and unknown <= 2,
        ("all %d jobs scheduled (%d outcomes unknown: the stall)"):format(JOBS + #down_batch, unknown),
        ("%d scheduled"):format(#ids))
  check(killed and redis_restarted and sleeper, "a worker was killed, Redis restarted and Redis stalled while jobs were due")
  check(refused_while_down and written_while_down == nil, "schedule() while Redis is down returns nil, err")
  check(batch_refused_while_down, "schedule_many() while Redis is down returns nil, err, \"refused\"")
  check(batch_written_after, "the same batch, sent again once Redis is back, is written")
  check(cancelled == true, "a job cancelled from this process: cancel() returns true", tostring(cancelled))

  local all_done = redis_server.wait_until(function() return count_done(logs, ids) == #ids end,
                                           ALL_DONE_WITHIN)
  local starts = read_logs(logs)
  local missing, early, twice, unexplained, rerun_too_soon = 0, 0, 0, 0, 0
  local worst_early = 0
  for _, id in ipairs(ids) do
    local runs = starts[id]
    if not runs then
      missing = missing + 1
    else
      for _, run in ipairs(runs) do
        local ahead = earliest[id] - run.start
        if ahead > NEVER_EARLY_SLACK then
          early = early + 1
          worst_early = math.max(worst_early, ahead)
        end
      end
      if #runs > 1 then
        twice = twice + 1
        table.sort(runs, function(a, b) return a.start < b.start end)
        -- A second run is allowed only after a run on the killed worker, and
        -- only once that worker's lease has run out.
        local on_victim
        for i = 1, #runs - 1 do
          if runs[i].pid == victim then on_victim = runs[i] end
        end
        if not on_victim then
          unexplained = unexplained + 1
        elseif runs[#runs].start < on_victim.start + LEASE - 1 then
          rerun_too_soon = rerun_too_soon + 1
        end
      end
    end
  end
  check(all_done, ("every job ran to its end within %d s"):format(ALL_DONE_WITHIN),
        ("%d of %d"):format(count_done(logs, ids), #ids))
  check(missing == 0, "no job lost", missing .. " never started")
  print(("       (scheduling took %.1f s)"):format(scheduled_in))
  check(early == 0, "no job started before its deadline",
        ("%d early, the worst by %.6f s"):format(early, worst_early))
  check(unexplained == 0, "no job ran twice except those the killed worker held",
        unexplained .. " ran twice without a run on the killed worker")
  check(twice > 0 and rerun_too_soon == 0,
        ("the killed worker's jobs ran again, after its lease (%d jobs)"):format(twice),
        ("%d ran twice, %d of them before the lease ran out"):format(twice, rerun_too_soon))
  local _, done = read_logs(logs)
  check(done[cancelled_id] == nil and starts[cancelled_id] == nil, "the cancelled job ran on no worker")

  -- The recurring job: each occurrence (a due time) once but the victim's, never early, on after the restart.
  local series_cancelled = queue:cancel(series_id)
  redis_server.wait_until(function() return redis_size("hlen", "jobs") == 0 end, LEASE + 2)
  local runs_by_due, occurrences, repeated, series_early, after_restart = {}, 0, 0, 0, 0
  for _, run in ipairs(read_logs(logs)[SERIES_ID] or {}) do
    local key = ("%.6f"):format(run.due)
    if runs_by_due[key] then
      if runs_by_due[key].pid ~= victim and run.pid ~= victim then repeated = repeated + 1 end
    else
      occurrences = occurrences + 1
    end
    runs_by_due[key] = run
    if run.start < run.due then series_early = series_early + 1 end
    if restarted_at and run.start > restarted_at then after_restart = after_restart + 1 end
  end
  -- Behind the backlog its occurrences start late; the ones that fell due
  -- meanwhile collapse into the next: due times at least an interval apart.
  local dues = {}
  for key in pairs(runs_by_due) do dues[#dues + 1] = tonumber(key) end
  table.sort(dues)
  local bunched = 0
  for i = 2, #dues do
    if dues[i] - dues[i - 1] < SERIES_INTERVAL - 1e-3 then bunched = bunched + 1 end
  end
  check(occurrences >= 3 and bunched == 0,
        ("a recurring job ran all along, missed occurrences once each time (%d occurrences)"):format(occurrences),
        bunched .. " due less than an interval after the one before")
  check(repeated == 0 and series_early == 0, "each occurrence ran once (but the killed worker's), none early",
        ("%d repeated, %d early"):format(repeated, series_early))
  check(after_restart > 0, "the recurring job ran on after Redis restarted")
  check(series_cancelled == true, "cancel() ended the series", tostring(series_cancelled))

  local leftovers = redis_size("zcard", "due") + redis_size("hlen", "jobs")
    + redis_size("hlen", "claims") + redis_size("zcard", "dead")
  check(leftovers == 0, "Redis holds nothing once every job ran (nothing half-written, nothing dead)",
        leftovers .. " entries left")
end

-- The cluster's own checks: each shard's keys on a node of their own, and
-- a queue that names the nodes in another order refused by them.
local function cluster_checks()
  local owners, misplaced = {}, 0
  for i, tag in ipairs(tags) do
    owners[i] = cluster:owner(shards.slot(tag))
    local keyslot = tonumber(cluster:cli(ports[1], "cluster keyslot '" .. tag .. "'"):match("%d+"))
    if owners[i] ~= i or keyslot ~= shards.slot(tag) then misplaced = misplaced + 1 end
    for key in cluster:cli(ports[i], "--scan"):gmatch("[^\n]+") do
      if key:sub(1, #tag + 2) ~= "{" .. tag .. "}" then misplaced = misplaced + 1 end
    end
  end
  check(misplaced == 0, "each shard's keys are on a node of their own (the slot CLUSTER KEYSLOT gives)",
        misplaced .. " misplaced; owners " .. table.concat(owners, ","))
  local reversed = queue_on({ 3, 2, 1 })
  local id = ids_on(1, "moved-", 1)[1]
  local written, err, kind = reversed:schedule("job", 60, nil, { id = id })
  check(written == nil and kind == "refused" and tostring(err):find("MOVED", 1, true) ~= nil
        and queue:get(id) == nil,
        "a queue that names the nodes in another order is refused (MOVED) and writes nothing",
        tostring(err) .. " " .. tostring(kind))
end

local function phase_two()
  local before = socket.gettime()
  local id = assert(queue:schedule("job", SURVIVOR_DELAY, { survivor = true }))
  for _, pid in ipairs(workers) do kill(pid, "TERM") end
  socket.sleep(1)
  local logs = {}
  for i = 1, 2 do
    logs[i] = ("%s/new%d.log"):format(scratch, i)
    spawn_worker(logs[i])
  end
  local ran = redis_server.wait_until(function() return count_done(logs, { id }) == 1 end,
                                      SURVIVOR_DELAY + LEASE + 5)
  local starts = read_logs(logs)
  local runs = starts[id] or {}
  check(ran and #runs == 1, ("a job scheduled %d s ahead ran once on workers started after every "
        .. "worker that knew it was stopped"):format(SURVIVOR_DELAY), #runs .. " runs")
  check(runs[1] and runs[1].start >= before + SURVIVOR_DELAY, "... and not before its deadline")
end

local ok, err = pcall(function()
  phase_one()
  if cluster then
    cluster_checks()
  else
    phase_two()                -- the workers' restart: nothing in it is a shard's
  end
end)
cleanup()
if not ok then check(false, "the test ran to its end", tostring(err)) end
print(("jobs%s: %d passed, %d failed"):format(cluster and " cluster" or "", passed, failed))
os.exit(failed == 0 and 0 or 1)
