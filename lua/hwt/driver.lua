-- hwt.driver: the host drivers' shared skeleton, and the one registry of
-- attached timers.
--
-- Every driver (hwt.ngx, hwt.luv, hwt.cqueues) has one surface:
--   require("hwt.<host>").attach(timer, opts) -> driver, or nil, err
--   driver:detach() -> true, then false
-- attach() raises for a bad argument (a timer that is not a running
-- real-clock hwt.Timer, or one already attached; an unknown or bad option),
-- and returns nil, err when the host refuses (its library does not load, no
-- worker thread for timer:fd(), its event loop refuses what the driver asks).
-- detach() stops driving: tasks already running finish; the timer and its
-- timeouts stay as they are.
--
-- A driver owns its timer's on_earlier watcher, so a timer has one driver.
-- The skeleton attaches (records the timer, sets the watcher, lets the host
-- start), and lets go (the host stops driving, the record and the watcher
-- go) on detach(), on a failed start, and when the host sees the timer
-- stopped. A host module gives M.class() its part:
--   start(driver, timer)        -> true, or nil, err: start driving (the
--                                  timer is attached, its watcher set);
--   earlier(driver, timer, due_in) -> true, or nil, err: the watcher's work
--                                  while attached: something falls due
--                                  `due_in` seconds from now, earlier than
--                                  timer:next_due() last said. On a refusal
--                                  the watcher forgets what it was told (the
--                                  next arming asks again) and raises err in
--                                  the call that armed;
--   stop_driving(driver, timer) the host's part of letting go (`timer` is nil
--                                  once collected);
--   hooks (optional)            what the host does in hwt's place:
--                                  sleep(seconds) for timer:sleep(), report(err)
--                                  for a task error on a timer with no
--                                  on_error; and what it offers hwt.jobs'
--                                  listener: watch(socket, on_readable) ->
--                                  a function that stops watching (the
--                                  host's loop calls on_readable while the
--                                  LuaSocket socket is readable), or
--                                  thread(fn) (runs fn in a thread where the
--                                  host's sockets work) with exiting() (true
--                                  once the host shuts down). They must not
--                                  refer to the timer;
--   hooks_of(driver) (optional) the hooks, made for one driver (a host whose
--                                  hooks need the driver's own fields).
-- A driver refers to its timer weakly (driver.ref.timer): the timer holds
-- the driver (its watcher) in a place Lua treats as a root while the timer
-- runs, so a strong reference back would make the timer immortal. A host
-- that must keep the timer alive (hwt.luv in a busy period, hwt.cqueues
-- while its coroutine runs, hwt.ngx for as long as nginx runs) holds it.
local checks = require("hwt.checks")

local M = {}

local type_name, arg_error = checks.type_name, checks.arg_error

-- ---- the registry ---------------------------------------------------------

-- Timers that have a driver attached, each with its host's hooks (weak keys;
-- a hooks table refers to no timer, so that nothing here keeps a timer
-- alive, on 5.1 and LuaJIT too, which have no ephemerons).
local attached = setmetatable({}, { __mode = "k" })
local NO_HOOKS = {}

-- The hooks of the host driving `timer`, or nil when no driver is attached.
function M.hooks_of(timer) return attached[timer] end

-- Lets go of the timer: no longer attached, its watcher removed.
function M.release(timer)
  attached[timer] = nil
  timer:on_earlier(nil)
end

-- ---- the check of attach()'s timer -----------------------------------------

-- Checks that `timer` can be attached (a running real-clock hwt.Timer with
-- no driver yet); returns its stats. Called by attach() itself, it raises
-- for attach()'s caller, as hwt.checks' checks do (attach() checks its opts
-- with checks.check_options).
function M.check_timer(fname, timer)
  if type(timer) ~= "userdata" or getmetatable(timer) ~= "hwt.Timer" then
    arg_error(fname, 1, "hwt.Timer expected, got " .. type_name(timer))
  end
  if timer:is_stopped() then arg_error(fname, 1, "timer is stopped") end
  local stats = timer:stats()
  if stats.clock == "manual" then arg_error(fname, 1, "timer has a manual clock: drive it with advance()") end
  if attached[timer] then arg_error(fname, 1, "timer is already attached: detach it first") end
  return stats
end

-- ---- the host's library ---------------------------------------------------

-- require(module) for driver `name`: the module, or nil and a message.
function M.load(name, module)
  local ok, loaded = pcall(require, module)
  if not ok then return nil, ("%s: cannot load %s: %s"):format(name, module, tostring(loaded)) end
  return loaded
end

-- A driver that waits for timer:fd() also wakes this long, plus one tick,
-- after the next deadline: cancel() and stop() do not make the fd readable,
-- and that wake is how it learns that nothing can fall due any more. It
-- does not come in the normal course: the fd comes first.
M.FALLBACK_SLACK = 0.005

-- ---- the skeleton -------------------------------------------------------------

-- The methods of every driver.
local Driver = {}

-- driver:detach(): stops driving; true if this call detached the driver.
function Driver:detach()
  if not self.attached then return false end
  M.let_go(self)
  return true
end

-- The metatable of a host's drivers: the methods of every driver, and
-- `methods` (the host's own, optional). `host`: the host's part (above).
function M.class(host, methods)
  local index = {}
  for name, method in pairs(Driver) do index[name] = method end
  for name, method in pairs(methods or {}) do index[name] = method end
  return { __index = index, host = host }
end

local WEAK_VALUES = { __mode = "v" }

local function host_of(driver) return getmetatable(driver).host end

-- Attaches `driver` (a table of the host's fields) to a checked `timer`,
-- as a driver of `class`, and lets the host start: the driver, or nil and
-- the host's message (then nothing stays attached).
function M.attach(class, timer, driver)
  local host = class.host
  setmetatable(driver, class)
  driver.ref = setmetatable({ timer = timer }, WEAK_VALUES)
  driver.attached = true
  driver.on_earlier = function(due_in)
    local alive = driver.ref.timer                -- (it is calling this)
    if not driver.attached or alive == nil then return end
    local ok, err = host.earlier(driver, alive, due_in)
    if not ok then
      alive:on_earlier(driver.on_earlier)
      error(err, 0)
    end
  end
  attached[timer] = host.hooks_of and host.hooks_of(driver) or host.hooks or NO_HOOKS
  timer:on_earlier(driver.on_earlier)
  local started, err = host.start(driver, timer)
  if not started then
    M.let_go(driver)
    return nil, err
  end
  return driver
end

-- Stops driving (once): the host stops, the timer is let go.
function M.let_go(driver)
  if not driver.attached then return end
  driver.attached = false
  local timer = driver.ref.timer
  host_of(driver).stop_driving(driver, timer)
  if timer ~= nil then M.release(timer) end
end

-- Lets go when `timer` is stopped (a host calls it when it sees the timer
-- idle); true if it did.
function M.let_go_if_stopped(driver, timer)
  if not timer:is_stopped() then return false end
  M.let_go(driver)
  return true
end

return M
