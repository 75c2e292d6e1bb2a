-- api_spec.lua: the contract of /work/shared/API.md, checked on the manual
-- clock (time moves only by timer:advance(), so every check is exact).
-- Real-clock, thread and helper (sleep/retry) specs live in other files.
local hwt = require("hwt")
local compat = require("compat")

local support = require("support")

local unpack = compat.unpack
local manual, error_of, assert_raises = support.manual, support.error_of, support.assert_raises
local has_text, fd_readable = support.has_text, support.fd_readable
local logger, ns, child_output = support.logger, support.ns, support.child_output

-- ---- module -----------------------------------------------------------------

-- ---- stop -----------------------------------------------------------------------

describe("timer:stop", function()
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
end)

-- ---- nothing lost, dropped handles --------------------------------------------

describe("nothing lost", function()
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
    assert.are.equal("hwt.Timeout", getmetatable(got))
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
end)
