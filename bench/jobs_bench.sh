#!/bin/sh
# hwt.jobs beside BullMQ (bench/jobs_bench.lua): installs BullMQ from the npm
# registry under build/bullmq when missing (bench/bullmq/install.sh; without
# node, npm or the registry the BullMQ column is skipped, said so, and the
# hwt side still runs), starts a private redis-server on a free 127.0.0.1
# port (no persistence, maxmemory-policy noeviction as BullMQ asks, a
# scratch directory), runs every measure ROUNDS (3) times, prints the table
# (medians) on stdout and progress on stderr. The server and every worker and
# producer process are stopped by pid on any exit.
#   sh bench/jobs_bench.sh        (from the project root; builds with make all)
# Env: ROUNDS, PARTS (schedule,run,late,idle,cpu,shards), N_SCHEDULE_BATCH,
#      N_SCHEDULE_ONE, N_RUN, N_CPU, LATE_COUNT, LATE_RATE, LATE_DELAY,
#      IDLE_SECONDS, CLIENT (hwt.redis; or redis-lua), BULLMQ=0 (skip BullMQ), LUA (lua5.4).
set -eu
cd "$(dirname "$0")/.."

# The command as it was given: make's or this script's, with the settings set.
command_line() {
  settings=
  for var in ROUNDS PARTS N_SCHEDULE_BATCH N_SCHEDULE_ONE N_RUN N_CPU LATE_COUNT LATE_RATE \
             LATE_DELAY IDLE_SECONDS CLIENT BULLMQ LUA; do
    eval "value=\${$var:-}"
    if [ -n "$value" ]; then settings="$settings$var=$value "; fi
  done
  if [ -n "${MAKELEVEL:-}" ]; then echo "${settings}make bench-jobs"; else echo "${settings}sh bench/jobs_bench.sh"; fi
}
COMMAND=$(command_line)
LUA=${LUA:-lua5.4}
ROUNDS=${ROUNDS:-3}
export LUA ROUNDS
BULLMQ_DIR=build/bullmq
COORDINATOR_SECONDS=$((300 + 300 * ROUNDS))   # a round takes ~3 min
make -s all >&2

SCRATCH=$(mktemp -d /tmp/hwt-jobs-bench.XXXXXX)
REDIS_PID=
COORDINATOR_PID=
cleanup() {
  rm -f "$SCRATCH/alive"                  # workers see it and exit
  if [ -n "$COORDINATOR_PID" ]; then kill "$COORDINATOR_PID" 2>/dev/null || true; fi
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
    echo "worker and producer stderr:" >&2
    tail -n 20 "$SCRATCH/workers.err" >&2
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The node_modules directory BullMQ runs from, or "-" with the reason on stdout.
bullmq_node_path() {
  if [ "${BULLMQ:-1}" = 0 ]; then
    echo "BullMQ: skipped (BULLMQ=0)." >&2
    echo -
  elif sh bench/bullmq/install.sh "$BULLMQ_DIR" 2>"$SCRATCH/install.err"; then
    echo "$BULLMQ_DIR/node_modules"
  else
    echo "BullMQ: skipped ($(cat "$SCRATCH/install.err"))." >&2
    echo -
  fi
}

package_version() {
  node -p "require('./$1/package.json').version" 2>/dev/null || echo '?'
}

versions() {
  printf '%s; %s; client %s' "$(redis-server --version | sed 's/ sha=.*//')" \
    "$("$LUA" -v 2>&1 | cut -d' ' -f1-2)" "${CLIENT:-hwt.redis}"
  if [ "$1" != - ]; then
    printf '; node %s, BullMQ %s, ioredis %s' "$(node --version)" \
      "$(package_version "$1/bullmq")" "$(package_version "$1/ioredis")"
  fi
}

NODE_MODULES=$(bullmq_node_path)

PORT=$("$LUA" -e 'local s = require("socket"); local p = assert(s.bind("127.0.0.1", 0));
  local _, port = p:getsockname(); print(port); p:close()')
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$SCRATCH" --save '' --appendonly no \
  --maxmemory-policy noeviction --daemonize no --logfile "$SCRATCH/redis.log" >/dev/null 2>&1 &
REDIS_PID=$!
i=0
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 100 ]; then echo "redis-server did not answer within 10 s" >&2; exit 1; fi
  sleep 0.1
done

echo "Command: \`$COMMAND\`; $(date -u '+%Y-%m-%d %H:%M UTC');" \
  "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(nproc) CPUs; $(versions "$NODE_MODULES")." \
  "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
# In the background, so that a signal runs the trap at once (sh holds a trap
# until a foreground command ends).
LUA_PATH="bench/?.lua;lua/?.lua;/usr/share/lua/5.3/?.lua;${LUA_PATH:-;}" \
LUA_CPATH="build/lua5.4/?.so;${LUA_CPATH:-;}" \
  timeout "$COORDINATOR_SECONDS" "$LUA" bench/jobs_bench.lua "$PORT" "$SCRATCH" "$NODE_MODULES" \
  > "$SCRATCH/out.txt" &
COORDINATOR_PID=$!
wait "$COORDINATOR_PID"
COORDINATOR_PID=
mkdir -p build && cp "$SCRATCH/out.txt" build/jobs_bench_results.txt   # with the RESULT lines of each round
grep -v '^RESULT ' "$SCRATCH/out.txt"
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)."
