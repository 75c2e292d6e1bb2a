#!/bin/sh
# hwt in nginx: idle wake-ups, lateness, throughput.   sh bench/nginx_bench.sh
#
# 1. Idle wake-ups/s of the nginx worker's main thread with 1,000 hwt
#    timeouts pending an hour ahead (nothing due), over IDLE_SECONDS (5) with
#    no request in the window: voluntary + nonvoluntary context switches from
#    /proc/<worker>/task/<worker>/status. Modes, each its own nginx instance
#    (one worker), measured over the same window:
#      idle_none    nginx + lua-nginx-module, no timer at all (the floor)
#      idle_recipe  hwt drained by ngx.timer.every(0.01, function(p) if not p
#                   then timer:poll() end end)  ("today's recipe")
#      idle_driver  require("hwt.ngx").attach(timer) (start on hwt 0.2)
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
# 3. Throughput (issue 44): in one nginx worker, from ONE request handler
#    (GET /throughput), TP_N (10^5) timeouts with delays uniform in
#    [3600, 7200) s and one shared handler, each with its index as argument:
#      tp_hwt       timer:timeout(d, handler, i), the timer driven by
#                   require("hwt.ngx").attach(timer) (start on hwt 0.2);
#                   then all TP_N cancelled (t:cancel(), pseudo-random order)
#      tp_timer_at  ngx.timer.at(d, handler, i) (lua_max_pending_timers raised
#                   to fit); it cannot cancel: its TP_N stay pending until the
#                   SIGQUIT that stops the instance runs them (premature)
#      tp_floor     the floor: tp_hwt's schedule and cancel loops with hwt
#                   taken out (bench/jit_floor_loops.lua, as make bench's
#                   jitfloor peer: a cdata, an FFI call on 64 B of C memory,
#                   the table stores); no probes
#    Schedule and cancel rates (timeouts/s, timed by hwt.now()); bytes per
#    pending timeout from the worker's VmRSS (/proc/self/status) and from
#    collectgarbage("count"), each after a full collection, before and after
#    scheduling (the arrays the request itself needs are made before);
#    lateness (start - deadline by hwt.now()) of TP_PROBES (1,000) more
#    timeouts with delays uniform in [0.1, 1.1) s, scheduled while the TP_N
#    are pending (the request waits for them with ngx.sleep). TP_ROUNDS (3)
#    rounds, each a fresh instance per mode, the modes' order alternated by
#    round; the table shows medians (the ratio: the median of each round's
#    ratio). About 10 s.
#
# The Lua side is bench/nginx/hwt_nginx_bench.lua, the configuration
# bench/nginx/nginx.conf. The shell side shares test/host/nginx_lib.sh with
# test/host/nginx_test.sh: finding nginx, its Lua module and LuaJIT, building
# hwt/core.so for LuaJIT into a mktemp -d prefix, ports, starting and stopping
# nginx. Listens on 127.0.0.1 only; every nginx it starts is stopped on exit
# (SIGQUIT, then SIGKILL after 5 s); the whole run is bounded (about 25 s; no
# new request after BUDGET seconds).
# Prints a Markdown table per section. Exits non-zero when something could
# not be run or looks wrong (never on a timing).
#
# Environment: ONLY (the sections to run, of "idle late throughput"; all by
# default: ONLY=throughput runs the third alone), NGINX, NGX_LUA_MODULE,
# NGX_NDK_MODULE, CC, HWT_SRC (the C sources of hwt/core.so, default src/),
# HWT_LUA_PATH (where nginx finds hwt.lua and hwt/*.lua, a Lua path, default
# lua/?.lua; no "|" or "&" in it), IDLE_SECONDS (5), N (10000), TP_N (100000),
# TP_PROBES (1000), TP_ROUNDS (3), HWT_KEEP=1 (keep the scratch prefix),
# TMPDIR.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench/nginx
IDLE_SECONDS=${IDLE_SECONDS:-5}
N=${N:-10000}
SPREAD=2
OFFSET=0.1
LABEL=nginx_bench
BUDGET=90
ONLY=$(echo "${ONLY:-idle late throughput}" | tr ',' ' ')
TP_N=${TP_N:-100000}
TP_PROBES=${TP_PROBES:-1000}
TP_ROUNDS=${TP_ROUNDS:-3}
HWT_LUA_PATH=${HWT_LUA_PATH:-$ROOT/lua/?.lua}
# shellcheck source=test/host/nginx_lib.sh
. "$ROOT/test/host/nginx_lib.sh"
base=""
mode=""
inst=""
instances=""    # instances started and not yet stopped

say() { printf '%s\n' "$*" >&2; }
die() { say "nginx_bench: $*"; exit 1; }
# The lib's find_* and make_prefix report a missing prerequisite through
# give_up, which counts a failure for a test's summary: the benchmark has
# none, so the reason goes to stderr and it exits 1.
give_up() { die "$1"; }
now() { date +%s.%N; }
wants() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }

# get_from INSTANCE PATH -> body: the lib's get, on INSTANCE's port.
get_from() { port=$(cat "$base/$1/port"); get "$2"; }

stop_instance() {  # stop_instance INSTANCE
  d=$base/$1
  [ -s "$d/ngx_pid" ] || return 0
  stop "$(cat "$d/ngx_pid")" QUIT
  if [ "$stopped" = no ]; then
    say "nginx_bench: $1 did not stop on SIGQUIT within 5 s: killed"
    echo killed >"$d/stop"
  fi
  : >"$d/ngx_pid"
  instances=$(echo "$instances" | tr ' ' '\n' | grep -vx "$1" | tr '\n' ' ')
  # error.log lines at error level and above, kept for the summary.
  grep -E '\[(error|crit|alert|emerg)\]' "$d/logs/error.log" 2>/dev/null >"$d/bad"
}

# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  stop_nginx QUIT    # the one start_instance was starting, if any
  for m in $instances; do stop_instance "$m"; done
  [ -z "$base" ] || prefix=$base
  remove_prefix
}

for s in $ONLY; do
  case $s in idle | late | throughput) ;; *) die "ONLY: no section '$s' (idle, late, throughput)" ;; esac
done
for v in "$TP_N" "$TP_PROBES" "$TP_ROUNDS" "$N" "$IDLE_SECONDS"; do
  case $v in '' | 0 | *[!0-9]*) die "TP_N, TP_PROBES, TP_ROUNDS, N, IDLE_SECONDS: a whole number > 0, not '$v'" ;; esac
done

# ---- nginx, its Lua module, LuaJIT's headers (test/host/nginx_lib.sh) -----------
find_nginx_lua
command -v curl >/dev/null 2>&1 || die "curl not found"
find_cc_luajit

make_prefix hwt-nginx-bench
base=$prefix
build_core "$base/lib/hwt/core.so" "$lj_cflags" -ldl ||
  { sed 's/^/    /' "$base/build.log" | head -n 20 >&2; die "hwt.core does not build against LuaJIT"; }

# Each instance (a mode, or a mode in one round: tp_hwt_2) has its own nginx
# and prefix, $base/INSTANCE: the lib's $prefix while start_instance sets it
# up and starts it, $base otherwise. hwt/core.so is built once, into
# $base/lib: each INSTANCE/lib links to it (write_conf points
# lua_package_cpath at $prefix/lib).
# shellcheck disable=SC2317  # instance_up and instance_down: run by start_retrying
instance_up() {  # for start_retrying: a new port, the configuration, nginx
  # shellcheck disable=SC2119  # no port to avoid
  port=$(pick_port) || { say "no free port"; return 1; }
  echo "$port" >"$prefix/port"
  max_pending=16384
  # tp_timer_at: its TP_N, the probes, room to spare.
  [ "$mode" != tp_timer_at ] || max_pending=$((TP_N + TP_PROBES + 1024))
  [ "$max_pending" -ge 16384 ] || max_pending=16384
  write_conf "$BENCH/nginx.conf" -e "s|@MODE@|$mode|g" -e "s|@BENCH_DIR@|$BENCH|g" \
    -e "s|@HWT_LUA_PATH@|$HWT_LUA_PATH|g" -e "s|@MAX_PENDING@|$max_pending|g"
  # This try's lines only: start_retrying looks for "Address already in use",
  # and stop_instance keeps the error lines for the summary.
  : >"$prefix/logs/error.log"
  start_nginx /pid
  up=$?
  # From here on stop_instance, not stop_nginx, stops it.
  echo "$ngx_pid" >"$prefix/ngx_pid"
  ngx_pid=""
  instances="$instances $inst"
  return "$up"
}
# shellcheck disable=SC2317
instance_down() { stop_instance "$inst"; }

start_instance() {  # start_instance INSTANCE [MODE (default INSTANCE)] -> 0 once /pid answers
  inst=$1
  mode=${2:-$1}
  prefix=$base/$1
  mkdir -p "$prefix/logs" "$prefix/conf" "$prefix/tmp"
  [ -e "$prefix/lib" ] || ln -s ../lib "$prefix/lib"
  if start_retrying instance_up instance_down "$prefix/logs/error.log" >"$prefix/start.log"; then
    prefix=$base
    return 0
  fi
  say "nginx_bench: $1 does not start:"
  cat "$prefix/start.log" >&2
  [ -s "$prefix/logs/stdout.log" ] && sed 's/^/    /' "$prefix/logs/stdout.log" | tail -n 20 >&2
  prefix=$base
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
IDLE_MODES=""
wants idle && IDLE_MODES="idle_none idle_recipe idle_driver"
for m in $IDLE_MODES; do start_instance "$m" || exit 1; done
for m in $IDLE_MODES; do
  get_from "$m" "/setup?n=1000&delay=3600" >"$base/$m/setup" || die "$m: /setup failed"
  get_from "$m" /pid >"$base/$m/wpid" || die "$m: /pid failed"
done
if wants idle; then
  nap 1    # let the requests' after-effects settle: no request from here on
  for m in $IDLE_MODES; do
    w=$(cat "$base/$m/wpid")
    switches "$w" "$w" >"$base/$m/sw0"; other_switches "$w" >"$base/$m/osw0"
  done
  t0=$(now)
  nap "$IDLE_SECONDS"
  t1=$(now)
fi
for m in $IDLE_MODES; do
  w=$(cat "$base/$m/wpid")
  switches "$w" "$w" >"$base/$m/sw1"; other_switches "$w" >"$base/$m/osw1"
  threads "$w" >"$base/$m/threads"
done
for m in $IDLE_MODES; do
  get_from "$m" /stats >"$base/$m/stats" 2>/dev/null || echo "no /stats" >"$base/$m/stats"
  stop_instance "$m"
done
rate() {  # rate MODE FILE0 FILE1 -> per second over the window
  awk -v a="$(cat "$base/$1/$2")" -v b="$(cat "$base/$1/$3")" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%.1f", (b - a) / (t1 - t0) }'
}

# ---- 2. lateness ----------------------------------------------------------------
LATE_MODES=""
wants late && LATE_MODES="late_driver late_driver_tick1 late_timer_at"
for m in $LATE_MODES; do
  start_instance "$m" || exit 1
  get_from "$m" "/schedule?n=$N&spread=$SPREAD&offset=$OFFSET" >"$base/$m/schedule" ||
    die "$m: /schedule failed"
  # Bounded wait: the last deadline is OFFSET + SPREAD s away; allow 8 s.
  nap 2
  i=0
  while :; do
    r=$(get_from "$m" /results) || break
    case $r in done*) break ;; esac
    [ "$i" -ge 30 ] && break
    nap 0.2
    i=$((i + 1))
  done
  echo "$r" >"$base/$m/results"
  stop_instance "$m"
done

field() {  # field INSTANCE KEY -> value of KEY=value in INSTANCE's results line
  tr ' ' '\n' <"$base/$1/results" | sed -n "s/^$2=//p"
}

# ---- 3. throughput ----------------------------------------------------------------
# TP_ROUNDS rounds; in each, a fresh instance per mode, one after the other
# (tp_hwt first in odd rounds, tp_floor first in even ones), each answering
# one GET /throughput.
TP_INSTANCES=""
round=1
while wants throughput && [ "$round" -le "$TP_ROUNDS" ]; do
  if [ $((round % 2)) = 1 ]; then order="tp_hwt tp_timer_at tp_floor"; else order="tp_floor tp_timer_at tp_hwt"; fi
  for m in $order; do
    start_instance "${m}_$round" "$m" || exit 1
    TP_INSTANCES="$TP_INSTANCES ${m}_$round"
    get_from "${m}_$round" "/throughput?n=$TP_N&delay=3600&spread=3600&probes=$TP_PROBES&poffset=0.1&pspread=1" \
      >"$base/${m}_$round/results" || die "${m}_$round: /throughput failed"
    # On SIGQUIT nginx runs tp_timer_at's TP_N pending timers at once, with
    # premature = true (on_far counts them, nothing more): well under 1 s.
    stop_instance "${m}_$round"
  done
  round=$((round + 1))
done

median() {  # median: of the numbers on stdin, one a line ("-" for none)
  sort -g | awk '{ v[NR] = $1 }
    END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
tp_median() {  # tp_median MODE KEY -> the median over the rounds of KEY
  for x in $TP_INSTANCES; do
    case $x in "$1"_[0-9]*) field "$x" "$2" ;; esac
  done | median
}
tp_ratio() {  # tp_ratio KEY [MODE] -> the median over the rounds of MODE's (tp_hwt's) KEY / tp_timer_at's
  x=1
  while [ "$x" -lt "$round" ]; do
    awk -v a="$(field "${2:-tp_hwt}_$x" "$1")" -v b="$(field "tp_timer_at_$x" "$1")" \
      'BEGIN { if (a != "" && b != "" && b + 0 != 0) printf "%.4f\n", a / b }'
    x=$((x + 1))
  done | median
}
si() {  # si NUMBER -> 1.23 M, 456 k
  awk -v v="$1" 'BEGIN { if (v == "-") print "-"; else if (v >= 1e6) printf "%.2f M\n", v / 1e6;
    else if (v >= 1e3) printf "%.0f k\n", v / 1e3; else printf "%.0f\n", v }'
}
fixed() {  # fixed DECIMALS NUMBER
  awk -v d="$1" -v v="$2" 'BEGIN { if (v == "-") print "-"; else printf "%." d "f\n", v }'
}

# ---- the tables ---------------------------------------------------------------
if wants idle; then
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
fi
if wants late; then
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
fi
if wants throughput; then
  echo "Throughput: $TP_N timeouts 1-2 h ahead, one shared handler, scheduled (hwt: then cancelled) from one request in one nginx worker; medians of $TP_ROUNDS rounds, a fresh nginx each round."
  echo
  echo "| | hwt.ngx: timer:timeout(d, handler, i) | ngx.timer.at(d, handler, i) | hwt / ngx.timer.at | floor: the loop without hwt | floor / ngx.timer.at |"
  echo "|---|---:|---:|---:|---:|---:|"
  printf '| schedule rate, timeouts/s | %s | %s | %s | %s | %s |\n' "$(si "$(tp_median tp_hwt sched_rate)")" \
    "$(si "$(tp_median tp_timer_at sched_rate)")" "$(fixed 2 "$(tp_ratio sched_rate)")" \
    "$(si "$(tp_median tp_floor sched_rate)")" "$(fixed 2 "$(tp_ratio sched_rate tp_floor)")"
  printf '| cancel rate, timeouts/s | %s | cannot cancel | - | %s | - |\n' "$(si "$(tp_median tp_hwt cancel_rate)")" \
    "$(si "$(tp_median tp_floor cancel_rate)")"
  printf '| bytes per pending timeout: worker RSS (VmRSS) | %s | %s | %s | %s | %s |\n' "$(fixed 0 "$(tp_median tp_hwt rss_b)")" \
    "$(fixed 0 "$(tp_median tp_timer_at rss_b)")" "$(fixed 2 "$(tp_ratio rss_b)")" \
    "$(fixed 0 "$(tp_median tp_floor rss_b)")" "$(fixed 2 "$(tp_ratio rss_b tp_floor)")"
  printf '| bytes per pending timeout: Lua heap (collectgarbage("count")) | %s | %s | %s | %s | %s |\n' \
    "$(fixed 0 "$(tp_median tp_hwt heap_b)")" "$(fixed 0 "$(tp_median tp_timer_at heap_b)")" \
    "$(fixed 2 "$(tp_ratio heap_b)")" "$(fixed 0 "$(tp_median tp_floor heap_b)")" "$(fixed 2 "$(tp_ratio heap_b tp_floor)")"
  for row in "p50:p50_ms" "p99:p99_ms" "max:max_ms"; do
    label=${row%:*}; key=${row##*:}
    printf '| lateness %s, ms: %s timeouts due in [0.1, 1.1) s, %s pending | %s | %s | - | - | - |\n' "$label" \
      "$TP_PROBES" "$TP_N" "$(fixed 2 "$(tp_median tp_hwt "$key")")" "$(fixed 2 "$(tp_median tp_timer_at "$key")")"
  done
  printf '| of those, started early (by hwt.now()) | %s | %s | - | - | - |\n' \
    "$(tp_median tp_hwt pearly)" "$(tp_median tp_timer_at pearly)"
  echo
  echo "hwt.ngx at hwt.new()'s default tick (10 ms). Rates timed by hwt.now() around each loop; bytes: the change over scheduling, each reading after a full collection, / $TP_N. ngx.timer.at counts a delay in whole milliseconds from nginx's cached clock (updated just before the $TP_PROBES here): they may start early by up to about 1 ms plus the time their scheduling loop took."
  echo
fi
cmd="sh bench/nginx_bench.sh"
[ "$ONLY" = "idle late throughput" ] || cmd="ONLY='$ONLY' $cmd"
for v in "TP_ROUNDS=$TP_ROUNDS:3" "TP_PROBES=$TP_PROBES:1000" "TP_N=$TP_N:100000" "N=$N:10000" \
         "IDLE_SECONDS=$IDLE_SECONDS:5" "HWT_LUA_PATH=$HWT_LUA_PATH:$ROOT/lua/?.lua" \
         "HWT_SRC=${HWT_SRC:-$ROOT/src}:$ROOT/src"; do
  [ "${v%%=*}=${v##*:}" = "${v%:*}" ] || cmd="${v%:*} $cmd"
done
echo "Command: \`$cmd\` ($(($(date +%s) - started)) s; $("$NGINX" -v 2>&1 | sed 's/.*: //'), LuaJIT $(pkg-config --modversion luajit))"

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
odd() { say "odd: $m: $*"; status=1; }
for m in $TP_INSTANCES; do
  case $(cat "$base/$m/results") in
    done*) ;;
    *) odd "$(cat "$base/$m/results")"; continue ;;
  esac
  [ "$(field "$m" refused)" = 0 ] ||
    odd "nginx refused $(field "$m" refused) of $TP_N ($(field "$m" refusal)); the rates count the rest"
  [ "$(field "$m" pending)" = "$TP_N" ] || odd "$(field "$m" pending) of $TP_N pending after scheduling"
  [ "$(field "$m" far_fired)" = 0 ] || odd "$(field "$m" far_fired) of the far timeouts ran"
  case $m in
    tp_floor_*) [ "$(field "$m" probes)" = 0 ] || odd "the floor ran probes" ;;
    *) [ "$(field "$m" pran)" = "$TP_PROBES" ] ||
         odd "$(field "$m" pran) of $TP_PROBES probes ran ($(field "$m" prefused) refused) within the wait" ;;
  esac
  [ "$(field "$m" ptwice)" = 0 ] || odd "$(field "$m" ptwice) probes ran twice"
  case $m in
    tp_hwt_*)
      [ "$(field "$m" pearly)" = 0 ] || odd "$(field "$m" pearly) probes started before their deadline"
      [ "$(field "$m" cancelled)" = "$TP_N" ] || odd "cancelled $(field "$m" cancelled) of $TP_N"
      [ "$(field "$m" pending_after)" = 0 ] || odd "$(field "$m" pending_after) pending after the cancels" ;;
    *)
      [ "$(field "$m" pearly)" = 0 ] || say "note: $m started $(field "$m" pearly) probes before their deadline" ;;
  esac
done
for m in $IDLE_MODES $LATE_MODES $TP_INSTANCES; do
  [ -f "$base/$m/stop" ] && status=1
  if [ -s "$base/$m/bad" ]; then
    say "odd: $m error.log:"; head -n 5 "$base/$m/bad" | sed 's/^/    /' >&2; status=1
  fi
done
exit "$status"
