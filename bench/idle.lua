-- Idle cost of a timer: the worker thread's context switches and CPU time over
-- a quiet period, (a) with nothing pending, (b) with one timeout 1 hour away.
-- Run: make bench-idle  (IDLE_SECONDS=5 by default). Linux only (/proc).
local hwt = require("hwt")
local seconds = tonumber(os.getenv("IDLE_SECONDS")) or 5

local function field(path, name)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return text:match(name .. ":%s*(%d+)")
end

local pid = field("/proc/self/status", "Pid")   -- read by lua itself

local function threads()
  local list = {}
  local ls = io.popen("ls /proc/" .. pid .. "/task")
  for tid in ls:lines() do list[#list + 1] = tid end
  ls:close()
  return list
end

local function task_stats(tid)
  local status = "/proc/self/task/" .. tid .. "/status"
  local stat = assert(io.open("/proc/self/task/" .. tid .. "/stat")):read("a")
  local fields = {}
  for value in stat:gsub("^.-%) ", ""):gmatch("%S+") do fields[#fields + 1] = value end
  return {
    voluntary = tonumber(field(status, "voluntary_ctxt_switches")),
    involuntary = tonumber(field(status, "nonvoluntary_ctxt_switches")),
    cpu_ticks = tonumber(fields[12]) + tonumber(fields[13]),   -- utime + stime
  }
end

local main_tid = pid
local timer = hwt.new()
assert(timer:fd())                          -- starts the worker thread, as a host loop would
timer:timeout(0, function() end)
timer:wait(1); timer:poll()

local worker
for _, tid in ipairs(threads()) do if tid ~= main_tid then worker = tid end end
assert(worker, "no worker thread found")

-- Sleeps without fork() (os.execute would fork, which disturbs every thread):
-- wait() on an empty timer blocks on its condition variable.
local sleeper = hwt.new()
local function sleep(s) sleeper:wait(s) end

local function measure(label)
  sleep(0.2)                               -- let the worker settle first
  local before, wakeups = task_stats(worker), timer:stats().worker_wakeups
  sleep(seconds)
  local after = task_stats(worker)
  print(("%-34s %ds: voluntary switches %d, involuntary %d, CPU ticks %d, worker_wakeups %d"):format(
    label, seconds, after.voluntary - before.voluntary, after.involuntary - before.involuntary,
    after.cpu_ticks - before.cpu_ticks, timer:stats().worker_wakeups - wakeups))
end

measure("idle, nothing pending")
local far = timer:timeout(3600, function() end)
measure("idle, one timeout 1 h away")
far:cancel()
timer:stop()
