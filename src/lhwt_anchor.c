/*
 * lhwt_anchor.c — the hold strategy of Lua 5.1-5.4: while a timeout is
 * pending, due or running, its Timeout userdata (and with it the task and
 * arguments) is kept alive in its timer's anchor table, at a slot handed out
 * here; listing what is anchored; stopping a timer with what it anchors.
 * (LuaJIT's strategy is lhwt_ffi_holds.c's.)
 */
#include "lhwt.h"

#if !COMPAT_FFI

/* Doubles the room for free slots of `kind` of the queue at queue_idx. The
 * allocation may run a finalizer that anchors timeouts of this queue, and so
 * grows the room itself: what the slots hold is read after it. */
static void grow_anchor_slots(lua_State *L, lhwt_queue *tm, int queue_idx) {
  anchor_slots *slots = &tm->slots;
  if (slots->capacity >= ANCHOR_SLOTS_MAX) luaL_error(L, "too many timeouts anchored");
  uint32_t capacity = slots->capacity ? 2 * slots->capacity : ANCHOR_SLOTS_MIN;
  uint32_t *free_slots = compat_newuserdata(L, capacity * sizeof *free_slots, 0);
  if (slots->capacity >= capacity) {           /* a finalizer grew it meanwhile */
    lua_pop(L, 1);
    return;
  }
  if (slots->free_count) memcpy(free_slots, slots->free, slots->free_count * sizeof *free_slots);
  compat_setuservalue(L, lua_absindex(L, queue_idx), QUEUE_UV_FREE_SLOTS);
  slots->free = free_slots;
  slots->capacity = capacity;
}

/* Pushes the anchor table from the queue userdata at queue_idx; returns
 * its index. */
int push_anchor_table(lua_State *L, int queue_idx) {
  compat_getuservalue(L, queue_idx, QUEUE_UV_ANCHORS);
  return lua_gettop(L);
}

/* Anchors the Timeout at timeout_idx in the anchor table at table_idx; its
 * queue userdata is at queue_idx. */
void anchor(lua_State *L, int table_idx, int queue_idx, lhwt_timeout *to, int timeout_idx) {
  lhwt_queue *tm = lua_touserdata(L, queue_idx);
  anchor_slots *slots = &tm->slots;
  while (slots->free_count == 0 && slots->used == slots->capacity)   /* see grow_anchor_slots */
    grow_anchor_slots(L, tm, queue_idx);
  if (to->anchor) return;                      /* a finalizer run by the growth reset it */
  to->anchor = slots->free_count ? slots->free[--slots->free_count] : ++slots->used;
  lua_pushvalue(L, timeout_idx);
  lua_rawseti(L, table_idx, (int)to->anchor);
}

/* Empties anchor slot `slot` in the anchor table at table_idx and puts it
 * on tm's free list (never full: see anchor_slots). */
static void clear_slot(lua_State *L, lhwt_queue *tm, int table_idx, uint32_t slot) {
  lua_pushnil(L);
  lua_rawseti(L, table_idx, (int)slot);
  tm->slots.free[tm->slots.free_count++] = slot;
}

/* Releases the anchor of a timeout of tm, from the anchor table at
 * table_idx; a second call does nothing. */
void unanchor(lua_State *L, lhwt_queue *tm, int table_idx, lhwt_timeout *to) {
  if (to->anchor == 0) return;
  clear_slot(L, tm, table_idx, to->anchor);
  to->anchor = 0;
}

/* Pushes the anchored Timeout `to`, from the anchor table at anchors_idx. */
void push_anchored_in(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
  lua_rawgeti(L, anchors_idx, (int)to->anchor);
}

/* The Timeouts anchored in the table at anchors_idx, every one the engine
 * holds and those that drains hold: how many, and the first `room` of them
 * in `out` unless NULL. Allocates nothing, so no finalizer runs meanwhile. */
static size_t list_anchored(lua_State *L, int anchors_idx, timeout **out, size_t room) {
  size_t count = 0;
  for (lua_pushnil(L); lua_next(L, anchors_idx); lua_pop(L, 1)) {
    if (out && count < room) out[count] = lua_touserdata(L, -1);
    count++;
  }
  return count;
}

/* The anchored Timeouts in a malloc'd array (not Lua's allocator: this runs
 * in __gc too). NULL when there are none or memory is short. */
static timeout **held_timeouts(lua_State *L, int anchors_idx, size_t *count) {
  size_t capacity = list_anchored(L, anchors_idx, NULL, 0);
  timeout **held = capacity ? malloc(capacity * sizeof *held) : NULL;
  *count = held ? capacity : 0;
  if (held) list_anchored(L, anchors_idx, held, capacity);
  return held;
}

/* ---- the hold strategy (lhwt.h) ----------------------------------------- */

/* The Timer at timer_idx and its queue at queue_idx get their anchor table. */
void new_holds(lua_State *L, lhwt_queue *tm, int timer_idx, int queue_idx) {
  (void)tm;
  lua_newtable(L);
  lua_pushvalue(L, -1);
  compat_setuservalue(L, queue_idx, QUEUE_UV_ANCHORS);
  compat_setuservalue(L, timer_idx, TIMER_UV_ANCHORS);
}

static void push_anchors(lua_State *L, int timer_idx) {
  compat_getuservalue(L, timer_idx, TIMER_UV_ANCHORS);
}

/* Stops tm (its Timer at timer_idx) with its anchored timeouts: without
 * them the engine would walk its whole wheel, which other timers may share.
 * With want_result, leaves at the top the timeouts that never ran, in
 * deadline order. */
void stop_holds(lua_State *L, lhwt_queue *tm, int timer_idx, bool want_result) {
  int result_idx = 0;
  if (want_result) {
    lua_createtable(L, (int)tq_pending(&tm->queue), 0);
    result_idx = lua_gettop(L);
  }
  push_anchors(L, timer_idx);
  int anchors_idx = lua_gettop(L);
  size_t count;
  timeout **held = held_timeouts(L, anchors_idx, &count);
  tq_ended ended;
  tq_stop(&tm->queue, held, count, &ended);
  free(held);
  int stored = 0;
  timeout *n;
  while ((n = tq_ended_pop(&ended))) {
    lhwt_timeout *to = (lhwt_timeout *)n;
    if (result_idx && !timeout_has_run(&to->node)) {
      push_anchored_in(L, anchors_idx, to);
      lua_rawseti(L, result_idx, ++stored);
    }
    if (to->drains == 0) unanchor(L, tm, anchors_idx, to);   /* else its drain's finish does */
  }
  lua_settop(L, result_idx ? result_idx : anchors_idx - 1);
}

/* timer:timeouts() -> what pending() counts, in (deadline, seq) order. Its
 * two allocations (the list of anchored timeouts and the result, sized for
 * all of them) come before the anchors are read: a finalizer they run may
 * arm or cancel timeouts of this timer, so the reading starts again if more
 * were anchored meanwhile. From the reading on nothing allocates, so every
 * Timeout listed is still anchored when it is stored. */
int push_pending_timeouts(lua_State *L, lhwt_queue *tm, int timer_idx) {
  push_anchors(L, timer_idx);
  int anchors_idx = lua_gettop(L);
  luaL_checkstack(L, 8, "timeouts()");
  size_t room = 0, count;
  timeout **held;
  do {
    lua_settop(L, anchors_idx);
    room = list_anchored(L, anchors_idx, NULL, 0) + ANCHOR_SLOTS_MIN;
    held = compat_newuserdata(L, room * sizeof *held, 0);
    lua_createtable(L, (int)room, 0);
    count = list_anchored(L, anchors_idx, held, room);
  } while (count > room);
  size_t kept = 0;
  if (tm->initialized && tq_select_pending(&tm->queue, held, count, &kept) != TQ_OK)
    return luaL_error(L, "not enough memory");
  for (size_t i = 0; i < kept; i++) {
    push_anchored_in(L, anchors_idx, (lhwt_timeout *)held[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

void release_holds(lua_State *L, lhwt_queue *tm) {
  (void)L;
  (void)tm;
}

void close_holds(state_timers *home) { (void)home; }

void open_holds(lua_State *L, int upvalues_idx) {
  (void)L;
  (void)upvalues_idx;
}
#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_anchor_absent;
#endif
