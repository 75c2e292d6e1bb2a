-- Side-by-side timer benchmark: one (peer, workload) per process.
--   lua5.4 bench/lua_bench.lua <peer> <workload> <N> [seconds]
--   luajit bench/lua_bench.lua <peer> <workload> <N> [seconds]
-- peer: hwt | luv | heap | timerwheel | contract | lua (lua = reference rows only: W0
-- closure floor; contract = the API's floor, see peers.contract)
-- workload: W0 W1 W1s W2 W3 W3s W4 W5 W6 (see bench/run.sh; W6 takes its N as
-- given, run.sh passes N/5). `seconds`: W5's idle time (default 5) and W6's
-- span (default 10). Prints `RESULT <peer> <workload> <metric> <value>`.
--
-- Run from the project root with LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;'
-- (LuaJIT: LUA_CPATH='build/luajit/?.so;;'; run.sh's "hwtjit" peer is the hwt
-- peer run by luajit). The file runs on Lua 5.3+ and on LuaJIT 2.1: what needs
-- 64-bit integers (the PRNG) is compiled with load() for the running VM.
--
-- Fairness rules followed here:
-- * Same pseudo-random delays for every peer: xorshift64* with a fixed seed
--   (not math.random), all values drawn before any timed region:
--     x ^= x >> 12; x ^= x << 25; x ^= x >> 27; r = x * 0x2545F4914F6CDD1D
--     u = (r >>> 11) * 2^-53            (uniform in [0, 1))
--   seed 0x9E3779B97F4A7C15; the first N draws are the delays, the next N-1
--   draws build the W2 cancel order (Fisher-Yates, j = 1 + (r >>> 11) % i).
-- * One clock for everyone: hwt.now() (CLOCK_MONOTONIC seconds, a C call);
--   loading the hwt module starts no thread (only hwt.new does).
-- * Every timeout gets its own closure (created inside the timed region: that
--   is part of the price a Lua program pays; W0 gives the closure floor),
--   except in W1s and W3s: there every timeout shares one function and gets
--   its argument (`timer:timeout(d, on_timeout, conn)`, the OpenResty idiom),
--   with the N `conn` tables made before timing, as a server has them.
-- * Handle arrays and result arrays are pre-sized before timing.
-- * CPU = os.clock() (process CPU time, all threads) over the same region.
--
-- Peer notes:
-- * luv: timers have 1 ms granularity: delay ms = ceil(delay * 1000) (never
--   asking for less than requested). Deadlines count from luv's cached loop
--   time, which is refreshed once (uv.update_time) before scheduling starts,
--   as a loop iteration would; nothing refreshes it during a burst, so luv
--   may fire early relative to the wall-clock deadline: late_* can be
--   negative and `early` counts such callbacks. Cancel = t:stop(); t:close()
--   (the close completes in the loop: W3 runs uv.run("nowait") every 1024
--   iterations, inside the timed region, so closed handles are reclaimed as
--   in a server loop; W2 times only the stop+close calls).
-- * heap: lua-binaryheap's minUnique (index-tracked removal through its
--   payload->position map: cancel really removes, no lazy deletion), keyed by
--   absolute deadline (hwt.now() + delay), the closure is the unique payload.
--   Its loop sleeps until the next deadline with luv's uv.sleep(ms) (integer
--   ms, rounded up), so it inherits 1 ms sleep granularity. If the library
--   cannot be loaded a built-in heap with the same API is used (reported).
--   W1s/W3s: the argument (the conn table) is the heap's unique payload and
--   the shared function is kept beside it (fns[conn] = fn), set and cleared
--   with the entry.
-- * luv in W1s/W3s: a uv timer per timeout still (one handle each), started
--   with the one shared callback; luv passes no argument to a timer callback,
--   so the conn is not carried (a closure or a handle->conn map would be).
local peer, workload, N, seconds = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
assert(peer and workload and N, "usage: lua_bench.lua <peer> <workload> <N> [seconds]")
N = math.floor(N)

local hwt = require("hwt")
local now = hwt.now
local floor, ceil = math.floor, math.ceil

-- BENCH_TIMED_ONLY=1: a fire workload (W4, W6) ends with its CPU figure,
-- without the lateness analysis, so that a profile of the run is the timed
-- region's (and the few draws before it).
local TIMED_ONLY = os.getenv("BENCH_TIMED_ONLY") == "1"

local function result(metric, value)
  if math.type then
    if math.type(value) == "float" then value = string.format("%.6g", value) end
  elseif type(value) == "number" then     -- LuaJIT: every number is a double
    if value == floor(value) and value > -2^53 and value < 2^53 then
      value = string.format("%d", value)
    else
      value = string.format("%.6g", value)
    end
  end
  io.write(string.format("RESULT %s %s %s %s\n", peer, workload, metric, tostring(value)))
end

-- ---------------------------------------------------------------- inputs
-- unit() = rand53() * 2^-53 and below(i) = rand53() % i, rand53() being the
-- top 53 bits of xorshift64*: Lua 5.3+ integers, or LuaJIT's uint64_t cdata
-- (exact: tonumber of a value < 2^53). Both VMs draw the same numbers.
local unit, below = assert(load(jit and [[
  local bit = require("bit")
  local bxor, shl, shr = bit.bxor, bit.lshift, bit.rshift
  local x = 0x9E3779B97F4A7C15ULL
  local function rand53()
    x = bxor(x, shr(x, 12))
    x = bxor(x, shl(x, 25))
    x = bxor(x, shr(x, 27))
    return shr(x * 0x2545F4914F6CDD1DULL, 11)
  end
  local TWO_M53 = 2.0 ^ -53
  return function() return tonumber(rand53()) * TWO_M53 end,
         function(i) return tonumber(rand53() % i) end
]] or [[
  local x = 0x9E3779B97F4A7C15
  local function rand53()
    x = x ~ (x >> 12)
    x = x ~ (x << 25)
    x = x ~ (x >> 27)
    return (x * 0x2545F4914F6CDD1D) >> 11
  end
  local TWO_M53 = 2.0 ^ -53
  return function() return rand53() * TWO_M53 end,
         function(i) return rand53() % i end
]], "=rng"))()

local function delays(n, lo, hi)
  local d, span = {}, hi - lo
  for i = 1, n do d[i] = lo + span * unit() end
  return d
end

package.path = "bench/?.lua;" .. package.path
local common = require("common")
local presized, statm_rss_bytes, full_gc = common.presized, common.statm_rss_bytes, common.full_gc

local function read_field(path, name)
  local f = io.open(path)
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return tonumber(text:match(name .. ":%s*(%d+)"))
end

local PID = read_field("/proc/self/status", "Pid")
local function voluntary(tid)
  return read_field("/proc/self/task/" .. tid .. "/status", "voluntary_ctxt_switches")
end

-- ---------------------------------------------------------------- peers
-- Each peer: new(tick, wheel) -> ctx; schedule(ctx, delay, fn) -> handle;
-- cancel(ctx, handle); schedule_arg(ctx, delay, fn, arg) -> handle and
-- cancel_arg(ctx, handle) for W1s/W3s (fn shared by every timeout);
-- drain(ctx) runs until nothing is pending;
-- idle(ctx, s) blocks s seconds with one far timeout pending.
local peers = {}

peers.hwt = {
  new = function(tick, wheel)
    return { timer = hwt.new({ tick = tick or 0.001, wheel_size = wheel }) }
  end,
  schedule = function(ctx, delay, fn) return ctx.timer:timeout(delay, fn) end,
  cancel = function(_, h) h:cancel() end,
  schedule_arg = function(ctx, delay, fn, arg) return ctx.timer:timeout(delay, fn, arg) end,
  cancel_arg = function(_, h) h:cancel() end,
  drain = function(ctx)
    local timer = ctx.timer
    while timer:pending() > 0 do timer:wait(); timer:poll() end
  end,
}

local uv
local function need_luv()
  if not uv then
    local ok, mod = pcall(require, "luv")
    if not ok then io.stderr:write("luv missing: ", tostring(mod), "\n"); os.exit(3) end
    uv = mod
  end
  return uv
end

peers.luv = {
  new = function()
    need_luv()
    uv.update_time()
    return {}
  end,
  schedule = function(_, delay, fn)
    local t = uv.new_timer()
    t:start(ceil(delay * 1000), 0, fn)
    return t
  end,
  cancel = function(_, t) t:stop(); t:close() end,
  schedule_arg = function(_, delay, fn)   -- luv has no argument to pass
    local t = uv.new_timer()
    t:start(ceil(delay * 1000), 0, fn)
    return t
  end,
  cancel_arg = function(_, t) t:stop(); t:close() end,
  drain = function() uv.run() end,
}

local heaplib, heap_source
local function need_heap()
  if heaplib then return heaplib end
  local saved = package.path
  package.path = package.path .. ";/usr/share/lua/5.3/?.lua;/usr/share/lua/5.1/?.lua"
  local ok, mod = pcall(require, "binaryheap")
  package.path = saved
  if ok and type(mod) == "table" and mod.minUnique then
    local h = mod.minUnique()           -- self-test: order and removal
    h:insert(3, "c"); h:insert(1, "a"); h:insert(2, "b"); h:remove("a")
    if h:pop() == "b" and h:pop() == "c" and h:peek() == nil then
      heaplib, heap_source = mod, "lua-binaryheap"
      return heaplib
    end
  end
  -- Fallback: the same minUnique API, index-tracked removal.
  heap_source = "builtin"
  heaplib = { minUnique = function()
    local keys, items, pos, n = {}, {}, {}, 0
    local function up(i)
      local k, it = keys[i], items[i]
      while i > 1 do
        local p = floor(i / 2)
        if keys[p] <= k then break end
        keys[i], items[i] = keys[p], items[p]; pos[items[i]] = i; i = p
      end
      keys[i], items[i] = k, it; pos[it] = i
    end
    local function down(i)
      local k, it = keys[i], items[i]
      while true do
        local c = 2 * i
        if c > n then break end
        if c < n and keys[c + 1] < keys[c] then c = c + 1 end
        if keys[c] >= k then break end
        keys[i], items[i] = keys[c], items[c]; pos[items[i]] = i; i = c
      end
      keys[i], items[i] = k, it; pos[it] = i
    end
    local h = {}
    function h.insert(_, k, it) n = n + 1; keys[n], items[n] = k, it; up(n) end
    function h.remove(_, it)
      local i = pos[it]
      if not i then return nil end
      pos[it] = nil
      local lk, li = keys[n], items[n]
      keys[n], items[n] = nil, nil; n = n - 1
      if i <= n then keys[i], items[i] = lk, li; up(i); down(pos[li]) end
      return true
    end
    function h.peek() if n > 0 then return items[1], keys[1] end end
    function h.pop(self) local it, k = items[1], keys[1]; if it then self:remove(it) end; return it, k end
    return h
  end }
  return heaplib
end

peers.heap = {
  new = function()
    need_luv()      -- for uv.sleep only
    need_heap()
    return { heap = heaplib.minUnique(), fns = {} }
  end,
  schedule = function(ctx, delay, fn)
    ctx.heap:insert(now() + delay, fn)
    return fn
  end,
  cancel = function(ctx, fn) ctx.heap:remove(fn) end,
  schedule_arg = function(ctx, delay, fn, arg)   -- arg: the unique payload
    ctx.heap:insert(now() + delay, arg)
    ctx.fns[arg] = fn
    return arg
  end,
  cancel_arg = function(ctx, arg) ctx.heap:remove(arg); ctx.fns[arg] = nil end,
  drain = function(ctx)
    local heap, sleep = ctx.heap, uv.sleep
    while true do
      local fn, deadline = heap:peek()
      if fn == nil then return end
      local t = now()
      if deadline <= t then
        heap:pop()
        fn()
      else
        sleep(ceil((deadline - t) * 1000))
      end
    end
  end,
  idle = function(ctx, seconds)                 -- the heap scheduler's loop
    local heap, sleep = ctx.heap, uv.sleep
    local stop_at = now() + seconds
    while true do
      local t = now()
      if t >= stop_at then break end
      local _, deadline = heap:peek()
      local wake = deadline < stop_at and deadline or stop_at
      sleep(ceil((wake - t) * 1000))
    end
  end,
}

-- timerwheel.lua (Tieske's, a pure-Lua wheel; run on LuaJIT by run.sh when
-- TIMERWHEEL_DIR holds its source, src/timerwheel/init.lua: Debian does not
-- package it). Slots of `tick` seconds (its precision), its default ring of
-- 72000 slots, hwt.now as its clock. Its callbacks get one argument, the
-- arg given to set(). It has no loop of its own, so run_wheel is one, as the
-- heap's is: step(), then sleep with uv.sleep until the next occupied slot,
-- looking at most ahead() seconds ahead (peek scans the slots), until ahead()
-- is no longer positive.
local function run_wheel(wheel, ahead)
  local sleep = uv.sleep
  while true do
    local horizon = ahead()
    if horizon <= 0 then return end
    wheel:step()
    local wait = wheel:peek(horizon) or horizon
    if wait > 0 then sleep(ceil(wait * 1000)) end
  end
end

peers.timerwheel = {
  new = function(tick)
    need_luv()
    local ok, timerwheel = pcall(require, "timerwheel")
    if not ok then io.stderr:write("timerwheel missing: ", tostring(timerwheel), "\n"); os.exit(3) end
    return { wheel = timerwheel.new({ precision = tick or 0.001, now = now }) }
  end,
  schedule = function(ctx, delay, fn) return ctx.wheel:set(delay, fn) end,
  cancel = function(ctx, id) ctx.wheel:cancel(id) end,
  schedule_arg = function(ctx, delay, fn, arg) return ctx.wheel:set(delay, fn, arg) end,
  cancel_arg = function(ctx, id) ctx.wheel:cancel(id) end,
  drain = function(ctx)
    run_wheel(ctx.wheel, function() return ctx.wheel:count() == 0 and 0 or 1 end)
  end,
  idle = function(ctx, seconds)
    local stop_at = now() + seconds
    run_wheel(ctx.wheel, function() return stop_at - now() end)
  end,
}

-- The contract's floor (bench/floor_mod.c, built by bench/floor.sh): what
-- the API makes any binding do per timeout (a Timeout userdata holding its
-- timer, task and argument, a class check, an anchor while armed) with no
-- timer behind it. W1, W1s, W2, W3, W3s and W6 (bench/contract.sh). The fire
-- workloads pass a wheel size: their floor timer also reads the clock at each
-- arm, and drain() fires what is armed the least costly way (floor_mod's run).
peers.contract = {
  new = function(tick, wheel)
    return { timer = require("floor_mod").newtimer(N, wheel and tick) }
  end,
  drain = function(ctx) ctx.timer:run() end,
  schedule = function(ctx, delay, fn) return ctx.timer:arm(delay, fn) end,
  cancel = function(_, h) h:disarm() end,
  schedule_arg = function(ctx, delay, fn, a) return ctx.timer:arm(delay, fn, a) end,
  cancel_arg = function(_, h) h:disarm() end,
}

local P = peers[peer]
if peer ~= "lua" and not P then error("unknown peer " .. tostring(peer)) end

-- ---------------------------------------------------------------- helpers
local sink = 0

local function percentile(sorted, p)
  local n = #sorted
  if n == 0 then return 0 end
  local i = ceil(p * n)
  if i < 1 then i = 1 end
  return sorted[i]
end

-- Fire workloads (W4, W6): n timeouts with delays uniform in [0, span].
local function fire(n, span, wheel)
  local d = delays(n, 0.0, span)
  local deadline = presized(n, 0.0)
  local late = presized(n, 0.0)
  local ctx = P.new(0.001, wheel)
  local schedule = P.schedule
  local last = 0.0
  full_gc()
  local cpu0 = os.clock()
  local t0 = now()
  for i = 1, n do
    deadline[i] = now() + d[i]
    schedule(ctx, d[i], function()
      local t = now()
      late[i] = t - deadline[i]
      last = t
    end)
  end
  local sched_end = now()
  P.drain(ctx)
  local cpu = os.clock() - cpu0
  if TIMED_ONLY then return result("cpu_s", cpu) end
  -- analysis (untimed)
  local all, after, early = {}, {}, 0
  for i = 1, n do
    local l = late[i]
    all[i] = l
    if l < 0 then early = early + 1 end
    if deadline[i] > sched_end then after[#after + 1] = l end
  end
  table.sort(all); table.sort(after)
  -- Callbacks/s while draining: the timeouts already due when scheduling
  -- ended are the backlog; from then until the last of them has run, every
  -- callback run counts (fire time = deadline + lateness).
  local clear = sched_end
  for i = 1, n do
    if deadline[i] <= sched_end then
      local t = deadline[i] + late[i]
      if t > clear then clear = t end
    end
  end
  local drained = 0
  for i = 1, n do
    local t = deadline[i] + late[i]
    if t >= sched_end and t <= clear then drained = drained + 1 end
  end
  result("n", n)
  result("wall_s", last - t0)
  result("sched_s", sched_end - t0)
  result("late_p50_ms", percentile(all, 0.50) * 1e3)
  result("late_p99_ms", percentile(all, 0.99) * 1e3)
  result("late_p99_after_ms", percentile(after, 0.99) * 1e3)
  result("late_max_ms", all[#all] * 1e3)
  result("early", early)
  result("cpu_s", cpu)
  if clear > sched_end then result("cb_per_s_drain", drained / (clear - sched_end)) end
  result("backlog", drained)
end

-- ---------------------------------------------------------------- workloads
local W = {}

-- W0: the closure floor, N closures created and stored, nothing else.
W.W0 = function()
  local handles = presized(N, false)
  full_gc()
  local t0 = now()
  for i = 1, N do handles[i] = function() sink = i end end
  local dt = now() - t0
  result("n", N)
  result("ops_per_s", N / dt)
end

-- W1: schedule N one-shot timeouts, delays uniform in [1 s, 60 s].
W.W1 = function()
  local d = delays(N, 1.0, 60.0)
  local handles = presized(N, false)
  local ctx = P.new(0.001)
  local schedule = P.schedule
  full_gc()
  local rss0 = statm_rss_bytes()
  local t0 = now()
  for i = 1, N do
    handles[i] = schedule(ctx, d[i], function() sink = i end)
  end
  local dt = now() - t0
  full_gc()
  local rss1 = statm_rss_bytes()
  result("n", N)
  result("ops_per_s", N / dt)
  result("bytes_per_timeout", (rss1 - rss0) / N)
  sink = #handles
end

-- W2: cancel all of W1's timeouts in random order (only the cancels timed).
W.W2 = function()
  local d = delays(N, 1.0, 60.0)
  local order = common.permutation(N, below)
  local handles = presized(N, false)
  local ctx = P.new(0.001)
  local schedule, cancel = P.schedule, P.cancel
  for i = 1, N do
    handles[i] = schedule(ctx, d[i], function() sink = i end)
  end
  full_gc()
  local t0 = now()
  for k = 1, N do cancel(ctx, handles[order[k]]) end
  local dt = now() - t0
  result("n", N)
  result("ops_per_s", N / dt)
end

-- W3: churn, N x (schedule a 30 s timeout, cancel it).
W.W3 = function()
  local ctx = P.new(0.001)
  local schedule, cancel = P.schedule, P.cancel
  local nowait = peer == "luv" and function() uv.run("nowait") end
  full_gc()
  local t0 = now()
  if nowait then
    for i = 1, N do
      cancel(ctx, schedule(ctx, 30.0, function() sink = i end))
      if i % 1024 == 0 then nowait() end
    end
    nowait()
  else
    for i = 1, N do
      cancel(ctx, schedule(ctx, 30.0, function() sink = i end))
    end
  end
  local dt = now() - t0
  result("n", N)
  result("ops_per_s", N / dt)
end

-- W1s: W1 with one shared function and an argument per timeout.
W.W1s = function()
  local d = delays(N, 1.0, 60.0)
  local conns = {}
  for i = 1, N do conns[i] = { id = i } end
  local handles = presized(N, false)
  local ctx = P.new(0.001)
  local schedule = P.schedule_arg
  local function on_timeout(_, conn) sink = conn end
  full_gc()
  local rss0 = statm_rss_bytes()
  local t0 = now()
  for i = 1, N do
    handles[i] = schedule(ctx, d[i], on_timeout, conns[i])
  end
  local dt = now() - t0
  full_gc()
  local rss1 = statm_rss_bytes()
  result("n", N)
  result("ops_per_s", N / dt)
  result("bytes_per_timeout", (rss1 - rss0) / N)
  sink = #handles + #conns
end

-- W3s: W3 with one shared function and an argument (one conn).
W.W3s = function()
  local ctx = P.new(0.001)
  local schedule, cancel = P.schedule_arg, P.cancel_arg
  local conn = { id = 1 }
  local function on_timeout(_, c) sink = c end
  local nowait = peer == "luv" and function() uv.run("nowait") end
  full_gc()
  local t0 = now()
  if nowait then
    for i = 1, N do
      cancel(ctx, schedule(ctx, 30.0, on_timeout, conn))
      if i % 1024 == 0 then nowait() end
    end
    nowait()
  else
    for _ = 1, N do
      cancel(ctx, schedule(ctx, 30.0, on_timeout, conn))
    end
  end
  local dt = now() - t0
  result("n", N)
  result("ops_per_s", N / dt)
end

W.W4 = function() fire(N, 1.0, nil) end
W.W6 = function() fire(N, seconds or 10.0, 512) end

-- W5: idle for `seconds` with one timeout 1 h away and the fd watched.
W.W5 = function()
  local s = seconds or 5
  local far = 3600.0
  if peer == "hwt" then
    local timer = hwt.new({ tick = 0.001 })
    assert(timer:fd())                          -- watched, as by a host loop: the worker runs
    timer:timeout(far, function() end)
    timer:wait(0.2)                             -- let the worker settle
    local worker
    local ls = io.popen("ls /proc/" .. PID .. "/task")   -- before measuring
    for tid in ls:lines() do if tonumber(tid) ~= PID then worker = tid end end
    ls:close()
    assert(worker, "no worker thread")
    timer:wait(0.2)
    local v0, w0, m0 = voluntary(worker), timer:stats().worker_wakeups, voluntary(PID)
    local cpu0 = os.clock()
    timer:wait(s)                               -- the application sleeps in wait()
    local cpu = os.clock() - cpu0
    local v1, w1, m1 = voluntary(worker), timer:stats().worker_wakeups, voluntary(PID)
    result("seconds", s)
    result("cpu_s", cpu)
    result("wakeups", v1 - v0)
    result("worker_wakeups", w1 - w0)
    result("main_switches", m1 - m0)
  elseif peer == "luv" then
    need_luv()
    local t = uv.new_timer()
    t:start(floor(far * 1000), 0, function() end)
    local stop = uv.new_timer()
    stop:start(floor(s * 1000), 0, function()
      t:stop(); t:close(); stop:close(); uv.stop()
    end)
    local v0, cpu0 = voluntary(PID), os.clock()
    uv.run()
    local cpu, v1 = os.clock() - cpu0, voluntary(PID)
    result("seconds", s)
    result("cpu_s", cpu)
    result("wakeups", v1 - v0)
  else
    local ctx = P.new()
    P.schedule(ctx, far, function() end)
    local v0, cpu0 = voluntary(PID), os.clock()
    P.idle(ctx, s)
    local cpu, v1 = os.clock() - cpu0, voluntary(PID)
    result("seconds", s)
    result("cpu_s", cpu)
    result("wakeups", v1 - v0)
  end
end

local run = W[workload] or error("unknown workload " .. tostring(workload))
if peer == "heap" then need_heap() end
run()
if heap_source then result("heap_impl", heap_source) end
io.stdout:flush()
os.exit(0, false)     -- skip closing the state: no 10^6-element teardown
