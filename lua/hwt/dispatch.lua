-- hwt.dispatch: timer:poll(), run(), advance() and run_for(): the loops
-- that call the due tasks.
--
-- A draining call runs a timer's due tasks through a drain (the core's
-- record of one draining call), in batches: one protected call (xpcall) runs
-- up to `budget` tasks, so that a task may yield wherever the coroutine
-- that called poll() could (Lua 5.2+ and LuaJIT yield across xpcall; PUC 5.1
-- cannot, and the yield is the task's error); a task's error ends the
-- batch, goes to on_error, and run_drain starts the next batch. The steps
-- of a batch are the core's (the binding's drain steps): probe() first, as
-- deep as a task call, so that a batch that could not call a task (poll()
-- nested in tasks past the C stack or the Lua stack) fails with nothing
-- taken; then take(), which finishes the task before, starts the next due
-- timeout inside the protected call and records it in the drain, so that a
-- timeout taken is always called and always finished (by the next take, by
-- finish(), or by the drain's finalizer if the coroutine is dropped while
-- the task is suspended); then the call of the task, in its shape.
--
-- The batch loop differs by Lua, and the three live side by side below:
--   Lua 5.1, 5.2   lua_batch: take() and the call, in Lua;
--   Lua 5.3, 5.4   the core's loop in C (internal.run_batch, lua_callk),
--                  where a task can yield too; and poll() of all that is
--                  due is one C call (internal.poll: run_drain's work,
--                  under lua_pcallk), with no Lua call between the wake-up
--                  and the first task;
--   LuaJIT         hwt.jit's batch: a Timeout there is a cdata on a slot of
--                  C memory; the take is an FFI call and the call is read
--                  from the slot tables, so the loop compiles. hwt.jit
--                  gives all the drain steps on LuaJIT.
-- Every Lua runs a drain's batches through the one run_drain below (or, for
-- a poll() of all that is due on 5.3+, the core's, in C).
local core = require("hwt.core")
local checks = require("hwt.checks")
local drivers = require("hwt.driver")
local stop = require("hwt.stop")

local M = {}

local internal = core.internal
local Timer = core.Timer
local huge = math.huge
local now = core.now
local report_error, traceback = internal.report_error, internal.traceback
local jit_steps = internal.ffi_abi and require("hwt.jit").drain_steps
local steps = jit_steps or internal
local drain_of, take, finish, current = steps.drain_of or internal.drain, internal.take, steps.finish, steps.current
local recycle = steps.recycle
local args_of = internal.args
local hand, unhand, probe, advance_clock = steps.hand, steps.unhand, internal.probe, internal.advance_clock
local clock_mark, step_to, clock_state = internal.clock_mark, internal.step_to, internal.clock_state
local core_wait = Timer.wait
local type_name, is_callable = checks.type_name, checks.is_callable
local arg_error, as_number, check_self = checks.arg_error, checks.as_number, checks.check_self
local seconds_arg = checks.seconds_arg
local hooks_of = drivers.hooks_of
local is_stopped = stop.stopped

-- ---- the steps the loops share ----------------------------------------------

-- take()'s shapes: 0, 1, 2 are a function task with that many arguments,
-- given as plain values, so that the common call is not a vararg one;
-- CALL_WITH_ARGS a TimerTask (a table with run) or more than 2 arguments,
-- read with args_of(drain).
local CALL_WITH_ARGS = 3

local function call_with_args(task, t, is_method, ...)
  if is_method then return task:run(t, ...) end
  return task(t, ...)
end

-- The handler of a timer with on_error: the error value unchanged.
local function pass_error(err) return err end

-- ---- the loops, side by side --------------------------------------------------
-- Each runs up to `budget` tasks of `drain` in one protected call; returns
-- whether nothing more is due, and how many tasks it took.

-- The plain Lua loop.
local function lua_batch(drain, budget)
  probe()
  for n = 1, budget do
    local task, t, shape, a, b = take(drain)
    if shape == 0 then task(t)
    elseif shape == 1 then task(t, a)
    elseif shape == 2 then task(t, a, b)
    elseif shape == CALL_WITH_ARGS then call_with_args(task, t, args_of(drain))
    else return true, n - 1 end
  end
  return false, budget
end

-- The loop of the classic take: the core's in C on Lua 5.3+, else lua_batch.
local classic_batch = internal.run_batch or lua_batch

-- ---- run_drain ------------------------------------------------------------------

-- What a poll's run_drain passes to xpcall: the loop of this Lua, or on PUC
-- 5.1, whose xpcall passes f no arguments, a function that reads them from
-- upvalues that set_batch_args sets just before (xpcall calls it at once; a
-- closure per batch would be garbage). Elsewhere set_batch_args is nil.
local batch, set_batch_args = jit_steps and jit_steps.batch or classic_batch, nil
if select(2, xpcall(function(...) return select("#", ...) end, pass_error, true)) ~= 1 then
  local next_drain, next_budget
  batch = function()
    local drain = next_drain
    next_drain = nil                           -- holds no drain (nor its timer) past the call
    return classic_batch(drain, next_budget)
  end
  set_batch_args = function(drain, budget) next_drain, next_budget = drain, budget end
end
-- A hand-off runs one task.
local handoff_batch = (set_batch_args or jit_steps) and batch or classic_batch

-- Runs up to `max` tasks of the drain, in batches of drain_batch (batch, or
-- handoff_batch); returns how many ran; a task's error goes to
-- report(drain, err, timeout). Each take()
-- first finishes the task before it, so after a failed batch every task
-- taken but the last has returned: the drain's count of what it took tells
-- a task's error (it took one since the last count) from a failure before a
-- take (it took none), and counts the failed task as run.
local function run_drain(drain, handler, max, drain_batch, report)
  local ran = 0
  while ran < max do
    if set_batch_args then set_batch_args(drain, max - ran) end
    local ok, result, taken_in_batch = xpcall(drain_batch, handler, drain, max - ran)
    if ok then
      ran = ran + taken_in_batch
      if result then return ran end              -- nothing more is due
    else
      local t, taken = current(drain)
      if taken == ran then                       -- failed before it took one
        pcall(finish, drain)
        error(result, 0)
      end
      report(drain, result, t)
      ran = taken
    end
  end
  finish(drain)
  return ran
end

-- Hands up to `max` due timeouts to spawn(fn); returns how many it handed.
local function spawn_all(drain, handler, max, spawn, report)
  local handed = 0
  while handed < max do
    local handoff = hand(drain)
    if handoff == nil then break end
    local ok, err = pcall(spawn, function() run_drain(handoff, handler, 1, handoff_batch, report) end)
    if not ok then
      unhand(handoff)                          -- back to due, unless it started
      error(err, 0)
    end
    handed = handed + 1
  end
  return handed
end

-- Where a task's error goes: on_error; without it, to the host that drives
-- the timer (hwt.ngx: nginx's error log), else to report_error's stderr.
local function error_reporter(timer, has_on_error)
  if has_on_error then return report_error end
  local hooks = hooks_of(timer)
  return hooks and hooks.report or report_error
end

-- Runs (or hands to spawn) up to `max` due timeouts; returns how many, or
-- nil when `timer` is not a Timer (drain_of checks it, for poll()).
local function drain_timer(timer, max, spawn)
  local drain, has_on_error = drain_of(timer)
  if drain == false then return nil end
  if drain == nil then return 0 end            -- nothing due, or stopped
  local handler = has_on_error and pass_error or traceback
  local report = error_reporter(timer, has_on_error)
  if spawn then return spawn_all(drain, handler, max, spawn, report) end
  local ran = run_drain(drain, handler, max, batch, report)
  recycle(drain, timer)                        -- the next poll's, unless it raised
  return ran
end

-- drain_timer(timer, huge): everything due. On Lua 5.3+ the core does it in
-- one C call (internal.poll, false for no Timer).
local drain_all = internal.poll or drain_timer

-- poll()'s max (an integer >= 0, or nil) and spawn (callable, or nil).
local function check_poll_args(max, spawn)
  if max ~= nil then
    local number = as_number(max)
    if number == nil then arg_error("poll", 1, "number expected, got " .. type_name(max)) end
    if number ~= number or number % 1 ~= 0 or number >= 2 ^ 63 or number < -2 ^ 63 then
      arg_error("poll", 1, "number has no integer representation")
    end
    if number < 0 then arg_error("poll", 1, "max must be >= 0") end
    max = number
  end
  if spawn ~= nil and not is_callable(spawn) then
    arg_error("poll", 2, "spawn must be a function, got " .. type(spawn))
  end
  return max
end

-- ---- the methods ----------------------------------------------------------------

-- timer:poll([max [, spawn]]): runs (or hands to spawn) what is due. The
-- common call, with neither, leaves its self check to the core: a
-- getmetatable() from Lua costs each wake-up of a host's loop some 350
-- instructions.
function M.poll(self, max, spawn)
  if max == nil and spawn == nil then
    local ran = drain_all(self, huge)
    if ran then return ran end
  end
  check_self(self, "poll")
  max = check_poll_args(max, spawn)
  if max == 0 then return 0 end
  return drain_timer(self, max or huge, spawn)
end

-- timer:advance(seconds): manual clock only; moves it, then one pass.
function M.advance(self, seconds)
  check_self(self, "advance")
  seconds = seconds_arg(seconds, 1, "advance")
  advance_clock(self, seconds)
  return drain_all(self, huge)
end

local function is_manual(timer) return (clock_state(timer)) end

-- timer:run(): wait() + poll() until nothing pending can fall due.
function M.run(self)
  check_self(self, "run")
  if is_manual(self) then
    error("run() would never end on a manual clock: use advance() or run_for()", 2)
  end
  local ran = 0
  while core_wait(self) do ran = ran + drain_all(self, huge) end
  return ran
end

-- As sinon's clock: passes at one instant beyond this are a task that
-- re-schedules itself with delay 0, which would never let time pass.
local MAX_PASSES_AT_ONE_INSTANT = 1000
-- run_for(math.huge) on the real clock waits in slices this long.
local LONGEST_WAIT = 3600

-- The manual clock moves to each deadline in turn, with a pass there, so
-- that each task runs with the clock at its own deadline; then to the end.
local function run_for_manual(timer, seconds)
  local mark = clock_mark(timer, seconds)
  local ran, passes = 0, 0
  while true do
    local at_mark, moved, due = step_to(timer, mark)
    if not due and at_mark then return ran end
    passes = moved and 1 or passes + 1
    if passes > MAX_PASSES_AT_ONE_INSTANT then
      error(("run_for(): more than %d passes at one instant (a task that re-schedules itself with delay 0?)")
        :format(MAX_PASSES_AT_ONE_INSTANT), 3)
    end
    ran = ran + drain_all(timer, huge)
  end
end

local function run_for_real(timer, seconds)
  local ends_at = now() + seconds
  local ran = 0
  repeat
    local left = ends_at - now()
    if left > 0 then core_wait(timer, math.min(left, LONGEST_WAIT)) end
    ran = ran + drain_all(timer, huge)
  until now() >= ends_at or is_stopped(timer)
  return ran
end

-- run_for()'s seconds: >= 0, and finite on a manual clock.
local function check_run_for_seconds(seconds, manual)
  local number = as_number(seconds)
  if number == nil then arg_error("run_for", 1, "number expected, got " .. type_name(seconds)) end
  if not (number >= 0) or (manual and number == huge) then
    arg_error("run_for", 1, manual and "seconds must be a finite number >= 0 on a manual clock"
                                  or "seconds must be a number >= 0")
  end
  return number
end

-- timer:run_for(seconds): lets `seconds` pass, running what falls due.
function M.run_for(self, seconds)
  check_self(self, "run_for")
  local manual = is_manual(self)
  seconds = check_run_for_seconds(seconds, manual)
  if is_stopped(self) then return 0 end
  if manual then return run_for_manual(self, seconds) end
  return run_for_real(self, seconds)
end

return M
