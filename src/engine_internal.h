/*
 * engine_internal.h — what the engine's own files share and the binding
 * does not use: the engine's layout (struct engine), the clock and the tick
 * arithmetic (inline: the tq_* calls use them on every schedule and task),
 * and the calls between engine.c and timer_queue.c.
 *
 * Everything that touches the wheel, a due list or a timeout's state does so
 * under eng->lock; the `_locked` suffix marks the functions that expect it
 * held. A file that includes this header defines _GNU_SOURCE (or
 * _POSIX_C_SOURCE) first, for clock_gettime.
 */
#ifndef HWT_ENGINE_INTERNAL_H
#define HWT_ENGINE_INTERNAL_H

#include <time.h>

#include "due_order.h"
#include "engine.h"

#define NS_PER_SEC UINT64_C(1000000000)

struct engine {
  pthread_mutex_t lock;
  pthread_cond_t worker_cond;
  pthread_t worker;
  bool worker_started;
  bool stopping;
  bool joining;                 /* a thread is in stop_worker's join */
  bool manual_clock;
  bool shared;                  /* found by engine_acquire_shared */
  uint64_t tick_ns;
  uint64_t tick_reciprocal;     /* ticks_in's multiplier and shift */
  unsigned tick_shift;
  uint64_t epoch_ns;            /* CLOCK_MONOTONIC at creation */
  uint64_t manual_now_ns;
  uint64_t next_seq;
  uint64_t worker_wake_ns;      /* when the worker means to wake next */
  unsigned watched_queues;      /* running queues whose fd is watched: the
                                   worker drives the wheel only for them */
  uint64_t worker_wakeups;
  /* A manual clock's timeouts whose deadline lies in the tick the wheel has
   * reached but after now: held here, in (deadline, seq) order, so that each
   * falls due at its exact deadline, not at the end of its tick. */
  wheel_list held;
  due_entry *sort_scratch;          /* collect_locked's sort buffers: */
  due_entry *sorted;                /* a batch, then the batch in order */
  size_t sort_scratch_size;
  size_t *bucket_ends;                     /* DUE_BUCKETS_MAX + 1 of them */
  unsigned refs;                /* the creator's and each queue's, until destroyed */
  unsigned running_queues;      /* queues not yet stopped: the worker's users */
  struct engine *fork_next, *fork_prev;      /* all engines (fork, sharing) */
  wheel wheel;
};

/* ---- clock (engine.c) ------------------------------------------------- */

static inline uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* engine_now. */
static inline uint64_t clock_now_ns(const engine *eng) {
  return eng->manual_clock ? eng->manual_now_ns
                           : monotonic_ns() - eng->epoch_ns;
}

static inline uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The CLOCK_MONOTONIC time at the engine's at_ns, for a timed wait. */
struct timespec monotonic_timespec(engine *eng, uint64_t at_ns);
/* A condition variable that times its waits on CLOCK_MONOTONIC. */
int init_monotonic_cond(pthread_cond_t *cond);

/* ---- ticks (the reciprocal is made by engine.c's set_tick) -------------- */

#ifdef __SIZEOF_INT128__
__extension__ typedef unsigned __int128 uint128;

/* ns / tick_ns, for ns < 2^63. */
static inline uint64_t ticks_in(const engine *eng, uint64_t ns) {
  return (uint64_t)(((uint128)eng->tick_reciprocal * ns) >> 64) >> eng->tick_shift;
}
#else
static inline uint64_t ticks_in(const engine *eng, uint64_t ns) { return ns / eng->tick_ns; }
#endif

/* The first tick that starts at or after deadline_ns (at most 2^63). */
static inline uint64_t deadline_tick(const engine *eng, uint64_t deadline_ns) {
  return deadline_ns ? ticks_in(eng, deadline_ns - 1) + 1 : 0;
}

/* ---- the worker (engine.c) --------------------------------------------- */

int start_worker_locked(engine *eng);
/* Joins the worker. */
void stop_worker(engine *eng);

/* The start (start_worker_locked) is out of line: a schedule only reads these
 * three fields. */
static inline int ensure_worker_locked(engine *eng) {
  bool missing = !eng->worker_started && !eng->manual_clock && eng->watched_queues;
  return missing ? start_worker_locked(eng) : TQ_OK;
}

/* ---- collecting due timeouts (timer_queue.c) ---------------------------- */

/* Moves every timeout due by now_ns to its queue's due list, in order. */
void collect_locked(engine *eng, uint64_t now_ns);

#endif
