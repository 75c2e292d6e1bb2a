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
  timer = true, connect = true, release = true, key = true, lease = true,
  poll_interval = true, concurrency = true, retry = true, on_error = true,
}

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
  if type(opts.connect) ~= "function" then
    bad_option("connect", "function expected, got " .. type(opts.connect))
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
local function name_arg(name, fname)
  if type(name) ~= "string" or name == "" then
    checks.arg_error(fname, 1, "non-empty string expected, got "
      .. (name == "" and "an empty one" or checks.type_name(name)))
  end
end

local function seconds_arg(value, fname, n)
  local seconds = tonumber(value)
  if type(value) == "boolean" or not seconds or seconds ~= seconds or seconds < 0 or seconds == huge then
    checks.arg_error(fname, n, "finite number of seconds >= 0 expected, got " .. tostring(value))
  end
  return seconds
end

local SCHEDULE_OPTIONS = { id = true, replace = true }

-- What is wrong with schedule()'s opts, or nil. opts.id: a string with a
-- non-digit (ids of digits alone are the queue's own); opts.replace: a
-- boolean, true only with an id.
local function schedule_options_problem(opts)
  if type(opts) ~= "table" then return "table expected, got " .. checks.type_name(opts) end
  for key in pairs(opts) do
    if not SCHEDULE_OPTIONS[key] then return "unknown option '" .. tostring(key) .. "'" end
  end
  local id, replace = opts.id, opts.replace
  if id ~= nil and (type(id) ~= "string" or not id:find("%D")) then
    return "opts.id: a string with a non-digit expected (ids of digits alone are the queue's own), got "
      .. (type(id) == "string" and ("%q"):format(id) or checks.type_name(id))
  end
  if replace ~= nil and type(replace) ~= "boolean" then
    return "opts.replace: boolean expected, got " .. checks.type_name(replace)
  end
  if replace and id == nil then return "opts.replace needs opts.id" end
end

-- schedule()'s opts.id and opts.replace, checked.
local function schedule_options(opts)
  if opts == nil then return nil, false end
  local problem = schedule_options_problem(opts)
  if problem then checks.arg_error("schedule", 4, problem) end
  return opts.id, opts.replace == true
end

local function id_arg(id, fname)
  if type(id) ~= "string" and type(id) ~= "number" then
    checks.arg_error(fname, 1, "job id expected, got " .. checks.type_name(id))
  end
  return tostring(id)
end

M.check_options = check_options
M.name_arg, M.seconds_arg, M.schedule_options, M.id_arg = name_arg, seconds_arg, schedule_options, id_arg
return M
