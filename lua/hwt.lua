-- hwt: a hashed-wheel timer. The C core (hwt.core) does the timing; this file
-- calls the tasks (poll, run, advance), so that a task may yield, and adds
-- the helpers that read better in Lua: timer:sleep() and hwt.retry().
local core = require("hwt.core")
local checks = require("hwt.checks")
local backoff = require("hwt.backoff")
local attachments = require("hwt.driver")

local hwt = {}
for name, value in pairs(core) do hwt[name] = value end
local internal = core.internal                  -- the layer's own: not hwt's API
hwt.internal = nil

local Timer = core.Timer
local unpack = table.unpack or unpack
local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local huge = math.huge
local report_error, traceback = internal.report_error, internal.traceback
local drain_of, take, finish, current = internal.drain, internal.take, internal.finish, internal.current
local recycle = internal.recycle
local args_of = internal.args
local hand, unhand, probe, advance_clock = internal.hand, internal.unhand, internal.probe, internal.advance_clock
local clock_mark, step_to, clock_state = internal.clock_mark, internal.step_to, internal.clock_state
local core_wait = Timer.wait
local type_name, is_callable, is_timer = checks.type_name, checks.is_callable, checks.is_timer
local arg_error, as_number, check_self = checks.arg_error, checks.as_number, checks.check_self
local seconds_arg = checks.seconds_arg
local hooks_of = attachments.hooks_of
local backoff_options, backoff_wait = backoff.options, backoff.wait

-- ---- dispatch: poll, run, advance ------------------------------------------
-- Each task is called under xpcall, by a loop here or, on Lua 5.3+, by the
-- core's loop in C with lua_callk (and for a poll() of all that is due,
-- under the core's lua_pcallk: internal.poll does run_drain's work): so it
-- may yield wherever the coroutine that called poll() could (Lua 5.2+ and
-- LuaJIT yield across xpcall; PUC 5.1 cannot, and the yield is the task's
-- error). The core's
-- `take` starts the next due timeout inside the protected call, and records
-- it in the drain, so that a timeout taken is always called, and always
-- finished: by the next `take`, by `finish`, or by the drain's finalizer if
-- the coroutine is dropped while the task is suspended.

local CALL_WITH_ARGS = 3        -- take()'s shape for a TimerTask or > 2 arguments

local function call_with_args(task, t, is_method, ...)
  if is_method then return task:run(t, ...) end
  return task(t, ...)
end

-- Runs up to `budget` tasks in one protected call; returns whether nothing
-- more is due, and how many tasks it took. One xpcall per batch, not per
-- task: a task's error ends the batch, and run_drain starts the next.
-- Before it takes anything it calls probe(), as deep as a task call: a
-- batch that could not call a task (poll() nested in tasks past the C stack
-- or the Lua stack) fails there, with nothing taken. take() gives a task
-- with up to 2 arguments as plain values, so that the common call is not a
-- vararg one. On Lua 5.3+ the core has this loop in C (internal.run_batch),
-- where a task can yield too.
local run_batch = internal.run_batch or function(drain, budget)
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

-- On LuaJIT the take is an FFI call (a classic one before each task costs a
-- loop whose tasks miss the cache three times as much: bench/RESULTS.md).
-- The call comes from the anchor table, which on LuaJIT holds, for slot s,
-- the Timeout at 2s - 1 and at 2s its task; a task of shape 1 or 2 is
-- anchored instead by its user value table (the Timeout at 0, the task and
-- the arguments), at slot s of the single anchors. The FFI take does the
-- step of a poll that needs no Lua API; for the rest (a hand-off, a
-- watcher, ...) it returns `classic`, having done nothing, and the classic
-- take does it, in run_batch. Once every few takes its step asks for a
-- read_ahead (see there, in src/lhwt.c). The slot of a timeout it let go
-- (negated for a single anchor) is this loop's to clear; the next FFI take
-- is told it was, and only then gives it back.
local dispatch_batch = run_batch
if internal.ffi_take then
  local ffi = require("ffi")
  local ffi_take = ffi.cast("int32_t (*)(void *, int32_t, int32_t *)", internal.ffi_take)
  local layout, anchors_of, read_ahead = internal.ffi_layout, internal.ffi_anchors, internal.read_ahead
  local CLASSIC, RELEASED, SHAPE = layout.classic, layout.released, layout.shape
  local READ_AHEAD = layout.read_ahead
  local TASK, FIRST_ARG, SECOND_ARG = layout.task, layout.first_arg, layout.first_arg + 1
  local SELF, SINGLES = layout.self, layout.singles
  local step = ffi.new("int32_t[?]", layout.step_size)

  dispatch_batch = function(drain, budget)
    local anchors = anchors_of(drain)            -- after the probe, as run_batch's
    local singles = anchors[SINGLES]
    local cleared = 0
    for n = 1, budget do
      local slot = ffi_take(drain, cleared, step)
      cleared = 0
      local released = step[RELEASED]
      if released ~= 0 and slot ~= CLASSIC then
        if released > 0 then
          anchors[2 * released - 1], anchors[2 * released] = nil, nil
        else
          singles[-released] = nil
        end
        cleared = released
      end
      if slot > 0 then
        if step[READ_AHEAD] ~= 0 then read_ahead(drain) end
        local shape = step[SHAPE]
        if shape == 0 then anchors[2 * slot](anchors[2 * slot - 1])
        elseif shape == 1 then
          local values = singles[slot]
          values[TASK](values[SELF], values[FIRST_ARG])
        elseif shape == 2 then
          local values = singles[slot]
          values[TASK](values[SELF], values[FIRST_ARG], values[SECOND_ARG])
        else call_with_args(anchors[2 * slot], anchors[2 * slot - 1], args_of(drain)) end
      elseif slot == 0 or run_batch(drain, 1) then
        return true, n - 1
      end
    end
    return false, budget
  end
end

local function pass_error(err) return err end

-- What a poll's run_drain passes to xpcall: dispatch_batch, or on PUC 5.1,
-- whose xpcall passes f no arguments, a function that reads them from
-- upvalues that set_batch_args sets just before (xpcall calls it at once; a
-- closure per batch would be garbage). Elsewhere set_batch_args is nil.
local batch, set_batch_args = dispatch_batch, nil
if select(2, xpcall(function(...) return select("#", ...) end, pass_error, true)) ~= 1 then
  local next_drain, next_budget
  batch = function()
    local drain = next_drain
    next_drain = nil                           -- holds no drain (nor its timer) past the call
    return run_batch(drain, next_budget)
  end
  set_batch_args = function(drain, budget) next_drain, next_budget = drain, budget end
end
-- A hand-off runs one task, which the FFI take would leave to the classic one.
local handoff_batch = set_batch_args and batch or run_batch

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
  recycle(drain)                               -- the next poll's, unless it raised
  return ran
end

-- drain_timer(timer, huge): everything due. On Lua 5.3+ the core does it in
-- one C call (internal.poll, false for no Timer), with no Lua call between
-- the wake-up and the first task.
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

-- timer:poll([max [, spawn]]): runs (or hands to spawn) what is due. The
-- common call, with neither, leaves its self check to the core: a
-- getmetatable() from Lua costs each wake-up of a host's loop some 350
-- instructions.
function Timer:poll(max, spawn)
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
function Timer:advance(seconds)
  check_self(self, "advance")
  seconds = seconds_arg(seconds, 1, "advance")
  advance_clock(self, seconds)
  return drain_all(self, huge)
end

local function is_manual(timer) return (clock_state(timer)) end

-- timer:run(): wait() + poll() until nothing pending can fall due.
function Timer:run()
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

local function is_stopped(timer)
  return select(2, clock_state(timer))
end

local function run_for_real(timer, seconds)
  local ends_at = hwt.now() + seconds
  local ran = 0
  repeat
    local left = ends_at - hwt.now()
    if left > 0 then core_wait(timer, math.min(left, LONGEST_WAIT)) end
    ran = ran + drain_all(timer, huge)
  until hwt.now() >= ends_at or is_stopped(timer)
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
function Timer:run_for(seconds)
  check_self(self, "run_for")
  local manual = is_manual(self)
  seconds = check_run_for_seconds(seconds, manual)
  if is_stopped(self) then return 0 end
  if manual then return run_for_manual(self, seconds) end
  return run_for_real(self, seconds)
end

-- What stop() must tell, by the timeout that stands for it: a retry waiting
-- for its next try, a coroutine in sleep(). Entries leave when the timeout
-- fires or is cancelled; weak keys, so a collected timer takes its own along.
local on_stop = setmetatable({}, { __mode = "k" })

-- Retries whose fn is being called (perhaps suspended in a yield), by
-- handle, with their timer; weak both ways, so a retry whose coroutine was
-- dropped goes with it.
local calling = setmetatable({}, { __mode = "kv" })

local core_stop = Timer.stop

-- Whether a call made in coroutine `co` is held in a yield (or its coroutine
-- closed) rather than on the stack below the running code: `co` is nil for
-- 5.1's and LuaJIT's main thread, which never yields.
local function call_is_held(co)
  if co == nil then return false end
  local status = coroutine.status(co)
  return status == "suspended" or status == "dead"
end

-- Gives up the retries of `timer` whose fn is held in a yield: their call's
-- result no longer counts. A call still on the stack stopped the timer
-- itself, if only through a coroutine it resumed or a finalizer that ran
-- inside it: that fn is left to finish.
local function give_up_calls(timer)
  local stopped = {}
  for handle, its_timer in pairs(calling) do
    if its_timer == timer and call_is_held(handle._calling_co) and not handle.done then
      stopped[#stopped + 1] = handle
    end
  end
  for _, handle in ipairs(stopped) do
    calling[handle] = nil
    local ok, err = pcall(handle._give_up, "timer is stopped")
    if not ok then pcall(report_error, timer, err) end
  end
end

-- Tells each waiting retry and sleeper among `ended` that the timer stopped,
-- and each retry held in a yield. Run in a coroutine of its own, so that a
-- deep caller's Lua stack does not limit it; an error goes where task errors
-- go, and the others are still told.
local function tell_stopped(timer, ended)
  for i = 1, #ended do
    local t = ended[i]
    local tell = on_stop[t]
    if tell then
      on_stop[t] = nil
      local ok, err = pcall(tell)
      if not ok then pcall(report_error, timer, err, t) end
    end
  end
  give_up_calls(timer)
end

-- The same C depth as tell_stopped waking a sleeper, doing nothing.
local function resume_nothing()
  local resumed, err = coroutine.resume(coroutine.create(function() end))
  if not resumed then error(err, 0) end
end
local function rehearse_telling()
  local fits, err = pcall(resume_nothing)
  if not fits then error(err, 0) end
end

-- timer:stop(): the core's stop, then each waiting retry gives up and each
-- sleeping coroutine wakes with nil, "timer is stopped", before it returns.
-- Where the C stack could not take those calls (stop() nested in C calls to
-- the limit), or memory is short, it raises before stopping anything; once
-- stopped, it always returns what it stopped.
function Timer:stop()
  if next(on_stop) == nil and next(calling) == nil then
    local ended = core_stop(self)
    -- A finalizer that ran inside the core's stop, before it stopped, may
    -- have armed a retry's next try since: it is among `ended`, to be told.
    if next(on_stop) ~= nil or next(calling) ~= nil then
      local told, failure = pcall(tell_stopped, self, ended)
      if not told then pcall(report_error, self, failure) end
    end
    return ended
  end
  local fits, err = coroutine.resume(coroutine.create(rehearse_telling))
  if not fits then error(err, 2) end
  local teller = coroutine.create(tell_stopped)
  local ended = core_stop(self)
  local told, failure = coroutine.resume(teller, self, ended)
  if not told then pcall(report_error, self, failure) end
  return ended
end

-- timer:sleep(seconds): suspends the calling coroutine; a later poll() of the
-- timer resumes it. Returns true, or nil and a message when the timer refuses
-- (max_pending) or stops. Resuming the coroutine by hand ends the sleep early.
local function resume_sleeper(co, ...)
  if coroutine.status(co) ~= "suspended" then return end
  local ok, err = coroutine.resume(co, ...)
  if not ok then error(err, 0) end
end

local function wake_sleeper(t, co)
  on_stop[t] = nil
  resume_sleeper(co, true)
end

-- Whether the running coroutine could yield here. Lua 5.3+ says so
-- (coroutine.isyieldable); on 5.1, 5.2 and LuaJIT the caller's frames in this
-- coroutine are inspected: a C function (a task run by poll(), table.sort,
-- ...) blocks a yield, except pcall/xpcall where they can be yielded across
-- (5.2, LuaJIT), and so does a metamethod on 5.1.
-- The probe of pcall runs on first use, not at require time: OpenResty's
-- init_worker_by_lua forbids coroutines.
local isyieldable = coroutine.isyieldable
if not isyieldable then
  local pcall_yields
  isyieldable = function()
    if pcall_yields == nil then
      pcall_yields = coroutine.wrap(function() return pcall(coroutine.yield, true) end)() == true
    end
    local level = 3                              -- the caller of Timer:sleep
    while true do
      local info = debug.getinfo(level, "Snf")
      if not info then return true end
      if info.what == "C" and not (pcall_yields and (info.func == pcall or info.func == xpcall)) then
        return false
      end
      if not pcall_yields and info.namewhat == "metamethod" then return false end
      level = level + 1
    end
  end
end

-- Under a host with a sleep of its own (hwt.ngx: ngx.sleep), a yield
-- belongs to the host's scheduler, not to a poll() of this timer: the host
-- sleeps, and a stop made meanwhile shows when it wakes.
local function host_sleep(timer, sleep, seconds)
  if is_stopped(timer) then return nil, "timer is stopped" end
  sleep(seconds)
  if is_stopped(timer) then return nil, "timer is stopped" end
  return true
end

function Timer:sleep(seconds)
  if not is_timer(self) then
    error("bad argument #1 to 'sleep' (hwt.Timer expected, got " .. type(self) .. ")", 2)
  end
  local hooks = hooks_of(self)
  if hooks and hooks.sleep then
    seconds = seconds_arg(seconds, 1, "sleep")
    return host_sleep(self, hooks.sleep, seconds)
  end
  local co, is_main = coroutine.running()
  if co == nil or is_main then
    error("sleep() must be called from inside a coroutine", 2)
  end
  if not isyieldable() then
    error("sleep() cannot yield here (inside a timer task or a C call)", 2)
  end
  local t, err = self:timeout(seconds, wake_sleeper, co)
  if not t then return nil, err end
  if is_stopped(self) then return nil, "timer is stopped" end   -- by a finalizer in timeout()
  on_stop[t] = function() resume_sleeper(co, nil, "timer is stopped") end
  local woken, why = coroutine.yield()
  if t:cancel() then on_stop[t] = nil end      -- resumed by hand
  if woken == nil and why then return nil, why end
  return woken == true
end

-- hwt.retry(timer, fn, opts): calls fn(attempt, handle) now; on failure (an
-- error, or a nil/false first result) calls it again after a growing delay
-- (the backoff rules are hwt.backoff's, shared with hwt.jobs).
local RETRY_CALLBACKS = { on_give_up = true, on_success = true, on_retry = true, random = true }

local function bad_retry_option(key, message)
  error(("bad option '%s' to 'retry' (%s)"):format(key, message), 5)
end

local function check_retry_options(opts)
  local o = backoff_options(opts, bad_retry_option)
  for key, value in pairs(opts) do
    if RETRY_CALLBACKS[key] then
      if type(value) ~= "function" then
        error(("bad option '%s' to 'retry' (function expected, got %s)"):format(key, type(value)), 3)
      end
      o[key] = value
    elseif o[key] == nil then
      error(("bad argument #3 to 'retry' (unknown option '%s')"):format(tostring(key)), 3)
    end
  end
  return o
end

local RetryHandle = {}
RetryHandle.__index = RetryHandle

-- Stops further tries; true if a try was still to come.
function RetryHandle:cancel()
  if self.done then return false end
  self.done = true
  if self.pending and self.pending:cancel() then on_stop[self.pending] = nil end
  self.pending = nil
  return true
end

function hwt.retry(timer, fn, opts)
  if not is_timer(timer) then
    error("bad argument #1 to 'retry' (hwt.Timer expected)", 2)
  end
  if not is_callable(fn) then
    error("bad argument #2 to 'retry' (function or callable expected, got " .. type_name(fn) .. ")", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("bad argument #3 to 'retry' (table expected, got " .. type(opts) .. ")", 2)
  end
  local o = check_retry_options(opts or {})
  local handle = setmetatable({ attempts = 0, done = false }, RetryHandle)

  -- Without on_give_up, the error goes where task errors go: a retry that
  -- fails for good is never silent. A stop is the program's own doing.
  local function give_up(err, by_stop)
    handle.done = true
    if o.on_give_up then
      o.on_give_up(err)
    elseif not by_stop then
      report_error(timer, err)
    end
  end
  handle._give_up = function(err) give_up(err, true) end

  local attempt
  local function try_again(t)
    on_stop[t] = nil
    handle.pending = nil
    attempt()
  end
  local function stopped_while_waiting()
    handle.pending = nil
    give_up("timer is stopped", true)
  end

  function attempt()
    if handle.done then return end
    handle.attempts = handle.attempts + 1
    handle._calling_co = coroutine.running()
    calling[handle] = timer
    local results = pack(pcall(fn, handle.attempts, handle))
    calling[handle] = nil
    if handle.done then return end            -- fn cancelled the handle, or a stop gave up
    if results[1] and results[2] then
      handle.done = true
      if o.on_success then o.on_success(unpack(results, 2, results.n)) end
      return
    end
    local err = results[1] and results[3] or results[2]
    if is_stopped(timer) then return give_up("timer is stopped", true) end
    if handle.attempts > o.retries then return give_up(err) end
    local wait = backoff_wait(o, handle.attempts)
    if o.on_retry then
      o.on_retry(err, handle.attempts, wait)
      if handle.done then return end            -- on_retry cancelled it
    end
    -- The timer may have stopped since fn returned (on_retry stopped it), or
    -- stop inside timeout() (a finalizer): timeout() then raises, or arms the
    -- try and ends it before on_stop knows it. Either way, the retry gives
    -- up as any other that the stop finds.
    local armed, t, refusal = pcall(timer.timeout, timer, wait, try_again)
    if is_stopped(timer) then return give_up("timer is stopped", true) end
    if not armed then return give_up(t) end
    if not t then return give_up(refusal) end
    handle.pending = t
    on_stop[t] = stopped_while_waiting
  end

  attempt()
  return handle
end

return hwt
