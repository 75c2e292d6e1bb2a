#!/bin/sh
# Runs the libFuzzer harness for FUZZ_SECONDS (default 30) with a fixed seed
# from an empty corpus, and reports it as one test.
fuzzer=${1:-build/fuzz_wheel}
seconds=${FUZZ_SECONDS:-30}
log=$(mktemp)
"$fuzzer" -max_total_time="$seconds" -seed=1 -max_len=4096 -print_final_stats=1 >"$log" 2>&1
status=$?
tail -n 15 "$log"
rm -f "$log"
if [ "$status" -eq 0 ]; then
  echo "libfuzzer: 1 passed, 0 failed"
else
  echo "libfuzzer: 0 passed, 1 failed"
  exit 1
fi
