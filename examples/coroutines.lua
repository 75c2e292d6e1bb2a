-- timer:sleep() inside coroutines: sequential-looking code, one poll loop.
local hwt = require("hwt")

local timer = hwt.new({ tick = 0.005 })
local order = {}

local function worker(name, naps)
  return coroutine.wrap(function()
    for _, seconds in ipairs(naps) do
      timer:sleep(seconds)
      order[#order + 1] = name
      print(("%-6s woke after %.2fs"):format(name, seconds))
    end
  end)
end

worker("slow", { 0.09, 0.09 })()
worker("fast", { 0.02, 0.02, 0.02 })()
worker("medium", { 0.05, 0.05 })()

timer:run()
local wakes = {}
for _, name in ipairs(order) do wakes[name] = (wakes[name] or 0) + 1 end
print("wake-up order: " .. table.concat(order, " "))
assert(wakes.fast == 3 and wakes.medium == 2 and wakes.slow == 2, "a sleeper was lost")
assert(order[1] == "fast" and order[#order] == "slow", "shortest naps first, longest last")
print("coroutines example: ok")
