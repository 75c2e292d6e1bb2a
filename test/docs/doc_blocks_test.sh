#!/bin/sh
# Every fenced code block of README.md, doc/*.md and examples/*/README.md
# runs as written, or is marked as a fragment. Each block is one check:
#   ```lua      run with $LUA against the build in $HWT_OUT, as example.lua in
#               a scratch directory (LUA_PATH lua/, LUA_CPATH the build; a block
#               that sets package.path or package.cpath to a path of its own
#               runs without them; one that adds to them, with them), within BLOCK_TIMEOUT s: it must exit 0 and write nothing
#               to stderr. A block that requires hwt.jobs or hwt.redis runs against a
#               private redis-server on a free 127.0.0.1 port.
#   ```nginx    a whole nginx.conf (it has an events block) is started for real
#               on a free 127.0.0.1 port with hwt built for LuaJIT
#               (`make LUA=luajit`, as the docs say), kept running for the
#               blocks after it in the same file, then quit gracefully: it
#               must start, answer, and log no error. A snippet for http {}
#               is started the same way inside a minimal nginx.conf of the
#               test's own. The Lua of each *_by_lua_block is compiled too.
#   ```sh       `make TARGET` lines: `make -n TARGET` must succeed (the target
#               exists and its rules resolve); the targets in RUN_MAKE (make
#               demo) also run for real. A block with curl lines is run with sh
#               -e against the nginx started from the last whole nginx.conf of
#               the same file.
#   output      a block without an info string (or ```text) whose preceding
#               line says "prints": it must equal what the last block run in
#               the same file wrote (stdout, then stderr), line for line.
#   ```text     not code: every repository path it names must exist.
# A block is a fragment when the line just before its fence is an HTML
# comment `<!-- fragment: why -->`: then it is only compiled (Lua: loadfile;
# sh: sh -n; nginx: the Lua of its *_by_lua_block's). Any other block (no
# info string, an unknown one) fails: say what it is, or mark it.
# Placeholders the docs use are filled in: /path/to/hwt (this checkout),
# 127.0.0.1:8080 (the nginx port), 6379 (the Redis port), build/lua5.4/
# (the build of $LUA). A load_module path that does not exist here is
# replaced by the module this system has (or the line dropped, when the Lua
# module is built into nginx, as in OpenResty).
# Without nginx, its Lua module, LuaJIT's headers or curl, the nginx and
# curl blocks are only compiled, and the test says so.
# Environment: LUA, HWT_OUT (as test/run.sh), HWT_DOCS (the files, relative
# to the repository or absolute; default the three globs above).
# The last line is "doc blocks: N passed, N failed".
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
LUA=${LUA:-lua5.4}
OUT=${HWT_OUT:-build/$LUA}
case $OUT in /*) ;; *) OUT=$ROOT/$OUT ;; esac
DOCS=${HWT_DOCS:-README.md doc/*.md examples/*/README.md}
BLOCK_TIMEOUT=10
MAKE_TIMEOUT=120
RUN_MAKE="demo"
LABEL="doc blocks"
BUDGET=60            # nginx_lib.sh's; this test sends no request through its get()
# shellcheck source=test/host/nginx_lib.sh
. "$ROOT/test/host/nginx_lib.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/hwt-doc-blocks.XXXXXX") || exit 1
redis_pids=""
cleanup() {
  stop_nginx TERM; remove_prefix
  for pid in $redis_pids; do stop "$pid" TERM; done
  rm -rf "$work"
}
tab=$(printf '\t')
# make as a user types it, not as a sub-make of `make test`; bounded in time.
plain_make() {
  timeout "$MAKE_TIMEOUT" env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u MAKEOVERRIDES make "$@"
}

# ---- the blocks ----------------------------------------------------------------
# $work/blocks/NNN holds block NNN's text (its fence's indentation removed);
# $work/manifest a line per block: NNN FILE LINE INFO FRAGMENT PRINTS.
mkdir "$work/blocks"
# shellcheck disable=SC2086  # DOCS is a list of globs
awk -v dir="$work/blocks" -v manifest="$work/manifest" -v unclosed="$work/unclosed" '
  function open_fence_left() { if (inside) print FILENAME_PREV ":" start > unclosed; inside = 0 }
  FNR == 1 { open_fence_left(); prev = "" }
  { FILENAME_PREV = FILENAME }
  inside {
    t = $0; sub(/[ \t]+$/, "", t)
    if (t == closing) { inside = 0; close(body); prev = "```"; next }
    line = $0
    if (substr(line, 1, indent) ~ /^ *$/) line = substr(line, indent + 1)
    print line > body
    next
  }
  /^ *```/ {
    match($0, /^ *```/); indent = RLENGTH - 3
    info = substr($0, RLENGTH + 1); gsub(/^[ \t]+|[ \t]+$/, "", info)
    if (info == "") info = "-"
    n++; id = sprintf("%03d", n); body = dir "/" id
    printf "" > body
    closing = substr($0, 1, indent) "```"
    fragment = (prev ~ /^ *<!-- *fragment/) ? "fragment" : "-"
    prints = (prev ~ /prints/) ? "prints" : "-"
    printf "%s\t%s\t%d\t%s\t%s\t%s\n", id, FILENAME, FNR, info, fragment, prints > manifest
    inside = 1; start = FNR
    next
  }
  /[^ \t]/ { prev = $0 }
  END { open_fence_left() }' $DOCS </dev/null || { fail "the docs ($DOCS) can be read"; summary; exit 1; }
touch "$work/manifest" "$work/unclosed"

n_run=0; n_compared=0; n_nginx=0; n_make=0; n_text=0; n_fragment=0; n_compiled_only=0

# ---- Lua -----------------------------------------------------------------------
compiles() {  # compiles LUA FILE: a Lua chunk with no syntax error ($work/compile.log: why not)
  F=$2 "$1" -e 'local f, e = loadfile(os.getenv("F")) if not f then print(e) os.exit(1) end' \
    >"$work/compile.log" 2>&1
}

# nginx_lua_chunks FILE DIR: the body of each *_by_lua_block of FILE into
# DIR/1.lua, DIR/2.lua, ... (braces counted, as nginx's parser does for code
# with no brace in its strings and comments).
nginx_lua_chunks() {
  mkdir -p "$2"
  awk -v dir="$2" '
    depth == 0 && /_by_lua_block[ \t]*\{/ {
      k++; out = dir "/by_lua_block-" k ".lua"; printf "" > out
      $0 = substr($0, index($0, "{") + 1); depth = 1
    }
    depth > 0 {
      line = ""
      for (i = 1; i <= length($0); i++) {
        c = substr($0, i, 1)
        if (c == "{") depth++
        else if (c == "}") { depth--; if (depth == 0) break }
        line = line c
      }
      print line > out
      if (depth == 0) close(out)
    }' "$1"
}

# compile_nginx_lua FILE: every *_by_lua_block of FILE compiles (with
# LuaJIT, which nginx runs, when there is one). Sets why on failure.
compile_nginx_lua() {
  lj=$(command -v luajit 2>/dev/null || echo "$LUA")
  rm -rf "$work/chunks"
  nginx_lua_chunks "$1" "$work/chunks"
  for chunk in "$work/chunks"/*.lua; do
    [ -f "$chunk" ] || continue
    if ! compiles "$lj" "$chunk"; then
      why="a *_by_lua_block does not compile ($lj): $(cat "$work/compile.log")"; return 1
    fi
  done
  return 0
}

# ---- Redis, for hwt.jobs blocks ------------------------------------------------
# One private redis-server per Redis port a block names: 6379, and 6380 and
# 6381 for a queue over shards. Each gets a free port, put in its place.
DOC_REDIS_PORTS="6379 6380 6381"
start_redis() {  # start_redis DOC_PORT: sets redis_port_<DOC_PORT>
  eval "[ -z \"\${redis_port_$1:-}\" ]" || return 0
  command -v redis-server >/dev/null 2>&1 || { why="redis-server not found"; return 1; }
  # shellcheck disable=SC2119  # no port to avoid
  port_try=$(pick_port) || { why="no free port"; return 1; }
  mkdir -p "$work/redis-$1"
  redis-server --port "$port_try" --bind 127.0.0.1 --dir "$work/redis-$1" --save '' \
    --appendonly no --daemonize no >"$work/redis-$1/log" 2>&1 </dev/null &
  pid=$!
  redis_pids="$redis_pids $pid"
  i=0
  while [ "$i" -lt 50 ]; do
    if [ "$(redis-cli -p "$port_try" ping 2>/dev/null)" = PONG ]; then eval "redis_port_$1=$port_try"; return 0; fi
    alive "$pid" || break
    nap 0.1; i=$((i + 1))
  done
  why="redis-server did not answer on $port_try: $(tail -n 3 "$work/redis-$1/log")"
  return 1
}

# run_lua BLOCK DIR: runs BLOCK as DIR/example.lua; DIR/out gets stdout then
# stderr. Sets why on failure.
run_lua() {
  mkdir -p "$2"
  sed -e "s|/path/to/hwt|$ROOT|g" -e "s|$ROOT/build/lua5.4/|$OUT/|g" "$1" >"$2/example.lua"
  if grep -q 'hwt\.jobs\|hwt\.redis' "$2/example.lua"; then
    for doc_port in $DOC_REDIS_PORTS; do
      grep -q "$doc_port" "$2/example.lua" || continue
      start_redis "$doc_port" || return 1
      eval "sed -i \"s/$doc_port/\$redis_port_$doc_port/g\" \"\$2/example.lua\""
    done
  fi
  if grep -q "package\\.c\\{0,1\\}path *= *[\"'[]" "$2/example.lua"; then   # replaces it
    set -- "$1" "$2" env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 \
      -u LUA_PATH_5_3 -u LUA_CPATH_5_3 -u LUA_PATH_5_2 -u LUA_CPATH_5_2
  else
    set -- "$1" "$2" env LUA_PATH="$ROOT/lua/?.lua;;" LUA_CPATH="$OUT/?.so;;"
  fi
  dir=$2; shift 2
  (cd "$dir" && timeout "$BLOCK_TIMEOUT" "$@" "$LUA" example.lua >stdout 2>stderr </dev/null)
  status=$?
  cat "$dir/stdout" "$dir/stderr" >"$dir/out"
  if [ "$status" -ne 0 ]; then
    why="exit status $status$([ "$status" -eq 124 ] && echo " (timed out after $BLOCK_TIMEOUT s)")"
  elif [ -s "$dir/stderr" ]; then
    why="it wrote to stderr"
  else
    return 0
  fi
  if [ -s "$dir/stderr" ]; then
    why="$why; stderr:
$(sed 's/^/  /' "$dir/stderr" | head -n 15)"
  else
    why="$why; stdout ends:
$(sed 's/^/  /' "$dir/stdout" | tail -n 10)"
  fi
  return 1
}

# ---- nginx ---------------------------------------------------------------------
nginx_state=""      # "" not looked for yet; yes; no (why_no_nginx says why)
why_no_nginx=""
find_nginx_for_docs() {
  [ -z "$nginx_state" ] || { [ "$nginx_state" = yes ]; return; }
  nginx_state=no
  # find_nginx_lua gives up (exits) when something is missing: ask a subshell first.
  if ! (find_nginx_lua) >"$work/nginx-probe" 2>&1; then
    why_no_nginx=$(sed -n "s/^$LABEL: cannot run: //p" "$work/nginx-probe" | head -n 1); return 1
  fi
  find_nginx_lua
  command -v curl >/dev/null 2>&1 || { why_no_nginx="curl not found"; return 1; }
  pkg-config --exists luajit 2>/dev/null ||
    { why_no_nginx="no LuaJIT headers (apt-get install libluajit2-5.1-dev)"; return 1; }
  nginx_state=yes
}

luajit_built=""
build_luajit() {  # what the docs say: make LUA=luajit
  [ -z "$luajit_built" ] || { [ "$luajit_built" = yes ]; return; }
  if plain_make LUA=luajit >"$work/make-luajit.log" 2>&1 </dev/null; then
    luajit_built=yes
  else
    luajit_built=no
  fi
  [ "$luajit_built" = yes ]
}

# fill_conf FILE: FILE with the placeholders filled in, on stdout.
fill_conf() {
  sed -e "s|/path/to/hwt|$ROOT|g" -e "s|127\.0\.0\.1:8080|127.0.0.1:$port|g" "$1" |
  while IFS= read -r line; do
    module=$(echo "$line" | sed -n 's/^[[:space:]]*load_module[[:space:]]*\([^;[:space:]]*\);.*/\1/p')
    if [ -n "$module" ]; then
      [ -n "$load_lines" ] || continue                 # built into nginx
      if [ ! -r "$module" ]; then
        case $module in
          */ndk_http_module.so) line="load_module $NGX_NDK_MODULE;" ;;
          */ngx_http_lua_module.so) line="load_module $NGX_LUA_MODULE;" ;;
        esac
      fi
    fi
    printf '%s\n' "$line"
  done
}

# wrap_snippet FILE: a minimal nginx.conf with FILE's lines in http {} (its
# relative paths are in the prefix).
wrap_snippet() {
  if [ -n "$load_lines" ]; then
    echo "load_module $NGX_NDK_MODULE;"
    echo "load_module $NGX_LUA_MODULE;"
  fi
  cat <<EOF
daemon off;
worker_processes 1;
pid logs/nginx.pid;
error_log logs/error.log notice;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
EOF
  cat "$1"
  cat <<EOF
    server {
        listen 127.0.0.1:8080;
        location = /doc-blocks-probe { content_by_lua_block { ngx.say("up") } }
    }
}
EOF
}

bad_log_lines() {  # what nginx logged at error or worse, in $prefix/logs
  grep -hE '\[(error|crit|alert|emerg)\]|panic' "$prefix/logs/error.log" "$prefix/logs/stdout.log" 2>/dev/null
}

# start_conf CONF [PROBE BODY]: a new prefix, nginx started on CONF (its
# placeholders filled) on a free port, up to 3 tries when the port was taken;
# up once GET PROBE answers BODY (without PROBE: once the port listens).
# Sets why on failure.
start_conf() {
  make_prefix hwt-doc-nginx
  tries=0
  while [ "$tries" -lt 3 ]; do
    tries=$((tries + 1))
    # shellcheck disable=SC2119  # no port to avoid
    port=$(pick_port) || { why="no free port"; return 1; }
    fill_conf "$1" >"$prefix/conf/nginx.conf"
    if [ -n "${2:-}" ]; then
      start_nginx "$2" "$3" && return 0
    else    # no request of the test's own (it would log a 404): the port listens
      "$NGINX" -p "$prefix/" -c "$prefix/conf/nginx.conf" -e "$prefix/logs/error.log" \
        >"$prefix/logs/stdout.log" 2>&1 </dev/null &
      ngx_pid=$!
      await_up "$ngx_pid" port_in_use "$port"
      case $? in 0) return 0 ;; 2) ngx_pid="" ;; esac
    fi
    stop_nginx TERM
    cat "$prefix/logs/error.log" "$prefix/logs/stdout.log" 2>/dev/null | grep -q 'Address already in use' || break
  done
  why="nginx did not start or answer:
$(cat "$prefix/logs/error.log" "$prefix/logs/stdout.log" 2>/dev/null | sed 's/^/  /' | tail -n 15)"
  return 1
}

# quit_conf: a graceful quit; sets why and fails when nginx logged an error.
quit_conf() {
  stop_nginx QUIT
  bad=$(bad_log_lines)
  [ "$stopped" = yes ] || bad="${bad}nginx did not quit within 5 s"
  remove_prefix; prefix=""
  if [ -n "$bad" ]; then why="nginx logged:
$(echo "$bad" | head -n 10 | sed 's/^/  /')"; return 1; fi
  return 0
}

# The whole nginx.conf left running for the blocks after it: its verdict
# comes when the file ends (or the next one starts), after a graceful quit.
conf_label=""
conf_ok=""
conf_why=""
end_running_conf() {
  [ -n "$conf_label" ] || return 0
  if quit_conf && [ "$conf_ok" = yes ]; then
    pass "$conf_label: started, served the blocks after it, quit, no error logged"
  else
    fail "$conf_label: ${conf_why:-$why}"
  fi
  conf_label=""
}

# ---- each block ------------------------------------------------------------------
last_out=""          # the output of the last block run in this file
last_from=""
current_file=""

while IFS="$tab" read -r id file line info fragment prints <&3; do
  block="$work/blocks/$id"
  where="$file:$line"
  kind=${info%% *}
  why=""
  if [ "$file" != "$current_file" ]; then
    end_running_conf
    current_file=$file; last_out=""; last_from=""
  fi

  if [ "$fragment" = fragment ]; then
    n_fragment=$((n_fragment + 1))
    case $kind in
      lua) if compiles "$LUA" "$block"; then pass "$where lua fragment: compiles"
           else fail "$where lua fragment does not compile: $(cat "$work/compile.log")"; fi ;;
      sh) if sh -n "$block" 2>"$work/compile.log"; then pass "$where sh fragment: sh -n"
          else fail "$where sh fragment: $(cat "$work/compile.log")"; fi ;;
      nginx) if compile_nginx_lua "$block"; then pass "$where nginx fragment: its Lua compiles"
             else fail "$where nginx fragment: $why"; fi ;;
      *) pass "$where fragment ($info): not code" ;;
    esac
    continue
  fi

  case $kind in
  lua)
    n_run=$((n_run + 1))
    if run_lua "$block" "$work/run-$id"; then
      pass "$where lua: runs, exits 0, nothing on stderr"
    else
      fail "$where lua: $why"
    fi
    last_out="$work/run-$id/out"; last_from=$where ;;

  nginx)
    n_nginx=$((n_nginx + 1))
    if ! compile_nginx_lua "$block"; then fail "$where nginx: $why"; continue; fi
    if ! find_nginx_for_docs; then
      n_compiled_only=$((n_compiled_only + 1))
      pass "$where nginx: its Lua compiles (not started: $why_no_nginx)"; continue
    fi
    if ! build_luajit; then
      fail "$where nginx: make LUA=luajit failed:
$(tail -n 10 "$work/make-luajit.log" | sed 's/^/  /')"; continue
    fi
    if grep -q '^[[:space:]]*events[[:space:]]*{' "$block"; then
      end_running_conf
      conf_label="$where nginx.conf"; conf_ok=no; conf_why=""
      if start_conf "$block"; then conf_ok=yes; else conf_why=$why; end_running_conf; fi
    else
      end_running_conf       # one nginx at a time
      wrap_snippet "$block" >"$work/wrapped.conf"
      if start_conf "$work/wrapped.conf" /doc-blocks-probe up && quit_conf; then
        pass "$where nginx snippet: in http {} of a minimal nginx.conf it starts, answers, quits, no error logged"
      else
        fail "$where nginx snippet: $why"
        stop_nginx TERM; remove_prefix; prefix=""
      fi
    fi ;;

  sh)
    if grep -q '^[[:space:]]*curl[[:space:]]' "$block"; then
      n_run=$((n_run + 1))
      if [ "$nginx_state" = no ]; then
        n_compiled_only=$((n_compiled_only + 1))
        if sh -n "$block" 2>"$work/compile.log"; then pass "$where sh (curl): sh -n (not run: ${why_no_nginx:-no nginx})"
        else fail "$where sh (curl): $(cat "$work/compile.log")"; fi
        last_out=""; last_from="$where (not run)"; continue
      fi
      mkdir -p "$work/run-$id"
      if [ -z "$ngx_pid" ]; then
        fail "$where sh (curl): no nginx.conf of this file is running"; continue
      fi
      sed "s|127\.0\.0\.1:8080|127.0.0.1:$port|g" "$block" >"$work/run-$id/requests.sh"
      (cd "$work/run-$id" && timeout 30 sh -e requests.sh >stdout 2>stderr </dev/null)
      status=$?
      cat "$work/run-$id/stdout" "$work/run-$id/stderr" >"$work/run-$id/out"
      if [ "$status" -eq 0 ] && [ ! -s "$work/run-$id/stderr" ]; then
        pass "$where sh (curl): runs against the nginx.conf above, exits 0, nothing on stderr"
      else
        fail "$where sh (curl): exit status $status:
$(sed 's/^/  /' "$work/run-$id/out" | tail -n 15)"
      fi
      last_out="$work/run-$id/out"; last_from=$where
      continue
    fi
    n_make=$((n_make + 1))
    problems=""
    checked=""
    while IFS= read -r command; do
      command=$(echo "${command%%#*}" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
      [ -n "$command" ] || continue
      case $command in
        make|make\ *) ;;
        *) problems="$problems
  '$command': neither make nor curl (run it here, or mark the block as a fragment)"; continue ;;
      esac
      # shellcheck disable=SC2086  # the words of the command
      set -- ${command#make}
      if ! plain_make -n "$@" >"$work/make-n.log" 2>&1 </dev/null; then
        problems="$problems
  'make -n $*' fails: $(tail -n 3 "$work/make-n.log")"; continue
      fi
      checked="$checked, make -n $*"
      case " $RUN_MAKE " in
        *" $* "*)
          if plain_make "$@" >"$work/make.log" 2>&1 </dev/null; then
            checked="$checked, make $* (run)"
          else
            problems="$problems
  'make $*' fails:
$(tail -n 10 "$work/make.log" | sed 's/^/    /')"
          fi ;;
      esac
    done <"$block"
    if [ -z "$problems" ] && [ -n "$checked" ]; then pass "$where sh: ${checked#, }"
    else fail "$where sh:${problems:- no command in it}"; fi ;;

  -|text)
    if [ "$prints" = prints ]; then
      if [ -z "$last_out" ] && [ "$nginx_state" = no ] && [ -n "$last_from" ]; then
        n_compiled_only=$((n_compiled_only + 1))
        pass "$where output of $last_from: not compared (not run: $why_no_nginx)"
      elif [ -z "$last_out" ]; then
        fail "$where output: no block before it in this file was run"
      elif n_compared=$((n_compared + 1)); diff "$block" "$last_out" >"$work/diff" 2>&1; then
        pass "$where output of $last_from: matches"
      else
        fail "$where output of $last_from differs (< the doc, > the run):
$(sed 's/^/  /' "$work/diff" | head -n 20)"
      fi
    elif [ "$kind" = text ]; then
      n_text=$((n_text + 1))
      missing=""
      # shellcheck disable=SC2013  # paths have no spaces
      for path in $(grep -oE '(src|lua|test|bench|examples|doc)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' "$block" | sort -u); do
        [ -e "$path" ] || missing="$missing $path"
      done
      if [ -z "$missing" ]; then pass "$where text: the paths it names exist"
      else fail "$where text: no such file:$missing"; fi
    else
      fail "$where: a block with no info string that is not an output (\"It prints\"): say what it is (lua, sh, nginx, text) or mark it <!-- fragment: why -->"
    fi ;;

  *)
    fail "$where: a \`\`\`$info block: the test knows lua, nginx, sh, text and outputs; mark it <!-- fragment: why --> if it cannot run" ;;
  esac
done 3<"$work/manifest"
end_running_conf

while IFS= read -r open_fence; do
  fail "$open_fence: a fence that is never closed"
done <"$work/unclosed"

total=$(wc -l <"$work/manifest")
if [ "$total" -eq 0 ]; then fail "no code block found in $DOCS"; fi
echo "($total blocks: $n_run run, $n_compared outputs compared, $n_nginx nginx, $n_make make," \
  "$n_text text, $n_fragment fragments; $n_compiled_only of them only compiled or not compared)"
finish
