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
--   {key}:claims  hash, id -> the token of the claim that holds it
--   {key}:errors  hash, id -> its last error
--   {key}:dead    sorted set, id -> when it was dead-lettered
--   {key}:seq     counter for ids and claim tokens
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

local M = { schedule = SCHEDULE, cancel = CANCEL, pump = PUMP, dead_list = DEAD_LIST, requeue = REQUEUE }

-- Each script's KEYS, in the order it unpacks them, for the queue `key`.
function M.keys(key)
  local slot = "{" .. key .. "}:"
  local k = {}
  for _, name in ipairs({ "due", "jobs", "tries", "claims", "errors", "dead", "seq" }) do
    k[name] = slot .. name
  end
  return {
    schedule = { k.due, k.jobs, k.seq, k.claims, k.tries, k.errors, k.dead },
    cancel = { k.due, k.jobs, k.claims, k.tries, k.errors },
    pump = { k.due, k.jobs, k.tries, k.claims, k.errors, k.dead, k.seq },
    dead = { k.dead, k.jobs, k.tries, k.errors },
    requeue = { k.due, k.dead, k.tries, k.errors },
  }
end

return M
