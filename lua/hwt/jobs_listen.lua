-- hwt.jobs_listen: how an idle worker hears, at once, of a job that falls
-- due before every job it knows of. The scripts that write a due time
-- publish how long until that job is due on the queue's channel "{key}:wake"
-- when it falls due before every other (hwt.jobs_scripts' WAKE); a listener
-- is a connection SUBSCRIBEd to that channel, and each message arms the
-- worker's wake for the job. It costs Redis nothing while idle, so a
-- listening worker's idle rounds (the safety net: a message lost with its
-- connection) come every LISTENING_POLL_INTERVAL seconds at most often.
--
-- A listener reads from the socket of a client its queue's connect() made,
-- used for nothing else:
--   hwt.redis (its client has getfd() and dirty(), as a LuaSocket socket
--     has): subscribed with send(), its messages taken with ready_replies(),
--     which never waits;
--   redis-lua (a LuaSocket socket, client.network.socket): subscribed with a
--     command written on the socket, its messages read without blocking;
-- either when the socket is readable: in q:run_for() (a plain Lua worker,
-- which waits for the socket and the timer together), or where the timer's
-- host driver watches the socket (hooks.watch: hwt.luv, hwt.cqueues);
--   lua-resty-redis (subscribe, read_reply): in a light thread of its own
--     (hooks.thread: hwt.ngx), as nginx's cosockets need.
-- A listener that fails (its connection closed, Redis gone) is dropped; the
-- worker's next round starts another, and asks Redis at once when it does,
-- for what it may have missed.
local M = {}

-- Seconds between the idle rounds of a worker that listens (its
-- poll_interval, when that is longer).
M.LISTENING_POLL_INTERVAL = 2

local SUBSCRIBE_TIMEOUT = 1    -- seconds to wait for SUBSCRIBE's confirmation
local UNSELECTABLE_WAIT = 0.001 -- seconds between reads for it when select() cannot take the socket
local READ_SIZE = 4096

-- ---- RESP, the replies a subscribed connection gets ----------------------

-- One RESP value of `buffer` at `pos`: the value (an array is a table) and
-- the position after it; nil when the buffer ends first; false and why
-- for bytes that are not RESP.
local function parse(buffer, pos)
  local line_end = buffer:find("\r\n", pos, true)
  if not line_end then return nil end
  local kind, line = buffer:sub(pos, pos), buffer:sub(pos + 1, line_end - 1)
  local after = line_end + 2
  if kind == "+" or kind == "-" then return line, after end
  if kind == ":" then return tonumber(line), after end
  local n = tonumber(line)
  if not n then return false, "not RESP: " .. kind .. line end
  if kind == "$" then
    if n < 0 then return "", after end
    if #buffer < after + n + 1 then return nil end
    return buffer:sub(after, after + n - 1), after + n + 2
  end
  if kind ~= "*" then return false, "not RESP: " .. kind .. line end
  local array = {}
  for i = 1, n do
    local value, next_pos = parse(buffer, after)
    if not value then return value, next_pos end
    array[i], after = value, next_pos
  end
  return array, after
end

-- The whole values at the start of `buffer`, and what is left of it; or
-- nil and why.
function M.values(buffer)
  local values, pos = {}, 1
  while pos <= #buffer do
    local value, next_pos = parse(buffer, pos)
    if value == false then return nil, next_pos end
    if value == nil then break end
    values[#values + 1], pos = value, next_pos
  end
  return values, buffer:sub(pos)
end

-- A SUBSCRIBE command in RESP.
local function subscribe_command(channel)
  return ("*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n"):format(#channel, channel)
end

-- ---- a listener ----------------------------------------------------------

local Listener = {}
Listener.__index = Listener

local function close_quietly(client)
  local close = client.close or client.quit
  if close then pcall(close, client) end
end

-- The messages of the channel in `values`: each the seconds until the job
-- it announces is due.
local function heard(listener, values)
  for _, value in ipairs(values) do
    if type(value) == "table" and value[1] == "message" and value[2] == listener.channel then
      local in_us = tonumber(value[3])
      if in_us then listener.on_message(in_us / 1e6) end
    end
  end
end

-- What Redis said last, when it closed the connection (e.g. ": ERR max
-- number of clients reached"), or "".
local function last_words(buffer)
  local values = M.values(buffer)
  local first = values and values[1]
  if type(first) == "table" then first = first[1] end
  return first ~= nil and ": " .. tostring(first) or ""
end

-- The whole replies that have come on a redis-lua client's LuaSocket
-- socket (it never blocks); nil and why when the connection is gone.
local function socket_replies(listener)
  local socket = listener.socket
  repeat
    local data, err, partial = socket:receive(READ_SIZE)
    local chunk = data or partial
    if chunk and chunk ~= "" then listener.buffer = listener.buffer .. chunk end
    if err == "closed" then return nil, "the connection closed" .. last_words(listener.buffer) end
  until not data
  local values, rest = M.values(listener.buffer)
  if not values then return nil, rest end
  listener.buffer = rest
  return values
end

-- The same from an hwt.redis client: its ready_replies() never waits.
local function client_replies(listener)
  local ok, values = pcall(listener.client.ready_replies, listener.client)
  if not ok then return nil, tostring(values) end
  return values
end

-- Reads what has come (it never blocks) and passes on the messages; false
-- when the connection is gone.
function Listener:read()
  if self.closed or not self.socket then return false end
  local values = self:replies()
  if not values then
    self:close()
    return false
  end
  heard(self, values)
  return true
end

function Listener:close()
  if self.closed then return end
  self.closed = true
  if self.stop_watching then pcall(self.stop_watching) end
  if self.client then close_quietly(self.client) end
  self.socket, self.client = nil, nil
end

function Listener:is_open() return not self.closed end

-- SUBSCRIBE to the listener's channel, on a redis-lua client's socket or
-- through an hwt.redis client: true, or false and why.
local function socket_subscribe(listener)
  local socket = listener.socket
  socket:settimeout(SUBSCRIBE_TIMEOUT)
  local sent, err = socket:send(subscribe_command(listener.channel))
  socket:settimeout(0)                                 -- reads take what has come
  return sent ~= nil, err
end

local function client_subscribe(listener)
  return pcall(listener.client.send, listener.client, "SUBSCRIBE", listener.channel)
end

-- The listener of `client` on `channel`: `socket` is what it waits on
-- (anything with getfd(), for socket.select and the hosts' watch); or nil
-- and why the client cannot listen.
local function listener_of(client, channel)
  local hiredis = package.loaded["hwt.redis"]
  if hiredis and hiredis.is_client(client) then
    return setmetatable({ client = client, socket = client, channel = channel,
                          replies = client_replies, subscribe = client_subscribe }, Listener)
  end
  local socket = type(client) == "table" and type(client.network) == "table" and client.network.socket
  if type(socket) ~= "userdata" or not socket.getfd then
    return nil, "the client is neither hwt.redis nor redis-lua (a LuaSocket socket, client.network.socket) to listen on"
  end
  return setmetatable({ client = client, socket = socket, channel = channel, buffer = "",
                        replies = socket_replies, subscribe = socket_subscribe }, Listener)
end

-- Waits up to SUBSCRIBE_TIMEOUT for SUBSCRIBE's confirmation (*3 subscribe
-- <channel> <count>), the first reply; what comes with it is left to the
-- round that follows, which asks Redis. True, or false and why.
local function confirmed(listener)
  local select, gettime, sleep = require("socket").select, require("socket").gettime, require("socket").sleep
  local give_up = gettime() + SUBSCRIBE_TIMEOUT
  while true do
    local values, err = listener:replies()
    if not values then return false, err end
    local first = values[1]
    if type(first) == "table" and first[1] == "subscribe" then return true end
    if first ~= nil then return false, "a reply that is not its confirmation: " .. tostring(first) end
    local left = give_up - gettime()
    if left <= 0 then return false, "no confirmation within " .. SUBSCRIBE_TIMEOUT .. " s" end
    if not pcall(select, { listener.socket }, nil, left) then
      sleep(math.min(left, UNSELECTABLE_WAIT))   -- a descriptor past select()'s set: wait a little
    end
  end
end

-- A connection of the queue subscribed to `channel`: the listener; or nil
-- and why not.
local function subscribe(connect, channel)
  local ok, client, err = pcall(connect)
  if not ok or not client then return nil, "cannot connect: " .. tostring(ok and err or client) end
  local listener, unfit = listener_of(client, channel)
  if not listener then
    close_quietly(client)
    return nil, unfit
  end
  local subscribed, why = listener:subscribe()
  if subscribed then subscribed, why = confirmed(listener) end
  if not subscribed then
    listener:close()
    return nil, "SUBSCRIBE: " .. tostring(why)
  end
  return listener
end

-- ---- per host --------------------------------------------------------------

-- A listener for q, read by whoever watches its socket; nil and why not.
-- on_message(seconds) is called for each message.
function M.open_socket(q, on_message)
  local listener, err = subscribe(q.connect, q.keys.wake_channel)
  if not listener then return nil, err end
  listener.on_message = on_message
  return listener
end

-- Starts a listener for q where the timer's host watches sockets or runs
-- light threads (`hooks`, the driver's); nil and why not.
function M.open_hosted(q, hooks, on_message)
  if hooks.watch then
    local listener, err = M.open_socket(q, on_message)
    if not listener then return nil, err end
    local ok, stop = pcall(hooks.watch, listener.socket, function() listener:read() end)
    if not ok or not stop then
      listener:close()
      return nil, "the host cannot watch the socket: " .. tostring(stop)
    end
    listener.stop_watching = stop
    return listener
  end
  if hooks.thread then return M.open_thread(q, hooks, on_message) end
  return nil, "the timer's host cannot listen"
end

-- A listener in a light thread of the host's (hooks.thread: lua-resty-redis'
-- subscribe, then read_reply in a loop), which the host ends when the
-- listener closes or the host shuts down. Its reads wait as long as the
-- host lets them: a read timeout is no failure, but nginx logs each one.
local LONGEST_READ_MS = 2 ^ 31 - 1
function M.open_thread(q, hooks, on_message)
  local listener = setmetatable({ channel = q.keys.wake_channel, buffer = "", on_message = on_message }, Listener)
  local function listen()
    local ok, client = pcall(q.connect)
    if not ok or type(client) ~= "table" or type(client.read_reply) ~= "function" then return listener:close() end
    if client.set_timeout then client:set_timeout(LONGEST_READ_MS) end
    if not client:subscribe(listener.channel) then return listener:close() end
    while not listener.closed do
      local reply, read_err = client:read_reply()
      if reply then
        heard(listener, { reply })
      elseif read_err ~= "timeout" then
        return listener:close()
      end
    end
  end
  local ok, stop = pcall(hooks.thread, listen)
  if not ok then return nil, "cannot start the listener's thread: " .. tostring(stop) end
  listener.stop_watching = stop
  return listener
end

return M
