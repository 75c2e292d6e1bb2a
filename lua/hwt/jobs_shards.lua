-- hwt.jobs_shards: a queue spread over several Redis primaries (the nodes
-- of a Redis Cluster, or independent servers). Each shard is a queue of its
-- own on one primary, under a hash tag of its own; a job lives on the shard
-- its id names, so every call about one job is one shard's, and keeps that
-- shard's guarantees. Calls about all jobs (list, counts, dead) ask every
-- shard; a worker serves every shard.
--
-- Where a job goes:
--   a caller's id (it has a non-digit): the shard of a hash of the id;
--   a new id, which the queue makes (digits alone): the shard's sequence
--   times the number of shards plus the shard's index (0-based), so the id
--   names its shard; new jobs go to the shards in turn.
-- The number and order of the shards are part of the queue's data: a queue
-- read with other shards finds its jobs on the wrong shards.
--
-- Hash tags: shard i of n is tagged so that its keys' Redis Cluster slot
-- falls in the middle half of the i-th of n equal slot ranges, the ranges
-- `redis-cli --cluster create` gives n primaries in the order they are
-- named; so the i-th `connect` of `shards` reaches the i-th primary, and
-- no two shards share a node. A shard whose node does not own its slot is
-- refused (a MOVED error reply): nothing is written.
local M = {}

local floor = math.floor

local CLUSTER_SLOTS = 16384
local CRC16_POLY = 0x1021     -- CRC16-CCITT (XMODEM), Redis Cluster's key hash
local ID_HASH_MODULUS = 4294967296

-- a XOR b for 0 <= a, b < 2^16, in arithmetic (Lua 5.1 has no bit operators).
local function xor16(a, b)
  local result, bit = 0, 1
  for _ = 1, 16 do
    if a % 2 ~= b % 2 then result = result + bit end
    a, b, bit = floor(a / 2), floor(b / 2), bit * 2
  end
  return result
end

local function crc16(s)
  local crc = 0
  for i = 1, #s do
    crc = xor16(crc, s:byte(i) * 256)
    for _ = 1, 8 do
      if crc >= 32768 then
        crc = xor16((crc * 2) % 65536, CRC16_POLY)
      else
        crc = crc * 2
      end
    end
  end
  return crc
end

-- The Redis Cluster slot of the keys tagged "{tag}".
function M.slot(tag) return crc16(tag) % CLUSTER_SLOTS end

-- The hash tag of shard i of n (the queue's key itself when n is 1).
function M.tag(key, i, n)
  if n == 1 then return key end
  local width = CLUSTER_SLOTS / n
  local low, high = (i - 1) * width + width / 4, (i - 1) * width + 3 * width / 4
  local j = 0
  while true do
    local tag = key .. "/" .. i .. (j == 0 and "" or "." .. j)
    local slot = M.slot(tag)
    if slot >= low and slot < high then return tag end
    j = j + 1
  end
end

-- djb2: a caller's id spread over the shards alike on every Lua.
local function id_hash(id)
  local h = 5381
  for i = 1, #id do h = (h * 33 + id:byte(i)) % ID_HASH_MODULUS end
  return h
end

-- The index of the shard of the job `id` (a string), of n.
function M.index_of(id, n)
  if id:find("^%d+$") then return floor(tonumber(id) % n) + 1 end
  return id_hash(id) % n + 1
end

-- The queue that holds the job `id`: q itself when it has no shards.
function M.route(q, id)
  local shards = q.shards
  if not shards then return q end
  return shards[M.index_of(id, #shards)]
end

-- The queue a new job (one without an id) goes to: the shards in turn.
function M.next_shard(q)
  local shards = q.shards
  if not shards then return q end
  q.turn = q.turn % #shards + 1
  return shards[q.turn]
end

-- The queue a job goes to: the shard of its id, or for a new job (id nil)
-- the next shard in turn.
function M.for_job(q, id)
  if id then return M.route(q, id) end
  return M.next_shard(q)
end

-- Where the turns of a process start: so that many processes that each
-- schedule a few jobs do not all start with the first shard.
function M.first_turn(n)
  return id_hash(tostring({}) .. os.time() .. os.clock()) % n
end

-- Rows `from`+1 to `from`+`count` of the shards' `lists` (each in the order
-- of `key_of(row)`) merged in that order; ties keep the shards' order.
function M.merge(lists, key_of, from, count)
  local merged, heads = {}, {}
  for s = 1, #lists do heads[s] = 1 end
  while #merged < from + count do
    local best, best_key
    for s, list in ipairs(lists) do
      local row = list[heads[s]]
      if row then
        local key = key_of(row)
        if best == nil or key < best_key then best, best_key = s, key end
      end
    end
    if not best then break end
    merged[#merged + 1] = lists[best][heads[best]]
    heads[best] = heads[best] + 1
  end
  local page = {}
  for i = from + 1, #merged do page[#page + 1] = merged[i] end
  return page
end

return M
