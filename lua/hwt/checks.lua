-- hwt.checks: the argument checks that hwt's modules, the host drivers and
-- hwt.jobs share: what a value is, and errors that name the bad argument.
local M = {}

-- The name of a value's type, as hwt's errors give it: the string a
-- protected metatable returns ("hwt.Timer", "hwt.Timeout"), else type().
function M.type_name(value)
  local mt = getmetatable(value)
  return type(mt) == "string" and mt or type(value)
end

-- Whether `value` can be called: a function, or a value whose metatable has
-- a function __call.
function M.is_callable(value)
  if type(value) == "function" then return true end
  local mt = debug.getmetatable(value)
  return type(mt) == "table" and type(rawget(mt, "__call")) == "function"
end

-- Raises "bad argument #n to 'fname' (message)" for the caller's caller.
function M.arg_error(fname, n, message)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, message), 4)
end

return M
