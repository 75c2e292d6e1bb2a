-- v02_timer_spec.lua: black-box specs of the hwt 0.2 Timer/Timeout additions
-- of /work/shared/API.md ("Additions in hwt 0.2"): t:reset([delay]),
-- t:deadline(), timer:run_for(seconds) (both clocks), timer:now(),
-- timer:timeouts(), stats().late_p50 / late_p99, and exact deadlines on the
-- manual clock. Written from the contract only.
--
-- Exact checks use the manual clock and dyadic fractions (0.5, 0.25, 1.5 ...)
-- wherever a value is compared with ==, so that no float rounding can matter.
-- Real-clock checks use loose bounds only.
local hwt = require("hwt")
local compat = require("compat")

local unpack = compat.unpack

local support = require("support")
local manual, noop, error_of, assert_raises = support.manual, support.noop, support.error_of, support.assert_raises
local close_to, assert_close, logger = support.close_to, support.assert_close, support.logger
local assert_same_objects, includes = support.assert_same_objects, support.includes
local sleep = support.sleep

-- Raises, with a message containing at least one of the substrings.
local function assert_raises_any(substrings, f, ...)
  local message = error_of(f, ...)
  for _, s in ipairs(substrings) do
    if message:find(s, 1, true) then return message end
  end
  error(("error message %q includes none of %s"):format(message, table.concat(substrings, ", ")), 2)
end

-- Nearest-rank percentile of a list of numbers (p in 0..100).
local function nearest_rank(values, p)
  local sorted = { unpack(values) }
  table.sort(sorted)
  local rank = math.ceil(p / 100 * #sorted)
  if rank < 1 then rank = 1 end
  return sorted[rank]
end

local function within_eighth(expected, actual, what)
  assert.is_number(actual, what)
  assert.is_true(math.abs(actual - expected) <= expected / 8 + 1e-9,
    ("%s: %.9g is not within 1/8 of %.9g"):format(what, actual, expected))
end

-- ---- module ----------------------------------------------------------------

-- ---- timer:run_for() on the manual clock ---------------------------------------------

describe("timer:run_for() (manual clock)", function()
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
