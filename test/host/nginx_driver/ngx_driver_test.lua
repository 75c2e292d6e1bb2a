-- ngx_driver_test: the handlers of test/host/nginx_driver/nginx.conf. Each
-- scenario has a timer and a driver of its own, so that one that stalls
-- stalls no other; each writes its outcome to `results`, read by /report.
-- The drivers are started with start() and stopped with stop(), the names
-- that hwt 0.2 has too, so that the same scenarios run against it.
local hwt = require("hwt")
local hwt_ngx = require("hwt.ngx")

local M = {
  results = {},    -- scenario -> a line, for /report
}

local function args()
  return ngx.req.get_uri_args()
end

local function number_arg(name, default)
  local value = tonumber(args()[name] or default)
  if not value then
    ngx.status = ngx.HTTP_BAD_REQUEST
    ngx.say(name, " expected")
    return ngx.exit(ngx.HTTP_BAD_REQUEST)
  end
  return value
end

local function ms(seconds)
  return math.floor(seconds * 1000 + 0.5)
end

-- init_worker_by_lua_block { require("ngx_driver_test").init_worker() }
-- No timer has an on_error: a task's error goes where the driver sends it.
function M.init_worker()
  if M.tasks then return end
  M.tasks = hwt.new()              -- /sleep_task, /failing_task
  M.sleepy = hwt.new()             -- /sleepers, /fresh: lua_max_running_timers
  M.pending = hwt.new()            -- /fill_pending: lua_max_pending_timers
  M.connections = hwt.new()        -- /exhaust: worker_connections
  for _, timer in ipairs({ M.tasks, M.sleepy, M.pending, M.connections }) do
    assert(hwt_ngx.start(timer))
  end
end

-- GET /report?name=X -> what scenario X found, or "not yet"
function M.report()
  ngx.say(M.results[args().name] or "not yet")
end

-- ---- what a task may do ---------------------------------------------------------

-- GET /sleep_task?seconds=S: a task calls timer:sleep(S).
-- Reports "sleep_task": "returned R after N ms".
function M.sleep_task()
  local seconds = number_arg("seconds", 0.2)
  M.results.sleep_task = nil
  M.tasks:timeout(0, function()
    ngx.update_time()
    local from = ngx.now()
    local returned = M.tasks:sleep(seconds)
    ngx.update_time()
    M.results.sleep_task = ("returned %s after %d ms"):format(tostring(returned), ms(ngx.now() - from))
  end)
  ngx.say("scheduled")
end

-- GET /failing_task?word=W: a task raises W (the timer has no on_error).
function M.failing_task()
  local word = args().word or "failing task"
  M.tasks:timeout(0, function() error(word) end)
  ngx.say("scheduled")
end

-- GET /stop_in_task: five timeouts due together on a timer of their own;
-- the first task to run calls driver:stop(). Then the timer is driven again
-- (attach, where there is one), and the others run.
-- Answers "ran R pending P; attached again: ran R2".
function M.stop_in_task()
  local timer = hwt.new()
  local driver = assert(hwt_ngx.start(timer))
  local ran = 0
  for _ = 1, 5 do
    timer:timeout(0.05, function()
      ran = ran + 1
      if ran == 1 then driver:stop() end
    end)
  end
  ngx.sleep(0.3)
  local line = ("ran %d pending %d"):format(ran, timer:pending())
  local attach = hwt_ngx.attach or hwt_ngx.start
  local again = assert(attach(timer))
  ngx.sleep(0.2)
  local detach = again.detach or again.stop
  detach(again)
  timer:stop()
  ngx.say(line, "; attached again: ran ", ran)
end

-- GET /surface: attach/detach and start/stop are one driver's two names.
function M.surface()
  local timer = hwt.new()
  local driver = assert(hwt_ngx.attach(timer))
  local detached, again = driver:detach(), driver:stop()
  local restarted = assert(hwt_ngx.start(timer))
  local stopped = restarted:stop()
  local ok, err = pcall(hwt_ngx.attach, timer, { concurency = 1 })
  timer:stop()
  ngx.say(("detach %s, then stop %s; start again, stop %s; %s"):format(
    tostring(detached), tostring(again), tostring(stopped), ok and "no error" or err))
end

-- ---- lua_max_running_timers: tasks that sleep fill it ---------------------------

local sleepers

-- GET /sleepers?n=N&sleep=S&spread=D: N tasks due over the next D seconds
-- (each wake starts those of one tick, in a timer context of its own), each
-- in ngx.sleep(S): with lua_max_running_timers 16, nginx soon drops wakes.
function M.sleepers()
  local n, seconds, spread = number_arg("n", 400), number_arg("sleep", 1), number_arg("spread", 0.4)
  sleepers = { n = n, started = 0, finished = 0, starts = {}, first_finish = nil }
  local function sleeper()
    sleepers.started = sleepers.started + 1
    sleepers.starts[#sleepers.starts + 1] = hwt.now()
    ngx.sleep(seconds)
    sleepers.finished = sleepers.finished + 1
    sleepers.first_finish = sleepers.first_finish or hwt.now()
  end
  for i = 1, n do M.sleepy:timeout(spread * i / n, sleeper) end
  ngx.say("scheduled ", n)
end

-- The first start at or after `at`, in seconds after `at`; nil when none.
local function first_start_after(at)
  local first
  for _, started in ipairs(sleepers.starts) do
    if started >= at and (first == nil or started < first) then first = started end
  end
  return first and first - at
end

-- GET /fresh?delay=S: one more timeout on the same timer, while wakes are
-- dropped. Reports "fresh": "ran N ms after its deadline".
function M.fresh()
  local delay = number_arg("delay", 0.1)
  local due = hwt.now() + delay
  M.results.fresh = nil
  M.sleepy:timeout(delay, function()
    M.results.fresh = ("ran %d ms after its deadline"):format(ms(hwt.now() - due))
  end)
  ngx.say("scheduled")
end

-- GET /sleepers_report -> "finished F of N, restarted R ms after room"
-- (room: the first sleeper finished; R: until the next task started).
function M.sleepers_report()
  local restart = sleepers.first_finish and first_start_after(sleepers.first_finish)
  ngx.say(("finished %d of %d, restarted %s ms after room"):format(
    sleepers.finished, sleepers.n, restart and tostring(ms(restart)) or "never"))
end

-- ---- lua_max_pending_timers: ngx.timer.at of the worker's own fill it -----------

local function nothing() end

-- GET /fill_pending?delay=D: ngx.timer.at(D) until nginx refuses, then a
-- timeout due in 0.1 s. Reports "pending": "ran R ms after room" (room: the
-- fill timers fall due).
function M.fill_pending()
  local delay = number_arg("delay", 1.5)
  local filled, refusal = 0, nil
  while not refusal do
    local ok, err = ngx.timer.at(delay, nothing)
    if ok then filled = filled + 1 else refusal = err end
  end
  local room = hwt.now() + delay
  M.results.pending = nil
  M.pending:timeout(0.1, function()
    M.results.pending = ("ran %d ms after room"):format(ms(hwt.now() - room))
  end)
  ngx.say("filled ", filled, " until: ", refusal)
end

-- ---- worker_connections: this request's cosockets use them up -------------------

-- GET /exhaust?hold=H: connects to this server until nginx has no
-- connection left (each connection takes two: ours and the accepted one),
-- schedules a timeout due in 0.2 s, holds them H seconds, closes them.
-- Reports "connections": "ran R ms after room" (room: they are closed).
function M.exhaust()
  local hold = number_arg("hold", 1.5)
  local port = tonumber(ngx.var.server_port)
  local sockets, refusal = {}, nil
  while not refusal and #sockets < 1000 do
    local sock = ngx.socket.tcp()
    sock:settimeout(1000)
    local ok, err = sock:connect("127.0.0.1", port)
    if ok then sockets[#sockets + 1] = sock else refusal = err end
  end
  local room
  M.results.connections = nil
  M.connections:timeout(0.2, function()
    M.results.connections = room and ("ran %d ms after room"):format(ms(hwt.now() - room))
                            or "ran while the connections were held"
  end)
  ngx.sleep(hold)
  for _, sock in ipairs(sockets) do sock:close() end
  room = hwt.now()
  ngx.say("held ", #sockets, " until: ", tostring(refusal))
end

return M
