-- hwt.jobs_format: how hwt.jobs writes a job for Redis: its name and
-- payload as JSON, its times as whole microseconds.
local M = {}

M.MICRO = 1e6

-- Seconds as a whole number of microseconds, written out in full (tostring
-- would give "1e+14" on Lua 5.1).
function M.micro(seconds) return ("%.0f"):format(math.ceil(seconds * M.MICRO)) end

-- { "name": ..., "payload": ... } through hwt.json: a payload comes back
-- equal, every number included, or schedule() refuses it.

local function encode(codec, name, payload)
  local fields = '{"name":' .. codec.encode(name, "name")
  if payload == nil then return fields .. "}" end
  local json, why = codec.encode(payload, "payload", 1)
  if not json then return nil, why end
  return fields .. ',"payload":' .. json .. "}"
end

local function decode(codec, json)
  local job, why = codec.decode(json)
  if type(job) ~= "table" or type(job.name) ~= "string" then
    return nil, "malformed job: " .. (job == nil and why or "no name")
  end
  return job.name, job.payload
end

M.encode, M.decode = encode, decode
return M
