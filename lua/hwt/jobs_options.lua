-- hwt.jobs_options: the checks of hwt.jobs' options (jobs.redis) and of its
-- methods' arguments. A method's check raises at the method's caller.
local checks = require("hwt.checks")
local backoff = require("hwt.backoff")

local M = {}

local huge = math.huge
local DEFAULTS = { lease = 30, poll_interval = 1, concurrency = 32 }

-- Raised without a position: jobs.redis re-raises it at its caller's line.
local function bad_option(key, message)
  error(("bad option '%s' to 'redis' (%s)"):format(key, message), 0)
end

local function positive_number(opts, key)
  local value = opts[key]
  if value == nil then return DEFAULTS[key] end
  local number = tonumber(value)
  if type(value) == "boolean" or not number or number ~= number or number <= 0 or number == huge then
    bad_option(key, "positive number expected, got " .. tostring(value))
  end
  return number
end

local KNOWN_OPTIONS = {
  timer = true, connect = true, shards = true, release = true, key = true, lease = true,
  poll_interval = true, concurrency = true, retry = true, on_error = true,
}

-- opts.shards: an array of connect functions, one per Redis primary, in
-- place of opts.connect.
local function check_shards(opts)
  if opts.connect ~= nil then bad_option("connect", "nil expected with opts.shards (a connect per shard)") end
  local shards = opts.shards
  if type(shards) ~= "table" or #shards == 0 then
    bad_option("shards", "a non-empty array of connect functions expected, got "
      .. (type(shards) == "table" and "an empty table" or type(shards)))
  end
  for key in pairs(shards) do
    if type(key) ~= "number" or key % 1 ~= 0 or key < 1 or key > #shards then
      bad_option("shards", "an array of connect functions expected, got the key " .. tostring(key))
    end
  end
  for i = 1, #shards do
    if type(shards[i]) ~= "function" then
      bad_option("shards", ("shards[%d]: function expected, got %s"):format(i, type(shards[i])))
    end
  end
end

local function check_options(opts)
  if type(opts) ~= "table" then
    error("bad argument #1 to 'redis' (table expected, got " .. type(opts) .. ")", 0)
  end
  for key in pairs(opts) do
    if not KNOWN_OPTIONS[key] then bad_option(tostring(key), "unknown option") end
  end
  if checks.type_name(opts.timer) ~= "hwt.Timer" then
    bad_option("timer", "hwt.Timer expected, got " .. checks.type_name(opts.timer))
  end
  if opts.shards == nil then
    if type(opts.connect) ~= "function" then
      bad_option("connect", "function expected, got " .. type(opts.connect))
    end
  else
    check_shards(opts)
  end
  if opts.release == nil and type(ngx) == "table" and ngx.get_phase then
    bad_option("release", "function expected in OpenResty, where a cosocket cannot be shared "
      .. "between requests: e.g. function(red) red:set_keepalive(10000, 32) end")
  end
  for _, key in ipairs({ "release", "on_error" }) do
    if opts[key] ~= nil and type(opts[key]) ~= "function" then
      bad_option(key, "function expected, got " .. type(opts[key]))
    end
  end
  if type(opts.key) ~= "string" or opts.key == "" then
    bad_option("key", "non-empty string expected, got " .. type(opts.key))
  end
  local concurrency = positive_number(opts, "concurrency")
  if concurrency % 1 ~= 0 then bad_option("concurrency", "integer expected") end
  if opts.retry ~= nil and type(opts.retry) ~= "table" then
    bad_option("retry", "table expected, got " .. type(opts.retry))
  end
  local retry = backoff.options(opts.retry or {}, function(field, message)
    bad_option("retry." .. field, message)
  end)
  for field in pairs(opts.retry or {}) do
    if retry[field] == nil or field == "random" then
      bad_option("retry." .. tostring(field), "unknown field")
    end
  end
  return {
    lease = positive_number(opts, "lease"),
    poll_interval = positive_number(opts, "poll_interval"),
    concurrency = concurrency,
    retry = retry,
  }
end

-- The checks of the queue's arguments, each called by the method itself,
-- so that the error points at the method's caller.
local function name_problem(name)
  if type(name) ~= "string" or name == "" then
    return "non-empty string expected, got " .. (name == "" and "an empty one" or checks.type_name(name))
  end
end

local function name_arg(name, fname)
  local problem = name_problem(name)
  if problem then checks.arg_error(fname, 1, problem) end
end

-- Whether `value` is a finite number >= 0, or a string of one.
local function is_time(value)
  local seconds = tonumber(value)
  return type(value) ~= "boolean" and seconds ~= nil and seconds == seconds and seconds >= 0 and seconds ~= huge
end

-- The problem with a number of seconds (a delay), or nil.
local function seconds_problem(value)
  if not is_time(value) then return "finite number of seconds >= 0 expected, got " .. tostring(value) end
end

local function seconds_arg(value, fname, n)
  local problem = seconds_problem(value)
  if problem then checks.arg_error(fname, n, problem) end
  return tonumber(value)
end

-- The problem with a due time (Unix seconds, on the Redis server's clock), or nil.
local function at_problem(value)
  if not is_time(value) then return "finite Unix time in seconds >= 0 expected, got " .. tostring(value) end
end

-- The problem with a caller's job id, or nil: a string with a non-digit
-- (ids of digits alone are the queue's own).
local function id_problem(id)
  if type(id) ~= "string" or not id:find("%D") then
    return "a string with a non-digit expected (ids of digits alone are the queue's own), got "
      .. (type(id) == "string" and ("%q"):format(id) or checks.type_name(id))
  end
end

-- The problem with the fields of a table of options or of a job, or nil:
-- an unknown key ("unknown option 'x'", "list[2]: unknown field 'x'"), or a
-- value `check` finds wrong (named `prefix .. key`: "opts.id", "list[2].id").
local function fields_problem(t, known, prefix, unknown)
  for key in pairs(t) do
    if not known[key] then return ("%s '%s'"):format(unknown, tostring(key)) end
  end
  for key, check in pairs(known) do
    local problem = t[key] ~= nil and check(t[key])
    if problem then return prefix .. key .. ": " .. problem end
  end
end

local function boolean_problem(value)
  if type(value) ~= "boolean" then return "boolean expected, got " .. checks.type_name(value) end
end

local function any() end

local SCHEDULE_OPTIONS = { id = id_problem, replace = boolean_problem, at = at_problem }

-- What is wrong with schedule()'s opts, or nil. opts.replace is true only
-- with an id.
local function schedule_options_problem(opts)
  if type(opts) ~= "table" then return "table expected, got " .. checks.type_name(opts) end
  local problem = fields_problem(opts, SCHEDULE_OPTIONS, "opts.", "unknown option")
  if problem then return problem end
  if opts.replace and opts.id == nil then return "opts.replace needs opts.id" end
end

-- schedule()'s opts: id, replace (a boolean), at (or nil), checked.
local function schedule_options(opts)
  if opts == nil then return nil, false, nil end
  local problem = schedule_options_problem(opts)
  if problem then checks.arg_error("schedule", 4, problem) end
  return opts.id, opts.replace == true, opts.at and tonumber(opts.at)
end

-- A delay (argument n of fname) unless `at` is given, when it must be nil:
-- the delay in seconds, or nil.
local function delay_or_at_arg(delay, at, fname, n)
  local problem
  if at == nil then
    problem = seconds_problem(delay)
  elseif delay ~= nil then
    problem = "nil expected with opts.at, got " .. checks.type_name(delay)
  end
  if problem then checks.arg_error(fname, n, problem) end
  return at == nil and tonumber(delay) or nil
end

local JOB_FIELDS = {
  name = name_problem, delay = seconds_problem, at = at_problem, payload = any, id = id_problem,
  replace = boolean_problem,
}

-- What is wrong with job i of schedule_many()'s list, or nil.
local function job_problem(job, i)
  local prefix = ("list[%d]."):format(i)
  if type(job) ~= "table" then return ("list[%d]: table expected, got %s"):format(i, checks.type_name(job)) end
  local problem = fields_problem(job, JOB_FIELDS, prefix, ("list[%d]: unknown field"):format(i))
  if problem then return problem end
  if job.name == nil then return prefix .. "name: non-empty string expected, got nil" end
  if job.delay == nil and job.at == nil then return ("list[%d]: delay or at expected"):format(i) end
  if job.delay ~= nil and job.at ~= nil then return ("list[%d]: delay or at expected, not both"):format(i) end
  if job.replace and job.id == nil then return prefix .. "replace needs " .. prefix .. "id" end
end

-- schedule_many()'s list, checked: an array of jobs (`n` of them).
local function job_list_arg(list)
  if type(list) ~= "table" then checks.arg_error("schedule_many", 1, "table expected, got " .. checks.type_name(list)) end
  local n = #list
  for key in pairs(list) do
    if type(key) ~= "number" or key % 1 ~= 0 or key < 1 or key > n then
      checks.arg_error("schedule_many", 1, "an array of jobs expected, got the key " .. tostring(key))
    end
  end
  for i = 1, n do
    local problem = job_problem(list[i], i)
    if problem then checks.arg_error("schedule_many", 1, problem) end
  end
  return list, n
end

local function id_arg(id, fname)
  if type(id) ~= "string" and type(id) ~= "number" then
    checks.arg_error(fname, 1, "job id expected, got " .. checks.type_name(id))
  end
  return tostring(id)
end

-- The problem with an option table whose keys must all be in `known`
-- (key -> its problem check), or nil. No table is none.
local function options_problem(opts, known)
  if opts == nil then return nil end
  if type(opts) ~= "table" then return "table expected, got " .. checks.type_name(opts) end
  return fields_problem(opts, known, "opts.", "unknown option")
end

local LIST_STATES = { delayed = true, running = true, dead = true }

local function count_problem(minimum)
  return function(value)
    if type(value) ~= "number" or value % 1 ~= 0 or value < minimum then
      return ("integer >= %d expected, got %s"):format(minimum, tostring(value))
    end
  end
end

local LIST_OPTIONS = {
  state = function(value)
    if not LIST_STATES[value] then return '"delayed", "running" or "dead" expected, got ' .. tostring(value) end
  end,
  from = count_problem(0), count = count_problem(1),
}

-- list()'s opts: state (default "delayed"), from (0), count (100).
local function list_options(opts)
  local problem = options_problem(opts, LIST_OPTIONS)
  if problem then checks.arg_error("list", 1, problem) end
  opts = opts or {}
  return opts.state or "delayed", opts.from or 0, opts.count or 100
end

local function string_problem(value)
  if type(value) ~= "string" then return "string expected, got " .. checks.type_name(value) end
end

local EVERY_OPTIONS = { id = id_problem, replace = boolean_problem, tz = string_problem }

-- every()'s opts: id, replace (a boolean), tz (or nil), checked.
local function every_options(opts)
  local problem = options_problem(opts, EVERY_OPTIONS)
  if not problem and opts and opts.replace and opts.id == nil then problem = "opts.replace needs opts.id" end
  if problem then checks.arg_error("every", 4, problem) end
  opts = opts or {}
  return opts.id, opts.replace == true, opts.tz
end

local RESCHEDULE_OPTIONS = { at = at_problem }

-- reschedule()'s opts.at (or nil).
local function reschedule_options(opts)
  local problem = options_problem(opts, RESCHEDULE_OPTIONS)
  if problem then checks.arg_error("reschedule", 3, problem) end
  return opts and opts.at and tonumber(opts.at)
end

M.check_options = check_options
M.name_arg, M.seconds_arg, M.schedule_options, M.id_arg = name_arg, seconds_arg, schedule_options, id_arg
M.delay_or_at_arg, M.job_list_arg, M.list_options = delay_or_at_arg, job_list_arg, list_options
M.reschedule_options, M.every_options = reschedule_options, every_options
return M
