-- hwt.driver: what hwt.lua, the host drivers and hwt.jobs share: argument
-- checks that name the argument, the backoff rules of hwt.retry, and the one
-- registry of attached timers (a driver owns its timer's on_earlier watcher,
-- so a timer has one driver).
local M = {}

-- Timers that have a driver attached, each with its host's hooks (weak keys;
-- a hooks table refers to no timer, so that nothing here keeps a timer
-- alive, on 5.1 and LuaJIT too, which have no ephemerons).
local attached = setmetatable({}, { __mode = "k" })
local NO_HOOKS = {}

function M.type_name(value)
  local mt = getmetatable(value)
  return type(mt) == "string" and mt or type(value)
end

function M.is_callable(value)
  if type(value) == "function" then return true end
  local mt = debug.getmetatable(value)
  return type(mt) == "table" and type(rawget(mt, "__call")) == "function"
end

-- Raises "bad argument #n to 'fname' (message)" for the caller's caller.
function M.arg_error(fname, n, message)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, message), 4)
end

-- Checks that `timer` can be attached (a running real-clock hwt.Timer with
-- no driver yet); returns its stats.
function M.check_timer(fname, timer)
  if type(timer) ~= "userdata" or getmetatable(timer) ~= "hwt.Timer" then
    M.arg_error(fname, 1, "hwt.Timer expected, got " .. M.type_name(timer))
  end
  local stats = timer:stats()
  if stats.stopped then M.arg_error(fname, 1, "timer is stopped") end
  if stats.clock == "manual" then M.arg_error(fname, 1, "timer has a manual clock: drive it with advance()") end
  if attached[timer] then M.arg_error(fname, 1, "timer is already attached: detach it first") end
  return stats
end

-- The backoff rules (hwt.retry's, also hwt.jobs' retries of a failed job).
local BACKOFF_DEFAULTS = { retries = 3, delay = 1, backoff = 2, max_delay = 60, jitter = 0 }

-- Returns the backoff fields of `opts` (numbers or numeric strings, as
-- luaL_checknumber takes them) with the defaults filled in, and `random`
-- (math.random unless given); other keys are the caller's to check.
-- `bad(key, message)` raises the caller's error for a bad field.
function M.backoff_options(opts, bad)
  local o = {}
  for key, default in pairs(BACKOFF_DEFAULTS) do
    local value = opts[key]
    local number = tonumber(value)
    if value == nil then
      number = default
    elseif type(value) == "boolean" or number == nil or number ~= number then
      bad(key, "number expected, got " .. (number ~= number and "nan" or type(value)))
    end
    o[key] = number
  end
  local problem =
    not (o.retries == math.huge or (o.retries >= 0 and o.retries % 1 == 0))
      and { "retries", "must be an integer >= 0 or math.huge" }
    or o.delay < 0 and { "delay", "must be >= 0" }
    or o.backoff < 1 and { "backoff", "must be >= 1" }
    or o.max_delay < 0 and { "max_delay", "must be >= 0" }
    or not (o.jitter >= 0 and o.jitter <= 1) and { "jitter", "must be between 0 and 1" }
  if problem then bad(problem[1], problem[2]) end
  o.random = math.random
  return o
end

-- Retry k waits min(b * (1 +- jitter), max_delay), b = min(delay *
-- backoff^(k-1), max_delay): max_delay caps the wait after jitter too.
function M.backoff_wait(o, retry_number)
  if o.delay == 0 then return 0 end             -- 0 * math.huge would be NaN
  local wait = math.min(o.delay * o.backoff ^ (retry_number - 1), o.max_delay)
  if o.jitter > 0 then
    wait = wait * (1 + o.jitter * (2 * o.random() - 1))
  end
  return math.min(wait, o.max_delay)
end

-- Records `timer` as driven. `hooks` (optional) holds what the host does
-- in hwt's place: sleep(seconds) for timer:sleep(), report(err) for a task
-- error on a timer with no on_error. They must not refer to the timer.
function M.attach(timer, hooks) attached[timer] = hooks or NO_HOOKS end

-- The hooks of the host driving `timer`, or nil when no driver is attached.
function M.hooks_of(timer) return attached[timer] end

-- Lets go of the timer: no longer attached, its watcher removed.
function M.release(timer)
  attached[timer] = nil
  timer:on_earlier(nil)
end

return M
