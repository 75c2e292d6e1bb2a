-- hwt.cron: five-field cron expressions (minute hour day-of-month month
-- day-of-week), as Vixie cron reads them, and the next local minute one
-- matches. No clock, no time zone: times here are local calendar fields.
--
-- A field is a list of items separated by ",": "*", a value, a range "a-b",
-- each optionally stepped ("*/15", "1-30/2", "5/10" = "5-max/10"). Months
-- and days of the week may be names (jan..dec, sun..sat, any case); a day of
-- the week is 0..7, 0 and 7 both Sunday. When both the day of the month and
-- the day of the week are restricted (neither is "*"), a day matches when
-- either does (Vixie cron's rule).
local M = {}

local FIELDS = {
  { name = "minute", min = 0, max = 59 },
  { name = "hour", min = 0, max = 23 },
  { name = "day of month", min = 1, max = 31 },
  { name = "month", min = 1, max = 12,
    names = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6, jul = 7, aug = 8, sep = 9, oct = 10,
              nov = 11, dec = 12 } },
  { name = "day of week", min = 0, max = 7,
    names = { sun = 0, mon = 1, tue = 2, wed = 3, thu = 4, fri = 5, sat = 6 } },
}

local SEARCH_YEARS = 30        -- a schedule with no minute within this many years never runs

-- A value of `field` from `text`: a number or a name; nil when neither.
local function value_of(text, field)
  local number = text:match("^%d+$") and tonumber(text)
  if number then return number end
  return field.names and field.names[text:lower()]
end

-- The set (value -> true) an item of `field` covers; or nil and why.
local function item_set(item, field)
  local range, step = item:match("^([^/]+)/(%d+)$")
  if range then
    step = tonumber(step)
    if step < 1 then return nil, "a step of 0" end
  else
    range, step = item, 1
  end
  local low, high
  if range == "*" then
    low, high = field.min, field.max
  else
    local first, last = range:match("^([^-]+)-([^-]+)$")
    low = value_of(first or range, field)
    high = first and value_of(last, field) or (item:find("/", 1, true) and field.max or low)
    if not low or not high then return nil, ("%q is not a %s"):format(range, field.name) end
  end
  if low < field.min or high > field.max or low > high then
    return nil, ("%q is out of the %s's range %d-%d"):format(range, field.name, field.min, field.max)
  end
  local set = {}
  for value = low, high, step do set[value] = true end
  return set
end

-- The set a field's text covers, and whether it starts with "*" (Vixie
-- cron's test of an unrestricted day field, so "*/2" is one); or nil and why.
local function field_set(text, field)
  local set = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    if item == "" then return nil, ("an empty item in the %s field"):format(field.name) end
    local covered, why = item_set(item, field)
    if not covered then return nil, why end
    for value in pairs(covered) do set[value] = true end
  end
  return set, text:sub(1, 1) == "*"
end

-- The schedule of `expression`, or nil and why it is not one.
function M.parse(expression)
  if type(expression) ~= "string" then return nil, "a cron expression is a string" end
  local texts = {}
  for text in expression:gmatch("%S+") do texts[#texts + 1] = text end
  if #texts ~= 5 then
    return nil, ("%d fields, not 5 (minute hour day-of-month month day-of-week)"):format(#texts)
  end
  local schedule = {}
  for i, field in ipairs(FIELDS) do
    local set, any = field_set(texts[i], field)
    if not set then return nil, any end
    schedule[i], schedule[i + 5] = set, any
  end
  if schedule[5][7] then schedule[5][0] = true end     -- 7 is Sunday too
  return { minutes = schedule[1], hours = schedule[2], days = schedule[3], months = schedule[4],
           weekdays = schedule[5], any_day = schedule[8], any_weekday = schedule[10] }
end

-- ---- the calendar --------------------------------------------------------

-- Days since 1970-01-01 of a date (proleptic Gregorian; Howard Hinnant's
-- days_from_civil), and back.
function M.days_from_civil(year, month, day)
  year = month <= 2 and year - 1 or year
  local era = math.floor(year / 400)
  local year_of_era = year - era * 400
  local day_of_year = math.floor((153 * (month + (month > 2 and -3 or 9)) + 2) / 5) + day - 1
  local day_of_era = year_of_era * 365 + math.floor(year_of_era / 4) - math.floor(year_of_era / 100) + day_of_year
  return era * 146097 + day_of_era - 719468
end

function M.civil_from_days(days)
  days = days + 719468
  local era = math.floor(days / 146097)
  local day_of_era = days - era * 146097
  local year_of_era = math.floor((day_of_era - math.floor(day_of_era / 1460) + math.floor(day_of_era / 36524)
    - math.floor(day_of_era / 146096)) / 365)
  local day_of_year = day_of_era - (365 * year_of_era + math.floor(year_of_era / 4) - math.floor(year_of_era / 100))
  local month_part = math.floor((5 * day_of_year + 2) / 153)
  local day = day_of_year - math.floor((153 * month_part + 2) / 5) + 1
  local month = month_part < 10 and month_part + 3 or month_part - 9
  return year_of_era + era * 400 + (month <= 2 and 1 or 0), month, day
end

-- Whether the schedule runs on day `days` (since 1970-01-01).
local function runs_on(schedule, days)
  local _, month, day = M.civil_from_days(days)
  if not schedule.months[month] then return false end
  local weekday = (days + 4) % 7                        -- 1970-01-01 was a Thursday
  local by_day, by_weekday = schedule.days[day], schedule.weekdays[weekday]
  if schedule.any_day then return by_weekday == true end
  if schedule.any_weekday then return by_day == true end
  return by_day or by_weekday or false
end

-- The first minute the schedule runs at, strictly after `after` (local
-- seconds: seconds since 1970-01-01 00:00 of the local calendar); nil when
-- there is none within SEARCH_YEARS.
function M.next_after(schedule, after)
  local start = math.floor(after / 60) * 60 + 60         -- the next whole minute
  local days = math.floor(start / 86400)
  local first_minute = (start - days * 86400) / 60
  for day = days, days + SEARCH_YEARS * 366 do
    if runs_on(schedule, day) then
      local from = day == days and first_minute or 0
      for minute_of_day = from, 1439 do
        local hour, minute = math.floor(minute_of_day / 60), minute_of_day % 60
        if schedule.hours[hour] and schedule.minutes[minute] then return day * 86400 + minute_of_day * 60 end
      end
    end
  end
  return nil
end

return M
