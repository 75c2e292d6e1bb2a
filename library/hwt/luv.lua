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

---What `attach` returns.
---@class hwt.luv.Handle
local Handle = {}

---Drives `timer` from luv's default loop; `nil, err` when luv cannot be loaded. Raises for a manual-clock, stopped or already attached timer.
---@param timer hwt.Timer
---@param opts? hwt.luv.Options
---@return hwt.luv.Handle|nil handle
---@return string|nil err
---@overload fun(timer: hwt.Timer): hwt.luv.Handle|nil, string|nil
function M.attach(timer, opts) end

---Stops driving: closes the uv handles (in the call) and lets go of the timer; true, then false.
---@return boolean detached
function Handle:detach() end

return M
