-- hwt in a cqueues controller: require("hwt.cqueues").attach(timer, cq) runs
-- a coroutine on the controller that waits on timer:fd() and starts each due
-- task in a coroutine of its own, while other coroutines of the same
-- controller go on with cqueues' own sleeps. The controller's loop ends once
-- nothing can fall due.
local cqueues = require("cqueues")
local hwt = require("hwt")

-- A task's error must not pass unnoticed: poll() would report it and go on.
local timer = hwt.new({ tick = 0.005, on_error = function(err)
  io.stderr:write("hwt task failed: ", tostring(err), "\n")
  os.exit(1)
end })
local started = hwt.now()
local order = {}
local function log(name)
  order[#order + 1] = name
  print(("[%6.3fs] %s"):format(hwt.now() - started, name))
end

-- hwt timeouts, 100 ms apart, 50 ms off the worker's steps (room for a busy
-- machine's scheduling delays); B cancels C, the worker cancels E.
local c, e
timer:timeout(0.05, function() log("A") end)
timer:timeout(0.15, function()
  log("B")
  assert(c:cancel(), "C has not run yet: cancel wins")
end)
c = timer:timeout(0.35, function() log("C (cancelled: must not run)") end)
timer:timeout(0.25, function() log("D") end)
e = timer:timeout(0.45, function() log("E (cancelled: must not run)") end)

-- A coroutine with its own pace, on cqueues.sleep().
local function worker()
  for step = 1, 4 do
    cqueues.sleep(0.1)
    log("work " .. step)
    if step == 3 then assert(e:cancel(), "E has not run yet") end
  end
end

local cq = cqueues.new()
assert(require("hwt.cqueues").attach(timer, cq))
cq:wrap(worker)
local deadline = hwt.now() + 5                 -- if something hangs, give up
while not cq:empty() do                        -- cq:loop(), with a deadline
  assert(cq:step(math.max(deadline - hwt.now(), 0)))
  assert(hwt.now() < deadline, "the controller hung: " .. table.concat(order, " "))
end
print("order: " .. table.concat(order, " "))
assert(table.concat(order, " ") == "A work 1 B work 2 D work 3 work 4",
       "hwt timeouts and cqueues sleeps should interleave by time")
assert(c:is_cancelled() and e:is_cancelled() and not c:is_expired() and not e:is_expired())
assert(timer:pending() == 0, "nothing should be left pending")
print("cqueues example: ok")
