-- LuaJIT floors (issue 44): what the loops of bench/lua_bench.lua's hwt peer
-- cost on LuaJIT with hwt taken out, keeping what any FFI binding of this
-- API must do per timeout (the loops: bench/jit_floor_loops.lua):
--   schedule  W1s: one shared function, an argument each; the memory per
--             pending timeout counts the 64 B of C memory
--   cancel    W2: in random order
--   drain     W4's backlog: in random order, a closure each, which writes
--             the clock read into an array
--   luajit bench/jit_floor.lua <schedule|cancel|drain> [N]
-- (make bench runs each in a fresh process, as lua_bench.lua runs every
-- workload.) Prints `RESULT floor luajit <measure> <value> <unit>`.
local ffi = require("ffi")
package.path = "bench/?.lua;" .. package.path
local common = require("common")
local loops = require("jit_floor_loops")
local presized, statm_rss_bytes, full_gc = common.presized, common.statm_rss_bytes, common.full_gc

local measure, N = arg[1], math.floor(tonumber(arg[2]) or 1e6)
assert(jit, "LuaJIT only")

ffi.cdef[[
  struct floor_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clock_id, struct floor_timespec *tp);
]]
local C = ffi.C
local ts = ffi.new("struct floor_timespec")
local function now()
  C.clock_gettime(1, ts)
  return (tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)) / 1e9
end

-- xorshift64* as bench/lua_bench.lua's, for the random orders.
local bit = require("bit")
local x = 0x9E3779B97F4A7C15ULL
local function below(i)
  x = bit.bxor(x, bit.rshift(x, 12))
  x = bit.bxor(x, bit.lshift(x, 25))
  x = bit.bxor(x, bit.rshift(x, 27))
  return tonumber(bit.rshift(x * 0x2545F4914F6CDD1DULL, 11) % i)
end

local function permutation(n) return common.permutation(n, below) end

local function result(name, value, unit)
  print(("RESULT floor luajit %s %.6g %s"):format(name, value, unit))
end

local floor = loops.new(N, presized)
local conns = {}
for i = 1, N do conns[i] = {id = i} end
local shared_task = function() end

if measure == "schedule" then
  full_gc()
  local rss0 = statm_rss_bytes()
  local t0 = now()
  loops.schedule_all(floor, shared_task, conns)
  local dt = now() - t0
  full_gc()
  result("schedule_ops_per_s", N / dt, "1/s")
  result("bytes_per_pending", (statm_rss_bytes() - rss0) / N, "B")
elseif measure == "cancel" then
  loops.schedule_all(floor, shared_task, conns)
  local order = permutation(N)
  full_gc()
  local t0 = now()
  loops.cancel_all(floor, order)
  result("cancel_ops_per_s", N / (now() - t0), "1/s")
elseif measure == "drain" then
  local late, tasks = presized(N, 0.0), presized(N, false)
  for i = 1, N do tasks[i] = function() late[i] = now() end end
  loops.fill_calls(floor, tasks)
  local order = permutation(N)
  full_gc()
  local t0 = now()
  loops.drain_all(floor, order)
  result("drain_callbacks_per_s", N / (now() - t0), "1/s")
else
  error("usage: luajit bench/jit_floor.lua schedule|cancel|drain [N]")
end
