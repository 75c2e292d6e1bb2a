-- The nginx half of test/host/jobs_nginx_test.sh. Each worker runs the queue
-- TO_NGINX (its handler records each run over a lua-resty-redis cosocket) and
-- schedules into / cancels from TO_PLAIN on request.
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local resty_redis = require("nginx.redis")        -- Debian's lua-resty-redis
local common = require("jobs_test")
local ffi = require("ffi")

ffi.cdef [[
typedef struct { long tv_sec; long tv_usec; } jobs_test_timeval;
int gettimeofday(jobs_test_timeval *tv, void *tz);
]]

local M = {}
local redis_port
local worker_timer
local to_plain                                     -- schedule and cancel only

-- ngx.now() has milliseconds only: the never-early check needs microseconds.
local function now_us()
  local tv = ffi.new("jobs_test_timeval")
  ffi.C.gettimeofday(tv, nil)
  return tonumber(tv.tv_sec) * 1e6 + tonumber(tv.tv_usec)
end

-- A new client each call, as a cosocket belongs to the light thread or
-- request that made it; it waits `timeout_ms` (default 2000) for a reply.
local function connect(timeout_ms)
  local red = resty_redis:new()
  red:set_timeout(timeout_ms or 2000)
  local ok, err = red:connect("127.0.0.1", redis_port)
  if not ok then return nil, err end
  return red
end

local function release(red) red:set_keepalive(10000, 32) end

local function log_error(what)
  return function(err) ngx.log(ngx.ERR, what, tostring(err)) end
end

local function rpush(list, value)
  local red, err = connect()
  if not red then return nil, err end
  local n, push_err = red:rpush(list, value)
  if not n then red:close(); return nil, push_err end
  release(red)
  return n
end

local function record(payload, job)
  local start = now_us()
  ngx.update_time()
  local line = common.record(job, payload, start, ngx.now() * 1000, ngx.worker.pid())
  return rpush(common.lists(common.TO_NGINX).runs, line)
end

local function queue(timer, key, connect_to_redis, poll_interval)
  return jobs.redis { timer = timer, key = key, connect = connect_to_redis or connect, release = release,
                      poll_interval = poll_interval or 0.2, on_error = log_error("jobs " .. key .. ": ") }
end

function M.init_worker(port)
  redis_port = port
  -- 1 ms ticks: a job then starts ~1 ms after its due time, not ~10, so
  -- that a claim even a few ms early shows as an early start.
  local timer = hwt.new { tick = 0.001, on_error = log_error("hwt task: ") }
  worker_timer = timer
  assert(require("hwt.ngx").start(timer))
  local runner = queue(timer, common.TO_NGINX)
  runner:handle("record", record)
  assert(runner:start())
  -- Rounds 30 s apart: its jobs start on time only through its listener.
  local listening = queue(timer, common.TO_LISTENING, nil, 30)
  listening:handle("record", function(payload, job)
    local start = now_us()
    ngx.update_time()
    local line = common.record(job, payload, start, ngx.now() * 1000, ngx.worker.pid())
    return rpush(common.lists(common.TO_LISTENING).runs, line)
  end)
  assert(listening:start())
  to_plain = queue(timer, common.TO_PLAIN)
end

-- /schedule?n=N&min=S&spread=S: N jobs into TO_PLAIN, due over
-- [min, min + spread); the body lists their ids, one a line.
function M.schedule()
  local args = ngx.req.get_uri_args()
  local n, min, spread = tonumber(args.n) or 1, tonumber(args.min) or 0, tonumber(args.spread) or 0
  local lists = common.lists(common.TO_PLAIN)
  for i = 1, n do
    local delay = min + spread * (i - 1) / n
    local id, err = to_plain:schedule("record", delay, common.payload(i, delay, now_us()))
    if not id then return ngx.say("error ", tostring(err)) end
    assert(rpush(lists.expected, id))
    ngx.say(id)
  end
end

-- /cancel?id=ID: what q:cancel returned.
function M.cancel()
  local id = ngx.var.arg_id
  local cancelled, err = to_plain:cancel(id)
  if cancelled then assert(rpush(common.lists(common.TO_PLAIN).cancelled, id)) end
  ngx.say(tostring(cancelled), err and " " .. err or "")
end

-- /faults: what lua-resty-redis' failures become (issue 42). The body is
-- "KIND KIND ID N": the kind of an error reply (WRONGTYPE), the kind of a
-- request whose reply came after the client's 0.3 s (Redis stalled 0.6 s by
-- DEBUG SLEEP), the id a retry of that request with its opts.id returned,
-- and how many jobs Redis then holds.
function M.faults()
  local key = "jobs_test:faults:" .. ngx.worker.pid()
  local due = "{" .. key .. "}:due"
  local red = assert(connect())
  assert(red:set(due, "not a sorted set"))
  local q = queue(worker_timer, key, function() return connect(300) end)
  local _, _, refused = q:schedule("record", 60)
  assert(red:del(due))
  local sleeper = ngx.socket.tcp()
  assert(sleeper:connect("127.0.0.1", redis_port))
  assert(sleeper:send("DEBUG SLEEP 0.6\r\n"))
  ngx.sleep(0.05)
  local _, _, late = q:schedule("record", 60, nil, { id = "faults-1" })
  ngx.sleep(0.6)
  local id = q:schedule("record", 60, nil, { id = "faults-1" })
  ngx.say(refused, " ", late, " ", tostring(id), " ", red:zcard(due))
  sleeper:close()
  assert(red:del(due, "{" .. key .. "}:jobs"))
  release(red)
end

return M
