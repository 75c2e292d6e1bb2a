#!/bin/sh
# The Lua module exports its loader and hwt_preload only (src/hwt.h): its
# engine's names (wheel_insert, tq_schedule, ...) stay inside it, and its own
# calls bind directly. Checks each hwt/core.so given.
#   sh test/docs/exports_test.sh build/lua5.4/hwt/core.so ...
passed=0
failed=0
expected='hwt_preload luaopen_hwt_core'
for module in "$@"; do
  exported=$(nm -D --defined-only "$module" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort | tr '\n' ' ')
  if [ "$exported" = "$expected " ]; then
    passed=$((passed + 1))
  else
    echo "$module exports: $exported(expected: $expected)"
    failed=$((failed + 1))
  fi
done
echo "exports: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
