-- The surface every host driver shares (hwt.driver): attach(timer, opts) ->
-- driver, or nil, err; driver:detach() -> true, then false. Against the real
-- hosts where that is cheap: luv and cqueues (both required here: where one
-- cannot be loaded, this file fails). hwt.ngx outside nginx: its argument
-- checks, and nil, err for want of lua-nginx-module; test/host/nginx_test.sh
-- drives it in a real nginx.
local uv = require("luv")
local cqueues = require("cqueues")
local hwt = require("hwt")
local support = require("support")

local WATCHDOG = 5                              -- seconds: a run longer has hung
local LATE = 1                                  -- loose bound for "returned promptly"

local function quiet_timer(errors)
  return hwt.new({ tick = 0.005, on_error = function(err) errors[#errors + 1] = tostring(err) end })
end

-- Each host: how to attach with it, how to run its loop until nothing is
-- left, and how to call fn from inside that loop a little later.
local hosts = {}

hosts.luv = {
  module = "hwt.luv",
  new = function() return {} end,
  opts = function() return nil end,
  run = function() return support.run_uv_loop(uv, WATCHDOG) end,
  later = function(_, fn)
    local t = uv.new_timer()
    t:start(10, 0, function() t:close(); fn() end)
  end,
}

hosts.cqueues = {
  module = "hwt.cqueues",
  new = function() return { cq = cqueues.new() } end,
  opts = function(host) return { controller = host.cq } end,
  run = function(host)
    local cq = host.cq
    local started = hwt.now()
    local deadline = started + WATCHDOG
    while not cq:empty() do
      local ok, err = cq:step(math.max(deadline - hwt.now(), 0))
      assert(ok, err)
      assert(hwt.now() < deadline, "the controller hung (watchdog)")
    end
    return hwt.now() - started
  end,
  later = function(host, fn)
    host.cq:wrap(function() cqueues.sleep(0.01); fn() end)
  end,
}

-- Runs host.run with hosts[name]'s functions as methods.
local function host_of(name)
  local host = hosts[name].new()
  for key, value in pairs(hosts[name]) do host[key] = value end
  host.driver = require(host.module)
  function host.attach(timer) return host.driver.attach(timer, host.opts(host)) end
  return host
end

for _, name in ipairs({ "luv", "cqueues" }) do
  describe("hwt." .. name .. " (the drivers' surface)", function()
    it("attach(timer, opts) returns a driver; the due tasks run from the host's loop, which returns when nothing is left", function()
      local host = host_of(name)
      local errors, ran = {}, {}
      local timer = quiet_timer(errors)
      local driver = assert(host.attach(timer))
      assert.is_function(driver.detach)
      for i = 1, 3 do timer:timeout(0.01 * i, function() ran[#ran + 1] = i end) end
      local took = host:run()
      assert.same({ 1, 2, 3 }, ran)
      assert.same({}, errors)
      assert.is_true(took < LATE, "took " .. took)
      assert.is_true(driver:detach())
      timer:stop()
    end)

    it("detach() returns true, then false; the timer and its timeouts stay as they are", function()
      local host = host_of(name)
      local timer = quiet_timer({})
      local driver = assert(host.attach(timer))
      local ran = false
      local long = timer:timeout(10, function() ran = true end)
      local detached
      host:later(function() detached = { driver:detach(), driver:detach() } end)
      local took = host:run()
      assert.same({ true, false }, detached)
      assert.is_true(took < LATE, "took " .. took)
      assert.is_false(ran)
      assert.is_false(timer:is_stopped())
      assert.equals(1, timer:pending())
      assert.is_false(long:is_cancelled())
      assert.is_true(long:cancel())
      -- attached again, by the same host: it drives as before
      local again = assert(host.attach(timer))
      timer:timeout(0.01, function() ran = "again" end)
      host:run()
      assert.equals("again", ran)
      assert.is_true(again:detach())
      timer:stop()
    end)

    it("detach() from inside a task lets that task finish; nothing later is driven", function()
      local host = host_of(name)
      local errors = {}
      local timer = quiet_timer(errors)
      local driver = assert(host.attach(timer))
      local steps, later_ran = {}, false
      timer:timeout(0.01, function()
        steps[#steps + 1] = driver:detach()
        steps[#steps + 1] = "finished"
      end)
      local later = timer:timeout(0.3, function() later_ran = true end)
      local took = host:run()
      assert.same({ true, "finished" }, steps)
      assert.is_true(took < 0.3, "took " .. took)
      assert.is_false(later_ran)
      assert.is_false(later:is_cancelled())
      assert.is_false(driver:detach())
      assert.same({}, errors)
      timer:stop()
    end)

    it("lets go of a timer that a task stopped: the loop returns, detach() then returns false", function()
      local host = host_of(name)
      local timer = quiet_timer({})
      local driver = assert(host.attach(timer))
      local later_ran = false
      timer:timeout(0.01, function() timer:stop() end)
      timer:timeout(5, function() later_ran = true end)
      local took = host:run()
      assert.is_true(took < LATE, "took " .. took)
      assert.is_false(later_ran)
      assert.is_true(timer:is_stopped())
      assert.is_false(driver:detach())
    end)

    it("lets go of a timer stopped by the last task it handed out", function()
      local host = host_of(name)
      local timer = quiet_timer({})
      local driver = assert(host.attach(timer))
      local ran = 0
      timer:timeout(0.01, function() ran = ran + 1 end)
      timer:timeout(0.01, function() ran = ran + 1; timer:stop() end)
      host:run()
      assert.equals(2, ran)
      assert.is_true(timer:is_stopped())
      assert.is_false(driver:detach())
    end)

    it("does not build timer:stats() while it drives", function()
      local host = host_of(name)
      local timer = quiet_timer({})
      local driver = assert(host.attach(timer))
      local stats, calls = hwt.Timer.stats, 0
      hwt.Timer.stats = function(...) calls = calls + 1; return stats(...) end
      local ok, err = pcall(function()
        timer:timeout(0.01, function() end)
        timer:timeout(0.02, function() end)
        timer:timeout(0.03, function() timer:stop() end)
        timer:timeout(5, function() end)
        host:run()
      end)
      hwt.Timer.stats = stats
      assert(ok, err)
      assert.equals(0, calls)
      assert.is_true(timer:is_stopped())
      assert.is_false(driver:detach())          -- the stop let it go
    end)

    it("refuses bad arguments, naming them", function()
      local host = host_of(name)
      local function attach_error(timer, opts)
        local ok, err = pcall(host.driver.attach, timer, opts)
        assert.is_false(ok)
        return err
      end
      local opts = host.opts(host)
      assert.matches("^bad argument #1 to 'attach' %(hwt.Timer expected, got nil%)$", attach_error(nil, opts))
      assert.matches("^bad argument #1 to 'attach' %(hwt.Timer expected, got table%)$", attach_error({}, opts))
      local manual = hwt.new({ clock = "manual" })
      assert.matches("^bad argument #1 to 'attach' %(timer has a manual clock", attach_error(manual, opts))
      manual:stop()
      local stopped = hwt.new()
      stopped:stop()
      assert.matches("^bad argument #1 to 'attach' %(timer is stopped%)$", attach_error(stopped, opts))
      local timer = hwt.new()
      assert.matches("^bad argument #2 to 'attach' %(unknown option 'bogus'%)$",
                     attach_error(timer, { bogus = true }))
      local driver = assert(host.attach(timer))
      assert.matches("^bad argument #1 to 'attach' %(timer is already attached", attach_error(timer, opts))
      driver:detach()
      timer:stop()
    end)
  end)
end

describe("the drivers together", function()
  it("a timer has one driver at a time, of whichever host", function()
    local luv_host, cq_host = host_of("luv"), host_of("cqueues")
    local timer = quiet_timer({})
    local by_luv = assert(luv_host.attach(timer))
    for _, attach in ipairs({
      function() return cq_host.attach(timer) end,
      function() return require("hwt.ngx").attach(timer) end,
      function() return require("hwt.ngx").start(timer) end,
    }) do
      local ok, err = pcall(attach)
      assert.is_false(ok)
      assert.matches("timer is already attached: detach it first", err)
    end
    assert.is_true(by_luv:detach())
    local by_cqueues = assert(cq_host.attach(timer))
    local ran = false
    timer:timeout(0.01, function() ran = true end)
    cq_host:run()
    assert.is_true(ran)
    assert.is_true(by_cqueues:detach())
    assert(luv_host.attach(timer)):detach()
    timer:stop()
  end)

  it("a start the host refuses leaves nothing attached: the timer can be attached again", function()
    -- hwt.ngx under a stub of lua-nginx-module whose ngx.timer.at refuses
    local saved_ngx, saved_semaphore = rawget(_G, "ngx"), package.loaded["ngx.semaphore"]
    local function nop() end
    rawset(_G, "ngx", { ERR = 4, WARN = 5, log = nop, sleep = nop, worker = { exiting = function() return false end },
      timer = { at = function() return nil, "too many pending timers" end }, thread = { spawn = nop } })
    package.loaded["ngx.semaphore"] = { new = function() return { post = nop, wait = nop } end }
    local timer = quiet_timer({})
    local ran = false
    timer:timeout(0.01, function() ran = true end)
    local ok, driver, err = pcall(require("hwt.ngx").attach, timer)
    rawset(_G, "ngx", saved_ngx)
    package.loaded["ngx.semaphore"] = saved_semaphore
    assert(ok, driver)
    assert.is_nil(driver)
    assert.matches("^hwt.ngx cannot arm an ngx.timer.at: too many pending timers", err)
    local host = host_of("cqueues")
    local again = assert(host.attach(timer))    -- not attached, no watcher left behind
    host:run()
    assert.is_true(ran)
    assert.is_true(again:detach())
    timer:stop()
  end)

  it("hwt.cqueues takes opts.controller, and the older attach(timer, controller)", function()
    local cq_driver = require("hwt.cqueues")
    for _, form in ipairs({ "opts", "older" }) do
      local cq, timer = cqueues.new(), quiet_timer({})
      local driver = assert(cq_driver.attach(timer, form == "opts" and { controller = cq } or cq))
      local ran = false
      timer:timeout(0.01, function() ran = true end)
      hosts.cqueues.run({ cq = cq })
      assert.is_true(ran, form)
      assert.is_true(driver:detach())
      timer:stop()
    end
    local timer = hwt.new()
    local ok, err = pcall(cq_driver.attach, timer, { controller = "cq" })
    assert.is_false(ok)
    assert.matches("^bad option 'controller' to 'attach' %(cqueues controller expected, got string%)$", err)
    ok, err = pcall(cq_driver.attach, timer, {})
    assert.is_false(ok)
    assert.matches("^bad option 'controller' to 'attach' %(cqueues controller expected, got nil%)$", err)
    ok, err = pcall(cq_driver.attach, timer, 42)
    assert.is_false(ok)
    assert.matches("^bad argument #2 to 'attach' %(cqueues controller expected, got number%)$", err)
    timer:stop()
  end)

  it("hwt.ngx outside nginx: attach() and its other name start() check their arguments, then return nil, err", function()
    local ngx_driver = require("hwt.ngx")
    local timer = hwt.new()
    for _, fname in ipairs({ "attach", "start" }) do
      local attach = ngx_driver[fname]
      local ok, err = pcall(attach, nil)
      assert.is_false(ok)
      assert.matches("^bad argument #1 to '" .. fname .. "' %(hwt.Timer expected, got nil%)$", err)
      ok, err = pcall(attach, timer, { concurrency = 0 })
      assert.is_false(ok)
      assert.matches("^bad option 'concurrency' to '" .. fname .. "' %(integer >= 1 expected%)$", err)
      ok, err = pcall(attach, timer, { on_exit = true })
      assert.is_false(ok)
      assert.matches("^bad option 'on_exit' to '" .. fname .. "' %(function expected, got boolean%)$", err)
      local driver, why = attach(timer, { concurrency = 4 })
      assert.is_nil(driver)
      assert.matches("^hwt.ngx needs lua%-nginx%-module", why)
    end
    local by_luv = assert(host_of("luv").attach(timer))   -- nothing stayed attached
    by_luv:detach()
    timer:stop()
  end)

  it("a host whose library does not load: nil and a message, and nothing stays attached (a fresh process)", function()
    local out, err, ok = support.run_child([[
      package.loaded.luv = nil
      package.preload.luv = function() error("no luv in this test") end
      local hwt = require("hwt")
      local timer = hwt.new()
      local driver, message = require("hwt.luv").attach(timer)
      assert(driver == nil and message:match("^hwt%.luv: cannot load luv: .*no luv in this test"), message)
      local cq = require("cqueues").new()
      local ran = false
      timer:timeout(0.01, function() ran = true end)
      driver = assert(require("hwt.cqueues").attach(timer, { controller = cq }))
      assert(cq:loop(5))
      assert(ran, "the task did not run")
      assert(driver:detach() == true)
      timer:stop()
      print("ok")
    ]])
    assert.equals("ok\n", out, err)
    assert.is_true(ok, err)
  end)
end)
