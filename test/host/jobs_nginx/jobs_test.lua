-- What the nginx side (LuaJIT) and the plain side (Lua 5.4) of
-- test/host/jobs_nginx_test.sh agree on: the test's own Redis lists, the payload,
-- and the line that records one run of a job.
local M = {}

M.TO_NGINX = "jobs_test:to_nginx"   -- plain Lua schedules, nginx runs
M.TO_PLAIN = "jobs_test:to_plain"   -- nginx schedules, plain Lua runs
M.TO_LISTENING = "jobs_test:to_listening"   -- plain Lua schedules, nginx runs, polling every 30 s

-- The test's bookkeeping, beside the queue's own keys.
function M.lists(key)
  return { expected = key .. ":test:expected", cancelled = key .. ":test:cancelled",
           runs = key .. ":test:runs" }
end

-- `now_us`: the wall clock in whole microseconds (the clock Redis's TIME
-- reads). The payload says when the job may run at the earliest, as a string,
-- which M.record writes out whole (LuaJIT's tostring keeps 14 digits).
function M.payload(i, delay, now_us)
  return { n = i, not_before = ("%.0f"):format(now_us + math.floor(delay * 1e6)) }
end

-- One run: "id start_us due_us not_before_us ngx_now_ms pid" ("-" for
-- ngx_now_ms outside nginx).
function M.record(job, payload, start_us, ngx_now_ms, pid)
  return ("%s %.0f %.0f %s %s %s"):format(job.id, start_us, math.floor(job.due * 1e6 + 0.5),
    payload.not_before, ngx_now_ms and ("%.0f"):format(ngx_now_ms) or "-", tostring(pid))
end

return M
