-- errors_spec.lua: errors raised by tasks. They go to on_error with the
-- error value unchanged and the Timeout, and the drain goes on; without
-- on_error, the error and a traceback go to stderr; an on_error that raises
-- or calls back into the timer does not stop the drain either.
local compat = require("compat")
local support = require("support")

local noop, manual, manual_with_errors = support.noop, support.manual, support.manual_with_errors
local has_text, logger, books = support.has_text, support.logger, support.books
local run_child, child_output = support.run_child, support.child_output
local CHILD_SETUP = support.CHILD_SETUP

describe("errors in tasks", function()
  it("go to on_error with the error value unchanged and the timeout; the others still run", function()
    local reports = {}
    local timer = manual({ on_error = function(err, t) reports[#reports + 1] = { err, t } end })
    local log, task = logger()
    local payload = { code = 42 }
    timer:timeout(1, task, 1)
    local t_str = timer:timeout(1, function() error("plain", 0) end)
    timer:timeout(1, task, 2)
    local t_tab = timer:timeout(1, function() error(payload) end)
    local t_num = timer:timeout(1, function() error(17, 0) end)  -- 5.1/5.2 add a position at level 1
    local t_pos = timer:timeout(1, function() error("with position") end)
    timer:timeout(1, task, 3)
    assert.are.equal(7, timer:advance(1))
    assert.are.same({ 1, 2, 3 }, log)
    assert.are.equal(4, #reports)
    assert.are.equal("plain", reports[1][1])
    assert.is_true(rawequal(t_str, reports[1][2]))
    assert.is_true(rawequal(payload, reports[2][1]))
    assert.is_true(rawequal(t_tab, reports[2][2]))
    assert.are.equal(17, reports[3][1])
    assert.is_true(compat.is_integer(reports[3][1]), "reports[3][1]: an integer")
    assert.is_true(rawequal(t_num, reports[3][2]))
    assert.is_truthy(reports[4][1]:find("with position", 1, true))
    assert.is_true(rawequal(t_pos, reports[4][2]))
  end)

  it("a raised nil or false reaches on_error unchanged", function()
    local reports = {}
    local timer = manual({ on_error = function(err, t) reports[#reports + 1] = { n = 2, err, t } end })
    timer:timeout(1, function() error(nil) end)
    timer:timeout(1, function() error(false) end)
    assert.are.equal(2, timer:advance(1))
    assert.are.equal(2, #reports)
    assert.is_nil(reports[1][1])
    assert.is_false(reports[2][1])
  end)

  it("a task that raised counts as run: in poll()'s return and in stats().fired", function()
    local timer = manual({ on_error = function() end })
    local t = timer:timeout(0, function() error("x") end)
    timer:timeout(0, function() end)
    assert.are.equal(2, timer:poll())
    assert.are.equal(2, timer:stats().fired)
    assert.is_true(t:is_expired())
    assert.is_false(t:is_cancelled())
    assert.are.equal(0, timer:pending())
    assert.is_true(has_text(tostring(t), "expired"))
  end)

  it("a callable on_error is called too, and errors of TimerTask tables reach it", function()
    local reports = {}
    local handler = setmetatable({}, { __call = function(_, err, t) reports[#reports + 1] = { err, t } end })
    local timer = manual({ on_error = handler })
    local tt = { run = function() error("from run", 0) end }
    local t = timer:timeout(0, tt)
    assert.are.equal(1, timer:poll())
    assert.are.equal("from run", reports[1][1])
    assert.is_true(rawequal(t, reports[1][2]))
  end)

  it("a TimerTask whose run is gone when it falls due: on_error gets an error naming 'run'", function()
    local reports = {}
    local timer = manual({ on_error = function(err, t) reports[#reports + 1] = { err, t } end })
    local tt = { run = function() end }
    local t = timer:timeout(0, tt)
    local ran = false
    timer:timeout(0, function() ran = true end)
    tt.run = nil
    assert.are.equal(2, timer:poll())
    assert.are.equal(1, #reports)
    assert.matches("'run'", reports[1][1])
    assert.is_true(rawequal(t, reports[1][2]))
    assert.is_true(ran)
  end)

  it("tasks can use the timer from on_error", function()
    local timer
    local retried = false
    timer = manual({ on_error = function(_, t)
      timer:timeout(1, function() retried = true end)
      assert.is_true(rawequal(timer, t:timer()))
    end })
    timer:timeout(1, function() error("x") end)
    timer:advance(1)
    timer:advance(1)
    assert.is_true(retried)
  end)

  it("without on_error, the error and a traceback go to stderr and poll goes on", function()
    local out = child_output([[
      local hwt = require("hwt")
      local timer = hwt.new({ clock = "manual" })
      local after = false
      timer:timeout(1, function() error("boom-marker") end)
      timer:timeout(1, function() error({}) end)
      timer:timeout(1, function() after = true end)
      local n = timer:advance(1)
      io.stdout:write("ran=", n, " after=", tostring(after), " fired=", timer:stats().fired, "\n")
    ]])
    assert.is_truthy(out:find("boom-marker", 1, true), out)
    assert.is_truthy(out:find("traceback", 1, true), out)
    assert.is_truthy(out:find("ran=3 after=true fired=3", 1, true), out)
  end)

  it("poll goes on even when on_error itself raises", function()
    local out = child_output([[
      local hwt = require("hwt")
      local calls = 0
      local timer = hwt.new({ clock = "manual", on_error = function(e)
        calls = calls + 1
        error("handler-failed-marker")
      end })
      local after = false
      timer:timeout(1, function() error("task-failed") end)
      timer:timeout(1, function() after = true end)
      local n = timer:advance(1)
      io.stdout:write("ran=", n, " after=", tostring(after), " calls=", calls, "\n")
    ]])
    assert.is_truthy(out:find("ran=2 after=true calls=1", 1, true), out)
  end)

  it("a child whose task raises reports it on stderr with a traceback (default on_error)", function()
    local code = CHILD_SETUP .. [[
local t = hwt.new({ tick = 0.001 })
local after = false
t:timeout(0, function() error("kaboom-in-task") end)
local second = t:timeout(0, function() after = true end)
t:timeout(60, function() end)
-- a GC step between the two may put them in two ticks: poll once both are due
while hwt.now() < second:deadline() + 0.002 do end
assert(t:wait(2))
local n = t:poll()
io.write("ran:", n, " after:", tostring(after), "\n")
io.write("CHILD-DONE\n")
os.exit(0, true)
]]
    local out, err, ok, how, status = run_child(code)
    assert.equals("exit", how)
    assert.equals(0, status, "stderr: " .. err)
    assert.is_true(ok)
    assert.matches("CHILD%-DONE", out)
    assert.matches("ran:2 after:true", out, 1, true)
    assert.matches("hwt:", err, 1, true)
    assert.matches("kaboom-in-task", err, 1, true)
    assert.matches("stack traceback", err, 1, true)
  end)
end)

describe("on_error", function()
  it("errors inside on_error (string, table, number, nil) do not stop poll()", function()
    local calls = 0
    local raises = { "on_error failed", { "table" }, 42, nil }
    local tm = manual({ on_error = function() calls = calls + 1; error(raises[calls]) end })
    local b = books(tm)
    for i = 1, 4 do b:timeout(0.01, function() error("task " .. i) end) end
    local fine = b:timeout(0.01, noop)
    assert.are.equal(5, tm:advance(0.01))
    assert.are.equal(4, calls)
    assert.are.equal(1, b:runs_of(fine))
    b:check()
    tm:stop()
  end)

  it("on_error receives the error value unchanged, even nil or a table", function()
    local tm, errors = manual_with_errors()
    local value = { code = 7 }
    tm:timeout(0, function() error(value) end)
    tm:timeout(0, function() error(nil) end)
    tm:timeout(0, function() error(false) end)
    assert.are.equal(3, tm:advance(0))
    assert.are.equal(3, errors.n)
    assert.are.equal(value, errors[1])
    assert.is_nil(errors[2])
    assert.is_false(errors[3])
    tm:stop()
  end)

  it("an on_error that calls poll() runs the other due tasks, each once", function()
    local tm
    local inner = {}
    tm = manual({ on_error = function()
      local ran = tm:poll()
      inner[#inner + 1] = ran
    end })
    local b = books(tm)
    b:timeout(0.01, function() error("x") end)
    b:timeout(0.01, function() error("y") end)
    local c = b:timeout(0.01, noop)
    assert.are.equal(1, tm:advance(0.01))        -- x; x's on_error ran y; y's ran c
    assert.are.same({ 1, 1 }, inner)
    assert.are.equal(1, b:runs_of(c))
    b:check()
    tm:stop()
  end)

  it("a task that stops its timer then schedules gets 'timer is stopped' through on_error", function()
    local tm, errors = manual_with_errors()
    tm:timeout(0, function() tm:stop(); tm:timeout(0, noop) end)
    tm:advance(0)
    assert.are.equal(1, errors.n)
    assert.matches("timer is stopped", tostring(errors[1]), 1, true)
  end)
end)
