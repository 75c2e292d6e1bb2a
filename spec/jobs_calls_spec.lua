-- hwt.jobs' calls of hwt 0.3 against a real redis-server started on
-- 127.0.0.1 for this file: schedule_many (all or nothing, ids, a retry
-- after "unknown"), opts.at (a due time on the Redis clock), get, list,
-- counts, reschedule and promote; the wake messages and a plain worker
-- (q:run_for) that listens for them; Redis's maxmemory and maxclients
-- turned low (servers of those tests' own).
package.path = "test/host/?.lua;" .. package.path
local hwt = require("hwt")
local listen = require("hwt.jobs_listen")
local redis_server = require("redis_server")
local socket = require("socket")
local assert_raises = require("support").assert_raises
local js = require("jobs_support")
local new_queue, run_until, settled, redis_count, stall = js.new_queue, js.run_until, js.settled, js.redis_count, js.stall

local server

-- The Redis server's clock, in seconds (what opts.at counts on).
local function redis_time()
  local client = assert(server:connect())
  local clock = client:time()
  client:quit()
  return tonumber(clock[1]) + tonumber(clock[2]) / 1e6
end

-- Registers a handler for each name that records what ran: name, payload
-- and the Redis time it started at. Returns the record.
local function record_runs(q, ...)
  local ran = {}
  for _, name in ipairs({ ... }) do
    q:handle(name, function(payload, job)
      ran[#ran + 1] = { name = name, payload = payload, id = job.id, at = redis_time() }
    end)
  end
  return ran
end

local function slot_of(key) return "{" .. key .. "}:" end

describe("hwt.jobs 0.3 calls #redis", function()
  lazy_setup(function()
    server = redis_server.start()
    js.use(server)
  end)
  lazy_teardown(function() server:destroy() end)

  describe("schedule_many", function()
    it("writes every job in one call and gives back their ids in the list's order", function()
      local q, timer = new_queue()
      local ran = record_runs(q, "a", "b")
      local soon = redis_time()
      local ids = assert(q:schedule_many({
        { name = "a", delay = 0.2, payload = { n = 1 } },
        { name = "b", at = soon, payload = "at once", id = "b-1" },
        { name = "a", delay = 0, payload = { n = 3 }, id = "a-3" },
      }))
      assert.equals(3, #ids)
      assert.equals("b-1", ids[2])
      assert.equals("a-3", ids[3])
      assert.matches("^%d+$", ids[1])
      assert.equals(3, q:stats().scheduled)
      assert(q:start())
      run_until(timer, function() return #ran == 3 and settled(q) end)
      local by_id = {}
      for _, run in ipairs(ran) do by_id[run.id] = run end
      assert.same({ n = 1 }, by_id[ids[1]].payload)
      assert.equals("at once", by_id["b-1"].payload)
      assert.same({ n = 3 }, by_id["a-3"].payload)
      assert.is_true(by_id[ids[1]].at >= soon + 0.2)     -- never before its due time
      timer:stop()
    end)

    it("leaves a job whose id exists as it is, unless replace; an id twice: the second finds the first", function()
      local q, timer, _, key = new_queue()
      assert.equals("keep", q:schedule("x", 60, "old", { id = "keep" }))
      local ids = assert(q:schedule_many({
        { name = "x", delay = 1, payload = "new", id = "keep" },
        { name = "x", delay = 5, payload = "first", id = "twice" },
        { name = "x", delay = 9, payload = "second", id = "twice" },
        { name = "x", delay = 7, payload = "replaced", id = "twice", replace = true },
      }))
      assert.same({ "keep", "twice", "twice", "twice" }, ids)
      assert.equals("old", q:get("keep").payload)
      assert.equals("replaced", q:get("twice").payload)
      assert.equals(2, redis_count("hlen", slot_of(key) .. "jobs"))
      assert.equals(3, q:stats().scheduled)    -- "keep", "twice" and its replacement
      timer:stop()
    end)

    it("writes nothing when Redis refuses the batch: nil, err, 'refused', no id drawn", function()
      local q, timer, _, key = new_queue()
      local client = assert(server:connect())
      client:set(slot_of(key) .. "dead", "not a sorted set")
      client:quit()
      local ids, err, kind = q:schedule_many({ { name = "x", delay = 1 }, { name = "y", delay = 2, id = "y" } })
      assert.is_nil(ids)
      assert.matches("WRONGTYPE", err)
      assert.equals("refused", kind)
      assert.equals(0, redis_count("zcard", slot_of(key) .. "due"))
      assert.equals(0, redis_count("hlen", slot_of(key) .. "jobs"))
      assert.is_nil(redis_count("get", slot_of(key) .. "seq"))
      timer:stop()
    end)

    it("raises on a bad job, naming it, and sends nothing", function()
      local q, timer, _, key = new_queue()
      local good = { name = "x", delay = 1 }
      assert_raises("bad argument #1 to 'schedule_many' (table expected, got nil)", q.schedule_many, q)
      assert_raises("(list[2]: table expected, got number)", q.schedule_many, q, { good, 5 })
      assert_raises("(list[1]: delay or at expected)", q.schedule_many, q, { { name = "x" } })
      assert_raises("(list[1]: delay or at expected, not both)", q.schedule_many, q,
                    { { name = "x", delay = 1, at = 2 } })
      assert_raises("(list[2]: unknown field 'dealy')", q.schedule_many, q, { good, { name = "x", dealy = 1 } })
      assert_raises("(list[1].name: non-empty string expected", q.schedule_many, q, { { name = "", delay = 1 } })
      assert_raises("(list[1].delay: finite number of seconds >= 0", q.schedule_many, q, { { name = "x", delay = -1 } })
      assert_raises("(list[1].at: finite Unix time", q.schedule_many, q, { { name = "x", at = 0 / 0 } })
      assert_raises("(list[1].id: a string with a non-digit", q.schedule_many, q, { { name = "x", delay = 1, id = "7" } })
      assert_raises("(list[1].replace needs list[1].id)", q.schedule_many, q, { { name = "x", delay = 1, replace = true } })
      assert_raises("(list[3].payload: JSON-encodable payload expected: payload.f is a function", q.schedule_many, q,
                    { good, good, { name = "x", delay = 1, payload = { f = print } } })
      assert_raises("(an array of jobs expected, got the key name)", q.schedule_many, q, { good, name = "x" })
      assert.same({}, q:schedule_many({}))
      assert.equals(0, redis_count("hlen", slot_of(key) .. "jobs"))
      timer:stop()
    end)

    it("a late reply: 'unknown'; the same batch again, with ids, writes each job once", function()
      local q, timer, _, key = new_queue({ timeout = 0.5 })
      assert(q:schedule_many({ { name = "warm", delay = 60 } }))   -- the script is loaded: the stall meets EVALSHA
      local batch = {}
      for i = 1, 50 do batch[i] = { name = "x", delay = 60, payload = i, id = "job-" .. i } end
      local sleeper = stall(server, 0.75)
      local ids, err, kind = q:schedule_many(batch)
      assert.is_nil(ids)
      assert.matches("timeout", err)
      assert.equals("unknown", kind)
      assert.equals(50, #assert(q:schedule_many(batch)))
      assert.equals(51, redis_count("zcard", slot_of(key) .. "due"))
      sleeper:close()
      timer:stop()
    end)
  end)

  describe("opts.at", function()
    it("runs a job at a time on the Redis clock, not before; one in the past at once", function()
      local q, timer = new_queue()
      local ran = record_runs(q, "x")
      local at = redis_time() + 0.3
      assert(q:schedule("x", nil, "later", { at = at }))
      assert(q:schedule("x", nil, "past", { at = at - 3600 }))
      assert(q:start())
      run_until(timer, function() return #ran == 2 and settled(q) end)
      assert.equals("past", ran[1].payload)
      assert.equals("later", ran[2].payload)
      assert.is_true(ran[2].at >= at)
      timer:stop()
    end)

    it("takes the place of the delay: both, or neither, raise", function()
      local q, timer = new_queue()
      assert_raises("bad argument #2 to 'schedule' (nil expected with opts.at, got number)",
                    q.schedule, q, "x", 1, nil, { at = 5 })
      assert_raises("bad argument #2 to 'schedule' (finite number of seconds >= 0 expected, got nil)",
                    q.schedule, q, "x", nil)
      assert_raises("bad argument #4 to 'schedule' (opts.at: finite Unix time in seconds >= 0 expected, got -1)",
                    q.schedule, q, "x", nil, nil, { at = -1 })
      timer:stop()
    end)
  end)

  describe("get, list and counts", function()
    it("gives a delayed job, a running one and a dead one, and nil for an unknown id", function()
      local q, timer = new_queue({ retry = { retries = 0 } })
      local before = redis_time()
      local id = assert(q:schedule("later", 60, { n = 1 }))
      local job = q:get(id)
      assert.same({ n = 1 }, job.payload)
      assert.equals("later", job.name)
      assert.equals("delayed", job.state)
      assert.equals(0, job.attempts)
      assert.is_true(job.due >= before + 60 and job.due < redis_time() + 60.001)
      assert.is_nil(q:get("no such job"))
      local seen = {}
      q:handle("now", function(_, running)
        seen.job = q:get(running.id)
        seen.list = q:list({ state = "running" })
        seen.counts = q:counts()
        seen.moved = q:reschedule(running.id, 1)
        error("to the dead")
      end)
      local now_id = assert(q:schedule("now", 0, "p"))
      assert(q:start())
      run_until(timer, function() return q:stats().dead == 1 and settled(q) end)
      assert.equals("running", seen.job.state)
      assert.equals(1, seen.job.attempts)
      assert.is_true(seen.job.due <= redis_time())
      assert.equals(1, #seen.list)
      assert.equals(now_id, seen.list[1].id)
      assert.same({ delayed = 1, running = 1, dead = 0, recurring = 0 }, seen.counts)
      assert.is_false(seen.moved)                  -- running: not moved
      local dead = q:get(now_id)
      assert.equals("dead", dead.state)
      assert.matches("to the dead", dead.error)
      assert.is_number(dead.dead_at)
      assert.is_nil(dead.due)
      assert.same({ delayed = 1, running = 0, dead = 1, recurring = 0 }, q:counts())
      assert.equals(now_id, q:list({ state = "dead" })[1].id)
      assert.is_false(q:reschedule(now_id, 1))    -- dead: not moved
      timer:stop()
    end)

    it("lists delayed jobs in due order, a page at a time, skipping the claimed ones", function()
      local q, timer = new_queue()
      for i = 1, 6 do assert(q:schedule("x", 100 + i, i, { id = "job-" .. i })) end
      local page = {}
      for _, job in ipairs(q:list({ from = 2, count = 3 })) do page[#page + 1] = job.payload end
      assert.same({ 3, 4, 5 }, page)
      assert.same({}, q:list({ from = 6 }))
      -- Claimed jobs keep their place in Redis' due set (scored by their
      -- lease): promote two, let a handler hold them, and page around them.
      local pages
      q:handle("x", function()
        if pages then return end
        pages = {}
        for from = 0, 3 do
          local ids = {}
          for _, job in ipairs(q:list({ from = from, count = 2 })) do ids[#ids + 1] = job.id end
          pages[from] = table.concat(ids, " ")
        end
      end)
      assert.is_true(q:promote("job-2"))
      assert.is_true(q:promote("job-5"))
      assert(q:start())                            -- one round claims both, then runs them
      run_until(timer, function() return pages ~= nil end)
      assert.same({ [0] = "job-1 job-3", "job-3 job-4", "job-4 job-6", "job-6" }, pages)
      timer:stop()
    end)

    it("raises on bad options", function()
      local q, timer = new_queue()
      assert_raises("bad argument #1 to 'list' (opts.state: \"delayed\", \"running\" or \"dead\" expected, got done)",
                    q.list, q, { state = "done" })
      assert_raises("bad argument #1 to 'list' (opts.count: integer >= 1 expected, got 0)", q.list, q, { count = 0 })
      assert_raises("bad argument #1 to 'list' (opts.from: integer >= 0 expected, got 1.5)", q.list, q, { from = 1.5 })
      assert_raises("bad argument #1 to 'list' (unknown option 'page')", q.list, q, { page = 1 })
      assert_raises("bad argument #1 to 'get' (job id expected, got nil)", q.get, q)
      timer:stop()
    end)
  end)

  describe("reschedule and promote", function()
    it("move a delayed job's due time; an unknown id is false", function()
      local q, timer = new_queue()
      local ran = record_runs(q, "x")
      local id = assert(q:schedule("x", 3600, "moved"))
      local at = redis_time() + 7200
      assert.is_true(q:reschedule(id, nil, { at = at }))
      assert.is_true(math.abs(q:get(id).due - at) < 1e-5)
      assert.is_true(q:reschedule(id, 120))
      assert.is_true(q:get(id).due < at - 3600)
      assert.is_false(q:reschedule("no such job", 1))
      assert.is_false(q:promote("no such job"))
      assert(q:start())
      assert.is_true(q:promote(id))
      run_until(timer, function() return #ran == 1 and settled(q) end)
      assert.equals("moved", ran[1].payload)
      assert.is_false(q:promote(id))              -- it ran: gone
      assert_raises("bad argument #2 to 'reschedule' (nil expected with opts.at, got number)",
                    q.reschedule, q, id, 1, { at = 1 })
      assert_raises("bad argument #3 to 'reschedule' (unknown option 'delay')", q.reschedule, q, id, 1, { delay = 1 })
      timer:stop()
    end)
  end)
  describe("every (recurring jobs)", function()
    -- Runs q1 and q2, two workers of one queue, by turns for `seconds`.
    local function run_both(q1, q2, seconds)
      local deadline = hwt.now() + seconds
      while hwt.now() < deadline do
        q1:run_for(0.01)
        if q2 then q2:run_for(0.01) end
      end
    end

    it("runs each occurrence once across workers, on its interval, until cancelled", function()
      local q1, t1, errors, key = new_queue()
      local q2, t2 = new_queue({ key = key })
      local runs = {}
      local function handler(payload, job) runs[#runs + 1] = { due = job.due, every = job.every, payload = payload } end
      q1:handle("tick", handler)
      q2:handle("tick", handler)
      local id = assert(q1:every("tick", 0.2, { n = 1 }))
      assert.equals(0.2, q1:get(id).every)
      assert.equals(1, q1:counts().recurring)
      assert(q1:start())
      assert(q2:start())
      run_both(q1, q2, 1.1)
      assert.is_true(#runs >= 3, #runs .. " runs")
      local seen = {}
      for _, run in ipairs(runs) do
        assert.is_nil(seen[run.due], "an occurrence ran twice")
        seen[run.due] = true
        assert.equals(0.2, run.every)
        assert.same({ n = 1 }, run.payload)
      end
      assert.is_true(q1:cancel(id))
      assert.is_false(q1:cancel(id))
      local after = #runs
      run_both(q1, q2, 0.5)
      assert.is_true(#runs - after <= 1)         -- the series ended (an occurrence claimed before runs)
      assert.equals(0, q1:counts().recurring)
      assert.same({}, errors)
      t1:stop()
      t2:stop()
    end)

    it("runs the occurrences missed while no worker ran once, not once each", function()
      local q, timer = new_queue()
      local runs = {}
      q:handle("tick", function(_, job) runs[#runs + 1] = { due = job.due, start = redis_time() } end)
      assert(q:every("tick", 0.1))
      socket.sleep(0.65)                         -- six occurrences due, no worker
      assert(q:start())
      q:run_for(0.35)
      assert.is_true(#runs >= 2 and #runs <= 6, #runs .. " runs")
      assert.is_true(runs[1].due < runs[1].start - 0.4)                -- the missed one, at once
      for i = 2, #runs do                        -- then the next after each run, not the missed ones
        assert.is_true(runs[i].due > runs[i - 1].start - 0.005, ("run %d was due before run %d started"):format(i, i - 1))
      end
      q:stop()
      timer:stop()
    end)

    it("reads a cron expression in its time zone: the first occurrence is the next 09:00 in Kolkata", function()
      local q, timer = new_queue()
      local id = assert(q:every("report", "0 9 * * *", { daily = true }, { tz = "Asia/Kolkata", id = "daily-report" }))
      assert.equals("daily-report", id)
      local job = q:get(id)
      assert.equals("0 9 * * *", job.every)
      assert.equals("Asia/Kolkata", job.tz)
      assert.equals(3.5 * 3600, job.due % 86400)  -- 09:00 IST is 03:30 UTC
      local now = redis_time()
      assert.is_true(job.due > now and job.due <= now + 86400)
      assert.equals(id, q:every("report", "*/5 * * * *", nil, { id = "daily-report" }))   -- exists: unchanged
      assert.equals("0 9 * * *", q:get(id).every)
      assert(q:every("report", "*/5 * * * *", nil, { id = "daily-report", replace = true }))
      assert.equals("*/5 * * * *", q:get(id).every)
      assert.equals(0, q:get(id).due % 300)
      assert.is_true(q:cancel(id))
      timer:stop()
    end)

    it("a series cancelled by its own running occurrence ends when that run does", function()
      local q, timer = new_queue()
      local cancelled
      q:handle("once", function(_, job) cancelled = q:cancel(job.id) end)
      local id = assert(q:every("once", 0.05))
      assert(q:start())
      run_until(timer, function() return cancelled ~= nil and settled(q) end)
      assert.is_true(cancelled)
      assert.is_nil(q:get(id))
      assert.equals(0, q:counts().recurring)
      q:stop()
      timer:stop()
    end)

    it("an occurrence that fails every retry is reported and given up; the series goes on", function()
      local q, timer, errors = new_queue({ retry = { retries = 0 } })
      local runs = 0
      q:handle("flaky", function() runs = runs + 1; error("down") end)
      local id = assert(q:every("flaky", 0.1))
      assert(q:start())
      run_until(timer, function() return runs >= 3 and settled(q) end)
      assert.is_true(#errors >= 3)
      assert.matches("down", errors[1].err)
      assert.same({}, q:dead())
      assert.equals(id, q:get(id).id)
      assert.is_true(q:cancel(id))
      q:stop()
      timer:stop()
    end)

    it("raises on a bad schedule, zone or option", function()
      local q, timer = new_queue()
      assert_raises("bad argument #2 to 'every' (4 fields, not 5", q.every, q, "x", "* * * *")
      assert_raises("bad argument #2 to 'every' (an interval is a finite number of seconds > 0", q.every, q, "x", 0)
      assert_raises("bad argument #2 to 'every' (the cron expression never runs)", q.every, q, "x", "0 0 31 2 *")
      assert_raises("bad argument #4 to 'every' (opts.tz: unknown time zone", q.every, q, "x", "* * * * *", nil,
                    { tz = "Mars/Olympus_Mons" })
      assert_raises("bad argument #4 to 'every' (unknown option 'at')", q.every, q, "x", 5, nil, { at = 1 })
      assert_raises("bad argument #1 to 'every' (non-empty string expected", q.every, q, "", 5)
      assert.equals(0, q:counts().recurring)
      timer:stop()
    end)
  end)

  describe("waking idle workers", function()
    -- A connection subscribed to the queue's wake channel: a function that
    -- gives the messages (seconds until due) that came within `seconds`.
    local function subscriber(key)
      local sock = assert(socket.connect("127.0.0.1", server.port))
      local channel = "{" .. key .. "}:wake"
      assert(sock:send(("*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n"):format(#channel, channel)))
      local buffer = ""
      return function(seconds)
        local messages, deadline = {}, socket.gettime() + seconds
        repeat
          sock:settimeout(math.max(0, deadline - socket.gettime()))
          local data, _, partial = sock:receive(1)
          buffer = buffer .. (data or partial or "")
          local values, rest = listen.values(buffer)
          buffer = rest
          for _, value in ipairs(values) do
            if value[1] == "message" then messages[#messages + 1] = tonumber(value[3]) / 1e6 end
          end
        until socket.gettime() >= deadline
        return messages
      end, function() sock:close() end
    end

    it("a job is announced when it falls due before every other, and only then", function()
      local q, timer, _, key = new_queue()
      local messages, close = subscriber(key)
      assert.same({}, messages(0.1))                                    -- subscribed, nothing yet
      assert(q:schedule("x", 60, nil, { id = "a" }))
      local first = messages(0.1)
      assert.equals(1, #first)
      assert.is_true(first[1] > 59 and first[1] <= 60)
      assert(q:schedule("x", 120, nil, { id = "later" }))
      assert.same({}, messages(0.1))                                    -- behind "a": nothing
      assert(q:schedule_many({ { name = "x", delay = 90 }, { name = "x", delay = 30 } }))
      assert.equals(1, #messages(0.1))                                  -- one for the batch's earliest
      assert.is_true(q:reschedule("later", 10))
      assert.equals(1, #messages(0.1))
      assert.is_true(q:reschedule("later", 500))
      assert.same({}, messages(0.1))                                    -- moved back: nothing
      assert.is_true(q:promote("a"))
      local promoted = messages(0.1)
      assert.equals(1, #promoted)
      assert.is_true(promoted[1] <= 0.001)
      close()
      timer:stop()
    end)

    it("q:run_for: an idle worker hears of a job that another process schedules, before its next round", function()
      local q, timer, _, key = new_queue({ poll_interval = 30 })
      local ran = record_runs(q, "x")
      assert(q:start())
      q:run_for(0.2)                              -- its first round, and its listener
      local other = new_queue({ key = key })      -- another process: a queue object of its own
      assert(other:schedule("x", 0.1, "soon"))
      local started = hwt.now()
      while #ran == 0 and hwt.now() - started < 10 do q:run_for(0.05) end
      assert.equals(1, #ran)                      -- without the listener: at its next round, 30 s on
      assert.equals("soon", ran[1].payload)
      q:stop()
      timer:stop()
    end)

    it("q:run_for runs a backlog batch after batch, not `concurrency` jobs a tick", function()
      local timer = hwt.new({ tick = 0.2 })
      local q = new_queue({ timer = timer, concurrency = 2 })
      local ran = 0
      q:handle("x", function() ran = ran + 1 end)
      local list = {}
      for i = 1, 100 do list[i] = { name = "x", delay = 0, payload = i } end
      assert(q:schedule_many(list))
      assert(q:start())
      q:run_for(0.5)                              -- as tasks, a few batches of 2
      assert.equals(100, ran)
      q:stop()
      q:run_for(0.3)
      assert.is_true(js.settled(q))
      timer:stop()
    end)

    it("q:run_for in a process with more files open than select() takes: reported once, the worker goes on", function()
      local q, timer, errors, key = new_queue({ poll_interval = 0.2 })
      collectgarbage()
      collectgarbage()                            -- no socket left to close and free a low descriptor
      local files = {}
      for i = 1, 1100 do files[i] = assert(io.open("/dev/null")) end   -- the listener's socket lands past 1024
      local ran = record_runs(q, "x")
      assert(q:start())
      q:run_for(0.3)
      local other = new_queue({ key = key })
      assert(other:schedule("x", 0.05, "later"))
      local started = hwt.now()
      while #ran == 0 and hwt.now() - started < 5 do q:run_for(0.05) end
      q:run_for(0.3)                              -- more rounds, no more reports
      for _, f in ipairs(files) do f:close() end
      assert.is_true(q:stats().started)
      assert.equals(1, #ran)                      -- heard at a round, every poll_interval
      assert.equals(1, #errors)
      assert.matches("cannot wait for the listener %(socket.select: ", errors[1].err)
      q:stop()
      timer:stop()
    end)

    it("q:run_for with a client it cannot listen through: reported once, and the worker goes on", function()
      local q, timer, errors = new_queue({ connect = function()
        local client = js.connect_to()          -- wrapped: neither hwt.redis nor redis-lua to a listener
        return setmetatable({}, { __index = function(_, name)
          local value = name ~= "network" and client[name] or nil
          if type(value) ~= "function" then return value end
          return function(_, ...) return value(client, ...) end
        end })
      end })
      local ran = record_runs(q, "x")
      assert(q:start())
      assert(q:schedule("x", 0.05, "mine"))
      local started = hwt.now()
      while #ran == 0 and hwt.now() - started < 5 do q:run_for(0.05) end
      q:run_for(0.3)
      assert.equals(1, #ran)
      assert.equals(1, #errors)
      assert.matches("cannot listen for jobs other processes schedule %(the client is neither hwt.redis nor redis%-lua", errors[1].err)
      q:stop()
      timer:stop()
    end)

    it("q:run_for raises for a timer a host drives, or one on the manual clock", function()
      local q = new_queue({ timer = hwt.new({ clock = "manual" }) })
      assert_raises("the timer has a manual clock", q.run_for, q, 1)
      assert_raises("bad argument #1 to 'run_for' (finite number of seconds >= 0", q.run_for, q, -1)
    end)
  end)

  describe("Redis's limits turned low", function()
    -- A redis-server of the test's own, stopped by PID whatever happens.
    local function own_server()
      local own = redis_server.start()
      finally(function() own:destroy() end)
      return own, assert(own:connect())
    end

    it("at maxmemory (noeviction) a batch is refused, nothing written; once there is room it is written", function()
      local own, admin = own_server()
      local q, timer = new_queue({ server = own })
      assert(q:counts())                                         -- connected, scripts loaded
      admin:config("set", "maxmemory-policy", "noeviction")
      admin:config("set", "maxmemory", "1")                      -- every write over the limit
      local list = {}
      for i = 1, 100 do list[i] = { name = "x", delay = 60, payload = i, id = "m" .. i } end
      local ids, err, kind = q:schedule_many(list)
      assert.is_nil(ids)
      assert.equals("refused", kind)
      assert.matches("OOM", err)
      assert.equals(0, tonumber(admin:dbsize()))                 -- nothing half-written
      admin:config("set", "maxmemory", "0")
      assert.equals(100, #assert(q:schedule_many(list)))
      assert.equals(100, q:counts().delayed)
      admin:quit()
      timer:stop()
    end)

    it("at maxclients a worker cannot open its listener: reported once, and it goes on asking Redis", function()
      local own, admin = own_server()
      local q, timer, errors = new_queue({ server = own, poll_interval = 0.2 })
      local ran = record_runs(q, "x")
      assert(q:schedule("x", 0.3, "polled"))                     -- its client, the second connection
      admin:config("set", "maxclients", "2")                     -- no third: the listener's
      assert(q:start())
      local started = hwt.now()
      while #ran == 0 and hwt.now() - started < 5 do q:run_for(0.05) end
      q:run_for(0.5)                                             -- more rounds, no more reports
      admin:config("set", "maxclients", "10000")
      assert.equals(1, #ran)
      assert.equals(1, #errors)
      assert.matches("cannot listen for jobs other processes schedule %(SUBSCRIBE: .*max number of clients",
                     errors[1].err)
      q:stop()
      admin:quit()
      timer:stop()
    end)
  end)

  describe("RESP (hwt.jobs_listen.values)", function()
    it("reads whole values, keeps a partial one for later, and refuses what is not RESP", function()
      local values, rest = listen.values("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\n500\r\n:1\r\n+OK\r\n*2\r\n$3\r\nab")
      assert.same({ { "message", "ch", "500" }, 1, "OK" }, values)
      assert.equals("*2\r\n$3\r\nab", rest)
      local more, left = listen.values(rest .. "c\r\n$-1\r\n")
      assert.same({ { "abc", "" } }, more)
      assert.equals("", left)
      assert.is_nil((listen.values("?what\r\n")))
    end)
  end)
end)
