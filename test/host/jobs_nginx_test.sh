#!/bin/sh
# hwt.jobs shared by OpenResty and plain Lua: one Redis queue, used from nginx
# (lua-resty-redis, each job in a light thread through hwt.ngx) and from a
# Lua 5.4 process (redis-lua over LuaSocket). Starts a private redis-server
# and a private nginx (test/host/jobs_nginx/nginx.conf, two workers) on free
# 127.0.0.1 ports, builds hwt.core for LuaJIT and Lua 5.4 into a scratch
# prefix, and checks:
#   1. jobs scheduled by Lua 5.4 run in nginx, each once, none early;
#   2. jobs scheduled by an nginx request run in a Lua 5.4 worker, likewise;
#   3. a job cancelled on one side never runs on the other;
#   3c. jobs scheduled by Lua 5.4 into a queue whose nginx workers ask Redis
#      only every 30 s start on time: each worker's listener (a light thread
#      SUBSCRIBEd through lua-resty-redis) hears of them;
#   4. through lua-resty-redis, an error reply is "refused", a reply that
#      comes after the client's timeout "unknown", and a retry with the
#      request's opts.id writes the job once;
#   5. nginx's error.log has no error lines.
# Prints each check, then exactly one line "jobs nginx: N passed, N failed";
# exits non-zero on any failure or missing prerequisite (one failure, reason
# printed). Environment: NGINX, NGX_LUA_MODULE, NGX_NDK_MODULE, CC, HWT_SRC
# (the C sources, default src/), LUA54 (default lua5.4), HWT_KEEP=1 (keep the
# scratch prefix). Every wait is bounded; both servers are stopped on exit.

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/test/host/jobs_nginx
LUA54=${LUA54:-lua5.4}
LABEL="jobs nginx"
BUDGET=60
# shellcheck source=test/host/nginx_lib.sh
. "$ROOT/test/host/nginx_lib.sh"
redis_pid=""
work_pid=""

stop_redis() { [ -z "$redis_pid" ] || { stop "$redis_pid" TERM; redis_pid=""; }; }

stop_worker() {  # the background Lua 5.4 worker: its subshell and timeout
  [ -n "$work_pid" ] || return 0
  for c in $(ps -o pid= --ppid "$work_pid" 2>/dev/null); do kill "$c" 2>/dev/null; done
  kill "$work_pid" 2>/dev/null
  wait "$work_pid" 2>/dev/null
  work_pid=""
}

cleanup() {
  stop_worker
  stop_nginx QUIT
  stop_redis
  remove_prefix
}

# plain ARGS...: the Lua 5.4 half, bounded.
plain() {
  LUA_PATH="$ROOT/lua/?.lua;$HERE/?.lua;;" LUA_CPATH="$prefix/lib54/?.so;;" \
    timeout 20 "$LUA54" "$HERE/plain.lua" "$@"
}

# verified LABEL WHICH EXPECTED SECONDS: polls `plain.lua verify WHICH` until
# its first line is EXPECTED, then checks that the worst lateness is bounded.
verified() {
  deadline=$(($(date +%s) + $4))
  while :; do
    report=$(plain verify "$redis_port" "$2")
    [ "$(echo "$report" | head -n 1)" = "$3" ] && break
    if [ "$(date +%s)" -ge "$deadline" ] || over_budget; then
      fail "$1"
      echo "$report" | sed 's/^/    /'
      return 1
    fi
    nap 0.2
  done
  pass "$1: $3"
  late=$(echo "$report" | sed -n 's/^late_max_ms \([0-9]*\) .*/\1/p')
  if [ -n "$late" ] && [ "$late" -le 1000 ]; then
    pass "$2: each started within 1000 ms of its due time ($(echo "$report" | sed -n 2p))"
  else
    fail "$2: each started within 1000 ms of its due time ($(echo "$report" | sed -n 2p))"
  fi
}

# ---- prerequisites --------------------------------------------------------
find_nginx_lua
for tool in redis-server redis-cli curl timeout "$LUA54" pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || give_up "$tool not found"
done
[ -r /usr/share/lua/5.1/nginx/redis.lua ] || give_up "lua-resty-redis missing (apt-get install lua-nginx-redis)"
if command -v luajit >/dev/null 2>&1; then   # nginx's own LuaJIT has the same search path
  luajit -e 'require("cjson")' 2>/dev/null || give_up "lua-cjson missing for LuaJIT (apt-get install lua-cjson)"
fi
"$LUA54" -e 'package.path = package.path .. ";/usr/share/lua/5.3/?.lua"
  require("redis"); require("socket"); require("cjson")' 2>/dev/null ||
  give_up "$LUA54 cannot load redis (lua-redis), socket (lua-socket) and cjson (lua-cjson)"
find_cc_luajit
l54_cflags=$(pkg-config --cflags lua5.4 2>/dev/null) || give_up "pkg-config lua5.4 failed (liblua5.4-dev)"

make_prefix hwt-jobs-nginx redis lib54/hwt
if build_core "$prefix/lib/hwt/core.so" "$lj_cflags" && build_core "$prefix/lib54/hwt/core.so" "$l54_cflags"; then
  pass "hwt.core builds for LuaJIT and Lua 5.4"
else
  sed 's/^/    /' "$prefix/build.log" | head -n 20
  give_up "hwt.core does not build"
fi

# ---- ports, redis-server, nginx ------------------------------------------------
redis_answers() { [ "$(timeout 2 redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ]; }

redis_up() {  # -> 0 when it answers PING on a new $redis_port
  redis_port=$(pick_port) || return 1
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --enable-debug-command local \
    --dir "$prefix/redis" --logfile "$prefix/logs/redis.log" </dev/null >/dev/null 2>&1 &
  redis_pid=$!
  await_up "$redis_pid" redis_answers
  case $? in 0) return 0 ;; 2) redis_pid="" ;; esac
  return 1
}

nginx_up() {  # -> 0 when it answers on a new $port
  port=$(pick_port "$redis_port") || return 1
  write_conf "$HERE/nginx.conf" -e "s|@REDIS_PORT@|$redis_port|g" -e "s|@TEST_DIR@|$HERE|g"
  start_nginx /ping pong
}

start_retrying redis_up stop_redis "$prefix/logs/redis.log" || give_up "redis-server does not start"
pass "redis-server answers on 127.0.0.1:$redis_port (pid $redis_pid)"
start_retrying nginx_up stop_nginx "$prefix/logs/error.log" || give_up "nginx does not start"
pass "nginx answers on 127.0.0.1:$port (pid $ngx_pid, 2 workers)"

# ---- 1 and 3b: Lua 5.4 schedules, nginx runs --------------------------------
expect_eq "Lua 5.4 schedules 200 jobs due over 1 s, and 5 it cancels at once (cancel true)" \
  "scheduled 200, cancelled 5" "$(plain schedule "$redis_port" 200 1 5)"
verified "nginx ran them (a cosocket RPUSH in each), not the 5 cancelled" to_nginx \
  "ran 200 of 200 once, missing 0, duplicates 0, cancelled 5 (ran 0), unexpected 0, early 0, left due 0 claims 0 dead 0" 8

# ---- 3c: the listener: nginx's workers poll every 30 s, the jobs start on time ----
nap 1                                       # each worker's first round, and its listener
expect_eq "Lua 5.4 schedules 20 jobs due over 0.5 s into a queue nginx polls every 30 s" \
  "scheduled 20, cancelled 0" "$(plain schedule "$redis_port" 20 0.5 0 to_listening)"
verified "nginx ran them, heard of through its listeners" to_listening \
  "ran 20 of 20 once, missing 0, duplicates 0, cancelled 0 (ran 0), unexpected 0, early 0, left due 0 claims 0 dead 0" 8

# ---- 2 and 3a: nginx schedules, Lua 5.4 runs ----------------------------------
plain work "$redis_port" 5 >"$prefix/work.out" 2>&1 &
work_pid=$!
ids=$(get '/schedule?n=100&min=0.3&spread=1')
expect_eq "an nginx request schedules 100 jobs due over 0.3-1.3 s" 100 "$(echo "$ids" | grep -c '^[0-9][0-9]*$')"
doomed=$(get '/schedule?n=5&min=1.5')
results=""
for id in $doomed; do results="$results$(get "/cancel?id=$id") "; done
expect_eq "an nginx request cancels 5 more (q:cancel true)" "true true true true true " "$results"
wait "$work_pid"
work_pid=""
expect_eq "the Lua 5.4 worker (q:start, timer:run_for) ran 100, no errors" \
  "ran 100 failed 0 lost 0 redis_errors 0 unsettled 0" "$(cat "$prefix/work.out")"
verified "Lua 5.4 ran them, not the 5 cancelled over HTTP" to_plain \
  "ran 100 of 100 once, missing 0, duplicates 0, cancelled 5 (ran 0), unexpected 0, early 0, left due 0 claims 0 dead 0" 3

# ---- 4: lua-resty-redis' failures -----------------------------------------------
expect_eq "through lua-resty-redis: an error reply is refused, a late reply unknown, a retry with its id writes it once" \
  "refused unknown faults-1 1" "$(get /faults)"

# ---- 5: nginx's log, after a graceful stop --------------------------------------
stop_nginx QUIT
expect_clean_log "nginx error.log has no error/crit/alert/emerg/panic lines"

finish
