-- The files through which make bench-jobs' coordinator (bench/jobs_bench.lua)
-- and the worker and producer processes it starts talk, all in the run's
-- scratch directory (bench/bullmq/*.js use the same names):
--   alive         while it exists, workers keep working (the shell's trap
--                 removes it first, so a worker outlives no run)
--   ready.NAME    worker NAME is connected and waiting for jobs
--   stop.NAME     the coordinator asks worker NAME to stop
--   out.NAME      worker NAME's records, a "start due end" line per job it
--                 ran (Unix seconds, this machine's clock), written whole
--   result.NAME   producer NAME's seconds from its first call to its last reply
local socket = require("socket")

local M = {}

M.now = socket.gettime          -- Unix seconds, the clock both sides' records use

function M.path(dir, kind, name)
  if name then return dir .. "/" .. kind .. "." .. name end
  return dir .. "/" .. kind
end

function M.exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

function M.touch(path)
  local f = assert(io.open(path, "w"))
  f:close()
end

-- Writes `text` to `path` through a rename, so a reader never sees half of it.
function M.write_whole(path, text)
  local tmp = path .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  assert(f:write(text))
  f:close()
  assert(os.rename(tmp, path))
end

-- Options given as "key=value" arguments, from arg[first] on: a table.
function M.options(args, first)
  local opts = {}
  for i = first, #args do
    local key, value = args[i]:match("^([%w_]+)=(.*)$")
    opts[assert(key, "key=value expected: " .. args[i])] = value
  end
  return opts
end

return M
