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
-- Keys (one hash slot, "{key}", so that Redis Cluster can run the scripts):
--   {key}:due     sorted set, id -> due time; a claimed job's score is the
--                 end of its lease, so an expired claim is due again
--   {key}:jobs    hash, id -> JSON {"name":..., "payload":...}
--   {key}:tries   hash, id -> how many times it was claimed
--   {key}:claims  hash, id -> the token of the claim that holds it
--   {key}:errors  hash, id -> its last error
--   {key}:dead    sorted set, id -> when it was dead-lettered
--   {key}:seq     counter for ids and claim tokens
local checks = require("hwt.checks")
local backoff = require("hwt.backoff")

local M = {}

local huge = math.huge
local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack

local MICRO = 1e6

-- Seconds as a whole number of microseconds, written out in full (tostring
-- would give "1e+14" on Lua 5.1).
local function micro(seconds) return ("%.0f"):format(math.ceil(seconds * MICRO)) end
local DEFAULTS = { lease = 30, poll_interval = 1, concurrency = 32 }
-- After a failed round (Redis unreachable, an error) the worker tries again
-- after this, doubling up to poll_interval.
local FIRST_RECONNECT_WAIT = 0.1
local OUTCOME_FIELDS = 5        -- id, token, kind, wait, error

-- The scripts run in Redis (Lua 5.1 there). Each begins with PRELUDE:
-- the time (string.format("%.0f") keeps all the digits of a microsecond
-- time, which tostring() would round), and a check of every key's type.
-- Redis keeps what a script wrote before a command of it failed, so each
-- script checks first and writes after: an error reply means that nothing
-- was written. Each answers { tag, result }: the tag is the request's last
-- argument, so that a reply is known to answer this request.
local PRELUDE = [[
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]
local function score(us) return string.format('%.0f', us) end
local function answer(result) return { ARGV[#ARGV], result } end
local TYPES = { due = 'zset', dead = 'zset', jobs = 'hash', tries = 'hash', claims = 'hash',
                errors = 'hash', seq = 'string' }
for _, key in ipairs(KEYS) do
  local held, wanted = redis.call('TYPE', key).ok, TYPES[string.match(key, '[^:]+$')]
  if held ~= 'none' and held ~= wanted then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. held .. ', not a ' .. wanted)
  end
end
]]

-- ARGV: the job's JSON, its delay (µs), its id ('': a new one), '1' to
-- replace a job of that id. Answers { id, 1 } when it wrote the job,
-- { id, 0 } when a job of that id exists and was left as it is. A replaced
-- job starts afresh: delayed, unclaimed (a run in progress no longer settles
-- it), no attempts, not dead.
local SCHEDULE = PRELUDE .. [[
local due, jobs, seq, claims, tries, errors, dead = unpack(KEYS)
local id = ARGV[3]
if id == '' then
  id = tostring(redis.call('INCR', seq))
elseif redis.call('HEXISTS', jobs, id) == 1 then
  if ARGV[4] ~= '1' then return answer({ id, 0 }) end
  redis.call('HDEL', claims, id)
  redis.call('HDEL', tries, id)
  redis.call('HDEL', errors, id)
  redis.call('ZREM', dead, id)
end
redis.call('HSET', jobs, id, ARGV[1])
redis.call('ZADD', due, score(now + tonumber(ARGV[2])), id)
return answer({ id, 1 })
]]

-- A claimed job is running somewhere: cancel cannot promise it never runs.
local CANCEL = PRELUDE .. [[
local id = ARGV[1]
if redis.call('HEXISTS', KEYS[3], id) == 1 then return answer(0) end
if redis.call('ZREM', KEYS[1], id) == 0 then return answer(0) end
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[5], id)
return answer(1)
]]

-- Settles the outcomes the worker sends (done; retry after a wait; dead;
-- release: due again, unstarted) and answers for each 1: settled; 0: already
-- settled, a resent outcome; -1: the lease was lost, another claim holds it. Then
-- claims up to ARGV[1] due jobs for ARGV[2] µs, and tells how long until the
-- next job is due (-1: none).
local PUMP = PRELUDE .. [[
local due, jobs, tries, claims, errors, dead, seq = unpack(KEYS)
local settled = {}
for i = 0, tonumber(ARGV[3]) - 1 do
  local base = 4 + i * 5
  local id, token, kind, wait, err = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local holder = redis.call('HGET', claims, id)
  if holder ~= token then
    settled[#settled + 1] = holder and -1 or 0
  else
    redis.call('HDEL', claims, id)
    if kind == 'done' then
      redis.call('ZREM', due, id)
      redis.call('HDEL', jobs, id)
      redis.call('HDEL', tries, id)
      redis.call('HDEL', errors, id)
    elseif kind == 'retry' then
      redis.call('ZADD', due, score(now + tonumber(wait)), id)
      redis.call('HSET', errors, id, err)
    elseif kind == 'release' then
      redis.call('ZADD', due, score(now), id)
      redis.call('HINCRBY', tries, id, -1)
    else
      redis.call('ZREM', due, id)
      redis.call('ZADD', dead, score(now), id)
      redis.call('HSET', errors, id, err)
    end
    settled[#settled + 1] = 1
  end
end
local claimed = {}
local limit = tonumber(ARGV[1])
if limit > 0 then
  local found = redis.call('ZRANGEBYSCORE', due, '-inf', score(now), 'WITHSCORES', 'LIMIT', 0, limit)
  local lease_end = score(now + tonumber(ARGV[2]))
  for i = 1, #found, 2 do
    local id = found[i]
    local token = tostring(redis.call('INCR', seq))
    redis.call('HSET', claims, id, token)
    redis.call('ZADD', due, lease_end, id)
    claimed[#claimed + 1] = { id, redis.call('HGET', jobs, id) or '', token,
                              redis.call('HINCRBY', tries, id, 1), tonumber(found[i + 1]) }
  end
end
local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local next_in = -1
if first[2] then next_in = math.max(0, tonumber(first[2]) - now) end
return answer({ settled, claimed, next_in })
]]

local DEAD_LIST = PRELUDE .. [[
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #ids, 2 do
  local id = ids[i]
  out[#out + 1] = { id, redis.call('HGET', KEYS[2], id) or '', redis.call('HGET', KEYS[4], id) or '',
                    redis.call('HGET', KEYS[3], id) or 0 }
end
return answer(out)
]]

local REQUEUE = PRELUDE .. [[
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return answer(0) end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[1], score(now + tonumber(ARGV[2])), ARGV[1])
return answer(1)
]]

-- ---- reports -------------------------------------------------------------

local function raise(_, err) error(err, 0) end

-- Hands `err` to the timer's on_error, as the error of a task of its own.
local function report_to_timer(q, err)
  local ok, task = pcall(q.timer.timeout, q.timer, 0, raise, err)
  if not (ok and task) then io.stderr:write("hwt.jobs: ", tostring(err), "\n") end
end

-- Reports `err` to on_error, or else to the timer's on_error. It never
-- raises, so that a report never cuts short the bookkeeping around it.
local function report(q, err, job)
  if not q.on_error then return report_to_timer(q, err) end
  local ok, raised = pcall(q.on_error, err, job)
  if not ok then report_to_timer(q, raised) end
end

-- ---- the adapter: the only code that knows a Redis client --------------
-- A client is whatever `connect()` returns: redis-lua (raises on errors) or
-- lua-resty-redis (returns nil, err). A client whose call failed or timed
-- out is closed, never reused: a reply it still owes would be read as the
-- answer to the next request. Without `release` the queue keeps one idle
-- client for the next call; with it, each call's client is handed back (in
-- OpenResty: `release = function(red) red:set_keepalive(10000, 32) end`,
-- because a cosocket cannot outlive the light thread that made it).
--
-- A failed request is REFUSED when Redis did not run it (no connection,
-- SCRIPT LOAD failed, an error reply), UNKNOWN when it may have run (the
-- connection failed or timed out after sending it; a reply that is not its).
local REFUSED, UNKNOWN = "refused", "unknown"

local function close_quietly(client)
  local close = client.close or client.quit
  if close then pcall(close, client) end
end

local function acquire(q)
  local client = q.idle_client
  if client then
    q.idle_client = nil
    return client
  end
  local ok, made, err = pcall(q.connect)
  if not ok then return nil, made end
  if not made then return nil, err or "connect() returned nothing" end
  return made
end

-- A release() that raises costs its client, not the reply it brought.
local function hand_back(q, client)
  if q.release then
    local ok, err = pcall(q.release, client)
    if not ok then
      close_quietly(client)
      report(q, "hwt.jobs: release() raised: " .. tostring(err))
    end
  elseif q.idle_client == nil then
    q.idle_client = client
  else
    close_quietly(client)
  end
end

-- client:command(...) for either client: the reply; or nil, the error, and
-- true when it is an error reply (Redis answered, with the whole reply:
-- lua-resty-redis returns false, err for it; redis-lua raises "redis
-- error: ..." for it and other errors when the connection fails).
local function call(client, command, ...)
  local ok, reply, err = pcall(client[command], client, ...)
  if not ok then
    local message = tostring(reply)
    return nil, message, message:find("redis error: ", 1, true) ~= nil
  end
  if reply == nil or reply == false then return nil, tostring(err), reply == false end
  return reply
end

local script_shas = {}          -- script -> its SHA1, from SCRIPT LOAD
local SHA1 = "^" .. ("%x"):rep(40) .. "$"

-- The script's SHA1, loaded through `client` the first time; or nil and why.
local function script_sha(client, script)
  if script_shas[script] then return script_shas[script] end
  local sha, err = call(client, "script", "load", script)
  if sha == nil then return nil, err end
  if type(sha) ~= "string" or not sha:match(SHA1) then
    return nil, "a reply that is not SCRIPT LOAD's: " .. tostring(sha)
  end
  script_shas[script] = sha
  return sha
end

local tags = 0                  -- requests tagged by this process

local function new_tag()
  tags = tags + 1
  return ("%.0f"):format(tags)
end

-- The result in a script's reply { tag, result }; or nil and why not.
local function untag(reply, tag)
  if type(reply) == "table" and reply[1] == tag and reply[2] ~= nil then return reply[2] end
  local shown = type(reply) == "table" and "a table, tag " .. tostring(reply[1]) or tostring(reply)
  return nil, "a reply that is not this request's (" .. shown .. ", not tag " .. tag .. ")"
end

-- EVALSHA, so that the script's text crosses the network once per process;
-- EVAL where Redis does not have it (restarted, flushed), which loads it: a
-- NOSCRIPT error reply is the whole reply, so the client is in step. The
-- result; or nil, a message and REFUSED or UNKNOWN.
local function run_script(client, script, args)
  local sha, load_err = script_sha(client, script)
  if not sha then return nil, "SCRIPT LOAD: " .. load_err, REFUSED end
  local reply, err, error_reply = call(client, "evalsha", sha, unpack(args))
  if error_reply and err:find("NOSCRIPT", 1, true) then
    reply, err, error_reply = call(client, "eval", script, unpack(args))
  end
  if reply == nil then return nil, err, error_reply and REFUSED or UNKNOWN end
  local result, mismatch = untag(reply, args[#args])
  if result == nil then return nil, mismatch, UNKNOWN end
  return result
end

-- Runs one script on a client of the queue; returns its result, or nil, a
-- message and REFUSED or UNKNOWN.
local function eval(q, script, keys, ...)
  local client, err = acquire(q)
  if not client then return nil, "redis: cannot connect: " .. tostring(err), REFUSED end
  local args = { #keys, unpack(keys) }
  for i = 1, select("#", ...) do args[#args + 1] = select(i, ...) end
  args[#args + 1] = new_tag()
  local result, run_err, kind = run_script(client, script, args)
  if result == nil then
    close_quietly(client)
    return nil, "redis: " .. run_err, kind
  end
  hand_back(q, client)
  return result
end

-- ---- jobs as JSON ------------------------------------------------------
-- { "name": ..., "payload": ... } through hwt.json: a payload comes back
-- equal, every number included, or schedule() refuses it.

local function encode(codec, name, payload)
  local fields = '{"name":' .. codec.encode(name, "name")
  if payload == nil then return fields .. "}" end
  local json, why = codec.encode(payload, "payload", 1)
  if not json then return nil, why end
  return fields .. ',"payload":' .. json .. "}"
end

local function decode(codec, json)
  local job, why = codec.decode(json)
  if type(job) ~= "table" or type(job.name) ~= "string" then
    return nil, "malformed job: " .. (job == nil and why or "no name")
  end
  return job.name, job.payload
end

-- ---- options ------------------------------------------------------------

-- Raised without a position: jobs.redis re-raises it at its caller's line.
local function bad_option(key, message)
  error(("bad option '%s' to 'redis' (%s)"):format(key, message), 0)
end

local function positive_number(opts, key)
  local value = opts[key]
  if value == nil then return DEFAULTS[key] end
  local number = tonumber(value)
  if type(value) == "boolean" or not number or number ~= number or number <= 0 or number == huge then
    bad_option(key, "positive number expected, got " .. tostring(value))
  end
  return number
end

local KNOWN_OPTIONS = {
  timer = true, connect = true, release = true, key = true, lease = true,
  poll_interval = true, concurrency = true, retry = true, on_error = true,
}

local function check_options(opts)
  if type(opts) ~= "table" then
    error("bad argument #1 to 'redis' (table expected, got " .. type(opts) .. ")", 0)
  end
  for key in pairs(opts) do
    if not KNOWN_OPTIONS[key] then bad_option(tostring(key), "unknown option") end
  end
  if checks.type_name(opts.timer) ~= "hwt.Timer" then
    bad_option("timer", "hwt.Timer expected, got " .. checks.type_name(opts.timer))
  end
  if type(opts.connect) ~= "function" then
    bad_option("connect", "function expected, got " .. type(opts.connect))
  end
  if opts.release == nil and type(ngx) == "table" and ngx.get_phase then
    bad_option("release", "function expected in OpenResty, where a cosocket cannot be shared "
      .. "between requests: e.g. function(red) red:set_keepalive(10000, 32) end")
  end
  for _, key in ipairs({ "release", "on_error" }) do
    if opts[key] ~= nil and type(opts[key]) ~= "function" then
      bad_option(key, "function expected, got " .. type(opts[key]))
    end
  end
  if type(opts.key) ~= "string" or opts.key == "" then
    bad_option("key", "non-empty string expected, got " .. type(opts.key))
  end
  local concurrency = positive_number(opts, "concurrency")
  if concurrency % 1 ~= 0 then bad_option("concurrency", "integer expected") end
  if opts.retry ~= nil and type(opts.retry) ~= "table" then
    bad_option("retry", "table expected, got " .. type(opts.retry))
  end
  local retry = backoff.options(opts.retry or {}, function(field, message)
    bad_option("retry." .. field, message)
  end)
  for field in pairs(opts.retry or {}) do
    if retry[field] == nil or field == "random" then
      bad_option("retry." .. tostring(field), "unknown field")
    end
  end
  return {
    lease = positive_number(opts, "lease"),
    poll_interval = positive_number(opts, "poll_interval"),
    concurrency = concurrency,
    retry = retry,
  }
end

-- ---- the queue ----------------------------------------------------------

local Queue = {}
Queue.__index = Queue

local function keys_of(key)
  local slot = "{" .. key .. "}:"
  local k = {}
  for _, name in ipairs({ "due", "jobs", "tries", "claims", "errors", "dead", "seq" }) do
    k[name] = slot .. name
  end
  return k
end

function M.redis(opts)
  local checked, o = pcall(check_options, opts)
  if not checked then error(o, 2) end
  local k = keys_of(opts.key)
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
    keys = {
      schedule = { k.due, k.jobs, k.seq, k.claims, k.tries, k.errors, k.dead },
      cancel = { k.due, k.jobs, k.claims, k.tries, k.errors },
      pump = { k.due, k.jobs, k.tries, k.claims, k.errors, k.dead, k.seq },
      dead = { k.dead, k.jobs, k.tries, k.errors },
      requeue = { k.due, k.dead, k.tries, k.errors },
    },
  }, Queue)
end

local function check_queue(q, fname)
  if getmetatable(q) ~= Queue then
    error(("calling '%s' on bad self (hwt.jobs queue expected, got %s)"):format(fname, type(q)), 3)
  end
end

-- The checks of the queue's arguments, each called by the method itself,
-- so that the error points at the method's caller.
local function name_arg(name, fname)
  if type(name) ~= "string" or name == "" then
    checks.arg_error(fname, 1, "non-empty string expected, got "
      .. (name == "" and "an empty one" or checks.type_name(name)))
  end
end

local function seconds_arg(value, fname, n)
  local seconds = tonumber(value)
  if type(value) == "boolean" or not seconds or seconds ~= seconds or seconds < 0 or seconds == huge then
    checks.arg_error(fname, n, "finite number of seconds >= 0 expected, got " .. tostring(value))
  end
  return seconds
end

local SCHEDULE_OPTIONS = { id = true, replace = true }

-- What is wrong with schedule()'s opts, or nil. opts.id: a string with a
-- non-digit (ids of digits alone are the queue's own); opts.replace: a
-- boolean, true only with an id.
local function schedule_options_problem(opts)
  if type(opts) ~= "table" then return "table expected, got " .. checks.type_name(opts) end
  for key in pairs(opts) do
    if not SCHEDULE_OPTIONS[key] then return "unknown option '" .. tostring(key) .. "'" end
  end
  local id, replace = opts.id, opts.replace
  if id ~= nil and (type(id) ~= "string" or not id:find("%D")) then
    return "opts.id: a string with a non-digit expected (ids of digits alone are the queue's own), got "
      .. (type(id) == "string" and ("%q"):format(id) or checks.type_name(id))
  end
  if replace ~= nil and type(replace) ~= "boolean" then
    return "opts.replace: boolean expected, got " .. checks.type_name(replace)
  end
  if replace and id == nil then return "opts.replace needs opts.id" end
end

-- schedule()'s opts.id and opts.replace, checked.
local function schedule_options(opts)
  if opts == nil then return nil, false end
  local problem = schedule_options_problem(opts)
  if problem then checks.arg_error("schedule", 4, problem) end
  return opts.id, opts.replace == true
end

local function id_arg(id, fname)
  if type(id) ~= "string" and type(id) ~= "number" then
    checks.arg_error(fname, 1, "job id expected, got " .. checks.type_name(id))
  end
  return tostring(id)
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

local arm, pump

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
  local id, replace = schedule_options(opts)
  local result, err, kind = eval(self, SCHEDULE, self.keys.schedule, json, micro(seconds), id or "",
                                 replace and "1" or "0")
  if result == nil then return nil, err, kind end
  if result[2] == 1 then
    self.counts.scheduled = self.counts.scheduled + 1
    if self.wake and not self.stopped then arm(self, seconds) end
  end
  return tostring(result[1])
end

-- true if the job will never run, on any worker; false if it is running,
-- already ran, was cancelled or dead-lettered; or nil, a message and the
-- kind, as for schedule().
function Queue:cancel(id)
  check_queue(self, "cancel")
  local removed, err, kind = eval(self, CANCEL, self.keys.cancel, id_arg(id, "cancel"))
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
  local rows, err, kind = eval(self, DEAD_LIST, self.keys.dead, limit)
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
  local moved, err, kind = eval(self, REQUEUE, self.keys.requeue, id, micro(seconds))
  if moved == nil then return nil, err, kind end
  return moved == 1
end

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
  elseif not armed then
    q.wake_at = huge
    report(q, "hwt.jobs: cannot arm the wake-up: " .. tostring(refusal))
  end
end

-- A handler fails when it raises or returns nil/false and an error.
local function call_handler(handler, payload, job)
  local results = pack(pcall(handler, payload, job))
  if not results[1] then return false, results[2] end
  if not results[2] and results[3] ~= nil then return false, results[3] end
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

local function run_job(_, q, job)
  if lease_expired(q, job) then
    q.counts.expired = q.counts.expired + 1
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
    q.counts.ran = q.counts.ran + 1
    ok, err = call_handler(handler, job.payload, job)
  end
  if ok then
    outcome(q, job, "done", 0)
  elseif job.malformed or job.attempt > q.retry.retries then
    q.counts.dead = q.counts.dead + 1
    outcome(q, job, "dead", 0, err)
  else
    q.counts.retried = q.counts.retried + 1
    outcome(q, job, "retry", backoff.wait(q.retry, job.attempt), err)
  end
  settle_soon(q)
  if not ok then
    q.counts.failed = q.counts.failed + 1
    report(q, err, job)
  end
end

-- `asked_at`: when the claim was sent (timer:now()), no later than Redis
-- made it, so the lease is never thought longer than it is.
local function job_from(q, row, asked_at)
  local name, payload = decode(q.codec, row[2])
  local job = { id = row[1], attempt = tonumber(row[4]), due = tonumber(row[5]) / MICRO, queue = q,
                _token = row[3], _claimed = asked_at }
  if name then
    job.name, job.payload = name, payload
  else
    job.name, job.malformed = "?", payload
  end
  return job
end

-- Starts each claimed job as an hwt task of its own (so a host driver runs
-- it as it runs any task); at max_pending it runs here instead.
local function start_jobs(q, rows, asked_at)
  for _, row in ipairs(rows) do
    local job = job_from(q, row, asked_at)
    q.running = q.running + 1
    if not q.timer:timeout(0, run_job, q, job) then run_job(nil, q, job) end
  end
end

local function count_lost(q, settled)
  for _, code in ipairs(settled) do
    if code == -1 then q.counts.lost = q.counts.lost + 1 end
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

-- One round trip: settle `sending` (outcomes), claim what is due and there
-- is room for, learn when to ask next.
local function pump_once(q, sending)
  local room = q.stopped and 0 or q.concurrency - q.running
  local args = { room, micro(q.lease), #sending }
  for _, fields in ipairs(sending) do
    for i = 1, OUTCOME_FIELDS do args[#args + 1] = fields[i] end
  end
  local asked_at = q.timer:now()
  local reply, err = eval(q, PUMP, q.keys.pump, unpack(args))
  if not reply then
    keep_outcomes(q, sending)
    q.counts.redis_errors = q.counts.redis_errors + 1
    back_off(q)
    if not q.outage then report(q, "hwt.jobs: " .. err .. " (trying again)") end
    q.outage = true
    return
  end
  q.failures, q.outage = 0, false
  count_lost(q, reply[1])
  start_jobs(q, reply[2], asked_at)
  if q.stopped then
    if #q.outcomes > 0 then arm(q, 0) end
    return
  end
  local next_in = tonumber(reply[3])
  local wait = next_in < 0 and q.poll_interval or math.min(next_in / MICRO, q.poll_interval)
  if q.running >= q.concurrency then
    wait = q.poll_interval      -- a job that finishes arms an earlier wake
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

-- Starts working: claims due jobs and runs their handlers through the timer.
-- Returns true, or nil and a message when the timer refuses the wake-up.
function Queue:start()
  check_queue(self, "start")
  if next(self.handlers) == nil then
    error("hwt.jobs: no handlers: call q:handle(name, fn) before q:start()", 2)
  end
  if self.timer:is_stopped() then error("hwt.jobs: timer is stopped", 2) end
  if not self.wake then
    local wake, err = self.timer:timeout(0, pump, self)
    if not wake then return nil, err end
    self.wake, self.wake_at = wake, 0
  end
  self.stopped = false
  arm(self, 0)
  return true
end

-- Stops claiming. Running handlers finish and their outcomes reach Redis;
-- jobs not yet claimed stay in Redis for other workers.
function Queue:stop()
  check_queue(self, "stop")
  self.stopped = true
  if self.wake and #self.outcomes == 0 and self.running == 0 then
    self.wake:cancel()
    self.wake_at = huge
  end
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
