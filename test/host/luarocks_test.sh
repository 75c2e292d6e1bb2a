#!/bin/sh
# LuaRocks as a user meets it, with Debian's luarocks: in a copy of the
# sources (the work tree itself stays untouched) that `make` has built first,
#   luarocks --lua-version=5.4 --tree A make hwt-scm-1.rockspec
#   luarocks --lua-version=5.4 --tree A make hwt-redis-scm-1.rockspec
#   luarocks --lua-version=5.1 --tree B make hwt-scm-1.rockspec
# Checks, each counted:
#   install (5.4), install (5.1)   luarocks exits 0
#   load (5.4), load (5.1)         with package.path/cpath pointing at the tree
#                                  alone, require("hwt") and hwt.core load and a
#                                  manual-clock timeout runs
#   hwt-redis (5.4)                the rock of hwt.redis installs beside it,
#                                  and loads from the tree (a refused connect
#                                  raises its message)
#   source tree after 5.4, 5.1     no file or directory of the copy is new or
#                                  changed by that install (make's build/lua5.4
#                                  and the other install's build included), but
#                                  new ones under build/rock-lua5.4/, -lua5.1/
#   first tree kept                the 5.1 install changed no file of tree A,
#                                  and lua5.4 still loads hwt from it
# The last line is "luarocks: N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
# Run as from a shell, not as a child of `make check` (its MAKEFLAGS).
unset MAKEFLAGS MFLAGS MAKELEVEL
work=$(mktemp -d "${TMPDIR:-/tmp}/hwt-luarocks.XXXXXX") || exit 1
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

# Every path under DIR; files with their checksum and size.
snapshot() {  # snapshot DIR
  (cd "$1" && { find . -type f -exec cksum {} +; find . ! -type f | sed 's/^/- - /'; }) | sort -k 3
}

install() {  # install VERSION TREE [ROCKSPEC]: luarocks make from the copy
  (cd "$work/src" && luarocks --lua-version="$1" --tree "$2" make "${3:-hwt-scm-1.rockspec}") >"$work/log" 2>&1
}

# Loads hwt.redis from TREE alone; a connect to a closed port raises.
load_redis() {  # load_redis LUA VERSION TREE
  (cd "$work" && HWT_TREE=$3 LUA_PATH="" LUA_CPATH="$3/lib/lua/$2/?.so" "$1" -e '
      local tree = os.getenv("HWT_TREE")
      local redis = require("hwt.redis")
      local file = package.searchpath and package.searchpath("hwt.redis", package.cpath) or "(5.1)"
      assert(file == "(5.1)" or file:sub(1, #tree) == tree, "hwt.redis not from the tree: " .. file)
      local ok, err = pcall(redis.connect, "127.0.0.1", 1, 1)
      assert(not ok and tostring(err):find("cannot connect", 1, true), tostring(err))
      print("hwt.redis from " .. file .. ": " .. tostring(err))') \
    >"$work/log" 2>&1 && sed 's/^/  /' "$work/log"
}

# Loads hwt from TREE alone (no default paths) and runs a timeout on the
# manual clock.
load() {  # load LUA VERSION TREE
  (cd "$work" && HWT_TREE=$3 LUA_PATH="$3/share/lua/$2/?.lua;$3/share/lua/$2/?/init.lua" \
    LUA_CPATH="$3/lib/lua/$2/?.so" "$1" -e '
      local function where(name, paths)
        for template in paths:gmatch("[^;]+") do
          local file = template:gsub("%?", (name:gsub("%.", "/")))
          local f = io.open(file)
          if f then f:close(); return file end
        end
      end
      local tree = os.getenv("HWT_TREE")
      local hwt = require("hwt")
      assert(package.loaded["hwt.core"], "hwt.core not loaded")
      for name, paths in pairs({ hwt = package.path, ["hwt.core"] = package.cpath }) do
        local found = assert(where(name, paths), name .. " not found")
        assert(found:sub(1, #tree) == tree, name .. " not from the tree: " .. found)
      end
      local timer, ran = hwt.new({ clock = "manual" }), 0
      timer:timeout(1, function() ran = ran + 1 end)
      assert(timer:advance(0.5) == 0 and ran == 0, "ran before its deadline")
      assert(timer:advance(0.5) == 1 and ran == 1, "did not run at its deadline")
      print(hwt._VERSION .. " (" .. _VERSION .. ") from " .. where("hwt.core", package.cpath))') \
    >"$work/log" 2>&1 && sed 's/^/  /' "$work/log"
}

# Changes in the copy since snapshot BEFORE, other than new files under
# build/rock-LUA/; none: exit 0.
source_unchanged() {  # source_unchanged BEFORE LUA
  before=$1
  allowed=$(echo "$2" | sed 's/\./\\./g')
  snapshot "$work/src" >"$work/after"
  diff "$before" "$work/after" | grep '^[<>]' |
    grep -Ev "^> .* \./build/rock-($allowed)(/.*)?\$" >"$work/log"
  [ ! -s "$work/log" ]
}

mkdir "$work/src"
tar -cf - --exclude=./.git --exclude=build --exclude=./luarocks-tree . | tar -xf - -C "$work/src" || exit 1
if ! make -s -C "$work/src" LUA=lua5.4 all >"$work/log" 2>&1; then
  cat "$work/log"; echo "cannot build the copy with make"
  echo "luarocks: 0 passed, 1 failed"; exit 1
fi
snapshot "$work/src" >"$work/source0"
tree_a=$work/tree-5.4
tree_b=$work/tree-5.1

install 5.4 "$tree_a"; check "install (5.4, --tree)" $? "$work/log"
load lua5.4 5.4 "$tree_a"; check "load (5.4): require(\"hwt\") from the tree, a timeout runs" $? "$work/log"
install 5.4 "$tree_a" hwt-redis-scm-1.rockspec; check "install hwt-redis (5.4, the same tree)" $? "$work/log"
load_redis lua5.4 5.4 "$tree_a"; check "load (5.4): require(\"hwt.redis\") from the tree" $? "$work/log"
source_unchanged "$work/source0" lua5.4
check "source tree after the 5.4 installs: nothing new or changed but build/rock-lua5.4/" $? "$work/log"

snapshot "$work/src" >"$work/source1"
snapshot "$tree_a" >"$work/tree_a0"
install 5.1 "$tree_b"; check "install (5.1, another --tree)" $? "$work/log"
load lua5.1 5.1 "$tree_b"; check "load (5.1): require(\"hwt\") from its tree, a timeout runs" $? "$work/log"
snapshot "$tree_a" >"$work/tree_a1"
if diff "$work/tree_a0" "$work/tree_a1" >"$work/diff"; then
  load lua5.4 5.4 "$tree_a"
  status=$?
else
  status=1; mv "$work/diff" "$work/log"
fi
check "first tree kept: 5.4's files unchanged and still loading" $status "$work/log"
source_unchanged "$work/source1" lua5.1
check "source tree after the 5.1 install: nothing new or changed but build/rock-lua5.1/" $? "$work/log"

echo "luarocks: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
