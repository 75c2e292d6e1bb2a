#!/bin/sh
# The README's example runs as written: the first ```lua block after
# "## Example" is run with $LUA against the build in $HWT_OUT (from the
# repository root), and what it prints must be the block that follows it
# ("It prints"), line for line. Checks, each counted: both blocks are found,
# the program exits 0, its output is the README's.
# The last line is "readme example: N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
LUA=${LUA:-lua5.4}
OUT=${HWT_OUT:-build/$LUA}
work=$(mktemp -d "${TMPDIR:-/tmp}/hwt-readme.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

check() {  # check LABEL STATUS [LOG]: counts STATUS (0: passed), LOG shown if not
  if [ "$2" -eq 0 ]; then
    passed=$((passed + 1)); echo "ok: $1"
  else
    failed=$((failed + 1)); echo "FAILED: $1"
    if [ -n "${3:-}" ]; then sed 's/^/  /' "$3"; fi
  fi
}

# block N: the Nth fenced block after "## Example" (1: the program, 2: its output).
block() {
  awk -v want="$1" '
    /^## / { in_example = ($0 == "## Example") }
    in_example && /^```/ {
      if (inside) { inside = 0; if (n == want) exit; next }
      inside = 1; n++
      if (n == 1 && $0 != "```lua") exit 1
      next
    }
    inside && n == want { print }' README.md
}

block 1 >"$work/example.lua" && block 2 >"$work/expected" &&
  [ -s "$work/example.lua" ] && [ -s "$work/expected" ]
check "README.md has the example and its output after ## Example" $?

LUA_PATH='lua/?.lua;;' LUA_CPATH="$OUT/?.so;;" timeout 30 "$LUA" "$work/example.lua" \
  >"$work/output" 2>"$work/stderr"
status=$?
cat "$work/stderr" >>"$work/output"
echo "exit status $status" >"$work/status"
[ "$status" -eq 0 ]
check "the example runs with $LUA and exits 0" $? "$work/status"

diff "$work/expected" "$work/output" >"$work/diff"
check "it prints what README.md says it prints" $? "$work/diff"

echo "readme example: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
