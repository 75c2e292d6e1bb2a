/*
 * lhwt_timeout.c — the Timeout userdata of Lua 5.1-5.4: timer:timeout() and
 * timer:every(), which make one, and its methods (cancel, reset, deadline,
 * ...). On LuaJIT a Timeout is a cdata: lua/hwt/jit.lua and lhwt_ffi.c.
 */
#include "lhwt.h"

#if !COMPAT_FFI
/* ---- making one -------------------------------------------------------- */

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
  int table_idx = push_anchor_table(L, queue_idx);
  anchor(L, table_idx, queue_idx, to, timeout_idx);
  int result = tq_schedule(&tm->queue, &to->node, delay_ns, interval_ns);
  if (result == TQ_OK) {
    if (tm->has_watcher) tell_if_earlier(L, tm, queue_idx, &to->node);   /* not on the common path */
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



/* ---- Timeout ---------------------------------------------------------- */

int timeout_cancel(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  bool cancelled = tq_cancel(&to->node);
  if (cancelled && to->drains == 0) {         /* else its drain's finish unanchors */
    compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
    unanchor(L, timer_of(to), push_anchor_table(L, lua_gettop(L)), to);
  }
  lua_pushboolean(L, cancelled);
  return 1;
}

/* t:reset([delay]) -> true, or nil and why (max_pending); raises once the
 * timer stopped. Anchors t first when nothing held it (it ran or was
 * cancelled): that may raise, and must not follow a re-arming. The queue
 * userdata is the owner's container, so the common case (t anchored, no
 * watcher) needs no user value. */
int timeout_reset(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  uint64_t delay_ns = lua_isnoneornil(L, 2) ? timeout_period_ns(&to->node) : check_delay_ns(L, 2, "delay");
  lhwt_queue *tm = timer_of(to);
  bool anchored_here = to->anchor == 0;
  if (anchored_here) {
    lua_settop(L, 1);
    compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
    push_anchor_table(L, 2);
    anchor(L, 3, 2, to, 1);
  }
  int result = tm->initialized ? tq_reset(&to->node, delay_ns) : TQ_STOPPED;
  if (result == TQ_OK) {
    if (tm->has_watcher) {
      compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
      tell_if_earlier(L, tm, -1, &to->node);
    }
    lua_pushboolean(L, true);
    return 1;
  }
  if (anchored_here) unanchor(L, tm, 3, to);
  return arming_failed(L, tm, result);
}

/* t:deadline() -> on the timer's clock (timer:now()); math.huge: never. */
int timeout_deadline(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
  const lhwt_queue *tm = lua_touserdata(L, -1);
  uint64_t deadline_ns = tq_deadline(&to->node);
  lua_pushnumber(L, deadline_ns == ENGINE_NEVER ? HUGE_VAL : ns_to_seconds(tm->epoch_ns + deadline_ns));
  return 1;
}

int timeout_close(lua_State *L) {
  timeout_cancel(L);
  return 0;
}

int timeout_is_cancelled(lua_State *L) {
  lua_pushboolean(L, timeout_cancelled(&check_timeout(L, 1)->node));
  return 1;
}

int timeout_is_expired(lua_State *L) {
  lua_pushboolean(L, timeout_has_run(&check_timeout(L, 1)->node));
  return 1;
}

/* nil once the timer was collected: a Timeout does not keep it alive. */
int timeout_timer(lua_State *L) {
  check_timeout(L, 1);
  compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
  push_timer_of_queue(L, -1);
  return 1;
}

int timeout_task(lua_State *L) {
  check_timeout(L, 1);
  compat_getuservalue(L, 1, TIMEOUT_UV_TASK);
  return 1;
}

int timeout_remaining_seconds(lua_State *L) {
  lua_pushnumber(L, ns_to_seconds(timeout_remaining(&check_timeout(L, 1)->node)));
  return 1;
}

static const char *state_name(const lhwt_timeout *to, int state) {
  switch (state) {
    case TIMEOUT_PENDING: return timeout_has_run(&to->node) ? "pending (periodic)" : "pending";
    case TIMEOUT_DUE: return "due";
    case TIMEOUT_RUNNING: return "running";
    case TIMEOUT_HANDED: return "due, handed to spawn";
    case TIMEOUT_CANCELLED: return "cancelled";
    default: return "expired";
  }
}

int timeout_tostring(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  const char *state = state_name(to, timeout_state(&to->node));
  uint64_t remaining_ns = timeout_remaining(&to->node);
  if (remaining_ns == ENGINE_NEVER)
    lua_pushfstring(L, "hwt.Timeout (%s, never due): %p", state, (void *)to);
  else
    lua_pushfstring(L, "hwt.Timeout (%s, due in %fs): %p", state,
                    ns_to_seconds(remaining_ns), (void *)to);
  return 1;
}
#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_timeout_absent;
#endif
