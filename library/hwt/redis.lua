---@meta hwt.redis

-- LuaLS definitions for hwt.redis: a Redis client over libhiredis, shaped
-- like redis-lua's (the client hwt.jobs recommends on Lua 5.4). See
-- doc/api.md, "hwt.redis".

---A Redis client in C over libhiredis, for Lua 5.1–5.4 and LuaJIT.
---@class hwt.redis
local M = {}

---Options of `require("hwt.redis").connect` in its table form (an unknown key raises).
---@class hwt.redis.Options
---Host name or address (default "127.0.0.1").
---@field host? string
---TCP port (default 6379).
---@field port? integer
---A unix socket's path, in place of `host` and `port`.
---@field path? string
---Seconds (> 0) the connection, and each reply, may take; a client that timed out only raises until `close()`.
---@field timeout? number

---A connection to Redis (userdata "hwt.redis.Client"). Any other method name is a Redis command: `c:set(k, v)`, `c:evalsha(sha, 1, key, arg)`; it waits for the reply and returns it as redis-lua does (a string, nil for a nil bulk, an integer, a table for an array, true for OK, the text of another status). An error reply raises "redis error: <its text>"; a failure of the connection (a timeout, the server gone, bytes that are not RESP) raises "hwt.redis: <why>" and leaves the client unusable until `close()`.
---@class hwt.redis.Client
---@field [string] fun(self: hwt.redis.Client, ...: string|number): any
local Client = {}

---Connects: `connect(host, port [, timeout])` or `connect{host=, port=, path=, timeout=}`. Raises "hwt.redis: cannot connect ..." when it cannot.
---@param host string|hwt.redis.Options
---@param port? integer
---@param timeout? number
---@return hwt.redis.Client
function M.connect(host, port, timeout) end

---true for a client of this module.
---@param value any
---@return boolean
function M.is_client(value) end

---Sends `command` with its arguments and returns the reply (as a command method does).
---@param command string
---@param ... string|number
---@return any
function Client:call(command, ...) end

---Sends a command without waiting for its reply (Pub/Sub, pipelines): read its replies with `ready_replies`.
---@param command string
---@param ... string|number
---@return true
function Client:send(command, ...) end

---The replies that have come, in order, without waiting (an empty table when none has): raises "hwt.redis: ... closed" once the server closed the connection.
---@return any[]
function Client:ready_replies() end

---The connection's file descriptor, for a loop that polls it (LuaSocket's `socket.select` takes the client).
---@return integer
function Client:getfd() end

---true when a reply is already read and waiting (so a poll of the descriptor would not see it).
---@return boolean
function Client:dirty() end

---Closes the connection (also on collection, and by `<close>` on Lua 5.4); later calls raise. Idempotent.
function Client:close() end

---`close()`, under redis-lua's other name.
function Client:quit() end

return M
