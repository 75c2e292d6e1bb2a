-- yield_spec.lua: tasks may yield (doc/api.md, "Tasks that yield"): a task
-- run by poll(), advance(), run() or run_for() yields with the draining
-- call, which goes on where it stopped when its coroutine is resumed; the
-- guarantees (order, once, cancel wins, nothing of this call) hold across a
-- yield; two drains of one timer; poll(max, spawn), which hands each task to
-- a function of the caller's; garbage collection while a task is suspended;
-- a yield where the caller cannot yield. Every spec runs on every Lua: on
-- PUC Lua 5.1, where pcall cannot be yielded across, a yield inside a task is
-- that task's error (it goes to on_error and the drain goes on), and the
-- specs check that instead (compat.tasks_yield).
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, YIELDS, noop, manual = compat.pack, compat.tasks_yield, support.noop, support.manual
local collecting, in_main, start = support.collecting, support.in_main, support.start
local resume, first, resume_to_end = support.resume, support.first, support.resume_to_end
local assert_yield_errors, yielder = support.assert_yield_errors, support.yielder
local appender = support.appender

describe("a task may yield: the draining call yields with it", function()
  it("poll() in a coroutine yields with the task and, resumed, continues the same call", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, function(t, x, y)
      log[#log + 1] = "a"
      local got = coroutine.yield("from a", x, y, t)
      log[#log + 1] = "a:" .. tostring(got)
    end, "x", "y")
    tm:timeout(0, appender(log, "b"))
    tm:timeout(0, appender(log, "c"))
    local co, r = start(function() return "polled", tm:poll() end)
    assert.is_true(r[1])
    if not YIELDS then
      assert.are.same({ true, "polled", 3 }, first(r, 3))
      assert.are.same({ "a", "b", "c" }, log)
      assert_yield_errors(errors, 1)
      assert.are.equal(a, errors[1].timeout)
      assert.are.equal(3, tm:stats().fired)
      return
    end
    assert.are.same({ true, "from a", "x", "y" }, first(r, 4))
    assert.is_true(rawequal(a, r[5]))
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.same({ "a" }, log)                      -- b and c wait for the resume
    assert.is_true(a:is_expired())
    local r2 = resume(co, "back")
    assert.are.same({ true, "polled", 3 }, first(r2, 3))
    assert.are.same({ "a", "a:back", "b", "c" }, log)
    assert.are.equal("dead", coroutine.status(co))
    assert.are.equal(0, #errors)
    assert.are.equal(3, tm:stats().fired)
    assert.are.equal(0, tm:pending())
  end)

  it("several tasks that yield several times: poll() runs each once and counts them all", function()
    local tm, errors = collecting()
    local log = {}
    for _, name in ipairs({ "a", "b", "c" }) do
      tm:timeout(0, function()
        for i = 1, 3 do
          log[#log + 1] = name .. i
          if not in_main() then coroutine.yield(name .. i) end
        end
      end)
    end
    local co, r = start(function() return tm:poll() end)
    local yielded, last = resume_to_end(co, r)
    if YIELDS then
      assert.are.same({ "a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3" }, yielded)
      assert.are.same(yielded, log)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ "a1", "b1", "c1" }, log)       -- each stopped at its first yield
      assert_yield_errors(errors, 3)
    end
    assert.are.same({ true, 3 }, first(last, 2))
    assert.are.equal(3, tm:stats().fired)
  end)

  it("advance() in a coroutine yields with each task, in deadline order, the clock already moved", function()
    local tm, errors = collecting()
    local log = {}
    local function task(name)
      return function()
        log[#log + 1] = name .. "@" .. tm:now()
        if not in_main() then coroutine.yield(name) end
      end
    end
    tm:timeout(0.3, task("c"))
    tm:timeout(0.1, task("a"))
    tm:timeout(0.2, task("b"))
    local co, r = start(function() return tm:advance(0.3) end)
    local yielded, last = resume_to_end(co, r)
    if YIELDS then
      assert.are.same({ "a", "b", "c" }, yielded)
      assert.are.equal(0, #errors)
    else
      assert.are.same({}, yielded)
      assert_yield_errors(errors, 3)
    end
    assert.are.same({ "a@0.3", "b@0.3", "c@0.3" }, log)
    assert.are.same({ true, 3 }, first(last, 2))
    assert.are.equal(0, tm:pending())
  end)

  it("run() on the real clock in a coroutine yields with the task and, resumed, runs the rest", function()
    local errors = {}
    local tm = hwt.new({ on_error = function(err) errors[#errors + 1] = { err = err } end })
    local t0 = hwt.now()
    local at = {}
    tm:timeout(0.02, function()
      at.a = hwt.now()
      if not in_main() then coroutine.yield("a") end
      at.a_resumed = hwt.now()
    end)
    local b = tm:timeout(0.05, function() at.b = hwt.now() end)
    local co, r = start(function() return "ran", tm:run() end)
    assert.is_true(at.a - t0 >= 0.02)                   -- never early
    if YIELDS then
      assert.are.same({ true, "a" }, first(r, 2))
      assert.are.equal("suspended", coroutine.status(co))
      assert.is_nil(at.b)
      assert.is_false(b:is_expired())
      assert.are.equal(1, tm:pending())
      local r2 = resume(co)
      assert.are.same({ true, "ran", 2 }, first(r2, 3))
      assert.is_truthy(at.a_resumed)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, "ran", 2 }, first(r, 3))
      assert_yield_errors(errors, 1)
    end
    assert.is_true(at.b - t0 >= 0.05)
    assert.is_true(at.b - t0 < 5)                        -- loose: a loaded machine
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("a task may yield (5.2+, LuaJIT): resuming continues the same run_for(); the clock stays at the task's deadline meanwhile", function()
    local timer = manual()
    local log = {}
    timer:timeout(1, function()
      log[#log + 1] = ("a%g"):format(timer:now())
      coroutine.yield("paused")
      log[#log + 1] = ("a'%g"):format(timer:now())
    end)
    timer:timeout(2, function() log[#log + 1] = ("b%g"):format(timer:now()) end)
    local errors = 0
    if not compat.tasks_yield then
      -- PUC 5.1: the yield is the task's error (on_error); run_for goes on
      local t2 = manual({ on_error = function() errors = errors + 1 end })
      t2:timeout(1, function() coroutine.yield() end)
      local co = coroutine.create(function() return t2:run_for(3) end)
      local ok, n = coroutine.resume(co)
      assert.is_true(ok)
      assert.are.equal(1, n)
      assert.are.equal(1, errors)
      t2:stop()
      timer:stop()
      return
    end
    local co = coroutine.create(function() return timer:run_for(3) end)
    local ok, what = coroutine.resume(co)
    assert.is_true(ok, tostring(what))
    assert.are.equal("paused", what)
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.same({ "a1" }, log)
    assert.are.equal(1, timer:now())
    local ok2, n = coroutine.resume(co)
    assert.is_true(ok2, tostring(n))
    assert.are.equal("dead", coroutine.status(co))
    assert.are.equal(2, n)
    assert.are.same({ "a1", "a'1", "b2" }, log)
    assert.are.equal(3, timer:now())
    timer:stop()
  end)
end)

describe("the guarantees hold across a yield", function()
  it("deadline order, and scheduling order for equal deadlines", function()
    local tm, errors = collecting()
    local log = {}
    tm:timeout(0.2, yielder(log, "d"))
    tm:timeout(0.1, yielder(log, "a"))
    tm:timeout(0.1, yielder(log, "b"))
    tm:timeout(0.3, yielder(log, "e"))
    tm:timeout(0.1, yielder(log, "c"))
    local co, r = start(function() return tm:advance(0.3) end)
    local yielded, last = resume_to_end(co, r)
    assert.are.same({ true, 5 }, first(last, 2))
    if YIELDS then
      assert.are.same({ "a", "b", "c", "d", "e" }, yielded)
      assert.are.same({ "a", "a:r", "b", "b:r", "c", "c:r", "d", "d:r", "e", "e:r" }, log)
    else
      assert.are.same({ "a", "b", "c", "d", "e" }, log)
      assert_yield_errors(errors, 5)
    end
  end)

  it("each timeout runs exactly once, whatever drains run while one is suspended", function()
    local tm, errors = collecting()
    local runs = {}
    local function task(name, yields)
      runs[name] = 0
      return function()
        runs[name] = runs[name] + 1
        for _ = 1, yields do
          if not in_main() then coroutine.yield(name) end
        end
      end
    end
    tm:timeout(0.1, task("a", 2))
    tm:timeout(0.1, task("b", 1))
    tm:timeout(0.1, task("c", 0))
    local p = tm:every(0.1, task("p", 1))
    local co, r = start(function() return tm:advance(0.1) end)
    local polls = 0
    while coroutine.status(co) == "suspended" do
      polls = polls + tm:poll() + tm:advance(0)         -- from the main thread: no yields there
      r = resume(co)
    end
    assert.is_true(r[1])
    if YIELDS then
      assert.are.equal(1, r[2])                         -- a alone: the main thread ran the rest
      assert.are.equal(3, polls)
      assert.are.equal(0, #errors)
    else
      assert.are.equal(4, r[2])
      assert.are.equal(0, polls)
      assert_yield_errors(errors, 3)
    end
    assert.are.same({ a = 1, b = 1, c = 1, p = 1 }, runs)
    assert.are.equal(0, tm:poll())
    assert.are.equal(0, tm:advance(0.05))
    assert.are.same({ a = 1, b = 1, c = 1, p = 1 }, runs)
    assert.are.equal(1, tm:pending())                   -- p, re-armed once
    assert.are.equal(0.05, p:remaining())               -- the next beat, at 0.2
  end)

  it("cancel wins: a due timeout cancelled while an earlier task is suspended never runs", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, yielder(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    tm:timeout(0, appender(log, "c"))
    local co, r = start(function() return tm:poll() end)
    if not YIELDS then
      assert.are.same({ true, 3 }, first(r, 2))
      assert.are.same({ "a", "b", "c" }, log)
      assert_yield_errors(errors, 1)
      assert.is_false(b:cancel())                       -- it ran: too late
      return
    end
    assert.are.equal("suspended", coroutine.status(co))
    assert.is_true(b:cancel())
    assert.is_true(b:is_cancelled())
    assert.is_false(a:cancel())                         -- running: not cancellable
    assert.are.equal(1, tm:pending())                   -- c
    r = resume(co, "x")
    assert.are.same({ true, 2 }, first(r, 2))
    assert.are.same({ "a", "a:x", "c" }, log)
    assert.is_false(b:is_expired())
    assert.are.equal(0, tm:poll())
    assert.are.equal(0, tm:advance(10))
    assert.are.same({ "a", "a:x", "c" }, log)
    assert.are.equal(1, tm:stats().cancelled)
    assert.are.equal(0, #errors)
  end)

  it("cancelling a periodic while its task is suspended ends the series", function()
    local tm, errors = collecting()
    local runs = 0
    local p = tm:every(1, function()
      runs = runs + 1
      if not in_main() then coroutine.yield() end
    end)
    local co, r = start(function() return tm:advance(1) end)
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co))
      assert.are.equal(1, tm:pending())                 -- counted during its own run
      assert.is_true(p:cancel())
      assert.are.equal(0, tm:pending())
      r = resume(co)
    else
      assert_yield_errors(errors, 1)
      assert.is_true(p:cancel())
    end
    assert.are.same({ true, 1 }, first(r, 2))
    assert.are.equal(0, tm:pending())
    assert.is_true(p:is_cancelled())
    assert.are.equal(0, tm:advance(5))
    assert.are.equal(1, runs)
  end)

  for _, drain in ipairs({ "poll", "advance" }) do
    it(("not in the same call: what is scheduled during a suspended %s() waits for the next call"):format(drain), function()
      local tm, errors = collecting()
      local log = {}
      local n1, n2, m
      tm:timeout(0, function()
        log[#log + 1] = "a"
        n1 = tm:timeout(0, appender(log, "n1"))         -- before the yield
        if not in_main() then coroutine.yield("a") end
        n2 = tm:timeout(0, appender(log, "n2"))         -- after it
      end)
      tm:timeout(0, yielder(log, "b"))
      local co, r = start(function()
        if drain == "poll" then return tm:poll() end
        return tm:advance(0)
      end)
      if YIELDS then
        assert.are.equal("suspended", coroutine.status(co))
        m = tm:timeout(0, appender(log, "m"))           -- by the main thread, meanwhile
        local yielded
        yielded, r = resume_to_end(co, r)
        assert.are.equal(2, #yielded)                   -- a's, then b's
        assert.are.same({ true, 2 }, first(r, 2))
        assert.are.same({ "a", "b", "b:r" }, log)
        assert.is_false(n1:is_expired())
        assert.is_false(n2:is_expired())
        assert.is_false(m:is_expired())
        assert.are.equal(0, tm:next_due())
        assert.are.equal(3, tm:poll())
        assert.are.same({ "a", "b", "b:r", "n1", "m", "n2" }, log)
        assert.are.equal(0, #errors)
      else
        assert.are.same({ true, 2 }, first(r, 2))
        assert.are.same({ "a", "b" }, log)
        assert_yield_errors(errors, 2)
        assert.is_nil(n2)                               -- a stopped at its yield
        assert.is_false(n1:is_expired())
        assert.are.equal(1, tm:poll())
        assert.are.same({ "a", "b", "n1" }, log)
      end
      assert.are.equal(0, tm:pending())
    end)
  end

  it("a periodic task that yields is re-armed once, after it finishes; pending() counts it throughout", function()
    local tm, errors = collecting()
    local runs = 0
    local p = tm:every(1, function()
      runs = runs + 1
      if not in_main() then coroutine.yield() end
    end)
    assert.are.equal(1, tm:pending())
    local co, r = start(function() return tm:advance(1) end)
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co))
      assert.are.equal(1, tm:pending())
      assert.are.equal(0, tm:advance(1.5))              -- clock 2.5: p runs still, it is not armed
      assert.are.equal(1, runs)
      assert.are.equal(1, tm:pending())
      r = resume(co)
      assert.are.same({ true, 1 }, first(r, 2))
      assert.are.equal(1, tm:pending())
      -- the first beat strictly after the clock when the run ended (2.5): 3
      assert.are.equal(0.5, p:remaining())
      assert.are.equal(0, tm:advance(0.25))
      assert.are.equal(1, tm:advance(0.25))
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, 1 }, first(r, 2))
      assert_yield_errors(errors, 1)
      assert.are.equal(1, tm:pending())
      assert.are.equal(1, p:remaining())
      assert.are.equal(1, tm:advance(1))
    end
    assert.are.equal(2, runs)
    assert.are.equal(1, tm:pending())
    assert.are.equal(1, p:remaining())
    assert.are.equal(0, tm:advance(0.5))
    assert.are.equal(2, runs)
  end)

  it("a task that raises after its yield: on_error gets the error and its Timeout; the drain goes on", function()
    local tm, errors = collecting()
    local log = {}
    local oops = {}
    local a = tm:timeout(0, function()
      log[#log + 1] = "a"
      if not in_main() then coroutine.yield() end
      error(oops)
    end)
    tm:timeout(0, appender(log, "b"))
    local co, r = start(function() return tm:poll() end)
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co))
      assert.are.equal(0, #errors)
      r = resume(co)
      assert.are.equal(1, #errors)
      assert.is_true(rawequal(oops, errors[1].err))
    else
      assert_yield_errors(errors, 1)
    end
    assert.is_true(rawequal(a, errors[1].timeout))
    assert.are.same({ true, 2 }, first(r, 2))
    assert.are.same({ "a", "b" }, log)
    assert.are.equal(2, tm:stats().fired)
  end)

  it("a TimerTask's run method may yield", function()
    local tm, errors = collecting()
    local task = { log = {} }
    function task:run(t, x)
      self.log[#self.log + 1] = x
      local got = coroutine.yield(t)
      self.log[#self.log + 1] = got
    end
    local t = tm:timeout(0, task, "x")
    local co, r = start(function() return tm:poll() end)
    if YIELDS then
      assert.is_true(rawequal(t, r[2]))
      r = resume(co, "y")
      assert.are.same({ "x", "y" }, task.log)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ "x" }, task.log)
      assert_yield_errors(errors, 1)
    end
    assert.are.same({ true, 1 }, first(r, 2))
  end)

  it("poll(max) counts across yields: it stops after max tasks, the rest wait", function()
    local tm, errors = collecting()
    local log = {}
    for _, name in ipairs({ "a", "b", "c" }) do tm:timeout(0, yielder(log, name)) end
    local co, r = start(function() return tm:poll(2) end)
    local yielded
    yielded, r = resume_to_end(co, r)
    assert.are.same({ true, 2 }, first(r, 2))
    if YIELDS then
      assert.are.same({ "a", "b" }, yielded)
      assert.are.same({ "a", "a:r", "b", "b:r" }, log)
    else
      assert.are.same({ "a", "b" }, log)
      assert_yield_errors(errors, 2)
    end
    assert.are.equal(1, tm:pending())
    assert.are.equal(1, tm:poll())                       -- c, from the main thread
    assert.are.equal(0, tm:pending())
  end)

  it("while a one-shot is suspended: is_expired() is true, cancel() false, pending() excludes it", function()
    local tm, errors = collecting()
    local seen
    local a
    a = tm:timeout(0, function()
      if in_main() then return end
      coroutine.yield()
      seen = { a:is_expired(), a:cancel(), a:is_cancelled(), tm:pending() }
    end)
    tm:timeout(1, noop)
    local co = start(function() return tm:poll() end)
    if YIELDS then
      assert.is_true(a:is_expired())
      assert.is_false(a:cancel())
      assert.is_false(a:is_cancelled())
      assert.are.equal(1, tm:pending())
      assert.are.equal(1, tm:stats().fired)
      resume(co)
      assert.are.same({ true, false, false, 1 }, seen)
      assert.are.equal(0, #errors)
    else
      assert_yield_errors(errors, 1)
    end
    assert.are.equal("dead", coroutine.status(co))
    assert.are.equal(0, a:remaining())
    assert.are.equal(1, tm:pending())
  end)
end)

describe("two drains of one timer", function()
  it("while one is suspended another runs the other due tasks; resumed, the first does not run them again", function()
    local tm, errors = collecting()
    local log, runs = {}, {}
    local function counted(task, name)
      runs[name] = 0
      return function(...) runs[name] = runs[name] + 1; return task(...) end
    end
    tm:timeout(0, counted(yielder(log, "a"), "a"))
    tm:timeout(0, counted(yielder(log, "b"), "b"))
    tm:timeout(0, counted(appender(log, "c"), "c"))
    tm:timeout(0, counted(appender(log, "d"), "d"))
    local co1, r1 = start(function() return tm:poll() end)
    local co2, r2 = start(function() return tm:poll() end)
    local main = tm:poll()
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co1))
      assert.are.equal("suspended", coroutine.status(co2))
      assert.are.equal(2, main)                         -- c and d
      assert.are.same({ "a", "b", "c", "d" }, log)
      r2 = resume(co2, 2)
      r1 = resume(co1, 1)
      assert.are.same({ true, 1 }, first(r1, 2))
      assert.are.same({ true, 1 }, first(r2, 2))
      assert.are.same({ "a", "b", "c", "d", "b:2", "a:1" }, log)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, 4 }, first(r1, 2))
      assert.are.same({ true, 0 }, first(r2, 2))
      assert.are.equal(0, main)
      assert.are.same({ "a", "b", "c", "d" }, log)
      assert_yield_errors(errors, 2)
    end
    assert.are.same({ a = 1, b = 1, c = 1, d = 1 }, runs)
    assert.are.equal(4, tm:stats().fired)
    assert.are.equal(0, tm:poll())
  end)

  it("another coroutine's advance() runs later deadlines in order while an earlier task is suspended", function()
    local tm, errors = collecting()
    local log = {}
    tm:timeout(0.1, yielder(log, "a"))
    tm:timeout(0.3, appender(log, "c"))
    tm:timeout(0.2, appender(log, "b"))
    local co1, r1 = start(function() return tm:advance(0.1) end)
    local co2, r2 = start(function() return tm:advance(0.2) end)
    if YIELDS then
      assert.are.equal("suspended", coroutine.status(co1))
      assert.are.same({ true, 2 }, first(r2, 2))        -- b, then c, at 0.3
      assert.are.same({ "a", "b", "c" }, log)
      r1 = resume(co1, "late")
      assert.are.same({ true, 1 }, first(r1, 2))
      assert.are.same({ "a", "b", "c", "a:late" }, log)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, 1 }, first(r1, 2))
      assert.are.same({ true, 2 }, first(r2, 2))
      assert.are.same({ "a", "b", "c" }, log)
      assert_yield_errors(errors, 1)
    end
    assert.is_nil(tm:next_due())
    assert.are.equal(0, tm:pending())
  end)

  it("poll() inside a task: a yield of the inner task goes out through both; the outer runs nothing twice", function()
    local tm, errors = collecting()
    local log, runs = {}, { a = 0, b = 0, c = 0 }
    tm:timeout(0, function()
      runs.a = runs.a + 1
      log[#log + 1] = "a"
      local inner = tm:poll()
      log[#log + 1] = "inner " .. inner
    end)
    tm:timeout(0, function()
      runs.b = runs.b + 1
      log[#log + 1] = "b"
      if not in_main() then log[#log + 1] = "b:" .. tostring(coroutine.yield("b")) end
    end)
    tm:timeout(0, function() runs.c = runs.c + 1; log[#log + 1] = "c" end)
    local co, r = start(function() return tm:poll() end)
    if YIELDS then
      assert.are.same({ true, "b" }, first(r, 2))
      assert.are.same({ "a", "b" }, log)
      r = resume(co, "x")
      assert.are.same({ "a", "b", "b:x", "c", "inner 2" }, log)
      assert.are.equal(0, #errors)
    else
      assert.are.same({ "a", "b", "c", "inner 2" }, log)
      assert_yield_errors(errors, 1)
    end
    assert.are.same({ true, 1 }, first(r, 2))            -- the outer ran a alone
    assert.are.same({ a = 1, b = 1, c = 1 }, runs)
  end)

  it("a suspended drain resumed by a task of another drain goes on there; each timeout still runs once", function()
    local tm, errors = collecting()
    local log, runs = {}, {}
    local co1
    local function counted(name, task)
      runs[name] = 0
      return function(...) runs[name] = runs[name] + 1; return task(...) end
    end
    tm:timeout(0, counted("a", yielder(log, "a")))
    tm:timeout(0, counted("b", function()
      log[#log + 1] = "b"
      if co1 and coroutine.status(co1) == "suspended" then
        log[#log + 1] = "b resumes co1"
        assert(coroutine.resume(co1, "from b"))
      end
    end))
    tm:timeout(0, counted("c", appender(log, "c")))
    tm:timeout(0, counted("d", appender(log, "d")))
    local r1
    co1, r1 = start(function() return tm:poll() end)
    local main = tm:poll()
    if YIELDS then
      -- main ran b, whose resume let co1 finish a and run c and d; main then found nothing
      assert.are.same({ "a", "b", "b resumes co1", "a:from b", "c", "d" }, log)
      assert.are.equal(1, main)
      assert.are.equal("dead", coroutine.status(co1))
      assert.are.equal(0, #errors)
    else
      assert.are.same({ "a", "b", "c", "d" }, log)
      assert.are.same({ true, 4 }, first(r1, 2))
      assert.are.equal(0, main)
      assert_yield_errors(errors, 1)
    end
    assert.are.same({ a = 1, b = 1, c = 1, d = 1 }, runs)
    assert.are.equal(4, tm:stats().fired)
  end)
end)

describe("poll(max, spawn)", function()
  local function wrap_spawn(f) coroutine.wrap(f)() end

  -- A spawn that keeps each fn to be run later, in fns.
  local function deferred()
    local fns = {}
    return fns, function(f) fns[#fns + 1] = f end
  end

  it("spawn = coroutine.wrap starts every due task even when the first ones wait", function()
    local tm, errors = collecting()
    local log, waiting = {}, {}
    local function waiter(name)
      return function()
        log[#log + 1] = name
        waiting[#waiting + 1] = coroutine.running()
        local got = coroutine.yield()
        log[#log + 1] = name .. ":" .. tostring(got)
      end
    end
    local a = tm:timeout(0, waiter("a"))
    local b = tm:timeout(0, waiter("b"))
    tm:timeout(0, appender(log, "c"))
    assert.are.equal(3, tm:poll(nil, wrap_spawn))       -- from the main thread
    assert.are.same({ "a", "b", "c" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(3, tm:stats().fired)
    if not YIELDS then
      assert_yield_errors(errors, 2)
      assert.are.equal(a, errors[1].timeout)
      assert.are.equal(b, errors[2].timeout)
      return
    end
    assert.are.equal(2, #waiting)
    assert.is_true(coroutine.resume(waiting[2], "B"))
    assert.is_true(coroutine.resume(waiting[1], "A"))
    assert.are.same({ "a", "b", "c", "b:B", "a:A" }, log)
    assert.are.equal("dead", coroutine.status(waiting[1]))
    assert.are.equal(0, #errors)
    assert.is_true(a:is_expired() and b:is_expired())
  end)

  it("each task gets its Timeout and extra arguments; TimerTask tables and callables work", function()
    local tm, errors = collecting()
    local seen = {}
    local f = tm:timeout(0, function(t, ...) seen.f = { t, pack(...) } end, "x", nil, 3)
    local task_table = {}
    function task_table:run(t, ...) seen.run = { self, t, pack(...) } end
    local r = tm:timeout(0, task_table, "y")
    local callable = setmetatable({}, { __call = function(self, t, ...) seen.call = { self, t, pack(...) } end })
    local c = tm:timeout(0, callable, "z", false)
    assert.are.equal(3, tm:poll(nil, wrap_spawn))
    assert.is_true(rawequal(f, seen.f[1]))
    assert.are.equal(3, seen.f[2].n)
    assert.are.same({ "x", nil, 3 }, { seen.f[2][1], seen.f[2][2], seen.f[2][3] })
    assert.is_true(rawequal(task_table, seen.run[1]))
    assert.is_true(rawequal(r, seen.run[2]))
    assert.are.same({ n = 1, "y" }, seen.run[3])
    assert.is_true(rawequal(callable, seen.call[1]))
    assert.is_true(rawequal(c, seen.call[2]))
    assert.are.same({ n = 2, "z", false }, seen.call[3])
    assert.are.equal(0, #errors)
  end)

  it("a periodic handed to spawn is re-armed after fn runs it; it gets its Timeout and arguments", function()
    local errors = {}
    local tm = hwt.new({ on_error = function(err) errors[#errors + 1] = err end })
    local fns, spawn = deferred()
    local calls = {}
    local p = tm:every(0.02, function(t, x) calls[#calls + 1] = { t, x } end, "arg")
    support.sleep(0.05)
    assert.are.equal(1, tm:poll(nil, spawn))
    assert.are.equal(1, tm:pending())
    assert.are.equal(0, #calls)
    fns[1]()
    assert.are.equal(1, #calls)
    assert.is_true(rawequal(p, calls[1][1]))
    assert.are.equal("arg", calls[1][2])
    assert.are.equal(1, tm:pending())
    local left = p:remaining()
    assert.is_true(left >= 0 and left <= 0.02 + 0.01 + 1e-9, tostring(left))  -- 0 if late
    support.sleep(0.05)
    assert.are.equal(1, tm:poll(nil, spawn))             -- due again
    fns[2]()
    assert.are.equal(2, #calls)
    assert.are.equal(1, tm:pending())
    assert.are.equal(0, #errors)
    tm:stop()
  end)

  it("an erroring task goes to on_error with its Timeout, the value unchanged; the others still start", function()
    local tm, errors = collecting()
    local log = {}
    local boom = {}
    local a = tm:timeout(0, function() error(boom) end)
    tm:timeout(0, appender(log, "b"))
    assert.are.equal(2, tm:poll(nil, wrap_spawn))
    assert.are.same({ "b" }, log)
    assert.are.equal(1, #errors)
    assert.is_true(rawequal(boom, errors[1].err))
    assert.is_true(rawequal(a, errors[1].timeout))
    assert.are.equal(2, tm:stats().fired)
  end)

  it("with a deferred spawn, pending() counts a handed timeout until fn starts it, once", function()
    local tm, errors = collecting()
    local log = {}
    local fns, spawn = deferred()
    local a = tm:timeout(0, appender(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    assert.are.equal(2, tm:poll(nil, spawn))
    assert.are.equal(2, #fns)
    assert.are.equal(2, tm:pending())
    assert.are.equal(0, tm:stats().fired)
    assert.is_false(a:is_expired())
    assert.are.equal(0, tm:poll())                       -- handed: no other drain takes them
    assert.are.equal(0, tm:poll(nil, spawn))
    assert.are.equal(2, #fns)
    assert.are.same({}, log)
    fns[2]()
    assert.are.same({ "b" }, log)
    assert.are.equal(1, tm:pending())
    assert.is_true(b:is_expired())
    assert.is_false(a:is_expired())
    fns[1]()
    fns[1]()                                             -- a second call does nothing
    fns[2]()
    assert.are.same({ "b", "a" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(2, tm:stats().fired)
    assert.is_false(a:cancel())
    assert.are.equal(0, #errors)
  end)

  it("cancel() between spawn and start returns true and wins: fn does nothing", function()
    local tm, errors = collecting()
    local log = {}
    local fns, spawn = deferred()
    local a = tm:timeout(0, appender(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    assert.are.equal(2, tm:poll(nil, spawn))
    assert.is_true(a:cancel())
    assert.is_false(a:cancel())
    assert.is_true(a:is_cancelled())
    assert.are.equal(1, tm:pending())
    fns[1]()
    fns[2]()
    assert.are.same({ "b" }, log)
    assert.is_false(a:is_expired())
    assert.is_true(b:is_expired())
    assert.are.equal(0, tm:pending())
    assert.are.equal(1, tm:stats().fired)
    assert.are.equal(1, tm:stats().cancelled)
    assert.are.equal(0, tm:advance(1))
    assert.are.same({ "b" }, log)
    assert.are.equal(0, #errors)
  end)

  it("a task started through spawn may cancel a sibling not yet handed; it is never handed", function()
    local tm = collecting()
    local log = {}
    local c
    tm:timeout(0, function() log[#log + 1] = "a"; assert(c:cancel()) end)
    tm:timeout(0, appender(log, "b"))
    c = tm:timeout(0, appender(log, "c"))
    assert.are.equal(2, tm:poll(nil, wrap_spawn))
    assert.are.same({ "a", "b" }, log)
    assert.are.equal(0, tm:pending())
  end)

  it("stop() between spawn and start returns the handed timeouts, cancelled; fn then does nothing", function()
    local tm, errors = collecting()
    local log = {}
    local fns, spawn = deferred()
    local a = tm:timeout(0, appender(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    local c = tm:timeout(5, appender(log, "c"))
    assert.are.equal(2, tm:poll(nil, spawn))
    local ended = tm:stop()
    assert.are.equal(3, #ended)
    assert.is_true(rawequal(a, ended[1]))
    assert.is_true(rawequal(b, ended[2]))
    assert.is_true(rawequal(c, ended[3]))
    for i = 1, 3 do assert.is_true(ended[i]:is_cancelled()) end
    fns[1]()
    fns[2]()
    assert.are.same({}, log)
    assert.is_false(a:is_expired())
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, tm:stats().fired)
    assert.are.equal(0, #errors)
  end)

  it("a spawn that raises: poll re-raises, the timeout stays pending and runs at a later poll, in order", function()
    local tm, errors = collecting()
    local log = {}
    local oops = {}
    local a = tm:timeout(0, appender(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    local c = tm:timeout(0, appender(log, "c"))
    local calls = 0
    local function spawn(f)
      calls = calls + 1
      if calls == 2 then error(oops) end
      f()
    end
    local ok, err = pcall(tm.poll, tm, nil, spawn)
    assert.is_false(ok)
    assert.is_true(rawequal(oops, err))
    assert.are.same({ "a" }, log)
    assert.is_true(a:is_expired())
    assert.is_false(b:is_expired())
    assert.is_false(b:is_cancelled())
    assert.are.equal(2, tm:pending())
    assert.are.equal(0, tm:next_due())
    assert.are.equal(2, tm:poll())                       -- b before c: scheduling order kept
    assert.are.same({ "a", "b", "c" }, log)
    assert.is_true(c:is_expired())
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, #errors)
  end)

  it("a spawn that drops fn: once fn is collected, the timeout runs at a later poll, in order", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, appender(log, "a"))
    tm:timeout(0, appender(log, "b"))
    assert.are.equal(2, tm:poll(nil, function() end))
    assert.are.equal(2, tm:pending())
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(2, tm:pending())
    assert.is_false(a:is_expired())
    assert.are.equal(2, tm:poll())
    assert.are.same({ "a", "b" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, #errors)
  end)

  it("max limits how many are handed; poll(0, spawn) hands none", function()
    local tm = collecting()
    local log = {}
    local handed = 0
    local function spawn(f) handed = handed + 1; f() end
    for _, name in ipairs({ "a", "b", "c" }) do tm:timeout(0, appender(log, name)) end
    assert.are.equal(0, tm:poll(0, spawn))
    assert.are.equal(0, handed)
    assert.are.equal(2, tm:poll(2, spawn))
    assert.are.equal(2, handed)
    assert.are.same({ "a", "b" }, log)
    assert.are.equal(1, tm:pending())
    assert.are.equal(1, tm:poll(5, spawn))
    assert.are.same({ "a", "b", "c" }, log)
    assert.are.equal(3, handed)
  end)

  it("a task started through spawn does not get what it schedules handed in the same poll", function()
    local tm = collecting()
    local log = {}
    local n
    tm:timeout(0, function() log[#log + 1] = "a"; n = tm:timeout(0, appender(log, "n")) end)
    assert.are.equal(1, tm:poll(nil, wrap_spawn))
    assert.is_false(n:is_expired())
    assert.are.equal(1, tm:poll(nil, wrap_spawn))
    assert.are.same({ "a", "n" }, log)
  end)

  it("tasks that sleep in coroutines of their own (spawn) do not hold up the others; each wakes on time", function()
    local tm, errors = collecting()
    local log = {}
    local function sleeper(name, seconds)
      return function()
        log[#log + 1] = name
        local ok = tm:sleep(seconds)
        log[#log + 1] = ("%s woke %s at %g"):format(name, tostring(ok), tm:now())
      end
    end
    tm:timeout(0, sleeper("a", 2))
    tm:timeout(0, sleeper("b", 1))
    tm:timeout(0, appender(log, "c"))
    assert.are.equal(3, tm:poll(nil, wrap_spawn))
    assert.are.same({ "a", "b", "c" }, log)
    if not YIELDS then
      assert_yield_errors(errors, 2)                    -- "sleep() cannot yield here"
      assert.are.equal(0, tm:pending())
      return
    end
    assert.are.equal(2, tm:pending())
    assert.are.equal(1, tm:advance(1))
    assert.are.equal(1, tm:advance(1))
    assert.are.same({ "a", "b", "c", "b woke true at 1", "a woke true at 2" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, #errors)
  end)

  it("a spawn that waits (yields) before calling fn holds its hand-off: others run the rest, cancel wins", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, appender(log, "a"))
    tm:timeout(0, appender(log, "b"))
    tm:timeout(0, appender(log, "c"))
    local co, r = start(function()
      return "polled", tm:poll(nil, function(f) coroutine.yield("waiting for a slot"); f() end)
    end)
    if not YIELDS then
      -- PUC 5.1: the yield is spawn's error: poll re-raises it, a goes back to the due list
      assert.is_false(r[1])
      assert.matches("yield", tostring(r[2]), 1, true)
      assert.are.equal(3, tm:pending())
      assert.are.equal(3, tm:poll())
      assert.are.same({ "a", "b", "c" }, log)
      assert.are.equal(0, #errors)
      return
    end
    assert.are.same({ true, "waiting for a slot" }, first(r, 2))
    assert.are.equal(3, tm:pending())                    -- a, handed, counts
    assert.are.equal(2, tm:poll())                       -- the main thread runs b and c
    assert.is_true(a:cancel())                           -- a has not started: cancel wins
    r = resume(co)
    assert.are.same({ true, "polled", 1 }, first(r, 3))  -- it handed one (whose fn then did nothing)
    assert.are.same({ "b", "c" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, #errors)
  end)

  it("a hand-off's fn called again from inside the run it started does nothing: no early re-arm", function()
    local tm, errors = collecting()
    local fn_of_p
    local depth, max_depth, runs, inner = 0, 0, 0, nil
    -- at 1, before p: hands p to a spawn that keeps fn and runs it
    tm:timeout(1, function() tm:poll(nil, function(f) fn_of_p = f; f() end) end)
    local p = tm:every(1, function()
      runs = runs + 1
      depth = depth + 1
      if depth > max_depth then max_depth = depth end
      if runs == 1 then
        fn_of_p()                                       -- again: the task has started already
        inner = tm:advance(1)                           -- clock 2: p still runs, so it is not due
      end
      depth = depth - 1
    end)
    assert.are.equal(1, tm:advance(1))
    assert.are.equal(1, runs)
    assert.are.equal(1, max_depth)
    assert.are.equal(0, inner)
    assert.are.equal(1, tm:pending())
    assert.are.equal(1, p:remaining())                 -- re-armed after the run: the beat at 3
    assert.are.equal(0, #errors)
  end)

  it("a bad spawn argument raises \"bad argument #2 to 'poll'\"; a callable table is a spawn", function()
    local tm = collecting()
    tm:timeout(0, noop)
    for _, bad in ipairs({ 42, "spawn", {}, true }) do
      local ok, err = pcall(function() return tm:poll(nil, bad) end)
      assert.is_false(ok)
      assert.matches("bad argument #2 to 'poll'", tostring(err), 1, true)
    end
    assert.are.equal(1, tm:pending())                    -- nothing taken by the refusals
    local spawned = 0
    local spawner = setmetatable({}, { __call = function(_, f) spawned = spawned + 1; f() end })
    assert.are.equal(1, tm:poll(nil, spawner))
    assert.are.equal(1, spawned)
  end)
end)

describe("garbage collection while a task is suspended", function()
  -- Starts drain(timer) in a coroutine and returns its status: the coroutine
  -- itself is left in no variable and no stack slot of the caller.
  local function suspend_in(drain, timer)
    local co = coroutine.create(drain)
    assert(coroutine.resume(co, timer))
    return coroutine.status(co)
  end

  local function full_gc()
    collectgarbage("collect")
    collectgarbage("collect")
    collectgarbage("collect")
  end

  it("dropping the suspended coroutines and the timer is safe", function()
    local finalized = false
    local weak = setmetatable({}, { __mode = "v" })
    local function scenario()
      local tm = support.manual({ on_error = noop })
      weak[1] = tm
      local sentinel = compat.gc_object(function() finalized = true end)
      local function waits() if not in_main() then coroutine.yield() end end
      tm:timeout(0, waits, sentinel)
      tm:timeout(0, waits)
      tm:timeout(0, waits)
      tm:every(1, waits)
      tm:timeout(5, noop)
      local held = {}
      return {
        suspend_in(function(t) return t:poll(1) end, tm),
        suspend_in(function(t) return t:poll(1, function(f) held[#held + 1] = f end) end, tm),
        suspend_in(function(t) return t:poll(1, function(f) coroutine.wrap(f)() end) end, tm),
        suspend_in(function(t) return t:advance(1) end, tm),
      }
    end
    local statuses = scenario()
    if YIELDS then
      assert.are.same({ "suspended", "dead", "dead", "suspended" }, statuses)
    else
      assert.are.same({ "dead", "dead", "dead", "dead" }, statuses)
    end
    full_gc()
    assert.is_nil(weak[1])                               -- the timer was collected
    assert.is_true(finalized)                            -- and the timeouts with it
    local tm = support.manual()                          -- timers still work
    local ran = false
    tm:timeout(1, function() ran = true end)
    assert.are.equal(1, tm:advance(1))
    assert.is_true(ran)
  end)

  it("hand-offs that outlive their timer do nothing when called", function()
    local log, fns = {}, {}
    local weak = setmetatable({}, { __mode = "v" })
    local function scenario()
      local tm = support.manual()
      weak[1] = tm
      tm:timeout(0, appender(log, "a"))
      tm:timeout(0, appender(log, "b"))
      return tm:poll(nil, function(f) fns[#fns + 1] = f end)
    end
    assert.are.equal(2, scenario())
    full_gc()
    assert.is_nil(weak[1])
    for _, f in ipairs(fns) do f() end
    assert.are.same({}, log)
  end)

  it("a periodic whose drain coroutine is dropped mid-run is re-armed by the collection and fires again", function()
    local tm, errors = collecting()
    local runs, resumed = 0, 0
    local p = tm:every(1, function()
      runs = runs + 1
      if in_main() then return end
      coroutine.yield()
      resumed = resumed + 1
    end)
    local status = suspend_in(function(t) return t:advance(1) end, tm)
    assert.are.equal(1, runs)
    assert.are.equal(1, tm:pending())
    if YIELDS then
      assert.are.equal("suspended", status)
      full_gc()
      assert.are.equal(0, #errors)
    else
      assert.are.equal("dead", status)
      assert_yield_errors(errors, 1)
    end
    assert.are.equal(1, tm:pending())
    assert.are.equal(1, p:remaining())                 -- the next beat, at 2
    assert.are.equal(1, tm:advance(1))                 -- from the main thread
    assert.are.equal(2, runs)
    assert.are.equal(0, resumed)
    assert.are.equal(1, tm:pending())
  end)

  it("a periodic started through spawn whose coroutine is dropped mid-run is re-armed by the collection", function()
    local errors = {}
    local tm = hwt.new({ on_error = function(err) errors[#errors + 1] = { err = err } end })
    local runs = 0
    local p = tm:every(0.02, function()
      runs = runs + 1
      if runs == 1 then coroutine.yield() end
    end)
    support.sleep(0.03)
    assert.are.equal(1, tm:poll(nil, function(f) coroutine.wrap(f)() end))
    assert.are.equal(1, runs)
    assert.are.equal(1, tm:pending())
    if YIELDS then
      full_gc()
      assert.are.equal(0, #errors)
    else
      assert_yield_errors(errors, 1)
    end
    local left = p:remaining()
    assert.is_true(left >= 0 and left <= 0.03 + 1e-9, tostring(left))  -- 0 if late
    support.sleep(0.05)
    assert.are.equal(1, tm:poll(nil, function(f) coroutine.wrap(f)() end))
    assert.are.equal(2, runs)
    tm:stop()
  end)

  it("a timer collected while tasks started through spawn are suspended: resumed, they finish cleanly", function()
    local weak = setmetatable({}, { __mode = "v" })
    local waiting, log = {}, {}
    local function scenario()
      local tm = hwt.new({ on_error = function(err) log[#log + 1] = "error: " .. tostring(err) end })
      weak[1] = tm
      local function task(t, name)                      -- holds no reference to tm
        log[#log + 1] = name
        waiting[#waiting + 1] = coroutine.running()
        coroutine.yield()
        log[#log + 1] = name .. " resumed " .. tostring(t:is_expired())
      end
      tm:timeout(0, task, "a")
      tm:every(0.01, task, "p")
      support.sleep(0.03)
      return tm:poll(nil, function(f) coroutine.wrap(f)() end)
    end
    assert.are.equal(2, scenario())
    full_gc()
    assert.is_nil(weak[1])
    if not YIELDS then
      assert.are.equal(4, #log)                         -- each: its name, then the yield's error
      assert.matches("yield", log[2], 1, true)
      return
    end
    assert.are.same({ "a", "p" }, log)
    for _, co in ipairs(waiting) do assert.is_true((coroutine.resume(co))) end
    assert.are.same({ "a", "p", "a resumed true", "p resumed true" }, log)
    waiting = nil
    full_gc()
  end)

  it("a drain coroutine closed (coroutine.close, where there is one) or dropped: re-armed once collected", function()
    local tm, errors = collecting()
    local runs, resumed = 0, 0
    local p = tm:every(1, function()
      runs = runs + 1
      if in_main() then return end
      coroutine.yield()
      resumed = resumed + 1
    end)
    local b = tm:timeout(1, noop)
    local function run_and_close()
      local co = coroutine.create(function() return tm:advance(1) end)
      assert(coroutine.resume(co))
      local status = coroutine.status(co)
      if coroutine.close then assert(coroutine.close(co)) end
      return status
    end
    local status = run_and_close()
    assert.are.equal(YIELDS and "suspended" or "dead", status)
    full_gc()
    if YIELDS then
      assert.are.equal(0, #errors)
      assert.is_false(b:is_expired())                   -- the closed drain never reached it
      assert.are.equal(1, tm:poll())
    else
      assert_yield_errors(errors, 1)
    end
    assert.is_true(b:is_expired())
    assert.are.equal(1, p:remaining())
    assert.are.equal(1, tm:advance(1))
    assert.are.equal(2, runs)
    assert.are.equal(0, resumed)
  end)

  it("a one-shot whose drain coroutine is dropped mid-run is finished; the other due tasks run later", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, yielder(log, "a"))
    local b = tm:timeout(0, appender(log, "b"))
    local status = suspend_in(function(t) return t:poll() end, tm)
    full_gc()
    if YIELDS then
      assert.are.equal("suspended", status)
      assert.are.same({ "a" }, log)
      assert.are.equal(1, tm:pending())
      assert.are.equal(1, tm:poll())
      assert.are.equal(0, #errors)
    else
      assert.are.equal("dead", status)
      assert_yield_errors(errors, 1)
    end
    assert.are.same({ "a", "b" }, log)
    assert.is_true(a:is_expired() and b:is_expired())
    assert.is_false(a:cancel())
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, tm:advance(5))
  end)

  it("on_earlier hears of a periodic re-armed by the collection of its dropped drain", function()
    local tm, errors = collecting()
    local heard = {}
    tm:on_earlier(function(s) heard[#heard + 1] = s end)
    tm:every(1, function() if not in_main() then coroutine.yield() end end)
    tm:timeout(5, noop)
    local status = suspend_in(function(t) return t:advance(1) end, tm)
    if YIELDS then
      assert.are.equal("suspended", status)
      assert.are.equal(4, tm:next_due())                 -- the one at 5: the periodic runs
      heard = {}
      full_gc()
      assert.are.same({ 1 }, heard)                      -- re-armed at 2
      assert.are.equal(0, #errors)
    else
      assert.are.equal("dead", status)
      assert_yield_errors(errors, 1)
      assert.are.same({ 1 }, heard)                      -- the re-arm at 2: not earlier than 1
    end
    assert.are.equal(1, tm:next_due())
  end)
end)

describe("a yield where the draining call's caller cannot yield", function()
  it("from the main thread: the task's error, to on_error; the drain goes on", function()
    local tm, errors = collecting()
    local log = {}
    local a = tm:timeout(0, function() log[#log + 1] = "a"; coroutine.yield(); log[#log + 1] = "not here" end)
    tm:timeout(0, appender(log, "b"))
    assert.are.equal(2, tm:poll())
    assert.are.same({ "a", "b" }, log)
    assert_yield_errors(errors, 1)
    assert.is_true(rawequal(a, errors[1].timeout))
  end)

  it("across a C call (table.sort's comparator): the task's error, to on_error; the drain goes on", function()
    local tm, errors = collecting()
    local log = {}
    tm:timeout(0, function() log[#log + 1] = "a"; coroutine.yield(); log[#log + 1] = "not here" end)
    tm:timeout(0, appender(log, "b"))
    local n
    local co, r = start(function()
      table.sort({ 2, 1 }, function(x, y)
        if not n then n = tm:poll() end
        return x < y
      end)
      return "sorted"
    end)
    assert.are.same({ true, "sorted" }, first(r, 2))
    assert.are.equal("dead", coroutine.status(co))
    assert.are.equal(2, n)
    assert.are.same({ "a", "b" }, log)
    assert_yield_errors(errors, 1)
  end)

  it("PUC 5.1: a yield in a task run from a coroutine is its error (elsewhere: it suspends the call)", function()
    local tm, errors = collecting()
    local t = tm:timeout(0, function() coroutine.yield("y") end)
    local co, r = start(function() return "done", tm:poll() end)
    if YIELDS then
      assert.are.same({ true, "y" }, first(r, 2))
      assert.are.equal("suspended", coroutine.status(co))
      assert.are.same({ true, "done", 1 }, first(resume(co), 3))
      assert.are.equal(0, #errors)
    else
      assert.are.same({ true, "done", 1 }, first(r, 3))
      assert_yield_errors(errors, 1)
      assert.is_true(rawequal(t, errors[1].timeout))
    end
    assert.are.equal(1, tm:stats().fired)                -- counts as run either way
  end)
end)
