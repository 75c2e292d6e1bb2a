-- What a task pays for the C call before it, in a drain whose tasks miss:
-- 10^6 closures in W4's shape (each over its own index, writing late[i] from
-- deadline[i]), called in a random order that a C function hands out one
-- index at a time under a lock, as hwt's take hands out the next due task:
--   classic  the index comes from a classic C function (lua_CFunction)
--   ffi      (LuaJIT) the same C function, called through the FFI
--   none     the same order read from a Lua array: no call, no lock
--   c_loop   a C function takes each index and calls the task (lua_callk
--            on Lua 5.3+, so that a task could yield; lua_call below)
-- Prints `RESULT boundary <mode> ns_per_task <value>` (CPU time / N).
-- Run from the project root, after `sh bench/floor.sh build`:
--   LUA_CPATH='build/floor/luajit/?.so;;' luajit bench/call_boundary.lua <classic|ffi|none> [N]
local mode, n = arg[1], tonumber(arg[2] or 1000000)
local modes = { classic = true, ffi = jit ~= nil, none = true, c_loop = true }
assert(modes[mode], "usage: call_boundary.lua <classic|ffi (LuaJIT)|none|c_loop> [N]")
local floor = require("floor_mod")

local late, deadline = {}, {}
for i = 1, n do late[i], deadline[i] = 0.0, i * 1e-6 end
local last = 0
local tasks = {}
for i = 1, n do tasks[i] = function() late[i] = 1.0 - deadline[i]; last = i end end

local next_index = floor.next_index
if mode == "ffi" then
  local ffi = require("ffi")
  ffi.cdef("int32_t floor_next_index(void);")
  next_index = ffi.load(package.searchpath("floor_mod", package.cpath)).floor_next_index
end
floor.set_order(n)
local order
if mode == "none" then
  order = {}
  for k = 1, n do order[k] = next_index() end
end
collectgarbage()
collectgarbage()

local cpu0 = os.clock()
if order then
  for k = 1, n do tasks[order[k]]() end
elseif mode == "c_loop" then
  floor.call_in_order(tasks)
else
  while true do
    local i = next_index()
    if i == 0 then break end
    tasks[i]()
  end
end
local cpu = os.clock() - cpu0
assert(last ~= 0 and late[last] == 1.0 - deadline[last], "the tasks did not run")
io.write(string.format("RESULT boundary %s ns_per_task %.1f\n", mode, cpu / n * 1e9))
