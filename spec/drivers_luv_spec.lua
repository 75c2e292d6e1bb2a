-- hwt.luv on a real libuv loop (luv): the driver, its lifetime rules, and a
-- task doing TCP I/O on 127.0.0.1 from a coroutine of its own. Every loop
-- run here has a watchdog (an unref'd uv timer: it ends a hung run without
-- keeping a finished one going), and every test leaves the loop without
-- handles. luv is required, not optional: where it cannot be loaded, this
-- file fails.
local uv = require("luv")
local hwt = require("hwt")
local luv_driver = require("hwt.luv")
local compat = require("compat")
local support = require("support")

local WATCHDOG = 5                              -- seconds: a loop run longer has hung
local LATE = 1                                  -- loose bound for "returned promptly"
local LINGER = 0.5                              -- loose bound for "returned soon after that deadline"

local function run_loop() return support.run_uv_loop(uv, WATCHDOG) end

-- Handles the loop still has (closing ones included).
local function handles()
  local n = 0
  uv.walk(function() n = n + 1 end)
  return n
end

local deadline_order, quiet_timer = support.deadline_order, support.quiet_timer

-- Resumes co with the callback's arguments (a luv callback into a coroutine);
-- nothing once co is dead (on PUC 5.1 a task's first yield ends it).
local function resumer(co)
  return function(...)
    if coroutine.status(co) == "dead" then return end
    local ok, err = coroutine.resume(co, ...)
    if not ok then error(err, 0) end
  end
end

-- A client that connects to port, writes `line`, and returns the reply line:
-- straight-line code, suspended on each luv call. Must run in a coroutine.
local function ask(port, line)
  local co = coroutine.running()
  local client = uv.new_tcp()
  client:connect("127.0.0.1", port, resumer(co))
  local err = coroutine.yield()
  assert(not err, err)
  client:write(line .. "\n")
  local buffer = ""
  client:read_start(resumer(co))
  while not buffer:find("\n") do
    local read_err, data = coroutine.yield()
    assert(not read_err and data, read_err or "closed before the reply")
    buffer = buffer .. data
  end
  client:read_stop()
  client:close()
  return (buffer:match("^([^\n]*)"))
end

-- A TCP server on 127.0.0.1 (ephemeral port): answers each line "echo: " ..
-- line, after `delay` seconds when the line starts with "slow". Returns the
-- port and a function that closes the server and its connections.
local function echo_server(delay)
  local server = uv.new_tcp()
  local connections = {}
  assert(server:bind("127.0.0.1", 0))
  assert(server:listen(16, function(listen_err)
    assert(not listen_err, listen_err)
    local sock = uv.new_tcp()
    assert(server:accept(sock))
    connections[#connections + 1] = sock
    sock:read_start(function(read_err, data)
      if read_err or not data then return sock:close() end
      local line = data:match("^([^\n]*)")
      local function answer() sock:write("echo: " .. line .. "\n") end
      if line:match("^slow") then
        local later = uv.new_timer()
        later:start(math.floor(delay * 1000), 0, function() later:close(); answer() end)
      else
        answer()
      end
    end)
  end))
  local function close()
    server:close()
    for _, sock in ipairs(connections) do
      if not sock:is_closing() then sock:close() end
    end
  end
  return server:getsockname().port, close
end

describe("hwt.luv", function()
  after_each(function()
    uv.run("nowait")                            -- close callbacks left by a failed test
    assert.equals(0, handles())
  end)

  it("runs due tasks from the loop, in deadline order, and uv.run() returns when all ran", function()
    local errors, order = {}, {}
    local timer = quiet_timer(errors)
    local handle = assert(luv_driver.attach(timer))
    assert.equals(0, handles())                 -- nothing pending: no uv handle yet
    local scheduled = hwt.now()
    local by_deadline = {}
    for _, delay in ipairs({ 0.03, 0.01, 0.02 }) do
      by_deadline[#by_deadline + 1] = { at = hwt.now() + delay, delay = delay }
      timer:timeout(delay, function() order[#order + 1] = delay end)
    end
    assert.is_true(handles() > 0)               -- the arming opened them
    run_loop()
    local took = hwt.now() - scheduled
    assert.same(deadline_order(by_deadline), order)
    assert.same({}, errors)
    assert.is_true(took >= 0.03 and took < 0.03 + LATE, "took " .. took)
    assert.equals(0, handles())
    assert.is_true(handle:detach())
    timer:stop()
  end)

  it("wakes the loop only when something is due", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer))
    local ran = false
    timer:timeout(0.2, function() ran = true end)
    local hung = false
    local watchdog = uv.new_timer()
    watchdog:start(WATCHDOG * 1000, 0, function() hung = true end)
    watchdog:unref()
    local iterations = 0
    while not hung and uv.run("once") do iterations = iterations + 1 end
    watchdog:close()
    uv.run("nowait")
    assert.is_false(hung, "the loop hung (watchdog)")
    assert.is_true(ran)
    -- one wake for the deadline (plus one for closing): not one per tick
    assert.is_true(iterations <= 4, "loop iterations: " .. iterations)
    handle:detach()
    timer:stop()
  end)

  it("keeps a timer that only the loop refers to firing, and lets it go once idle", function()
    local fired, beats = 0, 0
    local weak = setmetatable({}, { __mode = "v" })
    -- In a function of its own, so that no stack slot of this one keeps it.
    local function attach_and_drop()
      local timer = hwt.new({ tick = 0.005 })
      assert(luv_driver.attach(timer))          -- the handle is dropped too
      for i = 1, 3 do timer:timeout(0.01 * i, function() fired = fired + 1 end) end
      timer:every(0.01, function(t)
        beats = beats + 1
        if beats == 4 then t:cancel() end
      end)
      weak.timer = timer
    end
    attach_and_drop()
    for _ = 1, 4 do collectgarbage() end
    assert.is_not_nil(weak.timer, "collected while it had timeouts pending")
    run_loop()
    assert.equals(3, fired)
    assert.equals(4, beats)
    assert.equals(0, handles())
    for _ = 1, 4 do collectgarbage() end
    assert.is_nil(weak.timer, "an idle, unreferenced timer should be collectable")
  end)

  it("closes the loop cleanly after a dropped timer ran everything (a fresh process)", function()
    local out, err, ok = support.run_child([[
      local uv, hwt = require("luv"), require("hwt")
      local fired = 0
      do
        local timer = hwt.new({ tick = 0.005 })
        assert(require("hwt.luv").attach(timer))
        for i = 1, 5 do timer:timeout(0.01 * i, function() fired = fired + 1 end) end
      end
      for _ = 1, 4 do collectgarbage() end
      local watchdog = uv.new_timer()
      watchdog:start(5000, 0, function() print("hung"); os.exit(3) end)
      watchdog:unref()
      uv.run()
      watchdog:close()
      uv.run()
      for _ = 1, 4 do collectgarbage() end
      local closed, close_err = uv.loop_close()
      assert(closed, close_err)
      print("fired " .. fired)
    ]])
    assert.equals("fired 5\n", out, err)
    assert.is_true(ok, err)
  end)

  it("survives the Lua state closing while it drives a timer (a fresh process)", function()
    local out, err, ok = support.run_child([[
      local uv, hwt = require("luv"), require("hwt")
      local timer = hwt.new({ tick = 0.005 })
      assert(require("hwt.luv").attach(timer))
      timer:timeout(0.01, function() end)
      timer:timeout(60, function() end)
      local quit = uv.new_timer()
      quit:start(30, 0, function() uv.stop() end)
      uv.run()                       -- the state closes after this line, busy
      print("leaving mid-run")
    ]])
    assert.equals("leaving mid-run\n", out, err)
    assert.is_true(ok, err)
  end)

  it("detach() closes its uv handles at once and leaves the timeouts pending", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer))
    local ran = false
    timer:timeout(0.02, function() ran = true end)
    assert.is_true(handles() > 0)
    assert.is_true(handle:detach())
    assert.is_false(handle:detach())            -- idempotent
    local took = run_loop()                     -- nothing keeps it going now
    assert.is_true(took < LATE, "took " .. took)
    assert.is_false(ran)
    assert.equals(1, timer:pending())
    assert.equals(0, handles())
    assert.is_true(timer:wait(2))               -- the timer itself still works
    assert.equals(1, timer:poll())
    assert.is_true(ran)
    local again = assert(luv_driver.attach(timer))   -- and can be attached again
    timer:timeout(0.01, function() ran = "again" end)
    run_loop()
    assert.equals("again", ran)
    again:detach()
    timer:stop()
  end)

  it("detach() from inside a task stops the driving", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer))
    local runs = 0
    timer:every(0.01, function()
      runs = runs + 1
      assert(handle:detach())
    end)
    local took = run_loop()
    assert.equals(1, runs)
    assert.is_true(took < LATE, "took " .. took)
    assert.equals(1, timer:pending())           -- the periodic is still armed
    timer:stop()
  end)

  it("lets uv.run() return when the timer is stopped while attached, and detaches", function()
    local errors = {}
    local timer = quiet_timer(errors)
    local handle = assert(luv_driver.attach(timer))
    timer:timeout(0.1, function() errors[#errors + 1] = "ran after stop" end)
    local stopper = uv.new_timer()
    stopper:start(10, 0, function() stopper:close(); assert(#timer:stop() == 1) end)
    local took = run_loop()
    assert.is_true(took < 0.1 + LINGER, "took " .. took)
    assert.same({}, errors)
    assert.is_false(handle:detach())            -- the stop detached it
  end)

  it("lets uv.run() return when the last pending timeout is cancelled", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer))
    local t = timer:timeout(0.1, function() end)
    local canceller = uv.new_timer()
    canceller:start(10, 0, function() canceller:close(); assert(t:cancel()) end)
    local took = run_loop()
    assert.is_true(took < 0.1 + LINGER, "took " .. took)
    assert.equals(0, handles())
    local ran = false                           -- still attached: a new arming drives again
    timer:timeout(0.01, function() ran = true end)
    run_loop()
    assert.is_true(ran)
    assert.is_true(handle:detach())
    timer:stop()
  end)

  it("stops driving when the timer is stopped from inside a task", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer))
    local later_ran = false
    timer:timeout(0.01, function() timer:stop() end)
    timer:timeout(5, function() later_ran = true end)
    local took = run_loop()
    assert.is_true(took < LATE, "took " .. took)
    assert.is_false(later_ran)
    assert.is_false(handle:detach())
  end)

  -- A spawn that starts each task from a later uv callback: the task ends
  -- after the poll that handed it out.
  local function deferring_spawn(run)
    local later = uv.new_timer()
    later:start(5, 0, function() later:close(); run() end)
  end

  it("sees a stop made by a spawned task when the task returns", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer, { spawn = deferring_spawn }))
    local later_ran = false
    timer:timeout(0.01, function() timer:stop() end)
    timer:timeout(5, function() later_ran = true end)
    local took = run_loop()
    assert.is_true(took < LATE, "took " .. took)
    assert.is_false(later_ran)
    assert.is_false(handle:detach())
  end)

  it("sees a spawned task cancel the last pending timeout when the task returns", function()
    local timer = quiet_timer({})
    local handle = assert(luv_driver.attach(timer, { spawn = deferring_spawn }))
    local long = timer:timeout(5, function() end)
    timer:timeout(0.01, function() assert(long:cancel()) end)
    local took = run_loop()
    assert.is_true(took < LATE, "took " .. took)
    assert.equals(0, timer:pending())
    assert.is_true(handle:detach())
    timer:stop()
  end)

  it("hands each task to opts.spawn: a task does TCP I/O in its own coroutine", function()
    local errors, done = {}, {}
    local timer = quiet_timer(errors)
    local port, close_server = echo_server(0.3)
    local spawned = 0
    local handle = assert(luv_driver.attach(timer, {
      spawn = function(run)
        spawned = spawned + 1
        coroutine.wrap(run)()
      end,
    }))
    -- A asks first but gets its answer 0.3 s later; B, due after A, must
    -- not wait for A.
    local function record(reply) done[#done + 1] = reply end
    timer:timeout(0.01, function() record(ask(port, "slow A")) end)
    timer:timeout(0.02, function() record(ask(port, "B")) end)
    timer:timeout(0.6, function() close_server() end)
    run_loop()
    assert.equals(3, spawned)
    if compat.tasks_yield then
      assert.same({}, errors)
      assert.same({ "echo: B", "echo: slow A" }, done)
    else                                        -- PUC 5.1: the yield is the task's error
      assert.same({}, done)
      assert.equals(2, #errors)
      for _, err in ipairs(errors) do assert.matches("yield", err) end
      uv.walk(function(h) if not h:is_closing() then h:close() end end)
      uv.run()                                  -- the connections the failed tasks left
    end
    assert.is_true(handle:detach())
    timer:stop()
  end)

  it("runs tasks without spawn inside the uv callback, where they cannot yield", function()
    local errors = {}
    local timer = quiet_timer(errors)
    local handle = assert(luv_driver.attach(timer))
    local started = false
    timer:timeout(0.01, function()
      started = true
      coroutine.yield()
    end)
    run_loop()
    assert.is_true(started)
    assert.equals(1, #errors)
    assert.matches("yield", errors[1])
    handle:detach()
    timer:stop()
  end)

  it("gives an error from spawn to luv after detaching (a fresh process)", function()
    local out, err, ok = support.run_child([[
      local uv, hwt = require("luv"), require("hwt")
      local timer = hwt.new({ tick = 0.005 })
      assert(require("hwt.luv").attach(timer, { spawn = function() error("spawn refused") end }))
      timer:timeout(0.01, function() end)
      local watchdog = uv.new_timer()
      watchdog:start(5000, 0, function() print("hung"); os.exit(3) end)
      watchdog:unref()
      uv.run()
      print("uv.run returned")
    ]])
    assert.is_nil(ok)                            -- luv ends the process on a callback error
    assert.equals("", out)                       -- neither "hung" nor "uv.run returned"
    assert.matches("spawn refused", err)
  end)

  -- libuv refuses a second poll handle on an fd (EEXIST): here the
  -- program's own, on timer:fd(). The driver then drives by its uv timer
  -- through that busy period, and asks again in the next. In a child without
  -- leak detection: luv leaks the handle of a refused uv.new_poll.
  it("drives by its uv timer while libuv refuses the fd's poll handle, and takes the fd once it can (a fresh process)", function()
    local out, err, ok = support.run_child([[
      local uv, hwt = require("luv"), require("hwt")
      local errors, ran = {}, {}
      local timer = hwt.new({ tick = 0.005, on_error = function(e) errors[#errors + 1] = tostring(e) end })
      local function poll_handles()
        local n = 0
        uv.walk(function(h)
          if not h:is_closing() and tostring(h):match("^uv_poll_t") then n = n + 1 end
        end)
        return n
      end
      local squatter = assert(uv.new_poll(timer:fd()))
      assert(squatter:start("r", function() end))
      local handle = assert(require("hwt.luv").attach(timer))
      timer:timeout(0.02, function()
        ran[#ran + 1] = "first, poll handles " .. poll_handles()
        squatter:close()
      end)
      local watchdog = uv.new_timer()
      watchdog:start(5000, 0, function() print("hung"); os.exit(3) end)
      watchdog:unref()
      uv.run()
      timer:timeout(0.02, function() ran[#ran + 1] = "second, poll handles " .. poll_handles() end)
      uv.run()
      watchdog:close()
      handle:detach()
      timer:stop()
      uv.run()                     -- the close callbacks
      print(table.concat(ran, "; ") .. "; errors " .. #errors)
    ]], "ASAN_OPTIONS=detect_leaks=0")
    assert.equals("first, poll handles 1; second, poll handles 1; errors 0\n", out, err)
    assert.is_true(ok, err)
  end)

  it("refuses bad arguments, naming them", function()
    local function attach_error(...)
      local ok, err = pcall(luv_driver.attach, ...)
      assert.is_false(ok)
      return err
    end
    assert.matches("bad argument #1 to 'attach' %(hwt.Timer expected, got nil%)", attach_error())
    assert.matches("bad argument #1 to 'attach' %(hwt.Timer expected, got table%)", attach_error({}))
    local timer = hwt.new()
    assert.matches("bad argument #2 to 'attach' %(table expected, got number%)", attach_error(timer, 5))
    assert.matches("bad argument #2 to 'attach' %(unknown option 'spwan'%)",
                   attach_error(timer, { spwan = print }))
    assert.matches("bad option 'spawn' to 'attach' %(function expected, got string%)",
                   attach_error(timer, { spawn = "coroutine" }))
    assert.matches("bad argument #1 to 'attach' %(timer has a manual clock",
                   attach_error(hwt.new({ clock = "manual" })))
    local handle = assert(luv_driver.attach(timer))
    assert.matches("bad argument #1 to 'attach' %(timer is already attached",
                   attach_error(timer))
    handle:detach()
    timer:stop()
    assert.matches("bad argument #1 to 'attach' %(timer is stopped%)", attach_error(timer))
    local callable = setmetatable({}, { __call = function(_, run) run() end })
    local other = hwt.new()
    assert(luv_driver.attach(other, { spawn = callable })):detach()
    other:stop()
  end)

  it("loads without luv, and attach() then returns nil and a message (a fresh process)", function()
    local out, err, ok = support.run_child([[
      package.loaded.luv = nil
      package.preload.luv = function() error("no luv in this test") end
      local driver = require("hwt.luv")
      local timer = require("hwt").new()
      local handle, message = driver.attach(timer)
      assert(handle == nil, "attached without luv")
      assert(message:find("no luv in this test", 1, true), message)
      print(message:match("^hwt%.luv: cannot load luv") and "ok" or message)
    ]])
    assert.equals("ok\n", out, err)
    assert.is_true(ok, err)
  end)
end)
