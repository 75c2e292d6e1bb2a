-- safety_spec.lua: the five defects an adversarial review found (test/RELIABILITY.md,
-- "Safety review"), each as its reproduction, plus the siblings found while fixing
-- them. Under `make test` these also run against the ASan+UBSan build, whose
-- runtime the child interpreters inherit (LD_PRELOAD), so a child that touches
-- freed memory fails with a report on its stderr.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local noop, manual = support.noop, support.manual
local assert_clean_exit, ON_GC = support.assert_clean_exit, support.ON_GC

describe("1: a timer created while the state closes is stopped with it", function()
  it("the reproduction: a finalizer run by lua_close schedules a periodic on a new timer", function()
    for _ = 1, 5 do                      -- the fault was a race: it showed in most runs, not all
      assert_clean_exit(support.run_child(ON_GC .. [[
        local hwt = require("hwt")
        keep = on_gc(function()
          local t = hwt.new{tick = 0.001}
          t:every(0.001, function() end)
        end)
      ]]))
    end
  end)

  it("a timer made after the state's timers were stopped is born stopped, and says so", function()
    local out, err, ok, how, status = support.run_child(ON_GC .. [[
      older = on_gc(function()                 -- finalized after hwt's own finalizer
        local t = require("hwt").new{tick = 0.001}
        local scheduled, message = pcall(t.timeout, t, 0.001, function() end)
        io.stdout:write(tostring(scheduled), " | ", tostring(message), " | ", tostring(t), "\n")
      end)
      local hwt = require("hwt")
    ]])
    assert_clean_exit(out, err, ok, how, status)
    assert.matches("^false | [^|]*timer is stopped | hwt%.Timer %(stopped%)", out)
  end)

  -- Where hwt can tell that a finalizer runs (Lua 5.4 refuses lua_gc inside one) or
  -- need not (LuaJIT finalizes objects made during the close); PUC 5.1-5.3 can do
  -- neither, a limit the README states.
  if compat.has_close or jit then
    it("hwt loaded for the first time by a finalizer during lua_close: no thread outlives the state", function()
      for _ = 1, 5 do
        assert_clean_exit(support.run_child(ON_GC .. [[
          keep = on_gc(function()
            local t = require("hwt").new{tick = 0.001}
            pcall(t.every, t, 0.001, function() end)
          end)
        ]]))
      end
    end)
  end

  it("os.exit(0, true) inside a task, with timers pending on a shared engine", function()
    local out, err, ok, how, status = support.run_child([[
      local hwt = require("hwt")
      local other = hwt.new{tick = 0.001}
      other:every(0.001, function() end)
      local t = hwt.new{tick = 0.001}
      for i = 1, 100 do t:timeout(i / 1000, function() end) end
      t:timeout(0, function() io.stdout:write("exiting\n"); os.exit(0, true) end)
      t:run()
      io.stdout:write("not reached\n")
    ]])
    assert_clean_exit(out, err, ok, how, status)
    assert.are.equal("exiting\n", out)
  end)
end)

describe("2: the metatables are protected", function()
  it("getmetatable() on a Timer or a Timeout gives its name, not the metatable", function()
    local tm = manual()
    assert.are.equal("hwt.Timer", getmetatable(tm))
    assert.are.equal("hwt.Timeout", getmetatable(tm:timeout(1, noop)))
    assert.is_false(pcall(function() getmetatable(tm).__gc = nil end))
    assert.are.equal(1, tm:pending())
    tm:stop()
  end)

  it("the reproduction: removing __gc fails, so dropping the timer cannot free what the worker uses", function()
    local out, err = support.run_child([[
      local hwt = require("hwt")
      local t = hwt.new{tick = 0.001}
      getmetatable(t).__gc = nil
      for i = 1, 100 do t:timeout(0.02, function() end) end
      t = nil; collectgarbage(); collectgarbage()
      local t0 = hwt.now(); while hwt.now() - t0 < 0.2 do end
      print("finished")
    ]])
    assert(not err:find("Sanitizer", 1, true), err)
    assert.are.equal("", out)
    assert.matches("attempt to index a string value", err)
  end)

  it("hwt.Timer and hwt.Timeout still extend every timer and timeout", function()
    local tm = manual()
    hwt.Timer.spec_probe = function(self) return self:pending() end
    hwt.Timeout.spec_probe = function(self) return self:is_cancelled() end
    local t = tm:timeout(1, noop)
    assert.are.equal(1, tm:spec_probe())
    assert.is_false(t:spec_probe())
    hwt.Timer.spec_probe, hwt.Timeout.spec_probe = nil, nil
    tm:stop()
  end)
end)

describe("4: hwt.retry when the timer stops", function()
  local function failing() return nil, "down" end

  it("the reproduction: stop() makes a waiting retry give up, once, before stop() returns", function()
    local tm = manual()
    local gave_up, returned = {}, false
    local h = hwt.retry(tm, failing, { on_give_up = function(err)
      assert.is_false(returned)
      gave_up[#gave_up + 1] = err
    end })
    local list = tm:stop()
    returned = true
    assert.are.same({ "timer is stopped" }, gave_up)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
    assert.are.equal(1, #list)                       -- the retry's wait, cancelled
    tm:stop()
    assert.are.equal(1, #gave_up)
  end)

  it("fn stops the timer and fails: gives up with 'timer is stopped', nothing goes to on_error", function()
    local errors, gave_up = {}, {}
    local tm = manual({ on_error = function(err) errors[#errors + 1] = err end })
    local h = hwt.retry(tm, function(attempt)
      if attempt == 2 then tm:stop() end
      return nil, "down"
    end, { delay = 1, on_give_up = function(err) gave_up[#gave_up + 1] = err end })
    tm:advance(1)
    assert.are.same({ "timer is stopped" }, gave_up)
    assert.are.same({}, errors)
    assert.are.equal(2, h.attempts)
    assert.is_true(h.done)
  end)

  it("fn stops the timer and then succeeds: that is a success", function()
    local tm = manual()
    local succeeded, gave_up = {}, 0
    hwt.retry(tm, function() tm:stop() return "ok" end, {
      on_success = function(v) succeeded[#succeeded + 1] = v end,
      on_give_up = function() gave_up = gave_up + 1 end })
    assert.are.same({ "ok" }, succeeded)
    assert.are.equal(0, gave_up)
  end)

  it("a timer merely collected does not call on_give_up", function()
    local gave_up = 0
    do
      local tm = hwt.new{ tick = 0.001 }
      hwt.retry(tm, failing, { delay = 60, on_give_up = function() gave_up = gave_up + 1 end })
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(0, gave_up)
  end)

  it("an on_give_up that raises inside stop(): the error goes to on_error, the other retries are told", function()
    local errors, told = {}, 0
    local tm = manual({ on_error = function(err, t) errors[#errors + 1] = { err = err, t = t } end })
    hwt.retry(tm, failing, { on_give_up = function() error("give-up-boom", 0) end })
    hwt.retry(tm, failing, { on_give_up = function() told = told + 1 end })
    local list = tm:stop()
    assert.are.equal(2, #list)
    assert.are.equal(1, told)
    assert.are.equal(1, #errors)
    assert.are.equal("give-up-boom", errors[1].err)
    assert.are.equal("hwt.Timeout", getmetatable(errors[1].t))
  end)

  if compat.has_close then
    it("a timer closed by <close> stops like stop(): the retry gives up", compat.compile([[
    return function()
      local gave_up = {}
      do
        local tm <close> = hwt.new{clock = "manual"}
        hwt.retry(tm, function() return false end,
                  { on_give_up = function(err) gave_up[#gave_up + 1] = err end })
      end
      assert.are.same({ "timer is stopped" }, gave_up)
    end
    ]], "@safety_spec.lua", { hwt = hwt }, _ENV))
  end
end)

describe("siblings", function()
  it("a Timer whose __gc Lua skips (called at the C stack limit) leaves nothing freed in use", function()
    local out, err, ok, how, status = support.run_child([[
      local hwt = require("hwt")
      local function deep(level)
        if level >= 150 then
          collectgarbage()                 -- finalizers called this deep fail: "C stack overflow"
          local timer = hwt.new({ tick = 0.001 })
          timer:every(0.001, function() end)
          timer = nil
        end
        pcall(deep, level + 1)
      end
      deep(1)
      collectgarbage()
      hwt.new({ tick = 0.001 }):timeout(0.001, function() end)
      local t0 = hwt.now(); while hwt.now() - t0 < 0.05 do end
      print("done")
    ]])
    assert_clean_exit(out, err, ok, how, status)
    assert.are.equal("done\n", out)
  end)

  it("a Timeout does not keep its timer alive: t:timer() is nil once the timer is collected", function()
    local t
    do
      local tm = manual()
      t = tm:timeout(1, noop)
      assert.is_true(rawequal(tm, t:timer()))
    end
    collectgarbage()
    collectgarbage()
    assert.is_nil(t:timer())
    assert.is_true(t:is_cancelled())
    assert.is_false(t:cancel())
  end)

  it("a coroutine in timer:sleep() wakes with nil, 'timer is stopped' when the timer stops", function()
    local tm = manual()
    local results
    local co = coroutine.create(function() results = { tm:sleep(5) } end)
    assert(coroutine.resume(co))
    tm:stop()
    assert.are.equal("dead", coroutine.status(co))
    assert.are.same({ nil, "timer is stopped" }, results)
  end)

  it("a sleeper woken normally, then the timer stopped: woken once, with true", function()
    local tm = manual()
    local results = {}
    local co = coroutine.create(function() results[#results + 1] = tm:sleep(1) end)
    assert(coroutine.resume(co))
    tm:advance(1)
    tm:stop()
    assert.are.same({ true }, results)
  end)
end)

describe("round three (issue 42): the binding", function()
  it("3: a hand-off kept past its collected timer, with a watcher set, is collected safely", function()
    assert_clean_exit(support.run_child([[
      local hwt = require("hwt")
      local timer = hwt.new{clock = "manual"}
      timer:on_earlier(function() end)
      timer:timeout(0, function() end)
      local saved
      assert(timer:poll(1, function(fn) saved = fn end) == 1)
      timer = nil; collectgarbage(); collectgarbage()
      saved = nil; collectgarbage(); collectgarbage()
      io.write("survived")
    ]]))
  end)

  it("3: a hand-off run after its timer was collected runs nothing", function()
    local ran = false
    local timer = manual()
    timer:on_earlier(noop)
    timer:timeout(0, function() ran = true end)
    local saved
    timer:poll(1, function(fn) saved = fn end)
    timer = nil
    collectgarbage()
    collectgarbage()
    saved()
    assert.is_false(ran)
  end)

end)
