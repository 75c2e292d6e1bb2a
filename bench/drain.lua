-- bench/drain.lua: the cost of running due tasks, per task: 10^6 one-shot
-- timeouts on a manual clock, one advance() runs them all, each task a
-- closure that counts. Measures hwt's dispatch (take, call, finish) and the
-- move to the due list:
--   equal      every deadline 10 ms: due order is memory order, no misses
--   scattered  deadlines uniform in [0, 1 s): due order is not memory order,
--              so each task's Timeout is a cache miss, as in a real backlog
-- Run from the repository root, e.g.
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 bench/drain.lua
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/luajit/?.so;;' luajit bench/drain.lua
local hwt = require("hwt")
local n = 1000000
local MODULUS = 2147483647          -- Park-Miller: exact in doubles on every VM

local function run(kind)
  local tm = hwt.new{clock="manual"}
  local c, x = 0, 42
  local function task() c = c + 1 end
  for _ = 1, n do
    local delay = 0.01
    if kind == "scattered" then
      x = x * 16807 % MODULUS
      delay = x / MODULUS
    end
    tm:timeout(delay, task)
  end
  collectgarbage()
  local t0 = os.clock()
  tm:advance(1)
  local t1 = os.clock()
  assert(c == n, "not every task ran")
  print(("%s, deadlines %s: %.0f ns per task"):format(jit and jit.version or _VERSION, kind,
    (t1 - t0) / n * 1e9))
  tm:stop()
end

run("equal")
run("scattered")
