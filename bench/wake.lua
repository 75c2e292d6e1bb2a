-- CPU per wake-up: N timeouts, K due in each tick (tick 1 ms; K = 1 unless
-- given), each with a task that does nothing, drained four ways:
--   floor  floor_mod's run(): one C call that sleeps with clock_nanosleep
--          until each tick and calls its task (no lock, no engine)
--   run    hwt's timer:run()
--   loop   hwt's `while timer:pending() > 0 do timer:wait(); timer:poll() end`
--          (bench/lua_bench.lua's drain)
--   core   the calls into the C core that poll() makes, from a bare Lua loop
--          (hwt.core's internals; no error handling, no stack probe): what
--          the Lua layer adds to a wake-up is loop's CPU minus this one
-- Prints `RESULT wake <mode> cpu_us_per_wake <value>`: process CPU over the
-- drain / (N / K). W6 wakes about once a tick, so the difference between a
-- mode and the floor, times W6's ~10^4 wake-ups, is what that mode costs W6
-- beyond its tasks; with K = 20, as in W6, the same difference / K is what a
-- mode adds per task. Run from the project root, after `sh bench/floor.sh build`:
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;build/floor/lua5.4/?.so;;' \
--     lua5.4 bench/wake.lua <floor|run|loop|core> [N [K]]
local mode, n, per_tick = arg[1], tonumber(arg[2] or 5000), tonumber(arg[3] or 1)
local modes = { floor = true, run = true, loop = true, core = true }
assert(modes[mode] and per_tick and per_tick >= 1 and per_tick % 1 == 0,
       "usage: wake.lua <floor|run|loop|core> [N [K]]")
local hwt = require("hwt")
local TICK = 0.001
local ran = 0
local function task() ran = ran + 1 end

local function delay(i)                                  -- mid-tick
  return (math.floor((i - 1) / per_tick) + 1.5) * TICK
end

local cpu0, cpu1
if mode == "floor" then
  local timer = require("floor_mod").newtimer(n + 1, TICK)
  for i = 1, n do timer:arm(delay(i), task) end
  cpu0 = os.clock()
  timer:run()
  cpu1 = os.clock()
else
  local timer = hwt.new({ tick = TICK, wheel_size = 512 })
  for i = 1, n do timer:timeout(delay(i), task) end
  cpu0 = os.clock()
  if mode == "run" then
    timer:run()
  elseif mode == "loop" then
    while timer:pending() > 0 do timer:wait(); timer:poll() end
  else
    local core = require("hwt.core")
    assert(core.internal.take, "the core mode calls the userdata binding's steps (Lua 5.1-5.4, not LuaJIT)")
    local wait, drain_of, take = core.Timer.wait, core.internal.drain, core.internal.take
    local finish, recycle = core.internal.finish, core.internal.recycle
    while wait(timer) do
      local drain = drain_of(timer)
      if drain then
        local fn, t, shape = take(drain)
        while shape == 0 do
          fn(t)
          fn, t, shape = take(drain)
        end
        finish(drain)
        recycle(drain)
      end
    end
  end
  cpu1 = os.clock()
end
assert(ran == n, "not every task ran")
local wakes = math.ceil(n / per_tick)
io.write(string.format("RESULT wake %s cpu_us_per_wake %.2f\n", mode, (cpu1 - cpu0) / wakes * 1e6))
