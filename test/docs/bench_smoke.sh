#!/bin/sh
# Smoke test of the benchmark harness (make check, CI): runs `sh bench/run.sh
# smoke` (make bench-quick's workloads, smaller: N = 2x10^4, W6 over 1 s) and
# checks that the harness works, not its numbers: bench/run.sh exits 0, its
# table has (at least) the rows below, every row
# has a value in every peer's column (none "missing" or "failed": make check
# installs all the peers, nor "-" but where a peer lacks the metric), and
# bench/RESULTS.md is left alone (only full writes it).
# One test; the last line is "bench smoke: N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hwt-bench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
results_before=$(cksum < bench/RESULTS.md)

# Under a minute; the bound keeps a hung peer from eating CI's 10 minutes.
timeout 300 sh bench/run.sh smoke > "$tmp/table" 2> "$tmp/log"
status=$?
cat "$tmp/table"

awk '
function bad(msg) { print msg; nbad++ }
function num(v) { return v ~ /^-?[0-9.]+(e[-+]?[0-9]+)?M?$/ }
BEGIN {
  nwant = split("W1 schedule ops/s|W1 RSS/pending bytes|W2 cancel (random order) ops/s|" \
    "W3 churn schedule+cancel ops/s|W4 fire: wall, 1st schedule..last cb|" \
    "W4 fire: lateness p50 ms|W4 fire: lateness p99 ms|W4 fire: p99 ms, due after sched|" \
    "W4 fire: lateness max ms|W4 fire: callbacks before deadline|W4 fire: process CPU s|" \
    "W5 idle: process CPU s|W5 idle: timer thread wake-ups|W5 idle: hwt stats().worker_wakeups|" \
    "W6 spread: process CPU s|W6 spread: lateness p99 ms|W6 spread: lateness p50 ms|" \
    "W6 spread: lateness max ms|W6 spread: callbacks before deadline|" \
    "reference|engine schedule|engine cancel|engine expire", want, "|")
  split("hwt luv heap netty", peer, " ")
  # "-" by design: a metric that peer does not have.
  dash["W4 fire: callbacks before deadline", "netty"]
  dash["W6 spread: callbacks before deadline", "netty"]
  dash["W5 idle: hwt stats().worker_wakeups", "luv"]
  dash["W5 idle: hwt stats().worker_wakeups", "heap"]
  dash["W5 idle: hwt stats().worker_wakeups", "netty"]
}
# A row: workload, metric label, 4 values (hwt luv heap netty), 3 ratios.
/^W[0-9] / {
  key = $1
  for (i = 2; i <= NF - 7; i++) key = key " " $i
  seen[key]++
  for (i = 1; i <= 4; i++) {
    v = $(NF - 7 + i)
    if (!num(v) && !(v == "-" && ((key, peer[i]) in dash))) bad(key ": " peer[i] " is \"" v "\"")
  }
}
/^reference: / { seen["reference"]++; if (!num($(NF - 1))) bad("reference: \"" $(NF - 1) "\"") }
/^  (schedule|cancel|expire) .* ns\/op$/ { seen["engine " $1]++; if (!num($2)) bad("engine " $1 ": \"" $2 "\"") }
/^C engine alone/ { engine = 1 }
engine { for (i = 1; i <= NF; i++) if ($i ~ /^(-|missing|failed)$/) bad("engine: " $0) }
/^WARNING/ { bad($0) }
END {
  for (i = 1; i <= nwant; i++) {
    if (!(want[i] in seen)) bad("no row: " want[i])
    else if (seen[want[i]] > 1) bad("row twice: " want[i])
  }
  exit nbad > 0
}' "$tmp/table" > "$tmp/problems"
table_ok=$?

[ "$status" -eq 0 ] || echo "bench/run.sh quick exited $status" >> "$tmp/problems"
[ "$(cksum < bench/RESULTS.md)" = "$results_before" ] ||
  echo "bench/RESULTS.md changed (quick must only print)" >> "$tmp/problems"

if [ "$status" -eq 0 ] && [ "$table_ok" -eq 0 ] && [ ! -s "$tmp/problems" ]; then
  echo "bench smoke: 1 passed, 0 failed"
else
  echo "bench/run.sh stderr:"; sed 's/^/  /' "$tmp/log"
  sed 's/^/FAILED: /' "$tmp/problems"
  echo "bench smoke: 0 passed, 1 failed"
  exit 1
fi
