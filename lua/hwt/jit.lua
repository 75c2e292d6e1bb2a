-- hwt.jit: LuaJIT's Timeouts. LuaJIT's trace compiler cannot compile a
-- call through the classic Lua C API, so on LuaJIT a Timeout is a cdata
-- { slot, gen } naming a timeout in C memory (src/slot_arena.c), and every
-- schedule, cancel, reset, query and take is an FFI call into the core's
-- C ABI (src/lhwt_ffi.c); what Lua keeps of a timeout (its Timeout, task
-- and arguments) lives in plain tables indexed by its slot. A loop of those
-- calls compiles.
--
-- A slot's entries are written before the slot is armed and cleared as soon
-- as the ABI reports it released (before anything that could allocate, so
-- before any finalizer can run and reuse it). A Timeout whose timeout ended
-- records how in the two bits above its slot number (RAN, CANCELLED), and
-- then answers from them: its task and arguments were let go with the slot,
-- so a task that refers to its own Timeout is not kept alive through it.
-- A stale Timeout (its timer stopped or collected) answers as cancelled.
local ffi = require("ffi")
local core = require("hwt.core")
local checks = require("hwt.checks")

-- A ctype's metatype is set once per Lua state: a second load of this
-- module in the same state (package.loaded emptied, as busted does between
-- spec files) gives the first one back.
local REGISTRY_KEY = "hwt.jit"
local loaded = debug.getregistry()[REGISTRY_KEY]
if loaded then
  checks.set_cdata_timeout_test(loaded.is_timeout)
  return loaded
end

local M = {}

local internal = core.internal
local abi_address, cdef, arena_address, slot_tables, layout = internal.ffi_abi()
if not pcall(ffi.typeof, "hwt_abi") then ffi.cdef(cdef) end   -- once per process
local abi = ffi.cast("const hwt_abi *", abi_address)
local arena = ffi.cast("hwt_arena *", arena_address)
local reserve, arm, cancel, reset = abi.reserve, abi.arm, abi.cancel, abi.reset
local state_of, remaining_of, deadline_of, kept = abi.state, abi.remaining, abi.deadline, abi.kept
local take, finish_drain, current_of, taken_of = abi.take, abi.finish, abi.current, abi.taken
-- calls[2n - 1] is slot n's Timeout, calls[2n] its task: one cache line
-- for both. firsts, seconds, extras: its arguments (see keep below).
local calls, firsts, seconds, extras = slot_tables[1], slot_tables[2], slot_tables[3], slot_tables[4]
local queue_address, ffi_poll, ffi_hand, tell = internal.queue, internal.ffi_poll, internal.ffi_hand, internal.tell
local max_pending, probe, timer_of = internal.max_pending, internal.probe, internal.timer_of
local type, select, unpack, floor = type, select, unpack, math.floor
local arg_error, as_number, type_name, is_callable = checks.arg_error, checks.as_number, checks.type_name, checks.is_callable

-- ---- numbers shared with the C side -----------------------------------------
local ENDED_UNIT = 2 ^ layout.number_bits           -- a handle's end bits, as a number
local NUMBER_MAX = ENDED_UNIT - 1
local RAN, CANCELLED = layout.ran, layout.cancelled
local ARM_TELL, RESET_ENDED, TAKE_TELL = layout.arm_tell, layout.reset_ended, layout.take_tell
local STOPPED, FULL, NO_THREAD = layout.stopped, layout.full, layout.no_thread
local HAS_RUN = 8                                    -- or'ed into the state by abi.state
-- The engine's states (src/engine.h).
local PENDING, DUE, RUNNING, DONE, STATE_CANCELLED, HANDED = 1, 2, 3, 4, 5, 6
-- How a task is called: with 0, 1, 2 arguments of its own entries; with an
-- array of them; as a TimerTask (task:run(...)) with an array.
local WITH_ARRAY, AS_METHOD = 3, 4
local MAX_TASK_ARGS = 250

local Timeout = {}
local Handle                                         -- the metatype, made below
-- Not a tail call (the parentheses): a trace that starts at this function
-- cannot follow a tail call's return into its caller and aborts there.
local function is_handle(value) return (ffi.istype(Handle, value)) end
local step = ffi.new("hwt_step")

-- ---- slots and their entries ------------------------------------------------------

-- Clears a released slot's entries. An argument entry is cleared only where
-- it holds something: a store of nil to an absent key inserts the key (a
-- call of lj_tab_newkey in a trace), and most timeouts have no arguments.
local function clear_entries(number)
  calls[2 * number - 1], calls[2 * number] = nil, nil
  if firsts[number] ~= nil then firsts[number] = nil end
  if seconds[number] ~= nil then seconds[number] = nil end
  if extras[number] ~= nil then extras[number] = nil end
end

-- The same for the slot a take or a finish released (step), whose Timeout
-- records how it ended and its deadline then.
local function release_stepped()
  local number = step.released
  local t = calls[2 * number - 1]
  if t then
    t.slot = number + step.end_bits * ENDED_UNIT
    t.ended_at = step.deadline
  end
  clear_entries(number)
end

-- A Timer's queue, for the ABI, from a weak table; each Timer's first use
-- checks it (and raises as the C core does for a bad self).
local queues = setmetatable({}, {__mode = "k"})

local function queue_of(timer, fname)
  if not checks.is_timer(timer) then
    error(("calling '%s' on bad self (hwt.Timer expected, got %s)"):format(fname, type_name(timer)), 3)
  end
  local queue = ffi.cast("hwt_queue *", queue_address(timer))
  queues[timer] = queue
  return queue
end

-- ---- timer:timeout() and timer:every() --------------------------------------------

local function raise_arg(fname, n, message)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, message), 3)
end

-- A delay argument (#1 of fname, called `name`): a number >= 0 or a numeric
-- string; math.huge means never.
local function checked_delay(value, fname, name)
  local seconds = as_number(value)
  if seconds == nil then raise_arg(fname, 1, "number expected, got " .. type_name(value)) end
  if not (seconds >= 0) then
    raise_arg(fname, 1, ("%s must be a number >= 0, got %.14g"):format(name, seconds))
  end
  return seconds
end

-- The call shape of a task that is not a function, with n arguments.
local function shape_of(task, n, fname)
  if is_callable(task) then return n > 2 and WITH_ARRAY or n end
  if type(task) == "table" and is_callable(task.run) then return AS_METHOD end
  raise_arg(fname, 2, "task must be a function, a callable or a table with a 'run' method")
end

-- After arm() refused: the slot was released; raise or return nil, err.
local function refused(timer, number, result)
  clear_entries(number)
  if result == STOPPED then error("timer is stopped", 3) end
  if result == FULL then
    return nil, ("too many pending timeouts (max_pending = %d)"):format(max_pending(timer))
  end
  if result == NO_THREAD then return nil, "cannot start the timer's worker thread" end
  error("not enough memory", 3)
end

local function not_reserved(number)
  if number == -STOPPED then error("timer is stopped", 3) end
  error("not enough memory", 3)
end

-- Schedules task on the timer's queue (both checked): a slot reserved, its
-- entries written (the Timeout, the task, its arguments: `a`, `b`, or for
-- more, or a TimerTask, the array `args`), then armed. Not a vararg
-- function, so that LuaJIT can compile it as a trace of its own when the
-- caller's loop cannot be compiled (one that makes a closure per timeout).
local function schedule(timer, queue, delay, interval, task, shape, a, b, args)
  local t = Handle()
  local number = reserve(queue, t, shape)
  if number <= 0 then not_reserved(number) end
  calls[2 * number - 1], calls[2 * number] = t, task
  if shape == 1 then firsts[number] = a
  elseif shape == 2 then firsts[number], seconds[number] = a, b
  elseif shape >= WITH_ARRAY then extras[number] = args end
  local result = arm(queue, number, delay, interval)
  if result == 0 then return t end
  if result == ARM_TELL then
    tell(timer, number)
    return t
  end
  return refused(timer, number, result)
end

-- The checks timeout() and every() share, then the schedule (n extra
-- arguments: a, b, or the array `args` when n > 2).
local function checked_schedule(self, queue, fname, delay, interval, task, n, a, b, args)
  local shape = n > 2 and WITH_ARRAY or n
  if type(task) ~= "function" then
    shape = shape_of(task, n, fname)
    if shape == AS_METHOD and not args then args = {n = n, a, b} end
  end
  return schedule(self, queue, delay, interval, task, shape, a, b, args)
end

local function many_args(fname, n, ...)
  if n > MAX_TASK_ARGS then raise_arg(fname, 2 + MAX_TASK_ARGS, "too many task arguments") end
  return {n = n, ...}
end

-- timer:timeout(delay, task, ...)
local function timer_timeout(self, delay, task, ...)
  local queue = queues[self] or queue_of(self, "timeout")
  if type(delay) ~= "number" or not (delay >= 0) then delay = checked_delay(delay, "timeout", "delay") end
  local n = select("#", ...)
  if n <= 2 then return checked_schedule(self, queue, "timeout", delay, 0, task, n, ...) end
  return checked_schedule(self, queue, "timeout", delay, 0, task, n, nil, nil, many_args("timeout", n, ...))
end

local function checked_interval(interval)
  local seconds = as_number(interval)
  if seconds == nil then raise_arg("every", 1, "number expected, got " .. type_name(interval)) end
  if seconds ~= seconds then raise_arg("every", 1, ("interval must be a number >= 0, got %.14g"):format(seconds)) end
  if not (seconds > 0) then raise_arg("every", 1, "interval must be > 0") end
  return seconds
end

-- timer:every(interval, task, ...)
local function timer_every(self, interval, task, ...)
  local queue = queues[self] or queue_of(self, "every")
  if type(interval) ~= "number" or not (interval > 0) then interval = checked_interval(interval) end
  local n = select("#", ...)
  if n <= 2 then return checked_schedule(self, queue, "every", interval, interval, task, n, ...) end
  return checked_schedule(self, queue, "every", interval, interval, task, n, nil, nil, many_args("every", n, ...))
end

-- ---- the Timeout's methods ---------------------------------------------------------

local function check_timeout(t, fname)
  if not is_handle(t) then
    error(("calling '%s' on bad self (hwt.Timeout expected, got %s)"):format(fname, type_name(t)), 3)
  end
end

-- How an ended Timeout ended (its end bits), or nil while it has not.
local function ended_bits(t)
  local number = t.slot
  if number > NUMBER_MAX then return floor(number / ENDED_UNIT) end
  return nil
end

-- The engine's state of t (with HAS_RUN), or nil when it ended or is stale.
local function live_state(t)
  local number = t.slot
  if number > NUMBER_MAX then return nil end
  local state = state_of(arena, number, t.gen)
  if state == 0 then return nil end
  return state
end

function Timeout.cancel(t)
  check_timeout(t, "cancel")
  local number = t.slot
  -- Ended, or its slot's entry is not t (a timer that went): nothing to
  -- cancel. Reading the entry first also starts its cache miss before the
  -- engine's lock, so that it overlaps the slot's.
  if number > NUMBER_MAX then return false end
  local result = cancel(arena, t)
  if result == 2 then
    clear_entries(number)
    return true
  end
  return result == 1
end

function Timeout.is_cancelled(t)
  check_timeout(t, "is_cancelled")
  local state = live_state(t)
  if state then return state % HAS_RUN == STATE_CANCELLED end
  local ended = ended_bits(t)
  return ended == nil or ended >= CANCELLED            -- stale: as cancelled
end

function Timeout.is_expired(t)
  check_timeout(t, "is_expired")
  local state = live_state(t)
  if state then return state >= HAS_RUN end
  local ended = ended_bits(t)
  return ended ~= nil and ended % CANCELLED == RAN
end

function Timeout.remaining(t)
  check_timeout(t, "remaining")
  local number = t.slot
  if number > NUMBER_MAX then return 0 end
  return remaining_of(arena, number, t.gen)
end

-- On the timer's clock: while it lives, its slot's; once it ended, the
-- one it recorded then.
function Timeout.deadline(t)
  check_timeout(t, "deadline")
  local number = t.slot
  if number > NUMBER_MAX then return t.ended_at end
  local deadline = deadline_of(arena, number, t.gen)
  if deadline ~= deadline then return t.ended_at end      -- stale: its timer went
  return deadline
end

function Timeout.timer(t)
  check_timeout(t, "timer")
  return timer_of(t.slot, t.gen)
end

-- The task while the timeout is pending or running, or once stop() handed
-- it back (until its timer goes); nil once it ended otherwise.
function Timeout.task(t)
  check_timeout(t, "task")
  local number, gen = t.slot % ENDED_UNIT, t.gen
  if state_of(arena, number, gen) == 0 and kept(arena, number, gen) == 0 then return nil end
  return calls[2 * number]
end

-- t:reset([delay]): as the userdata's, while t is pending or running. An
-- ended timeout has let go of its task: resetting it raises.
function Timeout.reset(t, delay)
  check_timeout(t, "reset")
  if delay == nil then delay = -1
  elseif type(delay) ~= "number" or not (delay >= 0) then delay = checked_delay(delay, "reset", "delay") end
  local number = t.slot
  local result = number <= NUMBER_MAX and reset(arena, number, t.gen, delay) or RESET_ENDED
  if result == 0 then return true end
  if result == ARM_TELL then
    local timer = Timeout.timer(t)
    if timer then tell(timer, number) end
    return true
  end
  if result == FULL then
    local timer = Timeout.timer(t)
    return nil, ("too many pending timeouts (max_pending = %d)"):format(timer and max_pending(timer) or 0)
  end
  if result == STOPPED then error("timer is stopped", 2) end
  local timer = Timeout.timer(t)
  if timer == nil or timer:is_stopped() then error("timer is stopped", 2) end
  error("timeout has ended: on LuaJIT an ended Timeout no longer holds its task "
        .. "(reset it from inside its task, or schedule a new one)", 2)
end

local STATE_NAMES = {
  [PENDING] = "pending", [DUE] = "due", [RUNNING] = "running", [DONE] = "expired",
  [STATE_CANCELLED] = "cancelled", [HANDED] = "due, handed to spawn",
}

local function describe(t)
  local state = live_state(t)
  local name
  if state then
    name = STATE_NAMES[state % HAS_RUN]
    if state % HAS_RUN == PENDING and state >= HAS_RUN then name = "pending (periodic)" end
  else
    local ended = ended_bits(t)
    name = (ended == nil or ended >= CANCELLED) and "cancelled" or "expired"
  end
  local address = tonumber(ffi.cast("uintptr_t", ffi.cast("void *", t)))
  local remaining = state and remaining_of(arena, t.slot, t.gen) or 0
  if remaining == math.huge then
    return ("hwt.Timeout (%s, never due): 0x%x"):format(name, address)
  end
  return ("hwt.Timeout (%s, due in %fs): 0x%x"):format(name, remaining, address)
end

-- ---- draining: what hwt.dispatch's loops call -------------------------------------

-- The idle drain of each timer: a finished poll's, for its next poll.
local idle_drains = setmetatable({}, {__mode = "k"})

-- drain_of(timer) -> a poll's drain and whether the timer has on_error; nil
-- when nothing is due or it is stopped; false when it is not a Timer.
local function drain_of(timer)
  local idle = idle_drains[timer]
  if idle then idle_drains[timer] = nil end
  local drain, has_on_error = ffi_poll(timer, idle)
  if drain == nil and idle then idle_drains[timer] = idle end
  return drain, has_on_error
end

local function recycle(drain, timer) idle_drains[timer] = drain end

-- Runs up to `budget` tasks of the drain; returns whether nothing more is
-- due, and how many it took. (hwt.dispatch runs it under xpcall.)
local function batch(drain, budget)
  probe()
  local n = 0
  while n < budget do
    local number = take(drain, step)
    if step.released ~= 0 then release_stepped() end
    if number == 0 then return true, n end
    if number == TAKE_TELL then
      tell(drain, step.shape)
    else
      n = n + 1
      local t, task, shape = calls[2 * number - 1], calls[2 * number], step.shape
      if shape == 0 then task(t)
      elseif shape == 1 then task(t, firsts[number])
      elseif shape == 2 then task(t, firsts[number], seconds[number])
      else
        local args = extras[number]
        if shape == AS_METHOD then task:run(t, unpack(args, 1, args.n))
        else task(t, unpack(args, 1, args.n)) end
      end
    end
  end
  return false, budget
end

-- The drain's current Timeout (nil when none) and how many it took.
local function current(drain)
  local number = current_of(drain)
  return number ~= 0 and calls[2 * number - 1] or nil, taken_of(drain)
end

local function finish(drain)
  finish_drain(drain, step)
  if step.released ~= 0 then release_stepped() end
end

M.drain_steps = {
  drain_of = drain_of, batch = batch, current = current, finish = finish, recycle = recycle,
  hand = ffi_hand, unhand = internal.ffi_unhand,
}

-- ---- the module's parts ------------------------------------------------------------

Handle = ffi.metatype("hwt_handle", {__index = Timeout, __tostring = describe})
checks.set_cdata_timeout_test(is_handle)

M.Timeout = Timeout
-- hwt.now(): CLOCK_MONOTONIC in seconds, through ffi.C, whose calls the
-- trace compiler records as direct calls. The same double as the core's
-- (nanoseconds, rounded once to a double, over 1e9): sec * 1e9 is exact.
if not pcall(ffi.typeof, "struct hwt_timespec") then
  ffi.cdef[[
    struct hwt_timespec { long tv_sec; long tv_nsec; };
    int clock_gettime(int clock_id, struct hwt_timespec *tp);
  ]]
end
local CLOCK_MONOTONIC = 1                          -- Linux
local clock_gettime, timespec = ffi.C.clock_gettime, ffi.new("struct hwt_timespec")
function M.now()
  clock_gettime(CLOCK_MONOTONIC, timespec)
  return (tonumber(timespec.tv_sec) * 1e9 + tonumber(timespec.tv_nsec)) / 1e9
end

M.is_timeout = is_handle
M.timer_methods = {timeout = timer_timeout, every = timer_every}

debug.getregistry()[REGISTRY_KEY] = M
return M
