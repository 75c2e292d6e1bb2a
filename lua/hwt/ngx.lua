-- hwt.ngx: drives an hwt timer from nginx's own event loop (lua-nginx-module).
--
--   init_worker_by_lua_block {
--     local timer = hwt.new()
--     local driver = assert(require("hwt.ngx").attach(timer, { concurrency = 256,
--       on_exit = function(never_ran) ... end }))
--   }
--
-- attach(timer [, opts]) returns a driver, or nil and a message outside
-- lua-nginx-module or when nginx refuses the first ngx.timer.at; driver:
-- detach() stops driving (the surface every driver has: hwt.driver).
-- start() and driver:stop() are the names hwt 0.2 gave them.
--
-- Lua cannot add hwt's fd to nginx's event loop, so the driver keeps one
-- pending ngx.timer.at (a "wake") armed at timer:next_due(): while nothing is
-- due, nginx is not woken for hwt. A request that schedules an earlier
-- deadline reaches the driver through timer:on_earlier(), which arms an
-- earlier wake (an ngx.timer.at cannot be cancelled: the later one fires for
-- nothing, once). With nothing pending at all, one wake is still armed, ~24.8
-- days ahead (nginx's longest timer), so that a graceful quit reaches it.
--
-- Each due task runs in a light thread of its own (ngx.thread.spawn), started
-- from the wake that found it due: cosockets, ngx.sleep and ngx.thread.spawn
-- work in tasks, and a slow task never delays another. lua-nginx-module keeps
-- a record per spawned thread in the spawning context until that context
-- ends, so no context that spawns lives for ever here: every wake is a new
-- ngx.timer.at context that ends with its last task. At most `concurrency`
-- tasks run at once; the rest stay due, in deadline order, and the task that
-- frees a slot arms a wake for them. In a task, timer:sleep(s) is
-- ngx.sleep(s); a task's error, on a timer with no on_error, goes to the
-- error log at level error, with its traceback.
--
-- nginx may refuse a wake: ngx.timer.at returns nil, err when
-- lua_max_pending_timers are pending; and when the wake falls due, nginx
-- drops it without running it (an alert in the log, nothing in Lua) when
-- lua_max_running_timers run or no worker_connections are free. So a wake
-- counts as armed only until a little after its time (LOST_AFTER). One
-- light thread per driver, the watch, lives as long as the driver: it
-- spawns nothing, and waits on a semaphore until the earliest time by which
-- a wake should have run; a wake that has not is lost, and the driver tries
-- again, with a growing pause (up to RETRY_LONGEST), until a wake runs. The
-- driver logs the first refusal of an outage and its end, and nothing
-- between; nginx logs an alert per dropped wake.
--
-- nginx.conf: each wake is an ngx.timer.at, pending while it waits and
-- running while its tasks run, and the watch is a running one, so
--   lua_max_running_timers  >= concurrency + 2 + the worker's own timers
--   lua_max_pending_timers  >= 2 + the worker's own timers
-- (the defaults, 256 and 1024, fit the default concurrency of 256 only if
-- the worker runs few timers of its own: raise lua_max_running_timers).
-- No thread_pool is needed: nothing of hwt's runs in nginx's threads.
local hwt = require("hwt")
local backoff = require("hwt.backoff")
local checks = require("hwt.checks")
local drivers = require("hwt.driver")

local M = {}

local DEFAULT_CONCURRENCY = 256
-- nginx passes a timer's milliseconds to epoll_wait as an int.
local LONGEST_WAKE = (2 ^ 31 - 1) / 1000
-- ngx.timer.at truncates to the millisecond, and counts from nginx's cached
-- clock, which lags: a wake this much later than due avoids a wake for nothing.
local WAKE_SLACK = 0.002
-- A wake that has not run this long after its time was dropped by nginx.
-- With RETRY_LONGEST, it bounds how late a due task starts once nginx has
-- room again: LOST_AFTER + RETRY_LONGEST + a tick.
local LOST_AFTER = 0.3
-- The pause before the n-th try of an outage: RETRY_FIRST * 2^(n-1), at most
-- RETRY_LONGEST.
local RETRY_FIRST = 0.05
local RETRY_LONGEST = 0.6
-- The watch's shortest wait: a semaphore counts whole milliseconds, and a
-- wait of 0 returns at once, without yielding.
local SHORTEST_WAIT = 0.001

local function log_error(...)
  ngx.log(ngx.ERR, "hwt.ngx: ", ...)
end

-- The host's part of the skeleton (hwt.driver).
local host = {}

-- ---- hwt.jobs' listeners: light threads that read a cosocket ---------------

local ngx_semaphore                 -- lua-resty-core's, once an attach loaded it

-- Each listener's semaphore, posted to end it: by its stop(), by the exit
-- of a driver (the worker shuts down), or when its thread returns.
local listeners = {}

-- How often a waiting listener checks that the worker is not exiting (in
-- case no driver's exit posts it: its timer was detached first).
local LISTENER_CHECK = 60

-- Runs fn (a loop reading a cosocket) in a light thread of a timer of its
-- own; returns stop(). The timer waits on a semaphore, not on fn, so that
-- it can end fn's thread wherever it waits: the read has no timeout to
-- keep it short (nginx logs each timeout as an error).
local function listener_thread(fn)
  local stopping = ngx_semaphore.new(0)
  local function run(premature)
    if premature then return end
    listeners[stopping] = true
    local reader = ngx.thread.spawn(function()
      fn()
      stopping:post(1)
    end)
    while listeners[stopping] and not ngx.worker.exiting() do
      if stopping:wait(LISTENER_CHECK) then break end
    end
    listeners[stopping] = nil
    ngx.thread.kill(reader)
  end
  local ok, err = ngx.timer.at(0, run)
  if not ok then error(err, 0) end
  return function()
    if listeners[stopping] then stopping:post(1) end
  end
end

local function stop_listeners()
  for stopping in pairs(listeners) do stopping:post(1) end
end

-- What nginx does in hwt's place: they refer to no timer.
host.hooks = {
  sleep = function(seconds) ngx.sleep(seconds) end,
  report = function(_, err) ngx.log(ngx.ERR, "hwt: timer task failed: ", tostring(err)) end,
  thread = listener_thread,
}

-- ---- the watch: a light thread that sees wakes nginx dropped -----------------

-- Wakes the watch when it waits past `check_at` (an hwt.now() time).
local function tell_watch(driver, check_at)
  local watch = driver.watch
  if watch.running and check_at < watch.deadline then
    watch.deadline = check_at
    watch.semaphore:post(1)
  end
end

local function retry_pause(refusals)
  return backoff.grow(RETRY_FIRST, 2, refusals, RETRY_LONGEST)
end

-- nginx refused a wake (`why`; `dropped`: armed, but never run): the first
-- refusal of an outage is logged, and the watch tries again after a pause.
local function refused(driver, why, dropped)
  local now = hwt.now()
  local outage = driver.outage
  if not outage then
    outage = { since = now, refusals = 0, dropped = 0 }
    driver.outage = outage
    log_error("nginx refused a wake (", why, "); trying again until it runs")
  end
  outage.refusals = outage.refusals + 1
  if dropped then outage.dropped = outage.dropped + 1 end
  driver.retry_at = now + retry_pause(outage.refusals)
  tell_watch(driver, driver.retry_at)
end

local function end_outage(driver)
  local outage = driver.outage
  driver.outage, driver.retry_at = nil, nil
  ngx.log(ngx.WARN, "hwt.ngx: nginx takes wakes again, after ", outage.refusals, " refused in ",
          ("%.1f"):format(hwt.now() - outage.since), " s")
end

local on_wake

-- Arms a wake `delay` seconds from now, unless one that can still run is
-- armed by then. During an outage, only the watch's retries arm.
local function arm(driver, delay)
  local now = hwt.now()
  if driver.retry_at and now < driver.retry_at then return end
  local wake_at = now + delay
  for _, at in pairs(driver.wakes) do
    if at <= wake_at and now < at + LOST_AFTER then return end
  end
  local token = {}
  local ok, err = ngx.timer.at(delay > 0 and delay + WAKE_SLACK or 0, on_wake, driver, token)
  if not ok then
    if err ~= "process exiting" then refused(driver, err) end
    return
  end
  driver.wakes[token] = wake_at
  driver.retry_at = nil
  -- A refusal by ngx.timer.at ends with an accepted wake; a dropped wake
  -- only with one that runs.
  if driver.outage and driver.outage.dropped == 0 then end_outage(driver) end
  tell_watch(driver, wake_at + LOST_AFTER)
end

-- After a poll: a wake for the next due time; with nothing due, the far one.
local function rearm(driver)
  local due_in = driver.timer:next_due()
  if due_in and (due_in > 0 or driver.running < driver.concurrency) then
    arm(driver, due_in)
  end
  if next(driver.wakes) == nil then arm(driver, LONGEST_WAKE) end
end

local DROPPED = "a wake did not run: lua_max_running_timers or worker_connections reached"

-- Forgets the wakes that should have run by `now`: nginx dropped them.
local function forget_dropped(driver, now)
  for token, at in pairs(driver.wakes) do
    if at + LOST_AFTER <= now then
      driver.wakes[token] = nil
      refused(driver, DROPPED, true)
    end
  end
end

-- When the watch must look next: a retry, or the time by which the earliest
-- wake should have run.
local function next_check(driver)
  local check_at = driver.retry_at or math.huge
  for _, at in pairs(driver.wakes) do
    check_at = math.min(check_at, at + LOST_AFTER)
  end
  return check_at
end

local exit

-- Whether the driver is done: detached, exited, or its timer stopped (the
-- driver then lets go, as every driver does).
local function is_over(driver)
  if not driver.attached or driver.exited then return true end
  return drivers.let_go_if_stopped(driver, driver.timer)
end

local function watch_loop(premature, driver)
  local watch = driver.watch
  if premature or is_over(driver) then return end
  watch.running = true
  while not is_over(driver) do
    if ngx.worker.exiting() then
      exit(driver)                 -- no wake was left to run prematurely
      break
    end
    watch.deadline = -math.huge    -- awake: nothing to tell it
    local now = hwt.now()
    forget_dropped(driver, now)
    if driver.retry_at and driver.retry_at <= now then
      driver.retry_at = nil
      rearm(driver)
    end
    watch.deadline = next_check(driver)
    local wait = math.min(math.max(watch.deadline - hwt.now(), SHORTEST_WAIT), LONGEST_WAKE)
    watch.semaphore:wait(wait)
  end
  watch.running = false
end

-- Starts the watch in a timer context of its own; false, err if refused.
local function start_watch(driver)
  local ok, err = ngx.timer.at(0, watch_loop, driver)
  if ok then driver.watch.armed_at = hwt.now() end
  return ok, err
end

-- A wake ran: an outage is over, and a watch nginx dropped starts again.
local function wake_ran(driver)
  if driver.outage then end_outage(driver) end
  local watch = driver.watch
  if not watch.running and hwt.now() >= watch.armed_at + LOST_AFTER then
    local ok, err = start_watch(driver)
    if not ok then log_error("cannot start the watch: ", err) end
  end
end

-- ---- the wakes and their tasks -------------------------------------------------

-- Runs a task handed over by poll() in its own light thread, counting it.
local function run_task(driver, fn)
  driver.running = driver.running + 1
  local ok, err = pcall(fn)
  driver.running = driver.running - 1
  if not ok then log_error("task dispatch failed: ", tostring(err)) end
  if driver.saturated and driver.attached and driver.running < driver.concurrency then
    driver.saturated = false
    arm(driver, 0)                 -- a new context: this one may end
  end
end

-- What poll()'s spawn raises once a task detached the driver: poll() gives
-- the timeout back, due, and hands out no more.
local STOPPED = setmetatable({}, { __tostring = function() return "hwt.ngx: driver stopped" end })

local function drive(driver)
  local free = driver.concurrency - driver.running
  if free > 0 then
    driver.polling = true
    local ok, handed = pcall(driver.timer.poll, driver.timer, free, driver.spawn)
    driver.polling = false
    if not ok then
      if handed ~= STOPPED then refused(driver, "ngx.thread.spawn failed: " .. tostring(handed)) end
      return
    end
    if handed == free then driver.saturated = true end
  else
    driver.saturated = true
  end
  if not is_over(driver) then rearm(driver) end
end

-- A graceful quit: every pending wake runs at once, with premature = true.
function exit(driver)
  if driver.exited then return end
  driver.exited = true
  driver.watch.semaphore:post(1)   -- the watch ends: nginx waits for it
  stop_listeners()                 -- and so do hwt.jobs' listeners
  drivers.release(driver.timer)
  local never_ran = driver.timer:stop()
  if driver.on_exit then
    local ok, err = pcall(driver.on_exit, never_ran)
    if not ok then log_error("on_exit failed: ", tostring(err)) end
  end
end

function on_wake(premature, driver, token)
  driver.wakes[token] = nil
  if not driver.attached then return end
  if premature then
    exit(driver)
    -- nginx runs premature wakes outside its loop's pass over posted
    -- events, so the post that ends the watch waits for the next event:
    -- this sleep is one.
    return ngx.sleep(SHORTEST_WAIT)
  end
  wake_ran(driver)
  drive(driver)
end

-- ---- the surface -------------------------------------------------------------

-- Starts driving: the watch, and a wake (for the next due time, or the far
-- one); nil, err when nginx refuses either.
function host.start(driver)
  local watching, err = start_watch(driver)
  if not watching then return nil, "hwt.ngx cannot arm an ngx.timer.at: " .. tostring(err) end
  rearm(driver)
  if next(driver.wakes) == nil then
    return nil, "hwt.ngx cannot arm an ngx.timer.at (see error.log)"
  end
  return true
end

-- An arming made a deadline earlier than the wakes: a wake for it (a poll
-- under way re-arms when it ends).
function host.earlier(driver, _, due_in)
  if not driver.polling then arm(driver, due_in) end
  return true
end

-- Stops driving at once: the watch ends; tasks that the same wake handed
-- out but did not start yet stay due (spawn refuses them); running tasks
-- finish; on_exit is not called.
function host.stop_driving(driver)
  driver.watch.semaphore:post(1)
end

local Driver = drivers.class(host, {
  -- driver:stop(): the name hwt 0.2 gave detach().
  stop = function(self) return self:detach() end,
})

-- opts.concurrency: an integer >= 1.
local function check_concurrency(value)
  if type(value) ~= "number" then return "number expected, got " .. type(value) end
  if not (value >= 1 and value % 1 == 0) then return "integer >= 1 expected" end
end

local OPTIONS = { concurrency = check_concurrency, on_exit = checks.option_function }

-- What the driver needs of lua-nginx-module: the semaphore is lua-resty-core's.
local function load_host()
  if type(ngx) ~= "table" or not (ngx.timer and ngx.thread and ngx.log) then
    return nil, "hwt.ngx needs lua-nginx-module (ngx.timer, ngx.thread)"
  end
  local ok, semaphore = pcall(require, "ngx.semaphore")
  if not ok then return nil, "hwt.ngx needs lua-resty-core's ngx.semaphore: " .. tostring(semaphore) end
  ngx_semaphore = semaphore
  return semaphore
end

-- The fields of a new driver of `timer`.
local function new_driver(timer, opts, semaphore)
  local driver = {
    timer = timer,                 -- held: nginx's wakes hold the driver for as long as it drives
    concurrency = opts.concurrency or DEFAULT_CONCURRENCY,
    on_exit = opts.on_exit,
    running = 0,
    wakes = {},                    -- token -> hwt.now() it is armed for
    watch = { semaphore = semaphore.new(0), running = false, deadline = math.huge },
  }
  local spawn = ngx.thread.spawn
  driver.spawn = function(fn)
    if not driver.attached then error(STOPPED, 0) end
    spawn(run_task, driver, fn)
  end
  return driver
end

-- The attach function, named `fname` in its errors (the checks raise at the
-- level of its caller).
local function attach_named(fname)
  return function(timer, opts)
    drivers.check_timer(fname, timer)
    opts = checks.check_options(fname, 2, opts, OPTIONS)
    local semaphore, err = load_host()
    if not semaphore then return nil, err end
    return drivers.attach(Driver, timer, new_driver(timer, opts, semaphore))
  end
end

-- attach(timer [, opts]) -> driver, or nil, err (no lua-nginx-module, or no
-- ngx.timer.at it can arm). opts: concurrency (default 256), on_exit(timeouts).
M.attach = attach_named("attach")
-- start(): the name hwt 0.2 gave attach().
M.start = attach_named("start")

return M
