-- hwt.cron (five-field cron expressions), hwt.tz (the system's tz database)
-- and hwt.jobs_every (the next occurrence of a recurring job), without
-- Redis: offsets against the system's `date`, and the daylight-saving days
-- of New York, London and Sydney.
local cron = require("hwt.cron")
local tz = require("hwt.tz")
local every = require("hwt.jobs_every")

-- Unix seconds of a UTC date and time.
local function utc(year, month, day, hour, minute)
  return cron.days_from_civil(year, month, day) * 86400 + (hour or 0) * 3600 + (minute or 0) * 60
end

-- The offsets `date` gives for zone `name` at the Unix seconds `times`:
-- one date process (without the sanitizer runtimes an ASan run preloads).
local function date_offsets(name, times)
  local inputs = {}
  for i, t in ipairs(times) do inputs[i] = "@" .. t end
  local pipe = assert(io.popen(("unset LD_PRELOAD; printf '%s\\n' | TZ=%s date -f - +%%z")
    :format(table.concat(inputs, "\\n"), name)))
  local offsets = {}
  for z in pipe:lines() do
    local sign, hours, minutes = z:match("^([+-])(%d%d)(%d%d)$")
    local offset = tonumber(hours) * 3600 + tonumber(minutes) * 60
    offsets[#offsets + 1] = sign == "-" and -offset or offset
  end
  pipe:close()
  return offsets
end

describe("hwt.cron", function()
  it("reads the five fields: lists, ranges, steps, names, Sunday as 0 or 7", function()
    local s = assert(cron.parse("*/15 9-17 1,15 jan-mar MON-fri"))
    assert.is_true(s.minutes[0] and s.minutes[45] and not s.minutes[50])
    assert.is_true(s.hours[9] and s.hours[17] and not s.hours[18])
    assert.is_true(s.days[15] and not s.days[2])
    assert.is_true(s.months[3] and not s.months[4])
    assert.is_true(s.weekdays[1] and s.weekdays[5] and not s.weekdays[6])
    assert.is_true(assert(cron.parse("0 0 * * 7")).weekdays[0])
    assert.is_true(assert(cron.parse("5/20 * * * *")).minutes[45])
  end)

  it("refuses what is not a cron expression, saying why", function()
    for expression, why in pairs({
      ["* * * *"] = "4 fields, not 5", ["60 * * * *"] = "out of the minute's range 0-59",
      ["* 24 * * *"] = "out of the hour's range", ["* * 0 * *"] = "out of the day of month's range",
      ["* * * 13 *"] = "out of the month's range", ["* * * * 8"] = "out of the day of week's range",
      ["*/0 * * * *"] = "a step of 0", ["1,,2 * * * *"] = "an empty item", ["5-1 * * * *"] = "out of",
      ["x * * * *"] = "is not a minute", ["* * * foo *"] = "is not a month",
    }) do
      local schedule, message = cron.parse(expression)
      assert.is_nil(schedule, expression)
      assert.is_truthy(message:find(why, 1, true), expression .. ": " .. tostring(message))
    end
    assert.is_nil((cron.parse(5)))
  end)

  it("finds the next minute strictly after a time, a day of the month or of the week when both are set", function()
    local every_quarter = assert(cron.parse("*/15 * * * *"))
    assert.equals(utc(2026, 1, 1, 0, 15), cron.next_after(every_quarter, utc(2026, 1, 1, 0, 0)))
    assert.equals(utc(2026, 1, 1, 0, 15), cron.next_after(every_quarter, utc(2026, 1, 1, 0, 0) + 59))
    local leap_day = assert(cron.parse("0 12 29 2 *"))
    assert.equals(utc(2028, 2, 29, 12), cron.next_after(leap_day, utc(2026, 3, 1)))
    -- Both restricted: the 13th or a Friday (2026-02-06 is a Friday).
    local either = assert(cron.parse("0 0 13 * fri"))
    assert.equals(utc(2026, 2, 6), cron.next_after(either, utc(2026, 2, 1)))
    assert.equals(utc(2026, 2, 13), cron.next_after(either, utc(2026, 2, 6)))
    -- "*/2" in the day field counts as "*": the weekday alone decides.
    local weekday_only = assert(cron.parse("0 0 */2 * mon"))
    assert.equals(utc(2026, 2, 2), cron.next_after(weekday_only, utc(2026, 2, 1)))
    assert.is_nil(cron.next_after(assert(cron.parse("0 0 31 2 *")), utc(2026, 1, 1)))   -- never
  end)

  it("counts days as the Gregorian calendar does", function()
    for _, date in ipairs({ { 1970, 1, 1 }, { 2000, 2, 29 }, { 2026, 12, 31 }, { 2100, 3, 1 }, { 1900, 2, 28 } }) do
      local days = cron.days_from_civil(date[1], date[2], date[3])
      assert.same(date, { cron.civil_from_days(days) })
    end
    assert.equals(0, cron.days_from_civil(1970, 1, 1))
    assert.equals(11017, cron.days_from_civil(2000, 3, 1))
  end)
end)

describe("hwt.tz", function()
  it("gives the offsets the system's date gives, also past the file's last transition", function()
    for _, name in ipairs({ "America/New_York", "Europe/London", "Australia/Sydney", "Asia/Kolkata", "UTC" }) do
      local zone = assert(tz.zone(name))
      local times = {}
      for t = utc(2025, 1, 1), utc(2045, 1, 1), 86400 * 37 + 3607 do times[#times + 1] = t end
      local expected = date_offsets(name, times)
      assert.equals(#times, #expected)
      for i, t in ipairs(times) do
        assert.equals(expected[i], zone:offset_at(t), name .. " at " .. t)
      end
    end
  end)

  it("maps a local time to its instant: the first of a repeated one, the end of the gap for a missing one", function()
    local zone = assert(tz.zone("America/New_York"))
    local function local_of(year, month, day, hour, minute) return utc(year, month, day, hour, minute) end
    assert.equals(utc(2026, 7, 1, 16), zone:utc_of(local_of(2026, 7, 1, 12)))          -- EDT, UTC-4
    assert.equals(utc(2026, 3, 8, 7), zone:utc_of(local_of(2026, 3, 8, 2, 30)))        -- 02:30 missing: 03:00 EDT
    assert.equals(utc(2026, 11, 1, 5, 30), zone:utc_of(local_of(2026, 11, 1, 1, 30)))  -- 01:30 twice: the EDT one
  end)

  it("refuses an unknown zone or a name that is a path", function()
    assert.matches("unknown time zone", select(2, tz.zone("Mars/Olympus_Mons")))
    assert.matches("is not a time zone name", select(2, tz.zone("../etc/passwd")))
    assert.matches("is not a time zone name", select(2, tz.zone("/etc/localtime")))
  end)
end)

describe("hwt.jobs_every", function()
  it("runs a cron job at its local time across daylight-saving changes", function()
    local daily = assert(every.schedule_of("30 2 * * *", "America/New_York"))
    assert.equals(utc(2026, 3, 7, 7, 30), every.next_after(daily, utc(2026, 3, 7), 0))   -- 02:30 EST
    assert.equals(utc(2026, 3, 8, 7), every.next_after(daily, utc(2026, 3, 7, 8), 0))    -- missing: 03:00 EDT
    assert.equals(utc(2026, 3, 9, 6, 30), every.next_after(daily, utc(2026, 3, 8, 7), 0)) -- 02:30 EDT
    local night = assert(every.schedule_of("30 1 * * *", "America/New_York"))
    local first = every.next_after(night, utc(2026, 11, 1), 0)
    assert.equals(utc(2026, 11, 1, 5, 30), first)                                        -- 01:30 EDT
    assert.equals(utc(2026, 11, 2, 6, 30), every.next_after(night, first, 0))            -- not 01:30 EST again
    local london = assert(every.schedule_of("0 9 * * mon-fri", "Europe/London"))
    assert.equals(utc(2026, 3, 30, 8), every.next_after(london, utc(2026, 3, 27, 9), 0)) -- BST from the 29th
  end)

  it("collapses missed occurrences into the next one after now, on an interval's grid too", function()
    local hourly = assert(every.schedule_of("0 * * * *"))
    assert.equals(utc(2026, 5, 1, 13), every.next_after(hourly, utc(2026, 5, 1, 12, 40), utc(2026, 5, 1, 3)))
    local ten = assert(every.schedule_of(10))
    assert.equals(1070, every.next_after(ten, 1065, 1000))       -- the grid of 1000, after 1065
    assert.equals(1010, every.next_after(ten, 999, 1000))        -- never before the next beat
  end)

  it("refuses a bad schedule or zone, saying why", function()
    assert.matches("finite number of seconds > 0", select(2, every.schedule_of(0)))
    assert.matches("finite number of seconds > 0", select(2, every.schedule_of(math.huge)))
    assert.matches("4 fields", select(2, every.schedule_of("* * * *")))
    assert.matches("unknown time zone", select(2, every.schedule_of("* * * * *", "Nowhere/City")))
    assert.matches("expected, got table", select(2, every.schedule_of({})))
  end)
end)
