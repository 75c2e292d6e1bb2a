-- hwt.jobs' listener in hosts with an event loop, against a real
-- redis-server started on 127.0.0.1 for this file: on a timer driven by
-- hwt.luv (a real libuv loop) and by hwt.cqueues (a real controller), an
-- idle worker hears of a job that another queue object (another process)
-- schedules, and runs it long before its next round; stopping the queue
-- leaves the host with nothing of the listener's. (nginx: test/host/jobs_nginx_test.sh.)
package.path = "test/host/?.lua;" .. package.path
local hwt = require("hwt")
local redis_server = require("redis_server")
local js = require("jobs_support")
local new_queue = js.new_queue

local POLL_INTERVAL = 30        -- seconds: a worker's next round, long after the bound below
local BOUND = 10                -- seconds: the job runs within this, or the listener failed
local SCHEDULE_AFTER = 0.3      -- seconds after the loop starts: the first round has run

local server

-- A worker on `timer` and, from another queue object on its key, a job due
-- 0.1 s after SCHEDULE_AFTER: the queue, whether it ran, and the scheduler.
-- shards = n: the queue has n shards, and the job goes to the last one.
local function worker_and_job(timer, shards)
  local q, _, errors, key = new_queue({ timer = timer, poll_interval = POLL_INTERVAL, shards = shards })
  local ran = false
  q:handle("x", function() ran = true end)
  assert(q:start())
  local other = new_queue({ key = key, shards = shards })
  local id
  for k = 1, 100 do
    if not shards or require("hwt.jobs_shards").index_of("job-" .. k, shards) == shards then id = "job-" .. k break end
  end
  local function schedule() assert(other:schedule("x", 0.1, "soon", { id = id })) end
  return q, function() return ran end, schedule, errors
end

describe("hwt.jobs' listener in event loops #redis", function()
  lazy_setup(function()
    server = redis_server.start()
    js.use(server)
  end)
  lazy_teardown(function() server:destroy() end)

  for _, shards in ipairs({ false, 3 }) do
    it("hwt.luv: an idle worker hears of another process's job at once"
       .. (shards and " (a queue over " .. shards .. " shards: a listener each)" or ""), function()
      local uv = require("luv")
      local timer = hwt.new({ tick = js.TICK })
      local driver = assert(require("hwt.luv").attach(timer))
      local q, ran, schedule = worker_and_job(timer, shards or nil)
      local started = hwt.now()
      local scheduler, checker = uv.new_timer(), uv.new_timer()
      scheduler:start(SCHEDULE_AFTER * 1000, 0, schedule)
      checker:start(10, 10, function()
        if ran() or hwt.now() - started > BOUND then uv.stop() end
      end)
      uv.run()
      assert.is_true(ran(), "the job did not run before the worker's next round")
      scheduler:close()
      checker:close()
      q:stop()
      driver:detach()
      timer:stop()
      uv.run("nowait")                              -- the close callbacks
      local left = 0
      uv.walk(function() left = left + 1 end)
      assert.equals(0, left)                        -- the listener's poll handle is gone too
    end)
  end

  it("hwt.cqueues: an idle worker hears of another process's job at once", function()
    local cqueues = require("cqueues")
    local cq = cqueues.new()
    local timer = hwt.new({ tick = js.TICK })
    local driver = assert(require("hwt.cqueues").attach(timer, { controller = cq }))
    local q, ran, schedule = worker_and_job(timer)
    local started = hwt.now()
    assert(cq:wrap(function()
      cqueues.sleep(SCHEDULE_AFTER)
      schedule()
    end))
    while not ran() and hwt.now() - started < BOUND do assert(cq:step(0.05)) end
    assert.is_true(ran(), "the job did not run before the worker's next round")
    q:stop()
    driver:detach()
    timer:stop()
    for _ = 1, 10 do assert(cq:step(0)) end
    assert.is_true(cq:empty())                    -- the listener's coroutine ended too
  end)
end)
