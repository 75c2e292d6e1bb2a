/*
 * lhwt_anchor.c — anchoring: while a timeout is pending, due or running, its
 * Timeout (and with it the task and arguments) is kept alive in its timer's
 * anchor table, at a slot handed out here; listing what is anchored.
 */
#include "lhwt.h"

/* Doubles the room for free slots of `kind` of the queue at queue_idx. The
 * allocation may run a finalizer that anchors timeouts of this queue, and so
 * grows the room itself: what the slots hold is read after it. */
static void grow_anchor_slots(lua_State *L, lhwt_queue *tm, int kind, int queue_idx) {
  anchor_slots *slots = &tm->slots[kind];
  if (slots->capacity >= ANCHOR_SLOTS_MAX) luaL_error(L, "too many timeouts anchored");
  uint32_t capacity = slots->capacity ? 2 * slots->capacity : ANCHOR_SLOTS_MIN;
  uint32_t *free_slots = compat_newuserdata(L, capacity * sizeof *free_slots, 0);
  if (slots->capacity >= capacity) {           /* a finalizer grew it meanwhile */
    lua_pop(L, 1);
    return;
  }
  if (slots->free_count) memcpy(free_slots, slots->free, slots->free_count * sizeof *free_slots);
  compat_setuservalue(L, lua_absindex(L, queue_idx),
                      kind == ANCHOR_MAIN ? QUEUE_UV_FREE_SLOTS : QUEUE_UV_FREE_SINGLES);
  slots->free = free_slots;
  slots->capacity = capacity;
}

#if COMPAT_FFI
/* On LuaJIT the anchor table also keeps each timeout's call, for the FFI
 * take's loop (lua/hwt.lua), which can read neither a userdata's
 * environment nor a C function's stack: slot s holds the Timeout at 2s - 1
 * and its task at 2s. (A task with one or two arguments is anchored by its
 * user value table instead, where the loop finds the Timeout, the task and
 * the arguments: see anchor_single.) Written and cleared with the Timeout,
 * in the table at hand. task_idx: the task's index, or 0 to read it from
 * the Timeout's user values. */
static void keep_call(lua_State *L, int anchors_idx, const lhwt_timeout *to, int timeout_idx,
                      int task_idx) {
  if (task_idx) lua_pushvalue(L, task_idx);
  else compat_getuservalue(L, timeout_idx, TIMEOUT_UV_TASK);
  lua_rawseti(L, anchors_idx, anchor_index(to->anchor) + 1);
}

static void drop_call(lua_State *L, int anchors_idx, uint32_t slot) {
  lua_pushnil(L);
  lua_rawseti(L, anchors_idx, anchor_index(slot) + 1);
}

/* Anchors the Timeout at timeout_idx by its user value table, which holds
 * the Timeout too, at slot to->anchor of the single anchors at singles_idx. */
static void anchor_single(lua_State *L, int singles_idx, const lhwt_timeout *to, int timeout_idx) {
  compat_getuvtable(L, timeout_idx);
  lua_pushvalue(L, timeout_idx);
  lua_rawseti(L, -2, TIMEOUT_UV_SELF);
  lua_rawseti(L, singles_idx, (int)to->anchor);
}

static void clear_single(lua_State *L, int singles_idx, uint32_t slot) {
  lua_pushnil(L);
  lua_rawseti(L, singles_idx, (int)slot);
}
#else
#define keep_call(L, anchors_idx, to, timeout_idx, task_idx) ((void)(task_idx))
#define drop_call(L, anchors_idx, slot) ((void)0)
#define anchor_single(L, singles_idx, to, timeout_idx) ((void)0)
#define clear_single(L, singles_idx, slot) ((void)0)
#endif

/* Pushes the table of the kind of `to` from the queue userdata at queue_idx;
 * returns its index. */
int push_kind_table(lua_State *L, int queue_idx, const lhwt_timeout *to) {
  compat_getuservalue(L, queue_idx, queue_uv_of_kind(anchor_kind(to)));
  return lua_gettop(L);
}

/* Anchors the Timeout at timeout_idx (whose task is at task_idx, or 0: in
 * its user values) in the table of its kind at table_idx; its queue
 * userdata is at queue_idx. */
void anchor(lua_State *L, int table_idx, int queue_idx, lhwt_timeout *to,
                   int timeout_idx, int task_idx) {
  lhwt_queue *tm = lua_touserdata(L, queue_idx);
  int kind = anchor_kind(to);
  anchor_slots *slots = &tm->slots[kind];
  while (slots->free_count == 0 && slots->used == slots->capacity)   /* see grow_anchor_slots */
    grow_anchor_slots(L, tm, kind, queue_idx);
  if (to->anchor) return;                      /* a finalizer run by the growth reset it */
  to->anchor = slots->free_count ? slots->free[--slots->free_count] : ++slots->used;
  if (kind == ANCHOR_SINGLE) {
    anchor_single(L, table_idx, to, timeout_idx);
    return;
  }
  lua_pushvalue(L, timeout_idx);
  lua_rawseti(L, table_idx, anchor_index(to->anchor));
  keep_call(L, table_idx, to, timeout_idx, task_idx);
}

/* Empties the entries of slot `slot` of `kind` in the table of that kind at
 * table_idx. */
void clear_slot(lua_State *L, int table_idx, int kind, uint32_t slot) {
  if (kind == ANCHOR_SINGLE) {
    clear_single(L, table_idx, slot);
    return;
  }
  lua_pushnil(L);
  lua_rawseti(L, table_idx, anchor_index(slot));
  drop_call(L, table_idx, slot);
}

/* Puts an emptied slot on tm's free list (never full: see anchor_slots). */
void give_back_slot(lhwt_queue *tm, int kind, uint32_t slot) {
  anchor_slots *slots = &tm->slots[kind];
  slots->free[slots->free_count++] = slot;
}

/* Releases the anchor of a timeout of tm, from the table of its kind at
 * table_idx; a second call does nothing. */
void unanchor(lua_State *L, lhwt_queue *tm, int table_idx, lhwt_timeout *to) {
  if (to->anchor == 0) return;
  int kind = anchor_kind(to);
  clear_slot(L, table_idx, kind, to->anchor);
  give_back_slot(tm, kind, to->anchor);
  to->anchor = 0;
}

/* Pushes the single anchors of the anchor table at anchors_idx (on PUC Lua,
 * which has none, that table); returns its index. */
int push_singles(lua_State *L, int anchors_idx) {
#if COMPAT_FFI
  lua_rawgeti(L, anchors_idx, SINGLES_INDEX);
#else
  lua_pushvalue(L, anchors_idx);
#endif
  return lua_gettop(L);
}

/* Pushes the anchored Timeout `to`, from the anchor table at anchors_idx. */
void push_anchored_in(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
#if COMPAT_FFI
  if (anchor_kind(to) == ANCHOR_SINGLE) {
    lua_rawgeti(L, push_singles(L, anchors_idx), (int)to->anchor);
    lua_rawgeti(L, -1, TIMEOUT_UV_SELF);
    lua_replace(L, -3);
    lua_pop(L, 1);
    return;
  }
#endif
  lua_rawgeti(L, anchors_idx, anchor_index(to->anchor));
}

/* Whether lua_next's entry (key at -2, value at -1) is a Timeout's anchor,
 * and not a task that is a userdata too. */
static bool at_anchor_entry(lua_State *L) {
  return lua_type(L, -1) == LUA_TUSERDATA &&
         (ANCHOR_STRIDE == 1 || lua_tointeger(L, -2) % ANCHOR_STRIDE == 1);
}

/* The Timeouts anchored in the table at anchors_idx, every one the engine
 * holds and those that drains hold: how many, and the first `room` of them
 * in `out` unless NULL. Allocates nothing, so no finalizer runs meanwhile. */
size_t list_anchored(lua_State *L, int anchors_idx, timeout **out, size_t room) {
  size_t count = 0;
  for (lua_pushnil(L); lua_next(L, anchors_idx); lua_pop(L, 1)) {
    if (!at_anchor_entry(L)) continue;
    if (out && count < room) out[count] = lua_touserdata(L, -1);
    count++;
  }
#if COMPAT_FFI
  int singles_idx = push_singles(L, anchors_idx);
  for (lua_pushnil(L); lua_next(L, singles_idx); lua_pop(L, 1)) {
    lua_rawgeti(L, -1, TIMEOUT_UV_SELF);
    if (out && count < room) out[count] = lua_touserdata(L, -1);
    lua_pop(L, 1);
    count++;
  }
  lua_pop(L, 1);
#endif
  return count;
}

/* The anchored Timeouts in a malloc'd array (not Lua's allocator: this runs
 * in __gc too). NULL when there are none or memory is short. */
timeout **held_timeouts(lua_State *L, int anchors_idx, size_t *count) {
  size_t capacity = list_anchored(L, anchors_idx, NULL, 0);
  timeout **held = capacity ? malloc(capacity * sizeof *held) : NULL;
  *count = held ? capacity : 0;
  if (held) list_anchored(L, anchors_idx, held, capacity);
  return held;
}
