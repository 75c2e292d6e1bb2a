-- finalizer_spec.lua: a Lua allocation can run a collector step, and the
-- step any finalizer, which can call hwt on the same timer. Each case queues
-- finalizers that attack the timer at the next allocations, makes the call
-- whose allocations run them, and checks that the call saw the attack and
-- still did the right thing (under `make test` also against the ASan+UBSan
-- build). test/RELIABILITY.md, round three.
local hwt = require("hwt")
local support = require("support")

local function noop() end

-- Runs call() with finalizers queued that run attack() at its allocations;
-- returns how many finalizers ran inside it and what call() returned. Tried again a
-- few times where the collector steps only every kilobyte or so (not 5.4),
-- so that an attack lands inside the call.
-- The attack runs once per try, however many finalizers run.
local function attacked(attack, call)
  for _ = 1, 50 do
    local done = false
    local control = support.finalizers_at_next_allocations(40, function()
      if not done then done = true; attack() end
    end)
    control.arm()
    local result = call()
    control.armed = false
    local hits = control.hits
    control.finish()
    if hits > 0 then return hits, result end
  end
  return 0
end

describe("finalizers at the allocations of hwt's calls", function()
  after_each(function() support.collector_steps_often(false) end)

  it("timeouts() lists exactly the pending timeouts when a finalizer arms more meanwhile", function()
    local timer = support.manual()
    for i = 1, 300 do timer:timeout(10 + i, noop) end
    local hits, list = attacked(function()
      for i = 1, 100 do timer:timeout(1000 + i, noop) end
    end, function() return timer:timeouts() end)
    assert.is_true(hits > 0, "no finalizer ran inside timeouts()")
    local pending = timer:pending()
    assert.is_true(#list >= 300 and #list <= pending)
    local last = -1
    for _, t in ipairs(list) do
      assert.is_true(hwt.is_timeout == nil or hwt.is_timeout(t))
      assert.is_false(t:is_cancelled())
      assert.is_true(t:deadline() >= last)
      last = t:deadline()
    end
    timer:stop()
  end)

  it("timeouts() holds no stale entry when a finalizer cancels timeouts meanwhile", function()
    local timer = support.manual()
    local armed = {}
    for i = 1, 300 do armed[i] = timer:timeout(10 + i, noop) end
    local hits, list = attacked(function()
      for i = #armed, 1, -1 do armed[i]:cancel(); armed[i] = nil end
    end, function() return timer:timeouts() end)
    assert.is_true(hits > 0, "no finalizer ran inside timeouts()")
    for _, t in ipairs(list) do assert.is_false(t:is_cancelled()) end
    assert.are.equal(timer:pending(), #list)
    timer:stop()
  end)

  -- reset() of a timeout that holds no anchor slot takes one first: when
  -- none is free, that growth is the call's first allocation.
  local function full_room_and_a_slotless(timer, room)
    local all = {}
    for i = 1, room - 1 do all[i] = timer:timeout(10 + i, noop) end
    local slotless = timer:timeout(5, noop)
    slotless:cancel()
    all[room] = timer:timeout(6, noop)              -- takes the slot it gave back
    return all, slotless
  end

  it("growing the free anchor slots: a finalizer that arms more than the old room meanwhile", function()
    for _, room in ipairs({ 1024, 4096 }) do
      local timer = support.manual()
      local all, slotless = full_room_and_a_slotless(timer, room)
      local hits = attacked(function()
        for i = 1, room + 200 do all[#all + 1] = timer:timeout(5000 + i, noop) end
      end, function() return slotless:reset(1) end)
      assert.is_true(hits > 0, "no finalizer ran inside reset()")
      all[#all + 1] = slotless
      assert.are.equal(#all, timer:pending())
      for _, t in ipairs(all) do assert.is_true(t:cancel()) end   -- each gives its slot back
      assert.are.equal(0, timer:pending())
      for _, t in ipairs(all) do assert.is_true(t:reset(2)) end   -- and takes one again
      assert.are.equal(#all, timer:pending())
      assert.are.equal(#all, #timer:stop())
    end
  end)

  it("a reset whose anchoring runs a finalizer that resets the same timeout", function()
    local timer = support.manual()
    local all, target = full_room_and_a_slotless(timer, 1024)
    local hits = attacked(function() target:reset(3) end, function() return target:reset(4) end)
    assert.is_true(hits > 0, "no finalizer ran inside reset()")
    assert.are.equal(1025, timer:pending())
    assert.is_true(target:cancel())
    local gone = setmetatable({ target }, { __mode = "v" })
    target = nil
    collectgarbage()
    collectgarbage()
    assert.is_nil(gone[1], "a cancelled timeout is still anchored")
    assert.are.equal(1024, #timer:stop())
    assert.are.equal(1024, #all)
  end)
end)
