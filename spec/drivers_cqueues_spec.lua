-- hwt.cqueues on a real cqueues controller: the driver coroutine, its
-- lifetime rules, and a task doing socket I/O on 127.0.0.1 with a listener
-- of the same controller. Every controller run here has a watchdog (a
-- deadline on its steps). cqueues is required, not optional: where it cannot
-- be loaded, this file fails.
local cqueues = require("cqueues")
local socket = require("cqueues.socket")
local hwt = require("hwt")
local cq_driver = require("hwt.cqueues")
local compat = require("compat")
local support = require("support")

local WATCHDOG = 5                              -- seconds: a run longer has hung
local LATE = 1                                  -- loose bound for "returned promptly"
local LINGER = 0.5                              -- loose bound for "returned soon after that deadline"

-- Steps the controller until it has no coroutine left; returns the seconds
-- it took and how many steps. Raises on a coroutine's error, or if it hangs.
local function run_controller(cq)
  local started = hwt.now()
  local deadline = started + WATCHDOG
  local steps = 0
  while not cq:empty() do
    local ok, err = cq:step(math.max(deadline - hwt.now(), 0))
    assert(ok, err)
    steps = steps + 1
    assert(hwt.now() < deadline, "the controller hung (watchdog)")
  end
  return hwt.now() - started, steps
end

local deadline_order, quiet_timer = support.deadline_order, support.quiet_timer

describe("hwt.cqueues", function()
  it("runs each due task in a coroutine of its own, in deadline order, and ends with them", function()
    local errors, order, threads = {}, {}, {}
    local cq, timer = cqueues.new(), quiet_timer(errors)
    local handle = assert(cq_driver.attach(timer, cq))
    assert.is_true(cq:empty())                  -- nothing pending: no driver yet
    local scheduled = hwt.now()
    local by_deadline = {}
    for _, delay in ipairs({ 0.03, 0.01, 0.02 }) do
      by_deadline[#by_deadline + 1] = { at = hwt.now() + delay, delay = delay }
      timer:timeout(delay, function()
        order[#order + 1] = delay
        threads[coroutine.running()] = true
      end)
    end
    assert.equals(1, cq:count())                -- the arming started the driver
    run_controller(cq)
    local took = hwt.now() - scheduled
    assert.same(deadline_order(by_deadline), order)
    assert.same({}, errors)
    local distinct = 0
    for _ in pairs(threads) do distinct = distinct + 1 end
    assert.equals(3, distinct)
    assert.is_true(took >= 0.03 and took < 0.03 + LATE, "took " .. took)
    assert.is_true(handle:detach())
    timer:stop()
  end)

  it("starts tasks that fall due together in deadline order", function()
    -- (cqueues resumes the coroutines wrapped in one step last-first)
    local errors, order = {}, {}
    local cq, timer = cqueues.new(), quiet_timer(errors)
    local handle = assert(cq_driver.attach(timer, cq))
    for i = 1, 5 do timer:timeout(0.02, function() order[#order + 1] = i end) end
    timer:timeout(0.02, { run = function() order[#order + 1] = "method" end })
    run_controller(cq)
    assert.same({}, errors)
    assert.same({ 1, 2, 3, 4, 5, "method" }, order)
    handle:detach()
    timer:stop()
  end)

  it("does not wake while nothing is due", function()
    local cq, timer = cqueues.new(), quiet_timer({})
    local handle = assert(cq_driver.attach(timer, cq))
    local ran = false
    timer:timeout(0.2, function() ran = true end)
    local _, steps = run_controller(cq)
    assert.is_true(ran)
    -- one wake for the deadline (the task's coroutine may take another): not one per tick
    assert.is_true(steps <= 4, "controller steps: " .. steps)
    handle:detach()
    timer:stop()
  end)

  it("lets a task wait (cqueues.sleep) without holding up the others", function()
    local errors, order = {}, {}
    local cq, timer = cqueues.new(), quiet_timer(errors)
    local handle = assert(cq_driver.attach(timer, cq))
    timer:timeout(0.01, function()
      order[#order + 1] = "A sleeps"
      cqueues.sleep(0.3)
      order[#order + 1] = "A wakes"
    end)
    timer:timeout(0.1, function() order[#order + 1] = "B" end)
    run_controller(cq)
    if compat.tasks_yield then
      assert.same({}, errors)
      assert.same({ "A sleeps", "B", "A wakes" }, order)
    else                                        -- PUC 5.1: the yield is the task's error
      assert.same({ "A sleeps", "B" }, order)
      assert.equals(1, #errors)
      assert.matches("yield", errors[1])
    end
    handle:detach()
    timer:stop()
  end)

  it("lets a task do socket I/O with a listener on the same controller", function()
    local errors = {}
    local cq, timer = cqueues.new(), quiet_timer(errors)
    local listener = socket.listen({ host = "127.0.0.1", port = 0 })
    local _, host, port = listener:localname()
    assert.equals("127.0.0.1", host)
    local served
    cq:wrap(function()                           -- the server: one connection, one line
      local conn = listener:accept(LATE)
      if conn then
        conn:settimeout(LATE)
        local line = conn:read("*l")
        if line then conn:write("echo: " .. line .. "\n") end
        conn:close()
        served = line
      end
      listener:close()
    end)
    local reply
    local handle = assert(cq_driver.attach(timer, cq))
    timer:timeout(0.01, function()
      local client = assert(socket.connect({ host = "127.0.0.1", port = port }))
      assert(client:connect(LATE))
      client:settimeout(LATE)
      assert(client:write("hello from a task\n"))
      reply = client:read("*l")
      client:close()
    end)
    run_controller(cq)
    if compat.tasks_yield then
      assert.same({}, errors)
      assert.equals("hello from a task", served)
      assert.equals("echo: hello from a task", reply)
    else                                        -- PUC 5.1: the first wait is the task's error
      assert.is_nil(reply)
      assert.equals(1, #errors)
      assert.matches("yield", errors[1])
    end
    handle:detach()
    timer:stop()
  end)

  it("keeps a timer that only the controller refers to firing, and lets it go once idle", function()
    local fired = 0
    local weak = setmetatable({}, { __mode = "v" })
    local cq = cqueues.new()
    -- In a function of its own, so that no stack slot of this one keeps it.
    local function attach_and_drop()
      local timer = hwt.new({ tick = 0.005 })
      assert(cq_driver.attach(timer, cq))       -- the handle is dropped too
      for i = 1, 3 do timer:timeout(0.01 * i, function() fired = fired + 1 end) end
      weak.timer = timer
    end
    attach_and_drop()
    for _ = 1, 4 do collectgarbage() end
    assert.is_not_nil(weak.timer, "collected while it had timeouts pending")
    run_controller(cq)
    assert.equals(3, fired)
    for _ = 1, 4 do collectgarbage() end
    assert.is_nil(weak.timer, "an idle, unreferenced timer should be collectable")
  end)

  it("detach() ends the driver at once and leaves the timeouts pending", function()
    local cq, timer = cqueues.new(), quiet_timer({})
    local handle = assert(cq_driver.attach(timer, cq))
    local ran = false
    local long = timer:timeout(10, function() ran = true end)
    assert(cq:step(0))                          -- the driver is now waiting on the fd
    assert.equals(1, cq:count())
    local detached
    cq:wrap(function()
      cqueues.sleep(0.01)
      detached = { handle:detach(), handle:detach() }
    end)
    local took = run_controller(cq)
    assert.same({ true, false }, detached)      -- idempotent
    assert.is_true(took < LATE, "took " .. took)
    assert.is_false(ran)
    assert.equals(1, timer:pending())
    assert(long:cancel())                       -- (else the next run would wait for it)
    local again = assert(cq_driver.attach(timer, cq))   -- can be attached again
    timer:timeout(0.01, function() ran = "again" end)
    run_controller(cq)
    assert.equals("again", ran)
    again:detach()
    timer:stop()
  end)

  it("ends the driver when the timer is stopped, so the controller's loop returns", function()
    local errors = {}
    local cq, timer = cqueues.new(), quiet_timer(errors)
    local handle = assert(cq_driver.attach(timer, cq))
    timer:timeout(0.1, function() errors[#errors + 1] = "ran after stop" end)
    cq:wrap(function()
      cqueues.sleep(0.01)
      assert(#timer:stop() == 1)
    end)
    local started = hwt.now()
    assert(cq:loop(WATCHDOG))                   -- the watchdog: loop() gives up after that
    local took = hwt.now() - started
    assert.is_true(cq:empty())
    assert.is_true(took < 0.1 + LINGER, "took " .. took)
    assert.same({}, errors)
    assert.is_false(handle:detach())            -- the stop detached it
  end)

  it("ends the driver at once when a task stops the timer", function()
    local cq, timer = cqueues.new(), quiet_timer({})
    local handle = assert(cq_driver.attach(timer, cq))
    local later_ran = false
    timer:timeout(0.01, function() timer:stop() end)
    timer:timeout(5, function() later_ran = true end)
    local took = run_controller(cq)
    assert.is_true(took < LATE, "took " .. took)
    assert.is_false(later_ran)
    assert.is_false(handle:detach())
  end)

  it("ends the driver at once when a task cancels the last pending timeout", function()
    local cq, timer = cqueues.new(), quiet_timer({})
    local handle = assert(cq_driver.attach(timer, cq))
    local long = timer:timeout(5, function() end)
    timer:timeout(0.01, function() assert(long:cancel()) end)
    local took = run_controller(cq)
    assert.is_true(took < LATE, "took " .. took)
    assert.equals(0, timer:pending())
    assert.is_true(handle:detach())
    timer:stop()
  end)

  it("ends the driver when the last pending timeout is cancelled, and starts it again on the next", function()
    local cq, timer = cqueues.new(), quiet_timer({})
    local handle = assert(cq_driver.attach(timer, cq))
    local t = timer:timeout(0.1, function() end)
    cq:wrap(function()
      cqueues.sleep(0.01)
      assert(t:cancel())
    end)
    local took = run_controller(cq)
    assert.is_true(took < 0.1 + LINGER, "took " .. took)
    local ran = false
    timer:timeout(0.01, function() ran = true end)
    run_controller(cq)
    assert.is_true(ran)
    assert.is_true(handle:detach())
    timer:stop()
  end)

  -- controller:close() drops the driver coroutine where it waits, and a
  -- closed controller refuses controller:wrap().
  it("reports an arming after its controller was closed, rather than believing it drives", function()
    local errors, ran = {}, 0
    local cq, timer = cqueues.new(), quiet_timer(errors)
    local handle = assert(cq_driver.attach(timer, cq))
    timer:timeout(0.05, function() ran = ran + 1 end)
    assert(cq:step(0))                          -- the driver waits for the fd
    cq:close()
    timer:timeout(0.01, function() ran = ran + 1 end)
    assert.equals(1, #errors)
    assert.matches("hwt.cqueues: cannot start the driver: .*cqueue closed", errors[1])
    timer:timeout(0.005, function() ran = ran + 1 end)
    assert.equals(2, #errors)                   -- each arming tries again
    assert.is_true(handle:detach())
    local fresh = cqueues.new()
    local again = assert(cq_driver.attach(timer, fresh))
    run_controller(fresh)
    assert.equals(3, ran)                       -- nothing was lost
    assert.same(2, #errors)
    again:detach()
    timer:stop()
  end)

  it("refuses bad arguments, naming them", function()
    local function attach_error(...)
      local ok, err = pcall(cq_driver.attach, ...)
      assert.is_false(ok)
      return err
    end
    local cq = cqueues.new()
    assert.matches("bad argument #1 to 'attach' %(hwt.Timer expected, got nil%)", attach_error(nil, cq))
    assert.matches("bad argument #1 to 'attach' %(hwt.Timer expected, got table%)", attach_error({}, cq))
    local timer = hwt.new()
    assert.matches("bad argument #2 to 'attach' %(cqueues controller expected, got nil%)",
                   attach_error(timer))
    assert.matches("bad option 'controller' to 'attach' %(cqueues controller expected, got nil%)",
                   attach_error(timer, {}))
    assert.matches("bad argument #1 to 'attach' %(timer has a manual clock",
                   attach_error(hwt.new({ clock = "manual" }), cq))
    local handle = assert(cq_driver.attach(timer, cq))
    assert.matches("bad argument #1 to 'attach' %(timer is already attached",
                   attach_error(timer, cq))
    -- one driver per timer, whichever: it owns the timer's on_earlier
    local ok, err = pcall(require("hwt.luv").attach, timer)
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'attach' %(timer is already attached", tostring(err))
    handle:detach()
    timer:stop()
    assert.matches("bad argument #1 to 'attach' %(timer is stopped%)", attach_error(timer, cq))
  end)

  it("loads without cqueues, and attach() then returns nil and a message (a fresh process)", function()
    local out, err, ok = support.run_child([[
      package.loaded.cqueues = nil
      package.preload.cqueues = function() error("no cqueues in this test") end
      local driver = require("hwt.cqueues")
      local timer = require("hwt").new()
      local handle, message = driver.attach(timer, {})
      assert(handle == nil, "attached without cqueues")
      assert(message:find("no cqueues in this test", 1, true), message)
      print(message:match("^hwt%.cqueues: cannot load cqueues") and "ok" or message)
    ]])
    assert.equals("ok\n", out, err)
    assert.is_true(ok, err)
  end)
end)
