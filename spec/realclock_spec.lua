-- Real-clock specs: the worker thread path end to end. Timing assertions are
-- deliberately loose (the machine may be loaded): "never early" is checked
-- strictly, lateness only against generous upper bounds.
local hwt = require("hwt")
local compat = require("compat")

local support = require("support")
local EPS, LATE = support.EPS, support.LATE
local sleep, eventfd_count = support.sleep, support.eventfd_count

-- Calls wait()+poll() until `until_time` (absolute hwt.now()) has passed.
local function drive(t, until_time)
  local ran = 0
  while true do
    local left = until_time - hwt.now()
    if left <= 0 then return ran end
    if t:wait(left) then ran = ran + t:poll() end
  end
end

describe("real clock", function()
  it("still fires timeouts whose handles were dropped and collected", function()
    local t = hwt.new({ tick = 0.001 })
    local count = 0
    local seen_expired = true
    for i = 1, 100 do
      t:timeout(0.01 + i * 1e-4, function(to)
        count = count + 1
        seen_expired = seen_expired and to:is_expired()
      end)
    end
    collectgarbage()
    collectgarbage()
    assert.equals(100, t:pending())
    assert.equals(100, t:run())
    assert.equals(100, count)
    assert.is_true(seen_expired)
    t:stop()
  end)

end)
