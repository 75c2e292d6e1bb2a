-- hwt.checks: the argument checks that hwt's modules, the host drivers and
-- hwt.jobs share: what a value is, and errors that name the bad argument.
local M = {}

-- The name of a value's type, as hwt's errors give it: the string a
-- protected metatable returns ("hwt.Timer", "hwt.Timeout"), else type().
function M.type_name(value)
  if M.is_timeout(value) then return "hwt.Timeout" end
  local mt = getmetatable(value)
  return type(mt) == "string" and mt or type(value)
end

-- Whether `value` can be called: a function, or a value whose metatable has
-- a function __call.
function M.is_callable(value)
  if type(value) == "function" then return true end
  if M.is_timeout(value) then return false end     -- a cdata one has ffi's __call
  local mt = debug.getmetatable(value)
  return type(mt) == "table" and type(rawget(mt, "__call")) == "function"
end

-- What getmetatable() gives for a Timer and for a Timeout: each is a
-- userdata with a protected metatable.
local TIMER, TIMEOUT = "hwt.Timer", "hwt.Timeout"

function M.is_timer(value)
  return type(value) == "userdata" and getmetatable(value) == TIMER
end

-- On LuaJIT a Timeout is a cdata: hwt.jit gives the test for one.
local is_cdata_timeout = nil

function M.set_cdata_timeout_test(test) is_cdata_timeout = test end

-- hwt.is_timeout(value): whether `value` is a Timeout, of any timer.
function M.is_timeout(value)
  if type(value) == "userdata" then return getmetatable(value) == TIMEOUT end
  return is_cdata_timeout ~= nil and type(value) == "cdata" and is_cdata_timeout(value)
end

-- The number that luaL_checknumber would take for `value` (a number or a
-- numeric string), or nil.
function M.as_number(value)
  if type(value) ~= "number" and type(value) ~= "string" then return nil end
  return tonumber(value)
end

-- The checks below are called by the function they check for, and raise for
-- that function's caller.

-- Raises "bad argument #n to 'fname' (message)"; called by a check.
function M.arg_error(fname, n, message)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, message), 4)
end

-- Raises "calling 'fname' on bad self" unless `value` is a Timer: is_timer's
-- test, written out (every poll() with arguments runs it).
function M.check_self(value, fname)
  if type(value) ~= "userdata" or getmetatable(value) ~= TIMER then
    error(("calling '%s' on bad self (hwt.Timer expected, got %s)"):format(fname, M.type_name(value)), 3)
  end
end

-- Checks the options table `opts`, argument n of fname (nil is {}):
-- `known[key](value)` returns what is wrong with that option, or nil.
-- Returns opts.
function M.check_options(fname, n, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then M.arg_error(fname, n, "table expected, got " .. M.type_name(opts)) end
  for key, value in pairs(opts) do
    local check = known[key]
    if not check then M.arg_error(fname, n, "unknown option '" .. tostring(key) .. "'") end
    local problem = check(value)
    if problem then
      error(("bad option '%s' to '%s' (%s)"):format(key, fname, problem), 3)
    end
  end
  return opts
end

-- Option checks for check_options: a callable, a function.
function M.option_callable(value)
  if not M.is_callable(value) then return "function expected, got " .. M.type_name(value) end
end

function M.option_function(value)
  if type(value) ~= "function" then return "function expected, got " .. type(value) end
end

-- Argument n of fname: seconds, a finite number >= 0.
function M.seconds_arg(value, n, fname)
  local seconds = M.as_number(value)
  if seconds == nil then M.arg_error(fname, n, "number expected, got " .. M.type_name(value)) end
  if not (seconds >= 0 and seconds < math.huge) then
    M.arg_error(fname, n, "seconds must be a finite number >= 0")
  end
  return seconds
end

return M
