-- hwt.ngx: drives an hwt timer from nginx's own event loop (lua-nginx-module).
--
--   init_worker_by_lua_block {
--     local timer = hwt.new()
--     local driver = assert(require("hwt.ngx").start(timer, { concurrency = 256,
--       on_exit = function(never_ran) ... end }))
--   }
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
-- ends, so no context lives for ever here: every wake is a new ngx.timer.at
-- context that ends with its last task. At most `concurrency` tasks run at
-- once; the rest stay due, in deadline order, and the task that frees a slot
-- arms a wake for them.
--
-- nginx.conf: each wake is an ngx.timer.at, pending while it waits and
-- running while its tasks run, so
--   lua_max_running_timers  >= concurrency + 1 + the worker's own timers
--   lua_max_pending_timers  >= 2 + the worker's own timers
-- (the defaults, 256 and 1024, fit the default concurrency of 256 only if
-- the worker runs few timers of its own: raise lua_max_running_timers).
-- No thread_pool is needed: nothing of hwt's runs in nginx's threads.
local hwt = require("hwt")
local attachments = require("hwt.driver")

local M = {}

local DEFAULT_CONCURRENCY = 256
-- nginx passes a timer's milliseconds to epoll_wait as an int.
local LONGEST_WAKE = (2 ^ 31 - 1) / 1000
-- ngx.timer.at truncates to the millisecond, and counts from nginx's cached
-- clock, which lags: a wake this much later than due avoids a wake for nothing.
local WAKE_SLACK = 0.002
-- After a failed poll (spawn refused), before the next try.
local RETRY_DELAY = 0.1

local Driver = {}
Driver.__index = Driver

local function log_error(...)
  ngx.log(ngx.ERR, "hwt.ngx: ", ...)
end

local on_wake

-- Arms a wake `delay` seconds from now, unless one is armed by then.
local function arm(driver, delay)
  local now = hwt.now()
  local wake_at = now + delay
  for _, at in pairs(driver.wakes) do
    if at <= wake_at then return end
  end
  local token = {}
  local ok, err = ngx.timer.at(delay > 0 and delay + WAKE_SLACK or 0, on_wake, driver, token)
  if not ok then
    if err ~= "process exiting" then log_error("cannot arm a wake: ", err) end
    return
  end
  driver.wakes[token] = wake_at
end

-- After a poll: a wake for the next due time; with nothing due, the far one.
local function rearm(driver)
  local due_in = driver.timer:next_due()
  if due_in and (due_in > 0 or driver.running < driver.concurrency) then
    arm(driver, due_in)
  end
  if next(driver.wakes) == nil then arm(driver, LONGEST_WAKE) end
end

-- Runs a task handed over by poll() in its own light thread, counting it.
local function run_task(driver, fn)
  driver.running = driver.running + 1
  local ok, err = pcall(fn)
  driver.running = driver.running - 1
  if not ok then log_error("task dispatch failed: ", tostring(err)) end
  if driver.saturated and not driver.stopped and driver.running < driver.concurrency then
    driver.saturated = false
    arm(driver, 0)                 -- a new context: this one may end
  end
end

local function drive(driver)
  local free = driver.concurrency - driver.running
  if free > 0 then
    driver.polling = true
    local ok, handed = pcall(driver.timer.poll, driver.timer, free, driver.spawn)
    driver.polling = false
    if not ok then
      log_error("poll failed: ", tostring(handed))
      arm(driver, RETRY_DELAY)
      return
    end
    if handed == free then driver.saturated = true end
  else
    driver.saturated = true
  end
  if not driver.timer:stats().stopped then rearm(driver) end
end

-- A graceful quit: every pending wake runs at once, with premature = true.
local function exit(driver)
  if driver.exited then return end
  driver.exited = true
  attachments.release(driver.timer)
  local never_ran = driver.timer:stop()
  if driver.on_exit then
    local ok, err = pcall(driver.on_exit, never_ran)
    if not ok then log_error("on_exit failed: ", tostring(err)) end
  end
end

function on_wake(premature, driver, token)
  driver.wakes[token] = nil
  if driver.stopped then return end
  if premature then return exit(driver) end
  drive(driver)
end

-- driver:stop(): stops driving; running tasks finish; the timer and its
-- timeouts stay as they are; on_exit is not called.
function Driver:stop()
  if self.stopped then return false end
  self.stopped = true
  attachments.release(self.timer)
  return true
end

local options = { concurrency = "number", on_exit = "function" }

local function check_options(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error("bad argument #2 to 'start' (table expected, got " .. type(opts) .. ")", 3)
  end
  for key, value in pairs(opts) do
    local expected = options[key]
    if not expected then
      error(("bad argument #2 to 'start' (unknown option '%s')"):format(tostring(key)), 3)
    end
    if type(value) ~= expected then
      error(("bad option '%s' to 'start' (%s expected, got %s)"):format(key, expected, type(value)), 3)
    end
  end
  local concurrency = opts.concurrency
  if concurrency ~= nil and not (concurrency >= 1 and concurrency % 1 == 0) then
    error("bad option 'concurrency' to 'start' (integer >= 1 expected)", 3)
  end
  return opts
end

-- start(timer [, opts]) -> driver, or nil, err (no lua-nginx-module, or a
-- wake it cannot arm). opts: concurrency (default 256), on_exit(timeouts).
function M.start(timer, opts)
  attachments.check_timer("start", timer)
  opts = check_options(opts)
  if type(ngx) ~= "table" or not (ngx.timer and ngx.thread and ngx.log) then
    return nil, "hwt.ngx needs lua-nginx-module (ngx.timer, ngx.thread)"
  end
  local driver = setmetatable({
    timer = timer,
    concurrency = opts.concurrency or DEFAULT_CONCURRENCY,
    on_exit = opts.on_exit,
    running = 0,
    wakes = {},                    -- token -> hwt.now() it is armed for
  }, Driver)
  local spawn = ngx.thread.spawn
  driver.spawn = function(fn) spawn(run_task, driver, fn) end
  timer:on_earlier(function(due_in)
    if not driver.polling and not driver.stopped then arm(driver, due_in) end
  end)
  rearm(driver)
  if next(driver.wakes) == nil then
    timer:on_earlier(nil)
    return nil, "hwt.ngx cannot arm an ngx.timer.at (see error.log)"
  end
  attachments.attach(timer)
  return driver
end

return M
