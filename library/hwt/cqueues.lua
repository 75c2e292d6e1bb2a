---@meta hwt.cqueues

-- LuaLS definitions for hwt.cqueues: drives an hwt timer from a cqueues
-- controller. See library/hwt.lua.

---Drives an hwt timer from a cqueues controller; every task runs in a cqueues coroutine of its own, started in deadline order.
---@class hwt.cqueues
local M = {}

---What `attach` returns.
---@class hwt.cqueues.Handle
local Handle = {}

---Drives `timer` from `controller` (one driver coroutine while something can fall due); `nil, err` when cqueues cannot be loaded. Raises for a manual-clock, stopped or already attached timer.
---@param timer hwt.Timer
---@param controller any a cqueues controller (`cqueues.new()`)
---@return hwt.cqueues.Handle|nil handle
---@return string|nil err
function M.attach(timer, controller) end

---Stops driving: the driver ends at the controller's next step (`cqueues.cancel` on the fd) and lets go of the timer; true, then false.
---@return boolean detached
function Handle:detach() end

return M
