---@meta hwt.ngx

-- LuaLS definitions for hwt.ngx: drives an hwt timer from nginx's own event
-- loop (lua-nginx-module). See library/hwt.lua.

---Drives an hwt timer from nginx's event loop; each due task runs in a light thread (`ngx.thread.spawn`) of its own.
---@class hwt.ngx
local M = {}

---Options of `require("hwt.ngx").attach` (all optional; an unknown key raises).
---@class hwt.ngx.Options
---Tasks running at once, each in a light thread (default 256); more wait, due, in deadline order. nginx.conf needs `lua_max_running_timers` >= concurrency + 2 + your own.
---@field concurrency? integer
---At a graceful quit (`nginx -s quit`, reload): the timeouts that never ran (the timer is stopped).
---@field on_exit? fun(timeouts: hwt.Timeout[])

---What `attach` returns (every driver has its `detach`).
---@class hwt.ngx.Driver
local Driver = {}

---Starts driving `timer` from nginx's event loop; call it in `init_worker_by_lua*`. `nil, err` without lua-nginx-module (and lua-resty-core's `ngx.semaphore`) or when no `ngx.timer.at` can be armed. A wake that nginx refuses later (its limits) is tried again until one runs.
---@param timer hwt.Timer a real-clock, running timer with no driver yet
---@param opts? hwt.ngx.Options
---@return hwt.ngx.Driver|nil driver
---@return string|nil err
---@overload fun(timer: hwt.Timer): hwt.ngx.Driver|nil, string|nil
function M.attach(timer, opts) end

---The name hwt 0.2 gave `attach`.
---@param timer hwt.Timer
---@param opts? hwt.ngx.Options
---@return hwt.ngx.Driver|nil driver
---@return string|nil err
---@overload fun(timer: hwt.Timer): hwt.ngx.Driver|nil, string|nil
function M.start(timer, opts) end

---Stops driving at once (tasks the same wake handed out but did not start stay due): running tasks finish, the timer and its timeouts stay as they are, `on_exit` is not called; true, then false the second time.
---@return boolean detached
function Driver:detach() end

---The name hwt 0.2 gave `detach`.
---@return boolean detached
function Driver:stop() end

return M
