/*
 * lhwt_timeout.c — the Timeout's methods (cancel, reset, deadline, ...).
 */
#include "lhwt.h"

/* ---- Timeout ---------------------------------------------------------- */

int timeout_cancel(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  bool cancelled = tq_cancel(&to->node);
  if (cancelled && to->drains == 0) {         /* else its drain's finish unanchors */
    compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
    unanchor(L, timer_of(to), push_kind_table(L, lua_gettop(L), to), to);
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
    push_kind_table(L, 2, to);
    anchor(L, 3, 2, to, 1, 0);
  }
  int result = tm->initialized ? tq_reset(&to->node, delay_ns) : TQ_STOPPED;
  if (result == TQ_OK) {
    if (tm->has_watcher) {
      compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
      tell_if_earlier(L, tm, -1, to);
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
  compat_getuservalue(L, STATE_TIMERS_UPVALUE, STATE_UV_TIMERS);
  compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
  lua_rawget(L, -2);
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
