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

static int schedule(lua_State *L, lhwt_queue *tm, uint64_t delay_ns, uint64_t interval_ns) {
  bool run_method = check_task(L, 3);
  int nargs = lua_gettop(L) - 3;
  luaL_argcheck(L, nargs <= MAX_TASK_ARGS, 3 + MAX_TASK_ARGS, "too many task arguments");
  lhwt_timeout *to = compat_newuserdata(L, sizeof *to, TIMEOUT_UV_ARGS - 1 + nargs);
  memset(to, 0, sizeof *to);
  to->nargs = (uint8_t)nargs;
  to->run_method = run_method;
  lua_pushvalue(L, TIMEOUT_MT_UPVALUE);
  lua_setmetatable(L, -2);
  int timeout_idx = lua_gettop(L);
  compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  int queue_idx = timeout_idx + 1;
  int uvs = compat_uservalues_open(L, timeout_idx);
  lua_pushvalue(L, queue_idx);
  compat_uv_set(L, uvs, TIMEOUT_UV_QUEUE);
  lua_pushvalue(L, 3);
  compat_uv_set(L, uvs, TIMEOUT_UV_TASK);
  for (int i = 0; i < nargs; i++) {
    lua_pushvalue(L, 4 + i);
    compat_uv_set(L, uvs, TIMEOUT_UV_ARGS + i);
  }
  compat_uservalues_close(L, uvs);
  int table_idx = push_kind_table(L, queue_idx, to);
  anchor(L, table_idx, queue_idx, to, timeout_idx, 3);
  int result = tq_schedule(&tm->queue, &to->node, delay_ns, interval_ns);
  if (result == TQ_OK) {
    if (tm->has_watcher) tell_if_earlier(L, tm, queue_idx, to);   /* not on the common path */
    lua_pushvalue(L, timeout_idx);              /* returned from the top: no settop */
    return 1;
  }
  unanchor(L, tm, table_idx, to);
  return arming_failed(L, tm, result);
}

int timer_timeout(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  return schedule(L, tm, check_delay_ns(L, 2, "delay"), 0);
}

int timer_every(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  luaL_argcheck(L, luaL_checknumber(L, 2) > 0, 2, "interval must be > 0");
  uint64_t interval_ns = check_delay_ns(L, 2, "interval");
  if (interval_ns == 0) interval_ns = 1;         /* below a nanosecond */
  return schedule(L, tm, interval_ns, interval_ns);
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

static void push_anchors(lua_State *L, int timer_idx) {
  compat_getuservalue(L, timer_idx, TIMER_UV_ANCHORS);
}

/* tq_stop with the timer's anchored timeouts (without them the engine would
 * walk its whole wheel, which other timers may share). */
static void stop_queue(lua_State *L, lhwt_queue *tm, int anchors_idx, tq_ended *ended) {
  size_t count;
  timeout **held = held_timeouts(L, anchors_idx, &count);
  tq_stop(&tm->queue, held, count, ended);
  free(held);
}

/* Stops the timer at index 1; returns the timeouts that never ran, in
 * deadline order, as an array at the top of the stack. */
static void stop_timer(lua_State *L, lhwt_queue *tm) {
  lua_createtable(L, (int)tq_pending(&tm->queue), 0);
  int result_idx = lua_gettop(L);
  push_anchors(L, 1);
  int anchors_idx = lua_gettop(L);
  int singles_idx = push_singles(L, anchors_idx);
  tq_ended ended;
  stop_queue(L, tm, anchors_idx, &ended);
  compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  retire_queue(L, tm, -1);
  int count = 0;
  timeout *n;
  while ((n = tq_ended_pop(&ended))) {
    lhwt_timeout *to = (lhwt_timeout *)n;
    if (!timeout_has_run(&to->node)) {
      push_anchored_in(L, anchors_idx, to);
      lua_rawseti(L, result_idx, ++count);
    }
    if (to->drains == 0)                          /* else its drain's finish does */
      unanchor(L, tm, anchor_kind(to) == ANCHOR_SINGLE ? singles_idx : anchors_idx, to);
  }
  lua_settop(L, result_idx);
}

/* timer:timeouts() -> what pending() counts, in (deadline, seq) order. Its
 * two allocations (the list of anchored timeouts and the result, sized for
 * all of them) come before the anchors are read: a finalizer they run may
 * arm or cancel timeouts of this timer, so the reading starts again if more
 * were anchored meanwhile. From the reading on nothing allocates, so every
 * Timeout listed is still anchored when it is stored. */
int timer_timeouts(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_settop(L, 1);
  push_anchors(L, 1);
  luaL_checkstack(L, 8, "timeouts()");
  size_t room = 0, count;
  timeout **held;
  do {
    lua_settop(L, 2);
    room = list_anchored(L, 2, NULL, 0) + ANCHOR_SLOTS_MIN;
    held = compat_newuserdata(L, room * sizeof *held, 0);
    lua_createtable(L, (int)room, 0);
    count = list_anchored(L, 2, held, room);
  } while (count > room);
  size_t kept = 0;
  if (tm->initialized && tq_select_pending(&tm->queue, held, count, &kept) != TQ_OK)
    return luaL_error(L, "not enough memory");
  for (size_t i = 0; i < kept; i++) {
    push_anchored_in(L, 2, (lhwt_timeout *)held[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

int timer_stop(lua_State *L) {
  lhwt_queue *tm = check_timer(L, 1);
  lua_settop(L, 1);
  stop_timer(L, tm);
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
    push_anchors(L, 1);
    stop_queue(L, tm, lua_gettop(L), NULL);
    compat_getuservalue(L, 1, TIMER_UV_QUEUE);
    retire_queue(L, tm, -1);
    release_queue(tm);
    lua_pushvalue(L, 1);           /* Lua cleared it; a later finalizer may resurrect us */
    set_state_entry(L, STATE_UV_TIMERS, -2);
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
