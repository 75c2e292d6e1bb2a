/*
 * lhwt_ffi.c — LuaJIT's binding of timeouts: a C ABI for the FFI, which
 * lua/hwt/jit.lua calls, and the few steps that need the Lua API (stop,
 * timeouts(), a collected timer, a drain's finalizer, a watcher's call).
 * LuaJIT 2.1 only (compat.h's COMPAT_FFI).
 *
 * LuaJIT's trace compiler cannot compile a call through the classic C API,
 * so there every schedule, cancel and take is an FFI call into this file,
 * and what Lua keeps of a timeout lives in plain tables indexed by its slot
 * (slot_arena.h): its Timeout (a cdata { slot, gen }), its task and its
 * arguments. The Lua layer writes those entries before it arms the slot,
 * and clears them when an FFI call reports the slot released: at once,
 * before any Lua allocation, so no schedule can reuse the slot while its
 * entries hold the old timeout. Where this file releases a slot itself
 * (stop, a collected timer, a drain's finalizer), it clears them. A Timeout
 * whose timeout ended records how (RAN, CANCELLED) in the two bits above its
 * slot number: its task and arguments are let go then, so a task that
 * refers to its own Timeout (a closure, a connection holding it) is not kept
 * alive by it.
 *
 * A slot is LIVE from its arming until the engine has let it go (cancelled,
 * run to its end, stopped) and no drain holds it (a task running, perhaps
 * suspended). A drain is a userdata (this file's ffi_drain) that the FFI
 * converts to its address: a poll's, reused by the timer's next poll, or a
 * hand-off's (poll(max, spawn)), made per hand-off.
 */
#include "lhwt.h"

#if COMPAT_FFI
#include "slot_arena.h"

#define LUA_TCDATA 10           /* LuaJIT's type number of a cdata (lj_obj.h) */

/* ---- what Lua sees ------------------------------------------------------ */

enum { END_RAN = 1, END_CANCELLED = 2 };   /* in a handle, above its slot number */
#define ARM_TELL 16                        /* or'ed into TQ_OK: tell the watcher */
#define RESET_ENDED 32                     /* the timeout ended: nothing to reset */
#define TAKE_TELL UINT32_MAX               /* a re-armed periodic's watcher first */

/* A Timeout: its slot number (and, once it ended, how: END_* << the number's
 * bits), its generation, and once it ended its deadline then (on the
 * timer's clock; while it lives the slot has it). */
typedef struct hwt_handle {
  uint32_t slot;
  uint32_t gen;
  double ended_at;              /* its deadline, once it ended */
} hwt_handle;

/* What a take or a finish tells Lua besides its result: the slot it
 * released (0: none), how that one ended and its deadline, and the call
 * shape of the slot it took. */
typedef struct hwt_step {
  uint32_t released;
  int32_t end_bits;
  double deadline;
  int32_t shape;
} hwt_step;

typedef struct ffi_drain {
  lhwt_queue *tm;               /* its queue userdata: user value 1 */
  uint64_t seq_limit;           /* a poll: what was scheduled before it began */
  uint64_t current_seq;         /* the current's seq when taken */
  uint64_t handed_seq;          /* a hand-off: its timeout's seq when handed */
  double taken;                 /* how many it took */
  uint32_t current;             /* the slot taken and not finished; 0: none */
  uint32_t handed, handed_gen;  /* a hand-off's slot until it starts */
  bool is_handoff;
} ffi_drain;

/* The declarations lua/hwt/jit.lua gives ffi.cdef, for the structs above
 * and the ABI below. */
static const char ffi_cdef[] =
    "typedef struct hwt_handle { uint32_t slot; uint32_t gen; double ended_at; } hwt_handle;\n"
    "typedef struct hwt_step { uint32_t released; int32_t end_bits; double deadline; int32_t shape; } hwt_step;\n"
    "typedef struct hwt_queue hwt_queue;\n"
    "typedef struct hwt_arena hwt_arena;\n"
    "typedef struct hwt_drain hwt_drain;\n"
    "typedef struct hwt_abi {\n"
    "  int32_t (*reserve)(hwt_queue *, hwt_handle *, int32_t shape);\n"
    "  int32_t (*arm)(hwt_queue *, uint32_t slot, double delay, double interval);\n"
    "  int32_t (*cancel)(hwt_arena *, hwt_handle *);\n"
    "  int32_t (*reset)(hwt_arena *, uint32_t slot, uint32_t gen, double delay);\n"
    "  int32_t (*state)(hwt_arena *, uint32_t slot, uint32_t gen);\n"
    "  double (*remaining)(hwt_arena *, uint32_t slot, uint32_t gen);\n"
    "  double (*deadline)(hwt_arena *, uint32_t slot, uint32_t gen);\n"
    "  int32_t (*kept)(hwt_arena *, uint32_t slot, uint32_t gen);\n"
    "  uint32_t (*take)(hwt_drain *, hwt_step *);\n"
    "  void (*finish)(hwt_drain *, hwt_step *);\n"
    "  uint32_t (*current)(hwt_drain *);\n"
    "  double (*taken)(hwt_drain *);\n"
    "} hwt_abi;\n";

/* ---- slots ---------------------------------------------------------------- */

static slot_arena *arena_of(const lhwt_queue *tm) { return tm->arena; }

static lhwt_queue *queue_of_owner(slot_owner *owner) {
  return (lhwt_queue *)(void *)((char *)owner - offsetof(lhwt_queue, owned));
}

/* The live slot (number, gen) whose queue is still there; else NULL (a
 * stale handle, or an orphan of a collected timer: both answer as ended). */
static slot *live_slot(slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = slot_find(a, number & SLOT_NUMBER_MAX, gen);
  if (!s || s->use != SLOT_LIVE || !slot_chunk_of(s)->record.owner) return NULL;
  return s;
}

static int end_bits(slot *s) {
  int bits = timeout_has_run(&s->node) ? END_RAN : 0;
  return timeout_ended_state(&s->node) == TIMEOUT_CANCELLED ? bits | END_CANCELLED : bits;
}

/* A timeout's deadline on its timer's clock, in seconds; math.huge for an
 * orphan, whose clock went with its timer. */
static double ended_deadline(slot *s) {
  slot_owner *owner = slot_chunk_of(s)->record.owner;
  uint64_t deadline_ns = timeout_ended_deadline(&s->node);
  if (!owner || deadline_ns == ENGINE_NEVER) return HUGE_VAL;
  return ns_to_seconds(queue_of_owner(owner)->epoch_ns + deadline_ns);
}

/* Releases a slot whose engine let go and that no drain holds; its number,
 * end bits and deadline into step (Lua clears its entries at once). */
static void release_into(slot_arena *a, slot *s, hwt_step *step) {
  step->released = slot_number(s);
  step->end_bits = end_bits(s);
  step->deadline = ended_deadline(s);
  slot_free(a, s);
}

/* What a handle records when its timeout ended. */
static void mark_ended(hwt_handle *h, const hwt_step *step) {
  h->slot = step->released | (uint32_t)step->end_bits << SLOT_NUMBER_BITS;
  h->ended_at = step->deadline;
}

/* ---- the ABI ---------------------------------------------------------------- */

/* A slot for a new timeout of tm, its number and generation written into h;
 * or -TQ_STOPPED, -TQ_NO_MEMORY. The Lua layer writes its entries, then
 * arms it. */
static int32_t ffi_reserve(lhwt_queue *tm, hwt_handle *h, int32_t shape) {
  if (!tm->initialized || tq_is_stopped(&tm->queue)) return -TQ_STOPPED;
  slot *s = slot_reserve(arena_of(tm), &tm->owned, &h->slot, &h->gen);
  if (!s) return -TQ_NO_MEMORY;
  s->shape = (uint8_t)shape;
  return (int32_t)h->slot;
}

static uint64_t delay_ns_of(double seconds) {
  return isinf(seconds) ? ENGINE_NEVER : seconds_to_ns(seconds);
}

/* Whether a timeout armed now falls due before what tm's watcher was told. */
static bool watcher_to_tell(lhwt_queue *tm, slot *s) {
  if (!tm->has_watcher) return false;
  uint64_t now_ns = tq_now_ns(&tm->queue);
  uint64_t due_at_ns = tq_due_at(&s->node);
  return (due_at_ns < now_ns ? now_ns : due_at_ns) < tm->told_due_ns;
}

/* Arms a reserved slot: TQ_OK (| ARM_TELL: call internal.tell), or the
 * refusal, with the slot released (Lua clears its entries). delay: seconds
 * (>= 0, or inf); interval: 0 for a one-shot, else the period, which is
 * also the first beat's delay (at least 1 ns, as the core's every()). */
static int32_t ffi_arm(lhwt_queue *tm, uint32_t number, double delay, double interval) {
  slot *s = slot_at(arena_of(tm), number);
  if (!s || s->use != SLOT_RESERVED) return TQ_STOPPED;
  uint64_t interval_ns = interval > 0 ? delay_ns_of(interval) : 0;
  if (interval > 0 && interval_ns == 0) interval_ns = 1;   /* below a nanosecond */
  uint64_t delay_ns = interval > 0 ? interval_ns : delay_ns_of(delay);   /* every(): its first beat */
  int result = tm->initialized ? tq_schedule(&tm->queue, &s->node, delay_ns, interval_ns) : TQ_STOPPED;
  if (result != TQ_OK) {
    slot_free(arena_of(tm), s);
    return result;
  }
  s->use = SLOT_LIVE;
  return watcher_to_tell(tm, s) ? TQ_OK | ARM_TELL : TQ_OK;
}

/* 0: not cancelled by this call; 1: cancelled, still held by a drain (its
 * finish releases it); 2: cancelled and released, h marked ended (Lua
 * clears the slot's entries). */
static int32_t ffi_cancel(slot_arena *a, hwt_handle *h) {
  slot *s = live_slot(a, h->slot, h->gen);
  if (!s || !tq_cancel(&s->node)) return 0;
  if (s->drains) return 1;
  hwt_step step;
  release_into(a, s, &step);
  mark_ended(h, &step);
  return 2;
}

/* TQ_OK (| ARM_TELL), TQ_FULL, TQ_STOPPED, or RESET_ENDED. delay < 0: the
 * timeout's own delay or interval. */
static int32_t ffi_reset(slot_arena *a, uint32_t number, uint32_t gen, double delay) {
  slot *s = live_slot(a, number, gen);
  if (!s) return RESET_ENDED;
  lhwt_queue *tm = queue_of_owner(slot_chunk_of(s)->record.owner);
  if (!tm->initialized) return TQ_STOPPED;
  uint64_t delay_ns = delay < 0 ? timeout_period_ns(&s->node) : delay_ns_of(delay);
  int result = tq_reset(&s->node, delay_ns);
  if (result != TQ_OK) return result;
  return watcher_to_tell(tm, s) ? TQ_OK | ARM_TELL : TQ_OK;
}

#define STATE_HAS_RUN 8                    /* or'ed into ffi_state's result */

/* The engine's state of a live timeout, | STATE_HAS_RUN once its task has
 * started since its arming; 0 when it ended. */
static int32_t ffi_state(slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = slot_find(a, number & SLOT_NUMBER_MAX, gen);
  if (!s || s->use != SLOT_LIVE) return 0;
  int32_t has_run = timeout_has_run(&s->node) ? STATE_HAS_RUN : 0;
  if (!slot_chunk_of(s)->record.owner) return TIMEOUT_CANCELLED | has_run;   /* its timer went */
  return timeout_state(&s->node) | has_run;
}

static double ffi_remaining(slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = live_slot(a, number, gen);
  return s ? ns_to_seconds(timeout_remaining(&s->node)) : 0;
}

/* Whether the timeout (number, gen) ended by a stop that handed it back,
 * and its slot is kept: its entries (its task) are still there. */
static int32_t ffi_kept(slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = slot_find(a, number & SLOT_NUMBER_MAX, gen);
  return s && s->use == SLOT_KEPT;
}

/* On the timer's clock; math.huge for never; NaN when it ended. */
static double ffi_deadline(slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = live_slot(a, number, gen);
  if (!s) return NAN;
  lhwt_queue *tm = queue_of_owner(slot_chunk_of(s)->record.owner);
  uint64_t deadline_ns = tq_deadline(&s->node);
  return deadline_ns == ENGINE_NEVER ? HUGE_VAL : ns_to_seconds(tm->epoch_ns + deadline_ns);
}


/* ---- draining --------------------------------------------------------------- */

static void hold_current(ffi_drain *d, slot *s) {
  d->current = slot_number(s);
  d->current_seq = timeout_seq(&s->node);
  d->taken++;
  if (s->drains < UINT16_MAX) s->drains++;     /* at the top it stays held until its timer goes */
}

/* Lets go of the drain's current slot: the slot, or NULL when none. */
static slot *drop_current(ffi_drain *d) {
  if (!d->current) return NULL;
  slot *s = slot_at(d->tm->arena, d->current);
  d->current = 0;
  if (!s) return NULL;                          /* the state closed: no slots left */
  if (s->drains < UINT16_MAX) s->drains--;
  return s;
}

/* After the engine's finish of s (still_pending: re-armed, or reset): its
 * release when nothing holds it any more. An orphan (its queue went) is
 * released without the engine. */
static void settle_finished(slot_arena *a, slot *s, bool still_pending, hwt_step *step) {
  if (!still_pending && s->drains == 0) release_into(a, s, step);
}

static bool is_orphan(slot *s) { return !slot_chunk_of(s)->record.owner; }

/* Finishes the current slot alone: tq_finish, then its release. Returns
 * whether a re-armed periodic's watcher must be told. */
static bool finish_current(ffi_drain *d, hwt_step *step) {
  uint64_t seq = d->current_seq;
  slot *s = drop_current(d);
  if (!s) return false;
  bool still_pending = !is_orphan(s) && tq_finish(&s->node, seq);
  settle_finished(d->tm->arena, s, still_pending, step);
  return still_pending && !is_orphan(s) && watcher_to_tell(d->tm, s);
}

/* A hand-off's one take: starts its handed timeout if it still waits. */
static uint32_t take_handed(ffi_drain *d) {
  uint32_t number = d->handed;
  d->handed = 0;
  slot *s = live_slot(d->tm->arena, number, d->handed_gen);
  if (!s || !tq_start(&s->node, d->handed_seq)) return 0;
  hold_current(d, s);
  return number;
}

/* The next timeout to run: its slot (its call's shape in step->shape), 0
 * when none is due, TAKE_TELL when the watcher must first hear of the
 * re-armed periodic it finished (step->shape: its slot; then take again).
 * Finishes the current one first; a slot that released goes to
 * step->released (else 0). */
static uint32_t ffi_take(ffi_drain *d, hwt_step *step) {
  lhwt_queue *tm = d->tm;
  step->released = 0;
  slot *next;
  if (d->is_handoff) {
    if (d->current) return 0;                     /* fn called again while its task runs */
    uint32_t number = d->handed ? take_handed(d) : 0;
    if (number) step->shape = slot_at(tm->arena, number)->shape;
    return number;
  }
  if (!d->seq_limit || !tm->initialized) {
    finish_current(d, step);
    return 0;
  }
  if (tm->has_watcher || !d->current) {
    uint32_t finished = d->current;
    if (finish_current(d, step)) {
      step->shape = (int32_t)finished;
      return TAKE_TELL;
    }
    next = (slot *)(void *)tq_pop_due(&tm->queue, d->seq_limit);
  } else {
    uint64_t seq = d->current_seq;
    slot *done = drop_current(d);
    bool done_pending = false;
    if (is_orphan(done)) next = (slot *)(void *)tq_pop_due(&tm->queue, d->seq_limit);
    else next = (slot *)(void *)tq_finish_and_pop(&done->node, seq, &done_pending, d->seq_limit);
    settle_finished(tm->arena, done, done_pending, step);
  }
  if (!next) return 0;
  hold_current(d, next);
  step->shape = next->shape;
  return d->current;
}

/* The end of a draining call (or of a failed batch): finishes the current. */
static void ffi_finish(ffi_drain *d, hwt_step *step) {
  step->released = 0;
  finish_current(d, step);
}

static uint32_t ffi_current(ffi_drain *d) { return d->current; }

static double ffi_taken(ffi_drain *d) { return d->taken; }


typedef struct hwt_abi {
  int32_t (*reserve)(lhwt_queue *, hwt_handle *, int32_t);
  int32_t (*arm)(lhwt_queue *, uint32_t, double, double);
  int32_t (*cancel)(slot_arena *, hwt_handle *);
  int32_t (*reset)(slot_arena *, uint32_t, uint32_t, double);
  int32_t (*state)(slot_arena *, uint32_t, uint32_t);
  double (*remaining)(slot_arena *, uint32_t, uint32_t);
  double (*deadline)(slot_arena *, uint32_t, uint32_t);
  int32_t (*kept)(slot_arena *, uint32_t, uint32_t);
  uint32_t (*take)(ffi_drain *, hwt_step *);
  void (*finish)(ffi_drain *, hwt_step *);
  uint32_t (*current)(ffi_drain *);
  double (*taken)(ffi_drain *);
} hwt_abi;

static const hwt_abi abi = {
  ffi_reserve, ffi_arm, ffi_cancel, ffi_reset, ffi_state, ffi_remaining, ffi_deadline, ffi_kept,
  ffi_take, ffi_finish, ffi_current, ffi_taken,
};

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
  lua_pushlightuserdata(L, (void *)(uintptr_t)&abi);
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
typedef int lhwt_ffi_absent;
#endif
