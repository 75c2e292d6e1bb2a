-- 1000 timers x 1000 timeouts (due over 0.5..2.5 s), all timers on one
-- shared engine or each on its own: threads, RSS, CPU and wall time.
-- Run: make bench-shared   (or: lua5.4 bench/shared.lua shared|private)
local hwt = require("hwt")

local mode = arg[1] or "shared"
local TIMERS = tonumber(os.getenv("TIMERS")) or 1000
local PER_TIMER = tonumber(os.getenv("PER_TIMER")) or 1000
local TICK = 0.01

local function proc_field(path, name)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return tonumber(text:match(name .. ":%s*(%d+)"))
end

local seed = 0x9E3779B97F4A7C15
local function random()                      -- xorshift64*, in [0, 1)
  seed = seed ~ (seed >> 12); seed = seed ~ (seed << 25); seed = seed ~ (seed >> 27)
  return ((seed * 0x2545F4914F6CDD1D) >> 11) / 2^53
end

local rss_before = proc_field("/proc/self/status", "VmRSS")
local cpu_start, wall_start = os.clock(), hwt.now()
local timers, ran = {}, 0
local function task() ran = ran + 1 end
for i = 1, TIMERS do
  local timer = hwt.new({ tick = TICK, shared = mode == "shared" })
  for _ = 1, PER_TIMER do timer:timeout(0.5 + 2 * random(), task) end
  timers[i] = timer
end
local threads_peak = proc_field("/proc/self/status", "Threads")
local rss_scheduled = proc_field("/proc/self/status", "VmRSS")

local sleeper = hwt.new({ shared = false })  -- nothing pending: wait(s) sleeps
local total = TIMERS * PER_TIMER
while ran < total do
  sleeper:wait(TICK)
  for i = 1, TIMERS do timers[i]:poll() end
end
local wall, cpu = hwt.now() - wall_start, os.clock() - cpu_start
for i = 1, TIMERS do timers[i]:stop() end
print(("%-8s timers %d x %d: threads %d, RSS +%.1f MiB, CPU %.2f s, wall %.2f s"):format(
  mode, TIMERS, PER_TIMER, threads_peak, (rss_scheduled - rss_before) / 1024, cpu, wall))
