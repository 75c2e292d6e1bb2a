#!/bin/sh
# Builds and installs hwt with Debian's luarocks into a temporary tree (from a
# copy of the sources, so the work tree is untouched) and loads it from there.
LUA=${LUA:-lua5.4}
version=$("$LUA" -e 'io.write((_VERSION:gsub("Lua ", "")))')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r src lua hwt-scm-1.rockspec "$work/"
tree="$work/tree"
if ! (cd "$work" && luarocks --lua-version="$version" --tree "$tree" make hwt-scm-1.rockspec) >"$work/log" 2>&1; then
  cat "$work/log"
  echo "luarocks: 0 passed, 1 failed"
  exit 1
fi
cd "$work" || exit 1
if LUA_PATH="$tree/share/lua/$version/?.lua;$tree/share/lua/$version/?/init.lua" \
   LUA_CPATH="$tree/lib/lua/$version/?.so" "$LUA" -e '
     local hwt = require("hwt")
     local found = package.searchpath("hwt.core", package.cpath)
     assert(found:find("/tree/", 1, true), "hwt.core not loaded from the tree: " .. found)
     local timer, ran = hwt.new({ clock = "manual" }), false
     timer:timeout(1, function() ran = true end)
     assert(timer:advance(1) == 1 and ran)
     print(hwt._VERSION .. " from " .. found)'; then
  echo "luarocks: 1 passed, 0 failed"
else
  echo "luarocks: 0 passed, 1 failed"
  exit 1
fi
