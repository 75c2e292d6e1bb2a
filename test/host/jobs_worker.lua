-- A worker process for test/host/jobs_test.lua:
--   lua5.4 test/host/jobs_worker.lua PORTS KEY LEASE LOG
-- Runs the jobs named "job" of queue KEY (on the redis-server at PORTS, or
-- sharded over the primaries at PORTS, comma-separated) and writes, for each run, a line
-- "S id start due pid" when the handler starts and "D id" when it ends
-- (a payload { sleep = s } makes the handler sleep s seconds first)
-- (line-buffered, so that a SIGKILL loses no finished line). Runs until it
-- is killed.
package.path = "lua/?.lua;test/host/?.lua;" .. package.path
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local server = require("redis_server")
local socket = require("socket")

local ports, key, lease, log_path = arg[1], arg[2], tonumber(arg[3]), arg[4]
local WORK_SECONDS = 0.0005    -- each handler busy this long, so that a kill lands mid-run
local POLL_INTERVAL = 0.5

local log = assert(io.open(log_path, "a"))
log:setvbuf("line")
local pid = io.open("/proc/self/stat"):read("*l"):match("^(%d+)")

local connects = {}
for port in ports:gmatch("%d+") do
  connects[#connects + 1] = function() return server.connect_client(port, 1) end   -- hwt.redis on Lua 5.4
end
local timer = hwt.new({ tick = 0.005 })
local queue = jobs.redis({
  timer = timer, key = key, lease = lease, poll_interval = POLL_INTERVAL,
  connect = #connects == 1 and connects[1] or nil, shards = #connects > 1 and connects or nil,
  on_error = function(err) io.stderr:write("worker ", pid, ": ", tostring(err), "\n") end,
})

queue:handle("job", function(payload, job)
  local start = socket.gettime()
  log:write(("S %s %.6f %.6f %s\n"):format(job.id, start, job.due, pid))
  if payload.sleep then socket.sleep(payload.sleep) end
  while socket.gettime() - start < WORK_SECONDS do end
  log:write(("D %s\n"):format(job.id))
end)
assert(queue:start())
while true do timer:run_for(1) end
