-- hwt_nginx_bench: the Lua side of bench/nginx_bench.sh (one nginx worker per
-- mode; the mode comes from init_worker_by_lua in bench/nginx/nginx.conf).
--
-- Idle modes (1,000 hwt timeouts an hour ahead, scheduled by GET /setup):
--   idle_none    no hwt timer, no ngx timer: the floor of an idle worker
--   idle_recipe  an hwt timer drained by ngx.timer.every(0.01, poll)
--                (what examples/nginx used before hwt.ngx)
--   idle_driver  an hwt timer driven by require("hwt.ngx").attach(timer)
--                (start on hwt 0.2, which has no attach)
-- Lateness modes (GET /schedule?n=N&spread=S&offset=O schedules N timeouts,
-- delays uniform in [O, O+S), from one request; GET /results reports):
--   late_driver       hwt timeouts through hwt.ngx (each task in a light
--                     thread), hwt.new()'s default tick (10 ms)
--   late_driver_tick1 the same with tick = 0.001
--   late_timer_at     one ngx.timer.at per timeout
-- Throughput modes (GET /throughput, all in one request: see M.throughput):
--   tp_hwt            hwt timeouts through hwt.ngx (attach, or start on hwt 0.2)
--   tp_timer_at       ngx.timer.at
--   tp_floor          the same loops with the timer taken out (no probes):
--                     bench/jit_floor_loops.lua's schedule_all and cancel_all
-- Both clocks are hwt.now() (CLOCK_MONOTONIC): deadline = hwt.now() + delay
-- read just before the timeout is made; start = hwt.now() as the task's first
-- statement. Lateness = start - deadline.
-- A second figure counts each delay from nginx's cached clock as it was when
-- the request began (what ngx.timer.at counts from): that instant, on the
-- hwt.now() scale, is ngx.now() read at the handler's entry (not updated)
-- minus the offset between ngx.now() and hwt.now() taken after the loop
-- (ngx.update_time(), so to ~1 ms).
local hwt = require("hwt")
local loops = require("jit_floor_loops")

local M = {
  mode = nil,
  timer = nil,
  driver = nil,
  idle = {},        -- Timeouts made by /setup (kept so /stats can count them)
  n = 0,            -- lateness: how many were scheduled
  deadline = {},    -- i -> deadline (hwt.now() scale)
  start = {},       -- i -> hwt.now() at the task's start
  ran = 0,          -- tasks that started
  twice = 0,        -- tasks that started a second time (must stay 0)
  sched_s = 0,      -- seconds the scheduling loop took inside the request
  refused = 0,      -- timeout()/ngx.timer.at refusals
  refusal = nil,    -- the first refusal's message
  task_errors = 0,
}

local function on_task_error(err)
  M.task_errors = M.task_errors + 1
  ngx.log(ngx.ERR, "hwt_nginx_bench task: ", tostring(err))
end

function M.init_worker(mode)
  M.mode = mode
  if mode == "idle_none" or mode == "late_timer_at" or mode == "tp_timer_at" or mode == "tp_floor" then
    return
  end
  M.timer = hwt.new({ on_error = on_task_error, tick = mode == "late_driver_tick1" and 0.001 or nil })
  if mode == "idle_recipe" then
    local timer = M.timer
    assert(ngx.timer.every(0.01, function(p) if not p then timer:poll() end end))
  elseif mode == "idle_driver" or mode == "late_driver" or mode == "late_driver_tick1"
      or mode == "tp_hwt" then
    local driver = require("hwt.ngx")
    M.driver = assert((driver.attach or driver.start)(M.timer))
  else
    error("unknown mode " .. tostring(mode))
  end
end

local function never() end

-- GET /setup?n=1000&delay=3600
function M.setup()
  local args = ngx.req.get_uri_args()
  local n, delay = tonumber(args.n or 1000), tonumber(args.delay or 3600)
  if M.timer then
    for i = 1, n do
      M.idle[#M.idle + 1] = assert(M.timer:timeout(delay, never))
    end
  end
  ngx.say("mode ", M.mode, " pending ", M.timer and M.timer:pending() or 0)
end

-- GET /pid
function M.pid()
  ngx.say(ngx.worker.pid())
end

-- GET /stats: what an idle window must leave unchanged.
function M.stats()
  if not M.timer then ngx.say("mode ", M.mode, " no timer") return end
  local s = M.timer:stats()
  ngx.say("mode ", M.mode, " pending ", s.pending, " fired ", s.fired, " due ", s.due)
end

local function on_hwt_task(_, i)
  local now = hwt.now()
  if M.start[i] then M.twice = M.twice + 1 return end
  M.start[i] = now
  M.ran = M.ran + 1
end

local function on_ngx_timer(premature, i)
  local now = hwt.now()
  if premature then return end
  if M.start[i] then M.twice = M.twice + 1 return end
  M.start[i] = now
  M.ran = M.ran + 1
end

-- Park-Miller's minimal standard generator (exact in doubles) with a fixed
-- seed: the same delays in every mode and run.
local function uniform_delays(n, offset, spread, seed)
  local delays, x = {}, seed or 12345
  for i = 1, n do
    x = (x * 16807) % 2147483647
    delays[i] = offset + spread * (x / 2147483647)
  end
  return delays
end

-- GET /schedule?n=10000&spread=2&offset=0.1
function M.schedule()
  local cached_at_entry = ngx.now()      -- nginx's cached clock, not updated
  local args = ngx.req.get_uri_args()
  local n = tonumber(args.n or 10000)
  local spread, offset = tonumber(args.spread or 2), tonumber(args.offset or 0.1)
  if M.n > 0 then ngx.say("already scheduled") return end
  local delays = uniform_delays(n, offset, spread)
  local deadline, now = M.deadline, hwt.now
  M.n = n
  local t0 = now()
  M.delays = delays
  if M.mode == "late_driver" or M.mode == "late_driver_tick1" then
    local timer = M.timer
    for i = 1, n do
      local d = delays[i]
      deadline[i] = now() + d
      local t, err = timer:timeout(d, on_hwt_task, i)
      if not t then M.refused = M.refused + 1; M.refusal = M.refusal or err end
    end
  elseif M.mode == "late_timer_at" then
    local at = ngx.timer.at
    for i = 1, n do
      local d = delays[i]
      deadline[i] = now() + d
      local ok, err = at(d, on_ngx_timer, i)
      if not ok then M.refused = M.refused + 1; M.refusal = M.refusal or err end
    end
  else
    ngx.say("mode ", M.mode, " does not schedule")
    return
  end
  M.sched_s = now() - t0
  ngx.update_time()
  M.request_base = cached_at_entry - (ngx.now() - now())
  M.stale_s = t0 - M.request_base
  ngx.say("scheduled ", n - M.refused, " in ", string.format("%.1f", M.sched_s * 1000), " ms")
end

-- Nearest rank on a sorted array.
local function rank(sorted, p)
  local k = math.ceil(p * #sorted)
  if k < 1 then k = 1 end
  return sorted[k]
end

-- GET /results: "waiting RAN/N" until every scheduled task has started (or
-- was refused), then one line of key=value pairs (ms).
function M.results()
  if M.n == 0 then ngx.say("nothing scheduled") return end
  if M.ran + M.refused < M.n then
    ngx.say("waiting ", M.ran, "/", M.n)
    return
  end
  local late, early, early_max = {}, 0, 0
  local late_c, early_c = {}, 0
  for i = 1, M.n do
    local s = M.start[i]
    if s then
      local l = s - M.deadline[i]
      late[#late + 1] = l
      if l < 0 then
        early = early + 1
        if -l > early_max then early_max = -l end
      end
      local c = s - (M.request_base + M.delays[i])
      late_c[#late_c + 1] = c
      if c < 0 then early_c = early_c + 1 end
    end
  end
  table.sort(late)
  table.sort(late_c)
  local ms = function(x) return string.format("%.3f", (x or 0) * 1000) end
  local extra = ""
  if M.timer then
    local st = M.timer:stats()
    extra = string.format(" pending=%d fired=%d", st.pending, st.fired)
  end
  ngx.say("done ran=", M.ran, " n=", M.n, " refused=", M.refused,
    " early=", early, " early_max_ms=", ms(early_max),
    " p50_ms=", ms(rank(late, 0.5)), " p99_ms=", ms(rank(late, 0.99)),
    " max_ms=", ms(late[#late]), " min_ms=", ms(late[1]),
    " sched_ms=", ms(M.sched_s),
    " p50c_ms=", ms(rank(late_c, 0.5)), " p99c_ms=", ms(rank(late_c, 0.99)),
    " earlyc=", early_c, " stale_ms=", ms(M.stale_s), " twice=", M.twice, " task_errors=", M.task_errors,
    extra, M.refusal and (" refusal=" .. tostring(M.refusal):gsub(" ", "_")) or "")
end

-- ---- throughput ----------------------------------------------------------------
-- GET /throughput?n=100000&delay=3600&spread=3600&probes=1000&poffset=0.1&pspread=1
-- One request does it all, in one worker that runs nothing else:
--  1. schedules n timeouts, delays uniform in [delay, delay + spread), each
--     with the one shared handler and its index as the argument:
--     timer:timeout(d, on_far, i) (tp_hwt; the handles kept for step 4),
--     ngx.timer.at(d, on_far, i) (tp_timer_at), or the floor's
--     schedule_all (tp_floor). Timed by hwt.now().
--  2. memory per pending timeout: the worker's VmRSS (/proc/self/status)
--     and collectgarbage("count"), each after a full collection, before and
--     after step 1, divided by n. Everything else the request needs (the
--     delays, the array of handles, the cancel order, the probes' tables) is
--     made before the first reading.
--  3. lateness under that load: `probes` more timeouts, delays uniform in
--     [poffset, poffset + pspread), scheduled after ngx.update_time(); each
--     records start - deadline by hwt.now(). The request waits for them
--     (ngx.sleep, bounded: pspread + poffset + 2 s).
--     (tp_floor has no timer: no probes.)
--  4. tp_hwt: cancels the n timeouts in a pseudo-random order (t:cancel(),
--     after a full collection), timed by hwt.now(); tp_floor the same with
--     the floor's cancel_all. ngx.timer.at cannot cancel: its n stay
--     pending until the instance is stopped.
-- Answers one line of key=value pairs.
local function rss_kib()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)")) or 0
end

local function full_gc()
  collectgarbage("collect"); collectgarbage("collect")
end

local function presized(n, v)
  local ok, new = pcall(require, "table.new")
  local t = ok and new(n, 0) or {}
  for i = 1, n do t[i] = v end
  return t
end

-- A pseudo-random permutation of 1..n (Fisher-Yates with Park-Miller).
local function permutation(n)
  local p, x = presized(n, 0), 4242
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    x = (x * 16807) % 2147483647
    local j = 1 + x % i
    p[i], p[j] = p[j], p[i]
  end
  return p
end

local far_fired = 0
local function on_far()                 -- the one shared handler: never due
  far_fired = far_fired + 1
end

local P = nil                           -- the probes of this worker's one run

local function on_probe_hwt(_, i)
  local now = hwt.now()
  if P.start[i] then P.twice = P.twice + 1 return end
  P.start[i] = now
  P.ran = P.ran + 1
end

local function on_probe_ngx(premature, i)
  local now = hwt.now()
  if premature then return end
  if P.start[i] then P.twice = P.twice + 1 return end
  P.start[i] = now
  P.ran = P.ran + 1
end

function M.throughput()
  local args = ngx.req.get_uri_args()
  local n = tonumber(args.n or 100000)
  local delay, spread = tonumber(args.delay or 3600), tonumber(args.spread or 3600)
  local probes = tonumber(args.probes or 1000)
  local poffset, pspread = tonumber(args.poffset or 0.1), tonumber(args.pspread or 1)
  local hwt_mode, floor_mode = M.mode == "tp_hwt", M.mode == "tp_floor"
  if not hwt_mode and not floor_mode and M.mode ~= "tp_timer_at" then
    ngx.say("mode ", M.mode, " does not measure throughput")
    return
  end
  if P then ngx.say("already measured") return end
  P = { ran = 0, twice = 0, start = presized(probes, false), deadline = presized(probes, 0) }
  local now, timer, at = hwt.now, M.timer, ngx.timer.at
  local delays = uniform_delays(n, delay, spread)
  local pdelays = uniform_delays(probes, poffset, pspread, 54321)
  local handles = hwt_mode and presized(n, false) or nil
  local order = (hwt_mode or floor_mode) and permutation(n) or nil
  local floor, indexes
  if floor_mode then
    floor, indexes = loops.new(n, presized), presized(n, 0)
    for i = 1, n do indexes[i] = i end
    probes = 0
  end
  local refused, refusal, prefused, cancelled = 0, nil, 0, 0

  -- 1, 2: schedule n, memory before and after.
  full_gc()
  local rss0, kib0 = rss_kib(), collectgarbage("count")
  local t0 = now()
  if hwt_mode then
    for i = 1, n do
      local t, err = timer:timeout(delays[i], on_far, i)
      if t then handles[i] = t else refused = refused + 1; refusal = refusal or err end
    end
  elseif floor_mode then
    loops.schedule_all(floor, on_far, indexes)
  else
    for i = 1, n do
      local ok, err = at(delays[i], on_far, i)
      if not ok then refused = refused + 1; refusal = refusal or err end
    end
  end
  local sched_s = now() - t0
  full_gc()
  local rss1, kib1 = rss_kib(), collectgarbage("count")
  local pending = hwt_mode and timer:pending() or (n - refused)

  -- 3: probes, with the n pending.
  ngx.update_time()
  local pdeadline = P.deadline
  for i = 1, probes do
    local d = pdelays[i]
    pdeadline[i] = now() + d
    local ok, err
    if hwt_mode then ok, err = timer:timeout(d, on_probe_hwt, i) else ok, err = at(d, on_probe_ngx, i) end
    if not ok then prefused = prefused + 1; refusal = refusal or err end
  end
  local wait_until = now() + poffset + pspread + 2
  while P.ran + prefused < probes and now() < wait_until do ngx.sleep(0.05) end

  -- 4: cancel the n (hwt, the floor).
  local cancel_s
  if hwt_mode then
    full_gc()
    local t2 = now()
    for k = 1, n do
      local t = handles[order[k]]
      if t and t:cancel() then cancelled = cancelled + 1 end
    end
    cancel_s = now() - t2
  elseif floor_mode then
    full_gc()
    local t2 = now()
    loops.cancel_all(floor, order)
    cancel_s, cancelled = now() - t2, n
  end

  local late, early = {}, 0
  for i = 1, probes do
    local s = P.start[i]
    if s then
      local l = s - pdeadline[i]
      late[#late + 1] = l
      if l < 0 then early = early + 1 end
    end
  end
  table.sort(late)
  local ms = function(x) return string.format("%.3f", (x or 0) * 1000) end
  local out = {
    "done", "n=" .. n, "refused=" .. refused, "pending=" .. pending,
    "sched_ms=" .. ms(sched_s), "sched_rate=" .. string.format("%.0f", (n - refused) / sched_s),
    "rss_kib0=" .. rss0, "rss_kib1=" .. rss1,
    "rss_b=" .. string.format("%.1f", (rss1 - rss0) * 1024 / n),
    "heap_b=" .. string.format("%.1f", (kib1 - kib0) * 1024 / n),
    "probes=" .. probes, "pran=" .. P.ran, "prefused=" .. prefused, "ptwice=" .. P.twice,
    "pearly=" .. early,
    "p50_ms=" .. ms(rank(late, 0.5)), "p99_ms=" .. ms(rank(late, 0.99)), "max_ms=" .. ms(late[#late]),
    "far_fired=" .. far_fired,
  }
  if cancel_s then
    out[#out + 1] = "cancelled=" .. cancelled
    out[#out + 1] = "cancel_ms=" .. ms(cancel_s)
    out[#out + 1] = "cancel_rate=" .. string.format("%.0f", cancelled / cancel_s)
  end
  if hwt_mode then out[#out + 1] = "pending_after=" .. timer:pending() end
  if refusal then out[#out + 1] = "refusal=" .. tostring(refusal):gsub(" ", "_") end
  ngx.say(table.concat(out, " "))
end

return M
