-- lifetime_spec.lua: how long things live. The worker thread (started by
-- fd(), joined by stop() or the collection, never leaked); shared engines
-- (one worker for the timers of one tick and wheel size); collection
-- (a dropped timer is stopped by its __gc, a dropped timeout still fires, a
-- Timeout does not keep its timer alive, nor do on_error and on_earlier,
-- hand-offs that outlive their timer do nothing) and finalizers that use a
-- finalized timer; closing the Lua state with timers pending, in child
-- interpreters (under `make test` also against the ASan+UBSan build).
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local LATE, noop, manual, full_gc = support.LATE, support.noop, support.manual, support.full_gc
local assert_raises, sleep, threads = support.assert_raises, support.sleep, support.threads
local threads_settle, run_child = support.threads_settle, support.run_child
local assert_clean_exit, ON_GC = support.assert_clean_exit, support.ON_GC
local CHILD_SETUP = support.CHILD_SETUP

local function pid()
  local f = assert(io.open("/proc/self/stat", "r"))
  local line = f:read("*l")
  f:close()
  return assert(line:match("^(%d+)"))
end

-- Timer descriptors (eventfds) open in this process. Other descriptors are
-- left out: a file handle some earlier spec left to the collector would
-- close at a random moment and make the count flaky.
local function open_fds()
  local p = assert(io.popen("ls -l /proc/" .. pid() .. "/fd"))
  local n = 0
  for line in p:lines() do
    if line:find("eventfd", 1, true) then n = n + 1 end
  end
  p:close()
  return n
end

describe("worker threads", function()
  it("starts no thread until fd() is called: then the worker starts, and stop() joins it", function()
    full_gc()
    local base = threads_settle(threads())
    local t = hwt.new({ tick = 0.001, shared = false })
    for i = 1, 100 do t:timeout(i * 0.001, noop) end
    t:every(0.002, noop)
    assert.is_true(t:wait(1))
    assert.is_true(t:poll() >= 1)
    t:next_due(); t:stats()
    assert.equals(base, threads())               -- poll(), wait(), next_due() drove it alone
    assert.is_number(t:fd())
    assert.equals(base + 1, threads())
    t:timeout(0.001, noop)
    t:fd()
    assert.equals(base + 1, threads())           -- one worker, however often fd() is called
    t:stop()
    assert.equals(base, threads_settle(base))
    assert.is_number(t:fd())                     -- a stopped timer's fd starts nothing
    assert.equals(base, threads())
  end)

  it("stop() joins the worker and returns the unrun timeouts in deadline order", function()
    full_gc()
    local base = threads()
    local t = hwt.new({ tick = 0.001 })
    t:fd()                                       -- starts the worker
    local ran = t:timeout(0.001, noop)
    assert.is_true(t:wait(2))
    assert.equals(1, t:poll())
    assert.is_true(threads() >= base + 1)        -- the worker is running
    local d5 = t:timeout(5, noop)
    local d1 = t:timeout(1, noop)
    local never = t:timeout(math.huge, noop)
    local d3 = t:timeout(3, noop)
    local gone = t:timeout(2, noop)
    assert.is_true(gone:cancel())
    local p4 = t:every(4, noop)                  -- periodic that never ran
    local d1b = t:timeout(1, noop)               -- same delay, later
    local list = t:stop()
    assert.is_table(list)
    assert.equals(6, #list)
    local expected = { d1, d1b, d3, p4, d5, never }
    for i, to in ipairs(expected) do
      assert.is_true(rawequal(to, list[i]), "entry " .. i)
      assert.is_true(to:is_cancelled())
      assert.is_false(to:is_expired())
      assert.is_false(to:cancel())
      assert.equals(0, to:remaining())
    end
    assert.is_false(ran:is_cancelled())
    assert.is_true(ran:is_expired())
    assert.equals(0, t:pending())
    local s = t:stats()
    assert.is_true(s.stopped)
    assert.equals(7, s.cancelled)
    assert.equals(1, s.fired)
    assert.is_true(threads_settle(base) <= base)   -- worker joined
    assert_raises("timer is stopped", t.timeout, t, 1, noop)
    assert_raises("timer is stopped", t.every, t, 1, noop)
    assert.equals(0, t:poll())
    assert.is_false(t:wait(0.01))
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("a <close> timer is stopped on scope exit", compat.compile([[
    return function()
      full_gc()
      local base = threads()
      local keep, pend
      do
        local t <close> = hwt.new({ tick = 0.001 })
        keep = t
        t:fd()
        pend = t:timeout(10, noop)
        assert.is_true(threads() >= base + 1)
        assert.equals(1, t:pending())
      end
      assert.is_true(keep:stats().stopped)
      assert.is_true(pend:is_cancelled())
      assert.equals(0, keep:pending())
      assert_raises("timer is stopped", keep.timeout, keep, 1, noop)
      assert.equals(0, #keep:stop())
      assert.is_true(threads_settle(base) <= base)
      -- also on an error leaving the scope
      local keep2, pend2
      local ok = pcall(function()
        local t <close> = hwt.new()
        keep2, pend2 = t, t:timeout(10, noop)
        error("leave")
      end)
      assert.is_false(ok)
      assert.is_true(keep2:stats().stopped)
      assert.is_true(pend2:is_cancelled())
      assert_raises("timer is stopped", keep2.timeout, keep2, 1, noop)
    end
    ]], "@lifetime_spec.lua", { hwt = hwt, full_gc = full_gc, threads = threads, threads_settle = threads_settle, noop = noop, assert_raises = assert_raises, sleep = sleep }, _ENV))
  end

  it("a timer garbage-collected with pending timeouts does not crash, and a new timer works", function()
    full_gc()
    local base = threads()
    do
      local t = hwt.new({ tick = 0.001 })
      t:fd()                                     -- with its worker running
      for i = 1, 2000 do t:timeout(i * 0.0005, noop) end
      for i = 1, 10 do t:every(0.001 * i, function(to) to:timer():timeout(1, noop) end) end
      t:timeout(math.huge, noop)
      t:timeout(0, noop)
      assert.is_true(t:wait(2))                  -- a due, unpolled timeout too
      t:poll(5)
      local m = hwt.new({ clock = "manual" })
      for i = 1, 100 do m:timeout(i, noop) end
      m:advance(10)
    end
    full_gc()
    assert.is_true(threads_settle(base) <= base)
    local t2 = hwt.new({ tick = 0.001 })
    local ran = 0
    t2:timeout(0.01, function() ran = ran + 1 end)
    assert.equals(1, t2:run())
    assert.equals(1, ran)
    t2:stop()
  end)

  it("stop() inside a task returns the due-but-not-started siblings and joins the worker", function()
    full_gc()
    local base = threads()
    local t = hwt.new({ tick = 0.001 })
    t:fd()
    local log, result = {}, nil
    local a = t:timeout(0.01, function(to)
      log[#log + 1] = "a"
      result = to:timer():stop()
    end)
    local b = t:timeout(0.01, function() log[#log + 1] = "b" end)
    local c = t:timeout(5, function() log[#log + 1] = "c" end)
    sleep(0.1)                                 -- both a and b are due
    assert.is_true(t:wait(1))
    assert.equals(1, t:poll())
    assert.same({ "a" }, log)
    assert.is_table(result)
    assert.equals(2, #result)
    assert.is_true(rawequal(b, result[1]))
    assert.is_true(rawequal(c, result[2]))
    assert.is_true(a:is_expired())
    assert.is_false(a:is_cancelled())
    assert.is_true(b:is_cancelled())
    assert.is_false(b:is_expired())
    assert.is_false(b:cancel())
    assert.is_true(c:is_cancelled())
    assert.equals(0, t:poll())
    assert.same({ "a" }, log)
    assert.equals(0, t:pending())
    assert.is_true(t:stats().stopped)
    assert_raises("timer is stopped", t.timeout, t, 0, noop)
    assert.equals(0, #t:stop())
    assert.is_true(threads_settle(base) <= base)
  end)

  it("creating and dropping 200 private-engine timers leaks neither threads nor descriptors", function()
    full_gc()
    local base_threads = threads_settle(threads())
    local base_fds = open_fds()
    -- Timers are made in called functions: a dead local in this frame's
    -- registers would otherwise keep the last one reachable.
    local function make_timers()
      local alive = {}
      for i = 1, 200 do
        local t = hwt.new({ tick = 0.001, shared = false })
        t:fd()                                 -- starts the worker
        t:timeout(60, noop)
        t:every(0.5, noop)
        if i <= 10 then alive[i] = t end
      end
      return alive
    end
    local function count_alive_workers()
      local alive = make_timers()
      return threads() - base_threads, open_fds() - base_fds, #alive
    end
    local extra_threads, extra_fds, kept = count_alive_workers()
    assert.equals(10, kept)
    assert.is_true(extra_threads >= 10)
    assert.is_true(extra_fds >= 10)             -- open_fds() sees timer descriptors
    full_gc()
    assert.is_true(threads_settle(base_threads) <= base_threads,
      "threads: " .. threads() .. ", baseline " .. base_threads)
    assert.equals(base_fds, open_fds())
    -- stop() alone (without collection) joins the worker too
    local function stop_timers()
      local stopped = {}
      for i = 1, 50 do
        local t = hwt.new({ tick = 0.001, shared = false })
        t:fd()
        t:timeout(60, noop)
        t:stop()
        stopped[i] = t
      end
      return stopped
    end
    local stopped = stop_timers()             -- still reachable: not collected
    assert.equals(50, #stopped)
    assert.is_true(threads_settle(base_threads) <= base_threads)
    stopped = nil
    full_gc()
    assert.equals(base_fds, open_fds())
  end)
end)

-- Each spec uses its own tick, so that no other spec's timers share its engine.
describe("shared engines", function()
  it("1000 timers in one state use one worker thread; each fires only through its own poll()", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0037
    local timers, fired_by = {}, {}
    local function make(count)
      for i = 1, count do
        local t = hwt.new({ tick = tick })
        t:fd()                                     -- the worker drives the wheel for it
        local deadline = hwt.now() + 0.05
        t:timeout(0.05, function(_, id)
          fired_by[#fired_by + 1] = { id = id, late = hwt.now() - deadline }
        end, i)
        timers[i] = t
      end
    end
    make(1000)
    assert.equals(base + 1, threads())
    sleep(0.05 + 4 * tick)
    for i = 1, 1000 do
      assert.equals(1, timers[i]:stats().due)      -- due, waiting for its own poll
      assert.is_true(timers[i]:stats().shared)
    end
    for i = 1, 1000 do
      assert.equals(1, timers[i]:poll())
      assert.equals(i, fired_by[i].id)
      assert.is_true(fired_by[i].late >= -1e-9 and fired_by[i].late <= LATE + 0.1)
    end
    for i = 1, 1000 do timers[i]:stop() end
    assert.equals(base, threads_settle(base))       -- the last stop joined it
    -- Each timer keeps its wake fd until it is collected; on LuaJIT busted's
    -- finished test can hold these locals, and a thousand fds left open
    -- would push later tests' sockets past what socket.select() takes.
    for i = 1, 1000 do timers[i] = nil end
    full_gc()
  end)

  it("stopping one timer returns its timeouts and leaves the others firing", function()
    local tick = 0.0041
    local a, b, c = hwt.new({ tick = tick }), hwt.new({ tick = tick }), hwt.new({ tick = tick })
    local ran = { a = 0, b = 0, c = 0 }
    for i = 1, 20 do
      a:timeout(i * 0.002, function() ran.a = ran.a + 1 end)
      b:timeout(i * 0.002, function() ran.b = ran.b + 1 end)
      c:timeout(i * 0.002, function() ran.c = ran.c + 1 end)
    end
    assert.equals(20, #b:stop())
    assert.equals(20, a:run())
    assert.equals(20, c:run())
    assert.same({ a = 20, b = 0, c = 20 }, ran)
    a:stop(); c:stop()
  end)

  it("timers collected while others fire: the rest fire on time, then the thread exits", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0043
    local kept, ran = {}, 0
    local function make()
      for i = 1, 50 do
        local t = hwt.new({ tick = tick })
        t:fd()
        for k = 1, 20 do t:timeout(k * 0.003, function() ran = ran + 1 end) end
        if i % 2 == 0 then kept[#kept + 1] = t end
      end
    end
    make()
    assert.equals(base + 1, threads())
    full_gc()                                      -- 25 timers collected now
    local ticks_done = 0
    for _, t in ipairs(kept) do ticks_done = ticks_done + t:run() end
    assert.equals(25 * 20, ticks_done)
    assert.equals(25 * 20, ran)
    kept = nil
    full_gc()
    assert.equals(base, threads_settle(base))
  end)

  it("a stopped engine's worker comes back for a new timer with the same settings", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0047
    local first = hwt.new({ tick = tick })
    first:fd()
    first:timeout(0, function() end)
    first:stop()
    assert.equals(base, threads_settle(base))
    local second = hwt.new({ tick = tick })
    second:fd()
    assert.equals(base + 1, threads())
    local ran = false
    second:timeout(0.01, function() ran = true end)
    assert.equals(1, second:run())
    assert.is_true(ran)
    second:stop()
    first = nil
  end)

  it("a timer that joins a running engine counts ticks from its own creation", function()
    local tick = 0.0059
    local old = hwt.new({ tick = tick })
    old:timeout(60, function() end)
    sleep(0.2)
    local created = hwt.now()
    local new = hwt.new({ tick = tick })
    sleep(0.05)
    local ticks = new:stats().ticks
    assert.is_true(ticks <= (hwt.now() - created) / tick + 1, "ticks " .. ticks)
    assert.is_true(old:stats().ticks >= ticks + math.floor(0.2 / tick) - 1)
    old:stop(); new:stop()
  end)

  it("shared = false gives a timer its own worker; manual timers never share", function()
    full_gc()
    local base = threads_settle(threads())
    local tick = 0.0053
    local private1 = hwt.new({ tick = tick, shared = false })
    local private2 = hwt.new({ tick = tick, shared = false })
    private1:fd()
    private2:fd()
    assert.equals(base + 2, threads())
    assert.is_false(private1:stats().shared)
    assert.is_false(hwt.new({ clock = "manual", tick = tick }):stats().shared)
    private1:stop(); private2:stop()
    assert.equals(base, threads_settle(base))
    assert.has_error(function() hwt.new({ shared = "yes" }) end,
      "bad option 'shared' to 'new' (boolean expected, got string)")
  end)
end)

describe("collection", function()
  it("a timer that is never stopped is collected (its __gc stops it)", function()
    local weak = setmetatable({}, { __mode = "k" })
    do
      local timer = manual()
      timer:timeout(1, function() end)
      timer:every(1, function() end)
      timer:timeout(0, function() end)
      weak[timer] = true
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_nil(next(weak))
  end)

  it("a garbage timer with pending timeouts is stopped by __gc; its tasks never run", function()
    local ran = false
    do
      local tm = manual()
      tm:timeout(0, function() ran = true end)
      tm:every(0.01, function() ran = true end)
    end
    collectgarbage()
    collectgarbage()
    assert.is_false(ran)
  end)

  it("a timer collected with timeouts pending, stopped or not, lets go of their tasks", function()
    local gone = setmetatable({}, { __mode = "v" })
    do
      local pending, stopped = manual(), manual()
      for i = 1, 100 do
        local task = function() end
        gone[i] = task
        pending:timeout(i, task, i)
      end
      for i = 101, 200 do
        local task = function() end
        gone[i] = task
        stopped:timeout(i, task)
      end
      assert.are.equal(100, #stopped:stop())
    end
    for _ = 1, 4 do collectgarbage() end       -- the timers' finalizers, then the tasks
    assert.is_nil(next(gone), "a collected timer still holds a task")
  end)

  it("a timeout whose handle was dropped still fires, with a usable timeout", function()
    local timer = manual()
    local got
    local count = 0
    for i = 1, 50 do
      timer:timeout(1, function(t, n) count = count + 1; if n == 50 then got = t end end, i)
    end
    timer:every(0.5, function() count = count + 1 end)
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(51, timer:pending())
    assert.are.equal(1, timer:advance(0.5))
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(51, timer:advance(0.5))
    assert.are.equal(52, count)
    assert.is_true(hwt.is_timeout(got))
    assert.is_true(got:is_expired())
    assert.is_true(rawequal(timer, got:timer()))
    collectgarbage("collect")
    assert.are.equal(1, timer:advance(0.5))       -- the dropped periodic keeps going
    assert.are.equal(53, count)
  end)

  it("a handle dropped after cancel or run can be collected without effect", function()
    local timer = manual()
    do
      local t = timer:timeout(1, function() end)
      t:cancel()
    end
    timer:timeout(0, function() end)
    timer:poll()
    collectgarbage("collect")
    collectgarbage("collect")
    local s = timer:stats()
    assert.are.same({ 0, 1, 1 }, { s.pending, s.fired, s.cancelled })
  end)

  it("still fires timeouts whose handles were dropped and collected", function()
    local t = hwt.new({ tick = 0.001 })
    local count = 0
    local seen_expired = true
    for i = 1, 100 do
      t:timeout(0.01 + i * 1e-4, function(to)
        count = count + 1
        seen_expired = seen_expired and to:is_expired()
      end)
    end
    collectgarbage()
    collectgarbage()
    assert.equals(100, t:pending())
    assert.equals(100, t:run())
    assert.equals(100, count)
    assert.is_true(seen_expired)
    t:stop()
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

  it("an on_error and an on_earlier that refer to the timer do not keep it alive", function()
    local weak = setmetatable({}, { __mode = "v" })
    do
      local timer
      timer = hwt.new({ on_error = function() return timer end })
      timer:on_earlier(function() return timer end)
      timer:timeout(3600, function() end)
      weak.timer = timer
    end
    for _ = 1, 4 do collectgarbage("collect") end
    assert.is_nil(weak.timer)
  end)

  it("a hand-off run after its timer was collected runs nothing", function()
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

  it("a hand-off kept past its collected timer, with a watcher set, is collected safely (a fresh process)", function()
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

  it("a timer finalized before another finalizer uses it: every call is safe", function()
    local box = setmetatable({}, { __mode = "k" })
    local report
    local holder = compat.gc_object(function()
      local seen = {}
      for k, v in pairs(box) do seen[v] = k end
      local tm, t = seen.timer, seen.timeout
      if not tm then return end
      report = {
        timeout = select(2, pcall(tm.timeout, tm, 1, noop)),
        pending = tm:pending(), poll = tm:poll(), wait = tm:wait(0), stop = #tm:stop(),
        stopped = tm:stats().stopped, text = tostring(tm), advance = tm:advance(1),
        cancel = t:cancel(), cancelled = t:is_cancelled(), remaining = t:remaining(),
        -- nil on LuaJIT: a collected timer's Timeouts no longer name it
        same = rawequal(t:timer(), tm) or (support.cdata_timeouts and t:timer() == nil),
      }
    end)
    do
      local tm = manual()
      box[tm] = "timer"
      box[tm:timeout(1, noop)] = "timeout"
    end
    holder = nil                                 -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    assert.is_truthy(report, "the timer was not finalized first")
    assert.matches("timer is stopped", tostring(report.timeout), 1, true)
    assert.are.same({ 0, 0, false, 0, true, 0, false, true, 0, true },
      { report.pending, report.poll, report.wait, report.stop, report.stopped, report.advance,
        report.cancel, report.cancelled, report.remaining, report.same })
  end)
end)

describe("closing the Lua state", function()
  for _, ending in ipairs({ "os.exit(0, true)", "falling off the end" }) do
    it("a child Lua state closed with timeouts pending exits 0 (" .. ending .. ")", function()
      local code = CHILD_SETUP .. 'io.write("CHILD-DONE\\n")\nio.flush()\n'
      if ending ~= "falling off the end" then code = code .. ending .. "\n" end
      for round = 1, 2 do
        local out, err, ok, how, status = run_child(code)
        assert.equals("exit", how, err)
        assert.equals(0, status, "stderr: " .. err)
        assert.is_true(ok)
        assert.matches("CHILD%-DONE", out, 1)
        assert.matches("pending:%d+", out)
        assert.equals("", err, "round " .. round)
      end
    end)
  end

  it("a timer created by a finalizer run by lua_close is stopped with the state", function()
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
