-- LuaJIT floors (issue 44): what the loops of bench/lua_bench.lua's hwt peer
-- cost on LuaJIT with hwt taken out, keeping what any FFI binding of this
-- API must do per timeout. Each loop is compiled (check with luajit -jv):
--   schedule  a 16 B cdata with a metatype (the Timeout), one FFI call that
--             writes 64 B of C memory (the engine's node; counted in the
--             memory per pending timeout), the Timeout and
--             the task stored at 2n-1, 2n of one table and the argument at n
--             of another (W1s: one shared function, an argument each)
--   cancel    in random order: read the cdata, one FFI call that clears its
--             64 B, two table stores of nil (W2)
--   drain     in random order: read the call from the table, call the task
--             (a closure each, which writes the clock read into an array),
--             one FFI call on its 64 B (W4's backlog)
--   luajit bench/jit_floor.lua <schedule|cancel|drain> [N]
-- (bench/jit_floor.sh runs each in a fresh process, as lua_bench.lua runs
-- every workload.) Prints `RESULT floor luajit <measure> <value> <unit>`.
local ffi = require("ffi")
package.path = "bench/?.lua;" .. package.path
local common = require("common")
local presized, statm_rss_bytes, full_gc = common.presized, common.statm_rss_bytes, common.full_gc

local measure, N = arg[1], math.floor(tonumber(arg[2]) or 1e6)
assert(jit, "LuaJIT only")

ffi.cdef[[
  typedef struct floor_handle { uint32_t slot; uint32_t gen; double ended_at; } floor_handle;
  typedef struct floor_slot { uint8_t bytes[64]; } floor_slot;
  void *memset(void *s, int c, size_t n);
  void *malloc(size_t size);
  struct floor_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clock_id, struct floor_timespec *tp);
]]
local Handle = ffi.metatype("floor_handle", {__index = {}})
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

-- The C memory of N slots, allocated before timing but not written (its
-- pages come in as the loop first writes them, as hwt's slot arena's do).
local slots = ffi.cast("floor_slot *", C.malloc((N + 1) * ffi.sizeof("floor_slot")))
local calls, firsts = {}, {}
local handles = presized(N, false)
local conns = {}
for i = 1, N do conns[i] = {id = i} end
local shared_task = function() end

local function schedule_all()
  for i = 1, N do
    local t = Handle()
    t.slot, t.gen = i, 1
    C.memset(slots[i].bytes, 1, 64)
    calls[2 * i - 1], calls[2 * i] = t, shared_task
    firsts[i] = conns[i]
    handles[i] = t
  end
end

if measure == "schedule" then
  full_gc()
  local rss0 = statm_rss_bytes()
  local t0 = now()
  schedule_all()
  local dt = now() - t0
  full_gc()
  result("schedule_ops_per_s", N / dt, "1/s")
  result("bytes_per_pending", (statm_rss_bytes() - rss0) / N, "B")
elseif measure == "cancel" then
  schedule_all()
  local order = permutation(N)
  full_gc()
  local t0 = now()
  for k = 1, N do
    local t = handles[order[k]]
    local i = t.slot
    C.memset(slots[i].bytes, 0, 64)
    calls[2 * i - 1], calls[2 * i] = nil, nil
    t.slot = i + 2 ^ 31
  end
  result("cancel_ops_per_s", N / (now() - t0), "1/s")
elseif measure == "drain" then
  local late = presized(N, 0.0)
  for i = 1, N do
    local t = Handle()
    t.slot = i
    calls[2 * i - 1], calls[2 * i] = t, function() late[i] = now() end
  end
  local order = permutation(N)
  full_gc()
  local t0 = now()
  for k = 1, N do
    local i = order[k]
    C.memset(slots[i].bytes, 0, 64)
    calls[2 * i](calls[2 * i - 1])
  end
  result("drain_callbacks_per_s", N / (now() - t0), "1/s")
else
  error("usage: luajit bench/jit_floor.lua schedule|cancel|drain [N]")
end
