/*
 * lhwt_dispatch_callk.c — the dispatch loop in C, for Lua 5.3+ (compat.h's
 * COMPAT_CALLK): each task called with lua_callk, so that it may yield.
 */
#include "lhwt.h"

#if COMPAT_CALLK
/* The dispatch loop in C, for Lua 5.3+: it calls each task with lua_callk,
 * whose continuation goes on with the loop after a task that yielded, so
 * that a task may yield as it may from the Lua loop. A task then needs no
 * call into C before it: with its lock and its results, that call costs a
 * loop whose tasks miss the cache about 150 ns a task on Lua 5.4
 * (bench/call_boundary.lua, classic against c_loop). Lua 5.1 and LuaJIT
 * cannot yield across a C call, and 5.2's lua_callk has a continuation of
 * another shape: they keep the loop in lua/hwt.lua. */

/* Pushes the call of the timeout `to`, just taken: the function, the
 * Timeout and the arguments; returns how many arguments. As in
 * internal_args, a stack the collector shrank since the probe can only fail
 * to grow for memory, and that is this task's error. */
static int push_task_call(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
  if (TAKE_SLOTS + to->nargs > LUA_MINSTACK && !lua_checkstack(L, TAKE_SLOTS + to->nargs))
    luaL_error(L, "not enough memory");
  push_anchored_in(L, anchors_idx, to);
  int timeout_idx = lua_gettop(L);
  int uvs = compat_uservalues_open(L, timeout_idx);
  compat_uv_get(L, uvs, TIMEOUT_UV_TASK);
  if (to->run_method) {                       /* task:run(t, ...) */
    lua_getfield(L, -1, "run");
    if (!is_callable(L, -1))
      luaL_error(L, "TimerTask's 'run' method: function expected, got %s", luaL_typename(L, -1));
    lua_insert(L, -2);
  }
  lua_pushvalue(L, timeout_idx);
  for (int i = 0; i < to->nargs; i++) compat_uv_get(L, uvs, TIMEOUT_UV_ARGS + i);
  compat_uservalues_close(L, uvs);
  return to->run_method + 1 + to->nargs;
}

/* internal.run_batch's stack: the drain, the budget, the anchor table. */
enum { BATCH_DRAIN_IDX = 1, BATCH_BUDGET_IDX, BATCH_ANCHORS_IDX };

/* The budget as a count the continuation's context can hold: a larger one
 * (poll() with no max is math.huge) ends the batch early, and run_drain
 * starts the next. */
static lua_KContext batch_budget(lua_State *L) {
  const lua_Number most = (lua_Number)(INTPTR_MAX < LUA_MAXINTEGER ? INTPTR_MAX : LUA_MAXINTEGER);
  lua_Number budget = lua_tonumber(L, BATCH_BUDGET_IDX);
  return budget < most ? (lua_KContext)budget : (lua_KContext)most;
}

static int batch_result(lua_State *L, bool nothing_due, lua_KContext taken) {
  lua_pushboolean(L, nothing_due);
  lua_pushinteger(L, (lua_Integer)taken);
  return 2;
}

/* The loop from the batch's (taken + 1)th task on; also the continuation of
 * a task that yielded, the one before it. */
static int run_batch_from(lua_State *L, int status, lua_KContext taken) {
  (void)status;
  drain *d = lua_touserdata(L, BATCH_DRAIN_IDX);
  lua_KContext budget = batch_budget(L);
  for (; taken < budget; taken++) {
    lua_settop(L, BATCH_ANCHORS_IDX);
    lhwt_timeout *to = take_next(L, d, BATCH_ANCHORS_IDX);
    if (!to) return batch_result(L, true, taken);
    int nargs = push_task_call(L, BATCH_ANCHORS_IDX, to);
    lua_callk(L, nargs, 0, taken + 1, run_batch_from);
  }
  return batch_result(L, false, budget);
}

/* internal.run_batch(drain, budget) -> whether nothing more is due, and how
 * many tasks it took: lua/hwt.lua's run_batch, in C (see there). */
int internal_run_batch(lua_State *L) {
  check_drain(L, BATCH_DRAIN_IDX);
  luaL_checknumber(L, BATCH_BUDGET_IDX);
  lua_settop(L, BATCH_BUDGET_IDX);
  probe_task_call(L);
  compat_getuservalue(L, BATCH_DRAIN_IDX, DRAIN_UV_ANCHORS);
  return run_batch_from(L, LUA_OK, 0);
}

/* internal.poll's stack: the drain, the error handler. */
enum { POLL_DRAIN_IDX = 1, POLL_HANDLER_IDX };

static int pass_error(lua_State *L) {
  lua_settop(L, 1);
  return 1;
}

static int poll_from(lua_State *L, int status, lua_KContext ran);

/* Runs the poll's next batch, protected; returns its status, its results
 * (or its error) at the top. Its continuation goes on with the poll after
 * a task that yielded. */
static int call_batch(lua_State *L, lua_KContext ran) {
  lua_settop(L, POLL_HANDLER_IDX);
  lua_pushvalue(L, RUN_BATCH_UPVALUE);
  lua_pushvalue(L, POLL_DRAIN_IDX);
  lua_pushnumber(L, HUGE_VAL);
  return lua_pcallk(L, 2, 2, POLL_HANDLER_IDX, ran, poll_from);
}

/* A batch raised (its error at the top), with `ran` tasks run before it.
 * If it took no task, the poll fails with that error, as lua/hwt.lua's
 * run_drain does; else the error was its last task's, reported as a task's
 * error. Returns how many tasks have now run. */
static lua_KContext after_batch_error(lua_State *L, lua_KContext ran) {
  drain *d = lua_touserdata(L, POLL_DRAIN_IDX);
  int error_idx = lua_gettop(L);
  if ((lua_KContext)d->taken == ran) {
    lua_pushcfunction(L, finish_drain);
    lua_pushvalue(L, POLL_DRAIN_IDX);
    lua_pcall(L, 1, 0, 0);
    lua_settop(L, error_idx);
    return lua_error(L);
  }
  push_on_error_of_drain(L, POLL_DRAIN_IDX);
  int on_error_idx = lua_gettop(L);
  int timeout_idx = 0;
  if (d->current) {
    push_anchored(L, d->current);
    timeout_idx = lua_gettop(L);
  }
  lua_pushvalue(L, error_idx);
  report_task_error(L, on_error_idx, timeout_idx);
  return (lua_KContext)d->taken;
}

/* The poll's loop over batches, from one that returned (or raised) with
 * `ran` tasks run before it; also the continuation of a batch whose task
 * yielded. */
static int poll_from(lua_State *L, int status, lua_KContext ran) {
  for (;;) {
    if (status == LUA_OK || status == LUA_YIELD) {
      bool nothing_due = lua_toboolean(L, -2);
      ran += (lua_KContext)lua_tointeger(L, -1);
      if (nothing_due) break;
    } else {
      ran = after_batch_error(L, ran);
    }
    status = call_batch(L, ran);
  }
  recycle(L, lua_touserdata(L, POLL_DRAIN_IDX));
  lua_pushinteger(L, (lua_Integer)ran);
  return 1;
}

/* internal.poll(timer) -> how many tasks ran: poll() with neither max nor
 * spawn, in C: lua/hwt.lua's drain_timer with its run_drain, without the
 * Lua calls between the wake-up and the first task (each is paid with the
 * caches cold, once per wake-up). false when
 * `timer` is not a Timer: poll() raises its own message. */
int internal_poll(lua_State *L) {
  lhwt_timer *handle = test_class(L, 1, TIMER_MT_UPVALUE);
  if (!handle) {
    lua_pushboolean(L, false);
    return 1;
  }
  lua_settop(L, 1);
  if (!begin_poll(L, handle->tm)) {
    lua_pushinteger(L, 0);
    return 1;
  }
  lua_CFunction handler = has_on_error(L) ? pass_error : traceback_handler;
  lua_replace(L, POLL_DRAIN_IDX);
  lua_pushcfunction(L, handler);
  return poll_from(L, call_batch(L, 0), 0);
}
#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_dispatch_callk_absent;
#endif
