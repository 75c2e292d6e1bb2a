-- Cost of ending a timer with many pending timeouts: timer:stop() (which
-- returns them in deadline order) and collecting a dropped timer.
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 bench/stop.lua [N]
local hwt = require("hwt")
local N = tonumber(arg[1]) or 1000000

local function fill(timer)
  local task = function() end
  for i = 1, N do timer:timeout(1 + (i * 7919 % 59000) / 1000, task) end
end

local timer = hwt.new({ tick = 0.001 })
fill(timer)
local start = hwt.now()
local returned = timer:stop()
print(("stop() with %d pending: %.0f ms, %d returned"):format(N, (hwt.now() - start) * 1e3, #returned))

returned, timer = nil, nil
collectgarbage(); collectgarbage()
local dropped = hwt.new({ tick = 0.001 })
fill(dropped)
dropped = nil
start = hwt.now()
collectgarbage(); collectgarbage()
print(("collecting a timer with %d pending: %.0f ms"):format(N, (hwt.now() - start) * 1e3))
