-- finalizer_meetings.lua — how often hwt's allocating calls meet a finalizer
-- under the chaos run's allocation-stress collector (test/stress/chaos.lua,
-- collector_at_every_allocation: 5.4's step at every allocation; on LuaJIT
-- pause 0 and STEPMUL, default 1000).
--
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/luajit/?.so;;' luajit test/stress/finalizer_meetings.lua [STEPMUL]
--
-- Finalizable garbage is always waiting (each finalizer leaves an object with
-- a finalizer behind it); a call has met a finalizer when one ran inside it.
local hwt = require("hwt")

local CALLS = 2000
local ran = 0
local function with_finalizer(f)                 -- a proxy where tables have no __gc
  if newproxy then
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = f
    return proxy
  end
  return setmetatable({}, { __gc = f })
end
local function seedling() with_finalizer(function() ran = ran + 1; seedling() end) end
for _ = 1, 50 do seedling() end

local stepmul = tonumber(arg and arg[1] or "") or 1000
if rawget(_G, "jit") then
  collectgarbage("setpause", 0)
  collectgarbage("setstepmul", stepmul)
else
  collectgarbage("incremental", 0, 100, 1)
end

local timer = hwt.new({ clock = "manual" })
local calls = {
  { "timeout", function() timer:timeout(0.001, function() end) end },
  { "stats", function() timer:stats() end },
  { "tostring", function() tostring(timer) end },
  { "timeouts", function() timer:timeouts() end },
}
local parts = {}
for _, call in ipairs(calls) do
  local met = 0
  for _ = 1, CALLS do
    local before = ran
    call[2]()
    if ran > before then met = met + 1 end
  end
  parts[#parts + 1] = ("%s %d/%d"):format(call[1], met, CALLS)
end
print(("%s%s: %s"):format(rawget(_G, "jit") and jit.version or _VERSION,
  rawget(_G, "jit") and (", stepmul " .. stepmul) or "", table.concat(parts, ", ")))
