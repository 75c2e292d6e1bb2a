-- hwt.sleep: timer:sleep(seconds), in a coroutine: a timeout of the timer
-- resumes it; stop() wakes it (hwt.stop's on_stop); under a host with a sleep
-- of its own (hwt.ngx), the host's sleep.
local checks = require("hwt.checks")
local drivers = require("hwt.driver")
local stop = require("hwt.stop")

local M = {}

local is_timer, seconds_arg = checks.is_timer, checks.seconds_arg
local hooks_of = drivers.hooks_of
local is_stopped, on_stop = stop.stopped, stop.on_stop

-- What a wake-up of hwt's resumes a sleeper with: WAKE, the sleep's Timeout,
-- and why it ends early (nil when it is due). The call of coroutine.resume
-- can run a collector step, whose finalizer may resume the sleeper by hand
-- first: to its end (resume then refuses, with exactly that message: an error
-- from inside the coroutine carries its place), or into another sleep, which
-- a wake-up naming an earlier sleep's Timeout does not end.
local WAKE = {}
local REFUSED_DEAD = "cannot resume dead coroutine"

local function resume_sleeper(co, t, why)
  if coroutine.status(co) ~= "suspended" then return end
  local ok, err = coroutine.resume(co, WAKE, t, why)
  if not ok and err ~= REFUSED_DEAD then error(err, 0) end
end

local function wake_sleeper(t, co)
  on_stop[t] = nil
  resume_sleeper(co, t)
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

-- timer:sleep(seconds): suspends the calling coroutine; a later poll() of the
-- timer resumes it. Returns true, or nil and a message when the timer refuses
-- (max_pending) or stops. Resuming the coroutine by hand ends the sleep early.
function M.sleep(self, seconds)
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
  on_stop[t] = function() resume_sleeper(co, t, "timer is stopped") end
  local woken, from, why = coroutine.yield()
  while woken == WAKE and from ~= t do         -- an earlier sleep's wake-up, late
    woken, from, why = coroutine.yield()
  end
  if t:cancel() then on_stop[t] = nil end      -- resumed by hand
  if woken == WAKE then
    if why then return nil, why end
    return true
  end
  if woken == nil and from then return nil, from end   -- by hand, as (nil, why)
  return woken == true
end

return M
