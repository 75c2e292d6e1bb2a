-- The plain Lua 5.4 half of test/host/jobs_nginx_test.sh (redis-lua over LuaSocket):
--   lua5.4 plain.lua schedule REDIS_PORT N SPREAD CANCEL  -> into TO_NGINX
--   lua5.4 plain.lua work REDIS_PORT SECONDS              -> runs TO_PLAIN
--   lua5.4 plain.lua verify REDIS_PORT to_nginx|to_plain  -> what ran
package.path = package.path .. ";/usr/share/lua/5.3/?.lua"   -- Debian's redis.lua
local redis = require("redis")
local socket = require("socket")
local hwt = require("hwt")
local jobs = require("hwt.jobs")
local common = require("jobs_test")

local command, port = arg[1], tonumber(arg[2])

local function connect() return redis.connect("127.0.0.1", port, 2) end
local function now_us() return math.floor(socket.gettime() * 1e6 + 0.5) end

local function queue(timer, key)
  return jobs.redis { timer = timer, key = key, connect = connect, poll_interval = 0.2 }
end

-- N jobs due over [0, spread), then CANCEL more that are cancelled at once,
-- into `key` (TO_NGINX or TO_LISTENING).
local function schedule(n, spread, cancel, key)
  local q = queue(hwt.new(), key)
  local lists, red = common.lists(key), connect()
  local function add(i, delay)
    local id = assert(q:schedule("record", delay, common.payload(i, delay, now_us())))
    red:rpush(lists.expected, id)
    return id
  end
  for i = 1, n do add(i, spread * (i - 1) / n) end
  local cancelled = 0
  for i = 1, cancel do
    local id = add(n + i, spread / 2)
    if q:cancel(id) == true then
      cancelled = cancelled + 1
      red:rpush(lists.cancelled, id)
    end
  end
  print(("scheduled %d, cancelled %d"):format(n, cancelled))
end

-- Runs TO_PLAIN's jobs for `seconds`, then lets the last outcomes reach Redis.
local function work(seconds)
  local timer = hwt.new { tick = 0.001 }       -- as in jobs_nginx.lua
  local q, recorder = queue(timer, common.TO_PLAIN), connect()
  local runs = common.lists(common.TO_PLAIN).runs
  q:handle("record", function(payload, job)
    local start = now_us()
    recorder:rpush(runs, common.record(job, payload, start, nil, "plain"))
  end)
  assert(q:start())
  timer:run_for(seconds)
  q:stop()
  timer:run_for(0.3)
  local s = q:stats()
  print(("ran %d failed %d lost %d redis_errors %d unsettled %d"):format(
    s.ran, s.failed, s.lost, s.redis_errors, s.unsettled))
end

local function set_of(list)
  local set = {}
  for _, id in ipairs(list) do set[id] = true end
  return set
end

-- Problems with one run, or nil: started before its due time (by the
-- microsecond clock, or by ngx.now()'s millisecond), or due before the
-- delay it was scheduled with had passed.
local function early(start, due, not_before, ngx_ms)
  if start < due then return "started " .. (due - start) .. " us before due" end
  if due < not_before then return "due " .. (not_before - due) .. " us before now + delay" end
  if ngx_ms ~= "-" and tonumber(ngx_ms) < due // 1000 then return "ngx.now() " .. ngx_ms .. " ms < due" end
end

-- Line 1 must read as the script expects; line 2 is lateness and workers;
-- then a line per problem found.
local function verify(which)
  local key = common[which:upper()]
  local red, lists = connect(), common.lists(key)
  local expected = red:lrange(lists.expected, 0, -1)
  local cancelled = set_of(red:lrange(lists.cancelled, 0, -1))
  local known, count, problems, workers = set_of(expected), {}, {}, {}
  local unexpected, early_runs, late_min, late_max, nworkers = 0, 0, math.huge, 0, 0
  for _, line in ipairs(red:lrange(lists.runs, 0, -1)) do
    local id, start, due, not_before, ngx_ms, pid = line:match("^(%S+) (%d+) (%d+) (%d+) (%S+) (%S+)$")
    if not id then
      unexpected = unexpected + 1
      problems[#problems + 1] = "malformed run: " .. line
    else
      start, due, not_before = math.tointeger(start), math.tointeger(due), math.tointeger(not_before)
      count[id] = (count[id] or 0) + 1
      if not known[id] then unexpected = unexpected + 1 end
      local why = early(start, due, not_before, ngx_ms)
      if why then
        early_runs = early_runs + 1
        problems[#problems + 1] = "early: job " .. id .. " " .. why
      end
      late_min, late_max = math.min(late_min, start - due), math.max(late_max, start - due)
      if not workers[pid] then workers[pid], nworkers = true, nworkers + 1 end
    end
  end
  local once, missing, duplicates, ncancelled, cancelled_ran = 0, 0, 0, 0, 0
  for _, id in ipairs(expected) do
    local n = count[id] or 0
    if cancelled[id] then
      ncancelled = ncancelled + 1
      if n > 0 then cancelled_ran = cancelled_ran + 1 end
    elseif n == 0 then missing = missing + 1
    elseif n == 1 then once = once + 1
    end
    if n > 1 then duplicates = duplicates + n - 1 end
  end
  local slot = "{" .. key .. "}:"
  print(("ran %d of %d once, missing %d, duplicates %d, cancelled %d (ran %d), unexpected %d, "
    .. "early %d, left due %d claims %d dead %d"):format(once, #expected - ncancelled, missing,
    duplicates, ncancelled, cancelled_ran, unexpected, early_runs, red:zcard(slot .. "due"),
    red:hlen(slot .. "claims"), red:zcard(slot .. "dead")))
  print(("late_max_ms %d late_min_us %s workers %d"):format(late_max // 1000, late_min, nworkers))
  for i = 1, math.min(#problems, 5) do print(problems[i]) end
end

if command == "schedule" then
  schedule(tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5]), common[(arg[6] or "to_nginx"):upper()])
elseif command == "work" then
  work(tonumber(arg[3]))
elseif command == "verify" then
  verify(arg[3])
else
  error("usage: plain.lua schedule|work|verify REDIS_PORT ...")
end
