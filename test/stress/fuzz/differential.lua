-- test/stress/fuzz/differential.lua — a differential fuzzer for hwt on the manual clock.
--
-- Random operation sequences run against hwt (hwt.new{clock = "manual"}) and,
-- in lockstep, against a plain reference model written below (a heap of pending
-- timeouts and a list of due ones, both by (deadline, seq), in integer ns).
--
-- Operations: timeout() with delays of every kind (0, sub-tick, tick multiples, a
-- revolution +- 1 tick / 1 ns, relative and absolute boundaries of every wheel level,
-- next to tick boundaries, huge: 1e9 s .. 1e300, math.huge), bursts of equal
-- deadlines, every() with intervals that are tick multiples, tick multiples +- 1 ns,
-- k + 1/2 ticks, fractions of a tick, sub-tick, a few ns, below 1 ns, random, huge,
-- math.huge; cancel() of pending / due-but-unpolled / ran / cancelled timeouts,
-- twice, by <close>; poll() and poll(max) (0 included); advance() by 0, sub-tick,
-- to / next to tick boundaries, multiples, to the next deadline, level boundaries,
-- big jumps, and to a live periodic timeout's grid: exactly to its next deadline d,
-- to d + k * interval (k = 1..5) exactly, +- 1 ns, + 1 ns .. sub-tick, or to the
-- first grid point on a tick boundary (+ 0..3 intervals), so that it runs exactly
-- on a beat or late by exact multiples of its interval; 30% of those are followed
-- by advance(0) or poll() (every(1), advance(2), advance(0): one run, not two).
-- Tasks (functions, callables, TimerTask tables, with extra arguments) schedule
-- timeouts (delay 0 too) and periodic ones, re-submit t:task(), cancel themselves
-- and others, raise errors of every type, and check the timer from inside.
-- Each sequence ends with stop() (outside, inside a task, or by the
-- timer's <close>), sometimes after advance(1e300) (the clock's end), then checks
-- that every timeout ended exactly one way and that the stopped timer refuses.
--
-- Compared: every task start (which task, in which order, at which timer:now(),
-- with which arguments, its own state and pending() inside it), on_error's error
-- value and timeout, the return values of poll/advance/cancel/timeout/every,
-- pending(), stats() (pending, due, fired, cancelled, ticks, late_max) and wait()
-- after every step, and a sample of timeouts' is_cancelled(), is_expired(),
-- remaining() (now and then tostring(), timer(), task()).
--
-- Usage (from the repository root, after `make all`):
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 test/stress/fuzz/differential.lua
-- Knobs (environment):
--   FUZZ_SEED          first seed (default 1); seeds FUZZ_SEED, FUZZ_SEED+1, ... follow
--   FUZZ_OPS           total operations (default 1000000); whole seeds run until reached
--   FUZZ_SECONDS       if set: run successive seeds for that many seconds instead
--   FUZZ_TRACE         if set: print every operation and every task start
--   FUZZ_COVERAGE      if set: print how often each interesting case came up (periodic
--                      runs are classed by lateness: at the deadline, exactly k intervals
--                      late, k intervals +- 1 ns, + sub-tick, + more; interval a tick
--                      multiple or not)
--   FUZZ_MAX_FAILURES  stop after this many failed seeds (default 10)
-- Each seed is one test case: it picks its own configuration (tick, wheel_size,
-- max_pending, length, how it stops) from its PRNG, so one seed replays alone
-- with FUZZ_SEED=<seed> FUZZ_OPS=1. The last line is "differential: N passed, N failed".
--
-- The model (from /work/shared/API.md and src/):
--  * seconds -> ns: (uint64)(seconds * 1e9 + 0.5), clamped to 2^62; math.huge = never;
--    deadline = now + delay; the model keeps integer nanoseconds;
--  * due when now >= deadline: the manual clock's deadlines are exact (the tick only counts
--    stats().ticks);
--  * a draining call (poll, advance's poll) runs due timeouts scheduled before it began,
--    in (deadline, seq) order, at most `max`; advance(s) is now += s, then one poll();
--  * a one-shot leaves pending() when it starts; a periodic stays pending while armed,
--    including during its own run; after a run it is re-armed with a new seq at the
--    first grid point (first deadline + k * interval) strictly later than now, the
--    clock when the run ends (missed beats skipped; a run exactly on a later beat
--    does not leave that beat due), i.e. last deadline + ((now - last) // interval
--    + 1) * interval, or never if that is beyond 2^62 ns of delay;
--  * cancel() is true only for a pending or due timeout, or a running periodic one;
--  * stop() returns the live timeouts that never ran, in (deadline, seq) order, each
--    cancelled; periodic ones that ran end quietly; later calls raise "timer is stopped";
--  * stats(): pending, due, fired (tasks started), cancelled (incl. by stop),
--    ticks = floor(now / tick) (frozen at stop), late_max = max(start - deadline).
-- The PRNG is xorshift64* on 64-bit integers (math.random is never used).
-- The model's clock stays below 2^61 ns (a jump uses at most 1/16 of what is left)
-- so that deadlines (now + up to 2^62) fit in signed 64-bit integers; only the final
-- advance(1e300) takes it to hwt's limit, 2^62 ns.
-- Lua 5.4 and LuaJIT (make fuzz LUA=luajit): the same seeds draw the same
-- operations and the model is the same. The model's nanoseconds are 5.4's integers,
-- or LuaJIT's int64_t cdata (its numbers are doubles, exact only to 2^53), and the
-- integer operators 5.4 has and LuaJIT lacks (//, ~, >>) are the functions of
-- "integers" below; hwt itself gets plain numbers. Where LuaJIT has no <close>, the
-- "close" operations cancel the timeout or stop the timer, as __close does; poll()'s
-- largest max is 2^63 - 1024 there (the largest double below 2^63). The JIT stays on
-- (the chaos run turns it off on LuaJIT before 2.1.1710398010, whose JIT it broke:
-- test/stress/chaos.lua; here, one state and few finalizers, Debian 12's LuaJIT ran
-- 13.8M operations clean with it); FUZZ_JIT=0 turns it off.
-- A crash of the core (a signal) ends the run without a report: rerun with
-- FUZZ_TRACE=1 to see the seed and the last operation.
-- Not covered: the real clock and its worker thread, wait() that blocks, fd()
-- readiness, nested poll()/advance() from inside a task, hwt.retry / sleep.

local is_jit = rawget(_G, "jit") ~= nil
local LUA_NAME = is_jit and "luajit" or "lua" .. _VERSION:sub(5)   -- its build/ directory

if is_jit and os.getenv("FUZZ_JIT") == "0" then jit.off() end

-- Find hwt next to this file when LUA_PATH / LUA_CPATH do not say otherwise.
do
  local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
  local root = dir .. "/../.."
  package.path = package.path .. ";" .. root .. "/lua/?.lua"
  package.cpath = package.cpath .. ";" .. root .. "/build/" .. LUA_NAME .. "/?.so"
end

local hwt = require("hwt")

-- ---- integers: 5.4's, or LuaJIT's int64_t ------------------------------------
-- I(x): x as the model's integer; idiv: //; bxor: ~; shr: >> (logical); the
-- constants; new_rng (below). Each Lua compiles only its own chunk.
local integers = assert(load(is_jit and [[
  local ffi, bit = require("ffi"), require("bit")
  local int64 = ffi.typeof("int64_t")
  local M = {}
  M.I = int64
  M.is_integer = function(v) return ffi.istype(int64, v) end
  -- int64_t division truncates: // for the operands here, which are never negative.
  M.idiv = function(a, b)
    if type(a) == "number" and type(b) == "number" then return math.floor(a / b) end
    return int64(a) / b
  end
  M.bxor, M.shr = bit.bxor, bit.rshift
  M.MAX_NS, M.NOW_CAP, M.TWO53 = int64(2 ^ 62), int64(2 ^ 61), int64(2 ^ 53)
  M.MAXINT = 0x7FFFFFFFFFFFFFFFLL
  M.POLL_HUGE = 2 ^ 63 - 1024
  M.to_integer = function(n) return n and n % 1 == 0 and n or nil end
  local bxor, lshift, rshift = bit.bxor, bit.lshift, bit.rshift
  function M.new_rng(seed)
    local z = ffi.cast("uint64_t", seed) + 0x9E3779B97F4A7C15ULL    -- splitmix64 for the state
    z = bxor(z, rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
    z = bxor(z, rshift(z, 27)) * 0x94D049BB133111EBULL
    z = bxor(z, rshift(z, 31))
    if z == 0ULL then z = 1ULL end
    local s = z
    -- lo..hi, xorshift64*: a number when both bounds are, else an int64_t
    return function(lo, hi)
      local x = s
      x = bxor(x, rshift(x, 12)); x = bxor(x, lshift(x, 25)); x = bxor(x, rshift(x, 27))
      s = x
      local r = rshift(x * 0x2545F4914F6CDD1DULL, 2) % (hi - lo + 1)
      if type(lo) == "number" and type(hi) == "number" then return lo + tonumber(r) end
      return lo + int64(r)
    end
  end
  return M
]] or [[
  local M = {}
  M.I = function(x) return x end
  M.is_integer = function(v) return math.type(v) == "integer" end
  M.idiv = function(a, b) return a // b end
  M.bxor = function(a, b) return a ~ b end
  M.shr = function(a, n) return a >> n end
  M.MAX_NS, M.NOW_CAP, M.TWO53 = 1 << 62, 1 << 61, 1 << 53
  M.MAXINT = math.maxinteger
  M.POLL_HUGE = math.maxinteger
  M.to_integer = math.tointeger
  function M.new_rng(seed)
    local z = seed + 0x9E3779B97F4A7C15                  -- splitmix64 for the state
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    if z == 0 then z = 1 end
    local s = z
    return function(lo, hi)                              -- lo..hi, xorshift64*
      local x = s
      x = x ~ (x >> 12); x = x ~ (x << 25); x = x ~ (x >> 27)
      s = x
      return lo + ((x * 0x2545F4914F6CDD1D) >> 2) % (hi - lo + 1)
    end
  end
  return M
]]))()
local I, idiv, bxor, shr = integers.I, integers.idiv, integers.bxor, integers.shr
local to_integer = integers.to_integer

-- <close> on the Lua that has it; elsewhere what __close does: a Timeout
-- cancels itself, a Timer stops.
local close_now = is_jit and function(v)
  if hwt.is_timeout(v) then v:cancel() else v:stop() end
end or assert(load("return function(v) local closing <close> = v end"))()

-- The same Timeout: the very object on 5.4; on LuaJIT, where a Timeout may be
-- a cdata, what == says (API.md: t1 == t2 only for the same timeout).
local function same_timeout(a, b)
  if rawequal(a, b) then return true end
  return is_jit and a ~= nil and b ~= nil and hwt.is_timeout(a) and hwt.is_timeout(b) and a == b
end

local NEVER = math.huge
local MAX_NS = integers.MAX_NS      -- ENGINE_MAX_DELAY_NS
local MAX_NS_FLOAT = 4611686018427387904.0
local NOW_CAP = integers.NOW_CAP    -- the model's clock stays below this (no overflow)
local MAXINT = integers.MAXINT
local unpack = table.unpack or unpack

-- Nanoseconds as seconds (the model's integer to a number, then / 1e9).
local function secs(ns) return tonumber(ns) / 1e9 end

-- ---- helpers ---------------------------------------------------------------

-- Exactly lhwt.c's conversion for seconds >= 0 (math.huge: never).
local function to_ns(seconds)
  if seconds == math.huge then return NEVER end
  local x = seconds * 1e9 + 0.5
  if x >= MAX_NS_FLOAT then return MAX_NS end
  return I(math.floor(x))
end

local function mul_cap(a, b)        -- min(a * b, MAX_NS) for a, b >= 0
  if a == 0 or b == 0 then return 0 end
  if a > idiv(MAX_NS, b) then return MAX_NS end
  local product = a * b
  return product < MAX_NS and product or MAX_NS
end

local function ceil_div(a, b) return idiv(a, b) + (a % b ~= 0 and 1 or 0) end

local function show(v)
  if integers.is_integer(v) then return (tostring(v):gsub("U?LL$", "")) end
  if type(v) == "number" then                     -- the shortest exact form
    for digits = 14, 16 do
      local text = string.format("%." .. digits .. "g", v)
      if tonumber(text) == v then return text end
    end
    return string.format("%.17g", v)
  end
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function new_rng(seed)
  local rng = { int = integers.new_rng(seed) }       -- lo..hi
  local int = rng.int
  function rng.chance(percent) return int(0, 99) < percent end
  function rng.pick(list) return list[int(1, #list)] end
  return rng
end

-- A description {fmt = ..., n = ..., args...} with this metatable is formatted only
-- when shown (tostring, %s); numbers print exactly, strings quoted (op_desc below).
local Lazy = {}
Lazy.__tostring = function(p)
  local args = {}
  for i = 1, p.n do args[i] = show(p[i]) end
  return string.format(p.fmt, unpack(args, 1, p.n))
end

-- chooser{"a", 3, "b", 1}(rng) -> "a" 3 times out of 4 (one draw, a table lookup)
local function chooser(spec)
  local by_draw, total = {}, 0
  for i = 1, #spec, 2 do
    for _ = 1, spec[i + 1] do
      total = total + 1
      by_draw[total] = spec[i]
    end
  end
  return function(rng) return by_draw[rng.int(1, total)] end
end

-- "task <id>", made once per id (it names a task in every check inside it)
local task_names = {}
local function task_name(id)
  local name = task_names[id]
  if not name then name = "task " .. id; task_names[id] = name end
  return name
end

-- ---- the reference model -----------------------------------------------------
-- Entry states: "wheel" (pending, not due; never-timeouts too), "due" (waiting for
-- a poll), "running", "ran" (a one-shot that ran), "cancelled", "stopped" (cancelled
-- by stop), "ended" (a periodic that ran, ended by stop), "refused" (max_pending).

local Model = {}
Model.__index = Model

-- What the run exercised (printed with FUZZ_COVERAGE=1).
local COVERAGE = (os.getenv("FUZZ_COVERAGE") or "") ~= ""
local cov = setmetatable({}, { __index = function() return 0 end })
local function count(key) cov[key] = cov[key] + 1 end

local function new_model(tick_ns, max_pending)
  return setmetatable({
    tick = tick_ns, now = I(0), next_seq = 0, max_pending = max_pending,
    live = {}, periodic_live = 0, plist = {},   -- plist: the live periodic ones
    heap = {}, hn = 0,                          -- pending nodes {d, s, e} by (d, s)
    due = {}, dh = 1, dt = 0, due_count = 0,    -- due nodes, appended in (d, s) order
    fired = 0, cancelled = 0, late_max = I(0), stopped = false, stop_ticks = 0,
    dr_limit = 0, dr_max = 0, dr_ran = 0, dr_cur = nil,
  }, Model)
end

local function node_less(a, b)
  return a.d < b.d or (a.d == b.d and a.s < b.s)
end

local function entry_less(a, b)
  local da, db = a.deadline, b.deadline
  if da ~= db then
    -- never (math.huge) is after every deadline: said here, since LuaJIT compares
    -- an int64_t with a number by converting the number to int64_t
    if da == NEVER or db == NEVER then return db == NEVER end
    return da < db
  end
  return a.seq < b.seq
end

function Model:live_add(e)
  local n = #self.live + 1
  self.live[n] = e
  e.li = n
  if e.interval then
    self.periodic_live = self.periodic_live + 1
    self.plist[self.periodic_live] = e
    e.pi = self.periodic_live
  end
end

function Model:live_remove(e)
  local live = self.live
  local n = #live
  local last = live[n]
  live[e.li] = last
  last.li = e.li
  live[n] = nil
  e.li = nil
  if e.interval then
    local plist, pn = self.plist, self.periodic_live
    local plast = plist[pn]
    plist[e.pi] = plast
    plast.pi = e.pi
    plist[pn] = nil
    e.pi = nil
    self.periodic_live = pn - 1
  end
end

function Model:heap_push(node)
  local h = self.heap
  local i = self.hn + 1
  self.hn = i
  local d, s = node.d, node.s
  while i > 1 do
    local p = math.floor(i / 2)
    local pn = h[p]
    local pd = pn.d
    if d < pd or (d == pd and s < pn.s) then h[i] = pn; i = p else break end
  end
  h[i] = node
end

function Model:heap_pop()
  local h, n = self.heap, self.hn
  local top, last = h[1], h[n]
  h[n] = nil
  n = n - 1
  self.hn = n
  if n > 0 then
    local i = 1
    local d, s = last.d, last.s
    while true do
      local c = 2 * i
      if c > n then break end
      local cn = h[c]
      if c < n then
        local rn = h[c + 1]
        if rn.d < cn.d or (rn.d == cn.d and rn.s < cn.s) then c = c + 1; cn = rn end
      end
      local cd = cn.d
      if cd < d or (cd == d and cn.s < s) then h[i] = cn; i = c else break end
    end
    h[i] = last
  end
  return top
end

function Model:heap_top()                       -- the earliest valid pending node
  while self.hn > 0 do
    local node = self.heap[1]
    local e = node.e
    if e.state == "wheel" and e.seq == node.s then return node end
    self:heap_pop()
  end
  return nil
end

function Model:threshold() return self.now end

function Model:append_due(node)
  local last = self.due[self.dt]
  if last and node_less(node, last) then
    error("model invariant: due list out of order", 0)
  end
  node.e.state = "due"
  self.dt = self.dt + 1
  self.due[self.dt] = node
  self.due_count = self.due_count + 1
end

function Model:place(e)
  if e.deadline == NEVER then e.state = "wheel"; return end
  local node = { d = e.deadline, s = e.seq, e = e }
  if e.deadline <= self:threshold() then
    self:append_due(node)
  else
    e.state = "wheel"
    self:heap_push(node)
  end
end

function Model:collect()                        -- the wheel catches up with now
  local thr = self:threshold()
  while true do
    local node = self:heap_top()
    if not node or node.d > thr then return end
    self:heap_pop()
    self:append_due(node)
  end
end

function Model:due_head()
  local due = self.due
  while self.dh <= self.dt do
    local node = due[self.dh]
    local e = node.e
    if e.state == "due" and e.seq == node.s then return node end
    due[self.dh] = nil
    self.dh = self.dh + 1
  end
  self.dh, self.dt = 1, 0                     -- empty: start again at 1 (no rehash churn)
  return nil
end

function Model:advance(delta_ns)
  if self.stopped then return end
  if delta_ns >= MAX_NS - self.now then self.now = MAX_NS else self.now = self.now + delta_ns end
  self:collect()
end

-- Returns the new entry, or nil when max_pending refuses it.
function Model:schedule(delay_ns, interval_ns)
  if self.max_pending > 0 and #self.live >= self.max_pending then return nil end
  local e = {                                  -- every field it will get (no rehash)
    deadline = delay_ns == NEVER and NEVER or self.now + delay_ns,
    interval = interval_ns or false, seq = self.next_seq, runs = 0, state = false,
    li = false, pi = false, id = false, task_kind = false, args = false, periodic = false,
    level = false,
  }
  self.next_seq = self.next_seq + 1
  self:live_add(e)
  self:place(e)
  return e
end

function Model:cancel(e)
  if self.stopped then return false end
  local st = e.state
  if st == "wheel" or st == "due" or (st == "running" and e.interval) then
    if COVERAGE then count("cancel() true, " .. (st == "wheel" and "pending" or st)) end
    if st == "due" then self.due_count = self.due_count - 1 end
    self:live_remove(e)
    e.state = "cancelled"
    self.cancelled = self.cancelled + 1
    return true
  end
  if COVERAGE then count("cancel() false, " .. st) end
  return false
end

-- The first grid point (last + k * interval, k >= 1) strictly later than now:
-- a run never leaves its own next beat already due (API.md, every()).
local function next_beat(last, interval, now)
  local beats = now >= last and idiv(now - last, interval) + 1 or 1
  if beats > idiv(MAX_NS - 1, interval) then return NEVER end
  return last + beats * interval
end

function Model:begin_drain(max)
  self.dr_limit, self.dr_max, self.dr_ran, self.dr_cur = self.next_seq, max, 0, nil
end

function Model:finish_current()
  local e = self.dr_cur
  if not e then return end
  self.dr_cur = nil
  if e.state == "running" then
    if e.interval and not self.stopped then
      e.deadline = next_beat(e.deadline, e.interval, self.now)
      e.seq = self.next_seq
      self.next_seq = self.next_seq + 1
      self:place(e)
    else
      e.state = "ran"
    end
  end
end

-- The next task the draining call must start, or nil.
function Model:next_due()
  self:finish_current()
  if self.stopped or self.dr_ran >= self.dr_max then return nil end
  local node = self:due_head()
  if not node then return nil end
  if node.s >= self.dr_limit then
    if COVERAGE then count("due but scheduled during the drain: held back") end
    return nil
  end
  self.due[self.dh] = nil
  self.dh = self.dh + 1
  local e = node.e
  self.due_count = self.due_count - 1
  e.state = "running"
  e.runs = e.runs + 1
  self.fired = self.fired + 1
  self.dr_ran = self.dr_ran + 1
  local late = self.now - e.deadline
  if late > self.late_max then self.late_max = late end
  if COVERAGE then
    count("tasks run")
    if e.interval then
      count(e.runs > 1 and "periodic runs after a re-arm" or "periodic first runs")
      local i = e.interval
      local k, r = idiv(late, i), late % i
      local what
      if late == 0 then what = "at the deadline"
      elseif r == 0 then what = "late by exactly k intervals, k = " .. (k <= 5 and show(k) or ">5")
      elseif r == 1 then what = "late by k intervals + 1 ns"
      elseif r == i - 1 then what = "late by k intervals - 1 ns"
      elseif r < self.tick then what = "late by k intervals + 2 ns .. sub-tick"
      else what = "late by k intervals + a tick or more" end
      count("periodic runs " .. what .. (i % self.tick == 0 and " (interval a tick multiple)"
            or " (interval not a tick multiple)"))
      if r == 0 and late > 0 and self.beat_op then
        count("periodic runs late by exactly k >= 1 intervals, in an advance to a beat")
      end
    end
    if late == 0 then count("runs exactly at the deadline") end
    if e.deadline % self.tick == 0 then count("runs of deadlines on a tick boundary") end
    if e.level then count("runs of timeouts placed at wheel level " .. e.level) end
  end
  if not e.interval then self:live_remove(e) end
  self.dr_cur = e
  return e
end

function Model:stop()
  if self.stopped then return {} end
  local list = {}
  for i, e in ipairs(self.live) do list[i] = e end
  table.sort(list, entry_less)
  local result = {}
  for _, e in ipairs(list) do
    e.li = nil
    if e.runs > 0 then
      if COVERAGE then count("stop(): periodic timeouts that ran, ended") end
      e.state = "ended"
    else
      if COVERAGE then count(e.state == "due" and "stop(): due timeouts returned" or "stop(): pending timeouts returned") end
      e.state = "stopped"
      self.cancelled = self.cancelled + 1
      result[#result + 1] = e
    end
  end
  self.live, self.periodic_live, self.plist, self.due_count = {}, 0, {}, 0
  self.stopped = true
  self.stop_ticks = idiv(self.now, self.tick)
  return result
end

local STATE_WORDS = {                      -- what tostring(timeout) must say (API.md)
  wheel = "pending", cancelled = "cancelled", stopped = "cancelled",
  ran = "expired", ended = "expired",
}

-- ---- one seed ---------------------------------------------------------------------

local TICKS = { 0.001, 0.01, 1, 0.001, 0.01, 1, 1e-6, 0.0007, 0.25 }
local WHEELS = { 1, 8, 512, 1, 8, 512, 2, 3, 64, 1000 }
local MAX_PERIODIC = 6                     -- live periodic timeouts, to bound the work

local top_op = chooser {
  "timeout", 28, "timeout0", 5, "burst", 3, "every", 3,
  "cancel_live", 6, "cancel_due", 4, "cancel_any", 3, "cancel_twice", 2, "close", 1,
  "poll", 6, "poll_max", 9, "advance", 32, "advance_beat", 8,
}

local task_action = chooser {
  "none", 40, "spawn", 12, "spawn0", 5, "spawn_every", 1, "resubmit", 3,
  "cancel_live", 7, "cancel_any", 4, "cancel_self", 6, "cancel_self_twice", 2,
  "raise", 8, "cancel_raise", 2, "stats", 4, "poll0", 2,
}

local function run_seed(seed, trace)
  local rng = new_rng(seed)
  local int, chance, pick = rng.int, rng.chance, rng.pick   -- (locals: the hot path)
  local tick = pick(TICKS)
  local wheel_size = pick(WHEELS)
  local max_pending = chance(10) and int(1, 64) or 0
  local len_kind = int(1, 10)
  local steps = len_kind <= 3 and int(20, 600) or len_kind <= 8 and int(600, 8000)
                or int(8000, 20000)
  local end_of_time = chance(6)
  local stop_inside = chance(35)

  local tick_ns = to_ns(tick)
  if tick_ns < 1000 then tick_ns = I(1000) end
  local wheel = 1
  while wheel < wheel_size do wheel = wheel * 2 end
  local bits = 0
  while 2 ^ bits < wheel do bits = bits + 1 end
  local levels = 1 + math.floor((64 - bits + 5) / 6)
  local function level_ticks(L)            -- ticks per slot of level L >= 1
    local t = wheel
    for _ = 2, L do t = mul_cap(t, 64) end
    return t
  end

  local config = string.format(
    "tick %s s (%d ns), wheel_size %d (%d slots, %d levels), max_pending %d, %d steps, %s%s",
    show(tick), tick_ns, wheel_size, wheel, levels, max_pending, steps,
    stop_inside and "stop inside a task" or "stop at the end",
    end_of_time and ", ends with advance(1e300)" or "")

  local m = new_model(tick_ns, max_pending)
  local entries = {}                                  -- id -> model entry
  local handles = {}                                  -- id -> Timeout
  local whandles = setmetatable({}, { __mode = "v" }) -- handles the fuzzer lets go of
  local real_runs = {}
  local failure
  local ctx = { step = 0, op = "hwt.new" }
  local recent = {}
  local expect_err                                    -- {e, value, handle}
  local stop_countdown
  local timer
  local TASKS

  local function handle_of(id) return handles[id] or whandles[id] end

  local function random_live()
    local n = #m.live
    if n == 0 then return nil end
    return m.live[int(1, n)]
  end

  local function random_entry()
    local n = #entries
    if n == 0 then return nil end
    return entries[int(1, n)]
  end

  local function fail(what, expected, actual)
    if not failure then
      failure = {
        fuzz = true, step = ctx.step, op = ctx.op,
        msg = string.format("%s: expected %s, actual %s", what, show(expected), show(actual)),
      }
    end
    error(failure, 0)
  end

  -- eq(expected, actual, what, ...): `what` is a format for the arguments that
  -- follow (formatted only on a mismatch, to keep the checks cheap).
  local function eq(expected, actual, what, ...)
    if expected ~= actual then
      if select("#", ...) > 0 then what = string.format(what, ...) end
      fail(what, expected, actual)
    end
  end

  -- op_desc(fmt, ...): the description of this step's operation, formatted only
  -- when shown, made without allocating: one of 8 tables reused in turn (as
  -- `recent` keeps the last 8); at most 8 arguments.
  local op_slots = {}
  for i = 0, 7 do
    op_slots[i] = setmetatable({ fmt = "", n = 0, false, false, false, false, false, false, false, false },
                               Lazy)
  end
  local function op_desc(fmt, ...)
    local p = op_slots[ctx.step % 8]
    p.fmt, p.n = fmt, select("#", ...)
    p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8] = ...
    return p
  end

  local function set_op(desc)
    ctx.op = desc
    recent[ctx.step % 8] = desc
    if trace then print(string.format("[%d] %s", ctx.step, tostring(desc))) end
  end

  local function note(fmt, ...)
    if trace then io.write(string.format("  [%d] " .. fmt .. "\n", ctx.step, ...)) end
  end

  -- -- generators ---------------------------------------------------------------

  local function as_arg(ns)                -- the seconds value to pass for ns
    local s = secs(ns)
    local r = int(1, 25)
    if r == 1 then return string.format("%.17g", s) end          -- numeric string
    if r == 2 and ns % 1000000000 == 0 and ns < integers.TWO53 then return tonumber(idiv(ns, 1000000000)) end
    return s
  end

  local function clamp_delay(ns)
    if ns < 0 then return 0 end
    if ns > MAX_NS then return MAX_NS end
    return ns
  end

  -- After advance(1e300) the clock sits at 2^62 ns: keep now + delay below 2^63 so
  -- that the model's integer deadlines do not wrap (hwt's are unsigned).
  local function fit(arg)
    if m.now < NOW_CAP or arg == math.huge then return arg end
    local room = MAXINT - m.now
    if to_ns(tonumber(arg)) > room then return as_arg(int(0, room)) end
    return arg
  end

  -- Lists to pick from (made once per seed, not at every pick).
  local NEAR_T = { -tick_ns, -1, 0, 1, tick_ns }
  local NEAR_T0 = { -tick_ns, -1, 0, 0, 1, tick_ns }
  local NEAR_T3 = { -tick_ns, 0, tick_ns }
  local NEAR_1 = { -1, 0, 0, 1 }
  local PLUS_MINUS_1 = { -1, 1 }
  local SPAN_TIMES = { 1, 1, 1, 2, 63, 64 }
  local HUGE_DELAYS = { 1e9, 1e300, 4611686018.427388, 1e10, 1e18, "1e300" }
  local TICK_PARTS = { 2, 3, 4, 7, 10 }
  local ZEROS = { 0, 0.0, "0" }
  local ZEROS2 = { 0, 0.0 }
  local POLL_MAX = { 0, 1, 1, 2, 3, 5, 2.0, 100, integers.POLL_HUGE }

  local function gen_delay_raw()           -- a delay argument for timeout()
    local T, W, now = tick_ns, wheel, m.now
    local r = int(1, 100)
    local ns
    if r <= 8 then ns = 0
    elseif r <= 18 then ns = int(1, T - 1)                              -- sub-tick
    elseif r <= 32 then ns = T * int(1, 2 * W + 2)                      -- exact multiple
    elseif r <= 40 then ns = W * T + pick(NEAR_T)                       -- a revolution
    elseif r <= 50 then                                                 -- level span, relative
      local span = mul_cap(level_ticks(int(1, levels)), T)
      ns = mul_cap(span, pick(SPAN_TIMES)) + pick(NEAR_T)
    elseif r <= 58 then                                                 -- level boundary, absolute
      local span = mul_cap(level_ticks(int(1, levels)), T)
      if span >= MAX_NS then ns = MAX_NS
      else ns = (idiv(now, span) + 1) * span - now + pick(NEAR_T) end
    elseif r <= 66 then                                                 -- on / next to a tick
      ns = T - now % T + T * int(0, 3) + pick(NEAR_1)
    elseif r <= 76 then ns = int(0, 4 * W * T)
    elseif r <= 86 then ns = int(0, mul_cap(64 * W, T))
    elseif r <= 92 then ns = int(0, mul_cap(64 * 64 * W, T))
    elseif r <= 97 then
      return pick(HUGE_DELAYS)                                          -- huge
    else return math.huge end                                           -- never
    return as_arg(clamp_delay(ns))
  end

  local function gen_delay() return fit(gen_delay_raw()) end

  local function gen_interval_raw()        -- an interval argument for every(), > 0
    local T, W = tick_ns, wheel
    local r = int(1, 100)
    if r <= 18 then return as_arg(int(1, T - 1))                        -- sub-tick
    elseif r <= 22 then return as_arg(idiv(T, pick(TICK_PARTS)))        -- a fraction of a tick
    elseif r <= 25 then return as_arg(int(1, 9))                        -- a few ns
    elseif r <= 52 then return as_arg(T * int(1, 2 * W))                -- a tick multiple
    elseif r <= 60 then return as_arg(T * int(1, 2 * W) + pick(PLUS_MINUS_1))  -- next to one
    elseif r <= 64 then return as_arg(T * int(1, 8) + idiv(T, 2))       -- k + 1/2 ticks
    elseif r <= 90 then return as_arg(int(1, 4 * W * T))
    elseif r <= 94 then return 1e-12                                    -- below a ns
    elseif r <= 97 then return 1e300
    else return math.huge end
  end

  local function gen_interval()
    local arg = fit(gen_interval_raw())
    return to_ns(tonumber(arg)) == 0 and 1e-12 or arg
  end

  local function gen_advance()             -- nanoseconds to move the clock by
    local T, W, now = tick_ns, wheel, m.now
    local to_b = T - now % T
    local r = int(1, 100)
    local ns
    if r <= 5 then ns = 0
    elseif r <= 17 then ns = int(1, T - 1)                              -- sub-tick
    elseif r <= 29 then ns = to_b                                       -- to the next boundary
    elseif r <= 35 then ns = to_b + pick(PLUS_MINUS_1)
    elseif r <= 47 then ns = T * int(1, W)                              -- exact multiple
    elseif r <= 70 then                                                 -- to the next deadline
      local node = m:heap_top()
      if node then
        local d, v = node.d, int(1, 4)
        if v == 1 then ns = d - now
        elseif v == 2 then ns = ceil_div(d, T) * T - now
        elseif v == 3 then ns = ceil_div(d, T) * T - now - 1
        else ns = d - now + int(0, 2 * T) end
      else ns = to_b end
    elseif r <= 74 then ns = W * T + pick(NEAR_T3)                      -- a revolution
    elseif r <= 83 then ns = int(0, 8 * W * T)
    elseif r <= 90 then ns = int(0, 128 * W * T)
    elseif r <= 96 then                                                 -- level boundary
      local span = mul_cap(level_ticks(int(1, levels)), T)
      if span >= NOW_CAP then ns = to_b
      else ns = (idiv(now, span) + 1) * span - now + pick(NEAR_T0) end
    else ns = int(0, mul_cap(64 * 64 * W, T)) end
    -- A jump may use up at most 1/16 of the clock's remaining range, so that a long
    -- sequence keeps time moving (advance(1e300) at the end reaches the rest).
    if ns > idiv(NOW_CAP - now, 16) then
      if COVERAGE then count("advances shortened (too far for the clock's range)") end
      ns = to_b <= NOW_CAP - now and to_b or 0
    end
    if ns < 0 then ns = 0 end
    if COVERAGE and ns >= mul_cap(wheel, T) then count("advances by a revolution or more") end
    return ns
  end

  -- An advance that makes a live periodic timeout run on its own grid (its next
  -- deadline d + k * interval) exactly, next to it, or between grid points: the
  -- re-arm rule (the first grid point strictly later than now) is decided there.
  -- Returns ns, the entry, the grid point the target is counted from (its next
  -- beat at or after now), k and the extra ns (-1, 0, 1, sub-tick); nil when no
  -- live periodic timeout has a reachable beat.
  local BEAT_KINDS = { "deadline", "grid", "grid", "grid-1", "grid+1", "grid+subtick", "grid@boundary" }
  local function gen_beat()
    local T, now = tick_ns, m.now
    local plist, n = m.plist, m.periodic_live
    if n == 0 then return nil end
    local limit = idiv(NOW_CAP - now, 16)      -- as gen_advance: keep the clock's range
    local start = int(1, n)
    for j = 0, n - 1 do
      local e = plist[(start + j - 1) % n + 1]
      local d, i = e.deadline, e.interval
      if d ~= NEVER and (e.state == "wheel" or e.state == "due") and i <= limit then
        local base = d                         -- the first grid point at or after now
        if base < now then base = d + ceil_div(now - d, i) * i end
        local kind = pick(BEAT_KINDS)
        local k = kind == "deadline" and 0 or int(1, 5)
        local extra = 0
        if kind == "grid-1" then extra = -1
        elseif kind == "grid+1" then extra = 1
        elseif kind == "grid+subtick" then extra = int(1, T - 1)
        elseif kind == "grid@boundary" then    -- the first grid point on a due tick, + 0..3 beats
          local b = ceil_div(base, T) * T
          k = ceil_div(b - base, i) + int(0, 3)
        end
        local off = base - now
        if off <= limit and k <= idiv(limit - off, i) then
          local ns = off + k * i + extra
          if ns > limit then ns = limit end
          if ns < 0 then ns = 0 end
          if COVERAGE then
            count("advance to a beat: " .. kind .. (i % T == 0 and " (interval a tick multiple)"
                  or " (interval not a tick multiple)"))
          end
          return ns, e, base, k, extra
        end
      end
    end
    return nil
  end

  -- -- checks -------------------------------------------------------------------

  local function compare_stats(where)
    local s = timer:stats()
    local ticks = m.stopped and m.stop_ticks or idiv(m.now, m.tick)
    if #m.live ~= s.pending or m.due_count ~= s.due or m.fired ~= s.fired or
       m.cancelled ~= s.cancelled or ticks ~= s.ticks or secs(m.late_max) ~= s.late_max then
      eq(#m.live, s.pending, "%s: stats().pending", where)
      eq(m.due_count, s.due, "%s: stats().due", where)
      eq(m.fired, s.fired, "%s: stats().fired", where)
      eq(m.cancelled, s.cancelled, "%s: stats().cancelled", where)
      eq(ticks, s.ticks, "%s: stats().ticks", where)
      eq(secs(m.late_max), s.late_max, "%s: stats().late_max", where)
    end
  end

  -- A timeout the fuzzer let go of (weak handle) may be collected once hwt lets go
  -- of it too: after it ran, was cancelled or stopped. Never while it is live.
  local function collected(e, where)
    local st = e.state
    if st == "wheel" or st == "due" or st == "running" then
      fail(string.format("%s: handle of live timeout %d (%s)", where, e.id, st), "kept by the timer", "collected")
    end
    return true
  end

  -- deep: also tostring(), timer(), task() (drawn by the caller, whatever GC did)
  local function check_entry(e, where, deep)
    local id = e.id
    local h = handles[id] or whandles[id]
    local st = e.state
    if st == "refused" then
      if h then fail(where .. ": refused timeout " .. id, "no handle", h) end
      return
    end
    if not h then collected(e, where); return end
    if (e.runs > 0) ~= h:is_expired() then
      fail(string.format("%s: timeout %d (%s) is_expired()", where, id, st), e.runs > 0, h:is_expired())
    end
    local cancelled = st == "cancelled" or st == "stopped"
    if cancelled ~= h:is_cancelled() then
      fail(string.format("%s: timeout %d (%s) is_cancelled()", where, id, st), cancelled, h:is_cancelled())
    end
    local remaining = 0                        -- remaining(): 0 unless pending, huge if never
    if st == "wheel" then
      local d = e.deadline
      if d == NEVER then remaining = math.huge
      elseif d > m.now then remaining = secs(d - m.now) end
    end
    if remaining ~= h:remaining() then
      fail(string.format("%s: timeout %d (%s) remaining()", where, id, st), remaining, h:remaining())
    end
    if deep then
      local w = where .. ": timeout " .. e.id .. " (" .. st .. ")"
      local s = tostring(h)
      local word = STATE_WORDS[st]
      if word and not s:find(word, 1, true) then fail(w .. " tostring()", "a text with '" .. word .. "'", s) end
      if not rawequal(h:timer(), timer) then fail(w .. " timer()", timer, h:timer()) end
      -- On LuaJIT a Timeout whose timeout ended lets go of its task, unless
      -- stop() handed it back (doc/api.md).
      local ended = st == "ran" or st == "cancelled" or st == "ended"
      local task = TASKS[e.task_kind]
      if is_jit and ended then task = nil end
      if not rawequal(h:task(), task) then fail(w .. " task()", task, h:task()) end
    end
  end

  local function compare_all(where)
    if #m.live ~= timer:pending() then fail(where .. ": pending()", #m.live, timer:pending()) end
    compare_stats(where)
    if not m.stopped and secs(m.now) ~= timer:now() then
      fail(where .. ": timer:now()", secs(m.now), timer:now())
    end
    local r = int(0, 255)                    -- one draw, independent bits: 1/8 wait(),
    if r % 8 == 0 then                       -- half of them wait(0); one entry in 16 deep
      local due = m.due_count > 0            -- manual clock: wait() returns at once
      if r % 16 < 8 then eq(due, timer:wait(), "%s: wait()", where)
      else eq(due, timer:wait(0), "%s: wait(0)", where) end
    end
    local deep = math.floor(r / 16)          -- 0..15: entry 1..3 checked deeply, or none
    local n = #entries
    if n > 0 then
      check_entry(entries[int(1, n)], where, deep == 1)
      check_entry(entries[int(1, n)], where, deep == 2)
      local e = random_live()
      if e then check_entry(e, where, deep == 3) end
    end
  end

  local function raise_failure()
    if failure then error(failure, 0) end
  end

  -- After a draining call `what`(`arg`) (`what` alone if arg is nil) returned
  -- `got`: the model must have nothing more to run.
  local function drain_name(what, arg)
    if arg == nil then return what end
    return what .. "(" .. show(arg) .. ")"
  end
  local function end_drain(got, what, arg)
    raise_failure()
    if expect_err then
      fail(drain_name(what, arg) .. ": on_error for task " .. expect_err.e.id, "a call", "none")
    end
    local extra = m:next_due()
    if extra then
      fail(drain_name(what, arg) .. ": tasks run", "task " .. extra.id .. " to run as #" .. m.dr_ran,
           "the drain ended")
    end
    if m.dr_ran ~= got then fail(drain_name(what, arg) .. "'s return", m.dr_ran, got) end
    if COVERAGE and m.due_count > 0 then count("drains that left due timeouts") end
  end

  -- -- operations on both sides ---------------------------------------------------------

  local ARG_SETS = {
    function(id) return { n = 1, id } end,
    function(id) return { n = 3, id, {}, nil } end,
    function(id) return { n = 4, id, "x", 42, false } end,
    function(id) return { n = 2, id, 0.5 } end,
  }

  local function schedule_name(where, method, arg, id)
    return string.format("%s: %s(%s) #%d", tostring(where), method, show(arg), id)
  end

  -- timeout()/every() on both sides; task_kind: 1 function, 2 callable, 3 TimerTask.
  local function schedule_pair(periodic, arg, where, task_kind)
    local id = #entries + 1
    task_kind = task_kind or int(1, 3)
    local args = pick(ARG_SETS)(id)
    local delay = to_ns(tonumber(arg))
    local interval
    if periodic then
      interval = delay
      if delay == NEVER then interval = MAX_NS elseif delay == 0 then interval, delay = 1, 1 end
    end
    local method = periodic and "every" or "timeout"
    if trace then note("%s(%s) -> #%d", method, show(arg), id) end
    local ok, h, err = pcall(timer[method], timer, arg, TASKS[task_kind], unpack(args, 1, args.n))
    if m.stopped then
      if ok or not tostring(h):find("timer is stopped", 1, true) then
        fail(schedule_name(where, method, arg, id) .. " after stop()", "error 'timer is stopped'",
             ok and h or tostring(h))
      end
      return
    end
    if not ok then fail(schedule_name(where, method, arg, id), "no error", h) end
    local e = m:schedule(delay, interval)
    if not e then
      if COVERAGE then count("refused at max_pending") end
      entries[id] = { id = id, state = "refused", runs = 0 }
      if h ~= nil or type(err) ~= "string" or not err:find("too many pending timeouts", 1, true) then
        fail(schedule_name(where, method, arg, id) .. " at max_pending", "nil, 'too many pending timeouts ...'",
             tostring(h) .. ", " .. tostring(err))
      end
      return
    end
    local mt = getmetatable(h)                 -- hwt 0.2: "hwt.Timeout" (__metatable)
    if not (hwt.is_timeout and hwt.is_timeout(h)) and mt ~= "hwt.Timeout"
       and (type(mt) ~= "table" or mt.__name ~= "hwt.Timeout") then
      fail(schedule_name(where, method, arg, id), "a Timeout", h == nil and ("nil, " .. tostring(err)) or h)
    end
    e.id, e.task_kind, e.args, e.periodic = id, task_kind, args, periodic
    if COVERAGE and e.state == "wheel" and e.deadline ~= NEVER then   -- its wheel level
      local above = shr(bxor(ceil_div(e.deadline, tick_ns), idiv(m.now, tick_ns)), bits)
      e.level = 0
      while above ~= 0 do e.level = e.level + 1; above = shr(above, 6) end
    end
    entries[id] = e
    if int(1, 10) == 1 then whandles[id] = h else handles[id] = h end
  end

  local function cancel_pair(e, where)
    local h = handle_of(e.id)
    if not h then                                -- refused, or let go of and collected
      if e.state ~= "refused" then collected(e, where) end
      return
    end
    local was = e.state
    local expected = m:cancel(e)
    if trace then note("cancel #%d -> %s", e.id, tostring(expected)) end
    eq(expected, h:cancel(), "%s: cancel() of timeout %d (was %s)", where, e.id, was)
  end

  local ERROR_VALUES = {
    function(id) return "task " .. id .. " failed" end,
    function(id) return { id = id } end,
    function(id) return id end,
    function() return 2.5 end,
    function() return false end,
    function() return nil end,
    function(_, t) return t end,
  }

  local function raise(e, t)
    local value = pick(ERROR_VALUES)(e.id, t)
    expect_err = { e = e, value = value, handle = t }
    if COVERAGE then count("tasks that raised") end
    if trace then note("task #%d raises %s", e.id, show(value)) end
    error(value, 0)
  end

  -- stop()'s result holds Timeout h where the model has entry x (live until
  -- stop(), so its handle cannot have been collected).
  local function check_listed(x, h, what)
    if not same_timeout(handle_of(x.id), h) then
      local id = "not a timeout of this seed"
      for i = 1, #entries do if same_timeout(handle_of(i), h) then id = i; break end end
      fail(what, x.id, id)
    end
  end

  local function stop_inside(e, t)
    local w = "stop() inside task " .. e.id
    local expected = m:stop()
    if COVERAGE then count("stop() inside a task") end
    note("stop() inside task #%d", e.id)
    local list = timer:stop()
    eq(#expected, #list, w .. ": number of timeouts returned")
    for i, x in ipairs(expected) do
      check_listed(x, list[i], w .. ": timeout id at position " .. i)
    end
    eq(0, #timer:stop(), w .. ": a second stop()'s result size")
    eq(0, timer:pending(), w .. ": pending() after stop()")
    eq(false, t:cancel(), w .. ": cancel() of itself after stop()")
    local other = random_entry()
    if other and handle_of(other.id) then
      eq(false, handle_of(other.id):cancel(), w .. ": cancel() of timeout " .. other.id .. " after stop()")
    end
    schedule_pair(false, 0, w)                 -- must raise "timer is stopped"
  end

  local function task_entry(kind, t, id, ...)
    if failure then return end
    if expect_err then fail("on_error for task " .. expect_err.e.id, "a call", "none") end
    local e = m:next_due()
    if not e then fail("task started", "no task (nothing due in the model)", "task " .. tostring(id)) end
    if e.id ~= id then fail("task order", "task " .. e.id, "task " .. tostring(id)) end
    real_runs[id] = (real_runs[id] or 0) + 1
    if trace then note("run #%d (run %d, deadline %s ns, seq %d)", id, e.runs, show(e.deadline), e.seq) end
    local w = task_name(id)
    -- (eq() only on a mismatch: these run for every task)
    if e.task_kind ~= kind then eq(e.task_kind, kind, "%s: kind of task called", w) end
    local h = handles[id] or whandles[id]
    if h and not rawequal(h, t) then fail(w .. ": its timeout argument", h, t) end
    local args = e.args
    local n = args.n
    if n ~= 1 + select("#", ...) then eq(n, 1 + select("#", ...), "%s: number of task arguments", w) end
    for i = 2, n do
      local v = select(i - 1, ...)
      if not rawequal(args[i], v) then fail(w .. ": task argument " .. i, args[i], v) end
    end
    if not rawequal(t:task(), TASKS[kind]) then fail(w .. ": t:task()", TASKS[kind], t:task()) end
    if secs(m.now) ~= timer:now() then eq(secs(m.now), timer:now(), "%s: timer:now()", w) end
    if #m.live ~= timer:pending() then eq(#m.live, timer:pending(), "%s: pending() inside the task", w) end
    if t:is_expired() ~= true then eq(true, t:is_expired(), "%s: is_expired() inside the task", w) end
    if t:is_cancelled() ~= false then eq(false, t:is_cancelled(), "%s: is_cancelled() inside the task", w) end
    if t:remaining() ~= 0 then eq(0, t:remaining(), "%s: remaining() inside the task", w) end
    if stop_countdown then
      stop_countdown = stop_countdown - 1
      if stop_countdown == 0 then
        stop_countdown = nil
        return stop_inside(e, t)
      end
    end
    local action = task_action(rng)
    if e.interval and action ~= "cancel_self" and int(1, 8) == 1 then action = "cancel_self" end
    if action == "spawn" then
      schedule_pair(false, gen_delay(), w)
    elseif action == "spawn0" then
      schedule_pair(false, pick(ZEROS), w)
    elseif action == "spawn_every" then
      if m.periodic_live < MAX_PERIODIC then schedule_pair(true, gen_interval(), w) end
    elseif action == "resubmit" then             -- Netty: t:task() submitted again
      schedule_pair(false, gen_delay(), w, kind)
    elseif action == "cancel_live" then
      local x = random_live()
      if x then cancel_pair(x, w) end
    elseif action == "cancel_any" then
      local x = random_entry()
      if x then cancel_pair(x, w) end
    elseif action == "cancel_self" then
      cancel_pair(e, w)
      eq(e.state == "cancelled", t:is_cancelled(), "%s: is_cancelled() after cancel() of itself", w)
    elseif action == "cancel_self_twice" then
      cancel_pair(e, w)
      cancel_pair(e, w)
    elseif action == "raise" then
      raise(e, t)
    elseif action == "cancel_raise" then
      local x = random_live()
      if x then cancel_pair(x, w) end
      raise(e, t)
    elseif action == "stats" then
      compare_stats(w)
    elseif action == "poll0" then
      eq(0, timer:poll(0), "%s: poll(0) inside the task", w)
    end
  end

  TASKS = {
    function(t, ...) return task_entry(1, t, ...) end,
    setmetatable({}, { __call = function(_, t, ...) return task_entry(2, t, ...) end }),
    { run = function(_, t, ...) return task_entry(3, t, ...) end },
  }

  local function on_error(err, t)
    if failure then return end                 -- the failure sentinel, or after one
    local x = expect_err
    local ok = pcall(function()
      if not x then fail("on_error called", "no call", "on_error(" .. show(err) .. ")") end
      expect_err = nil
      if not rawequal(err, x.value) then fail("on_error's error value for task " .. x.e.id, x.value, err) end
      if not same_timeout(t, x.handle) then fail("on_error's timeout for task " .. x.e.id, x.handle, t) end
    end)
    if not ok then expect_err = nil end        -- `failure` holds the report
  end

  local function do_advance(arg)
    local delta = to_ns(tonumber(arg))
    m:advance(delta)
    m:begin_drain(MAXINT)
    end_drain(timer:advance(arg), "advance", arg)
  end

  -- -- the sequence ---------------------------------------------------------------------

  local function body()
    if trace then print(string.format("seed %d: %s", seed, config)) end
    timer = hwt.new {
      clock = "manual", tick = tick, wheel_size = wheel_size, max_pending = max_pending,
      on_error = on_error,
    }
    local s = timer:stats()                    -- extra fields: checked when present
    if s.wheel_size ~= nil then eq(wheel, s.wheel_size, "stats().wheel_size") end
    if s.tick ~= nil then eq(secs(tick_ns), s.tick, "stats().tick") end
    eq(0, timer:now(), "timer:now() at the start")
    if pcall(timer.run, timer) then fail("run() on a manual clock", "an error", "no error") end

    for step = 1, steps do
      ctx.step = step
      local op = top_op(rng)
      local beat_ns, beat_e, beat_base, beat_k, beat_extra
      if op == "advance_beat" then
        beat_ns, beat_e, beat_base, beat_k, beat_extra = gen_beat()
        if not beat_ns then                    -- no live periodic with a reachable beat: make one
          if COVERAGE then count("advance to a beat: none, every() instead") end
          op = "every"
        end
      end
      if op == "every" and m.periodic_live >= MAX_PERIODIC then op = "timeout" end
      local desc
      if op == "burst" then                        -- equal deadlines: scheduling order decides
        local n = int(2, 6)
        local arg = chance(50) and pick(ZEROS) or gen_delay()
        local periodic = m.periodic_live < MAX_PERIODIC and chance(20) and to_ns(tonumber(arg)) > 0
        desc = op_desc(periodic and "burst of %s timeout(%s) from #%s, the middle one every()"
                       or "burst of %s timeout(%s) from #%s", n, arg, #entries + 1)
        set_op(desc)
        for i = 1, n do schedule_pair(periodic and i == math.floor(n / 2), arg, desc) end
      elseif op == "timeout" or op == "timeout0" or op == "every" then
        local periodic = op == "every"
        local arg = op == "timeout0" and pick(ZEROS) or periodic and gen_interval()
                    or gen_delay()
        desc = op_desc(periodic and "every(%s) #%s" or "timeout(%s) #%s", arg, #entries + 1)
        set_op(desc)
        schedule_pair(periodic, arg, desc)
      elseif op == "advance_beat" then           -- run a periodic on (or next to) its grid
        local arg = as_arg(beat_ns)
        desc = op_desc(beat_extra == 0
                         and "advance(%s) [%s ns, from now = %s ns] to #%s's beat %s + %s x %s ns"
                         or "advance(%s) [%s ns, from now = %s ns] to #%s's beat %s + %s x %s ns + %s ns",
                       arg, to_ns(tonumber(arg)), m.now, beat_e.id, beat_base, beat_k, beat_e.interval,
                       beat_extra)
        set_op(desc)
        local runs = beat_e.runs
        m.beat_op = true
        do_advance(arg)
        m.beat_op = false
        if COVERAGE and beat_e.runs > runs then count("advance to a beat: the periodic ran") end
        if chance(30) then                 -- API.md: every(1), advance(2), advance(0): one run
          compare_all("after the operation")
          if COVERAGE then count("advance to a beat: then advance(0) or poll()") end
          if chance(50) then
            do_advance(0)
          else
            m:begin_drain(MAXINT)
            end_drain(timer:poll(), "poll() after it")
          end
        end
      elseif op == "advance" then
        local ns = gen_advance()
        local arg = as_arg(ns)
        desc = op_desc("advance(%s) [%s ns, from now = %s ns]", arg, to_ns(tonumber(arg)), m.now)
        set_op(desc)
        do_advance(arg)
      elseif op == "poll" or op == "poll_max" then
        local max
        if op == "poll_max" then max = pick(POLL_MAX) end
        desc = max and op_desc("poll(%s)", max) or "poll()"
        set_op(desc)
        m:begin_drain(max and to_integer(max) or MAXINT)
        if max then end_drain(timer:poll(max), "poll", max) else end_drain(timer:poll(), "poll()") end
      else                                         -- the cancels
        local e
        if op == "cancel_due" then
          for _ = 1, 3 do
            if m.dh <= m.dt then
              local node = m.due[int(m.dh, m.dt)]
              if node and node.e.state == "due" then e = node.e; break end
            end
          end
        end
        if op == "cancel_any" then e = random_entry() end
        e = e or random_live() or random_entry()
        desc = op_desc(op == "close" and "<close> of timeout #%s" or op .. " #%s", e and e.id or "-")
        set_op(desc)
        if e then
          if op == "close" then
            local h = handle_of(e.id)
            if h then
              m:cancel(e)
              close_now(h)
              eq(e.state == "cancelled", h:is_cancelled(), "%s: is_cancelled() after <close>", desc)
            elseif e.state ~= "refused" then
              collected(e, tostring(desc))
            end
          else
            cancel_pair(e, desc)
            if op == "cancel_twice" then cancel_pair(e, "the second cancel()") end
          end
        end
      end
      compare_all("after the operation")
    end

    -- the end: maybe the end of time, then stop() from inside a task or outside
    ctx.step = steps + 1
    if end_of_time then
      set_op("advance(1e300)")
      do_advance(1e300)
      compare_all(ctx.op)
    end
    if stop_inside then
      stop_countdown = int(1, 4)
      set_op(string.format("stop() inside the task started #%d in the next drain", stop_countdown))
      for _ = 1, stop_countdown + int(-1, 3) do schedule_pair(false, pick(ZEROS2), ctx.op) end
      if m.now < NOW_CAP then
        do_advance(as_arg(tick_ns - m.now % tick_ns))
      else
        m:begin_drain(MAXINT)
        end_drain(timer:poll(), "poll()")
      end
      stop_countdown = nil
      compare_all(ctx.op)
    end
    if not m.stopped and int(1, 10) == 1 then
      set_op("<close> of the timer")              -- __close stops it (result dropped)
      m:stop()
      close_now(timer)
    elseif not m.stopped then
      set_op("stop()")
      local expected = m:stop()
      local list = timer:stop()
      eq(#expected, #list, "stop(): number of timeouts returned")
      for i, x in ipairs(expected) do
        check_listed(x, list[i], "stop(): timeout id at position " .. i)
        eq(true, list[i]:is_cancelled(), "stop(): is_cancelled() of a returned timeout")
      end
    end

    -- after stop(): everything ended exactly one way, the timer refuses politely
    ctx.step = steps + 2
    set_op("checks after stop()")
    local w = "after stop()"
    compare_all(w)
    eq(0, #timer:stop(), w .. ": second stop()'s result size")
    eq(false, timer:wait(0), w .. ": wait(0)")
    -- API.md leaves poll()/advance() on a stopped timer open: 0, or "timer is stopped".
    for _, call in ipairs { "poll", "advance" } do
      local ok, ran = pcall(timer[call], timer, 1)
      if ok then eq(0, ran, "%s: %s(1)", w, call)
      elseif not tostring(ran):find("timer is stopped", 1, true) then
        fail(w .. ": " .. call .. "(1)", "0 or error 'timer is stopped'", ran)
      end
    end
    -- API.md leaves timer:now() after stop() open: it raises or reads the clock.
    local ok, now = pcall(timer.now, timer)
    if ok then eq(secs(m.now), now, w .. ": timer:now()")
    elseif not tostring(now):find("timer is stopped", 1, true) then
      fail(w .. ": timer:now()", "the clock or error 'timer is stopped'", now)
    end
    schedule_pair(false, 1, w)
    schedule_pair(true, 1, w)
    compare_stats(w)
    for id, e in ipairs(entries) do
      check_entry(e, w, int(1, 16) == 1)
      local h = handle_of(id)
      local cancelled = h and h:cancel()
      if h and cancelled ~= false then
        fail(string.format("%s: cancel() of timeout %d", w, id), false, cancelled)
      end
      local runs = real_runs[id] or 0
      if e.runs ~= runs then eq(e.runs, runs, "%s: runs of timeout %d", w, id) end
      local st = e.state
      if st ~= "ran" and st ~= "cancelled" and st ~= "stopped" and st ~= "ended" and st ~= "refused" then
        fail(w .. ": final state of timeout " .. id, "ran, cancelled, stopped or ended", st)
      end
      if not e.periodic and st ~= "refused" then
        local ways = (runs == 1 and 1 or 0) + ((st == "cancelled" or st == "stopped") and 1 or 0)
        if ways ~= 1 then
          eq(1, ways, "%s: timeout %d ended exactly one way (runs %d, %s)", w, id, runs, st)
        end
      end
    end
  end

  local report
  local ok = xpcall(body, function(err)
    if type(err) == "table" and err.fuzz then return err end
    failure = failure or {
      fuzz = true, step = ctx.step, op = ctx.op,
      msg = "unexpected error: " .. debug.traceback(tostring(err), 2),
    }
    return failure
  end)
  if timer then pcall(timer.stop, timer) end
  if not ok then
    local f = failure
    local lines = {
      string.format("differential: FAILED seed %d at step %d of %d", seed, f.step, steps),
      "  config: " .. config,
      "  operation: " .. tostring(f.op),
      "  " .. f.msg,
      string.format("  model: now %d ns, %d pending, %d due, fired %d, cancelled %d",
                    m.now, #m.live, m.due_count, m.fired, m.cancelled),
      "  last operations:",
    }
    for s = math.max(1, f.step - 7), f.step - 1 do
      if recent[s % 8] then lines[#lines + 1] = string.format("    [%d] %s", s, recent[s % 8]) end
    end
    lines[#lines + 1] = string.format("  replay: FUZZ_SEED=%d FUZZ_OPS=1 FUZZ_TRACE=1 "
      .. "LUA_PATH='lua/?.lua;;' LUA_CPATH='build/%s/?.so;;' %s test/stress/fuzz/differential.lua", seed, LUA_NAME, LUA_NAME)
    report = table.concat(lines, "\n")
    return false, f.step, report
  end
  return true, steps + 2, nil
end

-- ---- main ----------------------------------------------------------------------------

local function env_int(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = to_integer(tonumber(v))
  if not n then error(name .. " must be an integer, got " .. v, 0) end
  return n
end

local first_seed = env_int("FUZZ_SEED", 1)
local ops_target = env_int("FUZZ_OPS", 1000000)
local seconds = os.getenv("FUZZ_SECONDS")
seconds = seconds and seconds ~= "" and assert(tonumber(seconds), "FUZZ_SECONDS must be a number") or nil
local trace = (os.getenv("FUZZ_TRACE") or "") ~= ""
local max_failures = env_int("FUZZ_MAX_FAILURES", 10)

local started = hwt.now()
local total_ops, seeds, passed, failed = 0, 0, 0, 0
local seed = first_seed
while true do
  if seconds then
    if hwt.now() - started >= seconds then break end
  elseif total_ops >= ops_target then
    break
  end
  local ok, ops, report = run_seed(seed, trace)
  seeds = seeds + 1
  total_ops = total_ops + ops
  if ok then
    passed = passed + 1
  else
    failed = failed + 1
    io.stdout:write(report, "\n")
    if failed >= max_failures then
      print(string.format("differential: stopping after %d failed seeds", failed))
      break
    end
  end
  seed = seed + 1
end
if COVERAGE then
  local keys = {}
  for k in pairs(cov) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do print(string.format("  %10d  %s", cov[k], k)) end
end
print(string.format("differential: %d operations over %d seeds in %.1f s (seeds %d..%d)",
                    total_ops, seeds, hwt.now() - started, first_seed, first_seed + seeds - 1))
print(string.format("differential: %d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1, true)
