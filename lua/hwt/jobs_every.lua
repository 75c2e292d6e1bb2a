-- hwt.jobs_every: the schedule of a recurring job (q:every): a five-field
-- cron expression read in an IANA time zone (hwt.cron, hwt.tz), or an
-- interval in seconds. A series has one occurrence waiting at a time; when
-- one has run, the next is the first one strictly after the Redis clock's
-- now, so occurrences missed while no worker ran run once, not once each.
-- Local times that do not exist (clocks go forward) run at the first
-- minute after the gap; times that happen twice (clocks go back) run once,
-- at the first (hwt.tz's Zone:utc_of).
local cron = require("hwt.cron")
local tz = require("hwt.tz")

local M = {}

local huge = math.huge

-- The schedule of `spec` (a cron expression or seconds) in zone `tz_name`
-- (default "UTC"); or nil and why not.
function M.schedule_of(spec, tz_name)
  if type(spec) == "number" then
    if not (spec > 0 and spec < huge) then
      return nil, "an interval is a finite number of seconds > 0, got " .. tostring(spec)
    end
    return { interval = spec }
  end
  if type(spec) ~= "string" then
    return nil, "a cron expression (string) or an interval (number) expected, got " .. type(spec)
  end
  local schedule, why = cron.parse(spec)
  if not schedule then return nil, why end
  local zone, zone_why = tz.zone(tz_name or "UTC")
  if not zone then return nil, zone_why end
  return { cron = schedule, zone = zone }
end

-- The next occurrence strictly after `after` (Unix seconds): for an
-- interval, on the grid of `due` (the occurrence that ran); nil when a cron
-- expression has none within hwt.cron's search.
function M.next_after(schedule, after, due)
  if schedule.interval then
    local beats = math.floor((after - due) / schedule.interval) + 1
    return due + math.max(1, beats) * schedule.interval
  end
  local zone = schedule.zone
  local local_after = after + zone:offset_at(after)
  while true do
    local minute = cron.next_after(schedule.cron, local_after)
    if not minute then return nil end
    local utc = zone:utc_of(minute)
    if utc > after then return utc end
    local_after = minute                      -- a repeated local time: its first ran already
  end
end

return M
