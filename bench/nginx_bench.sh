#!/bin/sh
# hwt in nginx: idle wake-ups and lateness.   sh bench/nginx_bench.sh
#
# 1. Idle wake-ups/s of the nginx worker's main thread with 1,000 hwt
#    timeouts pending an hour ahead (nothing due), over IDLE_SECONDS (5) with
#    no request in the window: voluntary + nonvoluntary context switches from
#    /proc/<worker>/task/<worker>/status. Modes, each its own nginx instance
#    (one worker), measured over the same window:
#      idle_none    nginx + lua-nginx-module, no timer at all (the floor)
#      idle_recipe  hwt drained by ngx.timer.every(0.01, function(p) if not p
#                   then timer:poll() end end)  ("today's recipe")
#      idle_driver  require("hwt.ngx").start(timer)
#    The worker's other threads (hwt's engine thread) are counted apart.
# 2. Lateness (task start - deadline, both by hwt.now(), CLOCK_MONOTONIC) of
#    N (10,000) timeouts with delays uniform in [0.1, 2.1) s, all scheduled
#    from one HTTP request; results fetched from /results once all have run
#    (bounded wait). One instance each, one after the other:
#      late_driver        hwt.ngx: each task in its own light thread (tick 10 ms)
#      late_driver_tick1  the same, hwt.new({ tick = 0.001 })
#      late_timer_at      one ngx.timer.at per timeout
#    Also: lateness with each delay counted from nginx's cached clock at the
#    request (what ngx.timer.at counts from; see hwt_nginx_bench.lua).
#
# The Lua side is bench/nginx/hwt_nginx_bench.lua, the configuration
# bench/nginx/nginx.conf. hwt/core.so is built for LuaJIT into a mktemp -d
# prefix, as test/nginx_test.sh does. Listens on 127.0.0.1 only; every nginx
# it starts is stopped on exit (SIGQUIT, then SIGKILL after 5 s); the whole
# run is bounded (about 20 s; no new step after BUDGET seconds).
# Prints two Markdown tables. Exits non-zero when something could not be run.
#
# Environment: NGINX, NGX_LUA_MODULE, NGX_NDK_MODULE, CC, IDLE_SECONDS (5),
# N (10000), HWT_KEEP=1 (keep the scratch prefix).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench/nginx
IDLE_SECONDS=${IDLE_SECONDS:-5}
N=${N:-10000}
SPREAD=2
OFFSET=0.1
BUDGET=50
started=$(date +%s)
base=""
instances=""    # modes started and not yet stopped

say() { printf '%s\n' "$*" >&2; }
die() { say "nginx_bench: $*"; exit 1; }
# A sleep the traps can interrupt: dash runs a trap only once the foreground
# command ends, but at once during the wait builtin.
nap_pid=""
nap() {
  sleep "$1" 2>/dev/null &
  nap_pid=$!
  wait "$nap_pid"
  nap_pid=""
}
now() { date +%s.%N; }
over_budget() { [ $(($(date +%s) - started)) -ge "$BUDGET" ]; }

alive() {
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/stat" ]; then
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ "$state" != Z ] || return 1
  fi
  return 0
}

# get MODE PATH -> body
get() {
  over_budget && { say "over the ${BUDGET}s budget: $2 not requested"; return 1; }
  curl -sS --fail --max-time 5 "http://127.0.0.1:$(cat "$base/$1/port")$2"
}

stop_instance() {  # stop_instance MODE
  d=$base/$1
  [ -s "$d/ngx_pid" ] || return 0
  child=$(cat "$d/ngx_pid")
  workers=$(ps -o pid= --ppid "$child" 2>/dev/null)
  kill -QUIT "$child" 2>/dev/null
  i=0
  while alive "$child" && [ "$i" -lt 50 ]; do nap 0.1; i=$((i + 1)); done
  if alive "$child"; then
    say "nginx_bench: $1 did not stop on SIGQUIT within 5 s: killed"
    echo killed >"$d/stop"
    for w in $workers; do kill -KILL "$w" 2>/dev/null; done
    kill -KILL "$child" 2>/dev/null
  fi
  wait "$child" 2>/dev/null
  : >"$d/ngx_pid"
  instances=$(echo "$instances" | tr ' ' '\n' | grep -vx "$1" | tr '\n' ' ')
  # error.log lines at error level and above, kept for the summary.
  grep -E '\[(error|crit|alert|emerg)\]' "$d/logs/error.log" 2>/dev/null >"$d/bad"
}

# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  [ -z "$nap_pid" ] || kill "$nap_pid" 2>/dev/null
  nap_pid=""
  for m in $instances; do stop_instance "$m"; done
  if [ -n "$base" ] && [ -d "$base" ]; then
    if [ "${HWT_KEEP:-0}" = 1 ]; then say "kept $base"; else rm -rf "$base"; fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ---- nginx, its Lua module, LuaJIT's headers (as test/nginx_test.sh) -------
NGINX=${NGINX:-$(command -v nginx 2>/dev/null)}
[ -n "$NGINX" ] || for n in /usr/sbin/nginx /usr/local/sbin/nginx /usr/local/nginx/sbin/nginx \
                            /usr/local/openresty/nginx/sbin/nginx; do
  [ -x "$n" ] && { NGINX=$n; break; }
done
{ [ -n "$NGINX" ] && [ -x "$NGINX" ]; } || die "nginx not found (apt-get install nginx-light libnginx-mod-http-lua)"
command -v curl >/dev/null 2>&1 || die "curl not found"
ngx_v=$("$NGINX" -V 2>&1)
ngx_prefix=$(echo "$ngx_v" | tr ' ' '\n' | sed -n 's/^--prefix=//p')

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
  load_lines=""
else
  NGX_LUA_MODULE=${NGX_LUA_MODULE:-$(find_module ngx_http_lua_module.so mod-http-lua.conf)}
  NGX_NDK_MODULE=${NGX_NDK_MODULE:-$(find_module ndk_http_module.so mod-http-ndk.conf)}
  [ -n "$NGX_LUA_MODULE" ] || die "ngx_http_lua_module.so not found (apt-get install libnginx-mod-http-lua)"
  [ -n "$NGX_NDK_MODULE" ] || die "ndk_http_module.so not found (apt-get install libnginx-mod-http-ndk)"
  load_lines=yes
fi
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || die "no C compiler ($CC)"
lj_cflags=$(pkg-config --cflags luajit 2>/dev/null) || die "pkg-config luajit failed (apt-get install libluajit-5.1-dev pkg-config)"

base=$(mktemp -d "${TMPDIR:-/tmp}/hwt-nginx-bench.XXXXXX") || die "mktemp -d failed"
mkdir -p "$base/lib/hwt"
# shellcheck disable=SC2086
(cd "$ROOT/src" && "$CC" -std=c11 -O2 -fPIC -shared -pthread $lj_cflags \
   -o "$base/lib/hwt/core.so" wheel.c engine.c lhwt.c -ldl) >"$base/build.log" 2>&1 ||
  { sed 's/^/    /' "$base/build.log" | head -n 20 >&2; die "hwt.core does not build against LuaJIT"; }

if [ "$(id -u)" = 0 ]; then user_line="user root $(id -gn);"; else user_line="# not root"; fi

port_in_use() {
  hex=$(printf '%04X' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }'
}
pick_port() {
  n=0
  while [ "$n" -lt 50 ]; do
    r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
    p=$((20000 + r % 30000))
    port_in_use "$p" || { echo "$p"; return 0; }
    n=$((n + 1))
  done
  return 1
}

start_instance() {  # start_instance MODE -> 0 once /pid answers
  d=$base/$1
  mkdir -p "$d/logs" "$d/conf" "$d/tmp"
  tries=0
  while [ "$tries" -lt 3 ]; do
    tries=$((tries + 1))
    port=$(pick_port) || { say "no free port"; return 1; }
    echo "$port" >"$d/port"
    sed -e "s|@PREFIX@|$d|g" -e "s|@PORT@|$port|g" -e "s|@MODE@|$1|g" \
        -e "s|@LUA_DIR@|$ROOT/lua|g" -e "s|@BENCH_DIR@|$BENCH|g" \
        -e "s|@CPATH_DIR@|$base/lib|g" -e "s|@USER@|$user_line|g" \
        -e "s|@NDK_MODULE@|${NGX_NDK_MODULE:-}|g" -e "s|@LUA_MODULE@|${NGX_LUA_MODULE:-}|g" \
        "$BENCH/nginx.conf" >"$d/conf/nginx.conf"
    [ -n "$load_lines" ] || sed -i '/^load_module/d' "$d/conf/nginx.conf"
    for t in proxy_temp_path fastcgi_temp_path uwsgi_temp_path scgi_temp_path; do
      grep -qa "$t" "$NGINX" || sed -i "/^[[:space:]]*$t /d" "$d/conf/nginx.conf"
    done
    : >"$d/logs/error.log"
    "$NGINX" -p "$d/" -c "$d/conf/nginx.conf" -e "$d/logs/error.log" \
      >"$d/logs/stdout.log" 2>&1 </dev/null &
    echo $! >"$d/ngx_pid"
    instances="$instances $1"
    i=0
    while [ "$i" -lt 50 ]; do
      alive "$(cat "$d/ngx_pid")" || break
      curl -s --fail --max-time 1 -o /dev/null "http://127.0.0.1:$port/pid" && return 0
      nap 0.1
      i=$((i + 1))
    done
    stop_instance "$1"
    grep -q 'Address already in use' "$d/logs/error.log" 2>/dev/null || break
  done
  say "nginx_bench: $1 does not start:"
  tail -n 20 "$d/logs/error.log" "$d/logs/stdout.log" 2>/dev/null | sed 's/^/    /' >&2
  return 1
}

# switches PID TID -> voluntary + nonvoluntary context switches of one thread
switches() {
  awk '/^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 }
       END { print v + n }' "/proc/$1/task/$2/status" 2>/dev/null
}
# other_switches PID -> the same, summed over the process's other threads
other_switches() {
  s=0
  for t in /proc/"$1"/task/*; do
    tid=${t##*/}
    [ "$tid" = "$1" ] && continue
    s=$((s + $(switches "$1" "$tid")))
  done
  echo "$s"
}
threads() { set -- /proc/"$1"/task/*; echo "$#"; }

# ---- 1. idle wake-ups ---------------------------------------------------------
IDLE_MODES="idle_none idle_recipe idle_driver"
for m in $IDLE_MODES; do start_instance "$m" || exit 1; done
for m in $IDLE_MODES; do
  get "$m" "/setup?n=1000&delay=3600" >"$base/$m/setup" || die "$m: /setup failed"
  get "$m" /pid >"$base/$m/wpid" || die "$m: /pid failed"
done
nap 1    # let the requests' after-effects settle: no request from here on
for m in $IDLE_MODES; do
  w=$(cat "$base/$m/wpid")
  switches "$w" "$w" >"$base/$m/sw0"; other_switches "$w" >"$base/$m/osw0"
done
t0=$(now)
nap "$IDLE_SECONDS"
t1=$(now)
for m in $IDLE_MODES; do
  w=$(cat "$base/$m/wpid")
  switches "$w" "$w" >"$base/$m/sw1"; other_switches "$w" >"$base/$m/osw1"
  threads "$w" >"$base/$m/threads"
done
for m in $IDLE_MODES; do
  get "$m" /stats >"$base/$m/stats" 2>/dev/null || echo "no /stats" >"$base/$m/stats"
  stop_instance "$m"
done
rate() {  # rate MODE FILE0 FILE1 -> per second over the window
  awk -v a="$(cat "$base/$1/$2")" -v b="$(cat "$base/$1/$3")" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%.1f", (b - a) / (t1 - t0) }'
}

# ---- 2. lateness ----------------------------------------------------------------
LATE_MODES="late_driver late_driver_tick1 late_timer_at"
for m in $LATE_MODES; do
  start_instance "$m" || exit 1
  get "$m" "/schedule?n=$N&spread=$SPREAD&offset=$OFFSET" >"$base/$m/schedule" ||
    die "$m: /schedule failed"
  # Bounded wait: the last deadline is OFFSET + SPREAD s away; allow 8 s.
  nap 2
  i=0
  while :; do
    r=$(get "$m" /results) || break
    case $r in done*) break ;; esac
    [ "$i" -ge 30 ] && break
    nap 0.2
    i=$((i + 1))
  done
  echo "$r" >"$base/$m/results"
  stop_instance "$m"
done

field() {  # field MODE KEY -> value of KEY=value in MODE's /results line
  tr ' ' '\n' <"$base/$1/results" | sed -n "s/^$2=//p"
}

# ---- the tables ---------------------------------------------------------------
echo "Idle: 1,000 hwt timeouts pending 1 h ahead, ${IDLE_SECONDS} s with no request (one nginx worker each)."
echo
echo "| worker thread | bare nginx (no timer) | today's recipe: ngx.timer.every(0.01) + poll | hwt.ngx |"
echo "|---|---:|---:|---:|"
printf '| main thread: wake-ups/s (voluntary + nonvoluntary switches) | %s | %s | %s |\n' \
  "$(rate idle_none sw0 sw1)" "$(rate idle_recipe sw0 sw1)" "$(rate idle_driver sw0 sw1)"
printf '| other threads (hwt engine): wake-ups/s | %s | %s | %s |\n' \
  "$(rate idle_none osw0 osw1)" "$(rate idle_recipe osw0 osw1)" "$(rate idle_driver osw0 osw1)"
printf '| threads in the worker | %s | %s | %s |\n' \
  "$(cat "$base/idle_none/threads")" "$(cat "$base/idle_recipe/threads")" "$(cat "$base/idle_driver/threads")"
echo
echo "Lateness: $N timeouts, delays uniform in [$OFFSET, $(awk -v a="$OFFSET" -v b="$SPREAD" 'BEGIN{print a+b}')) s, scheduled from one request; start - deadline by hwt.now()."
echo
echo "| | hwt.ngx (tick 10 ms, the default) | hwt.ngx (tick 1 ms) | ngx.timer.at |"
echo "|---|---:|---:|---:|"
for row in "ran:ran" "early (start < deadline):early" "early by at most, ms:early_max_ms" \
           "lateness p50, ms:p50_ms" "lateness p99, ms:p99_ms" "lateness max, ms:max_ms" \
           "scheduling all $N in the request, ms:sched_ms" \
           "delay counted from nginx's cached clock at the request (+-1 ms): p50, ms:p50c_ms" \
           "delay counted from nginx's cached clock at the request (+-1 ms): p99, ms:p99c_ms" \
           "(that cached clock lagged the scheduling loop's start by, ms):stale_ms"; do
  label=${row%:*}; key=${row##*:}
  printf '| %s | %s | %s | %s |\n' "$label" "$(field late_driver "$key")" \
    "$(field late_driver_tick1 "$key")" "$(field late_timer_at "$key")"
done
echo
echo "Command: \`sh bench/nginx_bench.sh\` ($(($(date +%s) - started)) s; $("$NGINX" -v 2>&1 | sed 's/.*: //'), LuaJIT $(pkg-config --modversion luajit))"

# ---- anything odd -------------------------------------------------------------
status=0
for m in $IDLE_MODES; do
  case $m in idle_none) want="no timer" ;; *) want="pending 1000 fired 0 due 0" ;; esac
  grep -q "$want" "$base/$m/stats" || { say "odd: $m /stats after the window: $(cat "$base/$m/stats")"; status=1; }
done
for m in $LATE_MODES; do
  case $(cat "$base/$m/results") in
    done*) ;;
    *) say "odd: $m did not finish within the wait: $(cat "$base/$m/results")"; status=1; continue ;;
  esac
  [ "$(field "$m" ran)" = "$N" ] || { say "odd: $m ran $(field "$m" ran) of $N"; status=1; }
  [ "$(field "$m" early)" = 0 ] || say "note: $m started $(field "$m" early) tasks before their deadline"
  [ "$(field "$m" twice)" = 0 ] || { say "odd: $m started $(field "$m" twice) tasks twice"; status=1; }
done
for m in $IDLE_MODES $LATE_MODES; do
  [ -f "$base/$m/stop" ] && status=1
  if [ -s "$base/$m/bad" ]; then
    say "odd: $m error.log:"; head -n 5 "$base/$m/bad" | sed 's/^/    /' >&2; status=1
  fi
done
exit "$status"
