-- hwt.backoff: the backoff rules: hwt.retry's, also hwt.jobs' retries of a
-- failed job; and the growing pause of hwt.ngx's tries after nginx refused a
-- wake and of hwt.jobs' worker after a failed round.
local M = {}

-- The n-th pause of a series that starts at `first` and is multiplied by
-- `factor` each time, capped at `longest`: min(first * factor^(n-1), longest).
function M.grow(first, factor, n, longest)
  return math.min(first * factor ^ (n - 1), longest)
end

local DEFAULTS = { retries = 3, delay = 1, backoff = 2, max_delay = 60, jitter = 0 }

-- Returns the backoff fields of `opts` (numbers or numeric strings, as
-- luaL_checknumber takes them) with the defaults filled in, and `random`
-- (math.random unless given); other keys are the caller's to check.
-- `bad(key, message)` raises the caller's error for a bad field.
function M.options(opts, bad)
  local o = {}
  for key, default in pairs(DEFAULTS) do
    local value = opts[key]
    local number = tonumber(value)
    if value == nil then
      number = default
    elseif type(value) == "boolean" or number == nil or number ~= number then
      bad(key, "number expected, got " .. (number ~= number and "nan" or type(value)))
    end
    o[key] = number
  end
  local problem =
    not (o.retries == math.huge or (o.retries >= 0 and o.retries % 1 == 0))
      and { "retries", "must be an integer >= 0 or math.huge" }
    or o.delay < 0 and { "delay", "must be >= 0" }
    or o.backoff < 1 and { "backoff", "must be >= 1" }
    or o.max_delay < 0 and { "max_delay", "must be >= 0" }
    or not (o.jitter >= 0 and o.jitter <= 1) and { "jitter", "must be between 0 and 1" }
  if problem then bad(problem[1], problem[2]) end
  o.random = math.random
  return o
end

-- Retry k waits min(b * (1 +- jitter), max_delay), b = min(delay *
-- backoff^(k-1), max_delay): max_delay caps the wait after jitter too.
function M.wait(o, retry_number)
  if o.delay == 0 then return 0 end             -- 0 * math.huge would be NaN
  local wait = M.grow(o.delay, o.backoff, retry_number, o.max_delay)
  if o.jitter > 0 then
    wait = wait * (1 + o.jitter * (2 * o.random() - 1))
  end
  return math.min(wait, o.max_delay)
end

return M
