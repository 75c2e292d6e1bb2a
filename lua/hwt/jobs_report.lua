-- hwt.jobs_report: where hwt.jobs' errors go: the queue's on_error, else the
-- timer's on_error (as the error of a task of its own), else stderr.
local M = {}

local function raise(_, err) error(err, 0) end

-- Hands `err` to the timer's on_error, as the error of a task of its own.
local function report_to_timer(q, err)
  local ok, task = pcall(q.timer.timeout, q.timer, 0, raise, err)
  if not (ok and task) then io.stderr:write("hwt.jobs: ", tostring(err), "\n") end
end

-- Reports `err` to on_error, or else to the timer's on_error. It never
-- raises, so that a report never cuts short the bookkeeping around it.
local function report(q, err, job)
  if not q.on_error then return report_to_timer(q, err) end
  local ok, raised = pcall(q.on_error, err, job)
  if not ok then report_to_timer(q, raised) end
end

M.report = report
return M
