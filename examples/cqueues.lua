-- hwt in a cqueues controller: a small "pollable" wrapper lets a coroutine
-- wait on timer:fd() with cqueues.poll() and then run what is due, while
-- other coroutines of the same controller go on with cqueues' own sleeps.
local cqueues = require("cqueues")
local condition = require("cqueues.condition")
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

-- cqueues waits on any object with pollfd() and events() methods (and an
-- optional timeout(), in seconds; none here: the fd alone says when).
local function timer_pollable(t)
  return {
    pollfd = function() return t:fd() end,   -- readable while due tasks wait
    events = function() return "r" end,
  }
end

-- The timer's service coroutine: wait for the fd (or for `stopping`), poll.
local stopping = condition.new()
local stopped = false
local function timer_service()
  local pollable = timer_pollable(timer)
  while not stopped do
    cqueues.poll(pollable, stopping)
    timer:poll()
  end
end

-- hwt timeouts, 50 ms apart; B cancels C, the worker cancels E.
local c, e
timer:timeout(0.025, function() log("A") end)
timer:timeout(0.075, function()
  log("B")
  assert(c:cancel(), "C has not run yet: cancel wins")
end)
c = timer:timeout(0.175, function() log("C (cancelled: must not run)") end)
timer:timeout(0.125, function() log("D") end)
e = timer:timeout(0.225, function() log("E (cancelled: must not run)") end)

-- A coroutine with its own pace, on cqueues.sleep(); it ends the service.
local function worker()
  for step = 1, 4 do
    cqueues.sleep(0.05)
    log("work " .. step)
    if step == 3 then assert(e:cancel(), "E has not run yet") end
  end
  stopped = true
  assert(#timer:stop() == 0, "nothing should be left pending")
  stopping:signal()
end

local cq = cqueues.new()
cq:wrap(timer_service)
cq:wrap(worker)
local deadline = hwt.now() + 5                 -- if something hangs, give up
while not cq:empty() do
  assert(cq:step(0.1))
  assert(hwt.now() < deadline, "the controller hung: " .. table.concat(order, " "))
end
print("order: " .. table.concat(order, " "))
assert(table.concat(order, " ") == "A work 1 B work 2 D work 3 work 4",
       "hwt timeouts and cqueues sleeps should interleave by time")
assert(c:is_cancelled() and e:is_cancelled() and not c:is_expired() and not e:is_expired())
print("cqueues example: ok")
