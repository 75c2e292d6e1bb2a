#!/bin/sh
# Runs the hwt test suites and prints their total as "N passed, N failed".
# Beside it: unit/ (the C unit tests), stress/ (stress, fuzz and sanitizer
# hosts), host/ (real nginx, Redis, LuaRocks), docs/ (the docs and packaging
# checks); deps.sh installs what they need.
#   make test:  C tests, busted specs, examples, the README's example, every
#               code block of the docs (test/docs/doc_blocks_test.sh: nginx ones in a
#               real nginx when there is one) and
#               hwt.jobs across worker processes (test/host/jobs_test.lua: a real
#               redis-server, then a real 3-node Redis Cluster) against the plain build; specs (but hwt.jobs', tagged
#               #redis; hwt.redis' is run) and examples plus memory
#               scenarios under ASan+UBSan (leak detection on); the
#               engine's C test under TSan.
#   make check: all of that on every Lua (HWT_OTHER_LUAS), plus the
#               reliability checks (HWT_CHECK=1): the differential fuzzer,
#               libFuzzer on the wheel, the TSan engine stress test,
#               allocation failures, the soak, the chaos run (ASan, TSan; and
#               under ASan with a collector step at every allocation; on LuaJIT
#               too, under ASan, and its differential fuzzer), a real nginx with
#               lua-nginx-module, hwt.jobs in nginx, a LuaRocks install, and a smoke run of
#               the benchmark harness (bench/run.sh quick).
# HWT_ONLY=plain|asan runs one half of `make test`.
# LUA (default lua5.4) is the interpreter; HWT_OUT (default build/$LUA) holds
# its builds: $HWT_OUT/hwt/core.so, $HWT_OUT/asan/hwt/core.so, ...
# HWT_OTHER_LUAS="lua5.1 luajit ..." (make test-all-luas) first runs the plain
# busted specs and examples on each of those (built in build/<lua>/; on
# luajit the specs, and hwt.redis' own, also under ASan+UBSan, build/luajit/asan/), then
# everything above on $LUA; the last line totals them all.
LUA=${LUA:-lua5.4}
OUT=${HWT_OUT:-build/$LUA}
BUSTED=${BUSTED:-$(command -v busted)}
SCRIPT_TIMEOUT=120
SANITIZER_ENV=""
passed=0
failed=0
failed_suites=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT

count() {  # count PASSED FAILED LABEL [WHICH_FAILED]
  passed=$((passed + $1)); failed=$((failed + $2))
  echo "$3: $1 passed, $2 failed"
  if [ "$2" -ne 0 ]; then failed_suites="$failed_suites$3: $2 failed
${4:-}"; fi
}

# Runs a command that ends its output with "name: N passed, N failed".
run_counted() {  # run_counted LABEL COMMAND...
  label=$1; shift
  "$@" >"$log" 2>&1
  status=$?
  grep -v ' passed, [0-9]* failed$' "$log"
  line=$(grep -E '^[a-z_ ]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  p=$(echo "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  if [ -z "$line" ]; then p=0; f=1; fi
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  count "$p" "$f" "$label"
}

run_c_tests() {  # run_c_tests DIR
  for bin in "$1"/test_*; do
    [ -x "$bin" ] && run_counted "$(basename "$1")/$(basename "$bin")" "$bin"
  done
}

# Under the sanitizers the specs tagged #redis (hwt.jobs against a real
# redis-server: Lua code and Redis round trips, which the plain runs cover on
# every Lua) are left out: those runs are for hwt's C code, which the other
# specs and the chaos runs drive. hwt.redis' own spec, C code too, runs
# there by name (SPEC).
run_busted() {  # run_busted CPATH LABEL [SPEC]
  excluded=""
  [ -z "$SANITIZER_ENV" ] || [ -n "${3:-}" ] || excluded="--exclude-tags=redis"
  # shellcheck disable=SC2086  # $excluded: one word or none
  env LUA="$LUA" LUA_CPATH="$1;;" $SANITIZER_ENV "$LUA" "$BUSTED" --cpath="$1" $excluded -o plainTerminal ${3:-} \
    >"$log" 2>&1
  status=$?
  summary=$(grep -E '^[0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' "$log" | tail -n 1)
  if [ "$status" -ne 0 ] || [ -z "$summary" ]; then cat "$log"; fi
  ok=$(echo "$summary" | sed -E 's/^([0-9]+) success.*/\1/')
  bad=$(echo "$summary" | sed -E 's/.* ([0-9]+) failures? \/ ([0-9]+) errors?.*/\1 + \2/')
  skipped=$(echo "$summary" | sed -E 's/.* ([0-9]+) pending.*/\1/')
  if [ -z "$summary" ]; then ok=0; bad=1; skipped=0; fi
  bad=$(($bad + $skipped))          # a skipped spec is not a pass
  if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
  which=$(awk '/^(Failure|Error) -> /{ where = $0; getline; print "  " where ": " $0 }' "$log")
  count "$ok" "$bad" "$2" "${which:+$which
}"
}

# Each script is one test: it passes when it exits 0.
run_lua_scripts() {  # run_lua_scripts CPATH LABEL SCRIPT [ARG]...
  cpath=$1; label=$2; script=$3; shift 3
  p=0; f=0; which=""
  for argument in "$@"; do
    if env LUA_PATH='lua/?.lua;;' LUA_CPATH="$cpath;;" $SANITIZER_ENV \
         timeout "$SCRIPT_TIMEOUT" "$LUA" $script $argument >"$log" 2>&1; then
      p=$((p + 1))
    else
      f=$((f + 1)); echo "FAILED: $script $argument"; cat "$log"
      which="$which  ${script:+$script }$argument
"
    fi
  done
  count "$p" "$f" "$label" "$which"
}

run_examples() {  # run_examples CPATH LABEL
  cpath=$1; label=$2
  run_lua_scripts "$cpath" "$label" "" examples/*.lua
}

sanitizer_runtime="$(${CC:-cc} -print-file-name=libasan.so):$(${CC:-cc} -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1"

# The plain half on the other interpreters (make test-all-luas); on LuaJIT,
# whose FFI take is C code of its own, the specs under ASan+UBSan too.
main_lua=$LUA
for LUA in ${HWT_OTHER_LUAS:-}; do
  run_busted "build/$LUA/?.so" "busted specs ($LUA)"
  run_examples "build/$LUA/?.so" "examples ($LUA)"
  if [ "$LUA" = luajit ]; then
    SANITIZER_ENV="LD_PRELOAD=$sanitizer_runtime"
    run_busted "build/$LUA/asan/?.so" "busted specs ($LUA, asan+ubsan)"
    run_busted "build/$LUA/asan/?.so" "hwt.redis spec ($LUA, asan+ubsan)" spec/redis_client_spec.lua
    SANITIZER_ENV=""
  fi
done
LUA=$main_lua

memory_scenarios=$(LUA_PATH='lua/?.lua;;' LUA_CPATH="$OUT/?.so;;" "$LUA" test/stress/memory.lua)

if [ "${HWT_ONLY:-}" != asan ]; then
  run_c_tests build
  run_c_tests build/no_int128
  run_busted "$OUT/?.so" "busted specs ($LUA)"
  run_examples "$OUT/?.so" "examples ($LUA)"
  run_counted "README example ($LUA)" env LUA="$LUA" HWT_OUT="$OUT" sh test/docs/readme_test.sh
  run_counted "doc blocks ($LUA)" env LUA="$LUA" HWT_OUT="$OUT" sh test/docs/doc_blocks_test.sh
  run_counted "LuaLS annotations ($LUA)" env LUA_PATH='lua/?.lua;;' LUA_CPATH="$OUT/?.so;;" "$LUA" test/docs/meta_test.lua
  run_counted "module exports ($LUA)" sh test/docs/exports_test.sh "$OUT/hwt/core.so"
  run_counted "no thread for the worker ($LUA)" env LD_PRELOAD="$PWD/build/no_thread.so" \
    LUA_PATH='lua/?.lua;;' LUA_CPATH="$OUT/?.so;;" "$LUA" test/stress/no_thread_test.lua
  run_counted "hwt.jobs: workers, kills, a Redis restart ($LUA)" env LUA="$LUA" LUA_CPATH="$OUT/?.so;;" \
    timeout "$SCRIPT_TIMEOUT" "$LUA" test/host/jobs_test.lua
  run_counted "hwt.jobs: a queue sharded over a 3-node Redis Cluster, the same faults ($LUA)" \
    env LUA="$LUA" LUA_CPATH="$OUT/?.so;;" timeout "$SCRIPT_TIMEOUT" "$LUA" test/host/jobs_test.lua --cluster
fi

if [ "${HWT_ONLY:-}" != plain ]; then
  run_c_tests build/asan
  run_c_tests build/tsan
  run_counted "tsan/host_threads ($LUA)" "$OUT/tsan/host_threads"
  run_counted "asan/close_host ($LUA)" "$OUT/asan/close_host" "$OUT/asan/?.so"
  run_counted "tsan/close_host ($LUA)" "$OUT/tsan/close_host"
  # Debian's lua is not instrumented: preload the runtimes for it alone.
  SANITIZER_ENV="LD_PRELOAD=$sanitizer_runtime"
  run_busted "$OUT/asan/?.so" "busted specs ($LUA, asan+ubsan)"
  run_busted "$OUT/asan/?.so" "hwt.redis spec ($LUA, asan+ubsan)" spec/redis_client_spec.lua
  run_examples "$OUT/asan/?.so" "examples ($LUA, asan+ubsan)"
  # shellcheck disable=SC2086
  run_lua_scripts "$OUT/asan/?.so" "memory scenarios ($LUA, asan+ubsan, leaks)" test/stress/memory.lua $memory_scenarios
  SANITIZER_ENV=""
fi

if [ "${HWT_CHECK:-}" = 1 ]; then
  run_counted "differential fuzzer" env LUA_PATH='lua/?.lua;;' LUA_CPATH="$OUT/?.so;;" "$LUA" test/stress/fuzz/differential.lua
  # The time-boxed runs are shorter here than alone (make soak, make chaos,
  # make fuzz), so that the whole check stays within CI's 10 minutes.
  run_counted "soak" env LUA_PATH='lua/?.lua;;' LUA_CPATH="$OUT/?.so;;" SOAK_SECONDS="${SOAK_SECONDS:-20}" \
    "$LUA" test/stress/soak.lua
  if [ "$LUA" = lua5.4 ]; then
    run_counted "chaos ($LUA, asan+ubsan)" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 CHAOS_SECONDS="${CHAOS_SECONDS:-15}" "$OUT/asan/chaos_host"
    run_counted "chaos, a collector step at every allocation ($LUA, asan+ubsan)" env CHAOS_ALLOC_STRESS=1 \
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      CHAOS_SEED=1000000 CHAOS_SECONDS="${CHAOS_ALLOC_SECONDS:-15}" "$OUT/asan/chaos_host"
    run_counted "chaos ($LUA, tsan)" env TSAN_OPTIONS=halt_on_error=1 \
      CHAOS_SECONDS="${CHAOS_TSAN_SECONDS:-20}" "$OUT/tsan/chaos_host"
  fi
  # LuaJIT (make check builds its host and module): the chaos run under
  # ASan+UBSan, both modes, and the differential fuzzer, a few seconds each.
  run_counted "chaos (luajit, asan+ubsan)" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 CHAOS_SECONDS="${CHAOS_LUAJIT_SECONDS:-10}" \
    build/luajit/asan/chaos_host
  run_counted "chaos, the busiest collector (luajit, asan+ubsan)" env CHAOS_ALLOC_STRESS=1 \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    CHAOS_SEED=1000000 CHAOS_SECONDS="${CHAOS_LUAJIT_ALLOC_SECONDS:-8}" build/luajit/asan/chaos_host
  run_counted "differential fuzzer (luajit)" env LUA_PATH='lua/?.lua;;' LUA_CPATH="build/luajit/?.so;;" \
    FUZZ_SECONDS="${FUZZ_LUAJIT_SECONDS:-8}" timeout "$SCRIPT_TIMEOUT" luajit test/stress/fuzz/differential.lua
  run_counted "engine stress (tsan)" build/tsan/stress_engine
  run_counted "wheel libFuzzer" env FUZZ_SECONDS="${LIBFUZZER_SECONDS:-20}" sh test/stress/fuzz/run_libfuzzer.sh build/fuzz_wheel
  run_counted "allocation failures (asan)" "$OUT/asan/alloc_host" "$OUT/asan/?.so"
  run_counted "nginx + lua-nginx-module (luajit)" sh test/host/nginx_test.sh
  run_counted "hwt.jobs shared by nginx and Lua 5.4" sh test/host/jobs_nginx_test.sh
  run_counted "luarocks install (5.4, 5.1)" sh test/host/luarocks_test.sh
  run_counted "bench smoke" env LUA="$LUA" sh test/docs/bench_smoke.sh
fi

# CI may keep only the end of a long log: name the failing suites just above the total.
if [ -n "$failed_suites" ]; then printf 'Failed suites (their output is above):\n%s' "$failed_suites"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
