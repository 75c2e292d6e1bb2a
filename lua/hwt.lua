-- hwt: a hashed-wheel timer. The C core (hwt.core) does the timing; this
-- file assembles the module: the core's functions and method tables, and
-- what is written in Lua, each from the module of its job: the loops that
-- call the tasks (hwt.dispatch: poll, run, advance, run_for), stop() and its
-- hooks (hwt.stop), timer:sleep() (hwt.sleep) and hwt.retry (hwt.retry).
local core = require("hwt.core")
local dispatch = require("hwt.dispatch")
local stop = require("hwt.stop")
local sleep = require("hwt.sleep")
local retry = require("hwt.retry")

local hwt = {}
for name, value in pairs(core) do hwt[name] = value end
hwt.internal = nil                              -- the Lua layer's own: not hwt's API

local Timer = core.Timer
Timer.poll, Timer.run, Timer.advance, Timer.run_for = dispatch.poll, dispatch.run, dispatch.advance, dispatch.run_for
Timer.stop = stop.stop
Timer.sleep = sleep.sleep
hwt.retry = retry.retry

return hwt
