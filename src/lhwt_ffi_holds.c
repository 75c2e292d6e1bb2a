/*
 * lhwt_ffi_holds.c — LuaJIT's hold strategy (lhwt.h) with slots: the slot
 * tables where the Lua layer keeps each timeout's Timeout, task and
 * arguments; stop, timeouts(), a timer's creation and collection, lua_close;
 * the drains' userdata and the internal functions lua/hwt/jit.lua calls
 * through the Lua API. Where this file releases a slot itself (stop, a
 * collected timer, a drain's finalizer), it clears the slot's entries.
 * LuaJIT 2.1 only (compat.h's COMPAT_FFI).
 */
#include "lhwt.h"

#if COMPAT_FFI
#include "lhwt_ffi.h"

/* ---- the slot tables: what the Lua layer keeps of each timeout ------------ */

/* In the registry at SLOT_TABLES_KEY: {calls, firsts, seconds, extras}.
 * The calls table holds slot n's Timeout at 2n - 1 and its task at 2n (one
 * cache line for both, where a take or a cancel reads them); the others
 * hold at n its first and second argument, or the array of its arguments. */
#define SLOT_TABLES_KEY "hwt.slot_tables"
enum { TABLE_CALLS = 1, TABLE_FIRSTS, TABLE_SECONDS, TABLE_EXTRAS, SLOT_TABLES = TABLE_EXTRAS };

static int push_slot_tables(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, SLOT_TABLES_KEY);
  return lua_gettop(L);
}

/* Pushes slot n's Timeout from the calls table at calls_idx. */
static void push_slot_timeout(lua_State *L, int calls_idx, uint32_t number) {
  lua_rawgeti(L, calls_idx, (int)(2 * number - 1));
}

/* Clears slot n's entries; allocates nothing. */
static void clear_entries_only(lua_State *L, int tables_idx, uint32_t number) {
  lua_rawgeti(L, tables_idx, TABLE_CALLS);
  lua_pushnil(L);
  lua_rawseti(L, -2, (int)(2 * number - 1));
  lua_pushnil(L);
  lua_rawseti(L, -2, (int)(2 * number));
  lua_pop(L, 1);
  for (int table = TABLE_FIRSTS; table <= SLOT_TABLES; table++) {
    lua_rawgeti(L, tables_idx, table);
    lua_pushnil(L);
    lua_rawseti(L, -2, (int)number);
    lua_pop(L, 1);
  }
}

/* Marks the Timeout of a released slot with how it ended, and clears the
 * slot's entries; allocates nothing. */
static void clear_entries(lua_State *L, int tables_idx, const hwt_step *step) {
  lua_rawgeti(L, tables_idx, TABLE_CALLS);
  push_slot_timeout(L, lua_gettop(L), step->released);
  hwt_handle *h = (hwt_handle *)(uintptr_t)lua_topointer(L, -1);
  if (h && lua_type(L, -1) == LUA_TCDATA) mark_ended(h, step);
  lua_pop(L, 2);
  clear_entries_only(L, tables_idx, step->released);
}

static void release_cleared(lua_State *L, int tables_idx, slot_arena *a, slot *s) {
  hwt_step step;
  release_into(a, s, &step);
  clear_entries(L, tables_idx, &step);
}

/* ---- stop, timeouts(), collection: the hold strategy of lhwt.h -------------- */

/* A timeout a stop hands back keeps its slot and entries until its timer
 * goes: Netty's stop() returns the timeouts so that their tasks can be run
 * elsewhere, so t:task() must still give it. Its Timeout is marked ended. */
static void keep_handed_back(lua_State *L, int tables_idx, slot *s) {
  hwt_step step = {.released = slot_number(s), .end_bits = end_bits(s), .deadline = ended_deadline(s)};
  lua_rawgeti(L, tables_idx, TABLE_CALLS);
  push_slot_timeout(L, lua_gettop(L), step.released);
  hwt_handle *h = (hwt_handle *)(uintptr_t)lua_topointer(L, -1);
  if (h && lua_type(L, -1) == LUA_TCDATA) mark_ended(h, &step);
  lua_pop(L, 2);
  s->use = SLOT_KEPT;
}

/* Releases the kept slots of tm (its timer goes), clearing their entries. */
static void release_kept(lua_State *L, int tables_idx, lhwt_queue *tm) {
  for (slot_chunk *chunk = tm->owned.chunks; chunk; chunk = chunk->record.next_of_owner)
    for (uint32_t place = 1; place < SLOT_CHUNK_SIZE; place++) {
      slot *s = &chunk->slots[place];
      if (s->use != SLOT_KEPT) continue;
      clear_entries_only(L, tables_idx, slot_number(s));
      slot_free(tm->arena, s);
    }
}

/* The live slots of tm: how many, and the first `room` in out unless NULL. */
static size_t list_live(lhwt_queue *tm, timeout **out, size_t room) {
  size_t count = 0;
  for (slot_chunk *chunk = tm->owned.chunks; chunk; chunk = chunk->record.next_of_owner)
    for (uint32_t place = 1; place < SLOT_CHUNK_SIZE; place++) {
      slot *s = &chunk->slots[place];
      if (s->use != SLOT_LIVE) continue;
      if (out && count < room) out[count] = &s->node;
      count++;
    }
  return count;
}

void new_holds(lua_State *L, lhwt_queue *tm, int timer_idx, int queue_idx) {
  (void)timer_idx;
  (void)queue_idx;
  state_timers *home = lua_touserdata(L, STATE_TIMERS_UPVALUE);
  tm->arena = &home->arena;
  slot_owner_attach(tm->arena, &tm->owned);
}

/* Stops tm with every slot it holds; with want_result, leaves at the top
 * the Timeouts that never ran, in deadline order. The result table comes
 * first (its allocation may run finalizers that arm more), the slots are
 * read after it, and from there on nothing allocates. */
void stop_holds(lua_State *L, lhwt_queue *tm, int timer_idx, bool want_result) {
  (void)timer_idx;
  int result_idx = 0;
  if (want_result) {
    lua_createtable(L, (int)list_live(tm, NULL, 0), 0);
    result_idx = lua_gettop(L);
  }
  int tables_idx = push_slot_tables(L);
  size_t count = list_live(tm, NULL, 0);
  timeout **held = count ? malloc(count * sizeof *held) : NULL;
  if (held) list_live(tm, held, count);
  tq_ended ended;
  tq_stop(&tm->queue, held, held ? count : 0, &ended);
  free(held);
  int stored = 0;
  timeout *n;
  while ((n = tq_ended_pop(&ended))) {
    slot *s = slot_of_timeout(n);
    if (result_idx && !timeout_has_run(n)) {
      lua_rawgeti(L, tables_idx, TABLE_CALLS);
      push_slot_timeout(L, lua_gettop(L), slot_number(s));
      lua_rawseti(L, result_idx, ++stored);
      lua_pop(L, 1);
      if (s->drains == 0) keep_handed_back(L, tables_idx, s);
    } else if (s->drains == 0) {
      release_cleared(L, tables_idx, tm->arena, s);
    }
  }
  if (!result_idx) release_kept(L, tables_idx, tm);
  lua_settop(L, result_idx ? result_idx : tables_idx - 1);
}

/* timer:timeouts(): the live slots' Timeouts that the engine counts as
 * pending, in (deadline, seq) order. As stop_holds, allocation first. */
int push_pending_timeouts(lua_State *L, lhwt_queue *tm, int timer_idx) {
  (void)timer_idx;
  size_t room, count;
  timeout **held;
  int base = lua_gettop(L);
  do {
    lua_settop(L, base);
    room = list_live(tm, NULL, 0) + SLOT_CHUNK_SIZE;
    held = compat_newuserdata(L, room * sizeof *held, 0);
    lua_createtable(L, (int)room, 0);
    count = list_live(tm, held, room);
  } while (count > room);
  int result_idx = lua_gettop(L);
  int tables_idx = push_slot_tables(L);
  lua_rawgeti(L, tables_idx, TABLE_CALLS);
  int calls_idx = lua_gettop(L);
  size_t kept = 0;
  if (tm->initialized && tq_select_pending(&tm->queue, held, count, &kept) != TQ_OK)
    return luaL_error(L, "not enough memory");
  for (size_t i = 0; i < kept; i++) {
    push_slot_timeout(L, calls_idx, slot_number(slot_of_timeout(held[i])));
    lua_rawseti(L, result_idx, (int)i + 1);
  }
  lua_settop(L, result_idx);
  return 1;
}

/* The queue went (collected or closed; its engine queue destroyed): every
 * slot no drain holds is freed, its entries cleared first (its Timeout, if
 * the timeout was still pending, marked cancelled); the slots drains hold
 * are orphans now, released by their drains' finish. Once only. */
void release_holds(lua_State *L, lhwt_queue *tm) {
  if (!tm->arena || !tm->owned.attached) return;
  int tables_idx = push_slot_tables(L);
  for (slot_chunk *chunk = tm->owned.chunks; chunk; chunk = chunk->record.next_of_owner)
    for (uint32_t place = 1; place < SLOT_CHUNK_SIZE; place++) {
      slot *s = &chunk->slots[place];
      if (s->use == SLOT_FREE || (s->use == SLOT_LIVE && s->drains)) continue;
      if (s->use != SLOT_LIVE) {
        clear_entries_only(L, tables_idx, slot_number(s));
        continue;
      }
      /* Ended by the queue's end: done if a periodic ran, else cancelled
       * (a never-firing one was left pending, inert). */
      int bits = timeout_has_run(&s->node) ? END_RAN : 0;
      if (timeout_ended_state(&s->node) != TIMEOUT_DONE) bits |= END_CANCELLED;
      hwt_step step = {.released = slot_number(s), .end_bits = bits, .deadline = ended_deadline(s)};
      clear_entries(L, tables_idx, &step);
    }
  lua_pop(L, 1);
  slot_owner_release(tm->arena, &tm->owned);
}

/* lua_close: the arena's memory goes once the queues still to be finalized
 * (a stopped timer's, released by its own finalizer) have let go. */
void close_holds(state_timers *home) { slot_arena_close(&home->arena); }

/* ---- drains ------------------------------------------------------------------- */

static ffi_drain *check_ffi_drain(lua_State *L, int idx) {
  return check_class(L, idx, DRAIN_MT_UPVALUE, DRAIN_MT);
}

/* A new drain of the queue userdata at queue_idx, left at the top. */
static ffi_drain *new_drain(lua_State *L, int queue_idx) {
  queue_idx = lua_absindex(L, queue_idx);
  ffi_drain *d = compat_newuserdata(L, sizeof *d, 1);
  *d = (ffi_drain){.tm = lua_touserdata(L, queue_idx)};
  lua_pushvalue(L, DRAIN_MT_UPVALUE);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, queue_idx);
  compat_setuservalue(L, -2, 1);
  return d;
}

/* internal.ffi_poll(timer, idle) -> a poll's drain (idle, the timer's last
 * one, made ready, or a new one) and whether the timer has an on_error; nil
 * when nothing is due or the timer is stopped; false when `timer` is not a
 * Timer. */
static int internal_ffi_poll(lua_State *L) {
  lhwt_timer *handle = test_class(L, 1, TIMER_MT_UPVALUE);
  if (!handle) {
    lua_pushboolean(L, false);
    return 1;
  }
  lua_settop(L, 2);
  lhwt_queue *tm = handle->tm;
  uint64_t seq_limit = tm->initialized ? tq_poll_begin(&tm->queue) : 0;
  if (seq_limit == 0) return 0;
  ffi_drain *d;
  if (lua_isnil(L, 2)) {
    compat_getuservalue(L, 1, TIMER_UV_QUEUE);
    d = new_drain(L, -1);
  } else {
    d = check_ffi_drain(L, 2);
  }
  d->seq_limit = seq_limit;
  d->taken = 0;
  compat_getuservalue(L, 1, TIMER_UV_ON_ERROR);
  lua_pushboolean(L, !lua_isnil(L, -1));
  lua_remove(L, -2);
  return 2;
}

/* internal.ffi_hand(drain) -> a hand-off drain holding the next due
 * timeout of the poll's drain, or nil when none is. */
static int internal_ffi_hand(lua_State *L) {
  ffi_drain *d = check_ffi_drain(L, 1);
  compat_getuservalue(L, 1, 1);
  ffi_drain *handoff = new_drain(L, -1);        /* before taking: it may raise */
  timeout *n = d->seq_limit && d->tm->initialized ? tq_hand_due(&d->tm->queue, d->seq_limit) : NULL;
  if (!n) return 0;
  slot *s = slot_of_timeout(n);
  handoff->is_handoff = true;
  handoff->handed = slot_number(s);
  handoff->handed_gen = s->gen;
  handoff->handed_seq = timeout_seq(n);
  return 1;
}

/* Tells the watcher of the timer of the drain at index 1 of the timeout in
 * slot `number`, armed again (a re-armed periodic, a hand-off given back). */
static void tell_slot(lua_State *L, ffi_drain *d, uint32_t number) {
  slot *s = d->tm->initialized ? slot_at(d->tm->arena, number) : NULL;
  if (!s || s->use != SLOT_LIVE) return;
  compat_getuservalue(L, 1, 1);
  tell_if_earlier(L, d->tm, lua_gettop(L), &s->node);
  lua_pop(L, 1);
}

/* A hand-off that spawn() refused, or that was dropped unstarted: its
 * timeout back to the due list, and the watcher told. Drain at index 1. */
static void unhand_and_tell(lua_State *L, ffi_drain *d) {
  uint32_t number = d->handed;
  d->handed = 0;
  slot *s = number ? live_slot(d->tm->arena, number, d->handed_gen) : NULL;
  if (!s) return;
  tq_unhand(&s->node, d->handed_seq);
  tell_slot(L, d, number);
}

/* internal.ffi_unhand(handoff): see unhand_and_tell. */
static int internal_ffi_unhand(lua_State *L) {
  unhand_and_tell(L, check_ffi_drain(L, 1));
  return 0;
}

/* A drain dropped with a current timeout (its coroutine collected while the
 * task was suspended) finishes it; one whose hand-off never started gives it
 * back to the due list. */
static int ffi_drain_gc(lua_State *L) {
  ffi_drain *d = lua_touserdata(L, 1);
  hwt_step step = {0};
  uint32_t current = d->current;
  unhand_and_tell(L, d);
  bool tell = finish_current(d, &step);
  if (step.released) clear_entries(L, push_slot_tables(L), &step);
  if (tell) tell_slot(L, d, current);
  return 0;
}

/* internal.tell(timer or drain, slot): tells the timer's watcher of the
 * timeout in `slot`, which was armed (or re-armed) to fall due before what
 * it heard. */
static int internal_tell(lua_State *L) {
  if (test_class(L, 1, TIMER_MT_UPVALUE)) {
    compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  } else {
    check_ffi_drain(L, 1);
    compat_getuservalue(L, 1, 1);
  }
  lhwt_queue *tm = lua_touserdata(L, -1);
  slot *s = slot_at(tm->arena, (uint32_t)luaL_checkinteger(L, 2));
  if (!s || s->use != SLOT_LIVE) return 0;
  tell_if_earlier(L, tm, lua_gettop(L), &s->node);
  return 0;
}

/* internal.ffi_abi() -> the ABI, the cdef text, the arena, the slot tables
 * and the layout numbers, for lua/hwt/jit.lua. */
static int internal_ffi_abi(lua_State *L) {
  state_timers *home = lua_touserdata(L, STATE_TIMERS_UPVALUE);
  lua_pushlightuserdata(L, (void *)(uintptr_t)&ffi_abi_table);
  lua_pushstring(L, ffi_cdef);
  lua_pushlightuserdata(L, &home->arena);
  push_slot_tables(L);
  lua_createtable(L, 0, 12);
  set_integer_field(L, "ran", END_RAN);
  set_integer_field(L, "cancelled", END_CANCELLED);
  set_integer_field(L, "number_bits", SLOT_NUMBER_BITS);
  set_integer_field(L, "arm_tell", ARM_TELL);
  set_integer_field(L, "reset_ended", RESET_ENDED);
  set_integer_field(L, "take_tell", TAKE_TELL);
  set_integer_field(L, "stopped", TQ_STOPPED);
  set_integer_field(L, "full", TQ_FULL);
  set_integer_field(L, "no_thread", TQ_NO_THREAD);
  set_integer_field(L, "no_memory", TQ_NO_MEMORY);
  return 5;
}

/* internal.timer_of(slot, gen) -> the Timer of the timeout (slot, gen),
 * while that timer exists; else nil. */
static int internal_timer_of(lua_State *L) {
  state_timers *home = lua_touserdata(L, STATE_TIMERS_UPVALUE);
  uint32_t number = (uint32_t)luaL_checknumber(L, 1), gen = (uint32_t)luaL_checknumber(L, 2);
  slot_owner *owner = slot_owner_of(&home->arena, number & SLOT_NUMBER_MAX, gen);
  if (!owner) return 0;
  push_timer_of(L, queue_of_owner(owner));
  return 1;
}

/* internal.queue(timer) -> its queue's address, for the FFI. */
static int internal_queue(lua_State *L) {
  lhwt_timer *handle = check_class(L, 1, TIMER_MT_UPVALUE, TIMER_MT);
  lua_pushlightuserdata(L, handle->tm);
  return 1;
}

/* internal.max_pending(timer) -> its max_pending, for the refusal's message. */
static int internal_max_pending(lua_State *L) {
  lhwt_timer *handle = check_class(L, 1, TIMER_MT_UPVALUE, TIMER_MT);
  lua_pushnumber(L, (lua_Number)tq_max_pending(&handle->tm->queue));
  return 1;
}

static const luaL_Reg ffi_functions[] = {
  {"ffi_abi", internal_ffi_abi}, {"queue", internal_queue}, {"ffi_poll", internal_ffi_poll},
  {"ffi_hand", internal_ffi_hand}, {"tell", internal_tell}, {"max_pending", internal_max_pending},
  {"timer_of", internal_timer_of}, {"ffi_unhand", internal_ffi_unhand},
  {NULL, NULL}
};

/* The slot tables (made with the module, in the registry), and the internal
 * functions above into the table at the top. */
void open_holds(lua_State *L, int upvalues_idx) {
  lua_getfield(L, LUA_REGISTRYINDEX, SLOT_TABLES_KEY);
  if (lua_isnil(L, -1)) {
    lua_createtable(L, SLOT_TABLES, 0);
    for (int table = 1; table <= SLOT_TABLES; table++) {
      lua_newtable(L);
      lua_rawseti(L, -2, table);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, SLOT_TABLES_KEY);
  }
  lua_pop(L, 1);
  for (int i = 0; i < MODULE_UPVALUES; i++) lua_pushvalue(L, upvalues_idx + i);
  luaL_setfuncs(L, ffi_functions, MODULE_UPVALUES);
}

int drain_gc(lua_State *L) { return ffi_drain_gc(L); }
#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_ffi_holds_absent;
#endif
