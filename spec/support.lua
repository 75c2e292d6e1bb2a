-- Helpers shared by the real-clock specs.
local hwt = require("hwt")

local support = {}

-- A timer with nothing pending: wait(s) just sleeps s seconds. Passes time
-- without touching the timer under test, and without fork (os.execute).
local sleeper = hwt.new()
function support.sleep(seconds)
  local deadline = hwt.now() + seconds
  while true do
    local left = deadline - hwt.now()
    if left <= 0 then return end
    sleeper:wait(left)
  end
end

return support
