-- stop_spec.lua: timer:stop(): it returns the timeouts that never ran, in
-- deadline order, each cancelled; a second stop returns nothing; the timer
-- then refuses work; <close>; a stop from inside a task, a nested poll,
-- on_error or a suspended drain; a stop where the C stack cannot take one
-- more call. That a stop joins the worker thread is in lifetime_spec.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, YIELDS, noop, manual = compat.pack, compat.tasks_yield, support.noop, support.manual
local manual_with_errors, collecting = support.manual_with_errors, support.collecting
local assert_raises, assert_error = support.assert_raises, support.assert_error
local has_text, logger, call = support.has_text, support.logger, support.call
local state_of, books, in_main = support.state_of, support.books, support.in_main
local start, resume, first = support.start, support.resume, support.first
local assert_yield_errors, yielder = support.assert_yield_errors, support.yielder
local appender = support.appender

describe("timer:stop", function()
  it("returns the never-run timeouts in deadline order, each now cancelled", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    local by_label = {}
    for _, d in ipairs({ 5, 0.5, math.huge, 0.25, 3, 0.5, 1e300 }) do
      by_label[#by_label + 1] = timer:timeout(d, task, d)
    end
    local ran = timer:timeout(0.1, task, "ran")
    local cancelled = timer:timeout(0.2, task, "cancelled")
    local due = timer:timeout(0, task, "due")      -- due, waiting for poll
    local periodic = timer:every(0.3, task, "every")
    timer:advance(0.1)                               -- runs "due", then "ran"
    assert.are.same({ "due", "ran" }, log)
    local due2 = timer:timeout(0, task, "due2")
    cancelled:cancel()
    local cancels_before = timer:stats().cancelled
    local stopped = timer:stop()
    local expected = { due2, by_label[4], periodic, by_label[2], by_label[6], by_label[5],
                       by_label[1], by_label[7], by_label[3] }
    assert.are.equal(#expected, #stopped)
    for i, t in ipairs(expected) do
      assert.is_true(rawequal(t, stopped[i]), "position " .. i)
      assert.is_true(t:is_cancelled())
      assert.is_false(t:is_expired())
      assert.is_false(t:cancel())
      assert.are.equal(0, t:remaining())
      assert.is_true(has_text(tostring(t), "cancelled"))
    end
    assert.is_false(ran:is_cancelled())
    assert.are.equal(cancels_before + #expected, timer:stats().cancelled)
    assert.are.same({ "due", "ran" }, log)
  end)

  it("a second call returns an empty array; afterwards the timer refuses work", function()
    local timer = manual()
    timer:timeout(1, function() end)
    assert.are.equal(1, #timer:stop())
    assert.are.same({}, timer:stop())
    assert.are.same({}, timer:stop())
    assert_raises("timer is stopped", timer.timeout, timer, 1, function() end)
    assert_raises("timer is stopped", timer.every, timer, 1, function() end)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:pending())
    assert.are.equal(0, timer:advance(10))
    assert.is_false(timer:wait())
    local s = timer:stats()
    assert.is_true(s.stopped)
    assert.are.equal(0, s.pending)
    assert.are.equal(0, s.due)
    assert.are.equal(1, s.cancelled)
    assert.are.equal("hwt.Timer", tostring(timer):sub(1, 9))
  end)

  it("returns a periodic timeout only if it never ran", function()
    local timer = manual()
    local ran_one = timer:every(1, function() end)
    local fresh = timer:every(5, function() end)
    timer:advance(1)
    local stopped = timer:stop()
    assert.are.equal(1, #stopped)
    assert.is_true(rawequal(fresh, stopped[1]))
    assert.is_true(fresh:is_cancelled())
    assert.is_true(ran_one:is_expired())
    assert.is_false(ran_one:is_cancelled())
    assert.is_false(ran_one:cancel())
    assert.are.equal(1, timer:stats().cancelled)
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("a to-be-closed timer stops on scope exit", compat.compile([[
    return function()
      local handle, tm_ref
      do
        local timer <close> = manual()
        tm_ref = timer
        handle = timer:timeout(1, function() end)
      end
      assert.is_true(tm_ref:stats().stopped)
      assert.is_true(handle:is_cancelled())
      assert_raises("timer is stopped", tm_ref.timeout, tm_ref, 1, function() end)
    end
    ]], "@stop_spec.lua", { manual = manual, assert_raises = assert_raises }, _ENV))
  end

  it("timeout() and every() on a stopped timer raise 'timer is stopped'", function()
    local tm = manual()
    tm:stop()
    assert_error(call.timeout, pack(tm, 1, noop), "timer is stopped")
    assert_error(call.every, pack(tm, 1, noop), "timer is stopped")
    local rt = hwt.new()
    rt:stop()
    assert_error(rt.timeout, pack(rt, 0, noop), "timer is stopped")
  end)
end)

describe("what stop() hands back", function()
  it("gives each task back (t:task()), to run elsewhere as Netty's stop() is meant for, on every Lua", function()
    local timer = manual()
    local function job(_, n) return n end
    local run_method = { run = function() end }
    local t1 = timer:timeout(5, job, 1)
    local t2 = timer:timeout(6, run_method)
    local ran = timer:every(1, noop)
    assert.are.equal(1, timer:advance(1))
    local list = timer:stop()
    assert.are.equal(2, #list)
    assert.is_true(rawequal(t1, list[1]) and rawequal(t2, list[2]))
    assert.is_true(rawequal(job, t1:task()))
    assert.is_true(rawequal(run_method, t2:task()))
    assert.is_true(t1:is_cancelled() and not t1:is_expired())
    assert_error(t1.reset, pack(t1), "timer is stopped")
    local other = manual()
    local resubmitted = other:timeout(1, t1:task(), 7)
    assert.are.equal(1, other:advance(1))
    assert.is_true(resubmitted:is_expired())
    if support.cdata_timeouts then
      assert.is_nil(ran:task())                -- ended by the stop after it ran: let go of
    else
      assert.is_true(rawequal(noop, ran:task()))
    end
    other:stop()
  end)
end)

describe("timer:stop on the real clock", function()
  it("stop() leaves out a periodic timeout that already ran (it is simply ended)", function()
    local t = hwt.new({ tick = 0.001 })
    local runs = 0
    local p = t:every(0.005, function() runs = runs + 1 end)
    local other = t:timeout(10, noop)
    assert.is_true(t:wait(2))
    assert.equals(1, t:poll())
    assert.equals(1, runs)
    local list = t:stop()
    assert.equals(1, #list)
    assert.is_true(rawequal(other, list[1]))
    assert.is_true(p:is_expired())
    assert.is_false(p:cancel())
    assert.equals(1, runs)
  end)

  it("stop() twice: the second call returns an empty array", function()
    local t = hwt.new()
    t:timeout(1, noop)
    t:timeout(2, noop)
    assert.equals(2, #t:stop())
    local again = t:stop()
    assert.is_table(again)
    assert.equals(0, #again)
    assert.is_nil(next(again))
    assert.equals(0, t:pending())
    local fresh = hwt.new()
    local none = fresh:stop()
    assert.is_table(none)
    assert.equals(0, #none)
  end)
end)

describe("stop() inside a task", function()
  it("inside a task returns the due-but-not-started siblings; they never run", function()
    local timer = manual()
    local log, task = logger()
    local result
    local cancelled_sibling = timer:timeout(1, task, "cancelled")
    timer:timeout(1, task, "before")
    timer:timeout(1, function() result = timer:stop(); log[#log + 1] = "stopper" end)
    local s1 = timer:timeout(1, task, "sibling1")
    local s2 = timer:timeout(1.5, task, "sibling2")
    local later = timer:timeout(3, task, "later")
    assert.is_true(cancelled_sibling:cancel())
    assert.are.equal(2, timer:advance(2))
    assert.are.same({ "before", "stopper" }, log)
    assert.are.equal(3, #result)
    assert.is_true(rawequal(s1, result[1]))
    assert.is_true(rawequal(s2, result[2]))
    assert.is_true(rawequal(later, result[3]))
    for _, t in ipairs(result) do assert.is_true(t:is_cancelled()) end
    assert.are.equal(0, timer:advance(5))
    assert.are.same({ "before", "stopper" }, log)
    assert.are.same({}, timer:stop())
    assert.are.equal(2, timer:stats().fired)
  end)

  it("a periodic that stops its timer from inside is ended, not returned", function()
    local timer = manual()
    local result
    local p
    p = timer:every(1, function() result = timer:stop() end)
    local other = timer:timeout(10, function() end)
    timer:advance(1)
    assert.are.equal(1, #result)
    assert.is_true(rawequal(other, result[1]))
    assert.is_true(p:is_expired())
    assert.is_false(p:is_cancelled())
    assert.are.equal(0, timer:advance(5))
    assert.are.equal(1, timer:stats().fired)
  end)

  it("stop() inside a task returns the due siblings, cancelled; poll() goes on and returns", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local list
    b:timeout(0.01, function() list = b:record_stop(tm:stop()) end)
    local s1 = b:timeout(0.01, noop)
    local s2 = b:timeout(0.01, noop)
    local later = b:timeout(1, noop)
    local p = b:every(0.5, noop)
    assert.are.equal(1, tm:advance(0.01))
    assert.are.same({ s1, s2, p, later }, list)     -- deadline order
    for _, t in ipairs(list) do assert.is_true(t:is_cancelled()) end
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, tm:advance(10))
    b:check()
    assert.are.same({}, tm:stop())
  end)

  it("stop() inside a nested poll: the outer poll ends safely", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local outer_after
    b:timeout(0.01, function()
      tm:poll()
      outer_after = { pending = tm:pending(), ran = tm:poll() }
    end)
    b:timeout(0.01, function() b:record_stop(tm:stop()) end)
    b:timeout(0.01, noop)
    assert.are.equal(1, tm:advance(0.01))
    assert.are.same({ pending = 0, ran = 0 }, outer_after)
    b:check()
  end)

  it("stop() inside a periodic task: that periodic is ended, not returned", function()
    local tm = manual_with_errors()
    local b = books(tm)
    local list, p
    p = b:every(0.01, function() list = b:record_stop(tm:stop()) end)
    local other = b:timeout(1, noop)
    tm:advance(0.01)
    assert.are.same({ other }, list)
    assert.is_true(p:is_expired())
    assert.is_false(p:is_cancelled())
    assert.are.equal("expired", state_of(p))
    tm:advance(1)
    assert.are.equal(1, b:runs_of(p))
    b:check()
  end)

  it("stop() from within on_error returns the siblings; poll() goes on and returns", function()
    local tm, list
    local b
    tm = manual({ on_error = function() list = b:record_stop(tm:stop()) end })
    b = books(tm)
    b:timeout(0.01, function() error("first") end)
    local s = b:timeout(0.01, noop)
    local p = b:every(0.02, noop)
    assert.are.equal(1, tm:advance(0.01))
    assert.are.same({ s, p }, list)
    assert.are.equal(0, tm:pending())
    b:check()
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("a task may close its own timer (<close>) like stop()", compat.compile([[
    return function()
      local tm = manual_with_errors()
      local b = books(tm)
      b:timeout(0.01, function() local closing <close> = tm end)
      local s = b:timeout(0.01, noop)
      tm:advance(0.01)
      assert.is_true(s:is_cancelled())
      assert.is_true(tm:stats().stopped)
      assert.are.equal(0, b:runs_of(s))
    end
    ]], "@stop_spec.lua", { manual_with_errors = manual_with_errors, books = books, noop = noop }, _ENV))
  end

  it("stop() inside a task on the real clock: the worker ends while poll() is running", function()
    local rt = hwt.new({ tick = 0.001, on_error = noop })
    local b = books(rt)
    local list
    b:timeout(0, function() list = b:record_stop(rt:stop()) end)
    b:timeout(0, noop)
    local far = b:timeout(3600, noop)
    local spins = 0
    while rt:pending() > 0 and spins < 1000 do rt:wait(0.01); rt:poll(); spins = spins + 1 end
    assert.is_truthy(list)
    assert.are.equal(far, list[#list])
    assert.are.equal(0, rt:pending())
    assert.is_false(rt:wait(0.01))
    b:check()
  end)

  it("stop() inside a periodic task ends the series", function()
    local t = hwt.new({ tick = 0.001 })
    local runs, result = 0, nil
    local p = t:every(0.005, function(to)
      runs = runs + 1
      result = to:timer():stop()
    end)
    assert.equals(1, t:run())
    assert.equals(1, runs)
    assert.equals(0, #result)
    assert.is_true(p:is_expired())
    assert.is_false(p:cancel())
    assert.equals(0, t:pending())
  end)
end)

describe("stop() while a task is suspended", function()
  it("returns the never-run others; the task, resumed, finishes without error; nothing runs again", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, yielder(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    local c = tm:timeout(2, appender(log, "c"))
    local co, r = start(function() return tm:poll() end)
    local ended
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co))
      ended = tm:stop()
      assert.are.equal(2, #ended)
      assert.is_true(rawequal(b, ended[1]))
      assert.is_true(rawequal(c, ended[2]))
      assert.are.equal(0, tm:pending())
      r = resume(co, "after stop")
      assert.are.same({ true, 1 }, first(r, 2))
      assert.are.same({ "a", "a:after stop" }, log)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, 2 }, first(r, 2))
      assert_yield_errors(errors, 1)
      ended = tm:stop()
      assert.are.equal(1, #ended)
      assert.is_true(rawequal(c, ended[1]))
    end
    for i = 1, #ended do
      assert.is_true(ended[i]:is_cancelled())
      assert.is_false(ended[i]:is_expired())
    end
    assert.is_true(a:is_expired())
    assert.is_false(a:is_cancelled())
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, tm:poll())
    assert.are.equal(0, tm:advance(5))
    assert.is_nil(tm:next_due())
    assert.are.same({}, tm:stop())
  end)

  it("a periodic suspended in its run when the timer stops is not re-armed", function()
    local tm, errors = collecting()
    local runs = 0
    local p = tm:every(1, function()
      runs = runs + 1
      if not in_main() then coroutine.yield() end
    end)
    local co, r = start(function() return tm:advance(1) end)
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co))
      assert.are.same({}, tm:stop())                     -- it ran: not in stop()'s result
      r = resume(co)
      assert.are.equal(0, #errors)
    else
      assert_yield_errors(errors, 1)
      assert.are.same({}, tm:stop())
    end
    assert.are.same({ true, 1 }, first(r, 2))
    assert.are.equal(0, tm:pending())
    assert.is_true(p:is_expired())
    assert.is_false(p:cancel())
    assert.are.equal(0, tm:advance(10))
    assert.are.equal(1, runs)
  end)

  it("stop() called by the task after its yield ends the drain: the rest never run", function()
    local tm, errors = collecting()
    local log, ended = {}, nil
    tm:timeout(0, function()
      log[#log + 1] = "a"
      if not in_main() then coroutine.yield() end
      ended = tm:stop()
    end)
    local b = tm:timeout(0, appender(log, "b"))
    local co, r = start(function() return tm:poll() end)
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co))
      r = resume(co)
      assert.are.same({ true, 1 }, first(r, 2))
      assert.are.same({ "a" }, log)
      assert.are.equal(1, #ended)
      assert.is_true(rawequal(b, ended[1]))
      assert.is_true(b:is_cancelled())
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, 2 }, first(r, 2))
      assert.are.same({ "a", "b" }, log)
      assert_yield_errors(errors, 1)
    end
    assert.are.equal(0, tm:pending())
  end)
end)

describe("stop() at the C stack limit", function()
  it("stop() where the C stack cannot take one more call raises, stopping nothing; retried higher up it tells all", function()
    local tm = manual()
    local gave_up = 0
    local h = hwt.retry(tm, function() return nil, "no" end,
                        { delay = 1, on_give_up = function() gave_up = gave_up + 1 end })
    local co = coroutine.create(function() return tm:sleep(1) end)
    assert(coroutine.resume(co))
    local stopped, refusals = false, {}
    local function nest()               -- pcall in pcall until the C stack ends
      pcall(nest)
      if stopped then return end
      local ok, err = pcall(tm.stop, tm)
      stopped = ok
      if not ok then
        refusals[#refusals + 1] = tostring(err)
        assert.are.equal(2, tm:pending())   -- nothing stopped
      end
    end
    nest()
    assert.is_true(stopped)
    if #refusals > 0 then assert.matches("stack overflow", refusals[1]) end
    assert.are.equal(1, gave_up)
    assert.is_true(h.done)
    assert.are.equal("dead", coroutine.status(co))
  end)
end)
