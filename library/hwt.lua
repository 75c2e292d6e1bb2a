---@meta hwt

-- LuaLS (lua-language-server) definitions for hwt, a hashed-wheel timer.
-- Add this folder to the workspace library to get completion and type checks
-- for require("hwt") and its drivers, e.g. in .luarc.json:
--   { "workspace.library": ["path/to/hwt/library"] }
-- Times are seconds as Lua numbers (fractions allowed). test/docs/meta_test.lua
-- checks these files against the real modules.
--
-- To extend every timer (or timeout), declare the class where you add to it:
--   ---@class hwt.Timer
--   local Timer = require("hwt").Timer
--   function Timer:after(delay, fn) return self:timeout(delay, fn) end

---A hashed-wheel timer: a C worker keeps time, tasks run in your `poll()`.
---@class hwt
---The version string, e.g. `"hwt 0.2.0"`.
---@field _VERSION string
local hwt = {}

---A task: a function, a callable (`__call`), or a table with a `run` method (Netty's TimerTask), called with the Timeout and the extra arguments.
---@alias hwt.Task fun(timeout: hwt.Timeout, ...: any)|hwt.TimerTask|table

---Netty's TimerTask: a table whose `run` is called as `task:run(timeout, ...)`.
---@class hwt.TimerTask
---@field run fun(self: hwt.TimerTask, timeout: hwt.Timeout, ...: any): any

---`poll()`'s spawn: starts each due task through `spawn(fn)`, e.g. `ngx.thread.spawn` or `function(f) coroutine.wrap(f)() end`.
---@alias hwt.Spawn fun(fn: fun())

---Options of `hwt.new` (all optional; an unknown key raises an error naming it).
---@class hwt.Options
---Seconds per tick (default 0.01); > 0 and >= 1e-6.
---@field tick? number
---Slots per wheel, rounded up to a power of two (default 512); 1 .. 2^30.
---@field wheel_size? integer
---0 = unlimited (default); otherwise `timeout()` returns `nil, "too many pending timeouts (...)"` once reached.
---@field max_pending? integer
---Called when a task raises, with the error value unchanged; default: the error and a traceback to stderr. Either way poll() goes on.
---@field on_error? fun(err: any, timeout: hwt.Timeout)
---`"monotonic"` (default), or `"manual"`: no worker thread; time only moves by `timer:advance(seconds)` / `timer:run_for(seconds)`.
---@field clock? "monotonic"|"manual"
---Real-clock timers with the same tick and wheel_size share one engine and worker thread (default true); false gives the timer its own.
---@field shared? boolean

---What `timer:stats()` returns.
---@class hwt.Stats
---Timeouts scheduled and neither run nor cancelled (as `pending()`).
---@field pending integer
---Timeouts due, waiting for poll().
---@field due integer
---Tasks started (a task that raised counts).
---@field fired integer
---Successful cancels, including by stop().
---@field cancelled integer
---Ticks the wheel has passed, idle ones included (the engine's).
---@field ticks integer
---Seconds, the largest start − deadline.
---@field late_max number
---Seconds, nearest-rank median of start − deadline over every task started; 0 before any task has started.
---@field late_p50 number
---Seconds, nearest-rank 99th percentile of start − deadline over every task started; 0 before any task has started.
---@field late_p99 number
---Times the worker thread woke (the engine's).
---@field worker_wakeups integer
---Seconds per tick.
---@field tick number
---Slots per wheel (a power of two).
---@field wheel_size integer
---The `max_pending` cap, 0 = unlimited.
---@field max_pending integer
---`"monotonic"` or `"manual"`.
---@field clock "monotonic"|"manual"
---true once `stop()` was called (or the timer was stopped with its state).
---@field stopped boolean
---Whether the timer shares its engine (wheel, worker thread) with other timers.
---@field shared boolean

---Options of `hwt.retry` (all optional; an unknown key raises an error naming it).
---@class hwt.RetryOptions
---Retries after the first call, at most (default 3): `retries + 1` calls; `math.huge` retries for ever.
---@field retries? number
---Seconds before the first retry (default 1); >= 0.
---@field delay? number
---Multiplier of the wait per retry (default 2); >= 1.
---@field backoff? number
---Seconds, the cap on a wait, applied after jitter (default 60); >= 0.
---@field max_delay? number
---Fraction 0..1: each wait is multiplied by `1 ± jitter` (default 0).
---@field jitter? number
---Returns a number in [0, 1) for the jitter (default `math.random`).
---@field random? fun(): number
---Called once after the last failure with its error (or the `max_pending` refusal, or `"timer is stopped"`); without it the error goes to the timer's `on_error` (or stderr).
---@field on_give_up? fun(err: any)
---Called with fn's results when a call succeeds.
---@field on_success? fun(...: any)
---Called before each wait: `err` of the call numbered `attempt` that failed, `wait` the seconds until the next one.
---@field on_retry? fun(err: any, attempt: integer, wait: number)

---What `hwt.retry` returns.
---@class hwt.RetryHandle
---Calls of `fn` so far.
---@field attempts integer
---true once the retry has succeeded, given up or been cancelled.
---@field done boolean
---The Timeout of the next try while one waits, else nil.
---@field pending hwt.Timeout|nil
local RetryHandle = {}

---Stops further tries; true if a try was still to come (`on_give_up` is then not called).
---@return boolean cancelled
function RetryHandle:cancel() end

---The method table of every timer: add methods here to extend every timer.
---@class hwt.Timer
hwt.Timer = {}

---The method table of every Timeout: add methods here to extend every timeout.
---A to-be-closed Timeout (`local t <close> = ...`, Lua 5.4) cancels itself on scope exit.
---@class hwt.Timeout
hwt.Timeout = {}

---The monotonic clock (CLOCK_MONOTONIC), in seconds.
---@return number seconds
---@nodiscard
function hwt.now() end

---Creates a timer. A to-be-closed timer (Lua 5.4 `<close>`) stops on scope exit; a collected one stops too.
---@param opts? hwt.Options
---@return hwt.Timer timer
---@nodiscard
function hwt.new(opts) end

---Whether `value` is a Timeout, of any timer (what `timeout()` and `every()` return, and what a task gets).
---@param value any
---@return boolean
---@nodiscard
function hwt.is_timeout(value) end

---Calls `fn(attempt, handle)` now (before it returns); when it raises or returns nil/false first, calls it again after `min(delay * backoff^(k-1), max_delay)` seconds (± jitter), at most `retries` times, then `on_give_up(err)`.
---@param timer hwt.Timer
---@param fn fun(attempt: integer, handle: hwt.RetryHandle): any
---@param opts? hwt.RetryOptions
---@return hwt.RetryHandle handle
---@overload fun(timer: hwt.Timer, fn: fun(attempt: integer, handle: hwt.RetryHandle): any): hwt.RetryHandle
function hwt.retry(timer, fn, opts) end

-- ---- Timer ------------------------------------------------------------------

---Runs `task(timeout, ...)` once, `delay` seconds from now (`math.huge`: never, until cancel/stop); `nil, err` when refused (`max_pending` reached, or the worker thread cannot start).
---@param delay number seconds, >= 0
---@param task hwt.Task
---@param ... any extra arguments for the task
---@return hwt.Timeout|nil timeout
---@return string|nil err
function hwt.Timer:timeout(delay, task, ...) end

---Periodic: runs `task(timeout, ...)` every `interval` seconds at fixed rate from the first deadline; missed beats are skipped; `timeout:cancel()` ends the series.
---@param interval number seconds, > 0
---@param task hwt.Task
---@param ... any extra arguments for the task
---@return hwt.Timeout|nil timeout
---@return string|nil err
function hwt.Timer:every(interval, task, ...) end

---Runs the due tasks, at most `max`, in deadline order; never blocks. With `spawn`, hands each to `spawn(fn)` instead. Returns how many ran (or were handed).
---@param max? integer
---@param spawn? hwt.Spawn
---@return integer ran
function hwt.Timer:poll(max, spawn) end

---Blocks until a task is due, the timer stops, or `seconds` pass (default: until something is due); true if something is due.
---@param seconds? number
---@return boolean due
function hwt.Timer:wait(seconds) end

---`wait()` + `poll()` until nothing pending can fall due; returns how many ran. Raises on a manual clock.
---@return integer ran
function hwt.Timer:run() end

---Manual clock only: moves time forward `seconds`, then runs what became due, in order; returns how many ran.
---@param seconds number
---@return integer ran
function hwt.Timer:advance(seconds) end

---Real clock: `wait()` + `poll()` until `seconds` have passed. Manual clock: every timeout due within `seconds` runs with the clock at its own deadline. Returns how many ran.
---@param seconds number
---@return integer ran
function hwt.Timer:run_for(seconds) end

---Timeouts scheduled and neither run nor cancelled.
---@return integer count
---@nodiscard
function hwt.Timer:pending() end

---A file descriptor readable while due tasks wait for poll() (eventfd or pipe), for luv / cqueues / epoll loops.
---The first call starts the worker thread; nil and a message when the system refuses one.
---@return integer? fd
---@return string? err
---@nodiscard
function hwt.Timer:fd() end

---Seconds until `poll()` would run something: 0 when something is due now; nil when nothing pending can fall due.
---@return number|nil seconds
---@nodiscard
function hwt.Timer:next_due() end

---Sets the one watcher told `fn(seconds)` (the new `next_due()`) when a timeout falls due earlier than `next_due()` last said; `nil` removes it.
---@param fn fun(seconds: number)|nil
function hwt.Timer:on_earlier(fn) end

---The timer's clock in seconds: `hwt.now()` on the real clock; from 0 on the manual clock.
---@return number seconds
---@nodiscard
function hwt.Timer:now() end

---The timeouts `pending()` counts, in (deadline, seq) order; changes nothing.
---@return hwt.Timeout[] timeouts
---@nodiscard
function hwt.Timer:timeouts() end

---Counters and settings of the timer.
---@return hwt.Stats stats
---@nodiscard
function hwt.Timer:stats() end

---Whether the timer is stopped: `stop()` was called, or it was stopped with its Lua state (`stats().stopped`, without building the table).
---@return boolean stopped
---@nodiscard
function hwt.Timer:is_stopped() end

---Stops the timer; returns the timeouts that never ran, in deadline order, each now cancelled (a second call returns `{}`).
---@return hwt.Timeout[] never_ran
function hwt.Timer:stop() end

---Inside a coroutine: yields it and resumes it `seconds` later (at a poll); `nil, "timer is stopped"` when `stop()` ends the sleep.
---@async
---@param seconds number
---@return boolean|nil ok
---@return string|nil err
function hwt.Timer:sleep(seconds) end

-- ---- Timeout ----------------------------------------------------------------

---Cancels the timeout; true if this call cancelled it (its task will never start); false if it ran, is running, or was cancelled.
---@return boolean cancelled
function hwt.Timeout:cancel() end

---Whether the timeout was cancelled.
---@return boolean
---@nodiscard
function hwt.Timeout:is_cancelled() end

---Whether its task has started (at least once).
---@return boolean
---@nodiscard
function hwt.Timeout:is_expired() end

---The timer that `hwt.new` returned; nil once that timer was collected.
---@return hwt.Timer|nil timer
---@nodiscard
function hwt.Timeout:timer() end

---The task as given to `timeout()` / `every()`.
---@return hwt.Task task
---@nodiscard
function hwt.Timeout:task() end

---Seconds until due; 0 once due, run or cancelled; `math.huge` for never.
---@return number seconds
---@nodiscard
function hwt.Timeout:remaining() end

---Re-arms the timeout to run `delay` seconds from now (default: its delay or interval), keeping its task and arguments; `nil, err` at `max_pending`.
---@param delay? number seconds, >= 0
---@return true|nil ok
---@return string|nil err
function hwt.Timeout:reset(delay) end

---The deadline on the timer's clock (`timer:now()` scale); `math.huge` for never.
---@return number deadline
---@nodiscard
function hwt.Timeout:deadline() end

return hwt
