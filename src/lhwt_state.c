/*
 * lhwt_state.c — a lua_State's timers, from its first timer to lua_close:
 * the state_timers userdata in the registry that lists its running queues
 * and stops them at lua_close, releasing a queue, and the finalizers of the
 * internal userdata.
 */
#define _GNU_SOURCE             /* dladdr, RTLD_NODELETE */
#include "lhwt.h"

/* ---- the state's timers ----------------------------------------------- */

#if LUA_VERSION_NUM == 501
#include <dlfcn.h>
#endif

void list_timer(state_timers *home, lhwt_queue *tm) {
  tm->home = home;
  tm->prev_in_state = NULL;
  tm->next_in_state = home->first;
  if (home->first) home->first->prev_in_state = tm;
  home->first = tm;
}

static void unlist_timer(lhwt_queue *tm) {
  if (!tm->home) return;
  if (tm->prev_in_state) tm->prev_in_state->next_in_state = tm->next_in_state;
  else tm->home->first = tm->next_in_state;
  if (tm->next_in_state) tm->next_in_state->prev_in_state = tm->prev_in_state;
  tm->home = NULL;
}

/* Lets go of the queue's engine, stopping it first if need be; after this,
 * no hwt thread touches the queue or its timeouts. */
void release_queue(lua_State *L, lhwt_queue *tm) {
  if (tm->initialized) {
    tq_destroy(&tm->queue);
    unlist_timer(tm);
    tm->initialized = false;
  }
  release_holds(L, tm);
}

/* Sets table[key at key_idx] = the value at the top (popped); the table is
 * the state_timers user value `uv`. */
void set_state_entry(lua_State *L, int uv, int key_idx) {
  key_idx = lua_absindex(L, key_idx);
  compat_getuservalue(L, STATE_TIMERS_UPVALUE, uv);
  lua_pushvalue(L, key_idx);
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  lua_pop(L, 2);
}

/* After a stop: the queue no longer needs to outlive its Timer. queue_idx:
 * the queue userdata. */
void retire_queue(lua_State *L, lhwt_queue *tm, int queue_idx) {
  unlist_timer(tm);
  queue_idx = lua_absindex(L, queue_idx);
  lua_pushnil(L);
  set_state_entry(L, STATE_UV_RUNNING, queue_idx);
}

/* The queue's own finalizer: a stop that its Timer's __gc did not make. */
int queue_gc(lua_State *L) {
  release_queue(L, lua_touserdata(L, 1));
  return 0;
}

/* At lua_close: the queues still listed are those whose Timer Lua did not
 * (or will not) finalize. Without their anchors at hand, each stop walks the
 * engine's wheel: O(its pending timeouts) per such queue. */
static int state_timers_gc(lua_State *L) {
  state_timers *home = lua_touserdata(L, 1);
  home->closing = true;
  while (home->first) release_queue(L, home->first);
  close_holds(home);
  return 0;
}

/* Whether this call may come from a finalizer, where a finalizer set now may
 * never run (if the state is closing). Only Lua 5.4 can tell (PUC 5.1-5.3
 * cannot; LuaJIT runs finalizers set during lua_close, so it need not). */
static bool maybe_in_finalizer(lua_State *L) {
#if LUA_VERSION_NUM >= 504
  return lua_gc(L, LUA_GCCOUNT, 0) < 0;       /* refused only inside __gc */
#else
  (void)L;
  return false;
#endif
}

/* Lua 5.1 and LuaJIT unload a C library when the finalizer of its handle runs
 * during lua_close, yet go on to run finalizers of objects older than that
 * handle, and LuaJIT also those of objects made during the close: some are
 * hwt's (a Timer's __gc) or call it. So there this library stays loaded. 5.2+
 * unload C libraries after every other finalizer. */
void keep_library_loaded(void) {
#if LUA_VERSION_NUM == 501
  static const char in_this_library = 0;
  Dl_info self;
  if (dladdr(&in_this_library, &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
#endif
}

/* The state's state_timers, made on first use, with its running table and
 * its weak table of Timers (user values); left at the top. */
void push_state_timers(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, STATE_TIMERS_KEY);
  if (lua_touserdata(L, -1)) return;
  lua_pop(L, 1);
  state_timers *home = compat_newuserdata(L, sizeof *home, 2);
  *home = (state_timers){.finalizer_sure = !maybe_in_finalizer(L)};
  int home_idx = lua_gettop(L);
  lua_newtable(L);
  compat_setuservalue(L, home_idx, STATE_UV_RUNNING);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  compat_setuservalue(L, home_idx, STATE_UV_TIMERS);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, state_timers_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, home_idx);
  lua_pushvalue(L, home_idx);
  lua_setfield(L, LUA_REGISTRYINDEX, STATE_TIMERS_KEY);
}

/* A metatable for an internal userdata: a finalizer, and protected. */
void make_internal_metatable(lua_State *L, const char *name, lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
}

/* Whether a timer made now would be stopped with the state: false while the
 * state is closing, or while that cannot be ruled out. */
bool state_can_stop_timers(lua_State *L, state_timers *home) {
  if (!home->finalizer_sure && !maybe_in_finalizer(L)) home->finalizer_sure = true;
  return home->finalizer_sure && !home->closing;
}

/* Pushes the Timer of the queue userdata at queue_idx, or nil once it was
 * collected. The queue must not hold its Timer's on_error or watcher
 * itself: the state holds a running queue, and a function that refers to
 * its timer would keep the timer alive for ever. (Through the registry, not
 * an upvalue: finalizers call this too.) */
void push_timer_of_queue(lua_State *L, int queue_idx) {
  push_timer_of(L, lua_touserdata(L, queue_idx));
}

/* The same, from the queue's address. */
void push_timer_of(lua_State *L, const lhwt_queue *tm) {
  lua_getfield(L, LUA_REGISTRYINDEX, STATE_TIMERS_KEY);
  compat_getuservalue(L, -1, STATE_UV_TIMERS);
  lua_pushlightuserdata(L, (void *)(uintptr_t)tm);
  lua_rawget(L, -2);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* Records the Timer at timer_idx as tm's, for push_timer_of (weakly). */
void remember_timer(lua_State *L, const lhwt_queue *tm, int timer_idx) {
  timer_idx = lua_absindex(L, timer_idx);
  compat_getuservalue(L, STATE_TIMERS_UPVALUE, STATE_UV_TIMERS);
  lua_pushlightuserdata(L, (void *)(uintptr_t)tm);
  lua_pushvalue(L, timer_idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}
