-- hwt.jobs_worker: the worker of a queue. It arms one hwt timeout, the
-- wake, for the earliest due job it knows of, and otherwise asks Redis once
-- per poll_interval. Each round trip (pump) settles the outcomes of the jobs
-- run here, claims what is due and there is room for, and learns when to ask
-- next. A claim is a lease: a job whose outcome does not reach Redis within
-- `lease` seconds is due again, for any worker.
local backoff = require("hwt.backoff")
local drivers = require("hwt.driver")
local client = require("hwt.jobs_client")
local every = require("hwt.jobs_every")
local format = require("hwt.jobs_format")
local listen = require("hwt.jobs_listen")
local report = require("hwt.jobs_report").report
local scripts = require("hwt.jobs_scripts")

local M = {}

local huge = math.huge
local unpack = table.unpack or unpack
local eval, micro, MICRO, decode = client.eval, format.micro, format.MICRO, format.decode

-- After a failed round (Redis unreachable, an error) the worker tries again
-- after this, doubling up to poll_interval.
local FIRST_RECONNECT_WAIT = 0.1
local OUTCOME_FIELDS = 5        -- id, token, kind, wait, error

local arm, pump

-- Re-arms the wake: a reset, or on LuaJIT, where a Timeout that ended
-- cannot be reset, a new wake. Returns what reset() returns; raises once the
-- timer stopped.
local function rearm(q, delay)
  local ok, armed, refusal = pcall(q.wake.reset, q.wake, delay)
  if ok or q.timer:is_stopped() then
    if not ok then error(armed, 0) end
    return armed, refusal
  end
  local wake, err = q.timer:timeout(delay, pump, q)
  if wake then q.wake = wake end
  return wake and true, err
end

-- Arms the wake `delay` seconds from now, unless it is armed earlier already.
function arm(q, delay)
  local at = q.timer:now() + delay
  if at >= q.wake_at then return end
  q.wake_at = at
  local ok, armed, refusal = pcall(rearm, q, delay)
  if not ok then
    q.wake, q.stopped = nil, true         -- the timer stopped: so does the queue
    if q.listener then q.listener:close() end
  elseif not armed then
    q.wake_at = huge
    report(q, "hwt.jobs: cannot arm the wake-up: " .. tostring(refusal))
  end
end

-- A handler fails when it raises or returns nil/false and an error.
local function call_handler(handler, payload, job)
  local ok, result, err = pcall(handler, payload, job)
  if not ok then return false, result end
  if not result and err ~= nil then return false, err end
  return true
end

local function outcome(q, job, kind, wait, err)
  local list = q.outcomes
  list[#list + 1] = { job.id, job._token, kind, micro(wait), err and tostring(err) or "" }
end

-- The last job of a batch asks Redis for the next batch at once; the others
-- leave it to the wake (one round trip for the outcomes of many jobs).
local function settle_soon(q)
  q.running = q.running - 1
  if not q.wake then return end
  if q.running == 0 then
    pump(nil, q)
  else
    arm(q, 0)
  end
end

-- A job that waited here until its lease ran out may be running elsewhere
-- already: it is given back, not started.
local function lease_expired(q, job)
  return q.timer:now() - job._claimed >= q.lease
end

-- A recurring job's next occurrence (after a run, or once its retries are
-- spent: the series goes on), the first strictly after the Redis clock's
-- now, which the claim's reply told (plus the time since: a little later
-- than Redis' now, never earlier); none left ends the series.
local function recur(q, job)
  local redis_now = job._redis_now + (q.timer:now() - job._claimed)
  local next_due = every.next_after(job._series.schedule, redis_now, job.due)
  if next_due then
    outcome(q, job, "next", next_due)
  else
    outcome(q, job, "done", 0)
  end
end

local function run_job(_, q, job)
  if lease_expired(q, job) then
    q.tally.expired = q.tally.expired + 1
    outcome(q, job, "release", 0)
    return settle_soon(q)
  end
  local handler = q.handlers[job.name]
  local ok, err
  if job.malformed then
    err = job.malformed
  elseif not handler then
    err = ("no handler for job '%s' on this worker"):format(job.name)
  else
    q.tally.ran = q.tally.ran + 1
    ok, err = call_handler(handler, job.payload, job)
  end
  if ok then
    if job._series then recur(q, job) else outcome(q, job, "done", 0) end
  elseif job._series and job.attempt > q.retry.retries then
    recur(q, job)                       -- this occurrence is given up, not dead-lettered
  elseif job.malformed or job.attempt > q.retry.retries then
    q.tally.dead = q.tally.dead + 1
    outcome(q, job, "dead", 0, err)
  else
    q.tally.retried = q.tally.retried + 1
    outcome(q, job, "retry", backoff.wait(q.retry, job.attempt), err)
  end
  settle_soon(q)
  if not ok then
    q.tally.failed = q.tally.failed + 1
    report(q, err, job)
  end
end

-- The series of a recurring job from the JSON of its claim ('' for a
-- one-shot job): { spec, tz, schedule }; false and why for a malformed one.
local series_by_json = setmetatable({}, { __mode = "v" })
local function series_of(codec, json)
  if json == nil or json == "" then return nil end
  if series_by_json[json] then return series_by_json[json] end
  local fields = codec.decode(json)
  if type(fields) ~= "table" then return false, "malformed series: " .. json end
  local schedule, why = every.schedule_of(fields.spec, fields.tz)
  if not schedule then return false, "malformed series: " .. why end
  local series = { spec = fields.spec, tz = fields.tz or "UTC", schedule = schedule }
  series_by_json[json] = series
  return series
end

-- `asked_at`: when the claim was sent (timer:now()), no later than Redis
-- made it, so the lease is never thought longer than it is; `redis_now`:
-- the Redis clock (s) when it made it.
local function job_from(q, row, asked_at, redis_now)
  local name, payload = decode(q.codec, row[2])
  local job = { id = row[1], attempt = tonumber(row[4]), due = tonumber(row[5]) / MICRO, queue = q,
                _token = row[3], _claimed = asked_at, _redis_now = redis_now }
  if name then
    job.name, job.payload = name, payload
  else
    job.name, job.malformed = "?", payload
  end
  local series, why = series_of(q.codec, row[6])
  if series then
    job.every, job.tz, job._series = series.spec, series.tz, series
  elseif series == false then
    job.malformed = why
  end
  return job
end

-- q's ready list is a queue: q.ready[q.ready_first .. q.ready_last].
local function push_ready(q, job)
  q.ready_last = q.ready_last + 1
  q.ready[q.ready_last] = job
end

-- The next job of q's ready list, or nil.
local function take_ready(q)
  local first = q.ready_first
  if first > q.ready_last then return nil end
  local job = q.ready[first]
  q.ready[first] = nil
  if first == q.ready_last then
    q.ready_first, q.ready_last = 1, 0      -- empty: it starts afresh
  else
    q.ready_first = first + 1
  end
  return job
end

-- Starts each claimed job: as an hwt task of its own, so that a host driver
-- runs it as it runs any task (at max_pending it runs here instead); or,
-- in q:run_for() (a plain Lua worker, which runs its tasks one after
-- another anyway), on the queue's ready list, which run_for runs at once:
-- a task would wait for the timer's next tick, so a worker with a backlog
-- would run at most `concurrency` jobs a tick.
local function start_jobs(q, rows, asked_at, redis_now)
  for _, row in ipairs(rows) do
    local job = job_from(q, row, asked_at, redis_now)
    q.running = q.running + 1
    if q.run_by_queue then
      push_ready(q, job)
    elseif not q.timer:timeout(0, run_job, q, job) then
      run_job(nil, q, job)
    end
  end
end

-- Runs the ready jobs of `queues` (the shards of one queue), in turn, until
-- none is left or the timer's clock reaches `until_time` (the timer's other
-- tasks then get their turn). Returns how many ran.
function M.run_ready(queues, until_time)
  local ran, timer = 0, queues[1].timer
  repeat
    local any = false
    for _, q in ipairs(queues) do
      local job = take_ready(q)
      if job then
        run_job(nil, q, job)
        ran, any = ran + 1, true
      end
    end
  until not any or timer:now() >= until_time
  return ran
end

function M.has_ready(queues)
  for _, q in ipairs(queues) do
    if q.ready_first <= q.ready_last then return true end
  end
  return false
end

-- When q:run_for() returns: its ready jobs become tasks of the timer, for
-- whoever drives it next.
function M.leave_ready(q)
  q.run_by_queue = false
  for job in take_ready, q do
    if not q.timer:timeout(0, run_job, q, job) then run_job(nil, q, job) end
  end
end

local function count_lost(q, settled)
  for _, code in ipairs(settled) do
    if code == -1 then q.tally.lost = q.tally.lost + 1 end
  end
end

-- Outcomes that did not reach Redis go with the next round (Redis settles
-- each once: a resent one is answered 0).
local function keep_outcomes(q, sending)
  for _, fields in ipairs(sending) do q.outcomes[#q.outcomes + 1] = fields end
end

-- After a failed round the worker tries again after 0.1 s, doubling up to
-- poll_interval.
local function back_off(q)
  q.failures = q.failures + 1
  arm(q, backoff.grow(FIRST_RECONNECT_WAIT, 2, q.failures, q.poll_interval))
end

-- A message of the queue's listener: a job falls due `seconds` from now,
-- before every job this worker knew of.
local function heard(q, seconds)
  if q.wake and not q.stopped then arm(q, seconds) end
end

-- Starts a listener (hwt.jobs_listen) where none is open and one can be:
-- the timer's host driver watches sockets or runs threads, or the worker
-- runs in q:run_for(). Called before a round asks Redis, so that a job
-- written after the round's answer is heard of. A failed start is tried
-- again after poll_interval; the first failure of a queue is reported
-- (the worker then goes on, asking every poll_interval).
local function ensure_listener(q)
  if q.stopped or q.listener and q.listener:is_open() then return end
  local now = q.timer:now()
  if q.listen_again_at and now < q.listen_again_at then return end
  q.listen_again_at = now + q.poll_interval
  local on_message = function(seconds) heard(q, seconds) end
  local hooks = drivers.hooks_of(q.timer)
  local listener, err
  if hooks and (hooks.watch or hooks.thread) then
    listener, err = listen.open_hosted(q, hooks, on_message)
  elseif q.run_by_queue and not q.select_failed then
    listener, err = listen.open_socket(q, on_message)
  else
    return
  end
  q.listener = listener
  if not listener and not q.listen_failed then
    q.listen_failed = true
    report(q, "hwt.jobs: cannot listen for jobs other processes schedule (" .. tostring(err)
      .. "): asking Redis every poll_interval instead")
  end
end

-- Seconds between the idle rounds: longer while a listener is open.
local function idle_interval(q)
  if q.listener and q.listener:is_open() then
    return math.max(q.poll_interval, listen.LISTENING_POLL_INTERVAL)
  end
  return q.poll_interval
end

-- One round trip: settle `sending` (outcomes), claim what is due and there
-- is room for, learn when to ask next.
local function pump_once(q, sending)
  ensure_listener(q)
  local room = q.stopped and 0 or q.concurrency - q.running
  local args, n = { room, micro(q.lease), #sending }, 3
  for _, fields in ipairs(sending) do
    for i = 1, OUTCOME_FIELDS do args[n + i] = fields[i] end
    n = n + OUTCOME_FIELDS
  end
  local asked_at = q.timer:now()
  local reply, err = eval(q, scripts.pump, q.keys.pump, unpack(args))
  if not reply then
    keep_outcomes(q, sending)
    q.tally.redis_errors = q.tally.redis_errors + 1
    back_off(q)
    if not q.outage then report(q, "hwt.jobs: " .. err .. " (trying again)") end
    q.outage = true
    return
  end
  q.failures, q.outage = 0, false
  count_lost(q, reply[1])
  start_jobs(q, reply[2], asked_at, tonumber(reply[4]) / MICRO)
  if q.stopped then
    if #q.outcomes > 0 then arm(q, 0) end
    return
  end
  local next_in, interval = tonumber(reply[3]), idle_interval(q)
  local wait = next_in < 0 and interval or math.min(next_in / MICRO, interval)
  if q.running >= q.concurrency then
    wait = interval             -- a job that finishes arms an earlier wake
  end
  arm(q, wait)
end

-- A round that raised (a reply of the wrong shape, a bug) is reported, each
-- time, and backed off like a Redis failure: the worker goes on.
local function round_raised(q, sending, err)
  keep_outcomes(q, sending)
  back_off(q)
  report(q, "hwt.jobs: a worker round failed: " .. tostring(err) .. " (trying again)")
end

-- The wake's task. A pump that yields (lua-resty-redis) may be overtaken by
-- the next wake: that one only asks the running pump to go round again.
function pump(_, q)
  q.wake_at = huge
  if q.pumping then
    q.pump_again = true
    return
  end
  q.pumping = true
  repeat
    q.pump_again = false
    local sending = q.outcomes
    q.outcomes = {}
    local ok, err = pcall(pump_once, q, sending)
    if not ok then round_raised(q, sending, err) end
  until not q.pump_again
  q.pumping = false
end

-- Starts the wake (at once); true, or nil and the timer's refusal.
function M.start(q)
  if not q.wake then
    local wake, err = q.timer:timeout(0, pump, q)
    if not wake then return nil, err end
    q.wake, q.wake_at = wake, 0
  end
  q.stopped = false
  arm(q, 0)
  return true
end

-- Stops claiming; the wake goes on while outcomes wait for Redis.
function M.stop(q)
  q.stopped = true
  if q.listener then q.listener:close() end
  if q.wake and #q.outcomes == 0 and q.running == 0 then
    q.wake:cancel()
    q.wake_at = huge
  end
end

-- A job scheduled `seconds` ahead by this process: the wake comes no later.
M.scheduled = heard

-- LuaSocket's select() takes no descriptor past FD_SETSIZE (1024): in a
-- process with that many files open, q:run_for() cannot wait for a
-- listener. Its queues then ask Redis every poll_interval, as a worker that
-- cannot listen does, and say so once.
local function cannot_select(q, err)
  if q.listener then q.listener:close() end
  q.listener, q.select_failed = nil, true
  if not q.listen_failed then
    q.listen_failed = true
    report(q, "hwt.jobs: cannot wait for the listener (socket.select: " .. tostring(err)
      .. "): asking Redis every poll_interval instead")
  end
end

-- Waits up to `seconds` for the listeners of `queues` (the shards of one
-- queue, sharing its timer; reading what they hear), or for the timer; for
-- q:run_for().
function M.wait(queues, seconds)
  local sockets, listener_of = {}, {}
  for _, q in ipairs(queues) do
    local listener = q.listener
    if listener and listener:is_open() then
      sockets[#sockets + 1] = listener.socket
      listener_of[listener.socket] = listener
    end
  end
  if #sockets == 0 then return queues[1].timer:wait(seconds) end
  local selected, readable = pcall(require("socket").select, sockets, nil, seconds)
  if not selected then
    for _, q in ipairs(queues) do cannot_select(q, readable) end
    return queues[1].timer:wait(seconds)
  end
  for _, socket in ipairs(readable or {}) do listener_of[socket]:read() end
end

return M
