-- order_spec.lua: the order tasks run in: by exact deadline (never by tick),
-- equal deadlines in scheduling order, across ticks, advances and polls, on
-- both clocks; and a randomized differential test on the manual clock.
--
-- The differential test: a few thousand random operations (timeouts with
-- delays of every kind, periodic timeouts, cancels, advances, polls with a
-- limit, tasks that spawn, cancel or raise) run against hwt and against a
-- plain reference model, a list ordered by (deadline, sequence number). After
-- every step the spec compares which tasks ran and in what order, the return
-- values, pending(), timeouts(), stats().due / fired / cancelled, the clock,
-- and a sample of the timeouts' states and deadlines; at the end, stop() and
-- "nothing lost". Timeouts are also reset(), from outside and by tasks (their
-- own or another), in every state.
--
-- The model follows doc/api.md:
--  * seconds -> ns rounded to the nearest, delays clamped to 2^62 ns,
--    math.huge = never;
--  * a timeout is due when now >= its deadline: the manual clock's deadlines
--    are exact (the tick does not round them);
--  * a draining call (poll/advance) runs the due timeouts scheduled before it
--    began, in (deadline, seq) order, at most `max`;
--  * a periodic timeout is re-armed after its run with a new sequence number
--    at the first grid point (first deadline + k * interval) strictly after
--    now (missed beats skipped);
--  * a one-shot is no longer pending while its task runs; a periodic is;
--  * reset(d) re-arms at now + d (default: the delay or interval it was made
--    with) with a new sequence number, whatever the state; it is pending
--    again (refused at max_pending unless it already was), is_expired() is
--    false, and a run it interrupts does not re-arm a periodic.
-- The PRNG is local (Park-Miller, 48271 mod 2^31 - 1), so math.random's state
-- is untouched. All the model's arithmetic is on integral values below 2^53,
-- exact in doubles, so it runs the same on every Lua (5.1 to 5.4, LuaJIT);
-- the clamped deadlines (2^62 ns) are kept as (base, 2^62) for exactness.
local hwt = require("hwt")
local compat = require("compat")
local support = require("support")

local unpack, EPS, LATE, manual = compat.unpack, support.EPS, support.LATE, support.manual
local logger = support.logger
local idiv, imod = compat.idiv, compat.imod

local NEVER = math.huge
local MAX_DELAY_NS = 2 ^ 62

local function make_rng(seed)
  local M = 2147483647
  local state = imod(seed, M - 1) + 1
  local rng = {}
  local function step()                     -- 1 .. M - 1; state * 48271 < 2^53
    state = imod(state * 48271, M)
    return state
  end
  for _ = 1, 8 do step() end                -- move away from a small seed
  function rng.bits52()                     -- 52 random bits, exact in a double
    return imod(step(), 2 ^ 26) * 2 ^ 26 + imod(step(), 2 ^ 26)
  end
  function rng.int(lo, hi)                  -- lo..hi inclusive
    return math.floor(lo + imod(rng.bits52(), hi - lo + 1))
  end
  function rng.pick(list) return list[rng.int(1, #list)] end
  return rng
end

-- Exactly the C conversion: (uint64_t)(seconds * 1e9 + 0.5), clamped.
local function to_ns(seconds)
  if seconds == math.huge then return NEVER end
  local x = seconds * 1e9 + 0.5
  if x >= MAX_DELAY_NS + 0.0 then return MAX_DELAY_NS end
  return math.floor(x)
end

-- luassert is slow for ~100k checks: compare in plain Lua and hand over to
-- luassert only on a mismatch, so that the failure is reported as usual.
local function expect_equal(expected, actual, where)
  if expected ~= actual then assert.are.equal(expected, actual, where) end
end

local function expect_same_list(expected, actual, where)
  local same = #expected == #actual
  for i = 1, #expected do
    if expected[i] ~= actual[i] then same = false; break end
  end
  if not same then assert.are.same(expected, actual, where) end
end

-- ---- the reference model ----------------------------------------------------

local Model = {}
Model.__index = Model

local function new_model(cfg)
  return setmetatable({
    cfg = cfg, now = 0, next_seq = 0, live = {}, live_count = 0,
    entries = {}, fired = 0, cancelled = 0, stopped = false, log = {},
  }, Model)
end

function Model:is_due(e)
  return e.deadline ~= NEVER and not e.running and e.deadline <= self.now
end

function Model:due_count()
  local n = 0
  for _, e in pairs(self.live) do if self:is_due(e) then n = n + 1 end end
  return n
end

function Model:schedule(id, spec)
  local e = { id = id, spec = spec, runs = 0 }
  self.entries[id] = e
  if self.cfg.max_pending > 0 and self.live_count >= self.cfg.max_pending then
    e.state = "refused"
    return false
  end
  local delay = to_ns(spec.seconds)
  e.deadline = delay == NEVER and NEVER or self.now + delay
  -- now + 2^62 is not exact in a double: remember its parts (see remaining())
  if delay == MAX_DELAY_NS then e.base = self.now end
  e.interval = spec.interval_seconds and to_ns(spec.interval_seconds)
  e.seq = self.next_seq
  self.next_seq = self.next_seq + 1
  e.state = "live"
  self.live[id] = e
  self.live_count = self.live_count + 1
  return true
end

function Model:unlive(e)
  self.live[e.id] = nil
  self.live_count = self.live_count - 1
end

function Model:cancel(id)
  local e = self.entries[id]
  if not e or not self.live[id] or self.stopped then return false end
  e.state = "cancelled"
  self:unlive(e)
  self.cancelled = self.cancelled + 1
  return true
end

-- true, or "full" (nil, err); "stopped" raises.
function Model:reset(id, seconds)
  local e = self.entries[id]
  if self.stopped then return "stopped" end
  local pending = self.live[id] ~= nil
  -- On LuaJIT a Timeout lets go of its task when it ends: it cannot be reset.
  if support.cdata_timeouts and not pending and not e.running then return "ended" end
  if not pending and self.cfg.max_pending > 0 and self.live_count >= self.cfg.max_pending then
    return "full"
  end
  local delay = seconds and to_ns(seconds) or e.interval or to_ns(e.spec.seconds)
  e.deadline = delay == NEVER and NEVER or self.now + delay
  e.base = delay == MAX_DELAY_NS and self.now or nil
  e.seq = self.next_seq
  self.next_seq = self.next_seq + 1
  e.state = "live"
  e.expired = false
  e.resets = (e.resets or 0) + 1
  if e.running then e.reset_in_run = true end
  if not pending then
    self.live[id] = e
    self.live_count = self.live_count + 1
  end
  return true
end

-- The live entries' ids in (deadline, seq) order: what timeouts() lists.
function Model:pending_ids()
  local list = {}
  for _, e in pairs(self.live) do list[#list + 1] = e end
  table.sort(list, function(a, b)
    if a.deadline ~= b.deadline then return a.deadline < b.deadline end
    return a.seq < b.seq
  end)
  local ids = {}
  for i, e in ipairs(list) do ids[i] = e.id end
  return ids
end

function Model:stop()
  local list = {}
  if self.stopped then return list end
  for _, e in pairs(self.live) do list[#list + 1] = e end
  table.sort(list, function(a, b)
    if a.deadline ~= b.deadline then return a.deadline < b.deadline end
    return a.seq < b.seq
  end)
  local result = {}
  for _, e in ipairs(list) do
    if e.expired then
      e.state = "ended"                       -- a periodic that already ran
    else
      e.state = "stopped"
      self.cancelled = self.cancelled + 1
      result[#result + 1] = e.id
    end
  end
  self.live, self.live_count, self.stopped = {}, 0, true
  return result
end

local function next_beat(last, interval, now)
  local beats = 1
  if now >= last then beats = idiv(now - last, interval) + 1 end
  return last + beats * interval
end

-- `perform(e)` runs the task's action on the model side.
function Model:drain(max, perform)
  if self.stopped then return 0 end
  local limit = self.next_seq
  local ran = 0
  while ran < max and not self.stopped do
    local best
    for _, e in pairs(self.live) do
      if e.seq < limit and self:is_due(e) and
         (not best or e.deadline < best.deadline or
          (e.deadline == best.deadline and e.seq < best.seq)) then
        best = e
      end
    end
    if not best then break end
    ran = ran + 1
    self.fired = self.fired + 1
    best.runs = best.runs + 1
    best.expired = true
    best.running = true
    best.reset_in_run = false
    if not best.interval then
      self:unlive(best)
      best.state = "ran"
    end
    perform(best)
    best.running = false
    if best.interval and best.state == "live" and not self.stopped and not best.reset_in_run then
      best.deadline = next_beat(best.deadline, best.interval, self.now)
      best.seq = self.next_seq
      self.next_seq = self.next_seq + 1
    end
  end
  return ran
end

-- ---- the random scenario ---------------------------------------------------------

local function gen_delay_ns(rng, cfg, now)
  local tick, w = cfg.tick_ns, cfg.wheel_size
  local r = rng.int(1, 100)
  if r <= 8 then return 0
  elseif r <= 20 then return rng.int(1, tick - 1)                       -- sub-tick
  elseif r <= 38 then return tick * rng.int(1, 3 * w)                   -- exact multiple
  elseif r <= 50 then return w * tick + rng.pick({ -tick, -1, 0, 1, tick })
  elseif r <= 60 then                                                   -- on / around a boundary
    local to_boundary = tick - imod(now, tick)
    local d = to_boundary + tick * rng.int(0, 2 * w) + rng.pick({ -1, 0, 0, 1 })
    return d < 0 and 0 or d
  elseif r <= 74 then return rng.int(0, 4 * w * tick)
  elseif r <= 87 then return rng.int(0, 64 * w * tick)                  -- level 1
  elseif r <= 95 then return rng.int(0, 64 * 64 * w * tick)             -- level 2
  elseif r <= 98 then return "huge"
  else return "never" end
end

local function seconds_of(d)
  if d == "huge" then return 1e300 end
  if d == "never" then return math.huge end
  return d / 1e9
end

local function gen_advance_ns(rng, cfg, now)
  local tick, w = cfg.tick_ns, cfg.wheel_size
  local r = rng.int(1, 100)
  if r <= 5 then return 0
  elseif r <= 25 then return rng.int(1, tick - 1)
  elseif r <= 40 then return tick - imod(now, tick)                          -- to the next boundary
  elseif r <= 50 then return tick - imod(now, tick) + rng.pick({ -1, 1 })
  elseif r <= 70 then return tick * rng.int(1, w)
  elseif r <= 85 then return rng.int(0, 8 * w * tick)
  elseif r <= 95 then return rng.int(0, 128 * w * tick)
  else return rng.int(0, 64 * 64 * w * tick) end
end

local function run_scenario(cfg)
  local rng = make_rng(cfg.seed)
  local model = new_model(cfg)
  local real_log = {}
  local handles, id_of, specs, real_runs = {}, {}, {}, {}
  local next_id = 1
  local timer

  -- nil (the default delay), 0, or a delay of any kind
  local function gen_reset_seconds()
    local r = rng.int(1, 10)
    if r <= 3 then return nil end
    if r == 4 then return 0 end
    return seconds_of(gen_delay_ns(rng, cfg, model.now))
  end

  local function gen_spec(depth, periodic)
    local id = next_id
    next_id = next_id + 1
    local spec = { id = id }
    if periodic then
      local tick, w = cfg.tick_ns, cfg.wheel_size
      local r = rng.int(1, 3)
      local interval = r == 1 and rng.int(1, tick - 1) or r == 2 and tick * rng.int(1, 2 * w)
                       or rng.int(1, 4 * w * tick)
      spec.interval_seconds = interval / 1e9
      spec.seconds = spec.interval_seconds
      local a = rng.int(1, 100)
      if a <= 15 then spec.action = { kind = "error" }
      elseif a <= 35 then spec.action = { kind = "cancel_self_at", run = rng.int(1, 4) }
      elseif a <= 45 then spec.action = { kind = "reset_self_at", run = rng.int(1, 3), seconds = gen_reset_seconds() }
      else spec.action = { kind = "none" } end
    else
      spec.seconds = seconds_of(gen_delay_ns(rng, cfg, model.now))
      local a = rng.int(1, 100)
      if a <= 8 and depth < 3 then
        spec.action = { kind = "spawn", child = gen_spec(depth + 1, false) }
      elseif a <= 12 and depth < 3 then
        local child = gen_spec(depth + 1, false)
        specs[child].seconds = 0
        spec.action = { kind = "spawn", child = child }
      elseif a <= 22 then
        spec.action = { kind = "cancel", target = rng.int(1, next_id - 1) }
      elseif a <= 27 then
        spec.action = { kind = "error" }
      elseif a <= 33 then
        spec.action = { kind = "reset_self_at", run = rng.int(1, 2), seconds = gen_reset_seconds() }
      elseif a <= 38 then
        spec.action = { kind = "reset", target = rng.int(1, next_id - 1), seconds = gen_reset_seconds() }
      else
        spec.action = { kind = "none" }
      end
    end
    specs[id] = spec
    return id
  end

  -- the real side ------------------------------------------------------------
  local real_task, real_reset
  local function real_schedule(id)
    local spec = specs[id]
    local t, err
    if spec.interval_seconds then
      t, err = timer:every(spec.interval_seconds, real_task, id)
    else
      t, err = timer:timeout(spec.seconds, real_task, id)
    end
    if t then
      handles[id] = t
      id_of[t] = id
    else
      assert(err:find("too many pending timeouts", 1, true), err)
      real_log[#real_log + 1] = "X" .. id
    end
  end

  -- The reset's outcome as a log entry: "T<id>=true", "=full" or "=stopped".
  function real_reset(id, seconds)
    local ok, result, err = pcall(handles[id].reset, handles[id], seconds)
    local outcome
    if not ok and tostring(result):find("timeout has ended", 1, true) then
      outcome = "ended"
    elseif not ok then
      assert(tostring(result):find("timer is stopped", 1, true), result)
      outcome = "stopped"
    elseif result == nil then
      assert(err:find("too many pending timeouts", 1, true), err)
      outcome = "full"
    else
      assert(result == true, tostring(result))
      outcome = "true"
    end
    return "T" .. id .. "=" .. outcome
  end

  real_task = function(t, id)
    real_runs[id] = (real_runs[id] or 0) + 1
    local entry = "R" .. id .. "/" .. timer:pending()
    if not rawequal(t, handles[id]) then entry = entry .. "!self" end
    real_log[#real_log + 1] = entry
    local action = specs[id].action
    if action.kind == "spawn" then
      if real_runs[id] == 1 then real_schedule(action.child) end  -- a reset one-shot runs again
    elseif action.kind == "cancel" then
      local h = handles[action.target]
      real_log[#real_log + 1] = "C" .. action.target .. "=" .. (h and tostring(h:cancel()) or "nil")
    elseif action.kind == "cancel_self_at" then
      if real_runs[id] == action.run then
        real_log[#real_log + 1] = "C" .. id .. "=" .. tostring(t:cancel())
      end
    elseif action.kind == "reset_self_at" then
      if real_runs[id] == action.run then real_log[#real_log + 1] = real_reset(id, action.seconds) end
    elseif action.kind == "reset" then
      real_log[#real_log + 1] = handles[action.target] and real_reset(action.target, action.seconds)
                                or "T" .. action.target .. "=nil"
    elseif action.kind == "stop" then
      local ids = {}
      for _, h in ipairs(timer:stop()) do ids[#ids + 1] = id_of[h] or "?" end
      real_log[#real_log + 1] = "S:" .. table.concat(ids, ",")
    elseif action.kind == "error" then
      error({ id = id })
    end
  end

  timer = hwt.new({
    clock = "manual", tick = cfg.tick_ns / 1e9, wheel_size = cfg.wheel_size,
    max_pending = cfg.max_pending,
    on_error = function(err, t)
      local ok = type(err) == "table" and rawequal(t, handles[err.id])
      real_log[#real_log + 1] = "E" .. (type(err) == "table" and err.id or tostring(err)) .. (ok and "" or "!")
    end,
  })

  -- the model side ----------------------------------------------------------------
  local model_log = model.log
  local function model_schedule(id)
    if not model:schedule(id, specs[id]) then model_log[#model_log + 1] = "X" .. id end
  end
  local function model_reset(id, seconds)
    return "T" .. id .. "=" .. tostring(model:reset(id, seconds))
  end
  local function perform(e)
    model_log[#model_log + 1] = "R" .. e.id .. "/" .. model.live_count
    local action = e.spec.action
    if action.kind == "spawn" then
      if e.runs == 1 then model_schedule(action.child) end
    elseif action.kind == "cancel" then
      local target = model.entries[action.target]
      local result = (target and target.state ~= "refused") and tostring(model:cancel(action.target)) or "nil"
      model_log[#model_log + 1] = "C" .. action.target .. "=" .. result
    elseif action.kind == "cancel_self_at" then
      if e.runs == action.run then
        model_log[#model_log + 1] = "C" .. e.id .. "=" .. tostring(model:cancel(e.id))
      end
    elseif action.kind == "reset_self_at" then
      if e.runs == action.run then model_log[#model_log + 1] = model_reset(e.id, action.seconds) end
    elseif action.kind == "reset" then
      local target = model.entries[action.target]
      model_log[#model_log + 1] = (target and target.state ~= "refused") and model_reset(action.target, action.seconds)
                                  or "T" .. action.target .. "=nil"
    elseif action.kind == "stop" then
      model_log[#model_log + 1] = "S:" .. table.concat(model:stop(), ",")
    elseif action.kind == "error" then
      model_log[#model_log + 1] = "E" .. e.id
    end
  end

  -- comparison ----------------------------------------------------------------------
  local function compare(step, what)
    local where = ("seed %d step %d (%s)"):format(cfg.seed, step, what)
    expect_same_list(model_log, real_log, where .. ": tasks run / logged")
    for i = #real_log, 1, -1 do real_log[i] = nil end
    for i = #model_log, 1, -1 do model_log[i] = nil end
    expect_equal(model.live_count, timer:pending(), where .. ": pending()")
    local s = timer:stats()
    expect_equal(model.live_count, s.pending, where .. ": stats().pending")
    expect_equal(model:due_count(), s.due, where .. ": stats().due")
    expect_equal(model.fired, s.fired, where .. ": stats().fired")
    expect_equal(model.cancelled, s.cancelled, where .. ": stats().cancelled")
    if not model.stopped then
      expect_equal(model.now / 1e9, timer:now(), where .. ": now()")
    end
    local listed = {}
    for i, h in ipairs(timer:timeouts()) do listed[i] = id_of[h] or "?" end
    expect_same_list(model:pending_ids(), listed, where .. ": timeouts()")
  end

  local function compare_timeout(step, id)
    local e, h = model.entries[id], handles[id]
    if not e or e.state == "refused" then
      assert.is_nil(h, "refused timeout " .. id .. " got a handle")
      return
    end
    local where = ("seed %d step %d timeout %d"):format(cfg.seed, step, id)
    expect_equal(e.expired == true, h:is_expired(), where .. ": is_expired()")
    if not e.base then
      expect_equal(e.deadline == NEVER and math.huge or e.deadline / 1e9, h:deadline(), where .. ": deadline()")
    end
    expect_equal(e.state == "cancelled" or e.state == "stopped", h:is_cancelled(), where .. ": is_cancelled()")
    local remaining = 0
    if e.state == "live" and not model:is_due(e) then
      -- the deadline may have passed while the clock is mid-tick: 0 then
      if e.deadline == NEVER then
        remaining = math.huge
      elseif e.base then                    -- 2^62 - elapsed, rounded once as C does
        remaining = (MAX_DELAY_NS - (model.now - e.base)) / 1e9
      else
        remaining = math.max(0, e.deadline - model.now) / 1e9
      end
    end
    expect_equal(remaining, h:remaining(), where .. ": remaining()")
  end

  -- the run ---------------------------------------------------------------------------
  for step = 1, cfg.steps do
    local r = rng.int(1, 100)
    local what
    if r <= 40 then
      local n = rng.int(1, 3)
      what = "schedule " .. n
      for _ = 1, n do
        local id = gen_spec(0, rng.int(1, 100) <= 4)
        real_schedule(id)
        model_schedule(id)
      end
    elseif r <= 46 then
      local id = next_id > 1 and rng.int(1, next_id - 1)
      local seconds = gen_reset_seconds()
      what = "reset " .. tostring(id)
      if id and handles[id] then
        real_log[#real_log + 1] = real_reset(id, seconds)
        model_log[#model_log + 1] = model_reset(id, seconds)
      end
    elseif r <= 52 then
      -- cancel, mostly a live one
      local id
      local live_ids = {}
      for lid in pairs(model.live) do live_ids[#live_ids + 1] = lid end
      table.sort(live_ids)
      if #live_ids > 0 and rng.int(1, 4) > 1 then id = live_ids[rng.int(1, #live_ids)]
      elseif next_id > 1 then id = rng.int(1, next_id - 1) end
      what = "cancel " .. tostring(id)
      if id and handles[id] then
        local expected = model:cancel(id)
        expect_equal(expected, handles[id]:cancel(), ("seed %d step %d: cancel(%d)"):format(cfg.seed, step, id))
      end
    elseif r <= 85 then
      local amount = gen_advance_ns(rng, cfg, model.now)
      what = "advance " .. amount .. " ns"
      local seconds = amount / 1e9
      model.now = model.now + to_ns(seconds)
      local expected = model:drain(math.huge, perform)
      expect_equal(expected, timer:advance(seconds), ("seed %d step %d: advance's return"):format(cfg.seed, step))
    else
      local max = rng.pick({ 0, 1, 1, 2, 3, 5, false })
      what = "poll " .. tostring(max)
      local expected = model:drain(max or math.huge, perform)
      local got = max and timer:poll(max) or timer:poll()
      expect_equal(expected, got, ("seed %d step %d: poll's return"):format(cfg.seed, step))
    end
    compare(step, what)
    -- a sample of handles
    for _ = 1, 3 do
      if next_id > 1 then compare_timeout(step, rng.int(1, next_id - 1)) end
    end
  end

  -- the end: stop(), directly or from inside a task --------------------------------------
  local stopped_ids
  if cfg.stop_inside then
    if cfg.max_pending > 0 and model.live_count >= cfg.max_pending then   -- room for the stop task
      local ids = model:pending_ids()
      assert.are.equal(model:cancel(ids[1]), handles[ids[1]]:cancel())
    end
    local id = next_id
    next_id = next_id + 1
    specs[id] = { id = id, seconds = 0, action = { kind = "stop" } }
    real_schedule(id)
    model_schedule(id)
    local amount = cfg.tick_ns - imod(model.now, cfg.tick_ns)
    model.now = model.now + amount
    local expected = model:drain(math.huge, perform)
    assert.are.equal(expected, timer:advance(amount / 1e9))
    compare(cfg.steps + 1, "stop inside a task")
  else
    local ids = {}
    for _, h in ipairs(timer:stop()) do ids[#ids + 1] = id_of[h] or "?" end
    real_log[#real_log + 1] = "S:" .. table.concat(ids, ",")
    model_log[#model_log + 1] = "S:" .. table.concat(model:stop(), ",")
    compare(cfg.steps + 1, "stop")
  end
  assert.is_true(model.stopped)
  assert.are.same({}, timer:stop())
  assert.are.equal(0, timer:advance(1))
  assert.are.equal(0, timer:pending())

  -- nothing lost: every one-shot ran once, was cancelled, or was returned by stop()
  stopped_ids = {}
  for id, e in pairs(model.entries) do
    if e.state == "stopped" then stopped_ids[id] = true end
  end
  local counted = 0
  for id = 1, next_id - 1 do
    local e, h = model.entries[id], handles[id]
    if e and e.state ~= "refused" then
      counted = counted + 1
      compare_timeout(cfg.steps + 2, id)
      local ran = (real_runs[id] or 0) > 0
      if not e.interval and not e.resets then
        local ways = (ran and 1 or 0) + (h:is_cancelled() and 1 or 0)
        assert.are.equal(1, ways, "timeout " .. id .. " did not end exactly one way")
        assert.is_true((real_runs[id] or 0) <= 1, "timeout " .. id .. " ran twice")
      end
      if stopped_ids[id] then
        assert.is_true(not ran or e.resets ~= nil)
        assert.is_true(h:is_cancelled())
      end
    end
  end
  return counted
end

describe("order", function()
  it("runs by exact deadline within one tick, not by tick", function()
    local timer = manual({ tick = 1 })
    local log, task = logger()
    for _, d in ipairs({ 0.7, 0.2, 0.5, 0.1, 0.9, 0.3 }) do timer:timeout(d, task, d) end
    assert.are.equal(6, timer:advance(1))
    assert.are.same({ 0.1, 0.2, 0.3, 0.5, 0.7, 0.9 }, log)
  end)

  it("runs by deadline across ticks collected in one advance", function()
    local timer = manual({ tick = 0.01, wheel_size = 4 })
    local log, task = logger()
    local delays = { 0.55, 0.015, 0.3, 0.011, 0.04, 0.0101, 0.16, 0.039, 0.02, 5, 0.64 }
    for _, d in ipairs(delays) do timer:timeout(d, task, d) end
    assert.are.equal(#delays, timer:advance(10))
    local sorted = { unpack(delays) }
    table.sort(sorted)
    assert.are.same(sorted, log)
  end)

  it("runs equal deadlines in scheduling order", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    for i = 1, 50 do timer:timeout(0.25, task, i) end
    assert.are.equal(50, timer:advance(0.3))
    for i = 1, 50 do assert.are.equal(i, log[i]) end
  end)

  it("orders by the absolute deadline of timeouts scheduled at different times", function()
    local timer = manual({ tick = 0.1 })
    local log, task = logger()
    timer:timeout(0.05, task, "A")     -- deadline 0.05
    timer:advance(0.013)
    timer:timeout(0.03, task, "B")     -- deadline 0.043
    timer:timeout(0.037, task, "C")    -- deadline 0.05, scheduled after A
    assert.are.equal(3, timer:advance(0.1))
    assert.are.same({ "B", "A", "C" }, log)
  end)

  it("keeps deadline order between due-but-unpolled timeouts and newly due ones", function()
    local timer = manual({ tick = 0.01 })
    local log, task = logger()
    timer:timeout(0.01, task, 1)
    timer:timeout(0.01, task, 2)
    timer:timeout(0.02, task, 4)
    timer:timeout(0.015, task, 3)
    timer:timeout(0.02, task, 5)
    timer:advance(0.01)  -- runs 1, 2 (advance polls all)
    assert.are.same({ 1, 2 }, log)
    timer:timeout(0.005, task, 6)       -- deadline 0.015, after 3 by sequence
    timer:timeout(0, task, 0)           -- deadline 0.01: the clock is on a boundary, so due at once
    assert.are.equal(1, timer:poll(1))  -- the delay-0 one is due at once
    assert.are.same({ 1, 2, 0 }, log)
    assert.are.equal(0, timer:poll())
    assert.are.equal(4, timer:advance(0.01))
    assert.are.same({ 1, 2, 0, 3, 6, 4, 5 }, log)
  end)

  it("orders by exact deadline within one tick, equal deadlines in scheduling order", function()
    local timer = manual({ tick = 1 })
    local log, task = logger()
    timer:timeout(0.3, task, "0.3")
    timer:timeout(0.1000001, task, "0.1000001")
    timer:timeout(0.1, task, "0.1 first")
    timer:timeout(0.10000005, task, "0.10000005")
    timer:timeout(0.1, task, "0.1 second")
    timer:timeout(0.123456, task, "0.123456")
    assert.are.equal(6, timer:advance(1))
    assert.are.same({ "0.1 first", "0.1 second", "0.10000005", "0.1000001", "0.123456", "0.3" }, log)
    timer:stop()
  end)
end)

describe("order on the real clock", function()
  it("runs tasks across ticks in exact deadline order, equal delays in scheduling order", function()
    local t = hwt.new({ tick = 0.01 })
    local order = {}
    local lo, hi = {}, {}
    local function rec(_, name) order[#order + 1] = name end
    local function schedule(delay, name)
      local before = hwt.now()
      t:timeout(delay, rec, name)
      lo[name], hi[name] = before + delay, hwt.now() + delay
    end
    local t0 = hwt.now()
    -- 0.011, 0.012 and 0.013 share a tick: order by exact deadline anyway
    local delays = { 0.05, 0.013, 0.03, 0.011, 0.012, 0.001, 0.04, 0.021 }
    for _, d in ipairs(delays) do schedule(d, d) end
    for i = 1, 5 do schedule(0.025, "eq" .. i) end
    local scheduling_time = hwt.now() - t0
    assert.equals(#delays + 5, t:run())
    assert.equals(#delays + 5, #order)
    -- always: no task ran before one whose deadline was surely earlier
    for k = 2, #order do
      local prev, cur = order[k - 1], order[k]
      assert.is_true(lo[prev] <= hi[cur] + EPS,
        ("%s ran before %s"):format(tostring(prev), tostring(cur)))
    end
    -- equal delays: scheduling order, whatever the load
    local eq = {}
    for _, name in ipairs(order) do
      if type(name) == "string" then eq[#eq + 1] = name end
    end
    assert.same({ "eq1", "eq2", "eq3", "eq4", "eq5" }, eq)
    if scheduling_time < 0.0009 then   -- not preempted while scheduling: exact order
      assert.same({ 0.001, 0.011, 0.012, 0.013, 0.021,
                    "eq1", "eq2", "eq3", "eq4", "eq5",
                    0.03, 0.04, 0.05 }, order)
    end
    t:stop()
  end)

  it("fires 10000 pending timeouts with random delays in deadline order", function()
    local t = hwt.new({ tick = 0.001 })
    local N = 10000
    local lo, hi, start = {}, {}, {}
    local order = {}
    local function task(_, i)
      order[#order + 1] = i
      start[i] = hwt.now()
    end
    math.randomseed(20240601)
    for i = 1, N do
      local delay = 0.2 + math.random() * 0.3
      local before = hwt.now()
      t:timeout(delay, task, i)
      lo[i] = before + delay
      hi[i] = hwt.now() + delay
    end
    assert.equals(N, t:pending())
    assert.equals(N, t:run())
    assert.equals(N, #order)
    assert.equals(0, t:pending())
    assert.equals(N, t:stats().fired)
    local seen = {}
    for k, i in ipairs(order) do
      assert.is_nil(seen[i])
      seen[i] = true
      if start[i] < lo[i] - EPS then
        error(("timeout %d started %.9f s early"):format(i, lo[i] - start[i]))
      end
      if start[i] > hi[i] + LATE then
        error(("timeout %d started %.3f s late"):format(i, start[i] - hi[i]))
      end
      if k > 1 then
        local prev = order[k - 1]
        -- prev's real deadline must not be after i's real deadline
        if lo[prev] > hi[i] + EPS then
          error(("timeout %d (deadline >= %.6f) ran before %d (deadline <= %.6f)")
            :format(prev, lo[prev], i, hi[i]))
        end
      end
    end
    t:stop()
  end)
end)

describe("differential test against a reference model (manual clock)", function()
  local configs = {
    { seed = 1, tick_ns = 1000000, wheel_size = 8, max_pending = 0, steps = 2500, stop_inside = false },
    { seed = 2, tick_ns = 10000000, wheel_size = 4, max_pending = 0, steps = 2500, stop_inside = true },
    { seed = 3, tick_ns = 1000000, wheel_size = 64, max_pending = 40, steps = 2000, stop_inside = true },
    { seed = 4, tick_ns = 1000, wheel_size = 1, max_pending = 0, steps = 2000, stop_inside = false },
    { seed = 5, tick_ns = 7000000, wheel_size = 16, max_pending = 14, steps = 2000, stop_inside = false },
  }

  for _, cfg in ipairs(configs) do
    it(("seed %d: tick %d ns, wheel %d, max_pending %d, %d steps, stop %s"):format(
        cfg.seed, cfg.tick_ns, cfg.wheel_size, cfg.max_pending, cfg.steps,
        cfg.stop_inside and "inside a task" or "at the end"), function()
      local counted = run_scenario(cfg)
      assert.is_true(counted > cfg.steps / 3, "too few timeouts were exercised: " .. counted)
    end)
  end

  it("the reference PRNG is deterministic and independent of math.random", function()
    local a, b = make_rng(42), make_rng(42)
    math.randomseed(1)
    local x = a.int(1, 1000000)
    math.randomseed(2)
    assert.are.equal(x, b.int(1, 1000000))
    assert.are_not.equal(make_rng(43).int(1, 1000000), x)
  end)
end)
