-- Lifecycle specs: stop(), <close>, garbage collection, closing the Lua state
-- (in a child process) and worker threads that must not leak.
local hwt = require("hwt")
local compat = require("compat")

local support = require("support")
local sleep, threads, threads_settle = support.sleep, support.threads, support.threads_settle
local run_child, noop, full_gc = support.run_child, support.noop, support.full_gc
local CHILD_SETUP = support.CHILD_SETUP
local assert_raises = support.assert_raises

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

describe("lifecycle", function()
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
    ]], "@lifecycle_spec.lua", { hwt = hwt, full_gc = full_gc, threads = threads, threads_settle = threads_settle, noop = noop, assert_raises = assert_raises, sleep = sleep }, _ENV))
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
