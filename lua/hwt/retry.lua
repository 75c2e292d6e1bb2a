-- hwt.retry: hwt.retry(timer, fn, opts), a call retried with backoff.
local core = require("hwt.core")
local checks = require("hwt.checks")
local backoff = require("hwt.backoff")
local stop = require("hwt.stop")

local M = {}

local unpack = table.unpack or unpack
local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local report_error = core.internal.report_error
local type_name, is_callable, is_timer = checks.type_name, checks.is_callable, checks.is_timer
local backoff_options, backoff_wait = backoff.options, backoff.wait
local is_stopped, on_stop, calling = stop.stopped, stop.on_stop, stop.calling

local RETRY_CALLBACKS = { on_give_up = true, on_success = true, on_retry = true, random = true }

local function bad_retry_option(key, message)
  error(("bad option '%s' to 'retry' (%s)"):format(key, message), 5)
end

local function check_retry_options(opts)
  local o = backoff_options(opts, bad_retry_option)
  for key, value in pairs(opts) do
    if RETRY_CALLBACKS[key] then
      if type(value) ~= "function" then
        error(("bad option '%s' to 'retry' (function expected, got %s)"):format(key, type(value)), 3)
      end
      o[key] = value
    elseif o[key] == nil then
      error(("bad argument #3 to 'retry' (unknown option '%s')"):format(tostring(key)), 3)
    end
  end
  return o
end

local RetryHandle = {}
RetryHandle.__index = RetryHandle

-- Stops further tries; true if a try was still to come.
function RetryHandle:cancel()
  if self.done then return false end
  self.done = true
  if self.pending and self.pending:cancel() then on_stop[self.pending] = nil end
  self.pending = nil
  return true
end

-- hwt.retry(timer, fn, opts): calls fn(attempt, handle) now; on failure (an
-- error, or a nil/false first result) calls it again after a growing delay
-- (the backoff rules are hwt.backoff's, shared with hwt.jobs). A stop of the
-- timer gives the retry up (hwt.stop's hooks).
function M.retry(timer, fn, opts)
  if not is_timer(timer) then
    error("bad argument #1 to 'retry' (hwt.Timer expected)", 2)
  end
  if not is_callable(fn) then
    error("bad argument #2 to 'retry' (function or callable expected, got " .. type_name(fn) .. ")", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("bad argument #3 to 'retry' (table expected, got " .. type(opts) .. ")", 2)
  end
  local o = check_retry_options(opts or {})
  local handle = setmetatable({ attempts = 0, done = false }, RetryHandle)

  -- Without on_give_up, the error goes where task errors go: a retry that
  -- fails for good is never silent. A stop is the program's own doing.
  local function give_up(err, by_stop)
    handle.done = true
    if o.on_give_up then
      o.on_give_up(err)
    elseif not by_stop then
      report_error(timer, err)
    end
  end
  handle._give_up = function(err) give_up(err, true) end

  local attempt
  local function try_again(t)
    on_stop[t] = nil
    handle.pending = nil
    attempt()
  end
  local function stopped_while_waiting()
    handle.pending = nil
    give_up("timer is stopped", true)
  end

  function attempt()
    if handle.done then return end
    handle.attempts = handle.attempts + 1
    handle._calling_co = coroutine.running()
    calling[handle] = timer
    local results = pack(pcall(fn, handle.attempts, handle))
    calling[handle] = nil
    if handle.done then return end            -- fn cancelled the handle, or a stop gave up
    if results[1] and results[2] then
      handle.done = true
      if o.on_success then o.on_success(unpack(results, 2, results.n)) end
      return
    end
    local err = results[1] and results[3] or results[2]
    if is_stopped(timer) then return give_up("timer is stopped", true) end
    if handle.attempts > o.retries then return give_up(err) end
    local wait = backoff_wait(o, handle.attempts)
    if o.on_retry then
      o.on_retry(err, handle.attempts, wait)
      if handle.done then return end            -- on_retry cancelled it
    end
    -- The timer may have stopped since fn returned (on_retry stopped it), or
    -- stop inside timeout() (a finalizer): timeout() then raises, or arms the
    -- try and ends it before on_stop knows it. Either way, the retry gives
    -- up as any other that the stop finds.
    local armed, t, refusal = pcall(timer.timeout, timer, wait, try_again)
    if handle.done then                        -- cancelled while arming (the on_earlier watcher)
      if armed and t then t:cancel() end
      return
    end
    if is_stopped(timer) then return give_up("timer is stopped", true) end
    if not armed then return give_up(t) end
    if not t then return give_up(refusal) end
    handle.pending = t
    on_stop[t] = stopped_while_waiting
  end

  attempt()
  return handle
end

return M
