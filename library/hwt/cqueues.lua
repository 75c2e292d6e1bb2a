---@meta hwt.cqueues

-- LuaLS definitions for hwt.cqueues: drives an hwt timer from a cqueues
-- controller. See library/hwt.lua.

---Drives an hwt timer from a cqueues controller; every task runs in a cqueues coroutine of its own, started in deadline order.
---@class hwt.cqueues
local M = {}

---Options of `require("hwt.cqueues").attach` (an unknown key raises).
---@class hwt.cqueues.Options
---The controller to drive the timer from (`cqueues.new()`); required.
---@field controller any

---What `attach` returns (every driver has its `detach`).
---@class hwt.cqueues.Driver
local Driver = {}

---The name these annotations gave `hwt.cqueues.Driver` before hwt 0.3.
---@alias hwt.cqueues.Handle hwt.cqueues.Driver

---Drives `timer` from `opts.controller` (one coroutine there while something can fall due); `nil, err` when cqueues cannot be loaded or `timer:fd()` has no worker thread. Raises for a manual-clock, stopped or already attached timer, and for a missing or bad controller. The older form `attach(timer, controller)` is the same call.
---@param timer hwt.Timer
---@param opts hwt.cqueues.Options
---@return hwt.cqueues.Driver|nil driver
---@return string|nil err
---@overload fun(timer: hwt.Timer, controller: any): hwt.cqueues.Driver|nil, string|nil
function M.attach(timer, opts) end

---Stops driving: the coroutine ends at the controller's next step (`cqueues.cancel` on the fd) and lets go of the timer; tasks already in their coroutines still run, the timer and its timeouts stay as they are; true, then false.
---@return boolean detached
function Driver:detach() end

return M
