---@meta hwt.luv

-- LuaLS definitions for hwt.luv: drives an hwt timer from luv's (libuv's)
-- default loop. See library/hwt.lua.

---Drives an hwt timer from luv's default loop: a uv poll handle on `timer:fd()` while something can fall due.
---@class hwt.luv
local M = {}

---Options of `require("hwt.luv").attach` (all optional; an unknown key raises).
---@class hwt.luv.Options
---`poll()`'s spawn: each due task runs through `spawn(run)`, e.g. `function(run) coroutine.wrap(run)() end`; without it tasks run inside the uv callback.
---@field spawn? hwt.Spawn

---What `attach` returns (every driver has its `detach`).
---@class hwt.luv.Driver
local Driver = {}

---The name these annotations gave `hwt.luv.Driver` before hwt 0.3.
---@alias hwt.luv.Handle hwt.luv.Driver

---Drives `timer` from luv's default loop; `nil, err` when luv cannot be loaded or `timer:fd()` has no worker thread. Raises for a manual-clock, stopped or already attached timer, and for a bad option.
---@param timer hwt.Timer
---@param opts? hwt.luv.Options
---@return hwt.luv.Driver|nil driver
---@return string|nil err
---@overload fun(timer: hwt.Timer): hwt.luv.Driver|nil, string|nil
function M.attach(timer, opts) end

---Stops driving: closes the uv handles (in the call) and lets go of the timer; running tasks finish, the timer and its timeouts stay as they are; true, then false.
---@return boolean detached
function Driver:detach() end

return M
