-- bench/drain.lua: the cost of running due tasks, per task: 10^6 one-shot
-- timeouts due together on a manual clock, one advance() runs them all, each
-- task a closure that counts. Measures hwt's dispatch (take, call, finish),
-- not the wheel. Run from the repository root, e.g.
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 bench/drain.lua
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/luajit/?.so;;' luajit bench/drain.lua
local hwt = require("hwt")
local tm = hwt.new{clock="manual"}
local n = 1000000
local c = 0
local function task() c = c + 1 end
for i = 1, n do tm:timeout(0.01, task) end
local t0 = os.clock()
tm:advance(0.01)
local t1 = os.clock()
assert(c == n, "not every task ran")
print(("%s: %.0f ns per task"):format(jit and jit.version or _VERSION, (t1 - t0) / n * 1e9))
