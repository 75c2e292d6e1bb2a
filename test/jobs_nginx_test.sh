#!/bin/sh
# hwt.jobs shared by OpenResty and plain Lua: one Redis queue, used from nginx
# (lua-resty-redis, each job in a light thread through hwt.ngx) and from a
# Lua 5.4 process (redis-lua over LuaSocket). Starts a private redis-server
# and a private nginx (test/jobs_nginx/nginx.conf, two workers) on free
# 127.0.0.1 ports, builds hwt.core for LuaJIT and Lua 5.4 into a scratch
# prefix, and checks:
#   1. jobs scheduled by Lua 5.4 run in nginx, each once, none early;
#   2. jobs scheduled by an nginx request run in a Lua 5.4 worker, likewise;
#   3. a job cancelled on one side never runs on the other;
#   4. nginx's error.log has no error lines.
# Prints each check, then exactly one line "jobs nginx: N passed, N failed";
# exits non-zero on any failure or missing prerequisite (one failure, reason
# printed). Environment: NGINX, NGX_LUA_MODULE, NGX_NDK_MODULE, CC, LUA54
# (default lua5.4), HWT_KEEP=1 (keep the scratch prefix). Every wait is
# bounded; both servers are stopped on exit.

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOT/test/jobs_nginx
LUA54=${LUA54:-lua5.4}
BUDGET=60
passed=0
failed=0
prefix=""
ngx_pid=""
redis_pid=""
work_pid=""
started=$(date +%s)

pass() { passed=$((passed + 1)); echo "ok     $1"; }
fail() { failed=$((failed + 1)); echo "FAIL   $1"; }
summary() { echo "jobs nginx: $passed passed, $failed failed"; }

give_up() {
  echo "jobs nginx: cannot run: $1"
  failed=$((failed + 1))
  summary
  exit 1
}

nap() { sleep "$1" 2>/dev/null || sleep 1; }

alive() {  # alive PID: exists and is not a zombie
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]
}

# stop PID SIGNAL: signal our own child, wait up to 5 s, then KILL it and
# its children.
stop() {
  children=$(ps -o pid= --ppid "$1" 2>/dev/null)
  kill -"$2" "$1" 2>/dev/null
  i=0
  while alive "$1" && [ "$i" -lt 50 ]; do nap 0.1; i=$((i + 1)); done
  stopped=yes
  if alive "$1"; then
    stopped=no
    for c in $children; do kill -KILL "$c" 2>/dev/null; done
    kill -KILL "$1" 2>/dev/null
  fi
  wait "$1" 2>/dev/null
}

stop_nginx() { [ -z "$ngx_pid" ] || { stop "$ngx_pid" QUIT; ngx_pid=""; }; }
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
  stop_nginx
  stop_redis
  if [ -n "$prefix" ] && [ -d "$prefix" ]; then
    if [ "${HWT_KEEP:-0}" = 1 ]; then echo "kept $prefix" >&2; else rm -rf "$prefix"; fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

over_budget() { [ $(($(date +%s) - started)) -ge "$BUDGET" ]; }

# GET PATH -> body; fails on HTTP errors, timeouts and over budget.
get() {
  if over_budget; then echo "over the ${BUDGET}s budget, $1 not requested" >&2; return 1; fi
  curl -sS --fail --max-time 5 "http://127.0.0.1:$port$1"
}

# plain ARGS...: the Lua 5.4 half, bounded.
plain() {
  LUA_PATH="$ROOT/lua/?.lua;$HERE/?.lua;;" LUA_CPATH="$prefix/lib54/?.so;;" \
    timeout 20 "$LUA54" "$HERE/plain.lua" "$@"
}

expect_eq() {  # expect_eq LABEL EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1 (expected '$2', got '$3')"; fi
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
NGINX=${NGINX:-$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || give_up "nginx not found (apt-get install nginx-light libnginx-mod-http-lua)"
for tool in redis-server redis-cli curl timeout "$LUA54" pkg-config "${CC:=cc}"; do
  command -v "$tool" >/dev/null 2>&1 || give_up "$tool not found"
done
find_module() {  # find_module NAME.so
  for d in /usr/lib/nginx/modules /usr/share/nginx/modules /usr/lib64/nginx/modules \
           /usr/local/nginx/modules /etc/nginx/modules; do
    [ -r "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}
NGX_LUA_MODULE=${NGX_LUA_MODULE:-$(find_module ngx_http_lua_module.so)} ||
  give_up "ngx_http_lua_module.so not found (apt-get install libnginx-mod-http-lua)"
NGX_NDK_MODULE=${NGX_NDK_MODULE:-$(find_module ndk_http_module.so)} ||
  give_up "ndk_http_module.so not found (apt-get install libnginx-mod-http-ndk)"
[ -r /usr/share/lua/5.1/nginx/redis.lua ] || give_up "lua-resty-redis missing (apt-get install lua-nginx-redis)"
if command -v luajit >/dev/null 2>&1; then   # nginx's own LuaJIT has the same search path
  luajit -e 'require("cjson")' 2>/dev/null || give_up "lua-cjson missing for LuaJIT (apt-get install lua-cjson)"
fi
"$LUA54" -e 'package.path = package.path .. ";/usr/share/lua/5.3/?.lua"
  require("redis"); require("socket"); require("cjson")' 2>/dev/null ||
  give_up "$LUA54 cannot load redis (lua-redis), socket (lua-socket) and cjson (lua-cjson)"
lj_cflags=$(pkg-config --cflags luajit 2>/dev/null) || give_up "pkg-config luajit failed (libluajit-5.1-dev)"
l54_cflags=$(pkg-config --cflags lua5.4 2>/dev/null) || give_up "pkg-config lua5.4 failed (liblua5.4-dev)"

prefix=$(mktemp -d "${TMPDIR:-/tmp}/hwt-jobs-nginx.XXXXXX") || give_up "mktemp -d failed"
mkdir -p "$prefix/logs" "$prefix/conf" "$prefix/tmp" "$prefix/redis" "$prefix/lib/hwt" "$prefix/lib54/hwt"

build() {  # build OUT CFLAGS
  # shellcheck disable=SC2086  # $2 is a list of flags
  (cd "$ROOT/src" && "$CC" -std=c11 -O2 -fPIC -shared -pthread $2 -o "$1" wheel.c engine.c lhwt.c) \
    >>"$prefix/build.log" 2>&1
}
if build "$prefix/lib/hwt/core.so" "$lj_cflags" && build "$prefix/lib54/hwt/core.so" "$l54_cflags"; then
  pass "hwt.core builds for LuaJIT and Lua 5.4"
else
  sed 's/^/    /' "$prefix/build.log" | head -n 20
  give_up "hwt.core does not build"
fi

# ---- ports, redis-server, nginx ------------------------------------------------
port_in_use() {
  hex=$(printf '%04X' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }'
}

pick_port() {  # pick_port [AVOID]
  n=0
  while [ "$n" -lt 50 ]; do
    r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
    p=$((20000 + r % 30000))
    if [ "$p" != "${1:-}" ] && ! port_in_use "$p"; then echo "$p"; return 0; fi
    n=$((n + 1))
  done
  return 1
}

start_redis() {  # -> 0 when it answers PING on $redis_port
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$prefix/redis" --logfile "$prefix/logs/redis.log" </dev/null >/dev/null 2>&1 &
  redis_pid=$!
  i=0
  while [ "$i" -lt 50 ]; do
    alive "$redis_pid" || { wait "$redis_pid" 2>/dev/null; redis_pid=""; return 1; }
    [ "$(timeout 2 redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && return 0
    nap 0.1
    i=$((i + 1))
  done
  return 1
}

if [ "$(id -u)" = 0 ]; then user_line="user root $(id -gn);"; else user_line=""; fi

write_conf() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$port|g" -e "s|@REDIS_PORT@|$redis_port|g" \
      -e "s|@LUA_DIR@|$ROOT/lua|g" -e "s|@TEST_DIR@|$HERE|g" -e "s|@CPATH_DIR@|$prefix/lib|g" \
      -e "s|@USER@|$user_line|g" -e "s|@NDK_MODULE@|$NGX_NDK_MODULE|g" \
      -e "s|@LUA_MODULE@|$NGX_LUA_MODULE|g" "$HERE/nginx.conf" >"$prefix/conf/nginx.conf"
  for d in proxy_temp_path fastcgi_temp_path uwsgi_temp_path scgi_temp_path; do
    grep -qa "$d" "$NGINX" || sed -i "/^[[:space:]]*$d /d" "$prefix/conf/nginx.conf"
  done
}

start_nginx() {  # -> 0 when it answers on $port
  "$NGINX" -p "$prefix/" -c "$prefix/conf/nginx.conf" -e "$prefix/logs/error.log" \
    >"$prefix/logs/stdout.log" 2>&1 </dev/null &
  ngx_pid=$!
  i=0
  while [ "$i" -lt 50 ]; do
    alive "$ngx_pid" || { wait "$ngx_pid" 2>/dev/null; ngx_pid=""; return 1; }
    [ "$(curl -s --max-time 1 "http://127.0.0.1:$port/ping")" = pong ] && return 0
    nap 0.1
    i=$((i + 1))
  done
  return 1
}

# start_server NAME LOG: up to 3 tries, a new port after losing a race for one.
start_server() {
  tries=0
  while [ "$tries" -lt 3 ]; do
    tries=$((tries + 1))
    if [ "$1" = redis ]; then
      redis_port=$(pick_port) || return 1
      start_redis && return 0
      stop_redis
    else
      port=$(pick_port "$redis_port") || return 1
      write_conf
      start_nginx && return 0
      stop_nginx
    fi
    grep -q 'Address already in use' "$2" 2>/dev/null || break
  done
  sed 's/^/    /' "$2" 2>/dev/null | tail -n 20
  return 1
}

start_server redis "$prefix/logs/redis.log" || give_up "redis-server does not start"
pass "redis-server answers on 127.0.0.1:$redis_port (pid $redis_pid)"
start_server nginx "$prefix/logs/error.log" || give_up "nginx does not start"
pass "nginx answers on 127.0.0.1:$port (pid $ngx_pid, 2 workers)"

# ---- 1 and 3b: Lua 5.4 schedules, nginx runs --------------------------------
expect_eq "Lua 5.4 schedules 200 jobs due over 1 s, and 5 it cancels at once (cancel true)" \
  "scheduled 200, cancelled 5" "$(plain schedule "$redis_port" 200 1 5)"
verified "nginx ran them (a cosocket RPUSH in each), not the 5 cancelled" to_nginx \
  "ran 200 of 200 once, missing 0, duplicates 0, cancelled 5 (ran 0), unexpected 0, early 0, left due 0 claims 0 dead 0" 8

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

# ---- 4: nginx's log, after a graceful stop --------------------------------------
stop_nginx
bad=$(grep -E '\[(error|crit|alert|emerg)\]' "$prefix/logs/error.log")
if [ -z "$bad" ]; then
  pass "nginx error.log has no error/crit/alert/emerg lines"
else
  fail "nginx error.log has no error/crit/alert/emerg lines:"
  echo "$bad" | head -n 10 | sed 's/^/    /'
fi

echo "($(($(date +%s) - started)) s)"
summary
[ "$failed" -eq 0 ]
