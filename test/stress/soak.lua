-- Soak: a real-clock timer holding ~10^6 live timeouts under constant churn
-- (schedule, random cancels, short timeouts that fire) for SOAK_SECONDS
-- (default 30). Checks that every timeout is accounted for (ran, cancelled,
-- pending, or returned by stop) and that memory stays flat after warm-up:
-- the Lua heap after a full collection at the end of the run is within 5 %
-- of the one at the end of the middle phase, and the RSS peak of the last
-- 30 % of the run within 15 % of the middle phase's. Each phase also lasts a
-- number of operations, so a slow machine runs longer: RSS rises in steps
-- through the collector's first cycles (until about 5 operations per live
-- timeout), however long they take, and one more step of up to 9 % can come
-- later (the allocator's peak, not a leak: the heap stays flat).
-- Run: make soak   (SOAK_SECONDS=600 make soak for a long run)
local hwt = require("hwt")

local SECONDS = tonumber(os.getenv("SOAK_SECONDS")) or 30
local LIVE = tonumber(os.getenv("SOAK_LIVE")) or 1000000
local WARMUP_FRACTION = 0.3        -- of SECONDS: warm-up, then the middle phase ...
local WINDOW_FRACTION = 0.3         -- ... until the last 30 %, whose memory is checked
local WARMUP_OPERATIONS_PER_LIVE = 6
local WINDOW_OPERATIONS_PER_LIVE = 2
local HEAP_GROWTH_LIMIT = 1.05
local RSS_GROWTH_LIMIT = 1.15
local BATCH = 2000                  -- operations between polls
local WARMUP_ROUNDS = math.ceil(WARMUP_OPERATIONS_PER_LIVE * LIVE / BATCH)
local WINDOW_ROUNDS = math.ceil(WINDOW_OPERATIONS_PER_LIVE * LIVE / BATCH)

local seed = 0x9E3779B97F4A7C15
local function random(n)            -- xorshift64*: 1..n
  seed = seed ~ (seed >> 12); seed = seed ~ (seed << 25); seed = seed ~ (seed >> 27)
  return ((seed * 0x2545F4914F6CDD1D) >> 33) % n + 1
end

local function heap_bytes()
  collectgarbage("collect")
  return collectgarbage("count") * 1024
end

local function rss_bytes()
  local f = assert(io.open("/proc/self/statm"))
  local pages = f:read("n"); pages = f:read("n")
  f:close()
  return pages * 4096
end

local timer = hwt.new({ tick = 0.01 })
local scheduled, ran, cancelled = 0, 0, 0
local live, live_count = {}, 0      -- handles that may still be pending

local function on_fire() ran = ran + 1 end

local function schedule(delay)
  local t = assert(timer:timeout(delay, on_fire))
  scheduled = scheduled + 1
  live_count = live_count + 1
  live[live_count] = t
end

local function cancel_random()
  local i = random(live_count)
  local t = live[i]
  live[i] = live[live_count]
  live[live_count] = nil
  live_count = live_count - 1
  if t:cancel() then cancelled = cancelled + 1 end
end

local started = hwt.now()
for _ = 1, LIVE do schedule(60 + random(600)) end       -- far: stay pending
print(("soak: %d live timeouts scheduled in %.2f s, RSS %.1f MiB"):format(
  LIVE, hwt.now() - started, rss_bytes() / 2^20))

-- The phase a round belongs to: it ends once both its share of SECONDS and
-- its rounds have passed.
local phases = {
  { name = "warm-up", ends_at = WARMUP_FRACTION, rounds = WARMUP_ROUNDS },
  { name = "middle", ends_at = 1 - WINDOW_FRACTION, rounds = WINDOW_ROUNDS, peak = 0 },
  { name = "last", ends_at = 1, rounds = WINDOW_ROUNDS, peak = 0 },
}
local phase, phase_rounds, rounds = 1, 0, 0
repeat
  for _ = 1, BATCH do
    local op = random(10)
    if op <= 4 then cancel_random(); schedule(60 + random(600))   -- churn, far
    elseif op <= 7 then                                          -- fires soon,
      assert(timer:timeout(random(100) / 1000, on_fire))         -- handle dropped
      scheduled = scheduled + 1
    elseif op == 8 then cancel_random(); schedule(random(5000) / 1000) -- mid-range
    else cancel_random(); schedule(60 + random(600)) end
  end
  timer:poll()
  rounds, phase_rounds = rounds + 1, phase_rounds + 1
  local current = phases[phase]
  if current.peak then current.peak = math.max(current.peak, rss_bytes()) end
  local progress = (hwt.now() - started) / SECONDS
  if progress >= current.ends_at and phase_rounds >= current.rounds then
    current.done, current.seconds = phase_rounds, hwt.now() - started
    if current.peak then current.heap = heap_bytes() end
    phase, phase_rounds = phase + 1, 0
  end
until phase > #phases
local middle_peak, last_peak = phases[2].peak, phases[3].peak
local middle_heap, last_heap = phases[2].heap, phases[3].heap

local pending = timer:pending()
local returned = #timer:stop()
local stats = timer:stats()
local accounted = ran + cancelled + returned
print(("soak: %.0f s, %d rounds, %d scheduled, %d ran, %d cancelled, %d returned by stop"):format(
  hwt.now() - started, rounds, scheduled, ran, cancelled, returned))
local ended = {}
for i, p in ipairs(phases) do
  ended[i] = ("%s %d rounds (until %.1f s)"):format(p.name, p.done, p.seconds)
end
print("soak: phases: " .. table.concat(ended, ", "))
print(("soak: Lua heap after a full collection %.1f MiB after the middle phase, %.1f MiB at the end"
  .. " (limit x%.2f)"):format(middle_heap / 2^20, last_heap / 2^20, HEAP_GROWTH_LIMIT))
print(("soak: RSS peak in the middle phase %.1f MiB, in the last %.1f MiB (limit x%.2f)"):format(
  middle_peak / 2^20, last_peak / 2^20, RSS_GROWTH_LIMIT))

local failures = {}
local function check(ok, message) if not ok then failures[#failures + 1] = message end end
check(accounted == scheduled, ("lost timeouts: %d scheduled, %d accounted"):format(scheduled, accounted))
check(pending == returned, ("pending %d before stop, %d returned"):format(pending, returned))
check(stats.fired == ran, ("stats.fired %d, tasks run %d"):format(stats.fired, ran))
check(stats.cancelled == cancelled + returned, "stats.cancelled does not add up")
check(last_heap <= middle_heap * HEAP_GROWTH_LIMIT, "the Lua heap grew after warm-up")
check(last_peak <= middle_peak * RSS_GROWTH_LIMIT, "RSS grew after warm-up")
for _, message in ipairs(failures) do print("soak: FAILED: " .. message) end
print(("soak: %d passed, %d failed"):format(#failures == 0 and 1 or 0, #failures == 0 and 0 or 1))
os.exit(#failures == 0 and 0 or 1)
