# shellcheck shell=sh
# Helpers shared by the scripts that start a private nginx with
# lua-nginx-module (test/host/nginx_test.sh, test/host/jobs_nginx_test.sh,
# bench/nginx_bench.sh). Sourced, not run:
#   . "$ROOT/test/host/nginx_lib.sh"
# The script sets before sourcing:
#   ROOT    the repository's top directory
#   LABEL   the prefix of the last line, "$LABEL: N passed, N failed"
#   BUDGET  seconds after which get() sends no new request
# and defines cleanup() (the EXIT trap installed here runs it, after ending a
# nap still running; remove_prefix and stop_nginx are its usual parts).
# Sourcing sets passed=0, failed=0, started (now), prefix, port, ngx_pid and
# nap_pid (empty); the functions below set NGINX, NGX_LUA_MODULE,
# NGX_NDK_MODULE, load_lines, CC, lj_cflags (find_*), prefix (make_prefix),
# ngx_pid (start_nginx) and stopped (stop: yes, or no when it had to KILL).
# Environment: NGINX, NGX_LUA_MODULE, NGX_NDK_MODULE, CC, HWT_SRC (the C
# sources, default src/), HWT_KEEP=1 (keep the scratch prefix), TMPDIR.

passed=0
failed=0
prefix=""
port=""
ngx_pid=""
started=$(date +%s)

# ---- counting checks ------------------------------------------------------
pass() { passed=$((passed + 1)); echo "ok     $1"; }
fail() { failed=$((failed + 1)); echo "FAIL   $1"; }
summary() { echo "$LABEL: $passed passed, $failed failed"; }

# A prerequisite is missing: say why, count one failure, stop.
give_up() {
  echo "$LABEL: cannot run: $1"
  failed=$((failed + 1))
  summary
  exit 1
}

# expect_clean_log LABEL: $prefix/logs/error.log has no error, crit, alert,
# emerg or panic line (the first ten are shown when it has).
expect_clean_log() {
  bad=$(grep -E '\[(error|crit|alert|emerg)\]|panic' "$prefix/logs/error.log" 2>/dev/null)
  if [ -z "$bad" ]; then
    pass "$1"
  else
    fail "$1:"
    echo "$bad" | head -n 10 | sed 's/^/    /'
  fi
}

# The script's last command: its time, the summary, non-zero on any failure.
finish() {
  echo "($(($(date +%s) - started)) s)"
  summary
  [ "$failed" -eq 0 ]
}

expect_eq() {  # expect_eq LABEL EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1 (expected '$2', got '$3')"; fi
}

# ---- processes --------------------------------------------------------------
# nap SECONDS, fractional where sleep allows. A sleep the traps can interrupt:
# dash runs a trap only once the foreground command ends, but at once during
# the wait builtin. The sleep, asynchronous, ignores SIGINT: end_nap (run by
# the EXIT trap) ends one still running.
nap_pid=""
nap() {
  sleep "$1" 2>/dev/null &
  nap_pid=$!
  wait "$nap_pid" || { sleep 1 & nap_pid=$!; wait "$nap_pid"; }
  nap_pid=""
}
end_nap() { [ -z "$nap_pid" ] || kill "$nap_pid" 2>/dev/null; nap_pid=""; }

# alive PID: the process exists and is not a zombie waiting for us to reap it.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/stat" ]; then
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ "$state" != Z ] || return 1
  fi
  return 0
}

# stop PID SIGNAL: signal our own child (never a pid a pid file names), wait
# up to 5 s, then KILL it and its children. Sets stopped to yes, or no when it
# had to KILL.
# shellcheck disable=SC2034  # stopped is read by the scripts
stop() {
  children=$(ps -o pid= --ppid "$1" 2>/dev/null)
  kill -"$2" "$1" 2>/dev/null
  i=0
  while alive "$1" && [ "$i" -lt 50 ]; do nap 0.1; i=$((i + 1)); done
  stopped=yes
  if alive "$1"; then
    stopped=no
    for c in $children; do kill -KILL "$c" 2>/dev/null; done
    kill -KILL "$1" 2>/dev/null
  fi
  wait "$1" 2>/dev/null
}

stop_nginx() {  # stop_nginx [SIGNAL]: QUIT (graceful, the default) or TERM (fast)
  [ -z "$ngx_pid" ] || { stop "$ngx_pid" "${1:-QUIT}"; ngx_pid=""; }
}

remove_prefix() {
  if [ -n "$prefix" ] && [ -d "$prefix" ]; then
    if [ "${HWT_KEEP:-0}" = 1 ]; then echo "kept $prefix" >&2; else rm -rf "$prefix"; fi
  fi
}

trap 'end_nap; cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

# ---- HTTP -----------------------------------------------------------------------
over_budget() { [ $(($(date +%s) - started)) -ge "$BUDGET" ]; }

# GET PATH -> body on stdout; fails on HTTP errors, timeouts and over budget.
get() {
  if over_budget; then echo "over the ${BUDGET}s budget, $1 not requested" >&2; return 1; fi
  curl -sS --fail --max-time 5 "http://127.0.0.1:$port$1"
}

# ---- nginx, the Lua module and a LuaJIT toolchain ---------------------------
# Module path from a Debian modules-available snippet ("load_module modules/x.so;").
from_snippet() {  # from_snippet FILE NAME.so
  [ -r "$1" ] || return 1
  p=$(sed -n "s/^[[:space:]]*load_module[[:space:]]*\\([^;]*$2\\)[[:space:]]*;.*/\\1/p" "$1" | head -n 1)
  [ -n "$p" ] || return 1
  case $p in /*) ;; *) p=${ngx_prefix:-/usr/share/nginx}/$p ;; esac
  [ -r "$p" ] && echo "$p"
}

find_module() {  # find_module NAME.so SNIPPET
  from_snippet "/usr/share/nginx/modules-available/$2" "$1" && return 0
  for d in /usr/lib/nginx/modules /usr/share/nginx/modules /usr/lib64/nginx/modules \
           /usr/local/nginx/modules /etc/nginx/modules "${ngx_prefix:-/nonexistent}/modules"; do
    [ -r "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

# find_nginx_lua: sets NGINX and, unless the Lua module is built in
# (load_lines empty), NGX_NDK_MODULE and NGX_LUA_MODULE (load_lines=yes).
find_nginx_lua() {
  NGINX=${NGINX:-$(command -v nginx 2>/dev/null)}
  # nginx reads an NGINX variable of its own (inherited sockets): keep the
  # path in a shell variable that is not exported to it.
  ngx_binary=$NGINX; unset NGINX; NGINX=$ngx_binary
  [ -n "$NGINX" ] || for n in /usr/sbin/nginx /usr/local/sbin/nginx /usr/local/nginx/sbin/nginx \
                              /usr/local/openresty/nginx/sbin/nginx; do
    [ -x "$n" ] && { NGINX=$n; break; }
  done
  if [ -z "$NGINX" ] || [ ! -x "$NGINX" ]; then give_up "nginx not found (apt-get install nginx-light libnginx-mod-http-lua)"; fi
  ngx_v=$("$NGINX" -V 2>&1)
  ngx_prefix=$(echo "$ngx_v" | tr ' ' '\n' | sed -n 's/^--prefix=//p')
  if echo "$ngx_v" | grep -q 'lua-nginx-module\|ngx_lua\|openresty'; then
    load_lines=""   # built in (OpenResty): nothing to load
  else
    NGX_LUA_MODULE=${NGX_LUA_MODULE:-$(find_module ngx_http_lua_module.so mod-http-lua.conf)}
    NGX_NDK_MODULE=${NGX_NDK_MODULE:-$(find_module ndk_http_module.so mod-http-ndk.conf)}
    [ -n "$NGX_LUA_MODULE" ] || give_up "ngx_http_lua_module.so not found (apt-get install libnginx-mod-http-lua)"
    [ -n "$NGX_NDK_MODULE" ] || give_up "ndk_http_module.so not found (apt-get install libnginx-mod-http-ndk)"
    load_lines=yes
  fi
}

# find_cc_luajit: sets CC (default cc) and lj_cflags (LuaJIT's headers).
# shellcheck disable=SC2034  # lj_cflags is for the scripts' build_core
find_cc_luajit() {
  CC=${CC:-cc}
  command -v "$CC" >/dev/null 2>&1 || give_up "no C compiler ($CC)"
  lj_cflags=$(pkg-config --cflags luajit 2>/dev/null) ||
    give_up "pkg-config luajit failed (apt-get install libluajit-5.1-dev pkg-config)"
}

# ---- the scratch prefix and hwt.core ----------------------------------------
# make_prefix NAME [DIR...]: a new $prefix with logs/ conf/ tmp/ lib/hwt/ and
# the DIRs.
make_prefix() {
  prefix=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || give_up "mktemp -d failed"
  shift
  for d in logs conf tmp lib/hwt "$@"; do mkdir -p "$prefix/$d"; done
}

# build_core OUT CFLAGS [LIBS]: hwt.core from $HWT_SRC (default src/) against
# the Lua whose headers CFLAGS name (for nginx: LuaJIT, the 5.1 ABI its Lua VM
# uses), linked with LIBS (after the sources, where --as-needed keeps them);
# the compiler's output goes to $prefix/build.log.
build_core() {
  # shellcheck disable=SC2086  # $2 and $3 are lists of flags
  (cd "${HWT_SRC:-$ROOT/src}" && "$CC" -std=c11 -O2 -fPIC -fvisibility=hidden -shared -pthread $2 \
     -o "$1" ./*.c ${3:-}) >>"$prefix/build.log" 2>&1
}

# ---- a free loopback port, the configuration, nginx ---------------------------
port_in_use() {  # any socket bound to this local port, v4 or v6
  if [ -r /proc/net/tcp ]; then
    hex=$(printf '%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
      awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }'
  else
    curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$1/"; [ $? -ne 7 ]
  fi
}

pick_port() {  # pick_port [AVOID]: a free port in 20000-49999, not AVOID
  n=0
  while [ "$n" -lt 50 ]; do
    r=$(od -An -N2 -tu2 /dev/urandom 2>/dev/null | tr -d ' ')
    [ -n "$r" ] || r=$(( ($$ * 7919 + n * 104729) % 65536 ))
    p=$((20000 + r % 30000))
    if [ "$p" != "${1:-}" ] && ! port_in_use "$p"; then echo "$p"; return 0; fi
    n=$((n + 1))
  done
  return 1
}

if [ "$(id -u)" = 0 ]; then
  # nginx started by root would run its worker as "nobody", which cannot
  # read the 0700 scratch prefix; this private instance runs it as root.
  user_line="user root $(id -gn);"
else
  user_line="# not root: the worker runs as $(id -un)"
fi

# write_conf TEMPLATE [-e SED-SCRIPT]...: $prefix/conf/nginx.conf from
# TEMPLATE, its @PREFIX@ @PORT@ ($port) @LUA_DIR@ @CPATH_DIR@ @USER@
# @NDK_MODULE@ @LUA_MODULE@ filled in, and the script's own by the -e's.
write_conf() {
  template=$1; shift
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$port|g" \
      -e "s|@LUA_DIR@|$ROOT/lua|g" -e "s|@CPATH_DIR@|$prefix/lib|g" -e "s|@USER@|$user_line|g" \
      -e "s|@NDK_MODULE@|${NGX_NDK_MODULE:-}|g" -e "s|@LUA_MODULE@|${NGX_LUA_MODULE:-}|g" \
      "$@" "$template" >"$prefix/conf/nginx.conf.tmp"
  [ -n "$load_lines" ] || sed -i '/^load_module/d' "$prefix/conf/nginx.conf.tmp"
  # Drop temp-path directives of modules this nginx was built without.
  for d in proxy_temp_path fastcgi_temp_path uwsgi_temp_path scgi_temp_path; do
    grep -qa "$d" "$NGINX" || sed -i "/^[[:space:]]*$d /d" "$prefix/conf/nginx.conf.tmp"
  done
  mv "$prefix/conf/nginx.conf.tmp" "$prefix/conf/nginx.conf"
}

# await_up PID PROBE [ARG...]: polls PROBE for up to 5 s while PID lives.
# 0 once PROBE succeeds; 2 when PID died first (reaped); 1 on timeout (PID
# left running, for the caller's stop).
await_up() {
  pid=$1; shift
  i=0
  while [ "$i" -lt 50 ]; do
    alive "$pid" || { wait "$pid" 2>/dev/null; return 2; }
    "$@" && return 0
    nap 0.1
    i=$((i + 1))
  done
  return 1
}

# nginx_answers PATH [BODY]: GET PATH on $port answers (with BODY, when given).
nginx_answers() {
  if [ $# -ge 2 ]; then
    [ "$(curl -s --max-time 1 "http://127.0.0.1:$port$1")" = "$2" ]
  else
    curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$port$1"
  fi
}

# start_nginx PATH [BODY] -> 0 when nginx_answers PATH [BODY], within 5 s.
start_nginx() {
  "$NGINX" -p "$prefix/" -c "$prefix/conf/nginx.conf" -e "$prefix/logs/error.log" \
    >"$prefix/logs/stdout.log" 2>&1 </dev/null &
  ngx_pid=$!
  await_up "$ngx_pid" nginx_answers "$@"
  case $? in 0) return 0 ;; 2) ngx_pid="" ;; esac
  return 1
}

# start_retrying START STOP LOG: runs START (which picks a port and starts a
# server on it) up to 3 times, again only after losing a race for the port
# (LOG says "Address already in use"), STOP after each failure. When all
# fail, prints LOG's tail and returns 1.
start_retrying() {
  tries=0
  while [ "$tries" -lt 3 ]; do
    tries=$((tries + 1))
    "$1" && return 0
    "$2"
    grep -q 'Address already in use' "$3" 2>/dev/null || break
  done
  sed 's/^/    /' "$3" 2>/dev/null | tail -n 20
  return 1
}
