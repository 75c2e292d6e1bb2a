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
BUDGET=20
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

expect_ge() {  # expect_ge LABEL MIN ACTUAL
  case $3 in
    ''|*[!0-9]*) fail "$1 (expected a number >= $2, got '$3')"; return ;;
  esac
  if [ "$3" -ge "$2" ]; then pass "$1 ($3)"; else fail "$1 (expected >= $2, got $3)"; fi
}

stop_nginx() {
  [ -n "$ngx_pid" ] || return 0
  master=$ngx_pid
  if [ -s "$prefix/logs/nginx.pid" ]; then master=$(cat "$prefix/logs/nginx.pid"); fi
  [ "$master" = "$ngx_pid" ] || master=$ngx_pid   # only ever signal our own child
  workers=$(ps -o pid= --ppid "$master" 2>/dev/null)
  kill -QUIT "$master" 2>/dev/null
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

expect_eq "/cancel_all cancels the 10000" "cancelled 10000" "$(get /cancel_all)"
expect_eq "/pending after /cancel_all" "0" "$(get /pending)"

# ---- stop, then read the error log ------------------------------------------
stop_nginx
if [ "$stopped" = yes ]; then pass "nginx stops on SIGQUIT within 5 s"; else fail "nginx stops on SIGQUIT within 5 s (killed)"; fi
bad=$(grep -E '\[(error|crit|alert|emerg)\]' "$prefix/logs/error.log" 2>/dev/null)
if [ -z "$bad" ]; then
  pass "error.log has no error/crit/alert/emerg lines"
else
  fail "error.log has no error/crit/alert/emerg lines:"
  echo "$bad" | head -n 10 | sed 's/^/    /'
fi

echo "($(($(date +%s) - started)) s)"
summary
[ "$failed" -eq 0 ]
