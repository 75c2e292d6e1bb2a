-- hwt.jobs against a real redis-server started on 127.0.0.1 for this file
-- (test/host/redis_server.lua): arguments, payloads, handlers, retries and the
-- dead-letter set, cancel, stop/start, a Redis outage, and the one wake and
-- one request per poll_interval of an idle worker. The processes, kills and
-- restarts are test/host/jobs_test.lua's.
package.path = "test/host/?.lua;" .. package.path
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local redis_server = require("redis_server")
local socket = require("socket")
local assert_raises = require("support").assert_raises

local js = require("jobs_support")
local TICK, WITHIN = js.TICK, js.WITHIN
local fresh_key, connect_to, new_queue, run_until = js.fresh_key, js.connect_to, js.new_queue, js.run_until
local count_runs, settled, redis_count, fresh_jobs_module, stall =
  js.count_runs, js.settled, js.redis_count, js.fresh_jobs_module, js.stall

local server

-- A connect() for `on` (default: the spec's server) whose first script reply
-- (EVALSHA or EVAL) gets, in place of its result, one row of one field: a
-- reply of the wrong shape. Its clients wrap the real ones.
local function connect_corrupting_once(on)
  local corrupt = true
  return function()
    local client = connect_to(on)
    local wrapper = setmetatable({}, { __index = function(_, name)
      local method = client[name]
      return function(_, ...) return method(client, ...) end
    end })
    for _, command in ipairs({ "evalsha", "eval" }) do
      wrapper[command] = function(_, ...)
        local reply = client[command](client, ...)
        if corrupt and type(reply) == "table" then
          corrupt = false
          reply[2] = { { "?" } }
        end
        return reply
      end
    end
    return wrapper
  end
end

describe("hwt.jobs #redis", function()
  lazy_setup(function()
    server = redis_server.start()
    js.use(server)
  end)
  lazy_teardown(function() server:destroy() end)

  describe("arguments", function()
    it("names the option that is wrong", function()
      local timer = hwt.new({ clock = "manual" })
      local good = { timer = timer, key = "k", connect = function() end }
      local function with(key, value)
        local o = {}
        for k, v in pairs(good) do o[k] = v end
        o[key] = value
        return o
      end
      assert_raises("bad argument #1 to 'redis' (table expected", jobs.redis, nil)
      assert_raises("bad option 'timer' to 'redis' (hwt.Timer expected, got table)", jobs.redis, with("timer", {}))
      assert_raises("bad option 'connect' to 'redis' (function expected", jobs.redis, with("connect", "localhost"))
      assert_raises("bad option 'key' to 'redis'", jobs.redis, with("key", ""))
      assert_raises("bad option 'lease' to 'redis' (positive number", jobs.redis, with("lease", 0))
      assert_raises("bad option 'poll_interval' to 'redis'", jobs.redis, with("poll_interval", 0 / 0))
      assert_raises("bad option 'concurrency' to 'redis' (integer", jobs.redis, with("concurrency", 2.5))
      assert_raises("bad option 'retry.delay' to 'redis' (number expected", jobs.redis, with("retry", { delay = "soon" }))
      assert_raises("bad option 'retry.retries' to 'redis'", jobs.redis, with("retry", { retries = -1 }))
      assert_raises("bad option 'retry.retires' to 'redis' (unknown field)", jobs.redis, with("retry", { retires = 5 }))
      assert_raises("bad option 'retry.random' to 'redis' (unknown field)", jobs.redis, with("retry", { random = math.random }))
      assert_raises("bad option 'on_error' to 'redis' (function expected", jobs.redis, with("on_error", true))
      assert_raises("bad option 'lesae' to 'redis' (unknown option)", jobs.redis, with("lesae", 30))
      local _, where = pcall(function() jobs.redis(with("lease", -1)) end)
      assert.matches("^spec/jobs_spec%.lua:%d+: bad option 'lease'", where)   -- the caller's line
      timer:stop()
    end)

    it("refuses a bad name, delay or payload, and writes nothing", function()
      local q, timer, _, key = new_queue()
      assert_raises("bad argument #1 to 'schedule' (non-empty string expected, got nil)", q.schedule, q, nil, 1)
      assert_raises("bad argument #2 to 'schedule' (finite number of seconds >= 0", q.schedule, q, "a", -1)
      assert_raises("bad argument #2 to 'schedule'", q.schedule, q, "a", 0 / 0)
      assert_raises("bad argument #2 to 'schedule'", q.schedule, q, "a", math.huge)
      assert_raises("bad argument #3 to 'schedule' (JSON-encodable payload expected: payload.f is a function",
                   q.schedule, q, "a", 1, { f = print })
      assert_raises("bad argument #4 to 'schedule' (table expected, got number)", q.schedule, q, "a", 1, nil, 5)
      assert_raises("bad argument #4 to 'schedule' (unknown option 'delay')", q.schedule, q, "a", 1, nil, { delay = 5 })
      for _, id in ipairs({ 42, "42", "", true }) do
        assert_raises("bad argument #4 to 'schedule' (opts.id: a string with a non-digit expected",
                     q.schedule, q, "a", 1, nil, { id = id })
      end
      assert_raises("bad argument #4 to 'schedule' (opts.replace: boolean expected, got number)",
                   q.schedule, q, "a", 1, nil, { id = "a1", replace = 1 })
      assert_raises("bad argument #4 to 'schedule' (opts.replace needs opts.id)", q.schedule, q, "a", 1, nil, { replace = true })
      local _, opts_where = pcall(function() q:schedule("a", 1, nil, { id = 7 }) end)
      assert.matches("^spec/jobs_spec%.lua:%d+: bad argument #4", opts_where)   -- the caller's line
      assert_raises("calling 'schedule' on bad self", q.schedule, {}, "a", 1)
      local _, where = pcall(function() q:schedule("a", -1) end)
      assert.matches("^spec/jobs_spec%.lua:%d+: bad argument #2", where)   -- the caller's line
      assert_raises("bad argument #1 to 'cancel' (job id expected, got table)", q.cancel, q, {})
      assert_raises("bad argument #2 to 'handle' (function expected, got string)", q.handle, q, "a", "f")
      assert_raises("no handlers", q.start, q)
      q:handle("a", function() end)
      timer:stop()
      assert_raises("timer is stopped", q.start, q)
      assert.equals(0, redis_count("zcard", "{" .. key .. "}:due"))
      assert.equals(0, redis_count("hlen", "{" .. key .. "}:jobs"))
      timer:stop()
    end)
  end)

  describe("payloads", function()
    it("come back equal, every finite double included (issue 42)", function()
      local q, timer = new_queue()
      local got
      q:handle("p", function(payload) got = payload end)
      assert(q:start())
      local payload = {
        ratio = 1 + 14 * 0.05, third = 1 / 3, tenth = -0.1, tiny = 5e-324, big = 1.7976931348623157e308,
        sums = { 0.1 + 0.2, 2 ^ 53, -2 ^ 60, 123456789.123456789 },
        ["not an identifier"] = { deep = { 1e-300 } }, text = "\0\255\"\\/", flag = false, empty = {},
      }
      assert(q:schedule("p", 0, payload))
      run_until(timer, function() return got ~= nil end)
      assert.same(payload, got)
      assert.equals(1 + 14 * 0.05, got.ratio)
      assert.equals(0.1 + 0.2, got.sums[1])
      if math.tointeger then assert.equals("integer", math.type(got.sums[2])) end
      timer:stop()
    end)

    it("that JSON cannot give back equal are refused, naming where in the payload (issue 42)", function()
      local q, timer, _, key = new_queue()
      local function refused(where, payload)
        assert_raises("bad argument #3 to 'schedule' (JSON-encodable payload expected: " .. where,
                     q.schedule, q, "a", 1, payload)
      end
      refused("payload.retry.delay is nan", { retry = { delay = 0 / 0 } })
      refused("payload is inf", math.huge)
      refused("payload.list[2] is -inf", { list = { 1, -math.huge } })
      refused("payload.list is an array with a hole at [2]", { list = { 1, nil, 3 } })
      refused('payload["a b"].f is a function', { ["a b"] = { f = print } })
      refused("payload has the key 1.5", { [1.5] = true })
      refused("payload has both string and number keys", { 1, x = 2 })
      local loop = {}
      loop.self = loop
      refused("payload.self contains itself", loop)
      local deep = {}
      for _ = 1, 1000 do deep = { deep } end
      refused("payload is nested too deep", deep)
      if math.tointeger then
        refused("payload.n is 9007199254740993: beyond 2^53", { n = math.tointeger(2 ^ 53) + 1 })
      end
      assert.equals(0, redis_count("hlen", "{" .. key .. "}:jobs"))
      timer:stop()
    end)
  end)

  describe("running", function()
    it("runs a job once, not before it is due, with its payload and job record", function()
      local q, timer = new_queue()
      local runs = {}
      q:handle("greet", function(payload, job)
        runs[#runs + 1] = { payload = payload, job = job, at = socket.gettime() }
      end)
      assert(q:start())
      local before = socket.gettime()
      local id = assert(q:schedule("greet", 0.1, { user = 42, tags = { "a", "b" }, ratio = 0.5 }))
      assert.equals("string", type(id))
      run_until(timer, function() return #runs == 1 end)
      timer:run_for(0.2)
      assert.equals(1, #runs)
      local run = runs[1]
      assert.same({ user = 42, tags = { "a", "b" }, ratio = 0.5 }, run.payload)
      if math.type then assert.equals("integer", math.type(run.payload.user)) end
      assert.equals(id, run.job.id)
      assert.equals("greet", run.job.name)
      assert.equals(1, run.job.attempt)
      assert.is_true(run.at >= before + 0.1, "started early")
      assert.is_true(run.at >= run.job.due)
      assert.equals(1, q:stats().ran)
      timer:stop()
    end)

    it("runs jobs in due order, and a job scheduled by another queue object", function()
      local q, timer, _, key = new_queue()
      local other, other_timer = new_queue({ key = key })
      local order = {}
      q:handle("n", function(payload) order[#order + 1] = payload end)
      assert(q:start())
      for _, n in ipairs({ 3, 1, 2 }) do assert(q:schedule("n", n * 0.05, n)) end
      assert(other:schedule("n", 0.2, 4))
      run_until(timer, function() return #order == 4 end)
      assert.same({ 1, 2, 3, 4 }, order)
      timer:stop()
      other_timer:stop()
    end)

    it("retries a failing handler with backoff, then dead-letters it; requeue brings it back", function()
      local q, timer, errors = new_queue({ retry = { retries = 2, delay = 0.05, backoff = 2 } })
      local attempts, fail = {}, true
      q:handle("flaky", function(_, job)
        attempts[#attempts + 1] = { n = job.attempt, at = hwt.now() }
        if fail then error("down for now", 0) end
      end)
      assert(q:start())
      local id = assert(q:schedule("flaky", 0, { x = 1 }))
      run_until(timer, function() return q:stats().dead == 1 and settled(q) end)
      assert.equals(3, #attempts)                        -- retries + 1 calls
      assert.same({ 1, 2, 3 }, { attempts[1].n, attempts[2].n, attempts[3].n })
      assert.is_true(attempts[2].at - attempts[1].at >= 0.05)
      assert.is_true(attempts[3].at - attempts[2].at >= 0.1)    -- backoff 2
      assert.equals(3, #errors)
      assert.equals("down for now", errors[3].err)
      local dead = assert(q:dead())
      assert.equals(1, #dead)
      assert.same({ id = id, name = "flaky", payload = { x = 1 }, error = "down for now", attempts = 3 }, dead[1])
      assert.is_false(q:cancel(id))                      -- dead: nothing to cancel
      fail = false
      assert.is_true(q:requeue(id))
      assert.is_false(q:requeue(id))
      run_until(timer, function() return #attempts == 4 end)
      assert.equals(1, attempts[4].n)
      run_until(timer, function() return settled(q) end)
      assert.same({}, q:dead())
      timer:stop()
    end)

    it("counts nil, err from a handler as a failure, and no return value as success", function()
      local q, timer, errors = new_queue({ retry = { retries = 0 } })
      q:handle("soft", function() return nil, "refused" end)
      q:handle("quiet", function() end)
      assert(q:start())
      assert(q:schedule("soft", 0))
      assert(q:schedule("quiet", 0))
      run_until(timer, function() return q:stats().ran == 2 and settled(q) end)
      assert.equals(1, #errors)
      assert.equals("refused", errors[1].err)
      assert.equals(1, q:stats().dead)
      timer:stop()
    end)

    it("reports a job that no handler here knows, retries it, then dead-letters it", function()
      local q, timer, errors = new_queue({ retry = { retries = 1, delay = 0.01 } })
      q:handle("known", function() end)
      assert(q:start())
      local id = assert(q:schedule("unknown", 0, 7))
      run_until(timer, function() return q:stats().dead == 1 and settled(q) end)
      assert.equals(2, #errors)
      assert.matches("no handler for job 'unknown'", errors[1].err)
      assert.equals(id, errors[1].job.id)
      assert.equals("unknown", q:dead()[1].name)
      timer:stop()
    end)

    it("reports a malformed job and dead-letters it at once", function()
      local q, timer, errors, key = new_queue()
      q:handle("any", function() end)
      local client = assert(server:connect())
      local slot = "{" .. key .. "}:"
      client:hset(slot .. "jobs", "bad1", "{not json")
      client:zadd(slot .. "due", 0, "bad1")
      client:quit()
      assert(q:start())
      run_until(timer, function() return q:stats().dead == 1 and settled(q) end)
      assert.equals(1, #errors)
      assert.matches("malformed job", errors[1].err)
      local dead = q:dead()
      assert.equals("bad1", dead[1].id)
      assert.equals(1, dead[1].attempts)
      timer:stop()
    end)

    it("gives task errors to the timer's on_error when the queue has none", function()
      local seen = {}
      local timer = hwt.new({ tick = TICK, on_error = function(err) seen[#seen + 1] = err end })
      local q = jobs.redis({ timer = timer, key = fresh_key(), retry = { retries = 0 },
        connect = function() return connect_to() end })
      q:handle("boom", function() error("boom", 0) end)
      assert(q:start())
      assert(q:schedule("boom", 0))
      run_until(timer, function() return #seen == 1 end)
      assert.equals("boom", seen[1])
      timer:stop()
    end)

    it("gives back, unstarted, a job whose lease ran out while it waited here", function()
      local q, timer = new_queue({ lease = 0.3 })
      local runs = {}
      q:handle("slow", function(_, job)
        runs[#runs + 1] = job
        socket.sleep(0.5)                           -- longer than the lease
      end)
      q:handle("next", function(_, job) runs[#runs + 1] = job end)
      assert(q:start())
      assert(q:schedule("slow", 0))
      assert(q:schedule("next", 0))                 -- claimed in the same batch
      run_until(timer, function() return #runs == 2 and settled(q) end)
      timer:run_for(0.1)
      assert.equals(2, #runs)
      assert.same({ "slow", "next" }, { runs[1].name, runs[2].name })
      assert.equals(1, q:stats().expired)
      assert.equals(1, runs[2].attempt)             -- a give-back is not an attempt
      timer:stop()
    end)

    it("reports both a handler's error and the Redis outage its outcome met", function()
      local own = redis_server.start({ durable = true })
      finally(function() own:destroy() end)    -- stopped by PID, even when the spec fails
      local seen = {}
      local timer = hwt.new({ tick = TICK, on_error = function(err) seen[#seen + 1] = tostring(err) end })
      local q = jobs.redis({ timer = timer, key = fresh_key(), retry = { retries = 1, delay = 0.01 },
        connect = function() return connect_to(own) end })
      local calls = 0
      q:handle("j", function()
        calls = calls + 1
        if calls == 1 then
          own:stop("TERM")
          error("handler failed", 0)
        end
      end)
      assert(q:start())
      assert(q:schedule("j", 0))
      run_until(timer, function() return #seen >= 2 end)
      local joined = table.concat(seen, "\n")
      assert.matches("handler failed", joined)
      assert.matches("redis", joined)
      own:start()
      run_until(timer, function() return calls == 2 and settled(q) end)
      timer:stop()
    end)
  end)

  describe("cancel", function()
    it("is true once for a waiting job, which then never runs; false for unknown ids", function()
      local q, timer = new_queue()
      local ran = count_runs(q, "c")
      assert(q:start())
      local id = assert(q:schedule("c", 0.1))
      assert.is_true(q:cancel(id))
      assert.is_false(q:cancel(id))
      assert.is_false(q:cancel("no-such-job"))
      timer:run_for(0.3)
      assert.equals(0, ran())
      timer:stop()
    end)

    it("works from another queue object on the same key (another process)", function()
      local q, timer, _, key = new_queue()
      local canceller, canceller_timer = new_queue({ key = key })
      local ran = count_runs(q, "c")
      assert(q:start())
      local id = assert(q:schedule("c", 0.1))
      assert.is_true(canceller:cancel(id))
      timer:run_for(0.3)
      assert.equals(0, ran())
      timer:stop()
      canceller_timer:stop()
    end)

    it("is false for a job whose handler is running", function()
      local q, timer = new_queue()
      local result
      q:handle("c", function(_, job) result = q:cancel(job.id) end)
      assert(q:start())
      assert(q:schedule("c", 0))
      run_until(timer, function() return result ~= nil end)
      assert.is_false(result)
      timer:stop()
    end)
  end)

  describe("a worker", function()
    it("keeps one hwt timeout and makes one Redis request per poll_interval while idle", function()
      local q, timer = new_queue({ poll_interval = 0.2 })
      q:handle("x", function() end)
      assert(q:start())
      timer:run_for(0.1)
      assert.equals(1, timer:pending())
      local function evals()                       -- EVAL and EVALSHA calls so far
        local client = assert(server:connect())
        local stats = client:info("commandstats").commandstats
        client:quit()
        local calls = 0
        for _, name in ipairs({ "cmdstat_eval", "cmdstat_evalsha" }) do
          calls = calls + tonumber((stats[name] or "calls=0"):match("calls=(%d+)"))
        end
        return calls
      end
      local before = evals()
      timer:run_for(1)
      local requests = evals() - before
      assert.is_true(requests >= 3 and requests <= 6, requests .. " EVALs in 1 s")
      assert.equals(1, timer:pending())
      timer:stop()
    end)

    it("stops claiming after stop() and resumes after start()", function()
      local q, timer = new_queue()
      local ran = count_runs(q, "s")
      assert(q:start())
      q:stop()
      assert(q:schedule("s", 0))
      timer:run_for(0.4)
      assert.equals(0, ran())
      assert.is_false(q:stats().started)
      assert(q:start())
      run_until(timer, function() return ran() == 1 end)
      timer:stop()
    end)

    it("sends a script's text again when Redis lost it (SCRIPT FLUSH, a restart)", function()
      local q, timer = new_queue()
      local ran = count_runs(q, "x")
      assert(q:schedule("x", 0))
      local client = assert(server:connect())
      client:script("flush")
      client:quit()
      assert(q:schedule("x", 0))
      assert(q:start())
      run_until(timer, function() return ran() == 2 end)
      timer:stop()
    end)

    it("returns Redis' error replies as nil, err, 'refused', having written nothing", function()
      local q, timer, _, key = new_queue()
      local client = assert(server:connect())
      client:set("{" .. key .. "}:due", "not a sorted set")
      client:quit()
      local id, err, kind = q:schedule("x", 1)
      assert.is_nil(id)
      assert.matches("WRONGTYPE", err)
      assert.equals("refused", kind)
      assert.equals(0, redis_count("hlen", "{" .. key .. "}:jobs"))
      assert.is_nil(redis_count("get", "{" .. key .. "}:seq"))       -- no id was drawn either
      local cancelled, cancel_err, cancel_kind = q:cancel("1")
      assert.is_nil(cancelled)
      assert.matches("WRONGTYPE", cancel_err)
      assert.equals("refused", cancel_kind)
      timer:stop()
    end)

    it("backs off while Redis is down, reports the outage once, and resumes", function()
      local own = redis_server.start({ durable = true })
      finally(function() own:destroy() end)    -- stopped by PID, even when the spec fails
      local q, timer, errors = new_queue({ server = own, poll_interval = 0.2 })
      local ran = count_runs(q, "later")
      assert(q:start())
      assert(q:schedule("later", 0.5))
      own:stop("TERM")
      local id, err, kind = q:schedule("later", 0)     -- sent on the client that Redis closed
      assert.is_nil(id)
      assert.matches("redis", err)
      assert.equals("unknown", kind)
      local _, connect_err, connect_kind = q:schedule("later", 0)
      assert.matches("cannot connect", connect_err)
      assert.equals("refused", connect_kind)
      timer:run_for(1)
      assert.equals(0, ran())
      local outages = q:stats().redis_errors
      assert.is_true(outages >= 3 and outages <= 12, outages .. " attempts in 1 s")
      assert.equals(1, #errors)
      assert.matches("redis", errors[1].err)
      own:start()
      run_until(timer, function() return ran() == 1 end)
      timer:run_for(0.3)
      assert.equals(1, ran())               -- the refused schedule() wrote nothing
      timer:stop()
    end)
  end)

  describe("opts.id", function()
    it("names a job: the same id again changes nothing; replace = true changes its due time and payload", function()
      local q, timer, _, key = new_queue()
      local runs = {}
      q:handle("i", function(payload, job) runs[#runs + 1] = { payload = payload, job = job } end)
      assert.equals("order-7", q:schedule("i", 60, { v = 1 }, { id = "order-7" }))
      assert.equals("order-7", q:schedule("i", 0, { v = 2 }, { id = "order-7" }))
      assert(q:start())
      timer:run_for(0.3)
      assert.equals(0, #runs)                                  -- still due in 60 s
      assert.equals("order-7", q:schedule("i", 0.1, { v = 3 }, { id = "order-7", replace = true }))
      run_until(timer, function() return #runs == 1 and settled(q) end)
      assert.same({ v = 3 }, runs[1].payload)
      assert.equals("order-7", runs[1].job.id)
      assert.equals(0, redis_count("zcard", "{" .. key .. "}:due"))   -- one job, done: none left
      assert.equals("order-7", q:schedule("i", 0, { v = 4 }, { id = "order-7" }))   -- done: the id is free
      run_until(timer, function() return #runs == 2 and settled(q) end)
      assert.same({ v = 4 }, runs[2].payload)
      assert.equals(3, q:stats().scheduled)                    -- written three times
      timer:stop()
    end)

    it("replace = true on a running job: the job runs again, at its new time, with its new payload", function()
      local q, timer, _, key = new_queue()
      local runs = {}
      q:handle("r", function(payload, job)
        runs[#runs + 1] = { payload = payload, job = job }
        if payload.v == 1 then assert(q:schedule("r", 0.05, { v = 2 }, { id = "again", replace = true })) end
      end)
      assert(q:start())
      assert(q:schedule("r", 0, { v = 1 }, { id = "again" }))
      run_until(timer, function() return #runs == 2 and settled(q) end)
      timer:run_for(0.2)
      assert.equals(2, #runs)
      assert.same({ 1, 2 }, { runs[1].payload.v, runs[2].payload.v })
      assert.same({ "again", "again" }, { runs[1].job.id, runs[2].job.id })
      assert.equals(1, runs[2].job.attempt)
      assert.equals(0, q:stats().lost)
      assert.equals(0, redis_count("zcard", "{" .. key .. "}:due"))
      timer:stop()
    end)

    it("a dead job stays dead under its id, and replace = true brings it back", function()
      local q, timer = new_queue({ retry = { retries = 0 } })
      local runs = 0
      q:handle("d", function(payload)
        runs = runs + 1
        if payload.fail then error("failed", 0) end
      end)
      assert(q:start())
      assert(q:schedule("d", 0, { fail = true }, { id = "phoenix" }))
      run_until(timer, function() return q:stats().dead == 1 and settled(q) end)
      assert.equals("phoenix", q:schedule("d", 0, { fail = false }, { id = "phoenix" }))
      timer:run_for(0.3)
      assert.equals(1, runs)
      assert.equals("phoenix", q:dead()[1].id)
      assert.equals("phoenix", q:schedule("d", 0, { fail = false }, { id = "phoenix", replace = true }))
      run_until(timer, function() return runs == 2 and settled(q) end)
      assert.same({}, q:dead())
      timer:run_for(0.3)
      assert.equals(2, runs)
      timer:stop()
    end)
  end)

  describe("Redis replies that do not match the request (issue 42)", function()
    it("a stalled SCRIPT LOAD: schedule() is refused, writes nothing, and the next call gets its own reply", function()
      local q, timer, _, key = new_queue({ module = fresh_jobs_module(), timeout = 0.5 })
      local sleeper = stall(server, 0.75)
      local id, err, kind = q:schedule("x", 60)
      assert.is_nil(id, "took another command's reply as its id: " .. tostring(id))
      assert.matches("SCRIPT LOAD", err)
      assert.equals("refused", kind)
      local next_id = assert(q:schedule("x", 60))
      assert.matches("^%d+$", next_id)
      assert.equals(1, redis_count("zcard", "{" .. key .. "}:due"))
      assert.is_true(q:cancel(next_id))
      assert.is_false(q:cancel(next_id))
      sleeper:close()
      timer:stop()
    end)

    it("a stalled SCRIPT LOAD does not stop a worker: it reports, backs off and runs the next job", function()
      local q, timer, errors, key = new_queue({ module = fresh_jobs_module(), timeout = 0.5 })
      local other, other_timer = new_queue({ key = key })
      local ran = count_runs(q, "w")
      local sleeper = stall(server, 0.75)
      assert(q:start())
      timer:run_for(0.8)                    -- the first round's SCRIPT LOAD times out
      assert(other:schedule("w", 0))
      run_until(timer, function() return ran() == 1 end)
      assert.matches("SCRIPT LOAD", errors[1].err)
      sleeper:close()
      timer:stop()
      other_timer:stop()
    end)

    it("a late reply: 'unknown', the request did run, a retry with its id writes nothing more", function()
      local q, timer, _, key = new_queue({ timeout = 0.5 })
      assert(q:schedule("x", 60))          -- the script is loaded: the stall meets EVALSHA
      local sleeper = stall(server, 0.75)
      local id, err, kind = q:schedule("x", 60, { n = 1 }, { id = "late" })
      assert.is_nil(id)
      assert.matches("timeout", err)
      assert.equals("unknown", kind)
      assert.equals("late", q:schedule("x", 60, { n = 1 }, { id = "late" }))
      assert.equals(2, redis_count("zcard", "{" .. key .. "}:due"))
      assert.is_true(q:cancel("late"))     -- each reply is its own request's
      assert.is_false(q:cancel("late"))
      sleeper:close()
      timer:stop()
    end)

    it("a lost reply (Redis killed under the request): 'unknown', and a retry with its id writes it once", function()
      local own = redis_server.start()
      finally(function() own:destroy() end)    -- stopped by PID, even when the spec fails
      local q, timer, _, key = new_queue({ server = own, timeout = 2 })
      assert(q:schedule("x", 60))
      local sleeper = stall(own, 1)
      redis_server.execute(("(sleep 0.2; kill -KILL %d) >/dev/null 2>&1 &"):format(own.pid))
      local id, err, kind = q:schedule("x", 60, nil, { id = "lost" })
      assert.is_nil(id)
      assert.matches("closed", err)
      assert.equals("unknown", kind)
      sleeper:close()
      own:stop("KILL")
      own:start()
      for _ = 1, 2 do assert.equals("lost", q:schedule("x", 60, nil, { id = "lost" })) end
      local client = assert(own:connect())
      assert.equals(1, tonumber(client:zcard("{" .. key .. "}:due")))
      client:quit()
      timer:stop()
    end)

    it("someone else's reply (a client handed over owing one): 'unknown', never taken as the answer", function()
      local warm = new_queue()
      assert(warm:schedule("x", 60))       -- the script is loaded: the first call is EVALSHA
      local owing = true
      local q, timer, _, key = new_queue({ connect = function()
        local client = connect_to()
        if owing then                       -- INCR sent, its reply left unread
          owing = false
          js.send_unread(client, { "INCR", "somewhere" })
        end
        return client
      end })
      local id, err, kind = q:schedule("x", 60)
      assert.is_nil(id, "took another command's reply as its id: " .. tostring(id))
      assert.matches("not this request's", err)
      assert.equals("unknown", kind)
      local next_id = assert(q:schedule("x", 60))
      assert.equals(2, redis_count("zcard", "{" .. key .. "}:due"))   -- the first one ran too
      assert.is_true(q:cancel(next_id))
      assert.is_false(q:cancel(next_id))
      timer:stop()
    end)

    it("a release() that raises does not stop a worker: it is reported and the round goes on", function()
      local raised = false
      local q, timer, errors, key = new_queue({ release = function(client)
        if not raised then
          raised = true
          error("release failed", 0)
        end
        client:quit()
      end })
      local other, other_timer = new_queue({ key = key })
      local ran = count_runs(q, "r")
      assert(q:start())
      timer:run_for(0.05)
      assert.is_true(raised)
      assert(other:schedule("r", 0))
      run_until(timer, function() return ran() == 1 end)
      assert.matches("release failed", errors[1].err)
      timer:stop()
      other_timer:stop()
    end)

    it("a round that raises (a reply of the wrong shape) does not stop a worker: reported, backed off, on", function()
      local q, timer, errors, key = new_queue({ connect = connect_corrupting_once() })
      local other, other_timer = new_queue({ key = key })
      local ran = count_runs(q, "s")
      assert(q:start())
      timer:run_for(0.05)
      assert.equals(1, #errors)
      assert(other:schedule("s", 0))
      run_until(timer, function() return ran() == 1 end)
      assert.matches("round failed", errors[1].err)
      timer:stop()
      other_timer:stop()
    end)

    it("a round that raised does not hide the Redis outage that follows it", function()
      local own = redis_server.start()
      finally(function() own:destroy() end)    -- stopped by PID, even when the spec fails
      local q, timer, errors = new_queue({ server = own, connect = connect_corrupting_once(own) })
      count_runs(q, "o")
      assert(q:start())
      timer:run_for(0.05)                   -- the first round raises; the next is 0.1 s later
      assert.equals(1, #errors)
      own:stop("TERM")
      run_until(timer, function() return #errors == 2 end)
      assert.matches("redis", errors[2].err)
      timer:stop()
    end)
  end)
end)
