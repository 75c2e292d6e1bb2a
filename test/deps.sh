#!/bin/sh
# Installs the Debian packages that building and testing hwt need, when missing.
# Uses sudo when not root. LUA (default lua5.4) picks the interpreter/headers.
set -e
LUA=${LUA:-lua5.4}
missing=""
case $LUA in                                # Debian's package names
  luajit)  interpreter=luajit2; dev=libluajit2-5.1-dev ;;
  lua5.1)  interpreter=lua5.1;  dev=liblua5.1-0-dev ;;
  *)       interpreter=$LUA;    dev=lib$LUA-dev ;;
esac
command -v "$LUA" >/dev/null 2>&1 || missing="$missing $interpreter"
pkg-config --exists "$LUA" 2>/dev/null || missing="$missing $dev pkg-config"
command -v busted >/dev/null 2>&1 || missing="$missing lua-busted"
command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || missing="$missing build-essential"
# hwt.redis, the Redis client module that make builds beside hwt.core.
[ -f /usr/include/hiredis/hiredis.h ] || missing="$missing libhiredis-dev"
# The event-loop examples that the tests run.
"$LUA" -e 'require "luv"' 2>/dev/null || missing="$missing lua-luv"
"$LUA" -e 'require "cqueues"' 2>/dev/null || missing="$missing lua-cqueues"
# hwt.jobs' tests: a real redis-server, redis-lua (Debian ships it for Lua
# 5.1-5.3; the tests use the 5.3 copy on 5.4), lua-cjson and LuaSocket.
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
[ -f /usr/share/lua/5.3/redis.lua ] || missing="$missing lua-redis"
"$LUA" -e 'require "cjson"' 2>/dev/null || missing="$missing lua-cjson"
"$LUA" -e 'require "socket"' 2>/dev/null || missing="$missing lua-socket"
if [ "${HWT_CHECK:-}" = 1 ]; then          # make check: libFuzzer, nginx, luarocks
  command -v clang >/dev/null 2>&1 || missing="$missing clang"
  clang_runtime=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
  [ -f "$clang_runtime" ] || missing="$missing libclang-rt-14-dev"
  command -v nginx >/dev/null 2>&1 || missing="$missing nginx-light"
  [ -f /usr/share/nginx/modules/ngx_http_lua_module.so ] || missing="$missing libnginx-mod-http-lua"
  pkg-config --exists luajit 2>/dev/null || missing="$missing libluajit2-5.1-dev"
  command -v curl >/dev/null 2>&1 || missing="$missing curl"
  command -v luarocks >/dev/null 2>&1 || missing="$missing luarocks"
  [ -f /usr/share/lua/5.1/nginx/redis.lua ] || missing="$missing lua-nginx-redis"   # lua-resty-redis
fi
if [ "${HWT_BENCH:-}" = 1 ]; then          # make bench: the peers
  "$LUA" -e 'require "luv"' 2>/dev/null || missing="$missing lua-luv"
  [ -f /usr/share/lua/5.3/binaryheap.lua ] || missing="$missing lua-binaryheap"
  [ -f /usr/share/java/netty-common.jar ] || missing="$missing libnetty-java"
  command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
  # timerwheel.lua, when TIMERWHEEL_DIR names a checkout of it (not in Debian)
  [ -f /usr/share/lua/5.1/coxpcall.lua ] || missing="$missing lua-coxpcall"
fi
[ -z "$missing" ] && exit 0
echo "hwt: installing Debian packages:$missing"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
