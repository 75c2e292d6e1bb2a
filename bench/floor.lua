-- Floors (issue 13): the bare cost, on this machine and VM, of the building
-- blocks any Lua timer library pays: a closure, a C call, a method call, a
-- userdata with a user value, a reference, a cache miss on a Lua object.
--   LUA_CPATH='build/floor/<vm>/?.so;;' lua5.4|luajit bench/floor.lua
-- (bench/floor.sh builds floor_mod and runs both VMs.) N = 10^6, env N
-- overrides. Every measure runs once per round, three rounds; the median is
-- printed as `RESULT floor <vm> <measure> <value> <unit>`. Times come from
-- floor_mod.now() (CLOCK_MONOTONIC). Each measure builds its own objects
-- (untimed) so that it starts from a heap holding little else.
-- Allocation is measured twice: in this process, where memory freed by the
-- previous measures is reused, and in a fresh process (`floor.lua fresh
-- <kind>`, as bench/lua_bench.lua runs every workload) where each new page
-- is a page fault: the *_fresh times and the *_bytes (RSS growth; in a
-- process that already freed memory it says little) come from there.
local fm = require("floor_mod")
local now, noop, noop2, newud = fm.now, fm.noop, fm.noop2, fm.newud
local ref, unref, touch, setslot = fm.ref, fm.unref, fm.touch, fm.setslot

local N = math.floor(tonumber(os.getenv("N")) or 1e6)
local VM = jit and "luajit" or (_VERSION:gsub("^Lua ", "lua"))
local ROUNDS = 3
local task = function() end        -- the value every userdata anchors

-- below(i): uniform in [0, i), top 53 bits of xorshift64* as in
-- bench/lua_bench.lua (same seed), compiled with load() for the running VM.
local below = assert(load(jit and [[
  local bit = require("bit")
  local bxor, shl, shr = bit.bxor, bit.lshift, bit.rshift
  local x = 0x9E3779B97F4A7C15ULL
  return function(i)
    x = bxor(x, shr(x, 12))
    x = bxor(x, shl(x, 25))
    x = bxor(x, shr(x, 27))
    return tonumber(shr(x * 0x2545F4914F6CDD1DULL, 11) % i)
  end
]] or [[
  local x = 0x9E3779B97F4A7C15
  return function(i)
    x = x ~ (x >> 12)
    x = x ~ (x << 25)
    x = x ~ (x >> 27)
    return ((x * 0x2545F4914F6CDD1D) >> 11) % i
  end
]], "=rng"))()

package.path = "bench/?.lua;" .. package.path
local common = require("common")
local presized, statm_rss_bytes, full_gc = common.presized, common.statm_rss_bytes, common.full_gc

-- store[1..N] = a closure with one per-iteration upvalue (W0's body), or a
-- userdata with a user value and a metatable (what a Timeout costs).
local function fill_closures(store)
  for i = 1, N do store[i] = function() sink = i end end
  return store
end

local function fill_userdata(store)
  for i = 1, N do store[i] = newud(task) end
  return store
end

-- ---------------------------------------------------------------- fresh
local FRESH = { closure = fill_closures, userdata = fill_userdata }

if arg[1] == "fresh" then                 -- child: ns per object, bytes per object
  local store = presized(N, false)
  full_gc()
  local rss0, t0 = statm_rss_bytes(), now()
  FRESH[arg[2]](store)
  local dt = now() - t0
  full_gc()
  io.write(string.format("%.17g %.17g\n", dt * 1e9 / N, (statm_rss_bytes() - rss0) / N))
  return
end

local interpreter = -1                    -- arg[-1], or lower if options were given
while arg[interpreter - 1] do interpreter = interpreter - 1 end
interpreter = arg[interpreter]

local function in_child(kind)
  local p = assert(io.popen(string.format("%s %s fresh %s", interpreter, arg[0], kind)))
  local time_ns, bytes = p:read("n", "n")
  p:close()
  assert(bytes, kind .. ": child failed")
  return time_ns, bytes
end

-- ---------------------------------------------------------------- inputs
local perm = presized(N, 0)               -- Fisher-Yates, as lua_bench.lua
for i = 1, N do perm[i] = i end
for i = N, 2, -1 do
  local j = 1 + below(i)
  perm[i], perm[j] = perm[j], perm[i]
end

-- objs in a random order, read sequentially when timed: only the objects'
-- own memory is visited at random, not the array holding them.
local function shuffled(objs)
  local s = presized(N, false)
  for i = 1, N do s[i] = objs[perm[i]] end
  return s
end

-- ---------------------------------------------------------------- measures
-- measure(fn, name, unit [, name, unit ...]): fn returns one value per name.
local measures, outputs = {}, {}
local function measure(fn, ...)
  local m = { fn = fn }
  for i = 1, select("#", ...), 2 do
    local o = { name = select(i, ...), unit = select(i + 1, ...), samples = {} }
    m[#m + 1] = o
    outputs[#outputs + 1] = o
  end
  measures[#measures + 1] = m
end

local function store() return presized(N, false) end

-- loop(setup()) timed, in ns per iteration; setup untimed.
local function ns(name, loop, setup)
  measure(function()
    full_gc()
    local a = setup and setup()
    full_gc()
    local t0 = now()
    loop(a)
    return (now() - t0) * 1e9 / N
  end, name, "ns_per_op")
end

ns("empty_loop", function() for _ = 1, N do end end)
ns("closure_1upvalue", fill_closures, store)
measure(function() return in_child("closure") end,
  "closure_1upvalue_fresh", "ns_per_op", "closure_bytes", "bytes")
ns("closure_call", function(fns)
  for i = 1, N do fns[i]() end
end, function() return fill_closures(store()) end)
ns("closure_call_random", function(fns)
  for i = 1, N do fns[i]() end
end, function() return shuffled(fill_closures(store())) end)
ns("c_call_noop", function()
  for _ = 1, N do noop() end
end)
ns("c_call_2args_1result", function()
  local x = 0
  for i = 1, N do x = noop2(x, i) end
  sink = x
end)
ns("method_call_noop", function(obj)
  for _ = 1, N do obj:noop() end
end, function() return newud(task) end)
ns("userdata_new", fill_userdata, store)
measure(function() return in_child("userdata") end,
  "userdata_new_fresh", "ns_per_op", "userdata_bytes", "bytes")
ns("ref_unref_pair", function(t)
  for _ = 1, N do unref(t, ref(t, task)) end
end, function() return {} end)
ns("ref_only", function(t)                -- the table grows to N entries
  for _ = 1, N do ref(t, task) end
end, function() return {} end)
-- Each read gives the next key (one random cycle through all N entries), so
-- the reads cannot overlap: one full miss each, as a lookup that the next
-- step depends on (independent reads overlap: LuaJIT then shows ~4 ns).
ns("table_rawget_random", function(t)
  local k = perm[1]
  for _ = 1, N do k = t[k] end
  sink = k
end, function()
  local t = presized(N, 0)
  for i = 1, N - 1 do t[perm[i]] = perm[i + 1] end
  t[perm[N]] = perm[1]
  return t
end)
ns("touch_random", function(uds)
  for i = 1, N do touch(uds[i]) end
end, function() return shuffled(fill_userdata(store())) end)

-- W2's floor: W2's own loop (handles[order[k]], through a Lua wrapper, as
-- lua_bench.lua calls every peer) around the least a cancel does: a method
-- call on the userdata, a change of it under a lock, its anchor slot cleared.
ns("cancel_floor", function(s)
  local handles, anchors = s[1], s[2]
  local cancel = function(_, h) h:release(anchors) end
  for k = 1, N do cancel(nil, handles[perm[k]]) end
end, function()
  local handles, anchors = store(), store()
  for i = 1, N do
    local u = newud(task)
    setslot(u, i)
    handles[i], anchors[i] = u, u
  end
  return { handles, anchors }
end)

-- W4's drain floor: fire()'s callback body from bench/lua_bench.lua, closures
-- made in order, run in a random order (a timer drains by deadline).
measure(function()
  full_gc()
  local deadline, late, last = presized(N, now()), presized(N, 0.0), 0.0
  local fns = store()
  for i = 1, N do
    fns[i] = function()
      local t = now()
      late[i] = t - deadline[i]
      last = t
    end
  end
  fns = shuffled(fns)
  full_gc()
  local t0 = now()
  for i = 1, N do fns[i]() end
  local dt = now() - t0
  sink = last
  return N / dt
end, "drain_floor", "cb_per_s")

-- ---------------------------------------------------------------- run
for round = 1, ROUNDS do
  for _, m in ipairs(measures) do
    local v = { m.fn() }
    for i, o in ipairs(m) do o.samples[round] = v[i] end
  end
end
local FORMAT = { ns_per_op = "%.2f", bytes = "%.1f", cb_per_s = "%.0f" }
for _, o in ipairs(outputs) do
  table.sort(o.samples)
  io.write(string.format("RESULT floor %s %s " .. FORMAT[o.unit] .. " %s\n",
    VM, o.name, o.samples[math.ceil(ROUNDS / 2)], o.unit))
end
