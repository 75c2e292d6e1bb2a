---@meta hwt.jobs

-- LuaLS definitions for hwt.jobs: delayed jobs kept in Redis, run by any
-- number of worker processes through their hwt timers. See library/hwt.lua.

---Durable delayed jobs on Redis: they survive restarts, and every worker process on the same `key` shares one queue.
---@class hwt.jobs
local M = {}

---A job's handler, looked up by name on the worker that claims the job. It fails when it raises or returns `nil`/`false` plus an error; any other return succeeds.
---@alias hwt.jobs.Handler fun(payload: any, job: hwt.jobs.Job): any, any

---Options of `require("hwt.jobs").redis` (`timer`, `key` and `connect` or `shards` required; an unknown key raises an error naming it).
---@class hwt.jobs.Options
---The timer whose tasks claim and run the jobs (drive it as usual: `run_for`, a host driver).
---@field timer hwt.Timer
---Returns a connected Redis client (redis-lua, or lua-resty-redis in OpenResty), or `nil, err`; called on first use and after a failed call (whose client is closed, never used again), never at construction.
---@field connect? fun(): any, string?
---In place of `connect`: one connect function per Redis primary (the nodes of a Redis Cluster, in the order `redis-cli --cluster create` named them, or independent servers). A job lives on the shard its id names; `list`, `counts` and `dead` ask every shard; a worker serves every shard, claiming up to `concurrency` jobs from each. The number and order of the shards are part of the queue's data.
---@field shards? (fun(): any, string?)[]
---Hands back each call's client (lua-resty-redis: `function(red) red:set_keepalive(10000, 32) end`); required in OpenResty. Without it the queue keeps one idle client.
---@field release? fun(client: any)
---Names the queue: its Redis keys are `{key}:due`, `:jobs`, `:tries`, `:claims`, `:errors`, `:dead`, `:seq` (one hash slot). Non-empty.
---@field key string
---Seconds a claim lasts (default 30): a worker that dies holding a job loses it after `lease`; a handler that runs longer may run twice. > 0.
---@field lease? number
---Seconds between the requests of an idle worker (default 1): the bound on how late a job scheduled by another process starts. > 0.
---@field poll_interval? number
---Jobs claimed by this worker at once (default 32); integer >= 1. Over `shards`, from each shard.
---@field concurrency? integer
---Retries of a failed job, with `hwt.retry`'s backoff (default `{retries = 3, delay = 1, backoff = 2, max_delay = 60, jitter = 0}`); then the dead-letter set.
---@field retry? hwt.jobs.RetryOptions
---Called with each error: a handler's failure (with its job), the first Redis failure of an outage, any other error of a worker's round (job nil). Without it each error is raised by a task of its own, so it reaches the timer's `on_error`; so does an error `on_error` raises.
---@field on_error? fun(err: any, job: hwt.jobs.Job|nil)

---The `retry` option of `jobs.redis`: `hwt.retry`'s backoff fields (no callbacks, no `random`).
---@class hwt.jobs.RetryOptions
---Retries after the first attempt, at most (default 3); integer >= 0 or `math.huge`. Then the job is dead-lettered.
---@field retries? number
---Seconds before the first retry (default 1); >= 0.
---@field delay? number
---Multiplier of the wait per retry (default 2); >= 1.
---@field backoff? number
---Seconds, the cap on a wait, applied after jitter (default 60); >= 0.
---@field max_delay? number
---Fraction 0..1: each wait is multiplied by `1 ± jitter` (default 0).
---@field jitter? number

---What `jobs.redis` returns: a queue to schedule on and, once started, a worker.
---@class hwt.jobs.Queue
local Queue = {}

---The record a handler gets as its second argument (and `on_error` with a handler's failure).
---@class hwt.jobs.Job
---The job's id, as `schedule` returned it.
---@field id string
---The name it was scheduled with (`"?"` for a malformed job).
---@field name string
---The payload as scheduled (through JSON); nil for a malformed job.
---@field payload any
---This run's number: 1 for the first, retries count on (a requeue starts again at 1).
---@field attempt integer
---When it fell due for this run, in epoch seconds by the Redis server's clock.
---@field due number
---The queue that claimed it.
---@field queue hwt.jobs.Queue
---Only in the record `on_error` gets for a malformed job: why it could not be read.
---@field malformed? string
---A recurring job's schedule (`q:every`'s `spec`: a cron expression or seconds).
---@field every? string|number
---A recurring job's time zone (`q:every`'s `opts.tz`, default `"UTC"`).
---@field tz? string

---What `q:stats()` returns: this worker's counts since `jobs.redis`.
---@class hwt.jobs.Stats
---Jobs `schedule` wrote.
---@field scheduled integer
---Handlers called.
---@field ran integer
---Failed runs: a handler failed, no handler here, a malformed job.
---@field failed integer
---Failed runs set to retry.
---@field retried integer
---Jobs this worker dead-lettered.
---@field dead integer
---Outcomes Redis refused because the lease had run out and another claim held the job.
---@field lost integer
---Claimed jobs given back unstarted: their lease ran out while they waited here.
---@field expired integer
---Redis calls of the worker that failed (each retried).
---@field redis_errors integer
---Jobs claimed here and not yet settled.
---@field running integer
---Outcomes waiting to reach Redis.
---@field unsettled integer
---Whether the queue is started (and not stopped).
---@field started boolean

---An entry of `q:dead()`.
---@class hwt.jobs.DeadJob
---The job's id.
---@field id string
---Its name; nil for a malformed job.
---@field name? string
---Its payload; nil for a malformed job.
---@field payload any
---The last error, as a string.
---@field error string
---How many times it was claimed.
---@field attempts integer

---What `q:get(id)` and `q:list()` give for a job.
---@class hwt.jobs.JobInfo
---The job's id.
---@field id string
---Its name; nil for a malformed job.
---@field name? string
---Its payload (through JSON); nil for a malformed job.
---@field payload any
---`"delayed"` (waiting for its due time, or due and not yet claimed), `"running"` (claimed by a worker) or `"dead"` (dead-lettered).
---@field state "delayed"|"running"|"dead"
---When it is (delayed) or was (running) due, in epoch seconds by the Redis server's clock; nil for a dead job.
---@field due? number
---How many times it was claimed.
---@field attempts integer
---Its last error, if a run failed.
---@field error? string
---When it was dead-lettered (epoch seconds, Redis clock); only for a dead job.
---@field dead_at? number
---A recurring job's schedule: a cron expression or seconds.
---@field every? string|number
---A recurring job's time zone.
---@field tz? string

---What `q:counts()` returns.
---@class hwt.jobs.Counts
---Jobs waiting for their due time or for a worker.
---@field delayed integer
---Jobs claimed by a worker.
---@field running integer
---Dead-lettered jobs.
---@field dead integer
---Recurring series (`q:every`).
---@field recurring integer

---A job of `q:schedule_many`'s list: `delay` or `at`, not both.
---@class hwt.jobs.BatchJob
---@field name string non-empty
---Seconds from now (by Redis's clock), finite, >= 0.
---@field delay? number
---Epoch seconds on the Redis server's clock, finite, >= 0 (a past time is due at once).
---@field at? number
---@field payload any
---As `schedule`'s `opts.id`.
---@field id? string
---As `schedule`'s `opts.replace` (needs `id`).
---@field replace? boolean

---Makes a queue on Redis; nothing is sent until first use. Raises for a bad option, naming it.
---@param opts hwt.jobs.Options
---@return hwt.jobs.Queue queue
---@nodiscard
function M.redis(opts) end

---Sets (or, with nil, removes) the handler of jobs named `name` on this worker; returns the queue.
---@param name string non-empty
---@param handler? hwt.jobs.Handler a function or a callable
---@return hwt.jobs.Queue self
function Queue:handle(name, handler) end

---Writes a job due `delay` seconds from now (by Redis's clock), or at `opts.at` (pass `delay = nil`); its id, or `nil, err, kind`: kind `"refused"` (nothing was written) or `"unknown"` (it may have been: schedule again with the same `opts.id`). `opts.id` names the job: the same id again while the job exists changes nothing and returns the id; with `opts.replace = true` it replaces the job's due time and payload. Raises for a bad name, delay or opts, or a payload that JSON cannot give back equal (the message names where the value is).
---@param name string non-empty
---@param delay number|nil seconds, finite, >= 0; nil with `opts.at`
---@param payload? any JSON: tables, strings, finite numbers (each comes back equal), booleans
---@param opts? { id?: string, replace?: boolean, at?: number } `id`: not digits alone (those are the queue's ids); `replace` needs `id`; `at`: epoch seconds on the Redis server's clock
---@return string|nil id
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:schedule(name, delay, payload, opts) end

---Writes every job of `list` in one round trip, each as `schedule` would, in the list's order: all of them or none. Their ids in that order, or `nil, err, kind` as for `schedule` (after `"unknown"`, send the same list again: jobs with an `id` are written once). Raises for a bad job, naming it (`list[3].delay`), before anything is sent.
---@param list hwt.jobs.BatchJob[]
---@return string[]|nil ids
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:schedule_many(list) end

---A recurring job: `spec` is a five-field cron expression (minute hour day-of-month month day-of-week), read in `opts.tz` (an IANA zone from the system's tz database, default `"UTC"`), or an interval in seconds (fixed rate, the first beat one interval from now). One occurrence waits at a time; each runs once across all workers (at least once under a lease); occurrences missed while no worker ran run once, not once each. A local time that does not exist (clocks go forward) runs at the first minute after the gap; one that happens twice (clocks go back) runs once, at the first. An occurrence that fails every retry is reported and given up; the series goes on. Returns its id (`q:cancel(id)` ends the series), or `nil, err, kind`. `opts.id`/`opts.replace` as `schedule`'s.
---@param name string non-empty
---@param spec string|number a cron expression, or seconds > 0
---@param payload? any
---@param opts? { id?: string, replace?: boolean, tz?: string }
---@return string|nil id
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:every(name, spec, payload, opts) end

---The job `id`, or nil when no job has it; `nil, err, kind` on a Redis failure.
---@param id string|integer
---@return hwt.jobs.JobInfo|nil job
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:get(id) end

---A page of the jobs in one state: `opts.state` (`"delayed"`, the default, `"running"` or `"dead"`), `opts.count` (default 100) of them after the first `opts.from` (default 0). Delayed jobs in due order, running ones by the due time of their claim, dead ones by when they died. `nil, err, kind` on a Redis failure.
---@param opts? { state?: "delayed"|"running"|"dead", from?: integer, count?: integer }
---@return hwt.jobs.JobInfo[]|nil jobs
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:list(opts) end

---How many jobs are delayed, running and dead; `nil, err, kind` on a Redis failure.
---@return hwt.jobs.Counts|nil counts
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:counts() end

---Moves a delayed job (not claimed, not dead) to `delay` seconds from now, or to `opts.at` (pass `delay = nil`): true if it was delayed and now has that due time, false otherwise (running, dead or gone); `nil, err, kind` on a Redis failure.
---@param id string|integer
---@param delay number|nil seconds, finite, >= 0; nil with `opts.at`
---@param opts? { at?: number } epoch seconds on the Redis server's clock
---@return boolean|nil moved
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:reschedule(id, delay, opts) end

---Makes a delayed job due now: `reschedule(id, 0)`.
---@param id string|integer
---@return boolean|nil moved
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:promote(id) end

---true if the job will never run, on any worker; false if it is running, ran, was cancelled or is dead; `nil, err, kind` on a Redis failure (kind as for `schedule`).
---@param id string|integer
---@return boolean|nil cancelled
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:cancel(id) end

---The dead-lettered jobs, oldest first, at most `limit` (default 100); `nil, err, kind` on a Redis failure.
---@param limit? integer >= 1
---@return hwt.jobs.DeadJob[]|nil jobs
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:dead(limit) end

---Puts a dead-lettered job back, due in `delay` seconds (default 0), its attempts counted from zero; true if it was dead; `nil, err, kind` on a Redis failure.
---@param id string|integer
---@param delay? number seconds, finite, >= 0
---@return boolean|nil requeued
---@return string|nil err
---@return "refused"|"unknown"|nil kind
function Queue:requeue(id, delay) end

---Starts working: claims due jobs and runs each handler as a task of the timer. true, or `nil, err` when the timer refuses the wake-up; raises without handlers or on a stopped timer.
---@return true|nil ok
---@return string|nil err
function Queue:start() end

---Runs the queue's timer for `seconds`, as `timer:run_for` does, in a plain Lua worker process (no host driver): while nothing is due it waits for the timer and for the queue's wake messages together, so that a job another process schedules, due before every job this worker knew of, starts at its due time rather than at the next round. The jobs it claims run at once in its loop (batch after batch while there is a backlog, up to a tick at a time), not as tasks waiting for the timer's next tick. Returns how many of the timer's tasks and of the queue's jobs ran. Raises for a timer a host driver drives or one on the manual clock.
---@param seconds number finite, >= 0
---@return integer ran
function Queue:run_for(seconds) end

---Stops claiming: running handlers finish and their outcomes reach Redis; unclaimed jobs stay for other workers. `start()` resumes.
function Queue:stop() end

---This worker's counters.
---@return hwt.jobs.Stats stats
---@nodiscard
function Queue:stats() end

return M
