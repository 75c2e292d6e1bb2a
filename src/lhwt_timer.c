/*
 * lhwt_timer.c — the Timer's methods (timeout, every, stop, timeouts,
 * stats, ...) and the manual clock's steps for lua/hwt.lua.
 */
#include "lhwt.h"

/* ---- Timer ------------------------------------------------------------ */

int hwt_now(lua_State *L) {
  lua_pushnumber(L, ns_to_seconds(engine_monotonic_ns()));
  return 1;
}

static void push_refusal(lua_State *L, uint64_t max_pending) {
  char message[80];
  snprintf(message, sizeof message, "too many pending timeouts (max_pending = %llu)",
           (unsigned long long)max_pending);
  lua_pushstring(L, message);
}

#define NO_THREAD_MESSAGE "cannot start the timer's worker thread"

/* A failed tq_schedule or tq_reset: raises once stopped, else nil and why. */
int arming_failed(lua_State *L, const lhwt_queue *tm, int result) {
  if (result == TQ_STOPPED) return luaL_error(L, "timer is stopped");
  lua_pushnil(L);
  if (result == TQ_FULL)
    push_refusal(L, tq_max_pending(&tm->queue));
  else
    lua_pushliteral(L, NO_THREAD_MESSAGE);
  return 2;
}

static uint64_t opt_wait_ns(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) ? ENGINE_NEVER : check_delay_ns(L, idx, "seconds");
}

int timer_wait(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_pushboolean(L, tq_wait(&tm->queue, opt_wait_ns(L, 2)));
  return 1;
}

static lhwt_queue *check_manual_timer(lua_State *L, int idx, const char *fname) {
  lhwt_queue *tm = check_timer(L, idx);
  if (!tm->manual_clock)
    luaL_error(L, "%s() needs a timer created with clock = \"manual\"", fname);
  return tm;
}

/* internal.clock_mark(timer, seconds) -> the manual clock's time `seconds`
 * from now, in a userdata (nanoseconds, exact on every Lua). */
int internal_clock_mark(lua_State *L) {
  lhwt_queue *tm = check_manual_timer(L, 1, "run_for");
  uint64_t delta_ns = seconds_to_ns(luaL_checknumber(L, 2));
  uint64_t *mark_ns = compat_newuserdata(L, sizeof *mark_ns, 0);
  uint64_t now_ns = tm->initialized ? tq_now_ns(&tm->queue) : 0;
  *mark_ns = delta_ns > ENGINE_MAX_DELAY_NS - now_ns ? ENGINE_MAX_DELAY_NS : now_ns + delta_ns;
  return 1;
}

/* internal.step_to(timer, mark) -> whether the manual clock is at the mark,
 * whether it moved, and whether something is due: it moves to the timer's
 * next deadline, or to the mark if that comes first (not while something
 * is due). Once stopped, the timer is at its mark with nothing due. */
int internal_step_to(lua_State *L) {
  lhwt_queue *tm = check_manual_timer(L, 1, "run_for");
  const uint64_t *mark_ns = lua_touserdata(L, 2);
  luaL_argcheck(L, mark_ns != NULL, 2, "clock mark expected");
  bool due = false, moved = false, at_mark = true;
  if (tm->initialized && !tq_is_stopped(&tm->queue)) {
    uint64_t before_ns = tq_now_ns(&tm->queue);
    uint64_t now_ns = tq_step_manual(&tm->queue, *mark_ns, &due);
    at_mark = now_ns >= *mark_ns;
    moved = now_ns != before_ns;
  }
  lua_pushboolean(L, at_mark);
  lua_pushboolean(L, moved);
  lua_pushboolean(L, due);
  return 3;
}

/* internal.advance_clock(timer, seconds): the manual clock's move, without
 * the poll (lua/hwt.lua checks the arguments and drains). */
int internal_advance_clock(lua_State *L) {
  lhwt_queue *tm = check_manual_timer(L, 1, "advance");
  double seconds = luaL_checknumber(L, 2);
  if (!tq_is_stopped(&tm->queue)) tq_advance_manual(&tm->queue, seconds_to_ns(seconds));
  return 0;
}

/* internal.clock_state(timer) -> whether its clock is manual, whether it is
 * stopped: what stats() says, without building the table. */
int internal_clock_state(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_pushboolean(L, tm->manual_clock);
  lua_pushboolean(L, !tm->initialized || tq_is_stopped(&tm->queue));
  return 2;
}

int timer_pending(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)tq_pending(&check_timer(L, 1)->queue));
  return 1;
}

/* Raises once the timer was collected (reachable only from finalizers). */
static lhwt_queue *check_alive_timer(lua_State *L, int idx) {
  lhwt_queue *tm = check_timer(L, idx);
  if (!tm->initialized) luaL_error(L, "timer was garbage-collected or its Lua state is closing");
  return tm;
}

/* The real clock reads as hwt.now(); a manual one counts from 0. */
int timer_now(lua_State *L) {
  lhwt_queue *tm = check_alive_timer(L, 1);
  if (!tm->manual_clock) return hwt_now(L);
  lua_pushnumber(L, ns_to_seconds(tq_now_ns(&tm->queue)));
  return 1;
}

int timer_fd(lua_State *L) {
  int fd = tq_fd(&check_alive_timer(L, 1)->queue);
  if (fd < 0) {
    lua_pushnil(L);
    lua_pushliteral(L, NO_THREAD_MESSAGE);
    return 2;
  }
  lua_pushinteger(L, fd);
  return 1;
}

/* Seconds until a poll would run something; nil when nothing can fall due.
 * What it returns is also what on_earlier's watcher compares with. */
int timer_next_due(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  uint64_t due_in_ns = tm->initialized ? tq_next_due(&tm->queue) : ENGINE_NEVER;
  if (due_in_ns == ENGINE_NEVER) {
    tm->told_due_ns = ENGINE_NEVER;
    lua_pushnil(L);
    return 1;
  }
  tm->told_due_ns = tq_now_ns(&tm->queue) + due_in_ns;
  lua_pushnumber(L, ns_to_seconds(due_in_ns));
  return 1;
}

/* on_earlier(fn | nil): fn(seconds) hears when an arming makes next_due()
 * earlier than what it last returned or told. */
int timer_on_earlier(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  if (!lua_isnoneornil(L, 2) && !is_callable(L, 2))
    luaL_argerror(L, 2, "function or nil expected");
  lua_settop(L, 2);
  tm->has_watcher = !lua_isnil(L, 2);            /* before the set pops it */
  compat_setuservalue(L, 1, TIMER_UV_WATCHER);
  tm->told_due_ns = ENGINE_NEVER;
  return 0;
}

int timer_stats(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  tq_stats stats;
  tq_get_stats(&tm->queue, &stats);
  lua_createtable(L, 0, 16);
  set_integer_field(L, "pending", stats.pending);
  set_integer_field(L, "due", stats.due);
  set_integer_field(L, "fired", stats.fired);
  set_integer_field(L, "cancelled", stats.cancelled);
  set_integer_field(L, "ticks", stats.ticks);
  set_integer_field(L, "worker_wakeups", stats.worker_wakeups);
  set_integer_field(L, "wheel_size", tm->wheel_size);
  set_integer_field(L, "max_pending", tq_max_pending(&tm->queue));
  lua_pushnumber(L, ns_to_seconds(stats.late_max_ns));
  lua_setfield(L, -2, "late_max");
  lua_pushnumber(L, ns_to_seconds(tq_late_percentile(&tm->queue, 50)));
  lua_setfield(L, -2, "late_p50");
  lua_pushnumber(L, ns_to_seconds(tq_late_percentile(&tm->queue, 99)));
  lua_setfield(L, -2, "late_p99");
  lua_pushnumber(L, ns_to_seconds(tm->tick_ns));
  lua_setfield(L, -2, "tick");
  lua_pushstring(L, tm->manual_clock ? "manual" : "monotonic");
  lua_setfield(L, -2, "clock");
  lua_pushboolean(L, tq_is_stopped(&tm->queue));
  lua_setfield(L, -2, "stopped");
  lua_pushboolean(L, tm->shared_engine);
  lua_setfield(L, -2, "shared");
  return 1;
}

/* timer:timeouts() -> what pending() counts, in (deadline, seq) order. */
/* timer:timeouts() -> what pending() counts, in (deadline, seq) order. */
int timer_timeouts(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_settop(L, 1);
  return push_pending_timeouts(L, tm, 1);
}

/* timer:stop() -> the timeouts that never ran, in deadline order. */
int timer_stop(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_settop(L, 1);
  stop_holds(L, tm, 1, true);
  compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  retire_queue(L, tm, -1);
  lua_pop(L, 1);
  return 1;
}

/* Through the stop method, so that what extends it (lua/hwt.lua) runs too. */
int timer_close(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_settop(L, 1);
  if (!tm->initialized) return 0;
  lua_getfield(L, 1, "stop");
  lua_pushvalue(L, 1);
  lua_call(L, 1, 0);
  return 0;
}

int timer_gc(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  if (tm->initialized) {
    stop_holds(L, tm, 1, false);
    compat_getuservalue(L, 1, TIMER_UV_QUEUE);
    retire_queue(L, tm, -1);
    release_queue(L, tm);
    remember_timer(L, tm, 1);      /* Lua cleared it; a later finalizer may resurrect us */
  }
  return 0;
}

int timer_tostring(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  if (!tm->initialized || tq_is_stopped(&tm->queue))
    lua_pushfstring(L, "hwt.Timer (stopped): %p", (void *)tm);
  else
    lua_pushfstring(L, "hwt.Timer (tick %fs, %d pending): %p", ns_to_seconds(tm->tick_ns),
                    (int)tq_pending(&tm->queue), (void *)tm);
  return 1;
}

/* internal.probe(): as deep in C calls and as wide on the Lua stack as a
 * task call of the dispatch loop, doing nothing. The loop calls it, as it
 * would call a task, before it takes anything, so that a poll nested in
 * tasks past the C stack or the Lua stack raises without taking a timeout. */
void probe_task_call(lua_State *L) {
  if (!lua_checkstack(L, MAX_TASK_ARGS + 8 + MAX_LUA_FRAME))
    luaL_error(L, "not enough memory or stack space to run tasks (poll() nested too deep?)");
  lua_pushvalue(L, DO_NOTHING_UPVALUE);
  lua_call(L, 0, 0);
}

int internal_probe(lua_State *L) {
  probe_task_call(L);
  return 0;
}
