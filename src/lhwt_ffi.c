/*
 * lhwt_ffi.c — LuaJIT's binding of timeouts, the C ABI the FFI calls
 * (lua/hwt/jit.lua): reserve, arm, cancel, reset and the queries of a
 * timeout, and a drain's take and finish, none of which touches the Lua API.
 * The steps that need it (stop, timeouts(), a collected timer, a drain's
 * finalizer, a watcher's call) are lhwt_ffi_holds.c's. LuaJIT 2.1 only
 * (compat.h's COMPAT_FFI).
 *
 * LuaJIT's trace compiler cannot compile a call through the classic C API,
 * so there every schedule, cancel and take is an FFI call into this file,
 * and what Lua keeps of a timeout lives in plain tables indexed by its slot
 * (slot_arena.h): its Timeout (a cdata { slot, gen, ended_at }), its task
 * and its arguments. The Lua layer writes those entries before it arms the
 * slot, and clears them when an FFI call reports the slot released: at
 * once, before any Lua allocation, so no schedule can reuse the slot while
 * its entries hold the old timeout. A Timeout whose timeout ended records
 * how (RAN, CANCELLED) in the two bits above its slot number: its task and
 * arguments are let go then, so a task that refers to its own Timeout (a
 * closure, a connection holding it) is not kept alive by it.
 *
 * A slot is LIVE from its arming until the engine has let it go (cancelled,
 * run to its end, stopped) and no drain holds it (a task running, perhaps
 * suspended). A drain is a userdata (an ffi_drain) that the FFI converts to
 * its address: a poll's, reused by the timer's next poll, or a hand-off's
 * (poll(max, spawn)), made per hand-off.
 */
#include "lhwt.h"

#if COMPAT_FFI
#include "lhwt_ffi.h"

/* The declarations lua/hwt/jit.lua gives ffi.cdef, for the structs above
 * and the ABI below. */
const char ffi_cdef[] =
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

lhwt_queue *queue_of_owner(slot_owner *owner) {
  return (lhwt_queue *)(void *)((char *)owner - offsetof(lhwt_queue, owned));
}

/* The live slot (number, gen) whose queue is still there; else NULL (a
 * stale handle, or an orphan of a collected timer: both answer as ended). */
slot *live_slot(slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = slot_at(a, number & SLOT_NUMBER_MAX);
  if (!s) return NULL;
  /* Read before either is tested, so that in random order (a cancel's) the
   * misses on the slot and on its chunk's record overlap. */
  const slot_owner *owner = slot_chunk_of(s)->record.owner;
  bool live = s->gen == gen && s->use == SLOT_LIVE;
  return live && owner ? s : NULL;
}

int end_bits(slot *s) {
  int bits = timeout_has_run(&s->node) ? END_RAN : 0;
  return timeout_ended_state(&s->node) == TIMEOUT_CANCELLED ? bits | END_CANCELLED : bits;
}

/* A timeout's deadline on its timer's clock, in seconds; math.huge for an
 * orphan, whose clock went with its timer. */
double ended_deadline(slot *s) {
  slot_owner *owner = slot_chunk_of(s)->record.owner;
  uint64_t deadline_ns = timeout_ended_deadline(&s->node);
  if (!owner || deadline_ns == ENGINE_NEVER) return HUGE_VAL;
  return ns_to_seconds(queue_of_owner(owner)->epoch_ns + deadline_ns);
}

/* Releases a slot whose engine let go and that no drain holds; its number,
 * end bits and deadline into step (Lua clears its entries at once). */
void release_into(slot_arena *a, slot *s, hwt_step *step) {
  step->released = slot_number(s);
  step->end_bits = end_bits(s);
  step->deadline = ended_deadline(s);
  slot_free(a, s);
}

/* What a handle records when its timeout ended. */
void mark_ended(hwt_handle *h, const hwt_step *step) {
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
bool finish_current(ffi_drain *d, hwt_step *step) {
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


const hwt_abi ffi_abi_table = {
  ffi_reserve, ffi_arm, ffi_cancel, ffi_reset, ffi_state, ffi_remaining, ffi_deadline, ffi_kept,
  ffi_take, ffi_finish, ffi_current, ffi_taken,
};
#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_ffi_absent;
#endif
