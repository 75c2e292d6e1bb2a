-- timer:is_stopped() and hwt.is_timeout(v) (API 0.3), on every Lua.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local manual = support.manual
local function noop() end

describe("timer:is_stopped()", function()
  it("is false until stop(), then true, on either clock", function()
    for _, opts in ipairs({ {}, { clock = "manual" }, { shared = false } }) do
      local timer = hwt.new(opts)
      assert.equals(false, timer:is_stopped())
      timer:timeout(1, noop)
      assert.equals(false, timer:is_stopped())
      timer:stop()
      assert.equals(true, timer:is_stopped())
      timer:stop()                                -- a second stop changes nothing
      assert.equals(true, timer:is_stopped())
    end
  end)

  it("says what stats().stopped says", function()
    local timer = manual()
    assert.equals(timer:stats().stopped, timer:is_stopped())
    timer:stop()
    assert.equals(timer:stats().stopped, timer:is_stopped())
  end)

  it("is a method of every timer: hwt.Timer.is_stopped", function()
    assert.is_function(hwt.Timer.is_stopped)
    local timer = manual()
    assert.equals(false, hwt.Timer.is_stopped(timer))
    timer:stop()
  end)

  it("is true inside a task that stopped its timer, and for the siblings it ended", function()
    local timer = manual()
    local seen = {}
    timer:timeout(1, function()
      seen[#seen + 1] = timer:is_stopped()
      timer:stop()
      seen[#seen + 1] = timer:is_stopped()
    end)
    local sibling = timer:timeout(1, noop)
    assert.equals(1, timer:advance(1))
    assert.same({ false, true }, seen)
    assert.is_true(sibling:is_cancelled())
    assert.is_true(timer:is_stopped())
  end)

  it("is true when on_give_up hears that a retry ended with the stop", function()
    local timer = manual()
    local at_give_up
    hwt.retry(timer, function() return nil, "not yet" end, {
      delay = 1, on_give_up = function(err)
        at_give_up = { err, timer:is_stopped() }
      end,
    })
    timer:stop()
    assert.same({ "timer is stopped", true }, at_give_up)
  end)

  it("is true when a sleeper wakes because of the stop", function()
    local timer = manual()
    local woke
    local co = coroutine.create(function()
      local ok, err = timer:sleep(5)
      woke = { ok, err, timer:is_stopped() }
    end)
    assert(coroutine.resume(co))
    timer:stop()
    assert.same({ nil, "timer is stopped", true }, woke)
  end)

  if compat.has_close then
    it("is true once a to-be-closed timer left its scope", compat.compile([[
    return function()
      local kept
      do
        local timer <close> = hwt.new({ clock = "manual" })
        kept = timer
        assert.is_false(timer:is_stopped())
      end
      assert.is_true(kept:is_stopped())
    end
    ]], "@surface_spec.lua", { hwt = hwt }, _ENV))
  end

  it("raises for a bad self, naming is_stopped", function()
    local timer = manual()
    for _, bad in ipairs({ 5, "hwt.Timer", {}, false }) do
      local ok, err = pcall(timer.is_stopped, bad)
      assert.is_false(ok)
      assert.matches("calling 'is_stopped' on bad self %(hwt.Timer expected", err)
    end
    local t = timer:timeout(1, noop)
    local ok, err = pcall(timer.is_stopped, t)
    assert.is_false(ok)
    assert.matches("hwt.Timer expected, got hwt.Timeout", err)
    timer:stop()
  end)
end)

describe("hwt.is_timeout(v)", function()
  it("is true for what timeout() and every() return, of any timer, in every state", function()
    local a, b = manual(), hwt.new()
    local one = a:timeout(1, noop)
    local beat = a:every(1, noop)
    local other = b:timeout(60, noop)
    local never = b:timeout(math.huge, noop)
    for _, t in ipairs({ one, beat, other, never }) do
      assert.equals(true, hwt.is_timeout(t))
    end
    a:advance(1)                                 -- one ran, beat is expired and armed again
    assert.is_true(one:is_expired())
    assert.equals(true, hwt.is_timeout(one))
    assert.is_true(beat:cancel())
    assert.equals(true, hwt.is_timeout(beat))
    local ended = b:stop()
    assert.equals(2, #ended)
    for _, t in ipairs(ended) do assert.equals(true, hwt.is_timeout(t)) end
    a:stop()
    assert.equals(true, hwt.is_timeout(one))
  end)

  it("is true for the timeout a task gets, and for the entries of timeouts()", function()
    local timer = manual()
    local got
    local t = timer:timeout(1, function(self) got = hwt.is_timeout(self) end)
    local listed = timer:timeouts()
    assert.equals(1, #listed)
    assert.equals(true, hwt.is_timeout(listed[1]))
    timer:advance(1)
    assert.equals(true, got)
    assert.equals(true, hwt.is_timeout(t))
    timer:stop()
  end)

  it("is true for a timeout whose timer was collected", function()
    local t
    do
      local timer = hwt.new({ clock = "manual" })
      t = timer:timeout(1, noop)
    end
    for _ = 1, 4 do collectgarbage("collect") end
    assert.is_nil(t:timer())
    assert.equals(true, hwt.is_timeout(t))
  end)

  it("is false for anything else", function()
    local timer = manual()
    local handle = hwt.retry(timer, function() return nil end, { on_give_up = noop })
    local lookalike = setmetatable({}, { __metatable = "hwt.Timeout" })
    local others = {
      nil, false, true, 0, 1.5, "hwt.Timeout", {}, lookalike, noop, print,
      coroutine.create(noop), io.stdout, timer, handle, hwt.Timeout, hwt.Timer, hwt,
    }
    for i = 1, 17 do
      assert.equals(false, hwt.is_timeout(others[i]), "value #" .. i .. " (" .. tostring(others[i]) .. ")")
    end
    assert.equals(false, hwt.is_timeout())
    if jit then
      local ffi = require("ffi")
      assert.equals(false, hwt.is_timeout(ffi.new("int[1]")))
    end
    handle:cancel()
    timer:stop()
  end)

  it("returns one boolean", function()
    local timer = manual()
    assert.equals(1, select("#", hwt.is_timeout(timer:timeout(1, noop))))
    assert.equals(1, select("#", hwt.is_timeout(nil)))
    timer:stop()
  end)
end)
