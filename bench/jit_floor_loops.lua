-- The LuaJIT floor loops (issue 44): what a timer's schedule, cancel and
-- drain must cost on LuaJIT with the timer taken out, keeping what any FFI
-- binding of hwt's API pays per timeout (see bench/jit_floor.lua, which runs
-- them, and bench/nginx/hwt_nginx_bench.lua's tp_floor, which runs the first
-- two inside nginx). Each loop compiles (luajit -jv).
--   schedule_all  a 16 B cdata with a metatype (the Timeout), one FFI call
--                 that writes 64 B of C memory (the engine's node), the
--                 Timeout and the task stored at 2n-1, 2n of one table and
--                 the argument at n of another
--   cancel_all    in the order given: read the cdata, one FFI call that
--                 clears its 64 B, two table stores of nil
--   drain_all     in the order given: read the call from the table, call
--                 the task, one FFI call on its 64 B
local ffi = require("ffi")

ffi.cdef[[
  typedef struct floor_handle { uint32_t slot; uint32_t gen; double ended_at; } floor_handle;
  typedef struct floor_slot { uint8_t bytes[64]; } floor_slot;
  void *memset(void *s, int c, size_t n);
  void *malloc(size_t size);
]]
local C = ffi.C
local Handle = ffi.metatype("floor_handle", {__index = {}})
local SLOT_BYTES = ffi.sizeof("floor_slot")
local ENDED = 2 ^ 31                   -- what a cancel marks in the handle, as hwt's

local M = {}

-- A floor for n timeouts: the C memory of n slots, allocated but not
-- written (its pages come in as the loop first writes them, as hwt's slot
-- arena's do), and the tables, presized by `presized(n, value)`.
function M.new(n, presized)
  local slots = ffi.cast("floor_slot *", C.malloc((n + 1) * SLOT_BYTES))
  assert(slots ~= nil, "floor: out of memory")
  return {slots = slots, calls = {}, firsts = {}, handles = presized(n, false), n = n}
end

-- Schedules timeout i with task and the argument args[i], for i = 1..n.
function M.schedule_all(floor, task, args)
  local slots, calls, firsts, handles = floor.slots, floor.calls, floor.firsts, floor.handles
  for i = 1, floor.n do
    local t = Handle()
    t.slot, t.gen = i, 1
    C.memset(slots[i].bytes, 1, SLOT_BYTES)
    calls[2 * i - 1], calls[2 * i] = t, task
    firsts[i] = args[i]
    handles[i] = t
  end
end

-- Cancels the timeouts order[1..n] (scheduled by schedule_all).
function M.cancel_all(floor, order)
  local slots, calls, handles = floor.slots, floor.calls, floor.handles
  for k = 1, floor.n do
    local t = handles[order[k]]
    local i = t.slot
    C.memset(slots[i].bytes, 0, SLOT_BYTES)
    calls[2 * i - 1], calls[2 * i] = nil, nil
    t.slot = i + ENDED
  end
end

-- Stores a Timeout and tasks[i] for i = 1..n, to be drained.
function M.fill_calls(floor, tasks)
  local calls = floor.calls
  for i = 1, floor.n do
    local t = Handle()
    t.slot = i
    calls[2 * i - 1], calls[2 * i] = t, tasks[i]
  end
end

-- Runs the calls order[1..n] (stored by fill_calls).
function M.drain_all(floor, order)
  local slots, calls = floor.slots, floor.calls
  for k = 1, floor.n do
    local i = order[k]
    C.memset(slots[i].bytes, 0, SLOT_BYTES)
    calls[2 * i](calls[2 * i - 1])
  end
end

return M
