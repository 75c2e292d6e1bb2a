-- Instruction counts under callgrind (repeatable where the VM's timings are
-- not): one workload per run, N from the environment.
--   MODE=<mode> N=<n> valgrind --tool=callgrind <lua> bench/instructions.lua
-- bench/instructions.sh takes the difference of two N, so that start-up and
-- module loading cancel out. Modes:
--   closure   N closures stored (the floor the closure modes include)
--   schedule  timer:timeout(30, closure) stored        (W1)
--   schedule_shared  timer:timeout(30, f, conn) stored (W1s)
--   churn     timer:timeout(30, closure), then cancel (W3)
--   churn_shared     timer:timeout(30, f, conn), then cancel (W3s)
--   drain     N timeouts of delay 0 run by one poll() (schedule included)
--   poll_each N timeouts of delay 0, then N poll(1): a poll's own cost, each
--             with one task (schedule included)
local hwt = require("hwt")
local N = tonumber(os.getenv("N") or 100000)
local mode = os.getenv("MODE") or "schedule"
local timer = hwt.new({ tick = 0.001 })
local kept = {}
for i = 1, N do kept[i] = false end
local sink
local function shared() end
local conn = {}

local modes = {
  closure = function() for i = 1, N do kept[i] = function() sink = i end end end,
  schedule = function()
    for i = 1, N do kept[i] = timer:timeout(30, function() sink = i end) end
  end,
  schedule_shared = function()
    for i = 1, N do kept[i] = timer:timeout(30, shared, conn) end
  end,
  churn = function()
    for i = 1, N do timer:timeout(30, function() sink = i end):cancel() end
  end,
  churn_shared = function()
    for i = 1, N do timer:timeout(30, shared, conn):cancel() end
  end,
  drain = function()
    for i = 1, N do timer:timeout(0, function() sink = i end) end
    assert(timer:poll() == N)
  end,
  poll_each = function()
    for _ = 1, N do timer:timeout(0, shared) end
    local due = hwt.now() + 0.002
    while hwt.now() < due do end
    for _ = 1, N do assert(timer:poll(1) == 1) end
  end,
}
assert(modes[mode], "unknown MODE " .. mode)()
