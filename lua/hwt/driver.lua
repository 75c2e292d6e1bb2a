-- hwt.driver: the one registry of attached timers (a driver owns its
-- timer's on_earlier watcher, so a timer has one driver), and the check that
-- a timer can be attached.
local checks = require("hwt.checks")

local M = {}

-- Timers that have a driver attached, each with its host's hooks (weak keys;
-- a hooks table refers to no timer, so that nothing here keeps a timer
-- alive, on 5.1 and LuaJIT too, which have no ephemerons).
local attached = setmetatable({}, { __mode = "k" })
local NO_HOOKS = {}

-- Checks that `timer` can be attached (a running real-clock hwt.Timer with
-- no driver yet); returns its stats.
function M.check_timer(fname, timer)
  if type(timer) ~= "userdata" or getmetatable(timer) ~= "hwt.Timer" then
    checks.arg_error(fname, 1, "hwt.Timer expected, got " .. checks.type_name(timer))
  end
  if timer:is_stopped() then checks.arg_error(fname, 1, "timer is stopped") end
  local stats = timer:stats()
  if stats.clock == "manual" then checks.arg_error(fname, 1, "timer has a manual clock: drive it with advance()") end
  if attached[timer] then checks.arg_error(fname, 1, "timer is already attached: detach it first") end
  return stats
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
