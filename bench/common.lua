-- What the Lua benchmarks share: a presized array, the process's RSS, a full
-- collection. Loaded from the repository's top directory:
--   package.path = "bench/?.lua;" .. package.path
local M = {}

function M.presized(n, v)
  local t = {}
  for i = 1, n do t[i] = v end
  return t
end

-- A random order of 1..n: Fisher-Yates with below(i), uniform in [0, i).
function M.permutation(n, below)
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = 1 + below(i)
    p[i], p[j] = p[j], p[i]
  end
  return p
end

function M.statm_rss_bytes()
  local f = assert(io.open("/proc/self/statm"))
  local _, rss = f:read("n", "n")
  f:close()
  return rss * 4096     -- page size: 4 KiB on x86-64/aarch64 Linux defaults
end

-- BENCH_GC=stop leaves the collector stopped after each full collection, to
-- measure a workload without the collector's work. Set here, not by
-- LUA_INIT: on LuaJIT (and Lua 5.1) a full collection restarts a stopped
-- collector.
local stop_collector = os.getenv("BENCH_GC") == "stop"

function M.full_gc()
  collectgarbage("collect"); collectgarbage("collect")
  if stop_collector then collectgarbage("stop") end
end

return M
