-- hwt_demo: hwt timeouts inside an nginx worker (lua-nginx-module).
--
-- One hwt timer per worker, created in init_worker_by_lua (never in
-- init_by_lua: see README.md next to this file) and driven by hwt.ngx: each
-- due task runs in a light thread of its own, where cosockets, ngx.sleep and
-- ngx.thread.spawn work. Every hwt timeout lives in this worker's Lua VM, so
-- the request handlers below (which run in the same worker:
-- worker_processes 1) see the same module table.
local hwt = require("hwt")
local hwt_ngx = require("hwt.ngx")

local M = {
  timer = nil,     -- the worker's hwt timer
  limited = nil,   -- a second timer, driven with concurrency = LIMITED_CONCURRENCY
  fired = {},      -- ids of the timeouts that ran, in order
  timeouts = {},   -- id -> Timeout, for /cancel
  bulk_timeouts = {},  -- Timeouts made by /bulk, for /cancel_all
  io_results = {},     -- id -> what the /io task found
}

local LIMITED_CONCURRENCY = 4

local function log_task_error(err)
  ngx.log(ngx.ERR, "hwt task failed: ", tostring(err))
end

local function on_exit(never_ran)
  ngx.log(ngx.NOTICE, "hwt_demo: on_exit, ", #never_ran, " never ran")
end

-- init_worker_by_lua_block { require("hwt_demo").init_worker() }
function M.init_worker()
  if M.timer then return end
  M.timer = hwt.new({ on_error = log_task_error })
  M.limited = hwt.new({ on_error = log_task_error })
  assert(hwt_ngx.start(M.timer, { on_exit = on_exit }))
  assert(hwt_ngx.start(M.limited, { concurrency = LIMITED_CONCURRENCY }))
end

local function on_fire(_, id)
  M.timeouts[id] = nil
  M.fired[#M.fired + 1] = id
  ngx.log(ngx.INFO, "hwt_demo: fired ", id)
end

local function bad_request(message)
  ngx.status = ngx.HTTP_BAD_REQUEST
  ngx.say(message)
  return ngx.exit(ngx.HTTP_BAD_REQUEST)
end

-- GET /schedule?id=X&delay=S
function M.schedule()
  local args = ngx.req.get_uri_args()
  local id, delay = args.id, tonumber(args.delay or 1)
  if type(id) ~= "string" or id == "" then return bad_request("id expected") end
  if not delay or delay < 0 then return bad_request("delay expected") end
  local old = M.timeouts[id]
  if old then old:cancel() end
  local t, err = M.timer:timeout(delay, on_fire, id)
  if not t then return bad_request(err) end
  M.timeouts[id] = t
  ngx.say("scheduled ", id, " in ", delay)
end

-- GET /cancel?id=X -> true (it will never run) or false
function M.cancel()
  local id = ngx.req.get_uri_args().id
  local t = M.timeouts[id]
  M.timeouts[id or ""] = nil
  ngx.say(tostring(t ~= nil and t:cancel()))
end

-- GET /fired -> one "fired X" line per timeout that ran
function M.list_fired()
  for _, id in ipairs(M.fired) do ngx.say("fired ", id) end
end

local function bulk_task() end

-- GET /bulk?n=N&delay=S -> schedules N timeouts S seconds away (default 60)
function M.bulk()
  local args = ngx.req.get_uri_args()
  local n, delay = tonumber(args.n or 1000), tonumber(args.delay or 60)
  if not n or n < 0 or n % 1 ~= 0 then return bad_request("n expected") end
  if not delay or delay < 0 then return bad_request("delay expected") end
  local bulk, made = M.bulk_timeouts, 0
  for _ = 1, n do
    local t, err = M.timer:timeout(delay, bulk_task)
    if not t then ngx.say("refused: ", err); break end
    bulk[#bulk + 1] = t
    made = made + 1
  end
  ngx.say("scheduled ", made)
end

-- GET /pending -> timer:pending()
function M.pending()
  ngx.say(M.timer:pending())
end

-- GET /cancel_all -> how many timeouts this call cancelled
function M.cancel_all()
  local cancelled = 0
  for _, t in ipairs(M.bulk_timeouts) do
    if t:cancel() then cancelled = cancelled + 1 end
  end
  M.bulk_timeouts = {}
  for id, t in pairs(M.timeouts) do
    if t:cancel() then cancelled = cancelled + 1 end
    M.timeouts[id] = nil
  end
  ngx.say("cancelled ", cancelled)
end

-- GET /stats -> timer:stats(), one "key value" a line
function M.stats()
  local keys = {}
  for key in pairs(M.timer:stats()) do keys[#keys + 1] = key end
  table.sort(keys)
  local stats = M.timer:stats()
  for _, key in ipairs(keys) do ngx.say(key, " ", tostring(stats[key])) end
end

-- GET /ngx_timer_at?n=N&delay=S -> the same load on ngx.timer.at, for
-- comparison: it refuses past lua_max_pending_timers (1024 by default), and
-- has no cancel (lua-nginx-module#1615), so these stay pending for S seconds
-- (until the worker exits, when they run with premature = true).
local function noop(premature) end

function M.ngx_timer_at()
  local args = ngx.req.get_uri_args()
  local n, delay = tonumber(args.n or 1100), tonumber(args.delay or 60)
  if not n or n < 0 then return bad_request("n expected") end
  local ok_count, refused, first_err = 0, 0, nil
  for _ = 1, n do
    local ok, err = ngx.timer.at(delay, noop)
    if ok then
      ok_count = ok_count + 1
    else
      refused = refused + 1
      first_err = first_err or err
    end
  end
  ngx.say("ok ", ok_count)
  ngx.say("refused ", refused)
  ngx.say("err ", tostring(first_err))
end

-- ---- tasks that do I/O ---------------------------------------------------

-- GET /upstream: what the /io task fetches over a cosocket.
function M.upstream()
  ngx.say("upstream says hi")
end

-- Fetches /upstream of this nginx over a cosocket: the status line and body.
local function fetch_upstream(port)
  local sock = ngx.socket.tcp()
  sock:settimeout(2000)
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return nil, "connect: " .. err end
  sock:send("GET /upstream HTTP/1.0\r\nHost: localhost\r\n\r\n")
  local response, read_err = sock:receive("*a")
  sock:close()
  if not response then return nil, "receive: " .. read_err end
  return response:match("^HTTP/1%.%d (%d+)"), response:match("\r\n\r\n(.*)\n$")
end

local function io_task(_, id, port)
  local slept_from = ngx.now()
  ngx.sleep(0.05)
  ngx.update_time()
  local slept = ngx.now() - slept_from >= 0.04
  local status, body = fetch_upstream(port)
  local thread = ngx.thread.spawn(function() return "spawned ran" end)
  local _, spawned = ngx.thread.wait(thread)
  M.io_results[id] = ("slept %s, status %s, body %s, %s"):format(
    tostring(slept), tostring(status), tostring(body), tostring(spawned))
end

-- GET /io?id=X&delay=S: a task that sleeps, fetches /upstream and spawns.
function M.io()
  local args = ngx.req.get_uri_args()
  local id, delay = args.id, tonumber(args.delay or 0.1)
  if type(id) ~= "string" or id == "" then return bad_request("id expected") end
  M.timer:timeout(delay, io_task, id, tonumber(ngx.var.server_port))
  ngx.say("scheduled ", id)
end

-- GET /io_result?id=X
function M.io_result()
  ngx.say(M.io_results[ngx.req.get_uri_args().id] or "not yet")
end

-- ---- many tasks that wait at once -----------------------------------------

local sleepers = { finished = 0, late_max = 0 }

local function sleeper(_, deadline, seconds)
  ngx.sleep(seconds)
  local late = hwt.now() - deadline
  sleepers.finished = sleepers.finished + 1
  if late > sleepers.late_max then sleepers.late_max = late end
end

-- GET /sleepers?n=N&delay=D&sleep=S: N tasks due together, each sleeping S.
function M.sleepers()
  local args = ngx.req.get_uri_args()
  local n, delay, seconds = tonumber(args.n or 200), tonumber(args.delay or 0.3), tonumber(args.sleep or 0.2)
  sleepers.finished, sleepers.late_max = 0, 0
  local deadline = hwt.now() + delay
  for _ = 1, n do M.timer:timeout(delay, sleeper, deadline, seconds) end
  ngx.say("scheduled ", n)
end

-- GET /sleepers_report -> "finished N late_max_ms X" (finish - deadline)
function M.sleepers_report()
  ngx.say(("finished %d late_max_ms %d"):format(sleepers.finished, math.floor(sleepers.late_max * 1000)))
end

-- ---- cancel half of many -------------------------------------------------

local numbered = { timeouts = {}, cancelled = {}, fired = 0, early = 0, fired_cancelled = 0 }

local function numbered_task(_, i, deadline)
  numbered.fired = numbered.fired + 1
  if hwt.now() < deadline then numbered.early = numbered.early + 1 end
  if numbered.cancelled[i] then numbered.fired_cancelled = numbered.fired_cancelled + 1 end
end

-- GET /numbered?n=N&delay=S: timeouts 1..N, S seconds away.
function M.numbered()
  local args = ngx.req.get_uri_args()
  local n, delay = tonumber(args.n or 5000), tonumber(args.delay or 1)
  numbered = { timeouts = {}, cancelled = {}, fired = 0, early = 0, fired_cancelled = 0 }
  local deadline = hwt.now() + delay
  for i = 1, n do numbered.timeouts[i] = M.timer:timeout(delay, numbered_task, i, deadline) end
  ngx.say("scheduled ", n)
end

-- GET /numbered_cancel_odd -> "cancelled K"
function M.numbered_cancel_odd()
  local cancelled = 0
  for i = 1, #numbered.timeouts, 2 do
    if numbered.timeouts[i]:cancel() then
      numbered.cancelled[i] = true
      cancelled = cancelled + 1
    end
  end
  ngx.say("cancelled ", cancelled)
end

-- GET /numbered_report -> "fired F early E fired_cancelled C"
function M.numbered_report()
  ngx.say(("fired %d early %d fired_cancelled %d"):format(numbered.fired, numbered.early,
                                                          numbered.fired_cancelled))
end

-- ---- memory across many tasks -----------------------------------------------

local churn = { scheduled = 0, done = 0 }

local function churn_task()
  ngx.sleep(0.001)                 -- a task that yields, as I/O would
  churn.done = churn.done + 1
end

-- GET /churn?n=N&spread=S: N tasks due over the next S seconds.
function M.churn()
  local args = ngx.req.get_uri_args()
  local n, spread = tonumber(args.n or 100000), tonumber(args.spread or 1)
  churn = { scheduled = n, done = 0 }
  collectgarbage()                 -- each run starts from the same heap: RSS is a high-water mark
  for i = 1, n do M.timer:timeout(spread * i / n, churn_task) end
  ngx.say("scheduled ", n)
end

-- GET /churn_report -> "done D of N"
function M.churn_report()
  ngx.say(("done %d of %d"):format(churn.done, churn.scheduled))
end

-- GET /memory -> "rss_kb R peak_kb P lua_kb L" of this worker, after a full
-- collection (peak: the most RSS it ever had, VmHWM)
function M.memory()
  collectgarbage()
  collectgarbage()
  local status = io.open("/proc/self/status")
  local text = status and status:read("*a") or ""
  if status then status:close() end
  ngx.say(("rss_kb %s peak_kb %s lua_kb %d"):format(tostring(text:match("VmRSS:%s*(%d+)")),
    tostring(text:match("VmHWM:%s*(%d+)")), math.floor(collectgarbage("count"))))
end

-- ---- a driver with few slots -----------------------------------------------

local limited = { done = 0, running = 0, max_running = 0 }

local function limited_task(_, seconds)
  limited.running = limited.running + 1
  if limited.running > limited.max_running then limited.max_running = limited.running end
  ngx.sleep(seconds)
  limited.running = limited.running - 1
  limited.done = limited.done + 1
end

-- GET /limited?n=N&sleep=S: N tasks due now on the timer driven with
-- concurrency = LIMITED_CONCURRENCY, each sleeping S.
function M.limited_run()
  local args = ngx.req.get_uri_args()
  local n, seconds = tonumber(args.n or 20), tonumber(args.sleep or 0.1)
  limited = { done = 0, running = 0, max_running = 0 }
  for _ = 1, n do M.limited:timeout(0, limited_task, seconds) end
  ngx.say("scheduled ", n)
end

-- GET /limited_report -> "done D max_running M concurrency C"
function M.limited_report()
  ngx.say(("done %d max_running %d concurrency %d"):format(limited.done, limited.max_running,
                                                           LIMITED_CONCURRENCY))
end

return M
