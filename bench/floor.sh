#!/bin/sh
# Floors (issue 13): builds bench/floor_mod.c for Lua 5.4 and LuaJIT into
# build/floor/<vm>/, runs bench/floor.lua on both and prints a Markdown table
# (one row per measure). Depends on nothing of hwt's own code.
#   sh bench/floor.sh        (from the project root; env N overrides 10^6)
#   sh bench/floor.sh build  (only builds floor_mod, for bench/contract.sh)
# Compile lines go to stderr, the table to stdout; each VM's RESULT lines are
# kept in build/floor/<vm>/results.txt.
set -eu
cd "$(dirname "$0")/.."
FLAGS='-std=c11 -Wall -Wextra -Wpedantic -O2 -fPIC -shared'
OUT=build/floor
for vm in lua5.4 luajit; do
  case $vm in
    lua5.4) inc=/usr/include/lua5.4 ;;
    luajit) inc=/usr/include/luajit-2.1 ;;
  esac
  mkdir -p "$OUT/$vm"
  cmd="${CC:-cc} $FLAGS -I$inc -o $OUT/$vm/floor_mod.so bench/floor_mod.c"
  echo "+ $cmd" >&2
  $cmd
done
[ "${1:-}" = build ] && exit 0

for vm in lua5.4 luajit; do
  echo "+ running bench/floor.lua on $vm" >&2
  LUA_CPATH="$OUT/$vm/?.so;;" "$vm" bench/floor.lua > "$OUT/$vm/results.txt"
done

echo "Command: \`sh bench/floor.sh\` (N=${N:-1000000}, median of 3 rounds);" \
  "$(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD);" \
  "$(nproc) CPUs, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')."
echo
echo "| measure | unit | Lua 5.4 | LuaJIT |"
echo "|---|---|--:|--:|"
awk '$1 == "RESULT" && $2 == "floor" {
       if (!($4 in unit)) { order[++n] = $4; unit[$4] = $6 }
       v[$3, $4] = $5
     }
     END {
       for (i = 1; i <= n; i++) {
         m = order[i]
         printf "| %s | %s | %s | %s |\n", m, unit[m], v["lua5.4", m], v["luajit", m]
       }
     }' "$OUT/lua5.4/results.txt" "$OUT/luajit/results.txt"
