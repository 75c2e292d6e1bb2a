-- hwt.jobs_client: the adapter, the only code that knows a Redis client.
-- A client is whatever `connect()` returns: hwt.redis or redis-lua (both
-- raise on errors) or lua-resty-redis (returns nil, err). A client whose
-- call failed or timed out is closed, never reused: a reply it still owes
-- would be read as the answer to the next request. Without `release` the
-- queue keeps one idle client for the next call; with it, each call's
-- client is handed back (in OpenResty: `release = function(red)
-- red:set_keepalive(10000, 32) end`, because a cosocket cannot outlive the
-- light thread that made it).
--
-- A failed request is REFUSED when Redis did not run it (no connection,
-- SCRIPT LOAD failed, an error reply), UNKNOWN when it may have run (the
-- connection failed or timed out after sending it; a reply that is not its).
local report = require("hwt.jobs_report").report

local unpack = table.unpack or unpack
local REFUSED, UNKNOWN = "refused", "unknown"

local function close_quietly(client)
  local close = client.close or client.quit
  if close then pcall(close, client) end
end

local function acquire(q)
  local client = q.idle_client
  if client then
    q.idle_client = nil
    return client
  end
  local ok, made, err = pcall(q.connect)
  if not ok then return nil, made end
  if not made then return nil, err or "connect() returned nothing" end
  return made
end

-- A release() that raises costs its client, not the reply it brought.
local function hand_back(q, client)
  if q.release then
    local ok, err = pcall(q.release, client)
    if not ok then
      close_quietly(client)
      report(q, "hwt.jobs: release() raised: " .. tostring(err))
    end
  elseif q.idle_client == nil then
    q.idle_client = client
  else
    close_quietly(client)
  end
end

-- client:command(...) for any of them: the reply; or nil, the error, and
-- true when it is an error reply (Redis answered, with the whole reply:
-- lua-resty-redis returns false, err for it; hwt.redis and redis-lua raise
-- "redis error: ..." for it, and other messages when the connection failed
-- or timed out: hwt.redis "hwt.redis: ...", redis-lua "connection error: ..."
-- and others; after such a failure the client is closed, never reused).
local function call(client, command, ...)
  local ok, reply, err = pcall(client[command], client, ...)
  if not ok then
    local message = tostring(reply)
    return nil, message, message:find("redis error: ", 1, true) ~= nil
  end
  if reply == nil or reply == false then return nil, tostring(err), reply == false end
  return reply
end

local script_shas = {}          -- script -> its SHA1, from SCRIPT LOAD
local SHA1 = "^" .. ("%x"):rep(40) .. "$"

-- The script's SHA1, loaded through `client` the first time; or nil and why.
local function script_sha(client, script)
  if script_shas[script] then return script_shas[script] end
  local sha, err = call(client, "script", "load", script)
  if sha == nil then return nil, err end
  if type(sha) ~= "string" or not sha:match(SHA1) then
    return nil, "a reply that is not SCRIPT LOAD's: " .. tostring(sha)
  end
  script_shas[script] = sha
  return sha
end

local tags = 0                  -- requests tagged by this process

local function new_tag()
  tags = tags + 1
  return ("%.0f"):format(tags)
end

-- The result in a script's reply { tag, result }; or nil and why not.
local function untag(reply, tag)
  if type(reply) == "table" and reply[1] == tag and reply[2] ~= nil then return reply[2] end
  local shown = type(reply) == "table" and "a table, tag " .. tostring(reply[1]) or tostring(reply)
  return nil, "a reply that is not this request's (" .. shown .. ", not tag " .. tag .. ")"
end

-- EVALSHA, so that the script's text crosses the network once per process;
-- EVAL where Redis does not have it (restarted, flushed), which loads it: a
-- NOSCRIPT error reply is the whole reply, so the client is in step. The
-- result; or nil, a message and REFUSED or UNKNOWN.
local function run_script(client, script, args)
  local sha, load_err = script_sha(client, script)
  if not sha then return nil, "SCRIPT LOAD: " .. load_err, REFUSED end
  local reply, err, error_reply = call(client, "evalsha", sha, unpack(args))
  if error_reply and err:find("NOSCRIPT", 1, true) then
    reply, err, error_reply = call(client, "eval", script, unpack(args))
  end
  if reply == nil then return nil, err, error_reply and REFUSED or UNKNOWN end
  local result, mismatch = untag(reply, args[#args])
  if result == nil then return nil, mismatch, UNKNOWN end
  return result
end

-- Runs one script on a client of the queue; returns its result, or nil, a
-- message and REFUSED or UNKNOWN.
local function eval(q, script, keys, ...)
  local client, err = acquire(q)
  if not client then return nil, "redis: cannot connect: " .. tostring(err), REFUSED end
  local args, n = { #keys, unpack(keys) }, #keys + 1
  local extra, count = { ... }, select("#", ...)   -- (select(i, ...) in a loop costs O(n) each)
  for i = 1, count do args[n + i] = extra[i] end
  args[n + count + 1] = new_tag()
  local result, run_err, kind = run_script(client, script, args)
  if result == nil then
    close_quietly(client)
    return nil, "redis: " .. run_err, kind
  end
  hand_back(q, client)
  return result
end

return { eval = eval, REFUSED = REFUSED, UNKNOWN = UNKNOWN }
