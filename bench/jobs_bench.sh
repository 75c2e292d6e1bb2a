#!/bin/sh
# hwt.jobs against a hand-written Redis polling loop (bench/jobs_bench.lua):
# starts a private redis-server on a free 127.0.0.1 port (no persistence, a
# scratch directory), runs every measure ROUNDS (3) times, prints the table
# (medians) on stdout and progress on stderr; the server and every worker
# process are stopped on any exit.
#   sh bench/jobs_bench.sh        (from the project root; builds with make all)
# Env: ROUNDS, N_SCHEDULE, N_RUN, LATE_RATE, LATE_COUNT, LATE_DMAX,
#      PICKUP_RATE, PICKUP_COUNT, IDLE_SECONDS, LUA (default lua5.4).
set -eu
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
export LUA
make -s all >&2

SCRATCH=$(mktemp -d /tmp/hwt-jobs-bench.XXXXXX)
REDIS_PID=
cleanup() {
  rm -f "$SCRATCH/alive"                  # workers see it and exit
  if [ -f "$SCRATCH/pids" ]; then
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$SCRATCH/pids"
  fi
  if [ -n "$REDIS_PID" ]; then
    kill "$REDIS_PID" 2>/dev/null || true
    i=0
    while kill -0 "$REDIS_PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$REDIS_PID" 2>/dev/null || true
  fi
  if [ -s "$SCRATCH/workers.err" ]; then
    echo "worker stderr:" >&2
    tail -n 20 "$SCRATCH/workers.err" >&2
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$("$LUA" -e 'local s = require("socket"); local p = assert(s.bind("127.0.0.1", 0));
  local _, port = p:getsockname(); print(port); p:close()')
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$SCRATCH" --save '' --appendonly no \
  --daemonize no --logfile "$SCRATCH/redis.log" >/dev/null 2>&1 &
REDIS_PID=$!
i=0
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 100 ]; then echo "redis-server did not answer within 10 s" >&2; exit 1; fi
  sleep 0.1
done

echo "Command: \`sh bench/jobs_bench.sh\`; $(date -u '+%Y-%m-%d %H:%M UTC');" \
  "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?');" \
  "$(nproc) CPUs; $(redis-server --version | sed 's/ sha=.*//'); $("$LUA" -v 2>&1 | cut -d' ' -f1-2)." \
  "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
LUA_PATH="lua/?.lua;/usr/share/lua/5.3/?.lua;${LUA_PATH:-;}" \
LUA_CPATH="build/lua5.4/?.so;${LUA_CPATH:-;}" \
  timeout 600 "$LUA" bench/jobs_bench.lua "$PORT" "$SCRATCH" > "$SCRATCH/out.txt"
mkdir -p build && cp "$SCRATCH/out.txt" build/jobs_bench_results.txt   # with the RESULT lines of each round
grep -v '^RESULT ' "$SCRATCH/out.txt"
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)."
