-- hostile_spec.lua: every public function called the wrong way — wrong types,
-- missing arguments, NaN, infinities, huge and negative numbers, numeric
-- strings, absurd options — and re-entrant calls from tasks, from on_error
-- and from finalizers. Each call must raise a clear error that names the
-- argument or option, or do what API.md / README.md document; never crash;
-- and the timer must stay consistent afterwards (pending(), stats() and every
-- timeout's own state add up: each timeout ran once, was cancelled, is still
-- pending, or was returned by stop()).
local hwt = require("hwt")
local compat = require("compat")

local pack, unpack = compat.pack, compat.unpack
-- math.maxinteger/mininteger where the version has integers, else +-2^53.
local MAXINT, MININT = compat.maxinteger, compat.mininteger

local support = require("support")
local noop, manual, manual_with_errors = support.noop, support.manual, support.manual_with_errors
local show, error_of, assert_error = support.show, support.error_of, support.assert_error
local state_of, call, wrong_values, books = support.state_of, support.call, support.wrong_values, support.books
local MAX_DELAY = support.MAX_DELAY

-- Runs `code` in a separate interpreter (same LUA_PATH/LUA_CPATH and, under
-- the ASan run, the same LD_PRELOAD), killed after `seconds`. Returns its
-- output and whether it was killed.
local function run_isolated(code, seconds)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(code)
  f:close()
  local lua = compat.interpreter()
  local command = ("LUA_PATH='%s' LUA_CPATH='%s' timeout %d %s %s 2>&1; echo \"exit=$?\""):format(
    package.path, package.cpath, seconds, lua, path)
  local p = assert(io.popen(command))
  local out = p:read("*a")
  p:close()
  os.remove(path)
  return out, out:find("exit=124", 1, true) ~= nil
end

-- ---- hwt.new -----------------------------------------------------------------

-- ---- wrong self --------------------------------------------------------------

describe("methods called on the wrong object", function()
  local timer_calls = {
    { "timeout", 1, noop }, { "every", 1, noop }, { "poll" }, { "wait", 0 }, { "run" },
    { "advance", 1 }, { "pending" }, { "fd" }, { "stats" }, { "stop" }, { "now" },
  }
  local timeout_calls = { "cancel", "is_cancelled", "is_expired", "timer", "task", "remaining" }

  it("every Timer method raises 'hwt.Timer expected' for a wrong self", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    for _, call in ipairs(timer_calls) do
      local method = hwt.Timer[call[1]]
      assert.is_function(method, call[1])
      for _, case in ipairs(wrong_values({ Timeout = t })) do
        local message = assert_error(method, pack(case[2], unpack(call, 2)), "hwt.Timer expected")
        assert(message:find("bad argument #1", 1, true) or message:find("bad self", 1, true),
          call[1] .. "(" .. case[1] .. "): " .. message)
      end
      assert_error(method, pack(), "hwt.Timer expected")            -- no self at all
    end
    tm:stop()
  end)

  it("a Timeout passed where a Timer is expected is named as such", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    assert_error(hwt.Timer.timeout, pack(t, 1, noop), "hwt.Timer expected, got hwt.Timeout")
    assert_error(hwt.Timer.stop, pack(t), "hwt.Timer expected, got hwt.Timeout")
    assert.are.equal(1, tm:pending())
    tm:stop()
  end)

  it("Timer metamethods (__tostring, __close, __gc) check self too", function()
    local tm = manual()
    local mt = debug.getmetatable(tm)
    for _, name in ipairs({ "__tostring", "__close", "__gc" }) do
      for _, case in ipairs(wrong_values({ Timeout = tm:timeout(1, noop) })) do
        assert_error(mt[name], pack(case[2]), "hwt.Timer expected")
      end
    end
    assert.are.equal(3, tm:pending())            -- one Timeout per metamethod, untouched
    tm:stop()
  end)

  it("every Timeout method raises 'hwt.Timeout expected' for a wrong self, a Timer included", function()
    local tm = manual()
    for _, name in ipairs(timeout_calls) do
      local method = hwt.Timeout[name]
      assert.is_function(method, name)
      for _, case in ipairs(wrong_values({ Timer = tm })) do
        assert_error(method, pack(case[2]), "hwt.Timeout expected")
      end
      assert_error(method, pack(tm), "hwt.Timeout expected, got hwt.Timer")
      assert_error(method, pack(), "hwt.Timeout expected")
    end
    local mt = debug.getmetatable(tm:timeout(1, noop))
    for _, name in ipairs({ "__tostring", "__close" }) do
      for _, case in ipairs(wrong_values({ Timer = tm })) do
        assert_error(mt[name], pack(case[2]), "hwt.Timeout expected")
      end
    end
    tm:stop()
  end)
end)

-- ---- poll / wait / run / advance / others -------------------------------------

describe("poll, wait, run, advance, now, fd, stats, stop with hostile arguments", function()
  it("now(), fd(), stats() and stop() ignore extra arguments and survive stop()", function()
    local tm = manual()
    assert.are.equal(0, tm:now("x", {}))
    local fd = tm:fd(io.stdout)
    assert.is_true(compat.is_integer(fd), "fd: an integer")
    assert(fd >= 0)
    local stats = tm:stats({})
    for _, k in ipairs({ "pending", "due", "fired", "cancelled", "ticks", "worker_wakeups", "wheel_size",
                         "max_pending" }) do
      assert.is_true(compat.is_integer(stats[k]), k)
    end
    assert.are.equal("number", type(stats.late_max))
    assert.are.equal("manual", stats.clock)
    assert.is_false(stats.stopped)
    tm:timeout(1, noop)
    assert.are.equal(1, #tm:stop(42))
    assert.are.same({}, tm:stop())
    assert.are.equal(fd, tm:fd())
    assert.is_true(tm:stats().stopped)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, tm:poll())
    assert.are.equal(0, tm:advance(1))
    assert.matches("stopped", tostring(tm), 1, true)
    local ok, now = pcall(tm.now, tm)            -- a number, or a clear error
    assert(ok and type(now) == "number" or tostring(now):find("timer is stopped", 1, true), tostring(now))
  end)
end)

-- ---- hwt.retry -------------------------------------------------------------------

describe("hwt.retry with hostile arguments", function()
  local function fails() return nil, "no" end

  it("names argument #1 when it is not an hwt.Timer (a Timeout included)", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    for _, case in ipairs(wrong_values({ Timeout = t })) do
      assert_error(hwt.retry, pack(case[2], fails), "bad argument #1 to 'retry'", "hwt.Timer expected")
    end
    tm:stop()
  end)

  it("names argument #2 when fn is not callable", function()
    local tm = manual()
    local bad = pack(nil, "x", {}, 42, true, io.stdout, setmetatable({}, { __call = 42 }))
    for i = 1, bad.n do
      assert_error(hwt.retry, pack(tm, bad[i]), "bad argument #2 to 'retry'", "function or callable expected")
    end
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("names argument #3 when opts is not a table", function()
    local tm = manual()
    for _, v in ipairs({ "x", 42, true, print, io.stdout }) do
      assert_error(hwt.retry, pack(tm, fails, v), "bad argument #3 to 'retry'", "table expected")
    end
    tm:stop()
  end)

  it("names the option for unknown keys and bad values", function()
    local tm = manual()
    local cases = {
      { "retires", 3 }, { "retries", -1 }, { "retries", 1.5 }, { "retries", 0 / 0 },
      { "retries", -math.huge }, { "retries", true }, { "delay", -1 }, { "delay", 0 / 0 },
      { "delay", -math.huge }, { "delay", {} }, { "backoff", 0.5 }, { "backoff", 0 }, { "backoff", -1 },
      { "backoff", 0 / 0 }, { "max_delay", -1 }, { "max_delay", 0 / 0 }, { "jitter", -0.1 },
      { "jitter", 1.5 }, { "jitter", 0 / 0 }, { "jitter", math.huge }, { "on_give_up", 42 },
      { "on_success", "x" }, { "random", 1 },
    }
    local calls = 0
    for _, case in ipairs(cases) do
      local message = error_of(hwt.retry, tm, function() calls = calls + 1 end, { [case[1]] = case[2] })
      assert(message:find(case[1], 1, true), ("%s = %s: %s"):format(case[1], show(case[2]), message))
      assert(message:find("retry", 1, true), message)
    end
    assert.are.equal(0, calls)                   -- refused before the first call
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("numeric-string options: used as numbers, or refused naming the option", function()
    local tm = manual()
    for _, key in ipairs({ "retries", "delay", "backoff", "max_delay", "jitter" }) do
      local ok, err = pcall(hwt.retry, tm, fails, { [key] = "1" })
      assert(ok or tostring(err):find(key, 1, true), tostring(err))
    end
    tm:stop()
  end)

  it("delay = math.huge is capped by max_delay; 1e308 with max_delay = math.huge clamps, never fires", function()
    local tm = manual()
    local h = hwt.retry(tm, fails, { delay = math.huge, retries = 1 })
    assert.are.equal(1, h.attempts)
    assert.are.equal(1, tm:pending())
    tm:advance(60)
    assert.are.equal(2, h.attempts)
    local h2 = hwt.retry(tm, fails, { delay = 1e308, max_delay = math.huge, retries = 1 })
    for _ = 1, 3 do tm:advance(1e9) end
    assert.are.equal(1, h2.attempts)
    assert.is_true(h2:cancel())
    assert.is_false(h2:cancel())
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("never stalls silently: with delay = 0 and backoff = math.huge it keeps trying, then gives up", function()
    local errors, gave_up = {}, {}
    local tm = manual({ on_error = function(err) errors[#errors + 1] = tostring(err) end })
    local h = hwt.retry(tm, fails, { delay = 0, backoff = math.huge, retries = 3,
                                     on_give_up = function(err) gave_up[#gave_up + 1] = err end })
    for _ = 1, 10 do tm:advance(100) end
    assert.are.same({}, errors)
    assert.are.equal(4, h.attempts)
    assert.are.same({ "no" }, gave_up)
    tm:stop()
  end)

  it("a retry on a stopped timer makes its first call, then gives up with 'timer is stopped'", function()
    local tm = manual()
    tm:stop()
    local calls, gave_up = 0, {}
    local h = hwt.retry(tm, function() calls = calls + 1 return false end,
                        { on_give_up = function(err) gave_up[#gave_up + 1] = err end })
    assert.are.equal(1, calls)
    assert.are.same({ "timer is stopped" }, gave_up)
    assert.is_true(h.done)
    assert.is_false(h:cancel())
  end)
end)

-- ---- sleep -----------------------------------------------------------------------------

describe("timer:sleep with hostile arguments", function()
  local function in_coroutine(f, ...)
    local co = coroutine.create(f)
    return co, coroutine.resume(co, ...)
  end

  it("outside a coroutine: 'sleep() must be called from inside a coroutine'", function()
    local tm = manual()
    assert_error(tm.sleep, pack(tm, 1), "sleep() must be called from inside a coroutine")
    assert_error(hwt.Timer.sleep, pack(io.stdout, 1), "bad argument #1 to 'sleep' (hwt.Timer expected")
    tm:stop()
  end)

  it("bad seconds inside a coroutine: a clear number error; nothing stays scheduled", function()
    local tm = manual()
    local bad = pack(nil, "x", {}, true, -1, 0 / 0, -math.huge)
    for i = 1, bad.n do
      local v = bad[i]
      local _, ok, err = in_coroutine(function() return tm:sleep(v) end)
      assert.is_false(ok)
      err = tostring(err)
      assert(err:find("number expected", 1, true) or err:find("must be a number >= 0", 1, true), err)
    end
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("a wrong self inside a coroutine names the Timer argument", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    for _, case in ipairs(wrong_values({ Timeout = t })) do
      local _, ok, err = in_coroutine(function() return hwt.Timer.sleep(case[2], 1) end)
      assert.is_false(ok)
      assert(tostring(err):find("hwt.Timer expected", 1, true),
        ("sleep with self = %s: %s"):format(case[1], tostring(err)))
    end
    tm:stop()
  end)

  it("sleep(math.huge) never resumes by itself; stop() wakes it with nil, 'timer is stopped'", function()
    local tm = manual()
    local woke
    local co = in_coroutine(function() woke = { tm:sleep(math.huge) } end)
    tm:advance(1e9)
    assert.are.equal("suspended", coroutine.status(co))
    local list = tm:stop()
    assert.are.equal(1, #list)
    assert.is_true(list[1]:is_cancelled())
    assert.are.equal("dead", coroutine.status(co))
    assert.are.same({ nil, "timer is stopped" }, woke)
  end)

  it("max_pending refuses a sleep with nil, err", function()
    local tm = manual({ max_pending = 1 })
    tm:timeout(5, noop)
    local _, ok, a, b = in_coroutine(function() return tm:sleep(1) end)
    assert.is_true(ok)
    assert.is_nil(a)
    assert.matches("too many pending", b, 1, true)
    tm:stop()
  end)

  it("a sleep inside a task suspends the poll's coroutine (PUC 5.1: an error, and no stray wake-up)", function()
    local errors = {}
    local tm = manual({ on_error = function(err) errors[#errors + 1] = tostring(err) end })
    local slept
    local co = coroutine.create(function()
      tm:timeout(0, function() slept = tm:sleep(1) end)
      tm:poll()                                  -- the task runs inside this coroutine
      local v = coroutine.yield("own yield")
      return "resumed with " .. tostring(v)
    end)
    local ok, v = coroutine.resume(co)
    assert.is_true(ok)
    if not compat.tasks_yield then
      assert.are.equal("own yield", v)
      assert.are.equal(1, #errors)
      assert.matches("yield", errors[1], 1, true)
      tm:advance(1)                              -- must not resume `co` at its own yield
      assert.are.equal("suspended", coroutine.status(co))
      assert.are.equal(0, tm:pending())
      tm:stop()
      return
    end
    assert.is_nil(v)                             -- the sleep's yield, out of poll()
    assert.are.equal(1, tm:pending())
    assert.are.equal(0, tm:advance(0.5))
    assert.are.equal(1, tm:advance(0.5))         -- wakes the sleeper: poll() goes on, co yields
    assert.is_true(slept)
    assert.are.equal(0, #errors)
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.same({ true, "resumed with x" }, { coroutine.resume(co, "x") })
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)
end)

-- ---- re-entrant calls ------------------------------------------------------------------------

describe("re-entrant calls", function()
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
        same = rawequal(t:timer(), tm),
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
end)
