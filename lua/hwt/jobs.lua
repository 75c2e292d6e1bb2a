-- hwt.jobs: delayed jobs that outlive the process. Redis holds them; any
-- number of worker processes, on any number of machines, share one queue.
--
--   local q = require("hwt.jobs").redis{ timer = timer, key = "app:jobs",
--     connect = function() return redis.connect("127.0.0.1", 6379) end }
--   q:handle("remind", function(payload, job) ... end)
--   local id = q:schedule("remind", 3 * 86400, { user = 42 })
--   q:cancel(id); q:start(); q:stop()
--
-- Each worker arms one hwt timeout, for the earliest due job it knows of, and
-- otherwise asks Redis once per `poll_interval`: that bounds how late a job
-- scheduled by another process starts. A claim is a lease: a worker that dies
-- holding a job loses it after `lease` seconds and another runs it (at least
-- once). Every Redis change is one Lua script that checks before it writes,
-- so it happens whole or not at all. Times in Redis are the Redis server's
-- clock (TIME), in microseconds, so the workers' clocks never have to agree.
--
--
-- The parts, each a module: hwt.jobs_options (checks), hwt.jobs_format (a
-- job as Redis holds it), hwt.jobs_scripts (the Redis side, and the keys),
-- hwt.jobs_client (the adapter to a Redis client), hwt.jobs_worker (the
-- worker's rounds), hwt.jobs_report (where errors go).
local checks = require("hwt.checks")
local drivers = require("hwt.driver")
local every = require("hwt.jobs_every")
local client = require("hwt.jobs_client")
local format = require("hwt.jobs_format")
local options = require("hwt.jobs_options")
local scripts = require("hwt.jobs_scripts")
local shards = require("hwt.jobs_shards")
local worker = require("hwt.jobs_worker")

local M = {}

local huge = math.huge
local eval, micro, encode, decode = client.eval, format.micro, format.encode, format.decode
local MICRO = format.MICRO
local name_arg, seconds_arg, id_arg = options.name_arg, options.seconds_arg, options.id_arg

local Queue = {}
Queue.__index = Queue

-- A queue on one Redis primary: `shard` is where (tag: its keys' hash tag;
-- connect) and its part of the worker (concurrency; handlers and tally,
-- shared by the shards of one queue), and how it makes ids (hwt.jobs_scripts'
-- WRITE_JOB: id_stride, id_offset).
local function new_queue(opts, o, shard)
  return setmetatable({
    timer = opts.timer, connect = shard.connect, release = opts.release,
    on_error = opts.on_error, codec = require("hwt.json"),
    lease = o.lease, poll_interval = o.poll_interval, concurrency = shard.concurrency,
    retry = o.retry,
    handlers = shard.handlers or {},
    running = 0,            -- jobs claimed by this worker and not yet settled
    outcomes = {},          -- settled here, not yet in Redis
    ready = {}, ready_first = 1, ready_last = 0,   -- claimed, for q:run_for to start (hwt.jobs_worker)
    failures = 0,           -- rounds failed in a row
    outage = false,         -- a Redis failure was reported; no round succeeded since
    wake_at = huge,         -- when the wake is armed for (timer:now() scale)
    tally = shard.tally or { scheduled = 0, ran = 0, failed = 0, retried = 0, dead = 0, lost = 0, expired = 0,
                             redis_errors = 0 },  -- stats()
    keys = scripts.keys(shard.tag),
    id_stride = shard.id_stride or "1", id_offset = shard.id_offset or "0",
  }, Queue)
end

-- A queue over opts.shards (hwt.jobs_shards): one queue per shard, and
-- this one, which has no Redis of its own, routing to them.
local function new_sharded_queue(opts, o)
  local n = #opts.shards
  local q = new_queue(opts, o, { concurrency = o.concurrency, tag = opts.key })
  q.connect, q.keys, q.shards, q.turn = nil, nil, {}, shards.first_turn(n)
  for i, connect in ipairs(opts.shards) do
    q.shards[i] = new_queue(opts, o, {
      tag = shards.tag(opts.key, i, n), connect = connect, handlers = q.handlers, tally = q.tally,
      concurrency = o.concurrency, id_stride = tostring(n), id_offset = tostring(i - 1),
    })
  end
  return q
end

function M.redis(opts)
  local checked, o = pcall(options.check_options, opts)
  if not checked then error(o, 2) end
  if opts.shards then return new_sharded_queue(opts, o) end
  return new_queue(opts, o, { tag = opts.key, connect = opts.connect, concurrency = o.concurrency })
end

local function check_queue(q, fname)
  if getmetatable(q) ~= Queue then
    error(("calling '%s' on bad self (hwt.jobs queue expected, got %s)"):format(fname, type(q)), 3)
  end
end

function Queue:handle(name, handler)
  check_queue(self, "handle")
  name_arg(name, "handle")
  if handler ~= nil and not checks.is_callable(handler) then
    error("bad argument #2 to 'handle' (function expected, got " .. checks.type_name(handler) .. ")", 2)
  end
  self.handlers[name] = handler
  return self
end

-- What schedule() and every() return for a write's reply { id, written,
-- µs until due }: the id (a job written is counted, and the wake told of
-- it); or nil, a message and the kind.
local function job_written(q, result, err, kind)
  if result == nil then return nil, err, kind end
  if result[2] == 1 then
    q.tally.scheduled = q.tally.scheduled + 1
    worker.scheduled(q, tonumber(result[3]) / MICRO)
  end
  return tostring(result[1])
end

-- Returns the job's id (a string); or nil, a message and "refused" (nothing
-- was written) or "unknown" (it may have been: schedule again with the same
-- opts.id to be sure it exists once).
function Queue:schedule(name, delay, payload, opts)
  check_queue(self, "schedule")
  name_arg(name, "schedule")
  local id, replace, at = options.schedule_options(opts)
  local seconds = options.delay_or_at_arg(delay, at, "schedule", 2)
  local json, why = encode(self.codec, name, payload)
  if not json then
    error("bad argument #3 to 'schedule' (JSON-encodable payload expected: " .. why .. ")", 2)
  end
  local shard = shards.for_job(self, id)
  return job_written(shard, eval(shard, scripts.schedule, shard.keys.schedule, json, at and "0" or micro(seconds),
                                  id or "", replace and "1" or "0", at and micro(at) or "", shard.id_stride,
                                  shard.id_offset))
end

-- Writes `rows` (schedule_many's) on the queue `shard` in one round trip:
-- their ids, or nil, a message and the kind.
local function write_rows(shard, rows)
  local result, err, kind = eval(shard, scripts.schedule_many, shard.keys.schedule,
                                 shard.codec.encode_strings(rows), shard.id_stride, shard.id_offset)
  if result == nil then return nil, err, kind end
  shard.tally.scheduled = shard.tally.scheduled + result[2]
  local earliest = tonumber(result[3])
  if earliest >= 0 then worker.scheduled(shard, earliest / MICRO) end
  return result[1]
end

-- Schedules the jobs of `list`, each {name=, delay= or at=, payload=, id=,
-- replace=} as schedule() would, in one round trip: all of them are
-- written or none is. Returns their ids, in the list's order; or nil, a
-- message and "refused" or "unknown", as schedule(). On a sharded queue
-- each shard's part of the list is one round trip, written whole or not at
-- all; a shard that fails after another wrote its part makes the outcome
-- "unknown" (send the list again: jobs with ids are written once).
function Queue:schedule_many(list)
  check_queue(self, "schedule_many")
  local _, n = options.job_list_arg(list)
  if n == 0 then return {} end
  -- One batch per shard: a job with an id goes to its shard, the others
  -- all to the next shard, so a list without ids is one round trip.
  local batches, batch_of, unnamed_to = {}, {}, shards.next_shard(self)
  for i = 1, n do
    local job = list[i]
    local json, why = encode(self.codec, job.name, job.payload)
    if not json then
      error(("bad argument #1 to 'schedule_many' (list[%d].payload: JSON-encodable payload expected: %s)")
        :format(i, why), 2)
    end
    local at = job.at and tonumber(job.at)
    local row = { job.id or "", json, at and "0" or micro(tonumber(job.delay)), at and micro(at) or "",
                  job.replace and "1" or "0" }
    local shard = job.id and shards.route(self, job.id) or unnamed_to
    local batch = batch_of[shard]
    if not batch then
      batch = { shard = shard, rows = {}, positions = {} }
      batch_of[shard], batches[#batches + 1] = batch, batch
    end
    local k = #batch.rows + 1
    batch.rows[k], batch.positions[k] = row, i
  end
  local ids = {}
  for b, batch in ipairs(batches) do
    local written, err, kind = write_rows(batch.shard, batch.rows)
    if written == nil then
      if b > 1 then return nil, err .. " (the list's jobs on other shards were written)", client.UNKNOWN end
      return nil, err, kind
    end
    for j, id in ipairs(written) do ids[batch.positions[j]] = tostring(id) end
  end
  return ids
end

-- Runs `script` on the shard that holds the job `id`, with that shard's
-- keys named `keys` (hwt.jobs_scripts.keys), the id as first argument.
local function eval_on_job(q, id, script, keys, ...)
  local shard = shards.route(q, id)
  return eval(shard, script, shard.keys[keys], id, ...)
end

-- A job's record from a GET or LIST row (hwt.jobs_scripts' JOB_ROW).
local function job_of(codec, row)
  local name, payload = decode(codec, row[2])
  if not name then payload = nil end
  local due, dead_at = tonumber(row[4]), tonumber(row[7])
  local series = row[8] ~= "" and codec.decode(row[8]) or nil
  return {
    id = row[1], name = name, payload = payload, state = row[3], due = due and due / MICRO,
    attempts = tonumber(row[5]), error = row[6] ~= "" and row[6] or nil, dead_at = dead_at and dead_at / MICRO,
    every = type(series) == "table" and series.spec or nil, tz = type(series) == "table" and series.tz or nil,
  }
end

-- The job `id`: {id=, name=, payload=, state=, due=, attempts=, error=,
-- dead_at=}; nil when no job has that id; or nil, a message and the kind.
function Queue:get(id)
  check_queue(self, "get")
  local result, err, kind = eval_on_job(self, id_arg(id, "get"), scripts.get, "read")
  if result == nil then return nil, err, kind end
  if result[1] ~= 1 then return nil end
  return job_of(self.codec, result[2])
end

-- Rows from+1 .. from+count of one queue's jobs in `state`, as list().
local function list_page(q, state, from, count)
  local rows, err, kind = eval(q, scripts.list, q.keys.read, state, from, count)
  if rows == nil then return nil, err, kind end
  local jobs = {}
  for i, row in ipairs(rows) do jobs[i] = job_of(q.codec, row) end
  return jobs
end

local function due_order(job) return job.due or huge end
local function dead_order(job) return job.dead_at or huge end

-- A page of jobs in one state (opts.state: "delayed", the default,
-- "running" or "dead"), opts.count (100) of them after the first opts.from
-- (0), as get() gives them: delayed ones by due time, running ones by the
-- due time of their claim, dead ones by when they died.
function Queue:list(opts)
  check_queue(self, "list")
  local state, from, count = options.list_options(opts)
  if not self.shards then return list_page(self, state, from, count) end
  local pages = {}
  for i, shard in ipairs(self.shards) do
    local page, err, kind = list_page(shard, state, 0, from + count)
    if page == nil then return nil, err, kind end
    pages[i] = page
  end
  return shards.merge(pages, state == "dead" and dead_order or due_order, from, count)
end

-- How many jobs are delayed, running (claimed) and dead, and how many
-- recurring series the queue holds.
function Queue:counts()
  check_queue(self, "counts")
  local total = { delayed = 0, running = 0, dead = 0, recurring = 0 }
  for _, shard in ipairs(self.shards or { self }) do
    local counts, err, kind = eval(shard, scripts.counts, shard.keys.counts)
    if counts == nil then return nil, err, kind end
    total.delayed, total.running = total.delayed + counts[1], total.running + counts[2]
    total.dead, total.recurring = total.dead + counts[3], total.recurring + counts[4]
  end
  return total
end

-- A recurring job: `spec` a five-field cron expression (read in opts.tz, an
-- IANA zone, default "UTC") or an interval in seconds; opts.id, opts.replace
-- as schedule()'s. Its first occurrence is the first after the Redis
-- clock's now (two round trips: that clock, then the series). Returns its
-- id (q:cancel(id) ends the series); or nil, a message and the kind.
function Queue:every(name, spec, payload, opts)
  check_queue(self, "every")
  name_arg(name, "every")
  local id, replace, tz_name = options.every_options(opts)
  local schedule, why = every.schedule_of(spec, tz_name)
  if not schedule then
    local zone = why:find("time zone", 1, true) ~= nil
    error(("bad argument #%d to 'every' (%s%s)"):format(zone and 4 or 2, zone and "opts.tz: " or "", why), 2)
  end
  local json, json_why = encode(self.codec, name, payload)
  if not json then
    error("bad argument #3 to 'every' (JSON-encodable payload expected: " .. json_why .. ")", 2)
  end
  local shard = shards.for_job(self, id)
  local now_us, err, kind = eval(shard, scripts.now, shard.keys.none)
  if now_us == nil then return nil, err, kind end
  local now = tonumber(now_us) / MICRO
  local first = every.next_after(schedule, now, now)
  if not first then error("bad argument #2 to 'every' (the cron expression never runs)", 2) end
  local series = self.codec.encode({ spec = spec, tz = tz_name or "UTC" }, "series")
  return job_written(shard, eval(shard, scripts.every, shard.keys.schedule, json, micro(first), id or "",
                                  replace and "1" or "0", series, shard.id_stride, shard.id_offset))
end

-- Moves a delayed job's due time (a delay, or `at`); true if it was delayed
-- (not claimed, not dead) and now has that due time.
local function move(q, id, seconds, at)
  q = shards.route(q, id)
  local result, err, kind = eval(q, scripts.reschedule, q.keys.reschedule, id, at and "0" or micro(seconds),
                                 at and micro(at) or "")
  if result == nil then return nil, err, kind end
  if result[1] ~= 1 then return false end
  worker.scheduled(q, tonumber(result[2]) / MICRO)
  return true
end

-- The delayed job `id` becomes due `delay` seconds from now, or at opts.at
-- (pass delay = nil). true if it was delayed and now has that due time;
-- false if it is running, dead or gone; or nil, a message and the kind.
function Queue:reschedule(id, delay, opts)
  check_queue(self, "reschedule")
  id = id_arg(id, "reschedule")
  local at = options.reschedule_options(opts)
  return move(self, id, options.delay_or_at_arg(delay, at, "reschedule", 2), at)
end

-- The delayed job `id` becomes due now: as reschedule(id, 0).
function Queue:promote(id)
  check_queue(self, "promote")
  return move(self, id_arg(id, "promote"), 0, nil)
end

-- true if the job will never run, on any worker; false if it is running,
-- already ran, was cancelled or dead-lettered; or nil, a message and the
-- kind, as for schedule().
function Queue:cancel(id)
  check_queue(self, "cancel")
  local removed, err, kind = eval_on_job(self, id_arg(id, "cancel"), scripts.cancel, "cancel")
  if removed == nil then return nil, err, kind end
  return removed == 1
end

-- dead() of a sharded queue: the shards' dead jobs, merged by when they died.
local function dead_of_shards(q, limit)
  local jobs, err, kind = q:list({ state = "dead", count = limit })
  if not jobs then return nil, err, kind end
  local list = {}
  for i, job in ipairs(jobs) do
    list[i] = { id = job.id, name = job.name, payload = job.payload, error = job.error or "", attempts = job.attempts }
  end
  return list
end

-- The dead-lettered jobs, oldest first (at most `limit`, default 100): each
-- { id, name, payload, error, attempts }.
function Queue:dead(limit)
  check_queue(self, "dead")
  limit = limit == nil and 100 or tonumber(limit)
  if not limit or limit < 1 or limit % 1 ~= 0 then
    error("bad argument #1 to 'dead' (positive integer expected)", 2)
  end
  if self.shards then return dead_of_shards(self, limit) end
  local rows, err, kind = eval(self, scripts.dead_list, self.keys.dead, limit)
  if not rows then return nil, err, kind end
  local list = {}
  for i, row in ipairs(rows) do
    local name, payload = decode(self.codec, row[2])
    if not name then payload = nil end
    list[i] = { id = row[1], name = name, payload = payload, error = row[3], attempts = tonumber(row[4]) }
  end
  return list
end

-- Puts a dead-lettered job back, due in `delay` seconds (default 0), its
-- attempts counted from zero again. true if it was dead.
function Queue:requeue(id, delay)
  check_queue(self, "requeue")
  id = id_arg(id, "requeue")
  local seconds = delay == nil and 0 or seconds_arg(delay, "requeue", 2)
  local moved, err, kind = eval_on_job(self, id, scripts.requeue, "requeue", micro(seconds))
  if moved == nil then return nil, err, kind end
  return moved == 1
end

-- Starts working: claims due jobs and runs their handlers through the timer.
-- Returns true, or nil and a message when the timer refuses the wake-up.
function Queue:start()
  check_queue(self, "start")
  if next(self.handlers) == nil then
    error("hwt.jobs: no handlers: call q:handle(name, fn) before q:start()", 2)
  end
  if self.timer:is_stopped() then error("hwt.jobs: timer is stopped", 2) end
  for _, shard in ipairs(self.shards or { self }) do
    local started, err = worker.start(shard)
    if not started then return nil, err end
  end
  return true
end

-- Runs the queue's timer for `seconds`, as timer:run_for(seconds) does,
-- in a plain Lua worker process (one whose timer no host driver drives):
-- while nothing is due it waits for the timer and for the queue's listener
-- together, so that a job another process schedules, due before every job
-- this worker knew of, is heard of at once rather than at the next round.
-- The jobs it claims run at once, batch after batch while there is a
-- backlog, for up to a tick at a time between the timer's other tasks
-- (as tasks they would wait for the next tick). Returns how many of the
-- timer's tasks and of the queue's jobs ran.
function Queue:run_for(seconds)
  check_queue(self, "run_for")
  seconds = seconds_arg(seconds, "run_for", 1)
  if drivers.hooks_of(self.timer) then
    error("hwt.jobs: the timer has a host driver: its host's loop runs the queue", 2)
  end
  if self.timer:stats().clock == "manual" then
    error("hwt.jobs: the timer has a manual clock: drive it with advance()", 2)
  end
  local queues = self.shards or { self }
  for _, q in ipairs(queues) do q.run_by_queue = true end
  local timer = self.timer
  local slice = timer:stats().tick        -- how long claimed jobs may hold off the timer's tasks
  local deadline, ran = timer:now() + seconds, 0
  while true do
    ran = ran + timer:poll()
    ran = ran + worker.run_ready(queues, timer:now() + slice)
    local left = deadline - timer:now()
    if left <= 0 then break end
    if not worker.has_ready(queues) then
      local due_in = timer:next_due()
      local wait = due_in and math.min(due_in, left) or left
      if wait > 0 then worker.wait(queues, wait) end
    end
  end
  for _, q in ipairs(queues) do worker.leave_ready(q) end
  return ran
end

-- Stops claiming. Running handlers finish and their outcomes reach Redis;
-- jobs not yet claimed stay in Redis for other workers.
function Queue:stop()
  check_queue(self, "stop")
  for _, shard in ipairs(self.shards or { self }) do worker.stop(shard) end
end

-- What this worker did: scheduled, ran, failed, retried, dead, lost (claims
-- that expired before their outcome reached Redis), expired (claimed jobs
-- given back unstarted: their lease ran out while they waited here),
-- redis_errors; running (claimed, not settled) and unsettled (outcomes
-- waiting for Redis).
function Queue:stats()
  check_queue(self, "stats")
  local s = {}
  for key, value in pairs(self.tally) do s[key] = value end
  s.running, s.unsettled, s.started = 0, 0, false
  for _, shard in ipairs(self.shards or { self }) do
    s.running, s.unsettled = s.running + shard.running, s.unsettled + #shard.outcomes
    s.started = s.started or shard.wake ~= nil and not shard.stopped
  end
  return s
end

return M
