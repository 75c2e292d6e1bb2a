-- hwt.luv: drives an hwt timer from luv's (libuv's) default loop.
--
--   local uv, hwt = require("luv"), require("hwt")
--   local timer = hwt.new()
--   local driver = assert(require("hwt.luv").attach(timer, {
--     spawn = function(run) coroutine.wrap(run)() end,   -- optional: see below
--   }))
--   timer:timeout(0.5, function() print("half a second later") end)
--   uv.run()                      -- returns once nothing can fall due
--
-- attach(timer [, opts]) returns a driver, or nil and a message when luv
-- cannot be loaded or timer:fd() cannot start the worker thread (the surface
-- every driver has: hwt.driver). opts.spawn
-- is poll()'s spawn: with it each due task runs through spawn(run), e.g. in
-- a coroutine of its own, where it may wait for luv I/O by yielding (Lua
-- 5.2+ and LuaJIT; on 5.1 the yield is the task's error). Without it the
-- tasks run inside the uv callback, one after another.
--
-- Like a uv timer, the driver keeps uv.run() going only while the timer
-- has something that can fall due (timer:next_due() is a number). Then, and
-- only then, it holds two uv handles of its own:
--   * a poll handle on timer:fd(): readable while due tasks wait, it runs
--     timer:poll(nil, opts.spawn);
--   * a uv timer a little after the next deadline (next_due() plus one tick
--     plus hwt.driver's FALLBACK_SLACK), moved on after every poll. It does
--     not fire in the normal course: the fd comes first. It is there because
--     cancel() and stop() do not make the fd readable: after a stop() or the
--     last cancel() made outside the tasks (a task's are seen when it
--     returns), it is how the driver learns that nothing can fall due any
--     more (so uv.run() lingers at most until that deadline, never for ever).
-- When libuv refuses the poll handle (EEXIST: another poll handle watches the
-- fd), the uv timer alone drives the timer through that busy period, one
-- tick and FALLBACK_SLACK late; the next busy period asks for it again.
-- When a poll, or a task handed to spawn when it returns, leaves nothing that
-- can fall due (everything ran or was cancelled, or the timer stopped), both
-- handles are closed: uv.run() returns, and uv.loop_close() succeeds. The
-- next arming that gives the timer something to fall due (timeout(), every())
-- reopens them at once, from inside that call, through timer:on_earlier()
-- (which the driver owns: one watcher per timer, so a timer is attached at
-- most once).
--
-- Lifetime: during a busy period the module holds the timer (as libuv holds
-- an active handle), so a timer that nothing else refers to still fires.
-- Otherwise the driver refers to its timer weakly: while its uv handles are
-- closed, nothing of libuv's refers to the timer's fd, and an unreferenced
-- timer (with nothing left that can fall due) may be collected. So a
-- collected timer never has its fd in libuv (which would abort inside libuv).
--
-- driver:detach() stops driving: closes the uv handles (the fd leaves libuv
-- at once, in the call), clears on_earlier, lets go of the timer. The timer
-- and its timeouts stay as they are. Returns true, or false when the driver
-- was detached already. Called from inside a task, the poll that runs the
-- task still runs the other tasks that were due with it.
-- A stopped timer detaches its driver when the driver sees the stop (after
-- the poll or the spawned task that stopped it, else at the fallback).
-- If timer:poll() raises (spawn raised), the driver detaches and the error
-- goes on to luv, like any callback error (luv prints it and exits).
--
-- Errors: a bad argument raises, naming it. A timer on the manual clock, a
-- stopped timer and one already attached are bad arguments.
local checks = require("hwt.checks")
local drivers = require("hwt.driver")

local M = {}

local uv                                      -- luv, once an attach loaded it

local function load_luv()
  if uv then return uv end
  local loaded, err = drivers.load("hwt.luv", "luv")
  if not loaded then return nil, err end
  uv = loaded
  return uv
end

local OPTIONS = { spawn = checks.option_callable }

-- The timer of each driver in a busy period: what keeps it alive then.
local busy = {}

local function close_uv(h)
  if h and not h:is_closing() then h:close() end
end

-- Ends a busy period: the fd leaves libuv now (uv_close stops the poll).
local function go_idle(self)
  close_uv(self.poller)
  close_uv(self.fallback)
  self.poller, self.fallback = nil, nil
  busy[self] = nil
end

-- The fallback fires `due_in` (plus the slack) from now; it repeats at that
-- period, so that again() can move it with the callback it started with.
local function arm_fallback(self, due_in)
  local ms = math.ceil((due_in + self.slack) * 1000)
  self.fallback:set_repeat(ms)
  self.fallback:again()
end

local drive

-- Opens the poll handle on the fd; false when libuv refuses it (EEXIST:
-- another poll handle watches the same fd). The fallback alone then drives
-- the timer until the busy period ends; the next one asks again (not each
-- drive: luv leaks the memory of a refused uv.new_poll's handle).
local function watch_fd(self)
  local poller = uv.new_poll(self.fd)
  if not poller then return false end
  if not poller:start("r", function(poll_err) drive(self, poll_err) end) then
    poller:close()
    return false
  end
  self.poller = poller
  return true
end

-- Starts a busy period: the fallback timer, and a poll handle on the fd
-- when libuv gives one.
local function go_busy(self, timer)
  local fallback, err = uv.new_timer()
  if not fallback then return nil, err end
  local ok
  ok, err = fallback:start(1000, 1000, function() drive(self) end)
  if not ok then
    fallback:close()
    return nil, err
  end
  self.fallback = fallback
  busy[self] = timer
  watch_fd(self)
  return true
end

-- After a poll: the fallback moves to the next deadline, or the busy period
-- ends (and with a stopped timer, the driver lets go).
local function settle(self, timer)
  if busy[self] ~= timer then return end        -- a task detached the driver
  local due_in = timer:next_due()
  if due_in then return arm_fallback(self, due_in) end
  if drivers.let_go_if_stopped(self, timer) then return end
  go_idle(self)
end

-- opts.spawn, with a settle() after each task: a task that stopped the
-- timer or cancelled the last pending timeout ends the busy period when it
-- returns, rather than at the fallback.
local function settling_spawn(self, timer)
  local spawn = self.spawn
  if spawn == nil then return nil end
  return function(run)
    spawn(function()
      run()
      settle(self, timer)
    end)
  end
end

function drive(self, err)
  local timer = busy[self]
  if timer == nil then return end
  if err then
    drivers.let_go(self)
    error("hwt.luv: polling the timer's fd failed: " .. tostring(err), 0)
  end
  local ok, failure = pcall(timer.poll, timer, nil, settling_spawn(self, timer))
  if not ok then
    drivers.let_go(self)
    error(failure, 0)
  end
  settle(self, timer)
end

-- The host's part of the skeleton (hwt.driver).
local host = {}

-- Something now falls due `due_in` from now: a busy period starts, or the
-- fallback moves earlier.
function host.earlier(self, timer, due_in)
  if busy[self] == nil then
    local ok, err = go_busy(self, timer)
    if not ok then return nil, "hwt.luv: cannot start a uv timer: " .. tostring(err) end
  end
  arm_fallback(self, due_in)
  return true
end

function host.start(self, timer)
  local due_in = timer:next_due()               -- also what on_earlier compares with
  if not due_in then return true end
  local ok, err = go_busy(self, timer)
  if not ok then return nil, "hwt.luv: cannot start a uv timer: " .. tostring(err) end
  arm_fallback(self, due_in)
  return true
end

-- Closes the uv handles: the fd leaves libuv at once.
function host.stop_driving(self)
  go_idle(self)
end

-- hwt.jobs' listener: a poll handle on its socket, on luv's default loop.
host.hooks = {
  watch = function(socket, on_readable)
    local poll = assert(uv.new_poll(socket:getfd()))
    assert(poll:start("r", function() on_readable() end))
    return function()
      if not poll:is_closing() then poll:close() end
    end
  end,
}

local Driver = drivers.class(host)

-- attach(timer [, opts]) -> driver, or nil and a message (see above).
function M.attach(timer, opts)
  local stats = drivers.check_timer("attach", timer)
  opts = checks.check_options("attach", 2, opts, OPTIONS)
  local loaded, err = load_luv()
  if not loaded then return nil, err end
  local fd, no_thread = timer:fd()
  if not fd then return nil, no_thread end
  return drivers.attach(Driver, timer, {
    fd = fd, spawn = opts.spawn, slack = stats.tick + drivers.FALLBACK_SLACK,
  })
end

return M
