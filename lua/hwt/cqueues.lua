-- hwt.cqueues: drives an hwt timer from a cqueues controller.
--
--   local cqueues, hwt = require("cqueues"), require("hwt")
--   local cq, timer = cqueues.new(), hwt.new()
--   local driver = assert(require("hwt.cqueues").attach(timer, { controller = cq }))
--   timer:timeout(0.5, function() print("half a second later") end)
--   assert(cq:loop())             -- returns once nothing can fall due
--
-- attach(timer, opts) returns a driver, or nil and a message when cqueues
-- cannot be loaded or timer:fd() cannot start the worker thread (the surface
-- every driver has: hwt.driver). opts.controller, the controller to drive
-- from, is required. attach(timer, controller), the controller itself in
-- place of opts, is the older form of the same call.
-- Every due task runs in a cqueues coroutine of its own on the controller
-- (poll()'s spawn is controller:wrap; tasks start in deadline order,
-- whatever order cqueues resumes them in), so a task may
-- use cqueues sockets, cqueues.sleep and condition variables, and a task that
-- waits does not hold up the others (Lua 5.2+ and LuaJIT; on PUC 5.1, where
-- pcall cannot be yielded across, a task's yield is its error, which goes to
-- on_error).
--
-- The driver drives from one coroutine on the controller, its loop. The loop
-- exists only while the timer has something that can fall due
-- (timer:next_due() is a number): then it waits with cqueues.poll() for
-- timer:fd() to turn readable (due tasks wait for poll()), hands them out,
-- and waits again. While nothing is due, it does not wake. cancel() and
-- stop() do not make the fd readable, so two more things end its wait: a
-- task that leaves nothing that can fall due (it stopped the timer or
-- cancelled the last pending timeout) tells it when it returns; and its wait
-- has a timeout, a little after the deadline that was next when it began
-- waiting (next_due() plus one tick plus hwt.driver's FALLBACK_SLACK), which
-- does not expire in the normal course (the fd comes first): after a stop()
-- or the last cancel() from outside the tasks, the loop lingers at most
-- until then, never for ever.
-- When nothing can fall due any more (everything ran or was cancelled, or the
-- timer stopped), the loop ends, so controller:loop() returns once every
-- timeout has run. The next arming that gives the timer something to fall
-- due (timeout(), every()) starts a new loop at once, from inside that
-- call, through timer:on_earlier() (which the driver owns: one watcher per
-- timer, so a timer is attached at most once).
--
-- Lifetime: while the loop runs, the controller holds it, and it holds the
-- timer, so a timer that nothing else refers to still fires (as long as the
-- controller is stepped). Otherwise the driver refers to its timer weakly.
-- A loop that ends first takes timer:fd() out of every controller
-- (cqueues.cancel), as cqueues requires before a descriptor may be closed; so
-- while no loop runs, an unreferenced timer (with nothing left that can
-- fall due) may be collected.
--
-- driver:detach() stops driving: the loop ends at the controller's next
-- step (cqueues.cancel on the fd wakes it, and takes the fd out of every
-- controller at once), on_earlier is cleared, the timer is let go. The timer
-- and its timeouts stay as they are; tasks already handed to their coroutines
-- still run. Returns true, or false when the driver was detached already.
-- A stopped timer detaches its driver when the loop sees the stop. If
-- timer:poll() raises (controller:wrap failed), the driver detaches and the
-- loop ends with that error (controller:step() / loop() return it).
--
-- Errors: a bad argument raises, naming it. A timer on the manual clock, a
-- stopped timer and one already attached are bad arguments.
local checks = require("hwt.checks")
local drivers = require("hwt.driver")

local M = {}

local cqueues, condition                      -- loaded by the first attach

local function load_cqueues()
  if cqueues then return cqueues end
  local loaded, err = drivers.load("hwt.cqueues", "cqueues")
  if not loaded then return nil, err end
  local cond
  cond, err = drivers.load("hwt.cqueues", "cqueues.condition")
  if not cond then return nil, err end
  cqueues, condition = loaded, cond
  return cqueues
end

-- opts.controller is checked once cqueues is loaded (check_controller).
local OPTIONS = { controller = function() return nil end }

-- A task's coroutine. cqueues resumes new coroutines in no set order (the
-- last one wrapped first, in fact), so each takes the oldest task not yet
-- started from the driver's queue: tasks start in the order poll() handed
-- them out, which is deadline order. Then, if the task left nothing that can
-- fall due (it stopped the timer, or cancelled the last pending timeout), a
-- word to the loop, so that it ends now rather than at its timeout. A loop
-- that ended already (this task was among the last it handed out) did not
-- see a stop the task made: the driver lets go here.
local function run_task(self, timer)
  local queue = self.queue
  local run = queue[queue.first]
  queue[queue.first] = nil
  queue.first = queue.first + 1
  run()
  if not self.driving then
    drivers.let_go_if_stopped(self, timer)
  elseif timer:next_due() == nil then
    self.recheck:signal()
  end
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

-- The loop: wait for the fd, hand out what is due, until nothing can fall
-- due or the driver is detached.
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
      drivers.let_go(self)
      error(err, 0)
    end
  end
  self.driving = false
  cqueues.cancel(self.fd)                       -- before the timer may be collected
  drivers.let_go_if_stopped(self, timer)
end

local function start_loop(self, timer)
  self.driving = true
  local ok, err = pcall(self.controller.wrap, self.controller, drive, self, timer)
  if not ok then self.driving = false end
  return ok, err
end

-- Whether the controller was closed (controller:close() drops its
-- coroutines, the loop's too, without a word).
local function is_closed(controller)
  return not pcall(controller.count, controller)
end

-- The host's part of the skeleton (hwt.driver).
local host = {}

-- Something now falls due. A running loop needs nothing: the fd wakes it
-- when that is due; one that its closed controller dropped is started
-- again, and that refusal reported.
function host.earlier(self, timer)
  if self.driving and is_closed(self.controller) then self.driving = false end
  if self.driving then return true end
  local ok, err = start_loop(self, timer)
  if not ok then return nil, "hwt.cqueues: cannot start the driver: " .. tostring(err) end
  return true
end

function host.start(self, timer)
  if not timer:next_due() then return true end  -- also what on_earlier compares with
  return host.earlier(self, timer)
end

-- Wakes a waiting loop; the fd leaves every controller. A collected timer
-- had no loop (a loop holds its timer), and so nothing to wake.
function host.stop_driving(self, timer)
  if timer ~= nil then cqueues.cancel(self.fd) end
end

-- hwt.jobs' listener: a coroutine on the driver's controller that waits
-- for its socket to turn readable. Stopping takes the socket's descriptor
-- out of every controller (cqueues.cancel), as cqueues requires before it
-- is closed.
function host.hooks_of(self)
  local controller = self.controller
  return {
    watch = function(socket, on_readable)
      local fd, watching = socket:getfd(), true
      assert(controller:wrap(function()
        while watching do
          cqueues.poll({ pollfd = fd, events = "r" })
          if watching then on_readable() end
        end
      end))
      return function()
        watching = false
        cqueues.cancel(fd)
      end
    end,
  }
end

local Driver = drivers.class(host)

-- Raises unless `controller` is one (argument 2 in the older form, else
-- opts.controller).
local function check_controller(controller, older_form)
  if cqueues.type(controller) == "controller" then return end
  local problem = "cqueues controller expected, got " .. checks.type_name(controller)
  if older_form then checks.arg_error("attach", 2, problem) end
  error(("bad option 'controller' to 'attach' (%s)"):format(problem), 3)
end

-- attach(timer, opts) -> driver, or nil and a message (see above).
function M.attach(timer, opts)
  local stats = drivers.check_timer("attach", timer)
  local older_form = type(opts) ~= "table"      -- attach(timer, controller)
  if not older_form then checks.check_options("attach", 2, opts, OPTIONS) end
  local loaded, err = load_cqueues()
  if not loaded then return nil, err end
  local controller = opts
  if not older_form then controller = opts.controller end
  check_controller(controller, older_form)
  local fd, no_thread = timer:fd()
  if not fd then return nil, no_thread end
  return drivers.attach(Driver, timer, {
    driving = false, fd = fd, controller = controller, slack = stats.tick + drivers.FALLBACK_SLACK,
    recheck = condition.new(), queue = { first = 1, last = 0 },
  })
end

return M
