-- hwt.jobs_scripts: the Redis side of hwt.jobs. Every change a queue makes
-- in Redis is one of these scripts, so it happens whole or not at all. Times
-- in Redis are the Redis server's clock (TIME), in microseconds, so the
-- workers' clocks never have to agree.
--
-- Keys (one hash slot, "{key}", so that Redis Cluster can run the scripts):
--   {key}:due     sorted set, id -> due time; a claimed job's score is the
--                 end of its lease, so an expired claim is due again
--   {key}:jobs    hash, id -> JSON {"name":..., "payload":...}
--   {key}:tries   hash, id -> how many times it was claimed
--   {key}:claims  hash, id -> the claim that holds it: its token, a space,
--                 and when the job was due (µs)
--   {key}:errors  hash, id -> its last error
--   {key}:dead    sorted set, id -> when it was dead-lettered
--   {key}:seq     counter for ids and claim tokens
--   {key}:recurring  hash, id -> the JSON {"spec":..., "tz":...} of a recurring
--                 series (q:every), whose one waiting occurrence is the job id
-- and the Pub/Sub channel {key}:wake (see WAKE).
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
                errors = 'hash', seq = 'string', recurring = 'hash' }
for _, key in ipairs(KEYS) do
  local held, wanted = redis.call('TYPE', key).ok, TYPES[string.match(key, '[^:]+$')]
  if held ~= 'none' and held ~= wanted then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. held .. ', not a ' .. wanted)
  end
end
]]

-- Wakes the idle workers (hwt.jobs_listen) when a job written now falls
-- due before every job in the due set: what a worker knows of is that
-- set's earliest, as of its last round. The message is how long until the
-- job is due, in µs, on the channel "{key}:wake" (KEYS[1] is "{key}:due").
-- Each script that writes a due time calls earliest_due() first.
local WAKE = [[
local function earliest_due()
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2]) or nil
end
local function wake_for(due_at, earliest_before)
  if earliest_before == nil or due_at < earliest_before then
    redis.call('PUBLISH', (string.gsub(KEYS[1], ':due$', ':wake')), score(math.max(0, due_at - now)))
  end
end
]]

-- Writes one job (SCHEDULE, SCHEDULE_MANY, EVERY): `id` ('' for a new one),
-- its JSON, when it is due (µs, the Redis clock), whether to replace a job
-- of that id. Returns the id and 1 when it wrote the job, 0 when a job of
-- that id exists and was left as it is. A replaced job starts afresh:
-- delayed, unclaimed (a run in progress no longer settles it), no attempts,
-- not dead. A new id is the next of {key}:seq times the id stride plus the
-- id offset (the two arguments before the tag): of digits alone, which a
-- caller's id never is, and telling a sharded queue its shard
-- (hwt.jobs_shards); stride 1, offset 0 for a queue of one shard.
local WRITE_JOB = [[
local due_key, jobs, seq, claims, tries, errors, dead, recurring = unpack(KEYS)
local id_stride, id_offset = tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1])
local function write_job(id, json, due_at, replace)
  if id == '' then
    id = score(redis.call('INCR', seq) * id_stride + id_offset)
  elseif redis.call('HEXISTS', jobs, id) == 1 then
    if not replace then return id, 0 end
    redis.call('HDEL', claims, id)
    redis.call('HDEL', tries, id)
    redis.call('HDEL', errors, id)
    redis.call('ZREM', dead, id)
    redis.call('HDEL', recurring, id)
  end
  redis.call('HSET', jobs, id, json)
  redis.call('ZADD', due_key, score(due_at), id)
  return id, 1
end
-- A delay (µs from now) or, when `at` is not '', the time itself.
local function due_time(delay, at)
  if at ~= '' then return tonumber(at) end
  return now + tonumber(delay)
end
]]

-- ARGV: the job's JSON, its delay (µs), its id ('': a new one), '1' to
-- replace a job of that id, its due time (µs; '': use the delay), the id
-- stride and offset (WRITE_JOB). Answers { id, written (1 or 0), µs until
-- it is due (0 when it is) }.
local SCHEDULE = PRELUDE .. WAKE .. WRITE_JOB .. [[
local due_at, earliest_before = due_time(ARGV[2], ARGV[5]), earliest_due()
local id, written = write_job(ARGV[3], ARGV[1], due_at, ARGV[4] == '1')
if written == 1 then wake_for(due_at, earliest_before) end
return answer({ id, written, score(math.max(0, due_at - now)) })
]]

-- ARGV[1]: a JSON array of jobs, each [id, JSON, delay, due time, replace]
-- as SCHEDULE's (strings); then the id stride and offset. All are checked before any is written; each is
-- written as SCHEDULE writes it, in the list's order (an id twice: the
-- second finds the first). Answers { ids, how many were written, µs until
-- the earliest written one is due (-1: none written) }.
local SCHEDULE_MANY = PRELUDE .. WAKE .. WRITE_JOB .. [[
local ok, list = pcall(cjson.decode, ARGV[1])
if not ok or type(list) ~= 'table' then return redis.error_reply('ERR hwt.jobs: a malformed batch') end
for i, job in ipairs(list) do
  if type(job) ~= 'table' or #job ~= 5 then return redis.error_reply('ERR hwt.jobs: a malformed job at ' .. i) end
  for f = 1, 5 do
    if type(job[f]) ~= 'string' then return redis.error_reply('ERR hwt.jobs: a malformed job at ' .. i) end
  end
  if job[4] == '' and not tonumber(job[3]) or job[4] ~= '' and not tonumber(job[4]) then
    return redis.error_reply('ERR hwt.jobs: a malformed due time at ' .. i)
  end
end
local ids, written, earliest = {}, 0, nil
local earliest_before = earliest_due()
for i, job in ipairs(list) do
  local due_at = due_time(job[3], job[4])
  local id, wrote = write_job(job[1], job[2], due_at, job[5] == '1')
  ids[i] = id
  if wrote == 1 then
    written = written + 1
    if not earliest or due_at < earliest then earliest = due_at end
  end
end
if earliest then wake_for(earliest, earliest_before) end
return answer({ ids, written, earliest and score(math.max(0, earliest - now)) or '-1' })
]]

-- ARGV: the job's JSON, its first due time (µs), its id ('': a new one),
-- '1' to replace a job of that id, the series' JSON {"spec":..., "tz":...},
-- the id stride and offset. Writes the first occurrence as SCHEDULE writes a job, and the series
-- beside it. Answers as SCHEDULE.
local EVERY = PRELUDE .. WAKE .. WRITE_JOB .. [[
local due_at, earliest_before = tonumber(ARGV[2]), earliest_due()
local id, written = write_job(ARGV[3], ARGV[1], due_at, ARGV[4] == '1')
if written == 1 then
  redis.call('HSET', recurring, id, ARGV[5])
  wake_for(due_at, earliest_before)
end
return answer({ id, written, score(math.max(0, due_at - now)) })
]]

-- The Redis clock, in µs (q:every computes a series' first occurrence on it).
local NOW = PRELUDE .. [[
return answer(score(now))
]]

-- A claimed job is running somewhere: cancel cannot promise it never runs.
-- A series is ended whatever its occurrence does: one that runs finishes,
-- and its outcome then ends the job.
local CANCEL = PRELUDE .. [[
local due, jobs, claims, tries, errors, recurring = unpack(KEYS)
local id = ARGV[1]
local series = redis.call('HDEL', recurring, id) == 1
if redis.call('HEXISTS', claims, id) == 1 then return answer(series and 1 or 0) end
if redis.call('ZREM', due, id) == 0 then return answer(series and 1 or 0) end
redis.call('HDEL', jobs, id)
redis.call('HDEL', tries, id)
redis.call('HDEL', errors, id)
return answer(1)
]]

-- Settles the outcomes the worker sends (done; retry after a wait; dead;
-- release: due again, unstarted; next: a recurring job's next occurrence,
-- at a due time in µs) and answers for each 1: settled; 0: already
-- settled, a resent outcome; -1: the lease was lost, another claim holds it. Then
-- claims up to ARGV[1] due jobs for ARGV[2] µs, and tells how long until the
-- next job is due (-1: none) and the Redis clock (µs). A claimed job's row
-- carries its series' JSON ('' for a one-shot job).
local PUMP = PRELUDE .. [[
local due, jobs, tries, claims, errors, dead, seq, recurring = unpack(KEYS)
local function forget(id)
  redis.call('ZREM', due, id)
  redis.call('HDEL', jobs, id)
  redis.call('HDEL', tries, id)
  redis.call('HDEL', errors, id)
  redis.call('HDEL', recurring, id)
end
local settled = {}
for i = 0, tonumber(ARGV[3]) - 1 do
  local base = 4 + i * 5
  local id, token, kind, wait, err = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local holder = redis.call('HGET', claims, id)
  if (holder and string.match(holder, '^%d+')) ~= token then
    settled[#settled + 1] = holder and -1 or 0
  else
    redis.call('HDEL', claims, id)
    if kind == 'done' or kind == 'next' and redis.call('HEXISTS', recurring, id) == 0 then
      forget(id)                                  -- (a cancelled series' last occurrence)
    elseif kind == 'next' then
      redis.call('ZADD', due, score(tonumber(wait)), id)
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
      redis.call('HDEL', recurring, id)
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
    redis.call('HSET', claims, id, token .. ' ' .. score(tonumber(found[i + 1])))
    redis.call('ZADD', due, lease_end, id)
    claimed[#claimed + 1] = { id, redis.call('HGET', jobs, id) or '', token,
                              redis.call('HINCRBY', tries, id, 1), tonumber(found[i + 1]),
                              redis.call('HGET', recurring, id) or '' }
  end
end
local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local next_in = -1
if first[2] then next_in = math.max(0, tonumber(first[2]) - now) end
return answer({ settled, claimed, next_in, score(now) })
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

local REQUEUE = PRELUDE .. WAKE .. [[
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return answer(0) end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local due_at, earliest_before = now + tonumber(ARGV[2]), earliest_due()
redis.call('ZADD', KEYS[1], score(due_at), ARGV[1])
wake_for(due_at, earliest_before)
return answer(1)
]]

-- What GET and LIST answer for a job: { id, JSON, state, due (µs; '' for
-- a dead one, or a claim that does not say), attempts, error, dead since
-- (µs; '' unless dead), its series' JSON ('' for a one-shot job) }.
local JOB_ROW = [[
local due_key, jobs, claims, tries, dead, errors, recurring = unpack(KEYS)
local function claim_due(id)
  local claim = redis.call('HGET', claims, id)
  return claim and (string.match(claim, ' (%d+)$') or '') or nil
end
local function row(id, state, due_at, dead_at)
  return { id, redis.call('HGET', jobs, id) or '', state, due_at or '', redis.call('HGET', tries, id) or '0',
           redis.call('HGET', errors, id) or '', dead_at or '', redis.call('HGET', recurring, id) or '' }
end
local function job_row(id)
  if redis.call('HEXISTS', jobs, id) == 0 then return nil end
  local dead_at = redis.call('ZSCORE', dead, id)
  if dead_at then return row(id, 'dead', nil, dead_at) end
  local due_of_claim = claim_due(id)
  if due_of_claim then return row(id, 'running', due_of_claim) end
  return row(id, 'delayed', redis.call('ZSCORE', due_key, id))
end
]]

-- ARGV: an id. Answers { 1, row } (JOB_ROW's), or { 0 } when no job has it.
local GET = PRELUDE .. JOB_ROW .. [[
local found = job_row(ARGV[1])
if not found then return answer({ 0 }) end
return answer({ 1, found })
]]

-- ARGV: a state (delayed, running, dead), how many to skip, how many to
-- answer. Answers rows (JOB_ROW's): delayed jobs by due time, running ones
-- by the due time of their claim, dead ones by when they died. A delayed
-- page costs O(log n) per claim held and per row.
local LIST = PRELUDE .. JOB_ROW .. [[
local state, from, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
if state == 'dead' then
  local ids = redis.call('ZRANGE', dead, from, from + count - 1, 'WITHSCORES')
  for i = 1, #ids, 2 do out[#out + 1] = row(ids[i], 'dead', nil, ids[i + 1]) end
elseif state == 'running' then
  local held = redis.call('HGETALL', claims)
  local rows = {}
  for i = 1, #held, 2 do rows[#rows + 1] = row(held[i], 'running', string.match(held[i + 1], ' (%d+)$')) end
  table.sort(rows, function(a, b) return (tonumber(a[4]) or 0) < (tonumber(b[4]) or 0) end)
  for i = from + 1, math.min(#rows, from + count) do out[#out + 1] = rows[i] end
else
  -- Claimed jobs sit in the due set too (scored by their lease's end): the
  -- rank of the from-th unclaimed one is from plus the claimed ones before it.
  local ranks = {}
  for _, id in ipairs(redis.call('HKEYS', claims)) do
    local rank = redis.call('ZRANK', due_key, id)
    if rank then ranks[#ranks + 1] = rank end
  end
  table.sort(ranks)
  local start = from
  for _, rank in ipairs(ranks) do
    if rank <= start then start = start + 1 end
  end
  local ids = redis.call('ZRANGE', due_key, start, start + count + #ranks - 1, 'WITHSCORES')
  for i = 1, #ids, 2 do
    if #out == count then break end
    if redis.call('HEXISTS', claims, ids[i]) == 0 then out[#out + 1] = row(ids[i], 'delayed', ids[i + 1]) end
  end
end
return answer(out)
]]

-- Answers { delayed, running, dead, recurring }.
local COUNTS = PRELUDE .. [[
local due, claims, dead, recurring = unpack(KEYS)
local running = redis.call('HLEN', claims)
return answer({ redis.call('ZCARD', due) - running, running, redis.call('ZCARD', dead),
                redis.call('HLEN', recurring) })
]]

-- ARGV: an id, a delay (µs), a due time (µs; '': use the delay). A job
-- that is delayed (not claimed, not dead) gets the new due time. Answers
-- { 1, µs until it is due }, or { 0 } when it was not delayed.
local RESCHEDULE = PRELUDE .. WAKE .. [[
local due, claims = unpack(KEYS)
local id = ARGV[1]
if redis.call('HEXISTS', claims, id) == 1 or not redis.call('ZSCORE', due, id) then return answer({ 0 }) end
local due_at, earliest_before = ARGV[3] ~= '' and tonumber(ARGV[3]) or now + tonumber(ARGV[2]), earliest_due()
redis.call('ZADD', due, score(due_at), id)
wake_for(due_at, earliest_before)
return answer({ 1, score(math.max(0, due_at - now)) })
]]

local M = {
  schedule = SCHEDULE, schedule_many = SCHEDULE_MANY, every = EVERY, now = NOW, cancel = CANCEL, pump = PUMP,
  dead_list = DEAD_LIST, requeue = REQUEUE, get = GET, list = LIST, counts = COUNTS,
  reschedule = RESCHEDULE,
}

-- Each script's KEYS, in the order it unpacks them, for the queue `key`.
function M.keys(key)
  local slot = "{" .. key .. "}:"
  local k = {}
  for _, name in ipairs({ "due", "jobs", "tries", "claims", "errors", "dead", "seq", "recurring" }) do
    k[name] = slot .. name
  end
  return {
    wake_channel = slot .. "wake",      -- a Pub/Sub channel, not a key (see WAKE)
    schedule = { k.due, k.jobs, k.seq, k.claims, k.tries, k.errors, k.dead, k.recurring },
    read = { k.due, k.jobs, k.claims, k.tries, k.dead, k.errors, k.recurring },
    counts = { k.due, k.claims, k.dead, k.recurring },
    none = {},
    reschedule = { k.due, k.claims },
    cancel = { k.due, k.jobs, k.claims, k.tries, k.errors, k.recurring },
    pump = { k.due, k.jobs, k.tries, k.claims, k.errors, k.dead, k.seq, k.recurring },
    dead = { k.dead, k.jobs, k.tries, k.errors },
    requeue = { k.due, k.dead, k.tries, k.errors },
  }
end

return M
