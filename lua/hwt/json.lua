-- hwt.json: the JSON of hwt.jobs' payloads. It writes what lua-cjson reads
-- back equal, and refuses the rest, naming where in the value it is
-- ("payload.retry.delay is nan ...").
--
-- lua-cjson writes numbers with at most 14 significant digits (Debian 12's
-- 2.1.0 allows no more), which changes ordinary doubles: 1 + 14*0.05 is
-- 1.7000000000000002. Here each number gets the fewest digits, up to 17,
-- that read back as the same double. Strings go through lua-cjson's own
-- encoder, and everything is read with lua-cjson's decoder.
local cjson = require("cjson")

local M = {}

local codec = cjson.new and cjson.new() or cjson   -- a private instance: settings stay as set here
local huge = math.huge
local math_type = math.type or function() return "float" end
local tointeger = math.tointeger or function() return nil end

-- lua-cjson's decoder refuses JSON nested deeper than this.
M.MAX_DEPTH = 1000

-- Each tried in turn: the first whose text reads back as the number. %.15g
-- gives back every double that 15 digits can; %.17g every double.
local NUMBER_FORMATS = { "%.15g", "%.16g", "%.17g" }

-- Where a value sits, for messages: path .. ".key", or path .. "[3]".
local function child_path(path, key)
  if type(key) == "string" and key:match("^[%a_][%w_]*$") then return path .. "." .. key end
  if type(key) == "string" then return ("%s[%q]"):format(path, key) end
  return ("%s[%s]"):format(path, tostring(key))
end

-- The JSON text of a number, or nil and why not.
local function number_text(number)
  if number ~= number or number == huge or number == -huge then
    return nil, "is " .. (number ~= number and "nan" or tostring(number)) .. ": JSON has no NaN or infinity"
  end
  if math_type(number) == "integer" then
    -- lua-cjson reads every number as a double: an integer that no double
    -- equals would come back changed.
    if number + 0.0 ~= number then
      return nil, "is " .. tostring(number) .. ": beyond 2^53, JSON would give another number back "
        .. "(send it as a string)"
    end
    return ("%d"):format(number)
  end
  for _, format in ipairs(NUMBER_FORMATS) do
    local text = format:format(number)
    if tonumber(text) == number then return text end
  end
end

-- "array" (keys 1..n, n >= 1) or "object" (string keys, or none); or nil and why not.
local function table_kind(t)
  local count, strings, max_index = 0, 0, 0
  for key in next, t do
    count = count + 1
    if type(key) == "string" then
      strings = strings + 1
    elseif type(key) == "number" and key >= 1 and key % 1 == 0 and key < huge then
      if key > max_index then max_index = key end
    else
      return nil, "has the key " .. tostring(key) .. ": a JSON object's keys are strings, an array's 1..n"
    end
  end
  if strings == count then return "object" end
  if strings > 0 then return nil, "has both string and number keys: JSON has no such table" end
  if max_index == count then return "array" end
  local hole = 1
  while t[hole] ~= nil do hole = hole + 1 end
  return nil, ("is an array with a hole at [%d]: JSON would give null back there"):format(hole)
end

-- A refusal found under a value: why, and the keys from that value down to
-- the refused part (filled in as write() returns through each level, so
-- that a value written whole costs no path).
local function refusal(why) return { why = why, keys = {} } end

local TOO_DEEP = {}             -- write's refusal when tables nest too deep: M.encode words it

local function under(key, failed)
  if failed ~= TOO_DEEP then table.insert(failed.keys, 1, key) end
  return failed
end

local write

local function write_table(out, t, depth, ancestors)
  if ancestors[t] then return refusal("contains itself") end
  if depth > M.MAX_DEPTH then return TOO_DEEP end
  local kind, why = table_kind(t)
  if not kind then return refusal(why) end
  ancestors[t] = true
  local failed
  if kind == "array" then
    out[#out + 1] = "["
    for i = 1, #t do
      if i > 1 then out[#out + 1] = "," end
      failed = write(out, t[i], depth + 1, ancestors)
      if failed then failed = under(i, failed) break end
    end
    out[#out + 1] = "]"
  else
    out[#out + 1] = "{"
    local first = true
    for key, value in next, t do
      out[#out + 1] = (first and "" or ",") .. codec.encode(key) .. ":"
      first = false
      failed = write(out, value, depth + 1, ancestors)
      if failed then failed = under(key, failed) break end
    end
    out[#out + 1] = "}"
  end
  ancestors[t] = nil
  return failed
end

-- Appends the JSON of `value` to `out`; returns nil, TOO_DEEP, or a refusal.
function write(out, value, depth, ancestors)
  local kind = type(value)
  if kind == "table" then return write_table(out, value, depth, ancestors) end
  if kind == "string" then
    out[#out + 1] = codec.encode(value)
  elseif kind == "number" then
    local text, why = number_text(value)
    if not text then return refusal(why) end
    out[#out + 1] = text
  elseif kind == "boolean" then
    out[#out + 1] = tostring(value)
  elseif value == codec.null then
    out[#out + 1] = "null"
  else
    return refusal("is a " .. kind .. ", which JSON cannot hold")
  end
end

-- The JSON text of `value`; or nil and why not, naming the part by its
-- place under `path` (e.g. "payload"). `depth`: the levels of JSON around it.
function M.encode(value, path, depth)
  local out = {}
  local failed = write(out, value, (depth or 0) + 1, {})
  if failed == TOO_DEEP then
    return nil, ("%s is nested too deep: lua-cjson reads %d levels of JSON at most"):format(path, M.MAX_DEPTH)
  end
  if failed then
    for _, key in ipairs(failed.keys) do path = child_path(path, key) end
    return nil, path .. " " .. failed.why
  end
  return table.concat(out)
end

-- The JSON text of a value that holds no number (strings, tables of them):
-- lua-cjson's own encoder, which only numbers would make unfaithful.
function M.encode_strings(value) return codec.encode(value) end

-- Integral numbers come back as integers on Lua 5.3 and later.
local function integers(value)
  if type(value) == "table" then
    for key, field in pairs(value) do value[key] = integers(field) end
    return value
  end
  return type(value) == "number" and tointeger(value) or value
end

-- The value of a JSON text; or nil and why not.
function M.decode(text)
  local ok, value = pcall(codec.decode, text)
  if not ok then return nil, tostring(value) end
  return integers(value)
end

return M
