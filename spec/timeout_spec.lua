-- timeout_spec.lua: timer:timeout() and the Timeout it returns: its task and
-- arguments, the delay (numeric strings, math.huge, huge delays that clamp),
-- max_pending, the Timeout's methods (is_expired, timer, task, remaining,
-- deadline, tostring, <close>), and bad arguments to timeout(). Exact checks
-- use the manual clock (doc/api.md).
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local pack, unpack, MAXINT = compat.pack, compat.unpack, compat.maxinteger
local MININT, MAX_DELAY, noop = compat.mininteger, support.MAX_DELAY, support.noop
local manual, show, error_of = support.manual, support.show, support.error_of
local assert_raises, assert_error = support.assert_raises, support.assert_error
local has_text, assert_close, call = support.has_text, support.assert_close, support.call
local state_of, books = support.state_of, support.books

describe("timer:timeout", function()
  it("returns a Timeout and runs task(timeout, ...) once, with the very same timeout", function()
    local timer = manual()
    local calls = {}
    local t = timer:timeout(0.5, function(...) calls[#calls + 1] = compat.pack(...) end, "a", 2, nil, false)
    assert.are.equal(1, timer:pending())
    assert.are.equal(0, timer:advance(0.49))
    assert.are.equal(1, timer:advance(0.01))
    assert.are.equal(0, timer:advance(10))
    assert.are.equal(1, #calls)
    local args = calls[1]
    assert.are.equal(5, args.n)
    assert.is_true(rawequal(t, args[1]))
    assert.are.equal("a", args[2])
    assert.are.equal(2, args[3])
    assert.is_nil(args[4])
    assert.is_false(args[5])
    assert.are.equal(0, timer:pending())
  end)

  it("accepts up to many extra arguments", function()
    local timer = manual()
    local extra = {}
    for i = 1, 100 do extra[i] = i end
    local got
    timer:timeout(0, function(_, ...) got = { ... } end, unpack(extra))
    timer:poll()
    assert.are.same(extra, got)
  end)

  it("rejects a negative or NaN delay, naming 'delay'", function()
    local timer = manual()
    for _, bad in ipairs({ -1, -1e-9, -math.huge, 0 / 0 }) do
      assert_raises("delay", timer.timeout, timer, bad, function() end)
    end
    assert.are.equal(0, timer:pending())
  end)

  it("rejects a non-number delay with luaL_checknumber's message, accepts numeric strings", function()
    local timer = manual()
    for _, bad in ipairs({ "abc", {}, true }) do
      assert_raises("number expected", timer.timeout, timer, bad, function() end)
    end
    assert_raises("number expected", function() return timer:timeout(nil, function() end) end)
    local ran = false
    assert.is_not_nil(timer:timeout("0.5", function() ran = true end))
    timer:advance(0.49)
    assert.is_false(ran)
    timer:advance(0.01)
    assert.is_true(ran)
  end)

  it("rejects a task that is not a function, callable or TimerTask, naming 'task'", function()
    local timer = manual()
    local bad_tasks = { 42, "print", true, {}, { run = 1 }, { run = "x" }, setmetatable({}, {}),
                        setmetatable({}, { __index = { run = 1 } }) }
    for _, bad in ipairs(bad_tasks) do
      assert_raises("task", timer.timeout, timer, 1, bad)
      assert_raises("task", timer.every, timer, 1, bad)
    end
    assert_raises("task", function() return timer:timeout(1) end)
    assert_raises("task", function() return timer:timeout(1, nil) end)
    assert.are.equal(0, timer:pending())
  end)

  it("accepts a callable table: called as task(timeout, ...)", function()
    local timer = manual()
    local seen
    local task = setmetatable({}, { __call = function(self, timeout, a, b) seen = { self, timeout, a, b } end })
    local t = timer:timeout(0, task, "x", "y")
    assert.is_true(rawequal(task, t:task()))
    timer:poll()
    assert.is_true(rawequal(task, seen[1]))
    assert.is_true(rawequal(t, seen[2]))
    assert.are.equal("x", seen[3])
    assert.are.equal("y", seen[4])
  end)

  it("accepts a TimerTask table: called as task:run(timeout, ...)", function()
    local timer = manual()
    local seen
    local task = { name = "tt" }
    function task:run(timeout, a) seen = { self, timeout, a } end
    local t = timer:timeout(0, task, "arg")
    assert.is_true(rawequal(task, t:task()))
    assert.are.equal(1, timer:poll())
    assert.is_true(rawequal(task, seen[1]))
    assert.is_true(rawequal(t, seen[2]))
    assert.are.equal("arg", seen[3])
  end)

  it("accepts a TimerTask whose run is inherited or is itself a callable", function()
    local timer = manual()
    local log = {}
    local class = { run = function(self, _, a) log[#log + 1] = self.id .. a end }
    class.__index = class
    timer:timeout(0, setmetatable({ id = "inherited" }, class), "!")
    local callable_run = setmetatable({}, { __call = function(_, self, _, a) log[#log + 1] = self.id .. a end })
    timer:timeout(0, { id = "callable-run", run = callable_run }, "?")
    assert.are.equal(2, timer:poll())
    assert.are.same({ "inherited!", "callable-run?" }, log)
  end)

  it("checks task kinds in order: a callable table with a run field is called, not run", function()
    local timer = manual()
    local how
    local task = setmetatable({ run = function() how = "run" end }, { __call = function() how = "call" end })
    timer:timeout(0, task)
    timer:poll()
    assert.are.equal("call", how)
  end)

  it("every timeout ends exactly one way: ran once, cancelled, or returned by stop()", function()
    local timer = manual({ tick = 0.01, wheel_size = 8 })
    local runs = {}
    local handles = {}
    local function task(_, id) runs[id] = (runs[id] or 0) + 1 end
    for id = 1, 300 do
      handles[id] = timer:timeout((id * 7919 % 1000) / 250, task, id)
    end
    local cancelled = {}
    for id = 3, 300, 3 do
      if handles[id]:cancel() then cancelled[id] = true end
    end
    timer:advance(1.2)
    for id = 5, 300, 5 do
      if handles[id]:cancel() then cancelled[id] = true end
    end
    timer:advance(0.9)
    local stopped = {}
    for _, t in ipairs(timer:stop()) do
      for id, h in pairs(handles) do if rawequal(h, t) then stopped[id] = true end end
    end
    for id = 1, 300 do
      local ways = (runs[id] and 1 or 0) + (cancelled[id] and 1 or 0) + (stopped[id] and 1 or 0)
      assert.are.equal(1, ways, "timeout " .. id)
      assert.is_true(runs[id] == nil or runs[id] == 1)
      assert.are.equal(runs[id] ~= nil, handles[id]:is_expired())
      assert.are.equal(runs[id] == nil, handles[id]:is_cancelled())
    end
    local s = timer:stats()
    local n_runs, n_cancel = 0, 0
    for _ in pairs(runs) do n_runs = n_runs + 1 end
    for _ in pairs(cancelled) do n_cancel = n_cancel + 1 end
    for _ in pairs(stopped) do n_cancel = n_cancel + 1 end
    assert.are.equal(n_runs, s.fired)
    assert.are.equal(n_cancel, s.cancelled)
  end)
end)

describe("timer:timeout and timer:every with hostile arguments", function()
  it("a missing or non-number delay is argument #1, 'number expected'", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    assert_error(call.timeout, pack(tm), "bad argument #1 to 'timeout'", "number expected")
    for _, v in ipairs({ "x", "", {}, true, print, io.stdout, t, tm }) do
      assert_error(call.timeout, pack(tm, v, noop), "bad argument #1 to 'timeout'", "number expected")
      assert_error(call.every, pack(tm, v, noop), "bad argument #1 to 'every'", "number expected")
    end
    assert.are.equal(1, tm:pending())
    tm:stop()
  end)

  it("a negative or NaN delay names 'delay'", function()
    local tm = manual()
    for _, v in ipairs({ -1, -1e-300, -0.5, -math.huge, MININT, -2 ^ 63, 0 / 0, -(0 / 0), "-1", "nan" }) do
      local ok, err = pcall(call.timeout, tm, v, noop)
      assert(not ok, "delay " .. show(v) .. " was accepted")
      err = tostring(err)
      assert(err:find("bad argument #1 to 'timeout'", 1, true), err)
      assert(err:find("delay must be a number >= 0", 1, true) or err:find("number expected", 1, true), err)
    end
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("delay math.huge means never (until cancel/stop)", function()
    local tm = manual()
    local b = books(tm)
    local t = b:timeout(math.huge, noop)
    assert.are.equal(math.huge, t:remaining())
    assert.matches("never due", tostring(t), 1, true)
    assert.are.equal(0, tm:advance(1e9))
    assert.are.equal(0, tm:advance(1e308))
    assert.are.equal(1, tm:pending())
    b:check()
    assert.is_true(t:cancel())
    b:check()
    tm:stop()
  end)

  it("huge finite delays clamp to ~146 years, never wrap to now, never fire within a long advance", function()
    local tm = manual()
    local b = books(tm)
    local list = {}
    for _, v in ipairs({ 1e308, 2 ^ 63, 2 ^ 64, MAXINT, 1e19, MAX_DELAY * 2, "1e300" }) do
      local t = b:timeout(v, noop)
      local r = t:remaining()
      assert(r > 4.6e9 and r <= MAX_DELAY + 1e-6, show(v) .. " -> remaining " .. show(r))
      list[#list + 1] = t
    end
    assert.are.equal(0, tm:poll())
    assert.are.equal(0, tm:advance(0))
    for _ = 1, 4 do assert.are.equal(0, tm:advance(1e9)) end          -- 127 years
    assert.are.equal(#list, tm:pending())
    b:check()
    b:stop()
    b:check()
  end)

  it("numeric strings, -0.0 and sub-nanosecond delays are accepted", function()
    local tm = manual()
    local b = books(tm)
    local order = {}
    b:timeout("0.5", function() order[#order + 1] = "0.5" end)
    b:timeout(" 0x2 ", function() order[#order + 1] = "hex 2" end)
    b:timeout(-0.0, function() order[#order + 1] = "-0.0" end)
    b:timeout(1e-12, function() order[#order + 1] = "1e-12" end)
    tm:advance(0)
    assert.are.same({ "-0.0", "1e-12" }, order)
    tm:advance(2)
    assert.are.same({ "-0.0", "1e-12", "0.5", "hex 2" }, order)
    b:check()
    tm:stop()
  end)

  it("a missing or non-callable task is argument #2, 'task must be ...'", function()
    local tm = manual()
    local t = tm:timeout(1, noop)
    local bad = { nil, "x", "print", 42, true, false, {}, { run = 42 }, { run = "f" }, io.stdout, t, tm,
                  setmetatable({}, { __index = { run = 1 } }) }
    for i = 1, 13 do
      local v = bad[i]
      assert_error(call.timeout, pack(tm, 1, v), "bad argument #2 to 'timeout'", "task must be")
      assert_error(call.every, pack(tm, 1, v), "bad argument #2 to 'every'", "task must be")
    end
    assert_error(call.timeout, pack(tm, 1), "bad argument #2 to 'timeout'", "task must be")
    assert.are.equal(1, tm:pending())
    tm:stop()
  end)

  it("a TimerTask table (run via __index) is called as task:run(timeout, ...)", function()
    local tm = manual()
    local got
    local class = { run = function(self, timeout, a, b) got = { self, timeout, a, b } end }
    local task = setmetatable({}, { __index = class })
    local t = tm:timeout(0, task, "a", "b")
    tm:advance(0)
    assert.are.same({ task, t, "a", "b" }, got)
    tm:stop()
  end)

  it("a task whose __call is not callable: refused at scheduling or reported to on_error", function()
    local errors = {}
    local tm = manual({ on_error = function(err) errors[#errors + 1] = tostring(err) end })
    local ok, t = pcall(tm.timeout, tm, 0, setmetatable({}, { __call = 42 }))
    if ok then
      assert.are.equal(1, tm:advance(0))
      assert.are.equal(1, #errors)
      assert.is_true(t:is_expired())
    else
      assert.matches("task", tostring(t), 1, true)
    end
    tm:stop()
  end)

  it("250 task arguments (nil holes kept) are passed; the 251st is refused with a clear error", function()
    local tm = manual()
    local args = {}
    for i = 1, 250 do args[i] = (i % 7 ~= 0) and i or nil end
    local got
    tm:timeout(0, function(_, ...) got = pack(...) end, unpack(args, 1, 250))
    tm:advance(0)
    assert.are.equal(250, got.n)
    for i = 1, 250 do assert.are.equal(args[i], got[i]) end
    args[251] = 251
    assert_error(call.timeout, pack(tm, 0, noop, unpack(args, 1, 251)), "too many task arguments")
    assert.are.equal(0, tm:pending())
    tm:stop()
  end)

  it("a finalizer that stops the timer inside timeout()/every() makes that call raise 'timer is stopped'", function()
    -- Whether `fn` is on the stack (of the finalizer): it ran inside fn.
    local function on_stack(fn)
      for level = 2, math.huge do
        local info = debug.getinfo(level, "f")
        if not info then return false end
        if info.func == fn then return true end
      end
    end
    if support.cdata_timeouts then
      -- On LuaJIT timeout() is Lua code (lua/hwt/jit.lua), where a finalizer
      -- runs only at some allocations, and none inside compiled code. A
      -- count hook stands in for it: it stops the timer at each instruction
      -- of the call in turn, so every point a finalizer could reach is tried.
      jit.off()
      finally(function() debug.sethook(); jit.on() end)
      for _, method in ipairs({ "timeout", "every" }) do
        local fn = hwt.Timer[method]
        local gone = setmetatable({}, { __mode = "v" })
        local tried = 0
        for at = 1, 10000 do
          local tm = manual()
          local stopped_inside = false
          local task = function() end
          gone[#gone + 1] = task
          debug.sethook(function()
            if not stopped_inside and on_stack(fn) then stopped_inside = true; tm:stop() end
          end, "", at)
          local ok, t = pcall(tm[method], tm, 1, task, "arg")
          debug.sethook()
          if not stopped_inside then break end
          tried = tried + 1
          if ok then
            assert.is_true(t:is_cancelled(), method .. "() returned a timeout its stop missed")
          else
            assert.matches("timer is stopped", tostring(t), 1, true)
          end
          assert.are.equal(0, tm:pending())
          assert.are.equal(0, #tm:timeouts())
        end
        assert.is_true(tried > 10, method .. "(): the hook never stopped the timer inside")
        collectgarbage()
        collectgarbage()
        assert.is_nil(next(gone), "a task of a stopped timer is still held")
      end
      return
    end
    -- The finalizer's object is dropped just before each call. On Lua 5.1
    -- the collector is also set to start a cycle at once and
    -- finish it in one step, so the first allocation inside the call runs
    -- the finalizer; otherwise whether it falls inside can depend on the
    -- sizes of the objects the call allocates. Elsewhere the loop tries
    -- until it does.
    if _VERSION == "Lua 5.1" then
      local pause = collectgarbage("setpause", 0)
      local stepmul = collectgarbage("setstepmul", 1e6)
      finally(function()
        collectgarbage("setpause", pause)
        collectgarbage("setstepmul", stepmul)
      end)
    end
    for _, method in ipairs({ "timeout", "every" }) do
      local fn = hwt.Timer[method]
      local tm = manual()
      local finalized, inside = 0, false
      local function arm(timer)
        return compat.gc_object(function() finalized = finalized + 1; inside = on_stack(fn); timer:stop() end)
      end
      local armed = arm(tm)
      local outcome
      for _ = 1, 1e6 do
        local before = finalized
        armed = nil
        local ok, t, err = pcall(tm[method], tm, 1, noop)
        if finalized ~= before then
          if inside then
            outcome = { ok = ok, t = t, err = err }
            break
          end
          -- It ran after the call had returned (Lua 5.1 collects right after
          -- a C function returns): stop() took that timeout back. Again.
          assert.are.equal(0, tm:pending())
          tm = manual()
          armed = arm(tm)
        end
      end
      assert.is_truthy(outcome, "the finalizer never ran inside " .. method .. "()")
      assert(not outcome.ok and tostring(outcome.t):find("timer is stopped", 1, true),
        ("%s() while a finalizer stopped the timer returned %s, %s"):format(
          method, show(outcome.t), show(outcome.err)))
      assert.are.equal(0, tm:pending())
    end
  end)
end)

describe("max_pending", function()
  it("max_pending: returns nil, message once reached; frees up after run or cancel", function()
    local timer = manual({ max_pending = 2 })
    local a = timer:timeout(1, function() end)
    local b = timer:timeout(2, function() end)
    assert.is_not_nil(a)
    assert.is_not_nil(b)
    local t, err = timer:timeout(3, function() end)
    assert.is_nil(t)
    assert.are.equal("too many pending timeouts (max_pending = 2)", err)
    local p, perr = timer:every(3, function() end)
    assert.is_nil(p)
    assert.are.equal("too many pending timeouts (max_pending = 2)", perr)
    assert.are.equal(2, timer:pending())
    assert.are.equal(2, timer:stats().pending)
    assert.is_true(a:cancel())
    assert.is_not_nil(timer:timeout(3, function() end))
    assert.is_nil((timer:timeout(3, function() end)))
    assert.are.equal(1, timer:advance(2))  -- b runs
    assert.is_not_nil(timer:timeout(3, function() end))
    assert.are.equal(2, timer:pending())
  end)

  it("a refused timeout does not count anywhere and never runs", function()
    local timer = manual({ max_pending = 1 })
    local ran = {}
    timer:timeout(1, function() ran[#ran + 1] = "kept" end)
    local refused = timer:timeout(0.5, function() ran[#ran + 1] = "refused" end)
    assert.is_nil(refused)
    assert.are.equal(1, timer:advance(5))
    assert.are.same({ "kept" }, ran)
    local s = timer:stats()
    assert.are.equal(1, s.fired)
    assert.are.equal(0, s.cancelled)
    assert.are.equal(0, s.pending)
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("a refused <close> timeout is nil and closes without error", compat.compile([[
    return function()
      local timer = manual({ max_pending = 1 })
      timer:timeout(1, function() end)
      local ok = pcall(function()
        local t <close> = timer:timeout(1, function() end)
        assert.is_nil(t)
      end)
      assert.is_true(ok)
    end
    ]], "@timeout_spec.lua", { manual = manual }, _ENV))
  end

  it("a one-shot may re-arm itself from inside its task at max_pending", function()
    local timer = manual({ max_pending = 1 })
    local runs, errs = 0, {}
    local function task(self)
      runs = runs + 1
      if runs < 5 then
        local t, err = self:timer():timeout(1, self:task())
        if not t then errs[#errs + 1] = err end
      end
    end
    assert.is_not_nil(timer:timeout(1, task))
    for _ = 1, 6 do timer:advance(1) end
    assert.are.same({}, errs)
    assert.are.equal(5, runs)
  end)

  it("max_pending still refuses inside a task when the others fill it", function()
    local timer = manual({ max_pending = 2 })
    local result
    timer:timeout(1, function()
      assert.is_not_nil(timer:timeout(1, function() end))
      result = { timer:timeout(1, function() end) }
    end)
    timer:timeout(5, function() end)
    timer:advance(1)
    assert.is_nil(result[1])
    assert.are.equal("too many pending timeouts (max_pending = 2)", result[2])
  end)
end)

describe("huge delays", function()
  it("clamp and never wrap around to now: 1e300 stays pending over a long advance", function()
    local timer = manual({ tick = 0.01 })
    local ran = false
    local t = timer:timeout(1e300, function() ran = true end)
    local t2 = timer:timeout(2 ^ 63 / 1e9, function() ran = true end)
    local t3 = timer:timeout(1e10, function() ran = true end)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:advance(1e9))   -- ~31.7 years
    assert.is_false(ran)
    assert.are.equal(3, timer:pending())
    for _, x in ipairs({ t, t2, t3 }) do
      assert.is_true(x:remaining() > 1e9 and x:remaining() < math.huge)
      assert.is_false(x:is_expired())
    end
    assert.are.equal(0, timer:stats().due)
  end)

  it("clamp also when scheduled after the clock moved", function()
    local timer = manual()
    timer:advance(1e6)
    local ran = false
    timer:timeout(1e300, function() ran = true end)
    timer:every(1e300, function() ran = true end)
    assert.are.equal(0, timer:poll())
    assert.are.equal(0, timer:advance(1e8))
    assert.is_false(ran)
    assert.are.equal(2, timer:pending())
  end)

  it("math.huge means never: pending until cancel or stop, remaining() == math.huge", function()
    local timer = manual()
    local ran = false
    local a = timer:timeout(math.huge, function() ran = true end)
    local b = timer:timeout(math.huge, function() ran = true end)
    assert.are.equal(0, timer:advance(1e9))
    assert.are.equal(0, timer:advance(4e9))
    assert.are.equal(0, timer:advance(1e10))
    assert.is_false(ran)
    assert.are.equal(2, timer:pending())
    assert.are.equal(math.huge, a:remaining())
    assert.are.equal(0, timer:stats().due)
    assert.is_true(a:cancel())
    local stopped = timer:stop()
    assert.are.equal(1, #stopped)
    assert.is_true(rawequal(b, stopped[1]))
    assert.is_false(ran)
  end)
end)

describe("Timeout methods", function()
  it("is_expired() is false until the task starts, true from its start on", function()
    local timer = manual()
    local inside
    local t = timer:timeout(1, function(self) inside = self:is_expired() end)
    assert.is_false(t:is_expired())
    timer:advance(0.5)
    assert.is_false(t:is_expired())
    timer:advance(0.5)
    assert.is_true(inside)
    assert.is_true(t:is_expired())
  end)

  it("is_expired() is false for a due timeout not yet polled", function()
    local timer = manual()
    local t = timer:timeout(0, function() end)
    assert.is_false(t:is_expired())
    assert.are.equal(1, timer:stats().due)
    assert.is_false(t:is_expired())
  end)

  it("timer() is the very object hwt.new returned; task() is the original task", function()
    local timer = manual()
    local fn = function() end
    local t = timer:timeout(1, fn)
    assert.is_true(rawequal(timer, t:timer()))
    assert.is_true(rawequal(fn, t:task()))
    timer:advance(1)
    assert.is_true(rawequal(timer, t:timer()))
    if support.cdata_timeouts then
      assert.is_nil(t:task())                          -- an ended one let go of it there
    else
      assert.is_true(rawequal(fn, t:task()))
    end
    local p = timer:every(1, fn)
    assert.is_true(rawequal(timer, p:timer()))
    assert.is_true(rawequal(fn, p:task()))
  end)

  it("task() allows re-submitting the task, as in Netty", function()
    local timer = manual()
    local runs = 0
    local t = timer:timeout(1, function(self)
      runs = runs + 1
      if runs < 3 then self:timer():timeout(1, self:task()) end
    end)
    assert.is_not_nil(t)
    timer:advance(1)
    timer:advance(1)
    timer:advance(1)
    timer:advance(1)
    assert.are.equal(3, runs)
  end)

  it("remaining() is the time to the deadline, 0 once due, run or cancelled", function()
    local timer = manual({ tick = 0.01 })
    local t = timer:timeout(1.5, function() end)
    assert.are.equal(1.5, t:remaining())
    timer:advance(0.5)
    assert.are.equal(1.0, t:remaining())
    timer:advance(0.75)
    assert.is_near(0.25, t:remaining(), 1e-9)
    timer:advance(0.25)
    assert.are.equal(0, t:remaining())
    assert.is_true(t:is_expired())
    local c = timer:timeout(2, function() end)
    assert.are.equal(2, c:remaining())
    c:cancel()
    assert.are.equal(0, c:remaining())
    local d = timer:timeout(0, function() end)
    assert.are.equal(0, d:remaining())  -- due, waiting for poll
    timer:poll()
    assert.are.equal(0, d:remaining())
  end)

  it("remaining() is 0 inside the running task and math.huge for a math.huge delay", function()
    local timer = manual()
    local inside
    timer:timeout(1, function(self) inside = self:remaining() end)
    timer:advance(2)
    assert.are.equal(0, inside)
    local never = timer:timeout(math.huge, function() end)
    assert.are.equal(math.huge, never:remaining())
    timer:advance(1e6)
    assert.are.equal(math.huge, never:remaining())
  end)

  it("tostring() shows the state: pending, due, running, expired, cancelled", function()
    local timer = manual()
    local running_text
    local t = timer:timeout(1, function(self) running_text = tostring(self) end)
    local c = timer:timeout(1, function() end)
    assert.is_true(has_text(tostring(t), "pending"))
    c:cancel()
    assert.is_true(has_text(tostring(c), "cancelled"))
    timer:advance(1)
    assert.is_true(has_text(running_text, "running"))
    assert.is_true(has_text(tostring(t), "expired"))
    local d = timer:timeout(0, function() end)
    assert.is_true(has_text(tostring(d), "due"))
    assert.is_false(has_text(tostring(d), "pending"))
    assert.are.equal("hwt.Timeout", tostring(t):sub(1, 11))
  end)

  it("tostring() shows the time to the deadline", function()
    local timer = manual()
    local t = timer:timeout(1.5, function() end)
    assert.is_true(has_text(tostring(t), "1.5"), tostring(t))
    timer:advance(1)
    assert.is_true(has_text(tostring(t), "0.5"), tostring(t))
    assert.are_not.equal(tostring(t), tostring(timer:timeout(math.huge, function() end)))
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("<close>: a to-be-closed Timeout cancels itself on scope exit", compat.compile([[
    return function()
      local timer = manual()
      local ran = false
      local handle
      do
        local t <close> = timer:timeout(1, function() ran = true end)
        handle = t
        assert.are.equal(1, timer:pending())
      end
      assert.is_true(handle:is_cancelled())
      assert.are.equal(0, timer:pending())
      timer:advance(2)
      assert.is_false(ran)
    end
    ]], "@timeout_spec.lua", { manual = manual }, _ENV))
  end

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("<close>: also on an error exit, and harmless after the task ran", compat.compile([[
    return function()
      local timer = manual()
      local handle
      local ok = pcall(function()
        local t <close> = timer:timeout(1, function() end)
        handle = t
        error("leave the scope")
      end)
      assert.is_false(ok)
      assert.is_true(handle:is_cancelled())
      local ran = 0
      do
        local t <close> = timer:timeout(0, function() ran = ran + 1 end)
        timer:poll()
        assert.is_true(t:is_expired())
      end
      assert.are.equal(1, ran)
      assert.are.equal(1, timer:stats().cancelled)  -- only the first one
    end
    ]], "@timeout_spec.lua", { manual = manual }, _ENV))
  end

  it("methods reject a non-Timeout self", function()
    local timer = manual()
    local t = timer:timeout(1, function() end)
    for _, name in ipairs({ "cancel", "is_cancelled", "is_expired", "timer", "task", "remaining" }) do
      error_of(t[name], {})
      error_of(t[name], timer)
    end
    error_of(timer.timeout, t, 1, function() end)
  end)

  it("tostring shows pending, running, expired, pending (periodic) and never due", function()
    local tm = manual({ tick = 0.001 })
    local seen
    local t = tm:timeout(0.001, function(self) seen = state_of(self) end)
    local p = tm:every(0.5, noop)
    local n = tm:timeout(math.huge, noop)
    assert.are.equal("pending", state_of(t))
    assert.are.equal("pending", state_of(p))
    assert.matches("never due", tostring(n), 1, true)
    tm:advance(0.001)
    assert.are.equal("running", seen)
    assert.are.equal("expired", state_of(t))
    tm:advance(0.5)
    assert.are.equal("pending (periodic)", state_of(p))
    tm:stop()
  end)

  -- `<close>` parses on Lua 5.4+ only: compiled where it does.
  if compat.has_close then
    it("<close> cancels on scope exit, also when the scope raises", compat.compile([[
    return function()
      local tm = manual()
      local t1, t2
      do
        local t <close> = tm:timeout(1, noop)
        t1 = t
      end
      assert.is_true(t1:is_cancelled())
      local ok = pcall(function()
        local t <close> = tm:timeout(1, noop)
        t2 = t
        error("leaving")
      end)
      assert.is_false(ok)
      assert.is_true(t2:is_cancelled())
      local t3 = tm:timeout(0, noop)
      tm:advance(0)
      debug.getmetatable(t3).__close(t3, "an error value")   -- closing an expired one does nothing
      assert.is_true(t3:is_expired())
      assert.is_false(t3:is_cancelled())
      assert.are.equal(0, tm:pending())
      tm:stop()
    end
    ]], "@timeout_spec.lua", { manual = manual, noop = noop }, _ENV))
  end
end)

describe("t:deadline()", function()
  it("manual clock: exactly now + delay", function()
    local timer = manual()
    assert.are.equal(0.5, timer:timeout(0.5, noop):deadline())
    assert.are.equal(0, timer:timeout(0, noop):deadline())
    timer:advance(0.25)
    assert.are.equal(0.75, timer:timeout(0.5, noop):deadline())
    assert.are.equal(10.25, timer:timeout(10, noop):deadline())
    assert.are.equal(1.25, timer:every(1, noop):deadline())
    timer:stop()
  end)

  it("manual clock: an odd delay is not rounded to the tick", function()
    local timer = manual({ tick = 1 / 60 })
    assert_close(0.123456, timer:timeout(0.123456, noop):deadline(), 1e-9, "deadline")
    assert_close(0.5, timer:timeout(0.5, noop):deadline(), 0, "deadline")
    timer:stop()
  end)

  it("is math.huge for a timeout that never fires", function()
    local timer = manual()
    assert.are.equal(math.huge, timer:timeout(math.huge, noop):deadline())
    local real = hwt.new()
    assert.are.equal(math.huge, real:timeout(math.huge, noop):deadline())
    real:stop()
    timer:stop()
  end)

  it("real clock: close to hwt.now() + delay, on the timer:now() scale", function()
    local timer = hwt.new()
    local before = hwt.now()
    local t = timer:timeout(2, noop)
    local after = hwt.now()
    local d = t:deadline()
    assert.is_number(d)
    assert.is_true(d >= before + 2 - 1e-6 and d <= after + 2 + 1e-6,
      ("deadline %.9f not within [%.9f, %.9f] + 2"):format(d, before, after))
    assert.is_true(math.abs((d - timer:now()) - t:remaining()) < 0.05)
    timer:stop()
  end)

  it("moves with reset()", function()
    local timer = manual()
    local t = timer:timeout(1, noop)
    timer:advance(0.5)
    assert.is_true(t:reset(4))
    assert.are.equal(4.5, t:deadline())
    assert.is_true(t:reset())
    assert.are.equal(1.5, t:deadline())
    timer:stop()
  end)

  it("periodic: the next beat", function()
    local timer = manual()
    local e = timer:every(1, noop)
    assert.are.equal(1, e:deadline())
    timer:advance(1)
    assert.are.equal(2, e:deadline())
    timer:advance(1.5)                 -- clock 2.5: beat 2 ran, next is 3
    assert.are.equal(3, e:deadline())
    timer:advance(2.5)                 -- clock 5: one run (missed beats skipped), next beat strictly later
    assert.are.equal(6, e:deadline())
    timer:run_for(2)                   -- beats 6 and 7
    assert.are.equal(8, e:deadline())
    timer:stop()
  end)
end)
