-- hwt.stop: timer:stop() and its hooks: a retry waiting for its next try
-- gives up, a coroutine in timer:sleep() wakes, before stop() returns; and
-- timer:is_stopped().
--
-- The hooks, for hwt.sleep and hwt.retry:
--   on_stop[timeout] = fn    stop() calls fn() when it ends `timeout` (the
--                            wait of a sleeper, or of a retry's next try);
--                            the owner clears the entry when the timeout
--                            fires or is cancelled;
--   calling[handle] = timer  a retry whose fn is in a call; stop() gives up
--                            those held in a yield (handle._give_up).
local core = require("hwt.core")
local checks = require("hwt.checks")

local M = {}

local internal = core.internal
local report_error, clock_state = internal.report_error, internal.clock_state
local check_self = checks.check_self

-- Whether `timer` (a Timer) is stopped: stop() was called, or the timer was
-- stopped with its Lua state or collected (where only a finalizer can reach
-- it). One C call, which builds no table, as stats() does.
function M.stopped(timer)
  local _, stopped = clock_state(timer)
  return stopped
end

-- timer:is_stopped(): the same, for any value of self.
function M.is_stopped(self)
  check_self(self, "is_stopped")
  local _, stopped = clock_state(self)
  return stopped
end

-- What stop() must tell, by the timeout that stands for it: a retry waiting
-- for its next try, a coroutine in sleep(). Entries leave when the timeout
-- fires or is cancelled; weak keys, so a collected timer takes its own along.
local on_stop = setmetatable({}, { __mode = "k" })
M.on_stop = on_stop

-- Retries whose fn is being called (perhaps suspended in a yield), by
-- handle, with their timer; weak both ways, so a retry whose coroutine was
-- dropped goes with it.
local calling = setmetatable({}, { __mode = "kv" })
M.calling = calling

local core_stop = core.Timer.stop

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
function M.stop(self)
  check_self(self, "stop")
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

return M
