#!/bin/sh
# Side-by-side timer benchmark (issue: "Make hwt the fastest timer a Lua
# program can use").   sh bench/run.sh full|quick
#
# Every (peer, workload) runs in a fresh process with the same N and the same
# pseudo-random delays (xorshift64*, fixed seed; see bench/lua_bench.lua).
#   peers:  hwt, luv, heap (Lua processes: bench/lua_bench.lua on $LUA),
#           hwtjit (the hwt peer of bench/lua_bench.lua run by luajit, with
#             build/luajit/hwt/core.so: make -s LUA=luajit all),
#           hwtjit_old (the same with the LuaJIT binding of HWT_OLD_REF,
#             default 2e7a7fa, the last with a userdata Timeout on LuaJIT:
#             its src/ and lua/ taken with git archive, built into $OUT),
#           jitfloor (bench/jit_floor.lua: W1s, W2 and W4's loops on LuaJIT
#             with hwt taken out, what any FFI binding must pay),
#           netty (bench/netty/HwtBench.java on netty-common's HashedWheelTimer),
#           timerwheel (timerwheel.lua on LuaJIT, the same workloads: Debian
#             does not package it, so it runs only when TIMERWHEEL_DIR names a
#             checkout of github.com/Tieske/timerwheel.lua (its module is
#             $TIMERWHEEL_DIR/src/timerwheel/init.lua; it needs lua-coxpcall),
#             and is shown as missing otherwise),
#           engine (build/bench_engine: hwt's C engine alone, ns per op).
#   workloads: W1 schedule, W2 cancel, W3 churn, W4 fire 1 s, W5 idle,
#           W6 fire over 10 s (see bench/lua_bench.lua), and W1s / W3s: W1 and
#           W3 with one shared function and an argument per timeout
#           (timer:timeout(d, on_timeout, conn)) instead of a closure each.
#   full:  N = 10^6, W5 idles 5 s.   quick: N = 10^5, W5 idles 1 s.
#   smoke: N = 2x10^4, W5 idles 1 s, W6 fires over 1 s instead of 10: only
#          shows that every peer runs (test/docs/bench_smoke.sh, in make check).
#   full runs every cell but W5's (an idle count) three times, round robin
#   over the peers, and reports each figure's median: these VMs are noisy, and
#   a single W6 round can put hwt on either side of Netty.
#   W6 is given N/5 as its N (every peer receives the count it must schedule).
# Output: a summary table (issue 13's layout, markdown) with the targets'
# ratios, then the detailed table (hwt on $LUA against luv, heap and Netty).
# A peer that cannot run is shown as "missing", a run that fails as "failed".
# full writes bench/RESULTS.md below the line <!-- bench:run --> (the part above
# it is kept); quick only prints.
set -u
MODE=${1:-quick}
case $MODE in
  full)  N=1000000; IDLE=5; TMO=900; REPEAT=3; SPAN=10 ;;
  quick) N=100000;  IDLE=1; TMO=120; REPEAT=1; SPAN=10 ;;
  smoke) N=20000;   IDLE=1; TMO=120; REPEAT=1; SPAN=1 ;;
  *) echo "usage: sh bench/run.sh full|quick|smoke" >&2; exit 2 ;;
esac
N6=$((N / 5))
cd "$(dirname "$0")/.." || exit 1
LUA=${LUA:-lua5.4}
LUAJIT=${LUAJIT:-luajit}
JIT_CPATH='build/luajit/?.so;;'
export LUA_PATH='lua/?.lua;;' LUA_CPATH="build/$LUA/?.so;;"
NETTY_JAR=${NETTY_JAR:-/usr/share/java/netty-common.jar}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/hwt-bench.XXXXXX") || exit 1
trap 'rm -rf "$OUT"' EXIT INT TERM
RES=$OUT/results
: > "$RES"
START=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

say() { printf '%s\n' "$*" >&2; }

make -s LUA="$LUA" all >&2 || { say "cannot build build/$LUA/hwt/core.so"; exit 1; }
if [ "$LUA" != luajit ] && command -v "$LUAJIT" >/dev/null 2>&1; then
  make -s LUA=luajit all >&2 || say "cannot build build/luajit/hwt/core.so: hwtjit will be missing"
fi

# ---------------------------------------------------------------- peers present
present() { grep -qx "$1" "$OUT/present" 2>/dev/null; }
: > "$OUT/present"
$LUA -e 'require("hwt")' 2>/dev/null && printf 'hwt\nlua\n' >> "$OUT/present"
$LUA -e 'require("luv")' 2>/dev/null && echo luv >> "$OUT/present"
# The heap peer needs a heap (lua-binaryheap, else a built-in one) and luv's
# uv.sleep for its scheduler loop.
present luv && echo heap >> "$OUT/present"
if command -v "$LUAJIT" >/dev/null 2>&1 &&
   LUA_CPATH="$JIT_CPATH" "$LUAJIT" -e 'require("hwt")' 2>/dev/null; then
  printf 'hwtjit\nluajit\n' >> "$OUT/present"
fi
# The LuaJIT binding before the FFI one (issue 44), for the comparison.
HWT_OLD_REF=${HWT_OLD_REF:-2e7a7fa}
OLD=$OUT/old
if command -v "$LUAJIT" >/dev/null 2>&1 && mkdir -p "$OLD" &&
   git archive "$HWT_OLD_REF" src lua 2>/dev/null | tar -x -C "$OLD" &&
   mkdir -p "$OLD/build/hwt" &&
   ${CC:-cc} -std=c11 -O2 -I/usr/include/luajit-2.1 -fPIC -fvisibility=hidden -pthread -shared \
     -o "$OLD/build/hwt/core.so" "$OLD"/src/*.c -ldl >&2; then
  echo hwtjit_old >> "$OUT/present"
else
  echo "PSTATUS hwtjit_old missing (no git history for $HWT_OLD_REF, or it did not build)" >> "$RES"
fi
command -v "$LUAJIT" >/dev/null 2>&1 && echo jitfloor >> "$OUT/present"
# timerwheel.lua (LuaJIT): not in Debian; found on LuaJIT's own path, or in
# the checkout that TIMERWHEEL_DIR names.
TW_PATH="${TIMERWHEEL_DIR:+$TIMERWHEEL_DIR/src/?/init.lua;}$LUA_PATH"
if command -v "$LUAJIT" >/dev/null 2>&1 &&
   LUA_PATH="$TW_PATH" "$LUAJIT" -e 'require("timerwheel")' 2>/dev/null; then
  echo timerwheel >> "$OUT/present"
  TW_STATUS="$(LUA_PATH="$TW_PATH" "$LUAJIT" -e 'print(package.searchpath("timerwheel", package.path))')"
elif [ -z "$(apt-cache search --names-only timerwheel 2>/dev/null)" ]; then
  TW_STATUS="missing (not packaged in Debian; set TIMERWHEEL_DIR)"
  echo "PSTATUS timerwheel missing (set TIMERWHEEL_DIR)" >> "$RES"
else
  TW_STATUS="missing (not installed)"
  echo "PSTATUS timerwheel $TW_STATUS" >> "$RES"
fi
NETTY_JAR="$NETTY_JAR" sh bench/netty/build.sh && echo netty >> "$OUT/present"
if [ -f bench/bench_engine.c ]; then
  engine_src=$(ls src/*.c | grep -v '^src/lhwt')          # the wheel and the engine: no Lua
  # shellcheck disable=SC2086
  if [ ! -x build/bench_engine ] || [ -n "$(find bench/bench_engine.c $engine_src src/*.h -newer build/bench_engine)" ]; then
    mkdir -p build
    say "building build/bench_engine"
    # shellcheck disable=SC2086
    ${CC:-cc} -O2 -std=c11 -Isrc -pthread bench/bench_engine.c $engine_src \
      -o build/bench_engine >&2 || say "bench_engine build failed: engine will be missing"
  fi
  [ -x build/bench_engine ] && echo engine >> "$OUT/present"
fi
say "peers present: $(tr '\n' ' ' < "$OUT/present")(mode $MODE, N=$N)"

# ---------------------------------------------------------------- runs
# run <peer> <workload> <n> [seconds]: one fresh process; its RESULT lines go
# to $RES, and a STATUS line when it could not run.
run() {
  peer=$1 w=$2 n=$3 s=${4:-}
  if ! present "$peer"; then
    grep -q "^PSTATUS $peer " "$RES" || echo "STATUS $peer $w missing" >> "$RES"   # else it says why
    return
  fi
  say "  $peer $w n=$n${s:+ seconds=$s}"
  as=$peer        # the peer name bench/lua_bench.lua prints
  case $peer in
    netty)  set -- java -cp "bench/netty/build:$NETTY_JAR" HwtBench "$w" "$n" $s ;;
    hwtjit) as=hwt; set -- env LUA_CPATH="$JIT_CPATH" "$LUAJIT" bench/lua_bench.lua hwt "$w" "$n" $s ;;
    hwtjit_old) as=hwt; set -- env LUA_PATH="$OLD/lua/?.lua;;" LUA_CPATH="$OLD/build/?.so;;" \
                  "$LUAJIT" bench/lua_bench.lua hwt "$w" "$n" $s ;;
    jitfloor)
      case $w in W1s) m=schedule ;; W2) m=cancel ;; W4) m=drain ;; *) return ;; esac
      as=jitfloor; set -- sh -c "$LUAJIT bench/jit_floor.lua $m $n | sed 's/^RESULT floor luajit [a-z]*_ops_per_s/RESULT jitfloor $w ops_per_s/; s/^RESULT floor luajit bytes_per_pending/RESULT jitfloor $w bytes_per_timeout/; s/^RESULT floor luajit drain_callbacks_per_s/RESULT jitfloor $w cb_per_s_drain/; s/ [1B\/s]*\$//'" ;;
    luajit) as=lua; set -- env LUA_CPATH="$JIT_CPATH" "$LUAJIT" bench/lua_bench.lua lua "$w" "$n" $s ;;
    timerwheel) set -- env LUA_PATH="$TW_PATH" LUA_CPATH="$JIT_CPATH" "$LUAJIT" bench/lua_bench.lua timerwheel "$w" "$n" $s ;;
    *)      set -- "$LUA" bench/lua_bench.lua "$peer" "$w" "$n" $s ;;
  esac
  if timeout "$TMO" "$@" > "$OUT/one" 2> "$OUT/err"; then
    grep '^RESULT ' "$OUT/one" | sed "s/^RESULT $as /RESULT $peer /" >> "$RES"
  else
    rc=$?
    grep '^RESULT ' "$OUT/one" | sed "s/^RESULT $as /RESULT $peer /" >> "$RES"
    if [ $rc = 3 ]; then echo "STATUS $peer $w missing" >> "$RES"
    else echo "STATUS $peer $w failed" >> "$RES"; say "    failed (exit $rc):"; sed 's/^/    /' "$OUT/err" >&2
    fi
  fi
}

PEERS="hwt hwtjit hwtjit_old jitfloor luv heap netty timerwheel"
run lua W0 "$N"          # closure floor (Lua alone; uses hwt.now() as its clock)
run luajit W0 "$N"
for w in W1 W1s W2 W3 W3s W4 W5 W6; do
  case $w in W5) rounds=1 ;; *) rounds=$REPEAT ;; esac
  round=0
  while [ $round -lt $rounds ]; do
    round=$((round + 1))
    for p in $PEERS; do
      case $w in
        W5) run "$p" W5 "$N" "$IDLE" ;;
        W6) run "$p" W6 "$N6" "$SPAN" ;;
        *)  run "$p" "$w" "$N" ;;
      esac
    done
  done
done
if present engine; then
  say "  engine n=$N"
  if timeout "$TMO" build/bench_engine "$N" > "$OUT/one" 2> "$OUT/err"; then
    grep '^RESULT ' "$OUT/one" >> "$RES"
  else
    echo "STATUS engine all failed" >> "$RES"; sed 's/^/    /' "$OUT/err" >&2
  fi
else
  echo "STATUS engine all missing" >> "$RES"
fi
END=$(date +%s)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- table
# table head|summary|detail: the three parts of the output. summary is
# markdown (issue 13's table and the targets); RESULTS.md keeps it outside
# the code block that holds head and detail.
table() {
awk -v PART="$1" -v N="$N" -v N6="$N6" -v SPAN="$SPAN" -v IDLE="$IDLE" -v REPEAT="$REPEAT" -v ELAPSED=$((END - START)) \
    -v LOAD="$LOAD0 -> $LOAD1" -v LUANAME="$LUA" '
function fmt(v) {
  if (v == "") return "-"
  if (v !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) return v
  v += 0; a = v < 0 ? -v : v
  if (a == 0) return "0"
  if (a >= 1e6) return sprintf("%.3gM", v / 1e6)
  if (a >= 1e4) return sprintf("%.0f", v)
  if (a >= 100) return sprintf("%.1f", v)
  if (a >= 1) return sprintf("%.3g", v)
  return sprintf("%.3g", v)
}
function isnum(v) { return v ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ }
function ratio(h, p, higher, m) {
  if (!isnum(h) || !isnum(p)) return "-"
  h += 0; p += 0
  if (m == "cpu_s" && h < 0.001 && p < 0.001) return "~"
  if (h < 0 || p < 0) return "n/a"
  if (higher) { if (p == 0) return "-"; return sprintf("%.2f", h / p) }
  if (h == 0) return (p == 0) ? "=" : "inf"
  return sprintf("%.2f", p / h)
}
function cell(peer, w, m) {
  if ((peer SUBSEP w SUBSEP m) in val) return fmt(val[peer, w, m])
  if ((peer SUBSEP w) in status) return status[peer, w]
  if (peer in pstatus) return pstatus[peer]
  return "-"
}
function count(peer, w, m) { return isnum(raw(peer, w, m)) ? sprintf("%d", raw(peer, w, m)) : cell(peer, w, m) }
function raw(peer, w, m) { return ((peer SUBSEP w SUBSEP m) in val) ? val[peer, w, m] : "" }
# A target row: "label | measured | met/missed"; x is the measured figure
# (a ratio when what is "x"), compared with thr (ge: at least, le: at most).
function fmtx(r) { return isnum(r) ? sprintf("%.2fx", r) : "-" }
# A target row of the issue 44 table, as target() prints, and what stands beside it.
function t44(label, x, op, thr, unit, beside,   shown, verdict) {
  if (!isnum(x)) { shown = (x == "") ? "-" : x; verdict = "-" }
  else {
    shown = (unit == "x") ? sprintf("%.2fx", x) : fmt(x) unit
    if ((op == "ge" && x + 0 >= thr) || (op == "le" && x + 0 <= thr)) verdict = "met"
    else verdict = "**missed**"
  }
  printf("| %-62s | %14s | %-11s | %-24s |\n", label, shown, verdict, beside)
}
function target(label, x, op, thr, unit,   shown, verdict) {
  if (!isnum(x)) { shown = (x == "") ? "-" : x; verdict = "-" }
  else {
    shown = (unit == "x") ? sprintf("%.2fx", x) : fmt(x) unit
    if (op == "") verdict = "(no target)"
    else if ((op == "ge" && x + 0 >= thr) || (op == "le" && x + 0 <= thr)) verdict = "met"
    else verdict = "**missed**"
  }
  printf("| %-62s | %14s | %-11s |\n", label, shown, verdict)
}
# hwt/peer for throughput (higher is better), or peer/hwt (lower is better),
# from two cells; "" when either is missing.
function rel(a, b) { if (!isnum(a) || !isnum(b) || b + 0 == 0) return ""; return (a + 0) / (b + 0) }
function why(peer, w, m) { return isnum(raw(peer, w, m)) ? "" : cell(peer, w, m) }
function rel_or_why(a_peer, b_peer, w, m, swap,   r) {
  r = swap ? rel(raw(b_peer, w, m), raw(a_peer, w, m)) : rel(raw(a_peer, w, m), raw(b_peer, w, m))
  if (r != "") return r
  if (why(b_peer, w, m) != "") return why(b_peer, w, m)
  return why(a_peer, w, m)
}
$1 == "RESULT" {
  k = $2 SUBSEP $3 SUBSEP $4
  runs[k]++; sample[k, runs[k]] = $5
  if ($4 == "heap_impl") heapimpl = $5
}
$1 == "STATUS" { status[$2, $3] = $4 }
$1 == "PSTATUS" { s = $0; sub(/^PSTATUS [^ ]+ /, "", s); pstatus[$2] = s }
END {
  # Several runs of a cell: the median (the lower middle one of an even count).
  for (k in runs) {
    n = runs[k]
    for (i = 1; i <= n; i++) sorted[i] = sample[k, i]
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && isnum(sorted[j]) && isnum(sorted[j - 1]) && sorted[j] + 0 < sorted[j - 1] + 0; j--) {
        t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t
      }
    val[k] = sorted[int((n + 1) / 2)]
  }
  if (PART == "head") {
    printf("Timer benchmark: N=%d (W6: %d over %d s, wheel 512), tick 1 ms, W5 idle %d s; %d s in all.\n", N, N6, SPAN, IDLE, ELAPSED)
    printf("One process per run; %s; load average before -> after: %s.\n",
      REPEAT > 1 ? "every figure the median of " REPEAT " runs, W5 one run" : "one run each", LOAD)
    printf("hwt = %s; hwt LuaJIT = the same bench/lua_bench.lua workloads run by luajit; LuaJIT 0.2 = the same with the\n", LUANAME)
    printf("userdata binding of HWT_OLD_REF (before the FFI one).\n")
    printf("W1s/W3s = W1/W3 with one shared function and an argument per timeout, timer:timeout(d, on_timeout, conn)\n")
    printf("(luv: a uv timer each, one shared callback, no argument; heap: conn as payload; Netty: one shared TimerTask).\n")
    exit
  }
  if (PART == "summary") {
    jit = "hwtjit"
    printf("| %-52s | %10s | %10s | %10s | %10s | %10s | %-32s | %10s |\n", "workload (N = " N ")", "hwt", "hwt LuaJIT", "LuaJIT 0.2", "Netty", "luv", "timerwheel.lua, LuaJIT", "Lua heap")
    printf("|%s|%s:|%s:|%s:|%s:|%s:|%s|%s:|\n", "------------------------------------------------------", "-----------", "-----------", "-----------", "-----------", "-----------", "----------------------------------", "-----------")
    nr = split("W1 ops_per_s W1 schedule ops/s|W1 bytes_per_timeout W1 bytes per pending timeout (RSS; Netty: heap)|" \
      "W1s ops_per_s W1s schedule, shared function + argument, ops/s|" \
      "W1s bytes_per_timeout W1s bytes per pending timeout (RSS; Netty: heap)|" \
      "W2 ops_per_s W2 cancel ops/s|W3 ops_per_s W3 churn ops/s|" \
      "W3s ops_per_s W3s churn, shared function + argument, ops/s|" \
      "W4 wall_s W4 wall s (N due within 1 s)|W4 cb_per_s_drain W4 callbacks/s while draining|" \
      "W4 late_p99_after_ms W4 lateness p99 ms, due after scheduling|W4 cpu_s W4 CPU s|" \
      "W5 wakeups W5 idle wake-ups (" IDLE " s)|" \
      "W6 cpu_s W6 CPU s|W6 late_p99_ms W6 lateness p99 ms", rows, "|")
    for (i = 1; i <= nr; i++) {
      split(rows[i], f, " "); w = f[1]; m = f[2]
      label = rows[i]; sub(/^[^ ]+ [^ ]+ /, "", label)
      printf("| %-52s | %10s | %10s | %10s | %10s | %10s | %-32s | %10s |\n", label, cell("hwt", w, m), cell(jit, w, m),
        cell("hwtjit_old", w, m), cell("netty", w, m), cell("luv", w, m), cell("timerwheel", w, m), cell("heap", w, m))
    }
    printf("\nNetty bytes are Java heap in use (RSS: W1 %s, W1s %s). Callbacks/s while draining: the timeouts due\n",
      cell("netty", "W1", "bytes_rss_per_timeout"), cell("netty", "W1s", "bytes_rss_per_timeout"))
    printf("when scheduling ends are the backlog (hwt %s, LuaJIT %s, Netty %s); from then until the last of them ran,\n",
      count("hwt", "W4", "backlog"), count(jit, "W4", "backlog"), count("netty", "W4", "backlog"))
    printf("every callback counts. Netty and luv run callbacks during the burst, so theirs is a small backlog.\n\n")
    printf("| %-62s | %14s | %-11s |\n", "target (issue 13)", "measured", "")
    printf("|%s|%s:|%s|\n", "----------------------------------------------------------------", "---------------", "-------------")
    target("W1 schedule: hwt / luv >= 3", rel_or_why("hwt", "luv", "W1", "ops_per_s"), "ge", 3, "x")
    target("W1 schedule: hwt / Netty >= 0.5", rel_or_why("hwt", "netty", "W1", "ops_per_s"), "ge", 0.5, "x")
    target("W2 cancel: hwt / luv >= 4", rel_or_why("hwt", "luv", "W2", "ops_per_s"), "ge", 4, "x")
    target("W3 churn: hwt / luv >= 4", rel_or_why("hwt", "luv", "W3", "ops_per_s"), "ge", 4, "x")
    target("W3 churn: hwt / Lua heap >= 2", rel_or_why("hwt", "heap", "W3", "ops_per_s"), "ge", 2, "x")
    nt = split("W1 ops_per_s schedule|W1s ops_per_s schedule, shared function|W2 ops_per_s cancel|W3 ops_per_s churn|" \
      "W3s ops_per_s churn, shared function|W4 cb_per_s_drain callbacks/s while draining", trows, "|")
    for (i = 1; i <= nt; i++) {
      split(trows[i], f, " "); label = trows[i]; sub(/^[^ ]+ [^ ]+ /, "", label)
      target(f[1] " " label ": LuaJIT / 5.4 >= 1", rel_or_why(jit, "hwt", f[1], f[2]), "ge", 1, "x")
    }
    target("W3 churn on LuaJIT: hwt / timerwheel.lua >= 2", rel_or_why(jit, "timerwheel", "W3", "ops_per_s"), "ge", 2, "x")
    target("W1 bytes per pending timeout, closure included, 5.4 <= 250", raw("hwt", "W1", "bytes_per_timeout") == "" ? cell("hwt", "W1", "bytes_per_timeout") : raw("hwt", "W1", "bytes_per_timeout"), "le", 250, " B")
    target("W1 bytes per pending timeout, closure included, LuaJIT <= 250", raw(jit, "W1", "bytes_per_timeout") == "" ? cell(jit, "W1", "bytes_per_timeout") : raw(jit, "W1", "bytes_per_timeout"), "le", 250, " B")
    target("W4 wall: Netty / hwt >= 1 (hwt <= Netty)", rel_or_why("hwt", "netty", "W4", "wall_s", 1), "ge", 1, "x")
    target("W4 callbacks/s while draining >= 3M", raw("hwt", "W4", "cb_per_s_drain") == "" ? cell("hwt", "W4", "cb_per_s_drain") : raw("hwt", "W4", "cb_per_s_drain"), "ge", 3e6, "")
    target("W4 lateness p99, due after scheduling, <= 50 ms", raw("hwt", "W4", "late_p99_after_ms") == "" ? cell("hwt", "W4", "late_p99_after_ms") : raw("hwt", "W4", "late_p99_after_ms"), "le", 50, " ms")
    target("W6 CPU: Netty / hwt >= 1 (hwt <= Netty)", rel_or_why("hwt", "netty", "W6", "cpu_s", 1), "ge", 1, "x")
    target("W1s schedule, shared function: hwt / luv", rel_or_why("hwt", "luv", "W1s", "ops_per_s"), "", 0, "x")
    target("W1s schedule, shared function: hwt / Netty", rel_or_why("hwt", "netty", "W1s", "ops_per_s"), "", 0, "x")
    target("W3s churn, shared function: hwt / luv", rel_or_why("hwt", "luv", "W3s", "ops_per_s"), "", 0, "x")
    target("W3s churn, shared function: hwt / Lua heap", rel_or_why("hwt", "heap", "W3s", "ops_per_s"), "", 0, "x")
    printf("\n| %-62s | %14s | %-11s | %-24s |\n", "target (issue 44: LuaJIT)", "measured", "", "beside it")
    printf("|%s|%s:|%s|%s|\n", "----------------------------------------------------------------", "---------------", "-------------", "--------------------------")
    t44("W3s churn: LuaJIT / timerwheel.lua >= 3", rel_or_why(jit, "timerwheel", "W3s", "ops_per_s"), "ge", 3, "x",
        "0.2 binding " fmtx(rel(raw("hwtjit_old", "W3s", "ops_per_s"), raw("timerwheel", "W3s", "ops_per_s"))))
    t44("W1s schedule: LuaJIT / hwt on " LUANAME " >= 2", rel_or_why(jit, "hwt", "W1s", "ops_per_s"), "ge", 2, "x",
        "0.2 binding " fmtx(rel(raw("hwtjit_old", "W1s", "ops_per_s"), raw("hwt", "W1s", "ops_per_s"))))
    t44("W3 churn (a closure each): LuaJIT / timerwheel.lua >= 1.5", rel_or_why(jit, "timerwheel", "W3", "ops_per_s"), "ge", 1.5, "x",
        "0.2 binding " fmtx(rel(raw("hwtjit_old", "W3", "ops_per_s"), raw("timerwheel", "W3", "ops_per_s"))))
    t44("W2 cancel: LuaJIT / luv on " LUANAME " >= 4", rel_or_why(jit, "luv", "W2", "ops_per_s"), "ge", 4, "x",
        "floor " fmt(raw("jitfloor", "W2", "ops_per_s")) "/s = " fmtx(rel(raw("jitfloor", "W2", "ops_per_s"), raw("luv", "W2", "ops_per_s"))))
    t44("W1s bytes per pending timeout, LuaJIT <= 120", raw(jit, "W1s", "bytes_per_timeout") == "" ? cell(jit, "W1s", "bytes_per_timeout") : raw(jit, "W1s", "bytes_per_timeout"), "le", 120, " B",
        "floor " fmt(raw("jitfloor", "W1s", "bytes_per_timeout")) " B")
    t44("W4 callbacks/s while draining, LuaJIT >= 3M", raw(jit, "W4", "cb_per_s_drain") == "" ? cell(jit, "W4", "cb_per_s_drain") : raw(jit, "W4", "cb_per_s_drain"), "ge", 3e6, "",
        "floor " fmt(raw("jitfloor", "W4", "cb_per_s_drain")) "/s")
    printf("\nThe floors (bench/jit_floor.lua) are the same loops on LuaJIT with hwt taken out: a 16 B cdata, one FFI\n")
    printf("call on 64 B of C memory, the table stores (W1s: memory per pending, the 64 B included; W2: cancel in\n")
    printf("random order; W4: a closure each called in random order). 0.2 binding: the\n")
    printf("userdata binding of HWT_OLD_REF run in the same way.\n")
    exit
  }
  # PART == "detail": hwt on LUA against luv, the heap and Netty, every metric.
  # workload, metric, higher-is-better, label
  nr = split("W1 ops_per_s 1 schedule|W1 bytes_per_timeout 0 RSS/pending|" \
    "W1s ops_per_s 1 schedule, shared fn + arg|W1s bytes_per_timeout 0 RSS/pending, shared fn + arg|" \
    "W2 ops_per_s 1 cancel (random order)|W3 ops_per_s 1 churn schedule+cancel|" \
    "W3s ops_per_s 1 churn, shared fn + arg|" \
    "W4 wall_s 0 fire: wall, 1st schedule..last cb|W4 late_p50_ms 0 fire: lateness p50 ms|" \
    "W4 late_p99_ms 0 fire: lateness p99 ms|W4 late_p99_after_ms 0 fire: p99 ms, due after sched|" \
    "W4 late_max_ms 0 fire: lateness max ms|W4 early 0 fire: callbacks before deadline|" \
    "W4 cpu_s 0 fire: process CPU s|" \
    "W5 cpu_s 0 idle: process CPU s|W5 wakeups 0 idle: timer thread wake-ups|" \
    "W5 worker_wakeups 0 idle: hwt stats().worker_wakeups|" \
    "W6 cpu_s 0 spread: process CPU s|W6 late_p99_ms 0 spread: lateness p99 ms|" \
    "W6 late_p99_after_ms 0 spread: p99 ms, due after sched|" \
    "W6 late_p50_ms 0 spread: lateness p50 ms|W6 late_max_ms 0 spread: lateness max ms|" \
    "W6 early 0 spread: callbacks before deadline", rows, "|")
  printf("Detail (hwt on %s). Ratios: >1 means hwt is better (throughput: hwt/peer; times, CPU, bytes, lateness,\n", LUANAME)
  printf("wake-ups: peer/hwt); n/a = a negative (early) value; inf = hwt measured 0; ~ = both below 1 ms CPU;\n")
  printf("missing = peer not installed; failed = run failed. Lateness = callback time - (time at schedule + delay).\n")
  printf("luv counts deadlines from its cached loop time (1 ms units), not refreshed during a burst of\n")
  printf("schedules, so its callbacks can run early (negative lateness; see the early rows).\n")
  printf("Netty RSS/pending is Java heap in use per timeout.\n\n")
  fmtrow = "%-8s %-34s %10s %10s %10s %10s %9s %9s %9s\n"
  printf(fmtrow, "workload", "metric", "hwt", "luv", "heap", "netty", "hwt/luv", "hwt/heap", "hwt/netty")
  printf(fmtrow, "--------", "------", "---", "---", "----", "-----", "-------", "--------", "---------")
  for (i = 1; i <= nr; i++) {
    split(rows[i], f, " "); w = f[1]; m = f[2]; hi = f[3] + 0
    label = rows[i]; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", label)
    if (m == "ops_per_s") label = label " ops/s"
    if (m == "bytes_per_timeout") label = label " bytes"
    h = raw("hwt", w, m)
    printf(fmtrow, w, label, cell("hwt", w, m), cell("luv", w, m), cell("heap", w, m), cell("netty", w, m),
      ratio(h, raw("luv", w, m), hi, m), ratio(h, raw("heap", w, m), hi, m), ratio(h, raw("netty", w, m), hi, m))
  }
  printf("\nreference: Lua closure floor (create+store N closures, nothing else): %s ops/s\n", cell("lua", "W0", "ops_per_s"))
  printf("reference on LuaJIT, the same closure floor: %s ops/s\n", cell("luajit", "W0", "ops_per_s"))
  if (heapimpl != "") printf("heap peer: %s minUnique (index-tracked removal), loop sleeps with uv.sleep(ms)\n", heapimpl)
  printf("timerwheel.lua on LuaJIT: %s\n", ("timerwheel" in pstatus) ? pstatus["timerwheel"] : "ran (figures in the summary table)")
  # Sanity: every peer got the count it was asked for.
  for (key in val) {
    split(key, kk, SUBSEP)
    if (kk[3] == "n") { want = (kk[2] == "W6") ? N6 : N; if (val[key] + 0 != want) printf("WARNING: %s %s ran n=%s, expected %d\n", kk[1], kk[2], val[key], want) }
  }
  printf("\nC engine alone (build/bench_engine %d):\n", N)
  if (("engine" SUBSEP "all") in status) printf("  engine: %s\n", status["engine", "all"])
  else {
    split("schedule cancel expire", ops, " ")
    for (k = 1; k <= 3; k++) printf("  %-10s %10s ns/op\n", ops[k], cell("engine", ops[k], "ns_per_op"))
    printf("  what bounds them: cancel in array order %s ns, expire with nodes in deadline order %s ns,\n",
      cell("engine", "cancel_array_order", "ns_per_op"), cell("engine", "expire_in_deadline_order", "ns_per_op"))
    printf("  one dependent cache miss %s ns, independent misses %s ns each, clock_gettime %s ns, lock+unlock %s ns\n",
      cell("engine", "ref_cache_miss", "ns_per_op"), cell("engine", "ref_cache_miss_independent", "ns_per_op"),
      cell("engine", "ref_clock_gettime", "ns_per_op"), cell("engine", "ref_lock_unlock", "ns_per_op"))
    printf("  clock read + lock + a node pushed on a list (the floor of a schedule) %s ns;\n",
      cell("engine", "ref_schedule_floor", "ns_per_op"))
    printf("  clock read + lock + the wheel insert alone (levels, bits, lanes) %s ns\n",
      cell("engine", "ref_schedule_wheel", "ns_per_op"))
    printf("  a random node changed: alone %s ns, under a lock (the floor of any cancel) %s ns;\n",
      cell("engine", "ref_touch_random", "ns_per_op"), cell("engine", "ref_locked_touch_random", "ns_per_op"))
    printf("  unlinked from a list in random order, under a lock (the floor of an unlink at once) %s ns;\n",
      cell("engine", "ref_locked_unlink_random", "ns_per_op"))
    printf("  removed from the wheel alone, under a lock found through the node (no counts) %s ns, with the counts %s ns,\n",
      cell("engine", "ref_cancel_wheel", "ns_per_op"), cell("engine", "ref_cancel_wheel_counted", "ns_per_op"))
    printf("  the same from slots that are arrays (no neighbours touched) %s ns\n",
      cell("engine", "ref_cancel_slot_array", "ns_per_op"))
    printf("  the nodes an expiry touches, in the order the wheel walks them, prefetched (its memory floor) %s ns;\n",
      cell("engine", "ref_expire_memory", "ns_per_op"))
    printf("  the wheel alone, advanced into a due list, each node taken under a lock (no sort, counts or lateness) %s ns\n",
      cell("engine", "ref_expire_wheel", "ns_per_op"))
    printf("  CPU time of one 1 ms sleep %s ns (W6 sleeps about once a tick, 10^4 times);\n",
      cell("engine", "ref_sleep_cpu", "ns_per_op"))
    printf("  of one engine wake-up, tq_wait and a poll of the timeout due, %s ns\n",
      cell("engine", "wake_cpu", "ns_per_op"))
  }
}' "$RES"
}

table head > "$OUT/head"
table summary > "$OUT/summary"
table detail > "$OUT/detail"
{ cat "$OUT/head"; echo; cat "$OUT/summary"; echo; cat "$OUT/detail"; } > "$OUT/table"
cat "$OUT/table"

if [ "$MODE" = full ]; then
  R=bench/RESULTS.md
  MARK='<!-- bench:run -->'
  if [ -f "$R" ] && grep -qxF "$MARK" "$R"; then
    sed "/^$MARK\$/q" "$R" > "$OUT/md"
  else
    { [ -f "$R" ] && cat "$R" && echo; echo "$MARK"; } > "$OUT/md"
  fi
  {
    echo
    echo "## Side-by-side run ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo "Command: \`sh bench/run.sh full\` (\`make bench\`), from the project root," \
      "on commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ -n "$(git status --porcelain -- src lua 2>/dev/null)" ] && echo ' (src/ or lua/ with uncommitted changes)')."
    echo
    echo "Machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)," \
      "$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(uname -sr)."
    echo
    echo "Versions:"
    echo "- $($LUA -v 2>&1 | head -n1)"
    echo "- $($LUAJIT -v 2>&1 | head -n1 || echo "$LUAJIT missing")"
    echo "- luv $($LUA -e 'print(require("luv").version_string())' 2>/dev/null || echo missing) (libuv)"
    echo "- heap peer: $(grep -m1 'heap_impl' "$RES" | awk '{print $5}' || true) (lua-binaryheap from /usr/share/lua/5.1 when installed)"
    echo "- timerwheel.lua: $TW_STATUS"
    echo "- java: $(java -version 2>&1 | head -n1 || echo missing)"
    NV=$(unzip -p "$NETTY_JAR" META-INF/MANIFEST.MF 2>/dev/null | sed -n 's/^Implementation-Version: *//p' | tr -d '\r' | head -n1)
    echo "- netty: $NETTY_JAR ${NV:-version unknown}"
    echo "- $(${CC:-cc} --version 2>/dev/null | head -n1)"
    echo
    cat "$OUT/head"
    echo
    cat "$OUT/summary"
    echo
    echo '```'
    cat "$OUT/detail"
    echo '```'
  } >> "$OUT/md"
  cp "$OUT/md" "$R"
  say "wrote $R"
fi
