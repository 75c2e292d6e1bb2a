/*
 * lhwt_report.c — where errors and news go: a task's error to on_error or
 * stderr (with a traceback), and the on_earlier watcher told of an arming
 * that makes next_due() earlier.
 */
#include "lhwt.h"

int traceback_handler(lua_State *L) {
  const char *message = lua_tostring(L, 1);
  if (!message)
    message = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, message, 1);
  return 1;
}

/* Never converts (a conversion allocates, and nothing here may raise). */
static const char *error_text(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx)
                                         : "(error object is not a string)";
}

/* The error is at the top (popped); timeout_idx: the Timeout, or 0. */
void report_task_error(lua_State *L, int on_error_idx, int timeout_idx) {
  if (lua_isnil(L, on_error_idx)) {
    fprintf(stderr, "hwt: timer task failed: %s\n", error_text(L, -1));
    fflush(stderr);
    lua_pop(L, 1);
    return;
  }
  lua_pushvalue(L, on_error_idx);
  lua_insert(L, -2);
  if (timeout_idx) lua_pushvalue(L, timeout_idx); else lua_pushnil(L);
  if (lua_pcall(L, 2, 0, 0) != 0) {
    fprintf(stderr, "hwt: on_error failed: %s\n", error_text(L, -1));
    fflush(stderr);
    lua_pop(L, 1);
  }
}

/* Pushes the on_error of the timer of the drain at drain_idx: nil when it
 * has none, or once the timer was collected. */
void push_on_error_of_drain(lua_State *L, int drain_idx) {
  compat_getuservalue(L, drain_idx, DRAIN_UV_QUEUE);
  push_timer_of_queue(L, -1);
  lua_remove(L, -2);
  if (lua_isnil(L, -1)) return;
  compat_getuservalue(L, -1, TIMER_UV_ON_ERROR);
  lua_remove(L, -2);
}

/* Tells the watcher (on_earlier) when `to`, just armed, falls due before
 * the time it last heard of. queue_idx: the queue userdata. */
void tell_if_earlier(lua_State *L, lhwt_queue *tm, int queue_idx, timeout *node) {
  if (!tm->has_watcher || !tm->initialized) return;   /* a released queue has no clock */
  uint64_t now_ns = tq_now_ns(&tm->queue);
  uint64_t due_at_ns = tq_due_at(node);
  if (due_at_ns < now_ns) due_at_ns = now_ns;       /* due: as next_due() counts it */
  if (due_at_ns >= tm->told_due_ns) return;
  tm->told_due_ns = due_at_ns;
  push_timer_of_queue(L, queue_idx);
  int timer_idx = lua_gettop(L);
  if (lua_isnil(L, timer_idx)) {
    lua_pop(L, 1);
    return;
  }
  compat_getuservalue(L, timer_idx, TIMER_UV_WATCHER);
  lua_pushnumber(L, ns_to_seconds(due_at_ns > now_ns ? due_at_ns - now_ns : 0));
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    compat_getuservalue(L, timer_idx, TIMER_UV_ON_ERROR);
    lua_insert(L, -2);
    report_task_error(L, lua_gettop(L) - 1, 0);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* internal.report_error(timer or drain, err [, timeout]): err goes where a
 * task's error goes (on_error, or stderr). */
int internal_report_error(lua_State *L) {
  lua_settop(L, 3);
  if (luaL_testudata(L, 1, DRAIN_MT)) {
    push_on_error_of_drain(L, 1);
  } else {
    check_timer(L, 1);
    compat_getuservalue(L, 1, TIMER_UV_ON_ERROR);
  }
  int on_error_idx = lua_gettop(L);
  lua_pushvalue(L, 2);
  report_task_error(L, on_error_idx, lua_isnil(L, 3) ? 0 : 3);
  return 0;
}
