-- hwt.driver: what hwt.lua and the host drivers share: argument
-- checks that name the argument, and the one registry of attached timers (a
-- driver owns its timer's on_earlier watcher, so a timer has one driver).
local M = {}

-- Timers that have a driver attached (weak keys: values are plain true, so
-- that nothing here keeps a timer alive, on 5.1 and LuaJIT too).
local attached = setmetatable({}, { __mode = "k" })

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

function M.attach(timer) attached[timer] = true end

-- Lets go of the timer: no longer attached, its watcher cleared.
function M.release(timer)
  attached[timer] = nil
  timer:on_earlier(nil)
end

return M
