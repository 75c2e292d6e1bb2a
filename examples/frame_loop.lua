-- A game-style frame loop at 60 Hz. Each frame runs at most BUDGET due tasks
-- (timer:poll(BUDGET)), so a burst of timeouts falling due together is spread
-- over the next frames instead of stalling one; none is lost, order is kept.
local hwt = require("hwt")

local FPS, BUDGET, RUN_FOR = 60, 5, 1.5
local FRAME = 1 / FPS
local BURST, WAVE_EVERY, WAVES = 100, 0.25, 4

-- A task's error must not pass unnoticed: poll() would report it and go on.
local timer = hwt.new({ tick = 0.002, on_error = function(err)
  io.stderr:write("hwt task failed: ", tostring(err), "\n")
  os.exit(1)
end })

-- Pacing. timer:wait(s) returns early as soon as something is due; while a
-- backlog is left over by the budget something is always due, so it would
-- not sleep at all and the loop would spin. A frame loop sleeps to the frame
-- boundary whatever falls due: due tasks wait for the next frame (at most
-- one frame late). An hwt timer with nothing scheduled is a plain sleep: its
-- wait(s) just sleeps s on the calling thread (no worker thread is involved:
-- nothing watches this timer's fd).
local pacer = hwt.new({ tick = 0.002 })

local frame = 0
local burst_seen, burst_frames = {}, {}      -- burst index in run order; frames used
for i = 1, BURST do                          -- 100 timeouts due at the same moment
  timer:timeout(0.3, function()
    burst_seen[#burst_seen + 1] = i
    burst_frames[frame] = (burst_frames[frame] or 0) + 1
  end)
end

-- A periodic "spawn wave". The one due at 0.5 s falls in the middle of the
-- burst: deadline order puts it behind the burst's backlog, so it runs late.
-- (Work that must not queue behind a burst gets a timer, and budget, of its own.)
local waves, wave_frames, waves_from = 0, {}, hwt.now()
timer:every(WAVE_EVERY, function(wave_timer)
  waves = waves + 1
  wave_frames[waves] = frame
  print(("frame %3d: spawn wave %d, %.3fs after its time"):format(frame, waves,
        hwt.now() - waves_from - waves * WAVE_EVERY))
  if waves == WAVES then assert(wave_timer:cancel(), "ends the series") end
end)

local started = hwt.now()
local next_frame, max_ran, max_backlog = started, 0, 0
while hwt.now() - started < RUN_FOR do
  frame = frame + 1
  local ran = timer:poll(BUDGET)             -- never more than BUDGET per frame
  max_ran = math.max(max_ran, ran)
  max_backlog = math.max(max_backlog, timer:stats().due)
  -- ... update the game state and render here ...
  next_frame = next_frame + FRAME
  local left = next_frame - hwt.now()
  if left > 0 then pacer:wait(left) else next_frame = hwt.now() end  -- late: no catch-up
end

local first, last, used = math.huge, 0, 0
for f, n in pairs(burst_frames) do
  first, last, used = math.min(first, f), math.max(last, f), used + 1
  assert(n <= BUDGET)
end
print(("%d frames in %.2fs; the burst of %d ran in frames %d..%d (%d frames), "
       .. "at most %d tasks a frame, backlog up to %d"):format(frame, hwt.now() - started,
       #burst_seen, first, last, used, max_ran, max_backlog))
assert(#burst_seen == BURST, "no timeout of the burst may be lost")
for i = 1, BURST do assert(burst_seen[i] == i, "equal deadlines run in scheduling order") end
assert(max_ran == BUDGET, "the budget caps each frame, and the burst fills it")
assert(used >= BURST / BUDGET, "the burst is spread over frames")
assert(max_backlog >= BURST - 2 * BUDGET, "the rest of the burst waited in the due queue")
assert(waves == WAVES, "the wave series was cancelled after " .. WAVES .. " waves")
assert(wave_frames[2] >= last, "the wave due mid-burst waits for the burst's backlog")
assert(timer:pending() == 0)
assert(frame >= 30, "the loop should have paced about 90 frames, ran " .. frame)
timer:stop()
pacer:stop()
print("frame_loop example: ok")
