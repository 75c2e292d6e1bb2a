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

-- Threads of this process (the entries of /proc/self/task). Reads the file
-- whole and closes it: an io.lines loop left early would keep a descriptor
-- open until collected.
function support.threads()
  local f = assert(io.open("/proc/self/status"))
  local status = f:read("*a")
  f:close()
  local count = assert(status:match("\nThreads:%s*(%d+)"), "no Threads: line")
  return tonumber(count)
end

-- A joined thread may linger in /proc for a moment: polls up to `limit` s
-- for the count to fall to at_most; returns the last count.
function support.threads_settle(at_most, limit)
  local deadline = hwt.now() + (limit or 2)
  local n = support.threads()
  while n > at_most and hwt.now() < deadline do
    support.sleep(0.01)
    n = support.threads()
  end
  return n
end

return support
