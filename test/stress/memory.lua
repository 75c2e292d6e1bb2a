-- Memory scenarios, one per process: `lua5.4 test/stress/memory.lua NAME`. test/run.sh
-- runs each against the ASan build with leak detection, so a leak or an
-- invalid access fails it; each also checks its own results.
local hwt = require("hwt")

local function quiet_error() end

local scenarios = {}

-- A Lua state closed with 10^5 timeouts pending on real and manual timers.
function scenarios.close_with_pending()
  local real = hwt.new({ tick = 0.001 })
  local manual = hwt.new({ clock = "manual" })
  for i = 1, 60000 do
    real:timeout(1 + i % 600, quiet_error, i)
    manual:timeout(i % 97 * 0.01, quiet_error, "arg", i)
  end
  real:every(0.5, quiet_error)
  manual:every(0.5, quiet_error)
  manual:advance(0.2)
  assert(real:pending() + manual:pending() >= 100000)
end

-- Timers collected while their workers sleep on far deadlines.
function scenarios.gc_while_sleeping()
  local wait_on = hwt.new()
  for round = 1, 20 do
    local t = hwt.new({ tick = 0.001 })
    for i = 1, 1000 do t:timeout(60 + i, quiet_error) end
    t:timeout(0, quiet_error)
    if round % 2 == 0 then t:wait(1); t:poll() end
    t = nil
    wait_on:wait(0.01)                      -- the worker is asleep by now
    collectgarbage("collect")
  end
  collectgarbage("collect")
end

-- stop() from inside a task, with due siblings and pending periodics.
function scenarios.stop_inside_task()
  local timer = hwt.new({ tick = 0.001 })
  local returned
  for i = 1, 100 do timer:timeout(0.01, quiet_error, i) end
  timer:every(0.001, quiet_error)
  timer:timeout(0.005, function() returned = timer:stop() end)
  timer:run()
  assert(returned and #returned > 0, "stop() inside the task returned nothing")
  local manual = hwt.new({ clock = "manual" })
  manual:timeout(1, function() manual:stop() end)
  for i = 1, 100 do manual:timeout(1, quiet_error, i) end
  assert(manual:advance(1) == 1 and manual:pending() == 0)
end

-- Errors in tasks: default on_error (stderr), a custom one, one that raises.
function scenarios.errors_in_tasks()
  local seen = 0
  local custom = hwt.new({ clock = "manual", on_error = function() seen = seen + 1 end })
  local raising = hwt.new({ clock = "manual", on_error = function(err) error("again: " .. tostring(err)) end })
  local default = hwt.new({ clock = "manual" })
  for i = 1, 100 do
    custom:timeout(0.1, function() error({ code = i }) end)
    raising:timeout(0.1, function() error("boom") end)
    if i <= 3 then default:timeout(0.1, function() error("expected test error") end) end
  end
  assert(custom:advance(1) == 100 and seen == 100)
  assert(raising:advance(1) == 100)
  assert(default:advance(1) == 3)
end

local name = arg[1]
local scenario = scenarios[name]
if not scenario then
  local names = {}
  for key in pairs(scenarios) do names[#names + 1] = key end
  table.sort(names)
  io.write(table.concat(names, "\n"), "\n")
  os.exit(name == nil and 0 or 2)
end
scenario()
print("memory " .. name .. ": ok")
os.exit(0, true)                            -- close the state: everything is freed
