-- dispatch_spec.lua: what the dispatch loop keeps for each anchored timeout
-- (on LuaJIT, its FFI take reads the call from the anchor table: the task
-- beside the Timeout, or for one or two arguments the Timeout's user value
-- table alone, which holds the Timeout too; a slot it lets go is cleared by
-- the loop and given back later). A timeout is anchored, whatever its task,
-- until it runs or is cancelled.
-- These hold on every VM: each task gets its own Timeout and exactly its
-- arguments, timeouts(), reset() and stop() find the Timeout of every kind
-- of task, slots let go in a drain are reused without mixing calls up,
-- what ran or was cancelled is collectable, and a task that is a userdata is
-- never taken for a Timeout.
local hwt = require("hwt")
local core = require("hwt.core")
local support = require("support")
local compat = require("compat")

local manual = support.manual

-- A callable that is a userdata where the VM can make one (5.1, LuaJIT),
-- a callable table elsewhere.
local function callable_userdata(fn)
  if not newproxy then return setmetatable({}, { __call = fn }) end
  local proxy = newproxy(true)
  getmetatable(proxy).__call = fn
  return proxy
end

local function count_collected(weak, n)
  collectgarbage()
  collectgarbage()
  local left = 0
  for i = 1, n do if weak[i] ~= nil then left = left + 1 end end
  return n - left
end

describe("the dispatch", function()
  it("is the FFI take on LuaJIT, the classic take elsewhere", function()
    assert.are.equal(jit ~= nil, core.internal.ffi_take ~= nil)
  end)

  it("calls each task with its own Timeout and exactly its arguments", function()
    local timer = manual()
    local seen, handles = {}, {}
    local function record(id)
      return function(t, ...) seen[id] = { t = t, n = select("#", ...), ... } end
    end
    handles[1] = timer:timeout(0.001, record(1))
    handles[2] = timer:timeout(0.001, record(2), "a")
    handles[3] = timer:timeout(0.001, record(3), nil)
    handles[4] = timer:timeout(0.001, record(4), "a", nil)
    handles[5] = timer:timeout(0.001, record(5), nil, "b")
    handles[6] = timer:timeout(0.001, record(6), 1, 2, 3)
    handles[7] = timer:timeout(0.001, { run = function(self, t, a) seen[7] = { t = t, n = 1, a, self = self } end }, "r")
    assert.are.equal(7, timer:advance(0.001))
    for id = 1, 7 do assert.are.equal(handles[id], seen[id].t) end
    assert.are.same({ 0, 1, 1, 2, 2, 3 }, { seen[1].n, seen[2].n, seen[3].n, seen[4].n, seen[5].n, seen[6].n })
    assert.are.same({ "a" }, { seen[2][1] })
    assert.is_nil(seen[3][1])
    assert.are.same({ "a", nil }, { seen[4][1], seen[4][2] })
    assert.are.same({ nil, "b" }, { seen[5][1], seen[5][2] })
    assert.are.same({ 1, 2, 3 }, { seen[6][1], seen[6][2], seen[6][3] })
    assert.are.equal("r", seen[7][1])
    assert.are.equal(handles[7]:task(), seen[7].self)
  end)

  it("keeps a timeout whose handle was dropped, whatever its task's shape, until it runs", function()
    local timer = manual()
    local seen = {}
    local function record(id)
      return function(t, ...) seen[id] = { t = t, n = select("#", ...), ... } end
    end
    local weak = setmetatable({}, { __mode = "v" })
    weak[1] = timer:timeout(0.001, record(1))
    weak[2] = timer:timeout(0.001, record(2), "a")
    weak[3] = timer:timeout(0.001, record(3), "a", "b")
    weak[4] = timer:timeout(0.001, record(4), "a", "b", "c")
    weak[5] = timer:timeout(0.001, { run = function(_, t, ...) seen[5] = { t = t, n = select("#", ...), ... } end }, "a")
    collectgarbage()
    collectgarbage()
    for id = 1, 5 do assert.is_not_nil(weak[id]) end
    assert.are.equal(5, timer:advance(0.001))
    for id = 1, 5 do assert.is_true(rawequal(weak[id], seen[id].t)) end
    assert.are.same({ 0, 1, 2, 3, 1 }, { seen[1].n, seen[2].n, seen[3].n, seen[4].n, seen[5].n })
    assert.are.same({ "a", "b", "c" }, { seen[4][1], seen[4][2], seen[4][3] })
    assert.are.same({ "a", "b" }, { seen[3][1], seen[3][2] })
    assert.are.same({ "a", "a" }, { seen[2][1], seen[5][1] })
    seen = nil
    assert.are.equal(5, count_collected(weak, 5))
  end)

  it("never takes a task that is a userdata for a Timeout", function()
    local timer = manual()
    local ran = 0
    local handles = {}
    for i = 1, 6 do
      local task = i % 2 == 0 and function() ran = ran + 1 end or callable_userdata(function() ran = ran + 1 end)
      handles[i] = timer:timeout(i, task)
    end
    assert.are.equal(6, #timer:timeouts())
    for _, t in ipairs(timer:timeouts()) do assert.are.equal(getmetatable(handles[1]), getmetatable(t)) end
    assert.are.equal(2, timer:advance(2))
    local never_ran = timer:stop()
    assert.are.equal(4, #never_ran)
    for i, t in ipairs(never_ran) do assert.are.equal(handles[i + 2], t) end
    assert.are.equal(2, ran)
  end)

  it("gives back each Timeout itself, whatever its task's shape", function()
    local timer = manual()
    local tasks = {
      function() end,                                   -- the Timeout alone
      callable_userdata(function() end),
      { function() end, "a" },                          -- one argument
      { function() end, "a", "b" },                     -- two
      { function() end, "a", "b", "c" },                -- more
      { { run = function() end }, "r" },                -- a TimerTask
    }
    local handles = {}
    for i, task in ipairs(tasks) do
      if type(task) == "table" and task[2] then
        handles[i] = timer:timeout(i, task[1], compat.unpack(task, 2))
      else
        handles[i] = timer:timeout(i, task)
      end
    end
    local listed = timer:timeouts()
    assert.are.equal(#tasks, #listed)
    for i = 1, #tasks do assert.is_true(rawequal(handles[i], listed[i])) end
    assert.are.equal(1, timer:advance(1))
    for i = 1, #tasks do assert.is_true(handles[i]:reset(#tasks + i)) end  -- anchored again
    local never_ran = timer:stop()
    assert.are.equal(#tasks, #never_ran)
    for i = 1, #tasks do assert.is_true(rawequal(handles[i], never_ran[i])) end
  end)

  it("reuses the slots it lets go within a drain without mixing calls up", function()
    local timer = manual()
    local x = 12345
    local function random(n)
      x = (x * 48271) % 2147483647
      return x % n + 1
    end
    local handle_of, payload_of, runs, cancelled, wrong = {}, {}, {}, {}, 0
    local next_id = 0
    local schedule
    local function task(t, id, payload)
      runs[id] = (runs[id] or 0) + 1
      if handle_of[id] ~= t or payload_of[id] ~= payload then wrong = wrong + 1 end
      handle_of[id] = nil
      local action = random(4)
      if action == 1 then
        schedule(random(3) * 0.001)
      elseif action == 2 then
        local victim = next(handle_of)
        if victim and handle_of[victim]:cancel() then
          handle_of[victim], cancelled[victim] = nil, true
        end
      elseif action == 3 then
        local other = next(handle_of)
        if other then assert(handle_of[other]:reset(random(3) * 0.001)) end
      end
    end
    schedule = function(delay)
      next_id = next_id + 1
      local id, payload = next_id, {}
      payload_of[id] = payload
      if id % 3 == 0 then
        handle_of[id] = timer:timeout(delay, function(t) task(t, id, payload) end)
      else
        handle_of[id] = timer:timeout(delay, task, id, payload)
      end
    end
    for _ = 1, 200 do
      for _ = 1, random(20) do schedule(random(3) * 0.001) end
      if random(2) == 1 then timer:advance(0.001) else timer:poll(random(5)) end
    end
    while timer:pending() > 0 do timer:advance(0.001) end
    assert.are.equal(0, wrong)
    for id = 1, next_id do
      assert.are.equal(cancelled[id] and 0 or 1, runs[id] or 0)
    end
    assert.is_nil(next(handle_of))
    assert.are.equal(0, #timer:timeouts())
  end)

  -- A poll reads the anchors of the timeouts due next in batches, before
  -- their takes: what it read may be cancelled, re-armed or let go first.
  it("runs a long poll in order while its tasks cancel, re-arm and let go of the ones due next", function()
    local timer = manual()
    local n = 60
    local ran, handles = {}, {}
    local function record(t, id)
      assert.are.equal(handles[id], t)
      ran[#ran + 1] = id
      if id % 5 == 0 and handles[id + 2] then handles[id + 2]:cancel() end
      if id % 7 == 0 and handles[id + 3] then assert(handles[id + 3]:reset(1)) end
      handles[id] = nil
      collectgarbage()
    end
    local function task_of(id)
      local shape = id % 4
      if shape == 0 then return function(t) record(t, id) end end
      if shape == 1 then return record, id end
      if shape == 2 then return function(t, a, b) record(t, a + b) end, id - 1, 1 end
      return { run = function(_, t, a, b, c) record(t, a + b + c) end }, id, 0, 0
    end
    for id = 1, n do handles[id] = timer:timeout(0.001, task_of(id)) end
    local expected, skipped = {}, {}
    for id = 1, n do
      if not skipped[id] then
        expected[#expected + 1] = id
        if id % 5 == 0 then skipped[id + 2] = true end     -- cancelled
        if id % 7 == 0 then skipped[id + 3] = true end     -- re-armed for later
      end
    end
    assert.are.equal(#expected, timer:advance(0.001))
    assert.are.same(expected, ran)
  end)

  it("lets what ran or was cancelled be collected", function()
    local timer = manual()
    local n = 300
    local weak = setmetatable({}, { __mode = "v" })
    local handles = {}
    for i = 1, n do
      local payload = {}
      weak[i] = payload
      if i % 2 == 0 then
        handles[i] = timer:timeout(i % 3 == 0 and 0.001 or 1, function() return payload end)
      else
        handles[i] = timer:timeout(i % 3 == 0 and 0.001 or 1, function() end, payload)
      end
    end
    assert.are.equal(0, count_collected(weak, n))
    local ran = timer:advance(0.001)
    for i = 1, n do
      if i % 3 ~= 0 then assert.is_true(handles[i]:cancel()) end
    end
    assert.are.equal(n / 3, ran)
    handles = nil
    assert.are.equal(n, count_collected(weak, n))
    assert.are.equal(0, timer:pending())
  end)

  it("runs the tasks after one that raises with their own Timeouts", function()
    local errors = {}
    local timer = manual({ on_error = function(err, t) errors[#errors + 1] = { err, t } end })
    local got, handles = {}, {}
    for i = 1, 30 do
      handles[i] = timer:timeout(0.001, function(t, id)
        got[id] = t
        if id % 3 == 0 then error("task " .. id, 0) end
      end, i)
    end
    assert.are.equal(30, timer:advance(0.001))
    for i = 1, 30 do assert.are.equal(handles[i], got[i]) end
    assert.are.equal(10, #errors)
    for k, e in ipairs(errors) do
      assert.are.equal("task " .. 3 * k, e[1])
      assert.are.equal(handles[3 * k], e[2])
    end
    assert.are.equal(0, #timer:timeouts())
  end)

  -- Only where tasks may yield: PUC 5.1 cannot suspend a task (yield_spec
  -- checks that the yield is then the task's error).
  if not compat.tasks_yield then return end
  it("finishes the task of a drain whose coroutine was dropped, and runs the rest later", function()
    local timer = manual()
    local weak, ran = setmetatable({}, { __mode = "v" }), {}
    for id = 1, 10 do
      local payload = {}
      weak[id] = payload
      timer:timeout(0.001, function(_, p)
        ran[#ran + 1] = id
        if p == weak[5] then coroutine.yield() end
      end, payload)
    end
    local co = coroutine.create(function() timer:advance(0.001) end)
    assert.is_true(coroutine.resume(co))
    assert.are.equal("suspended", coroutine.status(co))
    co = nil
    assert.are.equal(5, count_collected(weak, 10))
    for id = 11, 20 do timer:timeout(0.001, function() ran[#ran + 1] = id end) end
    assert.are.equal(15, timer:advance(0.001))
    for id = 1, 20 do assert.are.equal(id, ran[id]) end
    assert.are.equal(10, count_collected(weak, 10))
  end)
end)
