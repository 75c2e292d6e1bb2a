-- One hwt.jobs producer process of make bench-jobs (bench/bullmq/producer.js
-- is BullMQ's; the two take the same arguments and schedule alike):
--   lua5.4 bench/jobs_producer.lua PORT KEY DIR NAME MODE COUNT [ARG]
--   batch  COUNT jobs due in an hour, q:schedule_many in lists of ARG jobs
--   one    COUNT jobs due in an hour, one q:schedule each
--   at     COUNT jobs due at Unix time ARG, in lists of SETUP_LIST
--   paced  COUNT jobs, RATE a second, each due DELAY s after it is
--          scheduled (ARG = "RATE,DELAY")
--   floor  COUNT round trips of a script that does nothing (EVALSHA of
--          "return 1") through the same client: what one call per job
--          costs before any of hwt.jobs' work
-- Every payload is { n = i, due = the Unix time it is due }, by this
-- machine's clock, which the workers' records compare with their starts.
-- Writes the seconds from the first call to the last reply to result.NAME.
local files = require("jobs_files")
local redis_client = require("jobs_redis")
local socket = require("socket")
local hwt = require("hwt")
local jobs = require("hwt.jobs")

local SETUP_LIST = 1000         -- jobs a list when the lists are not what is measured
local FAR = 3600                -- seconds: the delay of jobs that must not fall due

local now = files.now
local port, key, dir, name, mode, count, mode_arg = arg[1], arg[2], arg[3], arg[4], arg[5],
                                                     tonumber(arg[6]), arg[7]

local q = jobs.redis({ timer = hwt.new({}), key = key,
                       connect = function() return redis_client.connect(port) end })

local function schedule_lists(size, due_of)
  for first = 1, count, size do
    local list = {}
    for i = first, math.min(count, first + size - 1) do
      local due = due_of()
      list[#list + 1] = { name = "job", delay = math.max(0, due - now()), payload = { n = i, due = due } }
    end
    assert(q:schedule_many(list))
  end
end

local function schedule_paced(rate, delay)
  local base = now()
  for i = 1, count do
    local wait = base + (i - 1) / rate - now()
    if wait > 0 then socket.sleep(wait) end
    local due = now() + delay
    assert(q:schedule("job", delay, { n = i, due = due }))
  end
end

local MODES = {
  batch = function()
    schedule_lists(assert(tonumber(mode_arg), "batch: a list size expected"), function() return now() + FAR end)
  end,
  one = function()
    for i = 1, count do assert(q:schedule("job", FAR, { n = i, due = now() + FAR })) end
  end,
  at = function()
    local due_at = assert(tonumber(mode_arg), "at: a Unix time expected")
    schedule_lists(SETUP_LIST, function() return due_at end)
  end,
  floor = function()
    local client = redis_client.connect(port)
    local sha = client:script("load", "return 1")
    for _ = 1, count do client:evalsha(sha, 0) end
  end,
  paced = function()
    local rate, delay = (mode_arg or ""):match("^([%d.]+),([%d.]+)$")
    schedule_paced(assert(tonumber(rate), "paced: RATE,DELAY expected"), tonumber(delay))
  end,
}

local run = assert(MODES[mode], "mode: batch, one, at, paced or floor expected")
assert(q:counts())              -- connected and the scripts' cache warm, off the clock
local started = now()
run()
files.write_whole(files.path(dir, "result", name), ("%.6f\n"):format(now() - started))
