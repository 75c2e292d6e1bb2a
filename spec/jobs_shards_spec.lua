-- hwt.jobs over several Redis primaries (opts.shards), here three
-- independent redis-servers started on 127.0.0.1 for this file: where each
-- job goes, calls about one job on its shard, calls about all of them over
-- every shard, a worker serving every shard, and the options' checks. (A
-- real Redis Cluster: test/host/jobs_cluster_test.lua.)
package.path = "test/host/?.lua;" .. package.path
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local shards = require("hwt.jobs_shards")
local redis_server = require("redis_server")
local assert_raises = require("support").assert_raises
local js = require("jobs_support")

local N = 3

local servers = {}
local key_number = 0

-- A queue over the servers (a fresh key, or opts.key): q, its timer, the
-- errors it reported, its key. opts.down[i]: shard i's connect fails.
local function sharded_queue(opts)
  opts = opts or {}
  js.collect_dropped_clients()
  key_number = key_number + 1
  local key = opts.key or "spec:shards:" .. key_number
  local timer = opts.timer or hwt.new({ tick = js.TICK })
  local errors = {}
  local connects = {}
  for i, server in ipairs(servers) do
    connects[i] = function()
      if opts.down and opts.down[i] then error("shard " .. i .. " is down") end
      return js.connect_to(server)
    end
  end
  local q = jobs.redis({
    timer = timer, key = key, shards = connects, poll_interval = opts.poll_interval or 0.2, lease = 5,
    concurrency = opts.concurrency, retry = { retries = 1, delay = 0.05 },
    on_error = function(err) errors[#errors + 1] = err end,
  })
  return q, timer, errors, key
end

-- The ids of the jobs that server i holds for the queue `key`.
local function ids_on(i, key)
  local client = assert(servers[i]:connect())
  local ids = client:zrange("{" .. shards.tag(key, i, N) .. "}:due", 0, -1)
  client:quit()
  table.sort(ids)
  return ids
end

local function sorted(list)
  local copy = {}
  for i, v in ipairs(list) do copy[i] = v end
  table.sort(copy)
  return copy
end

describe("hwt.jobs over shards #redis", function()
  lazy_setup(function()
    for i = 1, N do servers[i] = redis_server.start() end
  end)
  lazy_teardown(function()
    for _, server in ipairs(servers) do server:destroy() end
  end)

  describe("placing jobs", function()
    it("tags each shard in the middle half of its own slot range, the same every time", function()
      assert.equals("app:jobs", shards.tag("app:jobs", 1, 1))
      local seen = {}
      for i = 1, N do
        local tag = shards.tag("app:jobs", i, N)
        local slot, width = shards.slot(tag), 16384 / N
        assert.is_true(slot >= (i - 1) * width + width / 4 and slot < (i - 1) * width + 3 * width / 4)
        assert.is_nil(seen[tag])
        seen[tag] = true
        assert.equals(tag, shards.tag("app:jobs", i, N))
      end
    end)

    it("computes Redis Cluster's slot of a tag (CRC16 XMODEM, mod 16384)", function()
      assert.equals(0x31C3, shards.slot("123456789"))   -- CRC16 XMODEM's check value
      assert.equals(11058, shards.slot("somekey"))        -- CLUSTER KEYSLOT somekey
      assert.equals(2515, shards.slot("hash_tag"))        -- CLUSTER KEYSLOT foo{hash_tag}
      assert.equals(0, shards.slot(""))
    end)

    it("puts a new job on the shards in turn, and its id names its shard", function()
      local q, timer, _, key = sharded_queue()
      local ids = {}
      for i = 1, 2 * N do ids[i] = assert(q:schedule("x", 60, i)) end
      local per_shard = {}
      for _, id in ipairs(ids) do
        assert.matches("^%d+$", id)
        local i = shards.index_of(id, N)
        per_shard[i] = (per_shard[i] or 0) + 1
        assert.is_truthy(table.concat(ids_on(i, key), " "):find(id, 1, true))
      end
      for i = 1, N do assert.equals(2, per_shard[i]) end
      timer:stop()
    end)

    it("puts a job with an id on the shard of its id's hash, once", function()
      local q, timer, _, key = sharded_queue()
      local counts = {}
      for i = 1, 300 do
        local id = "order-" .. i
        assert.equals(id, q:schedule("x", 60, i, { id = id }))
        assert.equals(id, q:schedule("x", 60, i, { id = id }))      -- again: nothing new
        local s = shards.index_of(id, N)
        counts[s] = (counts[s] or 0) + 1
      end
      local total = 0
      for i = 1, N do
        assert.is_true(counts[i] > 60, "shard " .. i .. " got " .. tostring(counts[i]) .. " of 300")
        assert.equals(counts[i], #ids_on(i, key))
        total = total + #ids_on(i, key)
      end
      assert.equals(300, total)
      timer:stop()
    end)
  end)

  describe("calls about one job", function()
    it("get, reschedule, promote, cancel reach the job's shard", function()
      local q, timer = sharded_queue()
      local named = assert(q:schedule("x", 60, "named", { id = "a-job" }))
      local numbered = assert(q:schedule("x", 60, "numbered"))
      for _, id in ipairs({ named, numbered }) do
        assert.equals("delayed", q:get(id).state)
        assert.is_true(q:reschedule(id, 120))
        assert.is_true(q:promote(id))
        assert.is_true(q:cancel(id))
        assert.is_nil(q:get(id))
        assert.is_false(q:cancel(id))
      end
      timer:stop()
    end)
  end)

  describe("schedule_many", function()
    it("writes a list without ids on one shard in one round trip, ids on their shards, ids in order", function()
      local q, timer, _, key = sharded_queue()
      local list = {}
      for i = 1, 10 do list[i] = { name = "x", delay = 60, payload = i } end
      local ids = assert(q:schedule_many(list))
      assert.equals(10, #ids)
      local home = shards.index_of(ids[1], N)
      for _, id in ipairs(ids) do assert.equals(home, shards.index_of(id, N)) end
      assert.same(sorted(ids), ids_on(home, key))
      local named = {}
      for i = 1, 30 do named[i] = { name = "x", delay = 60, payload = i, id = "n" .. i } end
      ids = assert(q:schedule_many(named))
      for i = 1, 30 do
        assert.equals("n" .. i, ids[i])
        assert.equals(i, q:get(ids[i]).payload)
      end
      assert.equals(40, q:counts().delayed)
      timer:stop()
    end)

    it("a shard that refuses: 'refused' when nothing was written, 'unknown' when another shard's part was", function()
      local key = "spec:shards:refusal"
      local list = {}
      for i = 1, 30 do list[i] = { name = "x", delay = 60, id = "r" .. i } end
      -- The shards are written in the order their first job comes: r1's shard first.
      local first = shards.index_of("r1", N)
      local q, timer = sharded_queue({ key = key, down = { [first] = true } })
      local ids, err, kind = q:schedule_many(list)
      assert.is_nil(ids)
      assert.equals("refused", kind)
      assert.matches("shard " .. first .. " is down", err)
      local later = first % N + 1
      local q2, timer2 = sharded_queue({ key = key, down = { [later] = true } })
      ids, err, kind = q2:schedule_many(list)
      assert.is_nil(ids)
      assert.equals("unknown", kind)
      assert.matches("other shards were written", err)
      local healthy, timer3 = sharded_queue({ key = key })
      ids = assert(healthy:schedule_many(list))              -- again: each job once
      assert.equals(30, #ids)
      assert.equals(30, healthy:counts().delayed)
      timer:stop(); timer2:stop(); timer3:stop()
    end)
  end)

  describe("calls about all jobs", function()
    it("list merges the shards in due order, a page at a time; counts add them up", function()
      local q, timer = sharded_queue()
      local list = {}
      for i = 1, 12 do list[i] = { name = "x", delay = 100 + i, payload = i, id = "j" .. i } end
      assert(q:schedule_many(list))
      local page = assert(q:list({ from = 3, count = 5 }))
      assert.equals(5, #page)
      for i, job in ipairs(page) do assert.equals(3 + i, job.payload) end
      assert.same({ delayed = 12, running = 0, dead = 0, recurring = 0 }, q:counts())
      timer:stop()
    end)

    it("dead merges the shards' dead jobs, oldest first", function()
      local q, timer = sharded_queue()
      q:handle("fail", function() error("no") end)
      for i = 1, 6 do assert(q:schedule("fail", 0, i, { id = "d" .. i })) end
      assert(q:start())
      js.run_until(timer, function() return q:counts().dead == 6 end)
      local dead = assert(q:dead(4))
      assert.equals(4, #dead)
      for _, row in ipairs(dead) do
        assert.matches("^d%d$", row.id)
        assert.matches("no", row.error)
        assert.equals(2, row.attempts)
      end
      q:stop()
      timer:stop()
    end)
  end)

  describe("a worker", function()
    it("runs every shard's jobs once, at most `concurrency` of each shard's at once", function()
      local q, timer = sharded_queue({ concurrency = 4 })
      local runs, most = {}, 0
      q:handle("x", function(payload)
        runs[payload] = (runs[payload] or 0) + 1
        most = math.max(most, q:stats().running)
      end)
      local list = {}
      for i = 1, 60 do list[i] = { name = "x", delay = 0, payload = i, id = "w" .. i } end
      assert(q:schedule_many(list))
      assert(q:start())
      js.run_until(timer, function()
        local n = 0
        for _ in pairs(runs) do n = n + 1 end
        return n == 60 and js.settled(q)
      end)
      for i = 1, 60 do assert.equals(1, runs[i]) end
      assert.is_true(most <= 4 * N and most > 4, "at most " .. most .. " running")   -- 4 from each shard
      assert.equals(60, q:stats().ran)
      assert.same({ delayed = 0, running = 0, dead = 0, recurring = 0 }, q:counts())
      q:stop()
      timer:stop()
    end)

    it("q:run_for: an idle worker hears of a job scheduled on any shard, before its next round", function()
      local q, timer, _, key = sharded_queue({ poll_interval = 30 })
      local ran = {}
      q:handle("x", function(payload) ran[#ran + 1] = payload end)
      assert(q:start())
      q:run_for(0.3)                               -- its first rounds, and a listener per shard
      local other = sharded_queue({ key = key })  -- another process
      for i = 1, N do assert(other:schedule("x", 0.05, i)) end
      local started = hwt.now()
      while #ran < N and hwt.now() - started < 10 do q:run_for(0.05) end
      table.sort(ran)
      assert.same({ 1, 2, 3 }, ran)               -- without listeners: at its next round, 30 s on
      q:stop()
      timer:stop()
    end)

    it("every: a series lives on the shard of its id and runs there", function()
      local q, timer = sharded_queue()
      local runs = 0
      q:handle("tick", function() runs = runs + 1 end)
      local id = assert(q:every("tick", 0.1, nil, { id = "series-x" }))
      assert.equals("series-x", id)
      assert.equals(1, q:counts().recurring)
      assert(q:start())
      js.run_until(timer, function() return runs >= 2 end)
      assert.is_true(q:cancel(id))
      q:stop()
      timer:stop()
    end)
  end)

  describe("options", function()
    local function raises(opts, substring)
      opts.timer, opts.key = opts.timer or hwt.new(), "k"
      local message = assert_raises(substring, function() jobs.redis(opts) end)
      assert.matches("jobs_shards_spec.lua:%d+:", message)     -- at the caller's line
      opts.timer:stop()
    end
    local function connect() end

    it("raise for shards with connect, an empty or holey list, a shard that is not a function", function()
      raises({ shards = { connect }, connect = connect }, "bad option 'connect' to 'redis' (nil expected with opts.shards")
      raises({ shards = {} }, "bad option 'shards' to 'redis' (a non-empty array of connect functions expected, got an empty table")
      raises({ shards = { connect, "x" } }, "bad option 'shards' to 'redis' (shards[2]: function expected, got string")
      raises({ shards = { connect, nil, connect } }, "bad option 'shards'")
    end)
  end)
end)
