-- One hwt.jobs worker process of make bench-jobs (bench/jobs_bench.lua starts
-- it, as it starts bench/bullmq/worker.js for BullMQ, and talks to it through
-- the files of bench/jobs_files.lua):
--   lua5.4 bench/jobs_worker.lua PORT KEY DIR NAME [tick=S] [concurrency=N]
-- Without options it runs hwt's defaults (tick 10 ms, concurrency 32,
-- poll_interval 1 s). Its loop is a plain worker's, q:run_for, so it listens
-- for jobs other processes schedule. Each job's handler records its start,
-- the due time the producer put in the payload, and its end.
local files = require("jobs_files")
local redis_client = require("jobs_redis")
local hwt = require("hwt")
local jobs = require("hwt.jobs")

local LIFETIME = 120            -- seconds: a worker never outlives this
local SLICE = 0.05              -- seconds between looks at the stop files
local SETTLE = 0.1              -- seconds for the last outcomes to reach Redis

local now, path, exists = files.now, files.path, files.exists
local port, key, dir, name = arg[1], arg[2], arg[3], arg[4]
local opts = files.options(arg, 5)

local starts, dues, ends, ran = {}, {}, {}, 0

local function handler(payload)
  local start = now()
  ran = ran + 1
  starts[ran], dues[ran] = start, payload.due
  ends[ran] = now()
end

local function new_queue()
  local timer = hwt.new({ tick = tonumber(opts.tick) })
  return jobs.redis({
    timer = timer, key = key, concurrency = tonumber(opts.concurrency),
    connect = function() return redis_client.connect(port) end,
    on_error = function(err) io.stderr:write("hwt worker ", name, ": ", tostring(err), "\n") end,
  })
end

local function write_records()
  local lines = {}
  for i = 1, ran do lines[i] = ("%.6f %.6f %.6f\n"):format(starts[i], dues[i], ends[i]) end
  files.write_whole(path(dir, "out", name), table.concat(lines))
end

local born = now()
local function should_stop()
  return exists(path(dir, "stop", name)) or not exists(path(dir, "alive"))
    or now() - born > LIFETIME
end

local q = new_queue()
q:handle("job", handler)
assert(q:start())
q:run_for(SLICE)                -- the first round made, the listener opened
files.touch(path(dir, "ready", name))
while not should_stop() do q:run_for(SLICE) end
q:stop()
q:run_for(SETTLE)
write_records()
