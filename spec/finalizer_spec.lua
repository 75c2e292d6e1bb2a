-- finalizer_spec.lua: a Lua allocation can run a collector step, and the
-- step any finalizer, which can call hwt on the same timer. Each case queues
-- finalizers that attack the timer at the next allocations, makes the call
-- whose allocations run them, and checks that the call saw the attack and
-- still did the right thing (under `make test` also against the ASan+UBSan
-- build).
local hwt = require("hwt")
local support = require("support")

local noop = support.noop

-- Runs call() with finalizers queued that run attack() at its allocations;
-- returns how many finalizers ran inside it and what call() returned. Tried again a
-- few times where the collector steps only every kilobyte or so (not 5.4),
-- so that an attack lands inside the call.
-- Where the collector steps at every allocation (Lua 5.4), the call must
-- have met a finalizer; elsewhere it may have made its allocations between
-- two steps, and the case still checks that nothing broke.
local function assert_met(hits, call)
  if support.steps_at_every_allocation then
    assert.is_true(hits > 0, "no finalizer ran inside " .. call)
  end
end

-- The attack runs once per try, however many finalizers run.
local function attacked(attack, call)
  local hits, result = 0, nil
  for _ = 1, 50 do
    local done = false
    local control = support.finalizers_at_next_allocations(40, function()
      if not done then done = true; attack() end
    end)
    control.arm()
    result = call()
    control.armed = false
    hits = control.hits
    control.finish()
    if hits > 0 then break end
  end
  return hits, result
end

describe("finalizers at the allocations of hwt's calls", function()
  after_each(function() support.collector_steps_often(false) end)

  it("timeouts() lists exactly the pending timeouts when a finalizer arms more meanwhile", function()
    local timer = support.manual()
    for i = 1, 300 do timer:timeout(10 + i, noop) end
    local hits, list = attacked(function()
      for i = 1, 100 do timer:timeout(1000 + i, noop) end
    end, function() return timer:timeouts() end)
    assert_met(hits, "timeouts()")
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
    assert_met(hits, "timeouts()")
    for _, t in ipairs(list) do assert.is_false(t:is_cancelled()) end
    assert.are.equal(timer:pending(), #list)
    timer:stop()
  end)

  if support.cdata_timeouts then
  -- On LuaJIT a schedule reserves its slot, then writes the slot's entries
  -- in the slot tables (which may grow: an allocation), then arms it.
  it("a schedule whose entries' growth runs a finalizer that arms more", function()
    local timer = support.manual()
    local all = {}
    for i = 1, 1023 do all[i] = timer:timeout(10 + i, noop) end
    local hits = attacked(function()
      for i = 1, 1300 do all[#all + 1] = timer:timeout(5000 + i, noop, i) end
    end, function()
      local t = timer:timeout(1, noop, "x")         -- (not all[#all + 1] = ...: the attack appends meanwhile)
      all[#all + 1] = t
    end)
    assert_met(hits, "timeout()")
    assert.are.equal(#all, timer:pending())
    for _, one in ipairs(all) do assert.is_true(one:cancel()) end
    assert.are.equal(0, timer:pending())
    assert.are.equal(0, #timer:stop())
  end)

  it("a schedule whose entries' growth runs a finalizer that stops the timer", function()
    local timer = support.manual()
    for i = 1, 1023 do timer:timeout(10 + i, noop) end
    local gone = setmetatable({}, { __mode = "v" })
    local outcomes = {}
    local hits = attacked(function() timer:stop() end, function()
      local task = function() end
      gone[#gone + 1] = task
      outcomes[#outcomes + 1] = { pcall(timer.timeout, timer, 1, task, "x") }
    end)
    assert_met(hits, "timeout()")
    if hits > 0 then
      assert.is_true(timer:is_stopped())
      assert.are.equal(0, timer:pending())
      -- Stopped inside the call: it raised; else before it returned, or
      -- after: the stop ended what it scheduled.
      local last = outcomes[#outcomes]
      if last[1] then
        assert.is_true(last[2]:is_cancelled())
      else
        assert.matches("timer is stopped", tostring(last[2]), 1, true)
      end
    end
    timer:stop()
    timer = nil                                      -- what stop() handed back goes with it
    for _ = 1, 4 do collectgarbage() end             -- the timer's finalizer, then its tasks
    assert.is_nil(next(gone), "a task of a collected timer is still held")
  end)
  else
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
      assert_met(hits, "reset()")
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
    assert_met(hits, "reset()")
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
  end
end)

-- Every method of a timer and of its timeouts, from finalizers run at the
-- allocations of every call of the API, then the books: what pending()
-- counts is what timeouts() lists, none of it cancelled, and stop() ends
-- each timeout once.
describe("every method from finalizers, at the allocations of every call", function()
  after_each(function() support.collector_steps_often(false) end)

  local function every_method(timer, handles)
    local t = handles[#handles]
    if #handles > 0 then
      t = handles[(#handles * 7919) % #handles + 1]
      t:remaining(); t:deadline(); t:is_cancelled(); t:is_expired(); t:task(); t:timer()
      tostring(t)
      if #handles % 2 == 0 then t:cancel() else pcall(t.reset, t, 0.5) end
    end
    pcall(timer.timeout, timer, 0.25, noop, 1, 2)
    pcall(timer.every, timer, 0.5, noop)
    timer:pending(); timer:stats(); timer:next_due(); tostring(timer)
    assert(#timer:timeouts() == timer:pending())
    timer:on_earlier(#handles % 3 == 0 and noop or nil)
    pcall(timer.poll, timer, 1, function(fn) fn() end)
  end

  local CALLS = {
    timeout = function(timer, handles) handles[#handles + 1] = timer:timeout(0.1, noop, "a") end,
    every = function(timer, handles) handles[#handles + 1] = timer:every(0.2, noop) end,
    timeouts = function(timer) return timer:timeouts() end,
    poll = function(timer) return timer:poll() end,
    poll_spawn = function(timer) return timer:poll(nil, function(fn) fn() end) end,
    advance = function(timer) return timer:advance(0.25) end,
    run_for = function(timer) return timer:run_for(0.5) end,
    stats = function(timer) return timer:stats() end,
    tostring = function(timer, handles) return tostring(timer) .. tostring(handles[1]) end,
    stop = function(timer) return timer:stop() end,
  }

  -- Calls that allocate nothing: no finalizer can run inside them.
  local ALLOCATION_FREE = {
    cancel = function(_, handles) if handles[1] then handles[1]:cancel() end end,
    reset = function(_, handles) if handles[2] then handles[2]:reset(0.3) end end,
    next_due = function(timer) return timer:next_due() end,
    on_earlier = function(timer) return timer:on_earlier(noop) end,
  }
  for name, call in pairs(ALLOCATION_FREE) do CALLS[name] = call end

  for name, call in pairs(CALLS) do
    it(name, function()
      local hit = false
      for _ = 1, ALLOCATION_FREE[name] and 1 or 20 do
        local timer = support.manual()
        local handles = {}
        for i = 1, 70 do handles[i] = timer:timeout(i % 5 * 0.1, noop) end
        local control = support.finalizers_at_next_allocations(40, function()
          every_method(timer, handles)
        end)
        control.arm()
        call(timer, handles)
        control.armed = false
        hit = hit or control.hits > 0
        control.finish()
        assert.are.equal(timer:pending(), #timer:timeouts())
        for _, t in ipairs(timer:timeouts()) do assert.is_false(t:is_cancelled()) end
        local pending = timer:pending()
        local stopped = timer:stop()
        assert.is_true(#stopped <= pending)
        for _, t in ipairs(stopped) do assert.is_true(t:is_cancelled()) end
        assert.are.equal(0, timer:pending())
        if hit then break end
      end
      -- Elsewhere the collector steps only every kilobyte or so: a call
      -- may make its few allocations between two steps.
      if support.steps_at_every_allocation then
        assert.are.equal(not ALLOCATION_FREE[name], hit, (hit and "a finalizer ran inside " or
          "no finalizer ran inside ") .. name)
      end
    end)
  end
end)
