/*
 * host_threads.c — a C host with THREADS threads, one lua_State each, all
 * sharing one hwt engine (same tick), scheduling and cancelling under load.
 * Checks that every timeout ran once, in the state that created it, never
 * early — or was cancelled. Built with ThreadSanitizer by `make test`.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include <lauxlib.h>
#include <lualib.h>

#include "hwt.h"

#define THREADS 8
#define TIMEOUTS_PER_STATE 3000

/* Runs in each state with its id; returns ran, cancelled, wrong_state, early. */
static const char *const scenario =
  "local hwt = require('hwt')\n"
  "local id, count = ...\n"
  "local timer = hwt.new({ tick = 0.001 })\n"
  "local ran, wrong_state, early = 0, 0, 0\n"
  "local seed = id\n"
  "local function random(n)\n"
  "  seed = (seed * 1103515245 + 12345) % 2147483648\n"
  "  return seed % n\n"
  "end\n"
  "local function task(_, owner, deadline)\n"
  "  if owner ~= id then wrong_state = wrong_state + 1 end\n"
  "  if hwt.now() < deadline - 1e-9 then early = early + 1 end\n"
  "  ran = ran + 1\n"
  "end\n"
  "local handles, cancelled = {}, 0\n"
  "for i = 1, count do\n"
  "  local delay = random(40) / 1000\n"
  "  handles[i] = timer:timeout(delay, task, id, hwt.now() + delay)\n"
  "  if i % 3 == 0 and handles[random(i) + 1]:cancel() then cancelled = cancelled + 1 end\n"
  "  if i % 500 == 0 then timer:poll() end\n"
  "end\n"
  "timer:run()\n"
  "assert(#timer:stop() == 0, 'nothing may be left')\n"
  "return ran, cancelled, wrong_state, early\n";

typedef struct state_result {
  int id;
  lua_Integer ran, cancelled, wrong_state, early;
  const char *error;
} state_result;

static void *run_state(void *arg) {
  state_result *result = arg;
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  hwt_preload(L);
  lua_getglobal(L, "package");
  lua_pushliteral(L, "lua/?.lua");            /* run from the repository root */
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  if (luaL_loadstring(L, scenario) != LUA_OK) {
    result->error = "scenario does not compile";
  } else {
    lua_pushinteger(L, result->id);
    lua_pushinteger(L, TIMEOUTS_PER_STATE);
    if (lua_pcall(L, 2, 4, 0) != LUA_OK) {
      fprintf(stderr, "state %d: %s\n", result->id, lua_tostring(L, -1));
      result->error = "scenario raised";
    } else {
      result->ran = lua_tointeger(L, -4);
      result->cancelled = lua_tointeger(L, -3);
      result->wrong_state = lua_tointeger(L, -2);
      result->early = lua_tointeger(L, -1);
    }
  }
  lua_close(L);
  return NULL;
}

int main(void) {
  pthread_t threads[THREADS];
  state_result results[THREADS] = {{0}};
  for (int i = 0; i < THREADS; i++) {
    results[i].id = i + 1;
    pthread_create(&threads[i], NULL, run_state, &results[i]);
  }
  int passed = 0, failed = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    state_result *r = &results[i];
    bool ok = !r->error && r->ran + r->cancelled == TIMEOUTS_PER_STATE &&
              r->wrong_state == 0 && r->early == 0;
    if (!ok)
      fprintf(stderr, "state %d: %s ran %lld, cancelled %lld, wrong state %lld, early %lld\n",
              r->id, r->error ? r->error : "", (long long)r->ran, (long long)r->cancelled,
              (long long)r->wrong_state, (long long)r->early);
    ok ? passed++ : failed++;
  }
  printf("host_threads: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
