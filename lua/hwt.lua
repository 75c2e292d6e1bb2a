-- hwt: a hashed-wheel timer. The C core (hwt.core) does the timing; this
-- file assembles the module: the core's functions and method tables, and
-- what is written in Lua, each from the module of its job: the loops that
-- call the tasks (hwt.dispatch: poll, run, advance, run_for), stop() and its
-- hooks (hwt.stop: also is_stopped), timer:sleep() (hwt.sleep), hwt.retry
-- (hwt.retry) and hwt.is_timeout (hwt.checks).
local core = require("hwt.core")
local checks = require("hwt.checks")
local dispatch = require("hwt.dispatch")
local stop = require("hwt.stop")
local sleep = require("hwt.sleep")
local retry = require("hwt.retry")

local hwt = {}
for name, value in pairs(core) do hwt[name] = value end
hwt.internal = nil                              -- the Lua layer's own: not hwt's API

local Timer = core.Timer
if core.internal.ffi_abi then                     -- LuaJIT: Timeouts are cdata (hwt.jit)
  local jit_timeouts = require("hwt.jit")
  hwt.Timeout = jit_timeouts.Timeout
  hwt.now = jit_timeouts.now
  for name, method in pairs(jit_timeouts.timer_methods) do Timer[name] = method end
end
Timer.poll, Timer.run, Timer.advance, Timer.run_for = dispatch.poll, dispatch.run, dispatch.advance, dispatch.run_for
Timer.stop, Timer.is_stopped = stop.stop, stop.is_stopped
Timer.sleep = sleep.sleep
hwt.retry = retry.retry
hwt.is_timeout = checks.is_timeout

return hwt
