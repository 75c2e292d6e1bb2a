#!/bin/sh
# Installs the Debian packages that building and testing hwt need, when missing.
# Uses sudo when not root. LUA (default lua5.4) picks the interpreter/headers.
set -e
LUA=${LUA:-lua5.4}
missing=""
command -v "$LUA" >/dev/null 2>&1 || missing="$missing $LUA"
pkg-config --exists "$LUA" 2>/dev/null || missing="$missing lib$LUA-dev pkg-config"
command -v busted >/dev/null 2>&1 || missing="$missing lua-busted"
command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || missing="$missing build-essential"
if [ "${HWT_CHECK:-}" = 1 ]; then          # make check: libFuzzer needs clang
  command -v clang >/dev/null 2>&1 || missing="$missing clang"
  clang_runtime=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
  [ -f "$clang_runtime" ] || missing="$missing libclang-rt-14-dev"
fi
if [ "${HWT_BENCH:-}" = 1 ]; then          # make bench: the peers
  "$LUA" -e 'require "luv"' 2>/dev/null || missing="$missing lua-luv"
  [ -f /usr/share/lua/5.3/binaryheap.lua ] || missing="$missing lua-binaryheap"
  [ -f /usr/share/java/netty-common.jar ] || missing="$missing libnetty-java"
  command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
fi
[ -z "$missing" ] && exit 0
echo "hwt: installing Debian packages:$missing"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
