/*
 * engine.h — what the binding may use of the engine: the functions and
 * constants below, each documented, and nothing else. No Lua here.
 *
 * The struct layouts at the end (timeout, timer_queue, tq_ended) are complete
 * only so that a caller can embed them in its own memory (the binding keeps a
 * timer_queue in its Timer's userdata, a timeout in each Timeout's, a
 * tq_ended on its stack). Their fields are the engine's: a caller reads them
 * through the accessors below (timeout_seq, tq_max_pending, ...), never
 * directly. The engine's own
 * layout and the calls between its files are in engine_internal.h; the
 * engine's files are engine.c (an engine: clock, registry, fork, worker),
 * timer_queue.c (the tq_* API), due_order.c and lateness.c.
 *
 * An engine owns one wheel, one mutex and (on the real clock) one worker
 * thread, started once a queue's fd is watched (tq_fd) and joined when its
 * last running queue stops. A timer_queue is one timer's view of an engine: its due timeouts in (deadline, seq) order, its counters,
 * its wake-ups (condition variable and fd). Several queues may share one
 * engine; each timeout belongs to exactly one queue.
 *
 * Ownership: the engine never allocates or frees a `timeout`. The caller
 * owns its memory and must keep it alive while it is pending, due or running
 * (tq_schedule .. the moment tq_cancel returns true, tq_finish returns false
 * or tq_stop hands it back). The engine stops touching a timeout at that
 * moment, with one exception: a periodic timeout cancelled while it runs
 * is let go when the thread running it has called tq_finish.
 *
 * Lifetime: tq_stop ends a queue (and joins the worker when no other queue
 * of the engine is running); every tq_* call stays valid on a stopped
 * queue until tq_destroy, which must not race with other calls on it;
 * after it, tq_* calls on q and its timeouts act as on a stopped queue.
 *
 * Time: nanoseconds since the engine's epoch (CLOCK_MONOTONIC at creation,
 * or 0 for a manual clock). Deadline ticks are rounded up, so nothing fires
 * early; delays are clamped to ENGINE_MAX_DELAY_NS; ENGINE_NEVER means never.
 * A manual clock's timeouts fall due at their exact deadline: the wheel
 * takes the tick its time lies in, and holds what falls due later in that
 * tick until the clock reaches it.
 *
 * Threads: every tq_* call may come from any thread; the mutex is held only
 * for list work (O(1) per timeout, plus sorting the timeouts that fall due
 * in the same tick), never while sleeping or while a task runs.
 *
 * fork(): in the child, an engine forgets its worker (there is none) and
 * starts a new one with the next timeout; nothing waits for the parent's.
 */
#ifndef HWT_ENGINE_H
#define HWT_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lateness.h"
#include "wheel.h"

#define ENGINE_NEVER UINT64_MAX
#define ENGINE_MAX_DELAY_NS (UINT64_C(1) << 62)    /* ~146 years */
#define ENGINE_TICK_MIN_NS UINT64_C(1000)
#define ENGINE_WHEEL_SIZE_MAX WHEEL_SIZE_MAX       /* engine_new's largest wheel_size */

typedef struct engine engine;             /* opaque */
typedef struct timer_queue timer_queue;   /* embeddable: layout at the end */
typedef struct timeout timeout;           /* embeddable: layout at the end */
typedef struct tq_ended tq_ended;         /* tq_stop's result: see there */

enum timeout_state {
  TIMEOUT_PENDING = 1,   /* in the wheel (or waiting for ever) */
  TIMEOUT_DUE,           /* in its queue's due list, waiting for a poll */
  TIMEOUT_RUNNING,       /* handed to the caller by tq_pop_due or tq_start */
  TIMEOUT_DONE,          /* ran (a periodic one: its series ended) */
  TIMEOUT_CANCELLED,
  TIMEOUT_HANDED         /* taken by tq_hand_due, not started: still pending */
};

enum tq_result { TQ_OK = 0, TQ_STOPPED, TQ_FULL, TQ_NO_THREAD, TQ_NO_MEMORY };

/* What tq_get_stats reports. */
typedef struct tq_stats {
  uint64_t pending, due, fired, cancelled;
  uint64_t ticks;                         /* ticks passed since tq_init */
  uint64_t late_max_ns;                   /* largest start - deadline */
  uint64_t worker_wakeups;                /* of the engine's worker */
} tq_stats;

/* ---- engines ----------------------------------------------------------- */

/* A new engine of its own: ticks of tick_ns (at least ENGINE_TICK_MIN_NS),
 * a wheel of wheel_size slots (1..ENGINE_WHEEL_SIZE_MAX, rounded up to a
 * power of two), the real clock or a manual one. NULL when memory is short.
 * The creator holds one reference. */
engine *engine_new(uint64_t tick_ns, uint32_t wheel_size, bool manual_clock);
/* The process's shared real-clock engine for these settings (created on
 * first use), with one more reference for the caller. Timers that use it
 * share its worker thread, which runs while any of its queues is running.
 * NULL when memory is short. */
engine *engine_acquire_shared(uint64_t tick_ns, uint32_t wheel_size);
/* Drops a reference; the last one joins the worker and frees the engine. */
void engine_release(engine *eng);
/* Nanoseconds since the engine's epoch: CLOCK_MONOTONIC since creation on
 * the real clock, the manual clock's time otherwise. */
uint64_t engine_now(engine *eng);
/* The wheel's slots: wheel_size as rounded up by engine_new. */
uint32_t engine_wheel_size(const engine *eng);
/* Manual clock only: moves time forward by delta_ns, up to
 * ENGINE_MAX_DELAY_NS in all, and brings the wheel up to the new time. */
void engine_advance_manual(engine *eng, uint64_t delta_ns);
/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t engine_monotonic_ns(void);
/* CLOCK_MONOTONIC at the engine's time 0 (0 for a manual clock). */
uint64_t engine_epoch_ns(const engine *eng);

/* ---- timer queues: lifetime -------------------------------------------- */

/* Attaches q (the caller's memory) to eng, taking a reference. max_pending:
 * the most timeouts pending at once (0: no limit). Returns TQ_OK or
 * TQ_NO_MEMORY. */
int tq_init(timer_queue *q, engine *eng, uint64_t max_pending);
/* Stops q if needed (as tq_stop with nothing held) and frees what it holds;
 * q's memory stays the caller's, and its timeouts may no longer be passed to
 * the engine. */
void tq_destroy(timer_queue *q);

/* ---- arming ------------------------------------------------------------ */

/* Arms t (the caller's memory) on q to fall due delay_ns from now
 * (ENGINE_NEVER: never), then every interval_ns (0: once). TQ_OK, TQ_FULL
 * at max_pending, TQ_STOPPED once q stopped, TQ_NO_THREAD when the worker
 * thread q's watched fd needs cannot start. */
int tq_schedule(timer_queue *q, timeout *t, uint64_t delay_ns, uint64_t interval_ns);
/* true if this call cancelled t: its task will not start again. */
bool tq_cancel(timeout *t);
/* Re-arms t, in whatever state, to fall due delay_ns from now, with a new
 * seq: it is pending again (counted by tq_pending, returned by tq_stop as
 * never run), a hand-off of it is void, and a run of it that goes on is no
 * longer finished by tq_finish. A periodic one beats every period from the
 * new deadline. O(1), no allocation. TQ_FULL only when t was not pending and
 * the queue is at max_pending; TQ_STOPPED once q stopped. */
int tq_reset(timeout *t, uint64_t delay_ns);

/* ---- polling ----------------------------------------------------------- */

/* A poll: tq_poll_begin brings the wheel up to now and returns the limit to
 * pass to tq_pop_due, which hands out due timeouts scheduled before the poll
 * began (so a task's own new timeouts wait for the next poll); 0, which
 * hands out nothing, when nothing is due then or q is stopped. tq_pop_due
 * returns NULL when it hands out nothing more. The caller runs the task,
 * then calls tq_finish(t, seq) with timeout_seq(t) as it was popped, which
 * re-arms a periodic timeout and returns true if t is still pending (the
 * caller must keep it alive). If t was reset meanwhile, tq_finish only says
 * whether it is still pending. */
uint64_t tq_poll_begin(timer_queue *q);
timeout *tq_pop_due(timer_queue *q, uint64_t seq_limit);
bool tq_finish(timeout *t, uint64_t seq);
/* tq_finish(done, done_seq), its result in *done_held, then tq_pop_due of
 * done's queue: one lock round-trip for the step from one task to the next. */
timeout *tq_finish_and_pop(timeout *done, uint64_t done_seq, bool *done_held, uint64_t seq_limit);

/* A poll in two steps, for callers that start each task later, elsewhere (a
 * coroutine of its own): tq_hand_due takes the next due timeout as
 * tq_pop_due does but leaves it pending (HANDED: cancellable, ended by
 * tq_stop, not in the due list); tq_start(t, seq) then makes it RUNNING, as
 * tq_pop_due would have, if it is still HANDED under that seq
 * (timeout_seq(t) as it was handed), and returns false otherwise: it was
 * cancelled, stopped or re-armed meanwhile. tq_unhand(t, seq) puts a HANDED
 * timeout back in its queue's due list (the hand-off failed). */
timeout *tq_hand_due(timer_queue *q, uint64_t seq_limit);
bool tq_start(timeout *t, uint64_t seq);
void tq_unhand(timeout *t, uint64_t seq);

/* Up to `most` of q's due timeouts, in the order polls will take them, into
 * ahead[]; returns how many: none when more than max_due are due (the walk
 * reads one timeout after another, and those of a long due list have left
 * the cache). Only for reading ahead: each may be taken, cancelled or
 * re-armed as soon as this returns, and its memory stays valid only while
 * its owner keeps it. */
unsigned tq_due_ahead(timer_queue *q, timeout **ahead, unsigned most, uint64_t max_due);

/* ---- waiting ----------------------------------------------------------- */

/* Blocks until a timeout is due, q stops or timeout_ns pass. true if one is
 * due. With ENGINE_NEVER (no limit) it returns false at once when none can
 * fall due: nothing pending but never-firing ones or a periodic that runs. */
bool tq_wait(timer_queue *q, uint64_t timeout_ns);
/* The fd that is readable while q has due timeouts. It is kept so only from
 * the first call on: until someone watches it, arming and draining make no
 * system calls for it, and the worker thread does not drive the wheel for q
 * (q's own calls bring it up to date: tq_poll_begin, tq_wait, tq_next_due,
 * tq_get_stats, timeout_state). The engine's worker thread starts with the
 * first watched fd; -1 (nothing watched) when it cannot be started. */
int tq_fd(timer_queue *q);
/* Nanoseconds from now until a poll would run something of q: 0 when a
 * timeout is due; otherwise until the earliest armed one falls due (its
 * deadline, rounded up to the tick on the real clock); ENGINE_NEVER when
 * none can. Cost:
 * O(wheel_size / 64) for a queue alone on its engine; with a shared engine,
 * plus the other queues' timeouts that fall due first. */
uint64_t tq_next_due(timer_queue *q);

/* ---- the clock --------------------------------------------------------- */

/* Nanoseconds on the clock of q's engine (engine_now); 0 after tq_destroy. */
uint64_t tq_now_ns(timer_queue *q);
/* Manual clock only: engine_advance_manual on q's engine, whose other
 * queues see the time move too; nothing after tq_destroy. */
void tq_advance_manual(timer_queue *q, uint64_t delta_ns);
/* Manual clock only: moves time forward to the earliest deadline among q's
 * armed timeouts, or to until_ns if that comes first, and brings the wheel
 * up to it; never backwards, and not at all while one of q's is due or once
 * q stopped. Returns the clock; *due tells whether one of q's is due. */
uint64_t tq_step_manual(timer_queue *q, uint64_t until_ns, bool *due);

/* ---- stopping ---------------------------------------------------------- */

/* Ends q: every pending timeout is unlinked and put in `ended`, in
 * (deadline, seq) order: CANCELLED if it never ran (timeout_has_run is
 * false), DONE if it is a periodic one that ran. Later tq_schedule calls
 * return TQ_STOPPED. `ended` need not be initialised: tq_stop sets it (empty
 * when q was already stopped); it may be NULL when the caller does not need
 * them (then nothing is sorted).
 *
 * The engine keeps no list of a queue's timeouts (it would cost 16 bytes and
 * two cache misses per timeout), so the caller says which ones it holds:
 * `held` (any order, count entries) should be every timeout of q that the
 * engine has not let go. Those are found in O(count). Any the caller leaves
 * out are still found if they wait in the wheel or the due list, by a walk of
 * the engine's wheel: O(all pending timeouts of the engine). A never-firing
 * one left out stays PENDING but inert (tq_cancel returns false). */
void tq_stop(timer_queue *q, timeout *const *held, size_t count, tq_ended *ended);
/* The next of the timeouts tq_stop put in `ended`, in (deadline, seq) order;
 * NULL once all are taken. Each is the caller's again: the engine no longer
 * touches it. */
timeout *tq_ended_pop(tq_ended *ended);
/* Whether q stopped (true after tq_destroy). */
bool tq_is_stopped(timer_queue *q);

/* ---- reading a queue --------------------------------------------------- */

/* q's counters now (the wheel brought up to date first, while q runs). */
void tq_get_stats(timer_queue *q, tq_stats *out);
/* q's timeouts not yet ended: armed, due, handed, or periodic and running. */
uint64_t tq_pending(timer_queue *q);
/* Keeps, of the `count` timeouts at `held`, those of q still pending (as
 * tq_pending counts them), in (deadline, seq) order, and sets *kept to how
 * many. Only the thread that owns q's timeouts may call it. TQ_OK, or
 * TQ_NO_MEMORY (for the sort). */
int tq_select_pending(timer_queue *q, timeout **held, size_t count, size_t *kept);
/* Nearest-rank percentile (1..100) of the lateness histogram, in ns: the
 * middle of its bucket (0 for exactly 0); 0 when no task has started. */
uint64_t tq_late_percentile(timer_queue *q, unsigned percent);
/* The max_pending q was made with (0: unlimited). */
static inline uint64_t tq_max_pending(const timer_queue *q);

/* ---- reading a timeout ------------------------------------------------- */

/* When t falls due, in nanoseconds of the engine's clock: while armed, its
 * deadline (rounded up to the tick on the real clock); 0 once due;
 * ENGINE_NEVER otherwise. */
uint64_t tq_due_at(timeout *t);
/* t's deadline on the engine's clock (ENGINE_NEVER: never). */
uint64_t tq_deadline(timeout *t);
/* Nanoseconds until t is due: 0 once due, run or cancelled. */
uint64_t timeout_remaining(timeout *t);
/* t's state now: the wheel is brought up to date first, so that a timeout
 * past its deadline reads TIMEOUT_DUE even on a queue nobody watches (a
 * clock read while t is pending). */
int timeout_state(timeout *t);
/* timeout_state(t) == TIMEOUT_CANCELLED, without the clock read. */
bool timeout_cancelled(timeout *t);

/* What a timeout's owner reads of it without the lock (inline: plain reads).
 * Each changes only through the owner's own calls (tq_schedule, tq_reset,
 * tq_pop_due, tq_start, tq_finish), never on the engine's worker. */
/* The queue t was last scheduled on. */
static inline timer_queue *timeout_queue(const timeout *t);
/* t's seq now: what tq_finish, tq_start and tq_unhand take, read as
 * tq_pop_due or tq_hand_due hands t out; tq_reset and a periodic's tq_finish
 * give it a new one. */
static inline uint64_t timeout_seq(const timeout *t);
/* A periodic timeout's interval, a one-shot's delay: what a reset re-arms
 * with when given no other delay. */
static inline uint64_t timeout_period_ns(const timeout *t);
/* Whether t's task has started since its last tq_schedule or tq_reset. */
static inline bool timeout_has_run(const timeout *t);
/* t's state once the engine let go of it (tq_cancel returned true, tq_finish
 * false, or tq_stop ended it): TIMEOUT_DONE or TIMEOUT_CANCELLED, which no
 * longer changes, so it is read without the lock. */
static inline int timeout_ended_state(const timeout *t);
/* Its deadline then (tq_deadline without the lock). */
static inline uint64_t timeout_ended_deadline(const timeout *t);

/* ---- layouts: for embedding only; the fields are the engine's ------------ */

/* 56 B, so that the binding's Timeout, 8 B more, fits in 64: the three
 * small fields are the node's owner bytes, by name. */
struct timeout {
  union {
    wheel_node link;                      /* wheel slot, or owner's due list */
    struct {
      unsigned char link_fields[offsetof(wheel_node, owner_bytes)];
      uint8_t state;                      /* enum timeout_state */
      bool has_run;
      bool periodic;
    };
  };
  timer_queue *owner;
  uint64_t deadline_ns;                   /* ENGINE_NEVER: never fires */
  uint64_t seq;                           /* ties between equal deadlines */
  uint64_t period_ns;                     /* a periodic's interval, a one-shot's
                                             delay: what a reset re-arms with */
};
_Static_assert(offsetof(timeout, periodic) < sizeof(wheel_node), "flags within the node");

struct timer_queue {
  engine *eng;                            /* held until tq_destroy */
  wheel_list due;
  pthread_cond_t due_cond;
  int wake_read_fd, wake_write_fd;        /* one eventfd, or a pipe */
  bool wake_fd_watched;                   /* tq_fd was called: keep it current */
  bool wake_fd_readable;
  bool stopped;
  unsigned waiters;                       /* threads in tq_wait */
  uint64_t waiter_wake_ns;                /* when the first of them wakes */
  uint64_t armed;                         /* its timeouts in the wheel or due */
  uint64_t first_tick;                    /* the wheel's tick at tq_init */
  uint64_t max_pending;                   /* 0: unlimited */
  uint64_t admit_below;                   /* a schedule is refused once pending
                                             reaches it: max_pending, or
                                             UINT64_MAX; 0 once stopped */
  tq_stats stats;
  late_histogram lateness;
};

struct tq_ended {
  wheel_list list;                        /* linked through the timeouts */
};

static inline uint64_t tq_max_pending(const timer_queue *q) { return q->max_pending; }
static inline timer_queue *timeout_queue(const timeout *t) { return t->owner; }
static inline uint64_t timeout_seq(const timeout *t) { return t->seq; }
static inline uint64_t timeout_period_ns(const timeout *t) { return t->period_ns; }
static inline bool timeout_has_run(const timeout *t) { return t->has_run; }
static inline int timeout_ended_state(const timeout *t) { return t->state; }
static inline uint64_t timeout_ended_deadline(const timeout *t) { return t->deadline_ns; }

#endif
