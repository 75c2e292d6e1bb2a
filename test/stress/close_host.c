/*
 * close_host.c — a C host closing lua_States that have live timers, while
 * other states of the process keep firing on the same (shared) engine.
 * After lua_close returns, no hwt thread may touch the closed state's memory:
 * each case lingers after the close while the worker keeps ticking, so that
 * ASan (or TSan) sees any late access. Built with both by `make test`.
 *
 *   close_host [CPATH]    run from the repository root (lua/?.lua); with
 *                         CPATH, one more case loads hwt.core from it with
 *                         dlopen, so that lua_close also unloads it.
 * Last line: "close_host: P passed, F failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "hwt.h"

#define LINGER_MS 30
#define FIRING_MS 400
#define TICK "0.001"

/* Defect 1 of the safety review: a timer made by a finalizer that runs
 * during lua_close, its periodic armed on the shared 1 ms engine. */
static const char *const made_during_close =
  "local hwt = require('hwt')\n"
  "keep = setmetatable({}, {__gc = function()\n"
  "  local t = hwt.new{tick = " TICK "}\n"
  "  t:every(" TICK ", function() end)\n"
  "end})\n";

/* Timers with pending, due and periodic timeouts, some dropped, one drained
 * once: what a state holds when a host closes it mid-run. */
static const char *const busy_state =
  "local hwt = require('hwt')\n"
  "timers = {}\n"
  "for i = 1, 4 do\n"
  "  local t = hwt.new{tick = " TICK "}\n"
  "  for j = 1, 200 do t:timeout(j % 7 * 0.001, function() end) end\n"
  "  t:every(" TICK ", function() end)\n"
  "  t:timeout(math.huge, function() end)\n"
  "  timers[i] = t\n"
  "end\n"
  "timers[1]:wait(0.005); timers[1]:poll()\n"
  "local dropped = hwt.new{tick = " TICK "}\n"
  "for j = 1, 50 do dropped:timeout(0.002, function() end) end\n"
  "dropped = nil\n";

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A new state whose require finds lua/hwt.lua, and hwt.core either linked in
 * (cpath NULL) or loaded from cpath. */
static lua_State *new_state(const char *cpath) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (!cpath) hwt_preload(L);
  lua_getglobal(L, "package");
  lua_pushstring(L, "lua/?.lua");
  lua_setfield(L, -2, "path");
  lua_pushstring(L, cpath ? cpath : "");
  lua_setfield(L, -2, "cpath");
  lua_pop(L, 1);
  return L;
}

static bool run_chunk(lua_State *L, const char *chunk, const char *name) {
  if (luaL_loadbuffer(L, chunk, strlen(chunk), name) == 0 && lua_pcall(L, 0, 0, 0) == 0)
    return true;
  fprintf(stderr, "%s: %s\n", name, lua_tostring(L, -1));
  lua_pop(L, 1);
  return false;
}

/* ---- a state that keeps firing on another thread ------------------------- */

typedef struct firing_state {
  pthread_t thread;
  lua_Integer runs, early;
  bool ok;
} firing_state;

/* A chain of 1 ms timeouts for FIRING_MS: counts runs, and runs that came
 * before their deadline (read before scheduling: the engine's is later). */
static const char *const keep_firing =
  "local hwt = require('hwt')\n"
  "local t = hwt.new{tick = " TICK "}\n"
  "local runs, early = 0, 0\n"
  "local function rearm()\n"
  "  local deadline = hwt.now() + 0.001\n"
  "  t:timeout(0.001, function()\n"
  "    if hwt.now() < deadline then early = early + 1 end\n"
  "    runs = runs + 1\n"
  "    rearm()\n"
  "  end)\n"
  "end\n"
  "rearm()\n"
  "local stop_at = hwt.now() + ...\n"
  "while hwt.now() < stop_at do t:wait(stop_at - hwt.now()); t:poll() end\n"
  "t:stop()\n"
  "return runs, early\n";

static void *fire(void *arg) {
  firing_state *f = arg;
  lua_State *L = new_state(NULL);
  f->ok = luaL_loadstring(L, keep_firing) == 0;
  if (f->ok) {
    lua_pushnumber(L, FIRING_MS / 1000.0);
    f->ok = lua_pcall(L, 1, 2, 0) == 0;
    if (f->ok) {
      f->runs = lua_tointeger(L, -2);
      f->early = lua_tointeger(L, -1);
    } else {
      fprintf(stderr, "firing state: %s\n", lua_tostring(L, -1));
    }
  }
  lua_close(L);
  return NULL;
}

static void start_firing(firing_state *f) {
  *f = (firing_state){0};
  pthread_create(&f->thread, NULL, fire, f);
  sleep_ms(20);                       /* its timer is armed on the engine */
}

/* The other state fired all along, never early. */
static bool finish_firing(firing_state *f) {
  pthread_join(f->thread, NULL);
  bool fired = f->ok && f->runs >= FIRING_MS / 4 && f->early == 0;
  if (!fired)
    fprintf(stderr, "firing state: ok %d, %lld runs, %lld early\n", f->ok,
            (long long)f->runs, (long long)f->early);
  return fired;
}

/* ---- cases ----------------------------------------------------------------- */

/* The snippet alone in the process's only state. */
static bool timer_made_during_close(void) {
  lua_State *L = new_state(NULL);
  bool ran = run_chunk(L, made_during_close, "made_during_close");
  lua_close(L);
  sleep_ms(LINGER_MS);
  return ran;
}

/* Another state shares the engine and keeps firing through the close. */
static bool close_beside_firing_state(void) {
  firing_state other;
  start_firing(&other);
  lua_State *L = new_state(NULL);
  bool ran = run_chunk(L, busy_state, "busy_state") &&
             run_chunk(L, made_during_close, "made_during_close");
  lua_close(L);
  sleep_ms(LINGER_MS);
  return finish_firing(&other) && ran;
}

typedef struct handed_state {
  lua_State *L;
  bool ran;
} handed_state;

static void *fill_state(void *arg) {
  handed_state *h = arg;
  h->L = new_state(NULL);
  h->ran = run_chunk(h->L, busy_state, "busy_state") &&
           run_chunk(h->L, made_during_close, "made_during_close");
  return NULL;
}

/* Polled on one thread, closed on another, beside a firing state. */
static bool close_on_another_thread(void) {
  firing_state other;
  start_firing(&other);
  handed_state h = {0};
  pthread_t filler;
  pthread_create(&filler, NULL, fill_state, &h);
  pthread_join(filler, NULL);
  lua_close(h.L);
  sleep_ms(LINGER_MS);
  return finish_firing(&other) && h.ran;
}

/* hwt.core from a shared library: lua_close unloads it (dlclose), so no
 * thread may still run its code. */
static bool close_unloads_module(const char *cpath) {
  lua_State *L = new_state(cpath);
  bool ran = run_chunk(L, busy_state, "busy_state") &&
             run_chunk(L, made_during_close, "made_during_close");
  lua_close(L);
  sleep_ms(LINGER_MS);
  return ran;
}

static int passed, failed;

static void check(const char *name, bool ok) {
  if (ok) passed++;
  else {
    failed++;
    fprintf(stderr, "FAILED: %s\n", name);
  }
}

int main(int argc, char **argv) {
  check("timer_made_during_close", timer_made_during_close());
  check("close_beside_firing_state", close_beside_firing_state());
  check("close_on_another_thread", close_on_another_thread());
  if (argc > 1) check("close_unloads_module", close_unloads_module(argv[1]));
  printf("close_host: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
