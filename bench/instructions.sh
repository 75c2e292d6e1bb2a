#!/bin/sh
# Instructions per operation of bench/instructions.lua's modes, counted by
# callgrind: (count at N = 120000 - count at N = 20000) / 100000.
#   sh bench/instructions.sh [lua5.4|luajit] [mode ...]   (from the project root, after make)
set -eu
cd "$(dirname "$0")/.."
vm=${1:-lua5.4}
[ $# -gt 0 ] && shift
modes=${*:-closure schedule schedule_shared churn churn_shared drain}
count() {
  MODE=$1 N=$2 LUA_PATH='lua/?.lua;;' LUA_CPATH="build/$vm/?.so;;" \
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$vm" bench/instructions.lua 2>&1 |
    sed -n 's/.*refs: *//p' | tr -d ,
}
for mode in $modes; do
  low=$(count "$mode" 20000)
  high=$(count "$mode" 120000)
  echo "$vm $mode $(( (high - low) / 100000 )) instructions/op"
done
