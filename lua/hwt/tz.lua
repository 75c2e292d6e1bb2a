-- hwt.tz: IANA time zones from the system's tz database (TZif files, as
-- Debian's tzdata installs them in /usr/share/zoneinfo), for hwt.jobs'
-- recurring jobs: the UTC offset at an instant, and the instant of a local
-- time, with daylight-saving changes. Pure Lua on every Lua: the file's
-- 64-bit transitions, then its POSIX TZ rule (the footer) for the years
-- after the last one.
local M = {}

M.ZONEINFO = "/usr/share/zoneinfo"

local HALF_DAY = 50400          -- seconds, beyond any UTC offset (14 h)

-- ---- TZif ---------------------------------------------------------------

-- A big-endian two's-complement integer of `size` bytes at `pos` (a negative
-- one summed from its complement, so that it stays exact in a double).
local function integer(data, pos, size)
  local negative = data:byte(pos) >= 128
  local value = 0
  for i = pos, pos + size - 1 do
    local byte = data:byte(i)
    value = value * 256 + (negative and 255 - byte or byte)
  end
  return negative and -(value + 1) or value
end

-- The counts of the header at `pos`: isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt.
local function counts(data, pos)
  local c = {}
  for i = 0, 5 do c[i + 1] = integer(data, pos + 20 + 4 * i, 4) end
  return c
end

-- The data block at `pos` with `time_size`-byte times: transitions (UTC
-- seconds), the offset after each, the offsets of its types, and the end.
local function read_block(data, pos, time_size)
  local c = counts(data, pos)
  local isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt = c[1], c[2], c[3], c[4], c[5], c[6]
  local at = pos + 44
  local times = {}
  for i = 1, timecnt do times[i] = integer(data, at + (i - 1) * time_size, time_size) end
  at = at + timecnt * time_size
  local indexes = {}
  for i = 1, timecnt do indexes[i] = data:byte(at + i - 1) end
  at = at + timecnt
  local types = {}
  for i = 0, typecnt - 1 do
    types[i] = { offset = integer(data, at + 6 * i, 4) }
  end
  at = at + 6 * typecnt + charcnt + leapcnt * (time_size + 4) + isstdcnt + isutcnt
  local offsets = {}
  for i = 1, timecnt do offsets[i] = types[indexes[i]].offset end
  -- Before the first transition: time type 0 (RFC 8536, 3.2).
  return { times = times, offsets = offsets, initial = types[0] and types[0].offset or 0 }, at
end

-- ---- POSIX TZ rules (a TZif footer: "EST5EDT,M3.2.0,M11.1.0") ---------------

-- A time "[+-]hh[:mm[:ss]]" at `pos`: seconds and the position after it.
local function clock_time(text, pos)
  local sign, h, rest = text:match("^([+-]?)(%d+)()", pos)
  if not h then return nil end
  local seconds, after = tonumber(h) * 3600, rest
  local m, after_m = text:match("^:(%d+)()", after)
  if m then
    seconds, after = seconds + tonumber(m) * 60, after_m
    local s, after_s = text:match("^:(%d+)()", after)
    if s then seconds, after = seconds + tonumber(s), after_s end
  end
  return sign == "-" and -seconds or seconds, after
end

-- A zone abbreviation ("EST" or "<+0330>") at `pos`: the position after it.
local function skip_name(text, pos)
  return text:match("^<[^>]*>()", pos) or text:match("^%a+()", pos)
end

-- A rule date "Mm.w.d", "Jn" or "n" and its optional "/time" at `pos`.
local function rule_date(text, pos)
  local date = {}
  local m, w, d, after = text:match("^M(%d+)%.(%d)%.(%d)()", pos)
  if m then
    date.kind, date.month, date.week, date.weekday = "M", tonumber(m), tonumber(w), tonumber(d)
  else
    local julian, n, after_n = text:match("^(J?)(%d+)()", pos)
    if not n then return nil end
    date.kind, date.day, after = julian == "J" and "J" or "n", tonumber(n), after_n
  end
  date.time, after = 7200, after or pos
  if text:sub(after, after) == "/" then
    local t, after_t = clock_time(text, after + 1)
    if not t then return nil end
    date.time, after = t, after_t
  end
  return date, after
end

-- The rule of a POSIX TZ string, or nil when it is not one this reads.
local function parse_rule(text)
  local pos = skip_name(text, 1)
  if not pos then return nil end
  local std, after = clock_time(text, pos)
  if not std then return nil end
  local rule = { std = -std }                              -- POSIX offsets count west
  pos = skip_name(text, after)
  if not pos then return after == #text + 1 and rule or nil end
  rule.dst = rule.std + 3600
  local dst, after_dst = clock_time(text, pos)
  if dst then rule.dst, pos = -dst, after_dst end
  if text:sub(pos, pos) ~= "," then return nil end
  local start, after_start = rule_date(text, pos + 1)
  if not start or text:sub(after_start, after_start) ~= "," then return nil end
  local finish, after_finish = rule_date(text, after_start + 1)
  if not finish or after_finish ~= #text + 1 then return nil end
  rule.start, rule.finish = start, finish
  return rule
end

local cron = require("hwt.cron")

-- The local second of the year `year` at which a rule date falls (seconds
-- since 1970-01-01 of the local calendar).
local function rule_local_time(date, year)
  local days
  if date.kind == "M" then
    local first = cron.days_from_civil(year, date.month, 1)
    local first_weekday = (first + 4) % 7
    days = first + (date.weekday - first_weekday) % 7 + (date.week - 1) * 7
    local next_month = cron.days_from_civil(date.month == 12 and year + 1 or year, date.month % 12 + 1, 1)
    while days >= next_month do days = days - 7 end      -- week 5: the last such day
  elseif date.kind == "J" then                           -- 1..365, February 29 never counted
    days = cron.days_from_civil(year, 1, 1) + date.day - 1
    local leap = cron.days_from_civil(year, 3, 1) - cron.days_from_civil(year, 2, 1) == 29
    if leap and date.day >= 60 then days = days + 1 end
  else                                                   -- 0..365, February 29 counted
    days = cron.days_from_civil(year, 1, 1) + date.day
  end
  return days * 86400 + date.time
end

-- The offset a rule gives at UTC second `utc`.
local function rule_offset(rule, utc)
  if not rule.start then return rule.std end
  local year = cron.civil_from_days(math.floor((utc + rule.std) / 86400))
  local starts = rule_local_time(rule.start, year) - rule.std      -- UTC: the change is in standard time
  local ends = rule_local_time(rule.finish, year) - rule.dst       -- UTC: it ends in daylight time
  local in_dst
  if starts < ends then in_dst = utc >= starts and utc < ends
  else in_dst = utc >= starts or utc < ends end                    -- the southern hemisphere
  return in_dst and rule.dst or rule.std
end

-- ---- zones ----------------------------------------------------------------

local Zone = {}
Zone.__index = Zone

-- The UTC offset (seconds east) at UTC second `utc`.
function Zone:offset_at(utc)
  local times = self.times
  local n = #times
  if self.rule and (n == 0 or utc >= times[n]) then return rule_offset(self.rule, utc) end
  if n == 0 or utc < times[1] then return self.initial end
  local low, high = 1, n                                 -- the last transition at or before utc
  while low < high do
    local mid = math.floor((low + high + 1) / 2)
    if times[mid] <= utc then low = mid else high = mid - 1 end
  end
  return self.offsets[low]
end

-- The UTC second of local second `local_time` (seconds since 1970-01-01 of
-- the local calendar). A local time that happens twice (clocks go back)
-- gives the first; one that does not exist (clocks go forward) gives the
-- instant the gap ends, the first local time after it.
function Zone:utc_of(local_time)
  local best
  local offsets = { self:offset_at(local_time - HALF_DAY), self:offset_at(local_time),
                    self:offset_at(local_time + HALF_DAY) }
  for _, offset in ipairs(offsets) do
    local utc = local_time - offset
    if self:offset_at(utc) == offset and (not best or utc < best) then best = utc end
  end
  if best then return best end
  -- In a gap: the change lies between the instants the offsets before and
  -- after it would give; find it to the second.
  local before, after = offsets[1], offsets[3]
  local low, high = local_time - math.max(before, after), local_time - math.min(before, after)
  while high - low > 1 do
    local mid = math.floor((low + high) / 2)
    if self:offset_at(mid) == before then low = mid else high = mid end
  end
  return high
end

local cache = {}

-- The zone `name` ("UTC", "Europe/Paris"), or nil and why not.
function M.zone(name)
  if type(name) ~= "string" or not name:match("^[%w_+-]+[%w_+/-]*$") or name:find("..", 1, true) then
    return nil, ("%s is not a time zone name"):format(tostring(name))
  end
  if cache[name] then return cache[name] end
  local file = io.open(M.ZONEINFO .. "/" .. name, "rb")
  if not file then return nil, ("unknown time zone %q (no %s/%s)"):format(name, M.ZONEINFO, name) end
  local data = file:read("*a")
  file:close()
  if data:sub(1, 4) ~= "TZif" then return nil, ("%s/%s is not a TZif file"):format(M.ZONEINFO, name) end
  local block, after = read_block(data, 1, 4)
  local rule
  if data:sub(5, 5) >= "2" then
    block, after = read_block(data, after, 8)
    local footer = data:match("^\n([^\n]*)\n", after)
    rule = footer and footer ~= "" and parse_rule(footer) or nil
  end
  local zone = setmetatable({ name = name, times = block.times, offsets = block.offsets,
                              initial = block.initial, rule = rule }, Zone)
  cache[name] = zone
  return zone
end

return M
