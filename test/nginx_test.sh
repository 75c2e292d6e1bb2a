#!/bin/sh
# hwt inside nginx (lua-nginx-module): builds hwt.core for LuaJIT into a
# scratch prefix, starts a private nginx on a free 127.0.0.1 port with
# examples/nginx/nginx.conf, and drives examples/nginx/hwt_demo.lua with curl.
# Prints each check, then exactly one line "nginx: N passed, N failed".
# Exits non-zero on any failure, and when nginx, the Lua module, a C compiler
# or LuaJIT's headers are missing (counted as one failure, reason printed).
#
# Environment: NGINX (binary), NGX_LUA_MODULE and NGX_NDK_MODULE (module .so
# paths), CC, HWT_SRC (the C sources, default src/), HWT_KEEP=1 (keep the
# scratch prefix). Never touches the system
# nginx configuration, its pid file or port 80; listens on loopback only.
# Every wait is bounded: curl --max-time 5, and no new request once
# BUDGET seconds have passed.

ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXAMPLE=$ROOT/examples/nginx
BUDGET=90
passed=0
failed=0
prefix=""
ngx_pid=""
started=$(date +%s)

pass() { passed=$((passed + 1)); echo "ok     $1"; }
fail() { failed=$((failed + 1)); echo "FAIL   $1"; }
summary() { echo "nginx: $passed passed, $failed failed"; }

# A prerequisite is missing: say why, count one failure, stop.
give_up() {
  echo "nginx: cannot run: $1"
  failed=$((failed + 1))
  summary
  exit 1
}

nap() { sleep "$1" 2>/dev/null || sleep 1; }   # fractional where sleep allows

# alive PID: the process exists and is not a zombie waiting for us to reap it.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/stat" ]; then
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ "$state" != Z ] || return 1
  fi
  return 0
}

# GET PATH -> body on stdout; fails on HTTP errors, timeouts and over budget.
get() {
  if [ $(($(date +%s) - started)) -ge "$BUDGET" ]; then
    echo "over the ${BUDGET}s budget, $1 not requested" >&2
    return 1
  fi
  curl -sS --fail --max-time 5 "http://127.0.0.1:$port$1"
}

expect_eq() {  # expect_eq LABEL EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1 (expected '$2', got '$3')"; fi
}

expect_le() {  # expect_le LABEL MAX ACTUAL
  case $3 in
    ''|*[!0-9]*) fail "$1 (expected a number <= $2, got '$3')"; return ;;
  esac
  if [ "$3" -le "$2" ]; then pass "$1 ($3)"; else fail "$1 (expected <= $2, got $3)"; fi
}

# wait_for PATH EXPECTED SECONDS: polls PATH until its body is EXPECTED.
wait_for() {
  deadline=$(($(date +%s) + $3))
  while :; do
    body=$(get "$1") || return 1
    [ "$body" = "$2" ] && return 0
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    nap 0.2
  done
}

# The worker's main thread: voluntary + involuntary context switches.
worker_switches() {
  awk '/ctxt_switches/ { n += $2 } END { print n }' "/proc/$1/task/$1/status"
}

rss_kb() { get /memory | sed -n 's/^rss_kb \([0-9]*\).*/\1/p'; }

expect_ge() {  # expect_ge LABEL MIN ACTUAL
  case $3 in
    ''|*[!0-9]*) fail "$1 (expected a number >= $2, got '$3')"; return ;;
  esac
  if [ "$3" -ge "$2" ]; then pass "$1 ($3)"; else fail "$1 (expected >= $2, got $3)"; fi
}

stop_nginx() {  # stop_nginx [SIGNAL]: QUIT (graceful, the default) or TERM (fast)
  [ -n "$ngx_pid" ] || return 0
  master=$ngx_pid
  if [ -s "$prefix/logs/nginx.pid" ]; then master=$(cat "$prefix/logs/nginx.pid"); fi
  [ "$master" = "$ngx_pid" ] || master=$ngx_pid   # only ever signal our own child
  workers=$(ps -o pid= --ppid "$master" 2>/dev/null)
  kill -"${1:-QUIT}" "$master" 2>/dev/null
  i=0
  while alive "$master" && [ "$i" -lt 50 ]; do nap 0.1; i=$((i + 1)); done
  stopped=yes
  if alive "$master"; then
    stopped=no
    for w in $workers; do kill -KILL "$w" 2>/dev/null; done
    kill -KILL "$master" 2>/dev/null
  fi
  wait "$ngx_pid" 2>/dev/null
  ngx_pid=""
}

cleanup() {
  stop_nginx
  if [ -n "$prefix" ] && [ -d "$prefix" ]; then
    if [ "${HWT_KEEP:-0}" = 1 ]; then echo "kept $prefix" >&2; else rm -rf "$prefix"; fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

# ---- find nginx, the Lua module and a LuaJIT toolchain --------------------
NGINX=${NGINX:-$(command -v nginx 2>/dev/null)}
[ -n "$NGINX" ] || for n in /usr/sbin/nginx /usr/local/sbin/nginx /usr/local/nginx/sbin/nginx \
                            /usr/local/openresty/nginx/sbin/nginx; do
  [ -x "$n" ] && { NGINX=$n; break; }
done
if [ -z "$NGINX" ] || [ ! -x "$NGINX" ]; then give_up "nginx not found (apt-get install nginx-light libnginx-mod-http-lua)"; fi
ngx_v=$("$NGINX" -V 2>&1)
ngx_prefix=$(echo "$ngx_v" | tr ' ' '\n' | sed -n 's/^--prefix=//p')

# Module path from a Debian modules-available snippet ("load_module modules/x.so;").
from_snippet() {  # from_snippet FILE NAME.so
  [ -r "$1" ] || return 1
  p=$(sed -n "s/^[[:space:]]*load_module[[:space:]]*\\([^;]*$2\\)[[:space:]]*;.*/\\1/p" "$1" | head -n 1)
  [ -n "$p" ] || return 1
  case $p in /*) ;; *) p=${ngx_prefix:-/usr/share/nginx}/$p ;; esac
  [ -r "$p" ] && echo "$p"
}

find_module() {  # find_module NAME.so SNIPPET
  from_snippet "/usr/share/nginx/modules-available/$2" "$1" && return 0
  for d in /usr/lib/nginx/modules /usr/share/nginx/modules /usr/lib64/nginx/modules \
           /usr/local/nginx/modules /etc/nginx/modules "${ngx_prefix:-/nonexistent}/modules"; do
    [ -r "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

if echo "$ngx_v" | grep -q 'lua-nginx-module\|ngx_lua\|openresty'; then
  load_lines=""   # built in (OpenResty): nothing to load
  echo "Lua module: built into $NGINX"
else
  NGX_LUA_MODULE=${NGX_LUA_MODULE:-$(find_module ngx_http_lua_module.so mod-http-lua.conf)}
  NGX_NDK_MODULE=${NGX_NDK_MODULE:-$(find_module ndk_http_module.so mod-http-ndk.conf)}
  [ -n "$NGX_LUA_MODULE" ] || give_up "ngx_http_lua_module.so not found (apt-get install libnginx-mod-http-lua)"
  [ -n "$NGX_NDK_MODULE" ] || give_up "ndk_http_module.so not found (apt-get install libnginx-mod-http-ndk)"
  load_lines=yes
  echo "using $NGINX; modules: $NGX_NDK_MODULE, $NGX_LUA_MODULE"
fi

CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || give_up "no C compiler ($CC)"
lj_cflags=$(pkg-config --cflags luajit 2>/dev/null) || give_up "pkg-config luajit failed (apt-get install libluajit-5.1-dev pkg-config)"

prefix=$(mktemp -d "${TMPDIR:-/tmp}/hwt-nginx.XXXXXX") || give_up "mktemp -d failed"
mkdir -p "$prefix/logs" "$prefix/conf" "$prefix/tmp" "$prefix/lib/hwt"

# ---- build hwt.core for LuaJIT (the 5.1 ABI nginx's Lua VM uses) ----------
src=${HWT_SRC:-$ROOT/src}
# shellcheck disable=SC2086  # $lj_cflags is a list of flags
if (cd "$src" && "$CC" -std=c11 -O2 -fPIC -shared -pthread $lj_cflags \
      -o "$prefix/lib/hwt/core.so" wheel.c engine.c lhwt.c) >"$prefix/build.log" 2>&1; then
  pass "hwt.core builds against LuaJIT"
else
  sed 's/^/    /' "$prefix/build.log" | head -n 20
  give_up "hwt.core does not build against LuaJIT ($(pkg-config --modversion luajit 2>/dev/null))"
fi

# ---- a free loopback port and the configuration ---------------------------
port_in_use() {  # any socket bound to this local port, v4 or v6
  if [ -r /proc/net/tcp ]; then
    hex=$(printf '%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
      awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }'
  else
    curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$1/"; [ $? -ne 7 ]
  fi
}

pick_port() {
  n=0
  while [ "$n" -lt 50 ]; do
    r=$(od -An -N2 -tu2 /dev/urandom 2>/dev/null | tr -d ' ')
    [ -n "$r" ] || r=$(( ($$ * 7919 + n * 104729) % 65536 ))
    p=$((20000 + r % 30000))
    if ! port_in_use "$p"; then echo "$p"; return 0; fi
    n=$((n + 1))
  done
  return 1
}

if [ "$(id -u)" = 0 ]; then
  # nginx started by root would run its worker as "nobody", which cannot
  # read the 0700 scratch prefix; this private instance runs it as root.
  user_line="user root $(id -gn);"
else
  user_line="# not root: the worker runs as $(id -un)"
fi

write_conf() {  # write_conf PORT
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$1|g" \
      -e "s|@LUA_DIR@|$ROOT/lua|g" -e "s|@DEMO_DIR@|$EXAMPLE|g" \
      -e "s|@CPATH_DIR@|$prefix/lib|g" -e "s|@USER@|$user_line|g" \
      -e "s|@NDK_MODULE@|${NGX_NDK_MODULE:-}|g" -e "s|@LUA_MODULE@|${NGX_LUA_MODULE:-}|g" \
      "$EXAMPLE/nginx.conf" >"$prefix/conf/nginx.conf.tmp"
  [ -n "$load_lines" ] || sed -i '/^load_module/d' "$prefix/conf/nginx.conf.tmp"
  # Drop temp-path directives of modules this nginx was built without.
  for d in proxy_temp_path fastcgi_temp_path uwsgi_temp_path scgi_temp_path; do
    grep -qa "$d" "$NGINX" || sed -i "/^[[:space:]]*$d /d" "$prefix/conf/nginx.conf.tmp"
  done
  mv "$prefix/conf/nginx.conf.tmp" "$prefix/conf/nginx.conf"
}

start_nginx() {  # start_nginx -> 0 when it answers on $port
  "$NGINX" -p "$prefix/" -c "$prefix/conf/nginx.conf" -e "$prefix/logs/error.log" \
    >"$prefix/logs/stdout.log" 2>&1 </dev/null &
  ngx_pid=$!
  i=0
  while [ "$i" -lt 50 ]; do
    if ! alive "$ngx_pid"; then wait "$ngx_pid" 2>/dev/null; ngx_pid=""; return 1; fi
    curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$port/pending" && return 0
    nap 0.1
    i=$((i + 1))
  done
  return 1
}

tries=0
while :; do
  tries=$((tries + 1))
  port=$(pick_port) || give_up "no free port found in 20000-49999"
  write_conf "$port"
  if [ "$tries" -eq 1 ]; then
    if "$NGINX" -t -q -p "$prefix/" -c "$prefix/conf/nginx.conf" -e "$prefix/logs/error.log" \
         >"$prefix/logs/t.log" 2>&1; then
      pass "configuration accepted (nginx -t)"
    else
      sed 's/^/    /' "$prefix/logs/t.log" "$prefix/logs/error.log" 2>/dev/null | tail -n 20
      fail "configuration accepted (nginx -t)"
      summary; exit 1
    fi
  fi
  start_nginx && break
  if [ "$tries" -lt 3 ] && grep -q 'Address already in use' "$prefix/logs/error.log" 2>/dev/null; then
    stop_nginx; continue                                   # lost a race for the port
  fi
  sed 's/^/    /' "$prefix/logs/error.log" 2>/dev/null | tail -n 20
  fail "nginx starts and answers on 127.0.0.1:$port"
  summary; exit 1
done
pass "nginx starts and answers on 127.0.0.1:$port (pid $ngx_pid)"
master_pid=$(cat "$prefix/logs/nginx.pid" 2>/dev/null)
expect_eq "pid file names the master" "$ngx_pid" "$master_pid"

# ---- schedule and cancel ---------------------------------------------------
expect_eq "/schedule a" "scheduled a in 0.2" "$(get '/schedule?id=a&delay=0.2')"
expect_eq "/schedule b" "scheduled b in 0.2" "$(get '/schedule?id=b&delay=0.2')"
expect_eq "/cancel b returns true" "true" "$(get '/cancel?id=b')"
expect_eq "/cancel b again returns false" "false" "$(get '/cancel?id=b')"
nap 0.5
fired=$(get /fired)
if echo "$fired" | grep -qx 'fired a'; then pass "a fired"; else fail "a fired (/fired: '$fired')"; fi
if echo "$fired" | grep -qx 'fired b'; then fail "b did not fire (/fired: '$fired')"; else pass "b did not fire"; fi
expect_eq "/pending after a fired" "0" "$(get /pending)"

# ---- tasks that do I/O (hwt.ngx: each task in a light thread) ---------------
expect_eq "/io schedules a task" "scheduled x" "$(get '/io?id=x&delay=0.1')"
if wait_for '/io_result?id=x' "slept true, status 200, body upstream says hi, spawned ran" 5; then
  pass "a task ngx.sleeps, fetches /upstream over a cosocket and ngx.thread.spawns"
else
  fail "a task ngx.sleeps, fetches /upstream over a cosocket and ngx.thread.spawns (got '$body')"
fi

expect_eq "/sleepers: 200 tasks due together" "scheduled 200" "$(get '/sleepers?n=200&delay=0.3&sleep=0.2')"
nap 1.2
report=$(get /sleepers_report)
late=$(echo "$report" | sed -n 's/.*late_max_ms \([0-9]*\)/\1/p')
expect_eq "all 200 sleeping tasks finished" "finished 200" "$(echo "$report" | cut -d' ' -f1-2)"
expect_le "each finished within 500 ms of its deadline (sleeping 200 ms), worst ms" 500 "$late"

expect_eq "/numbered: 5000 pending" "scheduled 5000" "$(get '/numbered?n=5000&delay=1')"
expect_eq "half of them cancelled over HTTP" "cancelled 2500" "$(get /numbered_cancel_odd)"
if wait_for /numbered_report "fired 2500 early 0 fired_cancelled 0" 5; then
  pass "exactly the 2500 others fired, none early"
else
  fail "exactly the 2500 others fired, none early (got '$body')"
fi

expect_eq "/limited: 20 tasks due at once, concurrency 4" "scheduled 20" "$(get '/limited?n=20&sleep=0.1')"
if wait_for /limited_report "done 20 max_running 4 concurrency 4" 5; then
  pass "tasks beyond the concurrency waited and ran, never more than 4 at once"
else
  fail "tasks beyond the concurrency waited and ran, never more than 4 at once (got '$body')"
fi

# ---- idle: nothing due for an hour -------------------------------------------
worker=$(ps -o pid= --ppid "$master_pid" 2>/dev/null | tr -d ' ' | head -n 1)
expect_eq "/bulk?n=1000 an hour ahead" "scheduled 1000" "$(get '/bulk?n=1000&delay=3600')"
nap 0.5
if [ -n "$worker" ] && [ -r "/proc/$worker/task/$worker/status" ]; then
  before=$(worker_switches "$worker")
  nap 3
  after=$(worker_switches "$worker")
  expect_le "worker main thread woken in 3 s idle with 1000 pending" 3 $((after - before))
else
  fail "worker main thread woken in 3 s idle (no worker pid: '$worker')"
fi

# ---- memory across 10^5 tasks after a warm-up of 10^5 -------------------------
# Each in five waves of 2*10^4 due over 0.6 s: RSS is the allocator's
# high-water mark, and one wave of 10^5 at once moves it by +-10 % from run to
# run (the garbage of 10^5 light threads), leak or not; a leak of a record per
# spawn grows it by ~30 MB per 10^5.
churn() {  # churn LABEL
  wave=1
  while [ "$wave" -le 5 ]; do
    get '/churn?n=20000&spread=0.6' >/dev/null
    wait_for /churn_report "done 20000 of 20000" 30 || break
    wave=$((wave + 1))
  done
  if [ "$wave" -gt 5 ]; then pass "$1: 5 waves of 20000 tasks ran"; else fail "$1: 5 waves of 20000 tasks ran (wave $wave: '$body')"; fi
}
churn "warm-up"
rss_warm=$(rss_kb)
churn "measured"
rss_after=$(rss_kb)
if [ -n "$rss_warm" ] && [ -n "$rss_after" ] && [ "$((rss_after * 100))" -le "$((rss_warm * 105))" ]; then
  pass "worker RSS flat across 10^5 tasks (${rss_warm} kB -> ${rss_after} kB)"
else
  fail "worker RSS flat across 10^5 tasks (${rss_warm} kB -> ${rss_after} kB, > 5 %)"
fi

# ---- far more pending timeouts than ngx.timer.at allows ---------------------
expect_eq "/bulk?n=10000 schedules 10000 at 60 s" "scheduled 10000" "$(get '/bulk?n=10000&delay=60')"
expect_ge "/pending after /bulk" 10000 "$(get /pending)"

at=$(get '/ngx_timer_at?n=1100&delay=60')
at_ok=$(echo "$at" | sed -n 's/^ok //p')
at_refused=$(echo "$at" | sed -n 's/^refused //p')
at_err=$(echo "$at" | sed -n 's/^err //p')
if [ -n "$at_ok" ] && [ -n "$at_refused" ] && [ "$at_ok" -le 1024 ] && [ "$at_refused" -ge 76 ] &&
   [ "$at_err" = "too many pending timers" ]; then
  pass "ngx.timer.at refuses past lua_max_pending_timers 1024 ($at_ok accepted, $at_refused refused: $at_err)"
else
  fail "ngx.timer.at refuses past lua_max_pending_timers 1024 (got: $(echo "$at" | tr '\n' ' '))"
fi

expect_eq "/cancel_all cancels the 11000" "cancelled 11000" "$(get /cancel_all)"
expect_eq "/pending after /cancel_all" "0" "$(get /pending)"

expect_eq "/bulk?n=7 left for on_exit" "scheduled 7" "$(get '/bulk?n=7&delay=3600')"

# ---- graceful quit, then a fast stop ---------------------------------------------
stop_nginx QUIT
if [ "$stopped" = yes ]; then pass "nginx stops on SIGQUIT within 5 s"; else fail "nginx stops on SIGQUIT within 5 s (killed)"; fi
if grep -q "hwt_demo: on_exit, 7 never ran" "$prefix/logs/error.log"; then
  pass "graceful quit passed the 7 never-run timeouts to on_exit"
else
  fail "graceful quit passed the 7 never-run timeouts to on_exit (error.log: $(grep on_exit "$prefix/logs/error.log" | tail -n 1))"
fi

if start_nginx; then
  master_pid=$(cat "$prefix/logs/nginx.pid" 2>/dev/null)
  get '/bulk?n=100&delay=3600' >/dev/null
  get '/sleepers?n=5&delay=0&sleep=30' >/dev/null       # tasks in ngx.sleep at the stop
  nap 0.3
  stop_nginx TERM
  if [ "$stopped" = yes ]; then pass "nginx stops on SIGTERM within 5 s, tasks sleeping"; else fail "nginx stops on SIGTERM within 5 s (killed)"; fi
  if grep -q "exited on signal" "$prefix/logs/error.log"; then
    fail "no worker killed by a signal: $(grep "exited on signal" "$prefix/logs/error.log" | head -n 1)"
  else
    pass "no worker killed by a signal"
  fi
else
  fail "nginx starts again for the fast stop"
fi

bad=$(grep -E '\[(error|crit|alert|emerg)\]|panic' "$prefix/logs/error.log" 2>/dev/null)
if [ -z "$bad" ]; then
  pass "error.log has no error/crit/alert/emerg/panic lines"
else
  fail "error.log has no error/crit/alert/emerg/panic lines:"
  echo "$bad" | head -n 10 | sed 's/^/    /'
fi

echo "($(($(date +%s) - started)) s)"
summary
[ "$failed" -eq 0 ]
