-- test/docs/meta_test.lua: the LuaLS definitions in library/ against the real modules.
--
--   LUA_PATH='lua/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 test/docs/meta_test.lua
--
-- It reads library/hwt.lua and library/hwt/*.lua (the `---@meta`, `---@class`,
-- `---@field` lines, `local X = {}` / `a.B = {}` after a class, and the
-- `function a.b:name(` / `function M.name(` lines) and compares them with the
-- objects themselves:
--   * every public function and field of require("hwt") is annotated, and
--     every annotated one exists;
--   * the same for the methods of hwt.Timer and hwt.Timeout (their method
--     tables, names starting with "_" skipped), of the retry handle (and its
--     fields), of each driver module and of the driver its attach returns
--     (hwt.luv / hwt.cqueues attach for real when luv / cqueues load; the
--     hwt.ngx driver is started against a stub `ngx`; where the real object
--     cannot be had, the methods are read from the module's source);
--   * the keys of timer:stats() are exactly the fields of hwt.Stats, each
--     value of the annotated type;
--   * every annotated option of hwt.new, hwt.retry and the drivers is accepted;
--   * hwt.jobs: its functions, the methods of a real queue (jobs.redis
--     connects on first use only), its options (each accepted, and exactly
--     the ones jobs.redis reads, also inside `retry`), the keys of q:stats(),
--     the records a handler, on_error, q:dead(), q:get(), q:list() and
--     q:counts() give, and the fields of a schedule_many job, from a queue
--     run on the manual clock against a stub Redis client (canned replies in
--     the shapes of the module's scripts; no redis-server needed).
-- Each comparison is one check; each mismatch is printed; the last line is
-- "meta: N passed, N failed", and the exit status is 1 when one failed.
local hwt = require("hwt")

local passed, failed = 0, 0

local function check(ok, message, ...)
  if ok then
    passed = passed + 1
  else
    failed = failed + 1
    print("FAIL " .. message:format(...))
  end
  return ok
end

local function note(message, ...)
  print("note: " .. message:format(...))
end

-- ---- where the library is -------------------------------------------------
local here = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
local root = here:match("^(.*)[/\\]test[/\\]docs$") or (here:match("^test[/\\]docs$") and ".") or here .. "/../.."
local library = root .. "/library"

-- ---- the parser -----------------------------------------------------------
-- classes[name] = { fields = {name = {type = ..., where = ...}}, members = {name = {kind, where}} }
-- kind: "method" (a:b), "function" (a.b), "table" (a.B = {}), "field" (---@field)
local classes = {}
local metas = {}                                  -- meta name -> { file, class (of what it returns) }

local function class_of(name)
  local c = classes[name]
  if not c then
    c = { fields = {}, members = {}, name = name }
    classes[name] = c
  end
  return c
end

local function parse(path, relative)
  local file = io.open(path, "r")
  if not check(file ~= nil, "%s: cannot be read", relative) then return end
  local alias = {}                                -- local name -> class name
  local current, pending_class                    -- the class whose ---@field lines follow; a class for the next code line
  local meta
  local n = 0
  for line in file:lines() do
    n = n + 1
    local where = relative .. ":" .. n
    local m = line:match("^%-%-%-@meta%s+([%w_.]+)")
    if m then meta = m end
    local class = line:match("^%-%-%-@class%s+([%w_.]+)")
    if class then
      class_of(class)
      current, pending_class = class, class
    end
    local field, optional, ftype = line:match("^%-%-%-@field%s+([%w_]+)(%??)%s+(.-)%s*$")
    if field and current then
      local c = class_of(current)
      c.fields[field] = { type = ftype, optional = optional == "?", where = where }
      c.members[field] = c.members[field] or { kind = "field", where = where }
    end
    if not line:match("^%-%-") and line:match("%S") then   -- a line of code
      local lhs = line:match("^local%s+([%w_]+)%s*=%s*{%s*}") or line:match("^([%w_.]+)%s*=%s*{%s*}")
      if lhs and pending_class then
        if lhs:find("%.") then                    -- hwt.Timer = {}: a member of its owner too
          local owner, key = lhs:match("^(.*)%.([%w_]+)$")
          local c = class_of(alias[owner] or owner)
          c.members[key] = { kind = "table", where = where }
        end
        alias[lhs] = pending_class
      end
      local owner, sep, name = line:match("^function%s+([%w_.]+)([.:])([%w_]+)%s*%(")
      if owner then
        local c = class_of(alias[owner] or owner)
        c.members[name] = { kind = sep == ":" and "method" or "function", where = where }
      end
      local returned = line:match("^return%s+([%w_]+)%s*$")
      if returned and meta then
        metas[meta] = { file = relative, class = alias[returned] or returned }
      end
      current, pending_class = nil, nil
    end
  end
  file:close()
  local expected = relative:gsub("^library/", ""):gsub("%.lua$", ""):gsub("/", ".")
  check(meta == expected, "%s: starts with ---@meta %s (found %s)", relative, expected, tostring(meta))
end

parse(library .. "/hwt.lua", "library/hwt.lua")
for _, module in ipairs({ "ngx", "luv", "cqueues", "jobs", "redis" }) do
  parse(library .. "/hwt/" .. module .. ".lua", "library/hwt/" .. module .. ".lua")
end

-- ---- comparisons ----------------------------------------------------------
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

local function is_public(name)
  return type(name) == "string" and name:sub(1, 1) ~= "_"
end

-- Compares the public functions of `real` (a method table or module) with
-- the members of class `cname` of the given kinds.
local function compare_functions(real, cname, kinds, what)
  local c = classes[cname]
  if not check(c ~= nil, "no ---@class %s in library/", cname) then return end
  for _, name in ipairs(sorted_keys(real)) do
    if is_public(name) and type(real[name]) == "function" then
      local member = c.members[name]
      check(member ~= nil and kinds[member.kind], "%s.%s exists but is not annotated (class %s)", what, name, cname)
    end
  end
  for _, name in ipairs(sorted_keys(c.members)) do
    local member = c.members[name]
    if kinds[member.kind] then
      check(type(real[name]) == "function", "%s:%s is annotated (%s) but %s has no such function",
        cname, name, member.where, what)
    end
  end
end

local METHODS = { method = true }
local FUNCTIONS = { ["function"] = true }

-- Whether `value` is of the annotated type: builtin types and literals are
-- checked, class names accepted.
local builtin = { number = true, string = true, boolean = true, table = true, ["function"] = true,
  userdata = true, thread = true }
local function has_type(value, annotated)
  for alternative in (annotated .. "|"):gmatch("%s*([^|]-)%s*|") do
    local literal = alternative:match('^"(.*)"$')
    if literal then
      if value == literal then return true end
    elseif alternative == "integer" then
      if math.type then
        if math.type(value) == "integer" then return true end
      elseif type(value) == "number" and value % 1 == 0 then
        return true
      end
    elseif alternative == "nil" then
      if value == nil then return true end
    elseif alternative == "any" then
      return true
    elseif builtin[alternative] then
      if type(value) == alternative then return true end
    else
      return true                                 -- a class: not checked here
    end
  end
  return false
end

-- ---- the module -----------------------------------------------------------
do
  local c = classes["hwt"]
  check(metas["hwt"] and metas["hwt"].class == "hwt", "library/hwt.lua returns the ---@class hwt table")
  if check(c ~= nil, "no ---@class hwt in library/hwt.lua") then
    for _, name in ipairs(sorted_keys(hwt)) do
      if type(name) == "string" then
        local member = c.members[name]
        if type(hwt[name]) == "function" then
          check(member ~= nil and member.kind == "function", "hwt.%s exists but is not annotated as function hwt.%s(", name, name)
        else
          check(member ~= nil and member.kind ~= "function" and member.kind ~= "method",
            "hwt.%s (a %s) exists but is not annotated", name, type(hwt[name]))
        end
      end
    end
    for _, name in ipairs(sorted_keys(c.members)) do
      local member = c.members[name]
      if member.kind == "function" then
        check(type(hwt[name]) == "function", "hwt.%s is annotated (%s) but require('hwt') has no such function", name, member.where)
      elseif member.kind == "table" then
        check(type(hwt[name]) == "table", "hwt.%s is annotated (%s) but require('hwt') has no such table", name, member.where)
      elseif member.kind == "field" then
        check(hwt[name] ~= nil and has_type(hwt[name], c.fields[name].type),
          "hwt.%s is annotated as %s (%s) but is %s", name, c.fields[name].type, member.where, type(hwt[name]))
      end
    end
  end
end

-- ---- Timer, Timeout -------------------------------------------------------
compare_functions(hwt.Timer, "hwt.Timer", METHODS, "hwt.Timer")
compare_functions(hwt.Timeout, "hwt.Timeout", METHODS, "hwt.Timeout")

-- ---- stats ----------------------------------------------------------------
do
  local c = classes["hwt.Stats"]
  if check(c ~= nil, "no ---@class hwt.Stats in library/hwt.lua") then
    local keys, samples = {}, {}
    for _, opts in ipairs({ {}, { clock = "manual" }, { shared = false, max_pending = 10 } }) do
      local timer = hwt.new(opts)
      timer:timeout(0, function() end)
      if opts.clock == "manual" then timer:advance(0) end
      local stats = timer:stats()
      for k, v in pairs(stats) do
        if not keys[k] then keys[k] = true; samples[#samples + 1] = { k, v, opts } end
      end
      timer:stop()
    end
    table.sort(samples, function(a, b) return tostring(a[1]) < tostring(b[1]) end)
    for _, sample in ipairs(samples) do
      local key, value = sample[1], sample[2]
      local field = c.fields[key]
      if check(field ~= nil, "stats().%s exists but is not a ---@field of hwt.Stats", tostring(key)) then
        check(has_type(value, field.type), "stats().%s is %s (%s) but hwt.Stats says %s (%s)",
          key, tostring(value), math.type and math.type(value) or type(value), field.type, field.where)
      end
    end
    for _, name in ipairs(sorted_keys(c.fields)) do
      check(keys[name], "hwt.Stats.%s is annotated (%s) but stats() has no such key", name, c.fields[name].where)
    end
  end
end

-- ---- options ----------------------------------------------------------------
local function nop() end

-- Each annotated option of class `cname` must be accepted by try(key, value).
local function compare_options(cname, samples, try)
  local c = classes[cname]
  if not check(c ~= nil, "no ---@class %s in library/", cname) then return end
  for _, name in ipairs(sorted_keys(c.fields)) do
    local value = samples[name]
    if check(value ~= nil, "%s.%s is annotated (%s) but this test has no sample value for it", cname, name, c.fields[name].where) then
      local ok, err = try(name, value)
      check(ok, "%s.%s is annotated (%s) but is refused: %s", cname, name, c.fields[name].where, tostring(err))
    end
  end
end

compare_options("hwt.Options", {
  tick = 0.01, wheel_size = 64, max_pending = 0, on_error = nop, clock = "manual", shared = false,
}, function(key, value)
  local ok, timer = pcall(hwt.new, { [key] = value })
  if ok then timer:stop() end
  return ok, timer
end)

compare_options("hwt.RetryOptions", {
  retries = 0, delay = 0, backoff = 1, max_delay = 0, jitter = 0, random = function() return 0.5 end,
  on_give_up = nop, on_success = nop, on_retry = nop,
}, function(key, value)
  local timer = hwt.new({ clock = "manual" })
  local ok, err = pcall(hwt.retry, timer, function() return true end, { [key] = value })
  timer:stop()
  return ok, err
end)

-- ---- the retry handle -------------------------------------------------------
do
  local c = classes["hwt.RetryHandle"]
  if check(c ~= nil, "no ---@class hwt.RetryHandle in library/hwt.lua") then
    local timer = hwt.new({ clock = "manual" })
    local handle = hwt.retry(timer, function() return nil, "not yet" end, { on_give_up = nop })
    local methods = getmetatable(handle) and getmetatable(handle).__index
    methods = type(methods) == "table" and methods or {}
    compare_functions(methods, "hwt.RetryHandle", METHODS, "the retry handle")
    -- fields: what a handle waiting for its next try holds
    for _, name in ipairs(sorted_keys(handle)) do
      if is_public(name) then
        check(c.fields[name] ~= nil, "retry handle field '%s' exists but is not a ---@field of hwt.RetryHandle", name)
      end
    end
    for _, name in ipairs(sorted_keys(c.fields)) do
      local field = c.fields[name]
      check(handle[name] ~= nil and has_type(handle[name], field.type),
        "hwt.RetryHandle.%s is annotated as %s (%s) but a waiting handle has %s", name, field.type, field.where, tostring(handle[name]))
    end
    handle:cancel()
    timer:stop()
  end
end

-- ---- the drivers ------------------------------------------------------------
-- The colon methods defined in a module's source (when no real object can be had).
local function source_methods(module)
  local path = package.searchpath(module, package.path)
  local methods = {}
  if not path then return methods end
  for line in io.lines(path) do
    local name = line:match("^function%s+[%w_]+:([%w_]+)%s*%(")
    if name then methods[name] = function() end end
  end
  return methods
end

local function methods_of(object)
  local mt = getmetatable(object)
  local index = type(mt) == "table" and mt.__index
  return type(index) == "table" and index or nil
end

-- Compares module functions; then the methods of what `make()` returns, or,
-- when it returns nil, those in the source.
local function compare_driver(module, handle_class, make)
  local ok, real = pcall(require, module)
  if not check(ok, "require('%s') failed: %s", module, tostring(real)) then return end
  check(metas[module] and metas[module].class == module, "library/%s.lua returns the ---@class %s table",
    module:gsub("%.", "/"), module)
  compare_functions(real, module, FUNCTIONS, module)
  local object, why, cleanup = make(real)
  local methods = object and methods_of(object)
  if methods then
    compare_functions(methods, handle_class, METHODS, "a real " .. handle_class)
  else
    note("%s: no real %s (%s); its methods are read from the source", module, handle_class, tostring(why))
    compare_functions(source_methods(module), handle_class, METHODS, module .. "'s source")
  end
  if cleanup then cleanup() end
end

-- hwt.ngx outside nginx: start() returns nil, err, after checking the options.
compare_options("hwt.ngx.Options", { concurrency = 1, on_exit = nop }, function(key, value)
  local timer = hwt.new()
  local ok, err = pcall(require("hwt.ngx").start, timer, { [key] = value })
  timer:stop()
  return ok, err
end)

compare_driver("hwt.ngx", "hwt.ngx.Driver", function(M)
  -- A stub of what attach() uses: ngx.timer.at (the wake), ngx.thread,
  -- ngx.log, lua-resty-core's ngx.semaphore (the watch).
  local saved = rawget(_G, "ngx")
  local saved_semaphore = package.loaded["ngx.semaphore"]
  local stub = { ERR = 4, log = nop, timer = { at = function() return true end },
    thread = { spawn = function() end } }
  rawset(_G, "ngx", stub)
  package.loaded["ngx.semaphore"] = { new = function() return { post = nop, wait = nop } end }
  local timer = hwt.new()
  local ok, driver, err = pcall(M.attach, timer)
  rawset(_G, "ngx", saved)
  package.loaded["ngx.semaphore"] = saved_semaphore
  if not ok or not driver then
    timer:stop()
    return nil, ok and err or driver
  end
  return driver, nil, function() driver:stop(); timer:stop() end
end)

local luv_loaded = pcall(require, "luv")
if luv_loaded then
  compare_options("hwt.luv.Options", { spawn = nop }, function(key, value)
    local timer = hwt.new()
    local ok, handle = pcall(require("hwt.luv").attach, timer, { [key] = value })
    if ok and handle then handle:detach() end
    timer:stop()
    return ok, handle
  end)
else
  note("luv does not load here: hwt.luv.Options not tried")
end

compare_driver("hwt.luv", "hwt.luv.Driver", function(M)
  local timer = hwt.new()
  local handle, err = M.attach(timer)
  if not handle then timer:stop(); return nil, err end
  return handle, nil, function() handle:detach(); timer:stop() end
end)

local cqueues_loaded, cqueues = pcall(require, "cqueues")
if cqueues_loaded then
  compare_options("hwt.cqueues.Options", { controller = cqueues.new() }, function(key, value)
    local timer = hwt.new()
    local ok, handle = pcall(require("hwt.cqueues").attach, timer, { [key] = value })
    if ok and handle then handle:detach() end
    timer:stop()
    return ok, handle
  end)
else
  note("cqueues does not load here: hwt.cqueues.Options not tried")
end

compare_driver("hwt.cqueues", "hwt.cqueues.Driver", function(M)
  if not cqueues_loaded then return nil, "cqueues does not load" end
  local timer = hwt.new()
  local handle, err = M.attach(timer, { controller = cqueues.new() })
  if not handle then timer:stop(); return nil, err end
  return handle, nil, function() handle:detach(); timer:stop() end
end)

-- ---- hwt.jobs -----------------------------------------------------------------
-- Compares tables a real call returned with the ---@field lines of class
-- `cname`: every public key of each is annotated and of the annotated type;
-- every field not marked optional is set in each (unless its type admits
-- nil: `any`, `|nil`) and of its type; every field is set in one at least.
local function admits_nil(annotated)
  for alternative in (annotated .. "|"):gmatch("%s*([^|]-)%s*|") do
    if alternative == "any" or alternative == "nil" then return true end
  end
  return false
end

local function compare_records(cname, records, what)
  local c = classes[cname]
  if not check(c ~= nil, "no ---@class %s in library/", cname) then return end
  local set = {}
  for _, record in ipairs(records) do
    local t, label = record[1], record[2]
    for _, key in ipairs(sorted_keys(t)) do
      if is_public(key) then
        local field = c.fields[key]
        set[key] = true
        if check(field ~= nil, "%s.%s exists but is not a ---@field of %s", label, tostring(key), cname) then
          check(has_type(t[key], field.type), "%s.%s is %s (%s) but %s says %s (%s)", label, key,
            tostring(t[key]), math.type and math.type(t[key]) or type(t[key]),
            cname, field.type, field.where)
        end
      end
    end
    for _, name in ipairs(sorted_keys(c.fields)) do
      local field = c.fields[name]
      if not field.optional and not admits_nil(field.type) then
        check(t[name] ~= nil, "%s.%s is annotated (%s) but %s has no such key", cname, name, field.where, label)
      end
    end
  end
  for _, name in ipairs(sorted_keys(c.fields)) do
    check(set[name], "%s.%s is annotated (%s) but no %s sampled here has it", cname, name, c.fields[name].where, what)
  end
end

local jobs_ok, jobs = pcall(require, "hwt.jobs")
local cjson_ok = pcall(require, "cjson")        -- jobs.redis needs it
local jobs_connect = function() return nil, "no redis" end

-- The keys of `opts` that jobs.redis reads (a proxy records them): its
-- options, and within `retry` the retry fields.
local function keys_read(opts)
  local read, retry_read = {}, {}
  local retry = setmetatable({}, { __index = function(_, key) retry_read[key] = true end })
  local proxy = setmetatable({}, { __index = function(_, key)
    read[key] = true
    if key == "retry" then return retry end
    return opts[key]
  end })
  local ok, err = pcall(jobs.redis, proxy)
  check(ok, "jobs.redis with only timer, connect and key raised: %s", tostring(err))
  return read, retry_read
end

local function compare_read(cname, read, what)
  local c = classes[cname]
  if not check(c ~= nil, "no ---@class %s in library/", cname) then return end
  for _, key in ipairs(sorted_keys(read)) do
    check(c.fields[key] ~= nil, "jobs.redis reads %s '%s' but it is not a ---@field of %s", what, tostring(key), cname)
  end
  for _, name in ipairs(sorted_keys(c.fields)) do
    check(read[name], "%s.%s is annotated (%s) but jobs.redis never reads %s '%s'", cname, name,
      c.fields[name].where, what, name)
  end
end

if jobs_ok and cjson_ok then
  local timer = hwt.new()
  local base = { timer = timer, connect = jobs_connect, key = "meta:jobs" }
  local function with(key, value)
    local o = {}
    for k, v in pairs(base) do o[k] = v end
    o[key] = value
    if key == "shards" then o.connect = nil end     -- one or the other
    return o
  end
  compare_options("hwt.jobs.Options", {
    timer = timer, connect = jobs_connect, shards = { jobs_connect }, release = nop, key = "meta:jobs", lease = 30,
    poll_interval = 1, concurrency = 1, retry = {}, on_error = nop,
  }, function(key, value) return pcall(jobs.redis, with(key, value)) end)
  -- An accepted retry field proves it is known; the keys jobs.redis reads
  -- (below) prove that it is used.
  compare_options("hwt.jobs.RetryOptions", { retries = 0, delay = 0, backoff = 1, max_delay = 0, jitter = 0 },
    function(key, value) return pcall(jobs.redis, with("retry", { [key] = value })) end)
  local read, retry_read = keys_read(base)
  compare_read("hwt.jobs.Options", read, "option")
  compare_read("hwt.jobs.RetryOptions", retry_read, "retry field")
  timer:stop()
else
  note("hwt.jobs or lua-cjson does not load here: hwt.jobs.Options, hwt.jobs.RetryOptions not tried")
end

-- hwt.redis (a C module; built where libhiredis is): its functions, and
-- its client's methods, read from the metatable luaL_newmetatable keeps in
-- the registry (its __index: a closure over the methods, any other name
-- being a command).
local redis_ok, redis_module = pcall(require, "hwt.redis")
if redis_ok then
  check(metas["hwt.redis"] and metas["hwt.redis"].class == "hwt.redis",
        "library/hwt/redis.lua returns the ---@class hwt.redis table")
  compare_functions(redis_module, "hwt.redis", FUNCTIONS, "hwt.redis")
  local client_mt = debug.getregistry()["hwt.redis.Client"]
  local _, methods = debug.getupvalue(client_mt.__index, 1)
  if check(type(methods) == "table", "hwt.redis.Client's __index has its methods as first upvalue") then
    compare_functions(methods, "hwt.redis.Client", METHODS, "hwt.redis.Client")
  end
  -- An option is known when connect gets past the options to the connection
  -- (nothing listens on port 1, or at the path).
  compare_options("hwt.redis.Options", { host = "127.0.0.1", port = 1, path = "/nonexistent/redis.sock",
                                         timeout = 0.5 }, function(key, value)
    local opts = { [key] = value }
    if key ~= "path" and key ~= "port" then opts.port = 1 end
    local ok, err = pcall(redis_module.connect, opts)
    return not ok and tostring(err):find("cannot connect", 1, true) ~= nil, err
  end)
else
  note("hwt.redis does not load here (%s): its annotations not compared", tostring(redis_module))
end

compare_driver("hwt.jobs", "hwt.jobs.Queue", function(M)
  if not cjson_ok then return nil, "lua-cjson does not load" end
  local timer = hwt.new()
  local ok, q = pcall(M.redis, { timer = timer, key = "meta:jobs", connect = jobs_connect })
  if not ok then timer:stop(); return nil, q end
  return q, nil, function() timer:stop() end
end)

-- A stub of a Redis client (redis-lua's calls: script, evalsha, eval, close)
-- that answers the queue's worker script (keys "{key}:due", "{key}:jobs",
-- "{key}:tries", ...) and its dead-letter list (first key "{key}:dead") with
-- replies shaped as Redis gives them ({ tag, result }, the tag being the
-- request's last argument), its dead-letter list (first key "{key}:dead"),
-- get and list (keys "{key}:due", "{key}:jobs", "{key}:claims", ...: get's
-- one argument is the id, list's three the state, from and count), counts
-- (three keys) and schedule_many (keys "{key}:due", "{key}:jobs",
-- "{key}:seq", ...; one argument, the batch); any other script is an error
-- reply. The first worker round claims a good job and a malformed one.
local STUB_DUE_US = 1700000000 * 1000000
local function stub_redis()
  local client, pumps = {}, 0
  function client.script() return ("0"):rep(40) end       -- SCRIPT LOAD: any SHA1 does, evalsha is eval
  function client.close() end
  function client.eval(_, _, numkeys, ...)
    local args = { ... }
    local first_key, tag = args[1] or "", args[#args]
    if numkeys == 8 and first_key:match(":due$") and args[3]:match(":tries$") then   -- settle, claim, next due, now
      pumps = pumps + 1
      local settled = {}
      for i = 1, tonumber(args[numkeys + 3]) do settled[i] = 1 end
      local claimed = {}
      if pumps == 1 then
        claimed = { { "7", '{"name":"meta","payload":{"n":1}}', "1", 1, STUB_DUE_US, "" },
                    { "8", "{not json", "2", 1, STUB_DUE_US, "" },
                    { "9", '{"name":"meta","payload":{"n":2}}', "3", 1, STUB_DUE_US,
                      '{"spec":"0 9 * * *","tz":"UTC"}' } }
      end
      return { tag, { settled, claimed, -1, tostring(STUB_DUE_US) } }
    elseif first_key:match(":dead$") then         -- id, job JSON, error, tries
      return { tag, { { "7", '{"name":"meta","payload":{"n":1}}', "boom", "3" },
                      { "8", "{not json", "malformed job", "1" } } }
    elseif numkeys == 7 and args[3]:match(":claims$") then   -- get, list: rows of id, JSON, state, due, tries, error, dead since, series
      local delayed = { "7", '{"name":"meta","payload":{"n":1}}', "delayed", tostring(STUB_DUE_US), "0", "", "",
                        '{"spec":"0 9 * * *","tz":"UTC"}' }
      local running = { "8", '{"name":"meta"}', "running", tostring(STUB_DUE_US), "1", "", "", "" }
      local dead = { "9", "{not json", "dead", "", "3", "boom", tostring(STUB_DUE_US), "" }
      if #args == numkeys + 2 then return { tag, { 1, args[numkeys + 1] == "9" and dead or delayed } } end
      return { tag, { delayed, running, dead } }
    elseif numkeys == 4 and args[2]:match(":claims$") then   -- counts
      return { tag, { 4, 1, 2, 1 } }
    elseif numkeys == 8 and args[3]:match(":seq$") and #args == numkeys + 2 then   -- schedule_many
      return { tag, { { "job-x" }, 1, "-1" } }
    end
    error("stub redis: unexpected script with " .. tostring(numkeys) .. " keys", 0)
  end
  client.evalsha = client.eval
  return client
end

if jobs_ok and cjson_ok then
  local timer = hwt.new({ clock = "manual" })
  local handled, reported = {}, {}
  local client = stub_redis()
  local q = jobs.redis({ timer = timer, key = "meta:stub", connect = function() return client end,
    on_error = function(err, job) reported[#reported + 1] = { err = err, job = job } end })
  q:handle("meta", function(_, job) handled[#handled + 1] = job end)
  local idle_stats = q:stats()
  local started, start_err = q:start()
  check(started, "q:start() against the stub: %s", tostring(start_err))
  timer:run_for(0)
  check(#handled == 2, "the stub's jobs reached the handler %d times, not twice", #handled)
  local malformed = reported[1] and reported[1].job
  check(#reported == 1 and malformed ~= nil, "on_error got %d reports (%s), not one with the malformed job",
    #reported, tostring(reported[1] and reported[1].err))
  local job_samples = {}
  for i, job in ipairs(handled) do job_samples[#job_samples + 1] = { job, "a handler's job " .. i } end
  if malformed then job_samples[#job_samples + 1] = { malformed, "on_error's malformed job" } end
  compare_records("hwt.jobs.Job", job_samples, "job record")
  compare_records("hwt.jobs.Stats", { { idle_stats, "q:stats() (new queue)" }, { q:stats(), "q:stats() (after a run)" } },
    "q:stats()")
  local dead, dead_err = q:dead()
  local dead_samples = {}
  if check(dead ~= nil and #dead == 2, "q:dead() against the stub: %s", tostring(dead and #dead .. " entries" or dead_err)) then
    dead_samples = { { dead[1], "q:dead()[1]" }, { dead[2], "q:dead()[2] (malformed)" } }
  end
  compare_records("hwt.jobs.DeadJob", dead_samples, "q:dead() entry")
  local info_samples = {}
  for _, id in ipairs({ "7", "9" }) do
    local job, get_err = q:get(id)
    if check(job ~= nil, "q:get(%s) against the stub: %s", id, tostring(get_err)) then
      info_samples[#info_samples + 1] = { job, "q:get(" .. id .. ")" }
    end
  end
  local listed, list_err = q:list()
  if check(listed ~= nil and #listed == 3, "q:list() against the stub: %s", tostring(listed and #listed or list_err)) then
    for i, job in ipairs(listed) do info_samples[#info_samples + 1] = { job, "q:list()[" .. i .. "]" } end
  end
  compare_records("hwt.jobs.JobInfo", info_samples, "q:get() or q:list() record")
  local counts, counts_err = q:counts()
  check(counts ~= nil, "q:counts() against the stub: %s", tostring(counts_err))
  compare_records("hwt.jobs.Counts", counts and { { counts, "q:counts()" } } or {}, "q:counts()")
  compare_options("hwt.jobs.BatchJob", {
    name = "x", delay = 1, at = 1700000000, payload = { n = 1 }, id = "job-x", replace = true,
  }, function(key, value)
    local job = { name = "x", delay = key ~= "at" and 1 or nil, id = key == "replace" and "job-x" or nil }
    job[key] = value
    return pcall(q.schedule_many, q, { job })
  end)
  q:stop()
  timer:stop()
else
  note("hwt.jobs or lua-cjson does not load here: hwt.jobs.Job, hwt.jobs.Stats, hwt.jobs.DeadJob, "
    .. "hwt.jobs.JobInfo, hwt.jobs.Counts, hwt.jobs.BatchJob not compared")
end

-- ---- every class is known ---------------------------------------------------
-- A class with members that no check above looked at is a typo in a name.
local compared = {
  ["hwt"] = true, ["hwt.Timer"] = true, ["hwt.Timeout"] = true, ["hwt.Stats"] = true,
  ["hwt.Options"] = true, ["hwt.RetryOptions"] = true, ["hwt.RetryHandle"] = true, ["hwt.TimerTask"] = true,
  ["hwt.ngx"] = true, ["hwt.ngx.Options"] = true, ["hwt.ngx.Driver"] = true,
  ["hwt.luv"] = true, ["hwt.luv.Options"] = true, ["hwt.luv.Driver"] = true,
  ["hwt.cqueues"] = true, ["hwt.cqueues.Options"] = true, ["hwt.cqueues.Driver"] = true,
  ["hwt.jobs"] = true, ["hwt.jobs.Options"] = true, ["hwt.jobs.RetryOptions"] = true, ["hwt.jobs.Queue"] = true,
  ["hwt.jobs.Job"] = true, ["hwt.jobs.Stats"] = true, ["hwt.jobs.DeadJob"] = true,
  ["hwt.jobs.JobInfo"] = true, ["hwt.jobs.Counts"] = true, ["hwt.jobs.BatchJob"] = true,
  ["hwt.redis"] = redis_ok, ["hwt.redis.Client"] = redis_ok, ["hwt.redis.Options"] = redis_ok,
}
for _, name in ipairs(sorted_keys(classes)) do
  check(compared[name], "---@class %s is not compared with anything by this test", name)
end

print(("meta: %d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
