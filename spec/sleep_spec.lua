-- sleep_spec.lua: timer:sleep(seconds), from inside a coroutine: the
-- coroutine is resumed with true once the timer has run the wake-up, or with
-- nil, "timer is stopped" by a stop; nil and a message at once when the
-- timer refuses; sleeps inside tasks suspend the drain's coroutine; bad
-- arguments. Exact on the manual clock, loosely on the real clock.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, YIELDS, EPS, LATE = compat.pack, compat.tasks_yield, support.EPS, support.LATE
local noop, manual, collecting = support.noop, support.manual, support.collecting
local assert_raises, assert_error = support.assert_raises, support.assert_error
local close_to, wrong_values, start = support.close_to, support.wrong_values, support.start
local first, assert_yield_errors = support.first, support.assert_yield_errors
local appender = support.appender

describe("timer:sleep()", function()
  -- A finalizer that stops the timer inside sleep()'s timeout(): the sleep
  -- must not wait for a wake-up that the stop already took away.
  it("a stop inside its timeout(): raises 'timer is stopped' before arming, returns nil, 'timer is stopped' after", function()
    for _, when in ipairs({ "before", "after" }) do
      local t = hwt.new({ clock = "manual" })
      local co = coroutine.create(function() return t:sleep(1) end)
      local resumed, a, b
      support.with_stop_in_timeout(t, when, function() resumed, a, b = coroutine.resume(co) end)
      assert.equals("dead", coroutine.status(co), when .. ": the coroutine did not finish")
      if when == "before" then
        assert.is_false(resumed)
        assert.matches("timer is stopped", a)
      else
        assert.is_true(resumed)
        assert.same({ nil, "timer is stopped" }, { a, b })
      end
    end
  end)

  it("interleaves coroutines on a manual clock, waking them in order of their deadlines", function()
    local t = hwt.new({ clock = "manual" })
    local log = {}
    local function sleeper(name, ...)
      local lengths = { ... }
      return coroutine.create(function()
        for _, seconds in ipairs(lengths) do
          local ok = t:sleep(seconds)
          log[#log + 1] = { name, t:now(), ok }
        end
        return "done " .. name
      end)
    end
    local cos = {
      a = sleeper("a", 3),
      b = sleeper("b", 1, 1.5),
      c = sleeper("c", 2),
      d = sleeper("d", 1),
    }
    for _, name in ipairs({ "a", "b", "c", "d" }) do
      assert.is_true(coroutine.resume(cos[name]))
      assert.equals("suspended", coroutine.status(cos[name]))
    end
    assert.equals(4, t:pending())
    assert.equals(0, t:advance(0.5))
    assert.equals(0, #log)
    assert.equals(2, t:advance(0.5))           -- t = 1: b, then d (same deadline, later)
    assert.equals(1, t:advance(1))             -- t = 2: c
    assert.equals(1, t:advance(0.5))           -- t = 2.5: b's second sleep
    assert.equals(1, t:advance(0.5))           -- t = 3: a
    assert.equals(0, t:advance(10))
    local names, times = {}, {}
    for i, entry in ipairs(log) do
      names[i], times[i] = entry[1], entry[2]
      assert.is_true(entry[3], "sleep() returns true")
    end
    assert.same({ "b", "d", "c", "b", "a" }, names)
    for i, expected in ipairs({ 1, 1, 2, 2.5, 3 }) do
      assert.is_true(close_to(expected, times[i], 1e-6), ("wake-up %d at %s"):format(i, times[i]))
    end
    for _, co in pairs(cos) do assert.equals("dead", coroutine.status(co)) end
    assert.equals(0, t:pending())
  end)

  it("does not wake a coroutine before its sleep is over (manual clock)", function()
    local t = hwt.new({ clock = "manual", tick = 0.01 })
    local woke = false
    local co = coroutine.wrap(function() woke = t:sleep(0.25) end)
    co()
    assert.equals(0, t:advance(0.24))
    assert.is_false(woke)
    assert.equals(1, t:advance(0.01))
    assert.is_true(woke)
  end)

  it("sleeps on the real clock within loose bounds", function()
    local t = hwt.new({ tick = 0.001 })
    local result = {}
    local co = coroutine.create(function()
      local t0 = hwt.now()
      result.first = t:sleep(0.05)
      result.t1 = hwt.now() - t0
      result.second = t:sleep(0.02)
      result.t2 = hwt.now() - t0
    end)
    assert.is_true(coroutine.resume(co))
    assert.equals(2, t:run())
    assert.equals("dead", coroutine.status(co))
    assert.is_true(result.first)
    assert.is_true(result.second)
    assert.is_true(result.t1 >= 0.05 - EPS and result.t1 <= 0.05 + LATE, "slept " .. result.t1)
    assert.is_true(result.t2 >= 0.07 - EPS and result.t2 <= 0.07 + 2 * LATE, "slept " .. result.t2)
    t:stop()
  end)

  it("raises an error mentioning 'coroutine' when called outside a coroutine", function()
    local t = hwt.new({ clock = "manual" })
    assert_raises("coroutine", t.sleep, t, 1)
    assert.equals(0, t:pending())
    local rt = hwt.new()
    assert_raises("coroutine", rt.sleep, rt, 0.01)
    assert.equals(0, rt:pending())
    rt:stop()
  end)

  it("passes an error raised by the resumed coroutine to on_error", function()
    local errors = {}
    local t = hwt.new({
      clock = "manual",
      on_error = function(err, to) errors[#errors + 1] = { err = err, to = to } end,
    })
    local co = coroutine.create(function()
      t:sleep(1)
      error("after-sleep-boom")
    end)
    assert.is_true(coroutine.resume(co))
    local later = false
    t:timeout(1, function() later = true end)
    assert.equals(2, t:advance(1))               -- the failing resume counts as run
    assert.equals(1, #errors)
    assert.matches("after%-sleep%-boom", tostring(errors[1].err))
    assert.is_true(hwt.is_timeout(errors[1].to))
    assert.is_true(later)                         -- poll went on
    assert.equals("dead", coroutine.status(co))
  end)

  it("returns nil and a message without yielding when the timer refuses (max_pending)", function()
    local t = hwt.new({ clock = "manual", max_pending = 1 })
    t:timeout(100, noop)
    local r1, r2
    local co = coroutine.create(function() r1, r2 = t:sleep(1) end)
    assert.is_true(coroutine.resume(co))
    assert.equals("dead", coroutine.status(co))
    assert.is_nil(r1)
    assert.matches("too many pending", r2)
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

describe("timer:sleep() inside a task", function()
  it("suspends the poll's coroutine until another drain wakes the sleeper; that poll then goes on", function()
    local tm, errors = collecting()
    local log = {}
    tm:timeout(0, function()
      log[#log + 1] = "a"
      local ok = tm:sleep(1)
      log[#log + 1] = "a woke " .. tostring(ok)
    end)
    local co, r = start(function()
      local n = tm:poll()
      log[#log + 1] = "poll returned " .. n
      return n
    end)
    assert.is_true(r[1])
    if not YIELDS then
      assert.are.same({ "a", "poll returned 1" }, log)
      assert_yield_errors(errors, 1)                    -- "sleep() cannot yield here"
      assert.are.equal(0, tm:pending())
      return
    end
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.same({ "a" }, log)
    assert.are.equal(1, tm:pending())                   -- the sleep's timeout
    assert.are.equal(0, tm:advance(0.5))
    assert.are.equal("suspended", coroutine.status(co))
    assert.are.equal(1, tm:advance(0.5))                -- wakes it: the first poll finishes inside
    assert.are.equal("dead", coroutine.status(co))
    assert.are.same({ "a", "a woke true", "poll returned 1" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, #errors)
  end)

  it("a sleep on another timer: the suspended poll runs the rest of its due tasks once woken", function()
    local tm, errors = collecting()
    local other = support.manual()
    local log = {}
    tm:timeout(0, function()
      log[#log + 1] = "a"
      local ok = other:sleep(1)
      log[#log + 1] = "a woke " .. tostring(ok)
    end)
    tm:timeout(0, appender(log, "b"))
    local co, r = start(function() return "polled", tm:poll() end)
    assert.is_true(r[1])
    if not YIELDS then
      assert.are.same({ true, "polled", 2 }, first(r, 3))
      assert.are.same({ "a", "b" }, log)
      assert_yield_errors(errors, 1)
      assert.are.equal(0, other:pending())
      return
    end
    assert.are.same({ "a" }, log)
    assert.are.equal(1, tm:pending())                   -- b, due, waits for the resume
    assert.are.equal(1, other:pending())
    local results
    other:timeout(1, function()                         -- after the sleeper's wake-up
      results = { coroutine.status(co) }
    end)
    assert.are.equal(2, other:advance(1))
    assert.are.same({ "dead" }, results)
    assert.are.same({ "a", "a woke true", "b" }, log)
    assert.are.equal(0, tm:pending())
    assert.are.equal(0, #errors)
  end)
end)
