-- hwt.cqueues: drives an hwt timer from a cqueues controller.
--
--   local cqueues, hwt = require("cqueues"), require("hwt")
--   local cq, timer = cqueues.new(), hwt.new()
--   local handle = assert(require("hwt.cqueues").attach(timer, cq))
--   timer:timeout(0.5, function() print("half a second later") end)
--   assert(cq:loop())             -- returns once nothing can fall due
--
-- attach(timer, controller) returns a handle, or nil and a message when
-- cqueues cannot be loaded or timer:fd() cannot start the worker thread.
-- Every due task runs in a cqueues coroutine of its own on the controller
-- (poll()'s spawn is controller:wrap; tasks start in deadline order,
-- whatever order cqueues resumes them in), so a task may
-- use cqueues sockets, cqueues.sleep and condition variables, and a task that
-- waits does not hold up the others (Lua 5.2+ and LuaJIT; on PUC 5.1, where
-- pcall cannot be yielded across, a task's yield is its error, which goes to
-- on_error).
--
-- The driver is one coroutine on the controller. It exists only while the
-- timer has something that can fall due (timer:next_due() is a number):
-- then it waits with cqueues.poll() for timer:fd() to turn readable (due
-- tasks wait for poll()), hands them out, and waits again. While nothing is
-- due, it does not wake. cancel() and stop() do not make the fd readable, so
-- two more things end its wait: a task that leaves nothing that can fall due
-- (it stopped the timer or cancelled the last pending timeout) tells it when
-- it returns; and its wait has a timeout, a little after the deadline that
-- was next when it began waiting (next_due() plus one tick plus
-- FALLBACK_SLACK), which does not expire in the normal course (the fd comes
-- first): after a stop() or the last cancel() from outside the tasks, the
-- driver lingers at most until then, never for ever.
-- When nothing can fall due any more (everything ran or was cancelled, or the
-- timer stopped), the driver ends, so controller:loop() returns once every
-- timeout has run. The next arming that gives the timer something to fall
-- due (timeout(), every()) starts a new driver at once, from inside that
-- call, through timer:on_earlier() (which the attachment owns: one watcher
-- per timer, so a timer is attached at most once).
--
-- Lifetime: while the driver runs, the controller holds it, and it holds the
-- timer, so a timer that nothing else refers to still fires (as long as the
-- controller is stepped). Otherwise the handle refers to its timer weakly. A
-- driver that ends first takes timer:fd() out of every controller
-- (cqueues.cancel), as cqueues requires before a descriptor may be closed; so
-- while no driver runs, an unreferenced timer (with nothing left that can
-- fall due) may be collected.
--
-- handle:detach() stops driving: the driver ends at the controller's next
-- step (cqueues.cancel on the fd wakes it, and takes the fd out of every
-- controller at once), on_earlier is cleared, the timer is let go. The timer
-- and its timeouts stay as they are; tasks already handed to their coroutines
-- still run. Returns true, or false when the handle was detached already.
-- A stopped timer detaches its attachment when the driver sees the stop. If
-- timer:poll() raises (controller:wrap failed), the attachment detaches and
-- the driver ends with that error (controller:step() / loop() return it).
--
-- Errors: a bad argument raises, naming it. A timer on the manual clock, a
-- stopped timer and one already attached are bad arguments.
local M = {}

-- After the deadline the driver waits this long, plus one tick, for the fd.
local FALLBACK_SLACK = 0.005

local cqueues, condition                      -- loaded by the first attach

local function load_cqueues()
  if cqueues then return cqueues end
  local ok, loaded = pcall(require, "cqueues")
  if not ok then return nil, "hwt.cqueues: cannot load cqueues: " .. tostring(loaded) end
  local cond_ok, cond = pcall(require, "cqueues.condition")
  if not cond_ok then return nil, "hwt.cqueues: cannot load cqueues.condition: " .. tostring(cond) end
  cqueues, condition = loaded, cond
  return cqueues
end

local checks = require("hwt.checks")
local driver = require("hwt.driver")
local type_name, arg_error_in = checks.type_name, checks.arg_error

local function arg_error(n, message)
  arg_error_in("attach", n, message)
end

local function check_timer(timer)
  return driver.check_timer("attach", timer)
end

local Handle = {}
Handle.__index = Handle

-- A handle refers to its timer weakly (self.ref.timer): the timer holds the
-- handle (its on_earlier watcher) in a place Lua treats as a root while the
-- timer runs, so a strong reference back would make it immortal. The driver
-- coroutine holds the timer while it runs.
local WEAK_VALUES = { __mode = "v" }

local function let_go(self)
  if not self.attached then return end
  self.attached = false
  local timer = self.ref.timer
  if timer == nil then return end               -- collected: no driver held it, nothing to wake
  driver.release(timer)
  cqueues.cancel(self.fd)                       -- wakes a waiting driver; the fd leaves every controller
end

-- A task's coroutine. cqueues resumes new coroutines in no set order (the
-- last one wrapped first, in fact), so each takes the oldest task not yet
-- started from the handle's queue: tasks start in the order poll() handed
-- them out, which is deadline order. Then, if the task left nothing that can
-- fall due (it stopped the timer, or cancelled the last pending timeout), a
-- word to the driver, so that it ends now rather than at its timeout.
local function run_task(self, timer)
  local queue = self.queue
  local run = queue[queue.first]
  queue[queue.first] = nil
  queue.first = queue.first + 1
  run()
  if self.driving and timer:next_due() == nil then self.recheck:signal() end
end

-- poll()'s spawn: queues the task and wraps a coroutine that will start it.
local function spawn_task(self, timer, run)
  local queue = self.queue
  queue.last = queue.last + 1
  queue[queue.last] = run
  local ok, err = pcall(self.controller.wrap, self.controller, run_task, self, timer)
  if not ok then                                -- poll() gives the timeout back
    queue[queue.last] = nil
    queue.last = queue.last - 1
    error(err, 0)
  end
end

-- The driver coroutine: wait for the fd, hand out what is due, until nothing
-- can fall due or the handle is detached.
local function drive(self, timer)
  local fd_ready = {
    pollfd = function() return self.fd end,
    events = function() return "r" end,
  }
  local function spawn(run) spawn_task(self, timer, run) end
  while self.attached do
    local due_in = timer:next_due()
    if due_in == nil then break end
    cqueues.poll(fd_ready, self.recheck, due_in + self.slack)
    if not self.attached then break end
    local ok, err = pcall(timer.poll, timer, nil, spawn)
    if not ok then
      self.driving = false
      let_go(self)
      error(err, 0)
    end
  end
  self.driving = false
  cqueues.cancel(self.fd)                       -- before the timer may be collected
  if timer:is_stopped() then let_go(self) end
end

local function start_driver(self, timer)
  self.driving = true
  local ok, err = pcall(self.controller.wrap, self.controller, drive, self, timer)
  if not ok then self.driving = false end
  return ok, err
end

-- Whether the controller was closed (controller:close() drops its
-- coroutines, the driver's too, without a word).
local function is_closed(controller)
  return not pcall(controller.count, controller)
end

-- The timer's on_earlier watcher: something now falls due. A running
-- driver needs nothing: the fd wakes it when that is due; one that its
-- closed controller dropped is started again, and that refusal reported.
local function earlier(self)
  local timer = self.ref.timer                  -- alive: it is calling us
  if not self.attached or timer == nil then return end
  if self.driving and is_closed(self.controller) then self.driving = false end
  if self.driving then return end
  local ok, err = start_driver(self, timer)
  if not ok then
    timer:on_earlier(self.on_earlier)           -- forget what it was told: the next arming retries
    error("hwt.cqueues: cannot start the driver: " .. tostring(err), 0)
  end
end

-- attach(timer, controller) -> handle, or nil and a message (see above).
function M.attach(timer, controller)
  local stats = check_timer(timer)
  local loaded, err = load_cqueues()
  if not loaded then return nil, err end
  if cqueues.type(controller) ~= "controller" then
    arg_error(2, "cqueues controller expected, got " .. type_name(controller))
  end
  local fd, no_thread = timer:fd()
  if not fd then return nil, no_thread end
  local self = setmetatable({
    ref = setmetatable({ timer = timer }, WEAK_VALUES), attached = true, driving = false,
    fd = fd, controller = controller, slack = stats.tick + FALLBACK_SLACK,
    recheck = condition.new(), queue = { first = 1, last = 0 },
  }, Handle)
  self.on_earlier = function() earlier(self) end
  driver.attach(timer)
  timer:on_earlier(self.on_earlier)
  if timer:next_due() then                      -- also what on_earlier compares with
    local ok
    ok, err = start_driver(self, timer)
    if not ok then
      let_go(self)
      return nil, "hwt.cqueues: cannot start the driver: " .. tostring(err)
    end
  end
  return self
end

-- Stops driving; true if this call detached the handle.
function Handle:detach()
  if not self.attached then return false end
  let_go(self)
  return true
end

return M
