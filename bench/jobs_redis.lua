-- The Redis client make bench-jobs' hwt.jobs processes (bench/jobs_worker.lua,
-- bench/jobs_producer.lua) connect with, chosen by the environment variable
-- CLIENT: "hwt.redis" (the default: the client hwt.jobs recommends on Lua
-- 5.4, built by make), "redis-lua" (the module `redis`, Debian's lua-redis,
-- loaded from /usr/share/lua/5.3 under lua5.4), or the name of any module
-- whose connect{host=, port=, timeout=} returns a client with redis-lua's
-- command methods. The coordinator's own client, its measuring instrument,
-- stays redis-lua.
local M = {}

local MODULE_OF = { ["redis-lua"] = "redis" }   -- CLIENT names that are not module names
local TIMEOUT = 5                                -- seconds a request may take

M.name = os.getenv("CLIENT") or "hwt.redis"

function M.connect(port)
  local client_module = require(MODULE_OF[M.name] or M.name)
  return client_module.connect({ host = "127.0.0.1", port = tonumber(port), timeout = TIMEOUT })
end

return M
