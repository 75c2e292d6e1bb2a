#!/bin/sh
# Runs every hwt test — C tests, busted specs, examples — once against the
# plain build and once under AddressSanitizer + UBSan, then prints the total
# as "N passed, N failed"; the engine's C test also runs under TSan. Called
# by `make test` (HWT_ONLY=plain|asan: one half).
LUA=${LUA:-lua5.4}
BUSTED=${BUSTED:-$(command -v busted)}
EXAMPLE_TIMEOUT=60
SANITIZER_ENV=""
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

count() {  # count PASSED FAILED LABEL
  passed=$((passed + $1)); failed=$((failed + $2))
  echo "$3: $1 passed, $2 failed"
}

run_c_tests() {  # run_c_tests DIR
  for bin in "$1"/test_*; do
    [ -x "$bin" ] || continue
    "$bin" >"$log" 2>&1
    status=$?
    grep -v ' passed, .* failed$' "$log"
    line=$(grep -E '^[a-z_]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    p=$(echo "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then p=0; f=1; fi
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    count "$p" "$f" "$(basename "$(dirname "$bin")")/$(basename "$bin")"
  done
}

run_busted() {  # run_busted CPATH LABEL
  env LUA_CPATH="$1;;" $SANITIZER_ENV "$LUA" "$BUSTED" --cpath="$1" -o plainTerminal >"$log" 2>&1
  status=$?
  summary=$(grep -E '^[0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' "$log" | tail -n 1)
  if [ "$status" -ne 0 ] || [ -z "$summary" ]; then cat "$log"; else tail -n 3 "$log" | head -n 1; fi
  ok=$(echo "$summary" | sed -E 's/^([0-9]+) success.*/\1/')
  bad=$(echo "$summary" | sed -E 's/.* ([0-9]+) failures? \/ ([0-9]+) errors?.*/\1 + \2/')
  skipped=$(echo "$summary" | sed -E 's/.* ([0-9]+) pending.*/\1/')
  if [ -z "$summary" ]; then ok=0; bad=1; skipped=0; fi
  bad=$(($bad + $skipped))          # a skipped spec is not a pass
  if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
  count "$ok" "$bad" "$2"
}

run_examples() {  # run_examples CPATH LABEL
  p=0; f=0
  for example in examples/*.lua; do
    if env LUA_PATH='lua/?.lua;;' LUA_CPATH="$1;;" $SANITIZER_ENV timeout "$EXAMPLE_TIMEOUT" "$LUA" "$example" >"$log" 2>&1; then
      p=$((p + 1))
    else
      f=$((f + 1)); echo "FAILED: $example"; cat "$log"
    fi
  done
  count "$p" "$f" "$2"
}

if [ "${HWT_ONLY:-}" != asan ]; then
  run_c_tests build
  run_busted './?.so' "busted specs"
  run_examples './?.so' "examples"
fi

if [ "${HWT_ONLY:-}" != plain ]; then
  runtime="$(${CC:-cc} -print-file-name=libasan.so):$(${CC:-cc} -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="halt_on_error=1"
  run_c_tests build/asan
  run_c_tests build/tsan
  # Debian's lua is not instrumented: preload the runtimes for it alone.
  SANITIZER_ENV="LD_PRELOAD=$runtime"
  run_busted 'build/asan/?.so' "busted specs (asan+ubsan)"
  run_examples 'build/asan/?.so' "examples (asan+ubsan)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
