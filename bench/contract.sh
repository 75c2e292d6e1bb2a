#!/bin/sh
# hwt against the contract's floor (issue 13): bench/lua_bench.lua's W1, W1s,
# W2, W3 and W3s run by hwt and by the `contract` peer (bench/floor_mod.c: the
# Lua-side work the API asks of any binding, with no timer behind it), on Lua
# 5.4 and LuaJIT, interleaved, one process per run, ROUNDS rounds (default 3);
# prints the medians and hwt's cost over the floor in ns per operation, then
# issue 13's targets against luv and the Lua heap (run beside them, on Lua
# 5.4) next to what the floor itself reaches. W6 (N/5 timeouts fired over
# 10 s) runs hwt, the floor (which also fires them: floor_mod's run) and Netty,
# for the target W6 CPU <= Netty's, and counts the rounds in which each
# stays within Netty's CPU. With TIMERWHEEL_DIR set (see bench/run.sh),
# timerwheel.lua runs on LuaJIT beside them, for the target W3 on LuaJIT >= 2x
# timerwheel.lua.
#   sh bench/contract.sh     (from the project root; env N overrides 10^6,
#                             WORKLOADS the list, e.g. WORKLOADS=W6)
set -eu
cd "$(dirname "$0")/.."
N=${N:-1000000}
N6=$((N / 5))
ROUNDS=${ROUNDS:-3}
WORKLOADS=${WORKLOADS:-W1 W1s W2 W3 W3s W6}
NETTY_JAR=${NETTY_JAR:-/usr/share/java/netty-common.jar}
OUT=build/contract
mkdir -p "$OUT"
make -s all >&2
make -s LUA=luajit all >&2
sh bench/floor.sh build 2>/dev/null
NETTY=no
NETTY_JAR="$NETTY_JAR" sh bench/netty/build.sh && NETTY=yes
: > "$OUT/results.txt"
for round in $(seq "$ROUNDS"); do
  for w in $WORKLOADS; do
    n=$N
    [ "$w" = W6 ] && n=$N6
    for vm in lua5.4 luajit; do
      peers="hwt contract"
      [ "$vm" = lua5.4 ] && [ "$w" != W6 ] && peers="$peers luv heap"   # the targets' peers
      [ "$vm" = luajit ] && [ "$w" != W6 ] && [ -n "${TIMERWHEEL_DIR:-}" ] && peers="$peers timerwheel"
      for peer in $peers; do
        LUA_PATH="lua/?.lua;${TIMERWHEEL_DIR:+$TIMERWHEEL_DIR/src/?/init.lua;};" \
          LUA_CPATH="build/$vm/?.so;build/floor/$vm/?.so;;" \
          "$vm" bench/lua_bench.lua "$peer" "$w" "$n" |
          sed -n "s/^RESULT $peer $w \([a-z_]*\) \(.*\)/$vm $peer $w \1 \2 $round/p" >> "$OUT/results.txt"
      done
    done
    if [ "$w" = W6 ] && [ "$NETTY" = yes ]; then
      java -cp "bench/netty/build:$NETTY_JAR" HwtBench W6 "$n" |
        sed -n "s/^RESULT netty W6 \([a-z_]*\) \(.*\)/java netty W6 \1 \2 $round/p" >> "$OUT/results.txt"
    fi
  done
done
echo "Command: \`sh bench/contract.sh\` (N=$N, median of $ROUNDS interleaved rounds);" \
  "$(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD);" \
  "$(nproc) CPUs, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')."
echo
echo "| workload | VM | hwt ops/s | floor ops/s | hwt ns/op | floor ns/op | hwt over the floor, ns | hwt bytes | floor bytes |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
awk '
  function median(key,   n, i, j, t, a) {
    n = split(samples[key], a, " ")
    if (n == 0) return ""
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return a[int((n + 1) / 2)]
  }
  { key = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4; samples[key] = samples[key] " " $5
    if ($3 == "W6" && $4 == "cpu_s") w6[$1 SUBSEP $2 SUBSEP $6] = $5
    if (!(($3) in seen)) { seen[$3] = 1; order[++nw] = $3 } }
  # Rounds in which peer ran W6 on vm within Netty CPU of the same round.
  function rounds_within_netty(vm, peer,   r, k) {
    k = 0
    for (r = 1; r <= rounds; r++)
      if ((vm SUBSEP peer SUBSEP r) in w6 && ("java" SUBSEP "netty" SUBSEP r) in w6 &&
          w6[vm SUBSEP peer SUBSEP r] + 0 <= w6["java" SUBSEP "netty" SUBSEP r] + 0) k++
    return k
  }
  END {
    split("lua5.4 luajit", vms, " ")
    for (i = 1; i <= nw; i++) for (v = 1; v <= 2; v++) {
      w = order[i]; vm = vms[v]
      if (w == "W6") continue
      h = median(vm SUBSEP "hwt" SUBSEP w SUBSEP "ops_per_s")
      f = median(vm SUBSEP "contract" SUBSEP w SUBSEP "ops_per_s")
      hb = median(vm SUBSEP "hwt" SUBSEP w SUBSEP "bytes_per_timeout")
      fb = median(vm SUBSEP "contract" SUBSEP w SUBSEP "bytes_per_timeout")
      printf "| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", w, vm, h, f, 1e9 / h, 1e9 / f,
        1e9 / h - 1e9 / f, hb == "" ? "-" : sprintf("%.1f", hb), fb == "" ? "-" : sprintf("%.1f", fb)
    }
    target_rows = ""
    ntargets = split("lua5.4 W1 luv 3|lua5.4 W2 luv 4|lua5.4 W3 luv 4|lua5.4 W3 heap 2|luajit W3 timerwheel 2", targets, "|")
    for (i = 1; i <= ntargets; i++) {
      split(targets[i], t, " ")
      vm = t[1]; w = t[2]
      p = median(vm SUBSEP t[3] SUBSEP w SUBSEP "ops_per_s")
      h = median(vm SUBSEP "hwt" SUBSEP w SUBSEP "ops_per_s")
      f = median(vm SUBSEP "contract" SUBSEP w SUBSEP "ops_per_s")
      if (p == "" || h == "" || f == "") continue          # workload or peer not run
      target_rows = target_rows sprintf("| %s on %s: hwt / %s >= %s | %.2fx | %.2fx |\n", w, vm, t[3], t[4], h / p, f / p)
    }
    if (target_rows != "") printf "\n| target | hwt | the contract floor |\n|---|--:|--:|\n%s", target_rows
    if (!("W6" in seen)) exit
    netty = median("java" SUBSEP "netty" SUBSEP "W6" SUBSEP "cpu_s")
    print ""
    print "| W6 (" n6 " timeouts fired over 10 s) | VM | hwt CPU s | floor CPU s | hwt over the floor, s | Netty CPU s | Netty / hwt | Netty / floor | rounds within Netty: hwt, floor |"
    print "|---|---|--:|--:|--:|--:|--:|--:|--|"
    for (v = 1; v <= 2; v++) {
      h = median(vms[v] SUBSEP "hwt" SUBSEP "W6" SUBSEP "cpu_s")
      f = median(vms[v] SUBSEP "contract" SUBSEP "W6" SUBSEP "cpu_s")
      if (netty == "") printf "| W6 CPU | %s | %.2f | %.2f | %.2f | missing | - | - | - |\n", vms[v], h, f, h - f
      else printf "| W6 CPU | %s | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %d, %d of %d |\n", vms[v], h, f, h - f,
        netty, netty / h, netty / f, rounds_within_netty(vms[v], "hwt"), rounds_within_netty(vms[v], "contract"), rounds
    }
  }' n6="$N6" rounds="$ROUNDS" "$OUT/results.txt"
