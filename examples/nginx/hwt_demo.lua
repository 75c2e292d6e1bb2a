-- hwt_demo: hwt timeouts inside an nginx worker (lua-nginx-module).
--
-- One hwt timer per worker, created in init_worker_by_lua (never in
-- init_by_lua: see README.md next to this file), drained every 10 ms by one
-- ngx.timer.every. Every hwt timeout lives in this worker's Lua VM, so the
-- request handlers below (which run in the same worker: worker_processes 1)
-- see the same module table.
local hwt = require("hwt")

local M = {
  timer = nil,     -- the worker's hwt timer
  fired = {},      -- ids of the timeouts that ran, in order
  timeouts = {},   -- id -> Timeout, for /cancel
  bulk_timeouts = {},  -- Timeouts made by /bulk, for /cancel_all
}

local POLL_INTERVAL = 0.01

-- init_worker_by_lua_block { require("hwt_demo").init_worker() }
function M.init_worker()
  if M.timer then return end
  M.timer = hwt.new({
    tick = 0.01,
    -- A task that raises must not go to the worker's stderr unnoticed.
    on_error = function(err) ngx.log(ngx.ERR, "hwt task failed: ", tostring(err)) end,
  })
  local ok, err = ngx.timer.every(POLL_INTERVAL, function(premature)
    if premature then return end    -- worker exiting
    M.timer:poll()                  -- runs what is due, here, in this worker
  end)
  if not ok then
    ngx.log(ngx.ERR, "hwt_demo: cannot start the poll timer: ", err)
  end
end

local function on_fire(_, id)
  M.timeouts[id] = nil
  M.fired[#M.fired + 1] = id
  ngx.log(ngx.INFO, "hwt_demo: fired ", id)
end

local function bad_request(message)
  ngx.status = ngx.HTTP_BAD_REQUEST
  ngx.say(message)
  return ngx.exit(ngx.HTTP_BAD_REQUEST)
end

-- GET /schedule?id=X&delay=S
function M.schedule()
  local args = ngx.req.get_uri_args()
  local id, delay = args.id, tonumber(args.delay or 1)
  if type(id) ~= "string" or id == "" then return bad_request("id expected") end
  if not delay or delay < 0 then return bad_request("delay expected") end
  local old = M.timeouts[id]
  if old then old:cancel() end
  local t, err = M.timer:timeout(delay, on_fire, id)
  if not t then return bad_request(err) end
  M.timeouts[id] = t
  ngx.say("scheduled ", id, " in ", delay)
end

-- GET /cancel?id=X -> true (it will never run) or false
function M.cancel()
  local id = ngx.req.get_uri_args().id
  local t = M.timeouts[id]
  M.timeouts[id or ""] = nil
  ngx.say(tostring(t ~= nil and t:cancel()))
end

-- GET /fired -> one "fired X" line per timeout that ran
function M.list_fired()
  for _, id in ipairs(M.fired) do ngx.say("fired ", id) end
end

local function bulk_task() end

-- GET /bulk?n=N&delay=S -> schedules N timeouts S seconds away (default 60)
function M.bulk()
  local args = ngx.req.get_uri_args()
  local n, delay = tonumber(args.n or 1000), tonumber(args.delay or 60)
  if not n or n < 0 or n % 1 ~= 0 then return bad_request("n expected") end
  if not delay or delay < 0 then return bad_request("delay expected") end
  local bulk, made = M.bulk_timeouts, 0
  for _ = 1, n do
    local t, err = M.timer:timeout(delay, bulk_task)
    if not t then ngx.say("refused: ", err); break end
    bulk[#bulk + 1] = t
    made = made + 1
  end
  ngx.say("scheduled ", made)
end

-- GET /pending -> timer:pending()
function M.pending()
  ngx.say(M.timer:pending())
end

-- GET /cancel_all -> how many timeouts this call cancelled
function M.cancel_all()
  local cancelled = 0
  for _, t in ipairs(M.bulk_timeouts) do
    if t:cancel() then cancelled = cancelled + 1 end
  end
  M.bulk_timeouts = {}
  for id, t in pairs(M.timeouts) do
    if t:cancel() then cancelled = cancelled + 1 end
    M.timeouts[id] = nil
  end
  ngx.say("cancelled ", cancelled)
end

-- GET /stats -> timer:stats(), one "key value" a line
function M.stats()
  local keys = {}
  for key in pairs(M.timer:stats()) do keys[#keys + 1] = key end
  table.sort(keys)
  local stats = M.timer:stats()
  for _, key in ipairs(keys) do ngx.say(key, " ", tostring(stats[key])) end
end

-- GET /ngx_timer_at?n=N&delay=S -> the same load on ngx.timer.at, for
-- comparison: it refuses past lua_max_pending_timers (1024 by default), and
-- has no cancel (lua-nginx-module#1615), so these stay pending for S seconds
-- (until the worker exits, when they run with premature = true).
local function noop(premature) end

function M.ngx_timer_at()
  local args = ngx.req.get_uri_args()
  local n, delay = tonumber(args.n or 1100), tonumber(args.delay or 60)
  if not n or n < 0 then return bad_request("n expected") end
  local ok_count, refused, first_err = 0, 0, nil
  for _ = 1, n do
    local ok, err = ngx.timer.at(delay, noop)
    if ok then
      ok_count = ok_count + 1
    else
      refused = refused + 1
      first_err = first_err or err
    end
  end
  ngx.say("ok ", ok_count)
  ngx.say("refused ", refused)
  ngx.say("err ", tostring(first_err))
end

return M
