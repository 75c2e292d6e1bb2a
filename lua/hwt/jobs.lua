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
local client = require("hwt.jobs_client")
local format = require("hwt.jobs_format")
local options = require("hwt.jobs_options")
local scripts = require("hwt.jobs_scripts")
local worker = require("hwt.jobs_worker")

local M = {}

local huge = math.huge
local eval, micro, encode, decode = client.eval, format.micro, format.encode, format.decode
local name_arg, seconds_arg, id_arg = options.name_arg, options.seconds_arg, options.id_arg

local Queue = {}
Queue.__index = Queue

function M.redis(opts)
  local checked, o = pcall(options.check_options, opts)
  if not checked then error(o, 2) end
  return setmetatable({
    timer = opts.timer, connect = opts.connect, release = opts.release,
    on_error = opts.on_error, codec = require("hwt.json"),
    lease = o.lease, poll_interval = o.poll_interval, concurrency = o.concurrency,
    retry = o.retry,
    handlers = {},
    running = 0,            -- jobs claimed by this worker and not yet settled
    outcomes = {},          -- settled here, not yet in Redis
    failures = 0,           -- rounds failed in a row
    outage = false,         -- a Redis failure was reported; no round succeeded since
    wake_at = huge,         -- when the wake is armed for (timer:now() scale)
    counts = { scheduled = 0, ran = 0, failed = 0, retried = 0, dead = 0, lost = 0, expired = 0, redis_errors = 0 },
    keys = scripts.keys(opts.key),
  }, Queue)
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

-- Returns the job's id (a string); or nil, a message and "refused" (nothing
-- was written) or "unknown" (it may have been: schedule again with the same
-- opts.id to be sure it exists once).
function Queue:schedule(name, delay, payload, opts)
  check_queue(self, "schedule")
  name_arg(name, "schedule")
  local seconds = seconds_arg(delay, "schedule", 2)
  local json, why = encode(self.codec, name, payload)
  if not json then
    error("bad argument #3 to 'schedule' (JSON-encodable payload expected: " .. why .. ")", 2)
  end
  local id, replace = options.schedule_options(opts)
  local result, err, kind = eval(self, scripts.schedule, self.keys.schedule, json, micro(seconds), id or "",
                                 replace and "1" or "0")
  if result == nil then return nil, err, kind end
  if result[2] == 1 then
    self.counts.scheduled = self.counts.scheduled + 1
    worker.scheduled(self, seconds)
  end
  return tostring(result[1])
end

-- true if the job will never run, on any worker; false if it is running,
-- already ran, was cancelled or dead-lettered; or nil, a message and the
-- kind, as for schedule().
function Queue:cancel(id)
  check_queue(self, "cancel")
  local removed, err, kind = eval(self, scripts.cancel, self.keys.cancel, id_arg(id, "cancel"))
  if removed == nil then return nil, err, kind end
  return removed == 1
end

-- The dead-lettered jobs, oldest first (at most `limit`, default 100): each
-- { id, name, payload, error, attempts }.
function Queue:dead(limit)
  check_queue(self, "dead")
  limit = limit == nil and 100 or tonumber(limit)
  if not limit or limit < 1 or limit % 1 ~= 0 then
    error("bad argument #1 to 'dead' (positive integer expected)", 2)
  end
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
  local moved, err, kind = eval(self, scripts.requeue, self.keys.requeue, id, micro(seconds))
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
  return worker.start(self)
end

-- Stops claiming. Running handlers finish and their outcomes reach Redis;
-- jobs not yet claimed stay in Redis for other workers.
function Queue:stop()
  check_queue(self, "stop")
  worker.stop(self)
end

-- What this worker did: scheduled, ran, failed, retried, dead, lost (claims
-- that expired before their outcome reached Redis), expired (claimed jobs
-- given back unstarted: their lease ran out while they waited here),
-- redis_errors; running (claimed, not settled) and unsettled (outcomes
-- waiting for Redis).
function Queue:stats()
  check_queue(self, "stats")
  local s = {}
  for key, value in pairs(self.counts) do s[key] = value end
  s.running, s.unsettled = self.running, #self.outcomes
  s.started = self.wake ~= nil and not self.stopped
  return s
end

return M
