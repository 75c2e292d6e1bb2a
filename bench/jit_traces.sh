#!/bin/sh
# Whether LuaJIT compiles hwt's side of the hot loops (issue 44): runs the
# hwt peer of bench/lua_bench.lua under `luajit -jv` for W1s, W2, W3s and W4
# and prints, per workload, the traces recorded and every trace abort whose
# start or abort point lies in hwt's Lua files (lua/hwt.lua, lua/hwt/*.lua).
# Aborts in bench/lua_bench.lua itself (its W2 and W4 make a closure per
# timeout while scheduling: "NYI: bytecode 51", FNEW) are counted apart.
# Exits non-zero when an abort lies on hwt's side.
#   sh bench/jit_traces.sh [N]        (from the project root; N = 2x10^5)
set -u
cd "$(dirname "$0")/.." || exit 1
N=${1:-200000}
LUAJIT=${LUAJIT:-luajit}
make -s LUA=luajit all >&2 || exit 1
export LUA_PATH='lua/?.lua;;' LUA_CPATH='build/luajit/?.so;;'
status=0
printf '| workload | traces | aborts in hwt | aborts elsewhere |\n|---|--:|--:|--:|\n'
for w in W1s W2 W3s W4; do
  log=$("$LUAJIT" -jv bench/lua_bench.lua hwt "$w" "$N" 2>&1 | grep '^\[TRACE')
  traces=$(printf '%s\n' "$log" | grep -c '^\[TRACE *[0-9]')
  aborts=$(printf '%s\n' "$log" | grep '^\[TRACE ---')
  # An abort is hwt's when the point it names (" at <file>:<line>", else where
  # the trace started) is in hwt's files. "return to lower frame" is a loop's
  # own exit (the drain loop returning when nothing more is due), not a
  # failed compile.
  hwt_aborts=$(printf '%s\n' "$aborts" | grep -v 'return to lower frame' |
    sed -E 's/^\[TRACE --- (\([0-9/]+\) )?([^ ]+) -- (.* at ([^ ]+)\]|.*)$/\4 \2/' |
    awk '{ where = ($1 ~ /:/) ? $1 : $2 } where ~ /^(hwt|jit|dispatch|checks|stop|sleep)\.lua:/' | grep -c .)
  other=$(printf '%s\n' "$aborts" | grep -c .)
  other=$((other - hwt_aborts))
  printf '| %s | %s | %s | %s |\n' "$w" "$traces" "$hwt_aborts" "$other"
  if [ "$hwt_aborts" -ne 0 ]; then
    status=1
    printf '%s\n' "$aborts" | sort | uniq -c >&2
  fi
done
exit $status
