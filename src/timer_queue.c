/*
 * timer_queue.c — the timer queue API (tq_*): schedule, cancel, reset;
 * collecting due timeouts from the wheel into the queues' due lists (and a
 * manual clock's held list); the wake fd; stop, wait, next_due. See engine.h.
 */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stdlib.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#else
#include <fcntl.h>
#endif

/* ---- due lists ------------------------------------------------------- */

static void signal_due_locked(timer_queue *q) {
  if (q->wake_fd_watched && !q->wake_fd_readable) {
    static const uint64_t one = 1;
    ssize_t written = write(q->wake_write_fd, &one, sizeof one);
    (void)written;             /* EAGAIN: already readable, which is the aim */
    q->wake_fd_readable = true;
  }
  pthread_cond_broadcast(&q->due_cond);
}

static void clear_due_signal_locked(timer_queue *q) {
  if (q->wake_fd_readable) {
    uint64_t drained;
    while (read(q->wake_read_fd, &drained, sizeof drained) > 0 &&
           q->wake_read_fd != q->wake_write_fd) {}      /* one read empties an eventfd */
    q->wake_fd_readable = false;
  }
}

/* Due lists stay sorted; new entries almost always belong at the tail. */
static void make_due_locked(timeout *t) {
  timer_queue *q = t->owner;
  wheel_node *pos = q->due.tail;
  while (pos && due_before(t, timeout_of(pos))) pos = pos->prev;
  wheel_list_insert_after(&q->due, pos, &t->link);
  t->state = TIMEOUT_DUE;
  if (q->stats.due++ == 0) signal_due_locked(q);
}

static void unlink_due_locked(timeout *t) {
  timer_queue *q = t->owner;
  wheel_list_remove(&q->due, &t->link);
  if (--q->stats.due == 0) clear_due_signal_locked(q);
}

/* ---- arming: into the wheel, a manual clock's held list or a due list ---- */

/* link.level of a pending timeout outside the wheel: set whenever it is
 * armed, so that a cancel never trusts a level left from an earlier arming. */
#define HELD_LEVEL UINT8_MAX            /* in eng->held */
#define NEVER_LEVEL (UINT8_MAX - 1)     /* never fires: in no list */

static void hold_locked(engine *eng, timeout *t) {
  wheel_node *pos = eng->held.tail;
  while (pos && due_before(t, timeout_of(pos))) pos = pos->prev;
  wheel_list_insert_after(&eng->held, pos, &t->link);
  t->link.level = HELD_LEVEL;
}

/* A timeout the wheel has let go of (its tick is reached): due, or on a
 * manual clock held until its exact deadline. */
static void settle_locked(engine *eng, timeout *t, uint64_t now_ns) {
  if (t->deadline_ns > now_ns) hold_locked(eng, t);
  else make_due_locked(t);
}

static void arm_locked(engine *eng, timeout *t) {
  timer_queue *q = t->owner;
  t->state = TIMEOUT_PENDING;
  if (t->deadline_ns == ENGINE_NEVER) {
    t->link.level = NEVER_LEVEL;
    return;
  }
  q->armed++;
  uint64_t tick = deadline_tick(eng, t->deadline_ns);
  if (!wheel_insert(&eng->wheel, &t->link, tick)) {
    if (eng->manual_clock) settle_locked(eng, t, eng->manual_now_ns);
    else make_due_locked(t);
    return;
  }
  uint64_t fires_at_ns = tick * eng->tick_ns;
  if (q->waiters && fires_at_ns < q->waiter_wake_ns) pthread_cond_broadcast(&q->due_cond);
  if (eng->watched_queues && fires_at_ns < eng->worker_wake_ns) {
    eng->worker_wake_ns = fires_at_ns;
    pthread_cond_signal(&eng->worker_cond);
  }
}

/* Still the engine's: pending, due, handed, or a periodic one whose task
 * runs. */
static bool still_held_locked(const timeout *t) {
  return t->state == TIMEOUT_PENDING || t->state == TIMEOUT_DUE || t->state == TIMEOUT_HANDED ||
         (t->state == TIMEOUT_RUNNING && t->periodic);
}

/* Pending in the wheel itself, not held or never firing. */
static bool in_wheel_locked(const timeout *t) {
  return t->state == TIMEOUT_PENDING && t->link.level < NEVER_LEVEL;
}

static void disarm_locked(engine *eng, timeout *t) {
  if (t->state == TIMEOUT_DUE) unlink_due_locked(t);
  else if (in_wheel_locked(t)) wheel_remove(&eng->wheel, &t->link);
  else if (t->state == TIMEOUT_PENDING && t->link.level == HELD_LEVEL)
    wheel_list_remove(&eng->held, &t->link);
  else return;
  t->owner->armed--;
}

/* ---- collecting: the wheel's due timeouts, in order, to their due lists -- */

#define SORT_BUFFER_MIN 64                        /* entries */

/* Room for at least `count` entries in both buffers, doubling: they are
 * grown one entry at a time as a batch is taken from the wheel. */
static bool grow_sort_buffers(engine *eng, size_t count) {
  if (!eng->bucket_ends) {
    eng->bucket_ends = malloc((DUE_BUCKETS_MAX + 1) * sizeof *eng->bucket_ends);
    if (!eng->bucket_ends) return false;
  }
  size_t size = eng->sort_scratch_size ? 2 * eng->sort_scratch_size : SORT_BUFFER_MIN;
  if (size < count) size = count;
  due_entry *scratch = realloc(eng->sort_scratch, size * sizeof *scratch);
  if (!scratch) return false;
  eng->sort_scratch = scratch;
  due_entry *sorted = realloc(eng->sorted, size * sizeof *sorted);
  if (!sorted) return false;
  eng->sorted = sorted;
  eng->sort_scratch_size = size;
  return true;
}

/* A burst's buffers are not kept: 10^6 timeouts due in one tick would
 * otherwise hold 48 MB for the engine's life. */
#define SORT_KEPT_MAX (1u << 16)

static void release_large_sort_buffers(engine *eng) {
  if (eng->sort_scratch_size <= SORT_KEPT_MAX) return;
  free(eng->sort_scratch);
  free(eng->sorted);
  eng->sort_scratch = eng->sorted = NULL;
  eng->sort_scratch_size = 0;
}

/* One wheel event's due timeouts, as the wheel hands them over: entries in
 * eng->sort_scratch, copied while the wheel's walk has the node in the
 * cache; a list instead once memory for the entries runs short. */
typedef struct due_batch {
  engine *eng;
  size_t count;
  bool as_list;
  wheel_list list;
} due_batch;

static void switch_to_list(due_batch *batch) {
  for (size_t i = 0; i < batch->count; i++)
    wheel_list_push_back(&batch->list, &batch->eng->sort_scratch[i].t->link);
  batch->as_list = true;
}

static void take_due_node(wheel_node *n, void *ctx) {
  due_batch *batch = ctx;
  engine *eng = batch->eng;
  if (!batch->as_list && batch->count == eng->sort_scratch_size &&
      !grow_sort_buffers(eng, batch->count + 1))
    switch_to_list(batch);
  if (batch->as_list) wheel_list_push_back(&batch->list, n);
  else eng->sort_scratch[batch->count] = due_entry_of(timeout_of(n));
  batch->count++;
}

static void release_held_locked(engine *eng, uint64_t now_ns) {
  while (eng->held.head && timeout_of(eng->held.head)->deadline_ns <= now_ns)
    make_due_locked(timeout_of(wheel_list_pop_front(&eng->held)));
}

/* Settling follows deadline order, not memory order: a prefetch this far
 * ahead overlaps the nodes' cache misses. */
#define SETTLE_PREFETCH_AHEAD 8

/* Settles one event's batch in (deadline, seq) order. */
static void settle_batch_locked(engine *eng, due_batch *batch, uint64_t now_ns) {
  size_t count = batch->count;
  if (!batch->as_list) {
    const due_entry *in_order =
        count > 1 ? due_order_batch(eng->sort_scratch, eng->sorted, count, eng->bucket_ends)
                  : eng->sort_scratch;
    for (size_t i = 0; i < count; i++) {
      if (i + SETTLE_PREFETCH_AHEAD < count)
        __builtin_prefetch(in_order[i + SETTLE_PREFETCH_AHEAD].t, 1);
      settle_locked(eng, in_order[i].t, now_ns);
    }
    release_large_sort_buffers(eng);
    return;
  }
  due_order_list_merge(&batch->list);              /* no memory for the array */
  wheel_node *n;
  while ((n = wheel_list_pop_front(&batch->list))) settle_locked(eng, timeout_of(n), now_ns);
}

/* Moves every timeout due by now_ns to its queue's due list, in order. The
 * real clock takes the ticks that have ended; a manual one also the tick
 * now_ns lies in, holding what is due later in it (exact deadlines). One
 * wheel event at a time: a batch is sorted and settled while the advance
 * has just brought its nodes into the cache, even when many ticks have
 * passed since the last collect (a long-unpolled queue nobody watches). */
void collect_locked(engine *eng, uint64_t now_ns) {
  if (eng->manual_clock) release_held_locked(eng, now_ns);
  uint64_t now_tick = eng->manual_clock ? deadline_tick(eng, now_ns) : ticks_in(eng, now_ns);
  for (;;) {
    due_batch batch = {.eng = eng};
    if (!wheel_advance_event_each(&eng->wheel, now_tick, take_due_node, &batch)) break;
    settle_batch_locked(eng, &batch, now_ns);
  }
  if (now_tick > eng->wheel.now_tick) wheel_advance(&eng->wheel, now_tick, &(wheel_list){0});
}

/* ---- the tq_* calls --------------------------------------------------- */

static int open_wake_fd(timer_queue *q) {
#ifdef __linux__
  q->wake_read_fd = q->wake_write_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return q->wake_read_fd < 0 ? -1 : 0;
#else
  int fds[2];
  if (pipe(fds)) return -1;
  for (int i = 0; i < 2; i++) {
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  }
  q->wake_read_fd = fds[0];
  q->wake_write_fd = fds[1];
  return 0;
#endif
}

static void close_wake_fd(timer_queue *q) {
  if (q->wake_write_fd != q->wake_read_fd) close(q->wake_write_fd);
  close(q->wake_read_fd);
}

int tq_init(timer_queue *q, engine *eng, uint64_t max_pending) {
  *q = (timer_queue){.max_pending = max_pending,
                     .admit_below = max_pending ? max_pending : UINT64_MAX,
                     .waiter_wake_ns = ENGINE_NEVER};
  if (open_wake_fd(q)) return TQ_NO_MEMORY;
  if (init_monotonic_cond(&q->due_cond)) {
    close_wake_fd(q);
    return TQ_NO_MEMORY;
  }
  pthread_mutex_lock(&eng->lock);
  eng->refs++;
  eng->running_queues++;
  collect_locked(eng, clock_now_ns(eng));          /* a shared wheel may lag */
  q->first_tick = eng->wheel.now_tick;
  pthread_mutex_unlock(&eng->lock);
  q->eng = eng;
  return TQ_OK;
}

void tq_destroy(timer_queue *q) {
  if (!q->eng) return;
  tq_stop(q, NULL, 0, NULL);
  engine_release(q->eng);
  q->eng = NULL;
  pthread_cond_destroy(&q->due_cond);
  close_wake_fd(q);
}

static uint64_t deadline_after(uint64_t now_ns, uint64_t delay_ns) {
  if (delay_ns == ENGINE_NEVER) return ENGINE_NEVER;
  if (delay_ns > ENGINE_MAX_DELAY_NS) delay_ns = ENGINE_MAX_DELAY_NS;
  return now_ns + delay_ns;
}

/* Locks q's engine; NULL (nothing locked) once tq_destroy ran. */
static engine *lock_engine(timer_queue *q) {
  engine *eng = q->eng;
  if (eng) pthread_mutex_lock(&eng->lock);
  return eng;
}

bool tq_is_stopped(timer_queue *q) {
  engine *eng = lock_engine(q);
  if (!eng) return true;
  bool stopped = q->stopped;
  pthread_mutex_unlock(&eng->lock);
  return stopped;
}

int tq_schedule(timer_queue *q, timeout *t, uint64_t delay_ns, uint64_t interval_ns) {
  engine *eng = q->eng;
  if (!eng) return TQ_STOPPED;
  uint64_t now_ns = clock_now_ns(eng);            /* outside the lock */
  pthread_mutex_lock(&eng->lock);
  int result = TQ_OK;
  if (q->stats.pending >= q->admit_below) result = q->stopped ? TQ_STOPPED : TQ_FULL;
  else result = ensure_worker_locked(eng);
  if (result == TQ_OK) {
    t->owner = q;
    t->deadline_ns = deadline_after(now_ns, delay_ns);
    t->periodic = interval_ns != 0;
    t->period_ns = t->periodic ? interval_ns : delay_ns;
    t->seq = eng->next_seq++;
    t->has_run = false;
    q->stats.pending++;
    arm_locked(eng, t);
  }
  pthread_mutex_unlock(&eng->lock);
  return result;
}

static void note_cancelled_locked(timer_queue *q, timeout *t) {
  q->stats.pending--;
  q->stats.cancelled++;
  t->state = TIMEOUT_CANCELLED;
}

/* A cancel of a timeout anywhere but in the wheel (due, handed, held, never
 * firing, a periodic one whose task runs), or of one that ran already or
 * whose queue stopped, which it refuses. It unlocks the engine that
 * tq_cancel locked: out of line and last, it leaves tq_cancel's case of the
 * wheel no register to save for it. */
__attribute__((noinline)) static bool cancel_elsewhere_and_unlock(timeout *t) {
  timer_queue *q = t->owner;
  bool cancellable = !q->stopped && still_held_locked(t);
  if (cancellable) {
    disarm_locked(q->eng, t);
    note_cancelled_locked(q, t);
  }
  pthread_mutex_unlock(&q->eng->lock);
  return cancellable;
}

/* Most cancels find their timeout in the wheel. That case is written out
 * here with as few stores as it can make (a saved register is one): in
 * random order a store costs a cancel about 3 ns, because the unlock waits
 * until every earlier store, the neighbours' missing ones too, has reached
 * the cache (bench/bench_engine.c's ref_cancel_wheel and
 * ref_cancel_wheel_counted measure it). */
bool tq_cancel(timeout *t) {
  engine *eng = t->owner->eng;
  if (!eng) return false;
  pthread_mutex_lock(&eng->lock);
  timer_queue *q = t->owner;
  if (!in_wheel_locked(t) || q->stopped) return cancel_elsewhere_and_unlock(t);
  q->armed--;
  note_cancelled_locked(q, t);
  wheel_remove(&q->eng->wheel, &t->link);
  pthread_mutex_unlock(&t->owner->eng->lock);
  return true;
}

uint64_t tq_poll_begin(timer_queue *q) {
  engine *eng = lock_engine(q);
  if (!eng) return 0;
  collect_locked(eng, clock_now_ns(eng));
  uint64_t seq_limit = q->stopped || !q->due.head ? 0 : eng->next_seq;
  pthread_mutex_unlock(&eng->lock);
  return seq_limit;
}

/* Takes the head of q's due list if it was scheduled before seq_limit. */
static timeout *take_due_locked(timer_queue *q, uint64_t seq_limit) {
  timeout *t = q->due.head ? timeout_of(q->due.head) : NULL;
  if (!t || t->seq >= seq_limit) return NULL;
  unlink_due_locked(t);
  q->armed--;
  /* The due list runs in deadline order, its nodes lie anywhere: the next
   * take will touch the node after the new head, so fetch it while the
   * caller runs this one's task. */
  if (q->due.head && q->due.head->next) __builtin_prefetch(q->due.head->next);
  return t;
}

static void record_lateness_locked(timer_queue *q, uint64_t late_ns) {
  if (late_ns > q->stats.late_max_ns) q->stats.late_max_ns = late_ns;
  late_record(&q->lateness, late_ns);
}

static void start_locked(engine *eng, timeout *t) {
  timer_queue *q = t->owner;
  t->state = TIMEOUT_RUNNING;
  t->has_run = true;
  q->stats.fired++;
  uint64_t now_ns = clock_now_ns(eng);
  record_lateness_locked(q, now_ns > t->deadline_ns ? now_ns - t->deadline_ns : 0);
  if (!t->periodic) q->stats.pending--;
}

static timeout *pop_due_locked(engine *eng, timer_queue *q, uint64_t seq_limit) {
  timeout *t = take_due_locked(q, seq_limit);
  if (t) start_locked(eng, t);
  return t;
}

timeout *tq_pop_due(timer_queue *q, uint64_t seq_limit) {
  engine *eng = lock_engine(q);
  if (!eng) return NULL;
  timeout *t = pop_due_locked(eng, q, seq_limit);
  pthread_mutex_unlock(&eng->lock);
  return t;
}

timeout *tq_hand_due(timer_queue *q, uint64_t seq_limit) {
  engine *eng = lock_engine(q);
  if (!eng) return NULL;
  timeout *t = take_due_locked(q, seq_limit);
  if (t) t->state = TIMEOUT_HANDED;
  pthread_mutex_unlock(&eng->lock);
  return t;
}

unsigned tq_due_ahead(timer_queue *q, timeout **ahead, unsigned most, uint64_t max_due) {
  engine *eng = lock_engine(q);
  if (!eng) return 0;
  unsigned n = 0;
  if (q->stats.due <= max_due)
    for (wheel_node *at = q->due.head; at && n < most; at = at->next) ahead[n++] = timeout_of(at);
  pthread_mutex_unlock(&eng->lock);
  return n;
}

static bool still_handed_locked(const timeout *t, uint64_t seq) {
  return t->state == TIMEOUT_HANDED && t->seq == seq && !t->owner->stopped;
}

bool tq_start(timeout *t, uint64_t seq) {
  engine *eng = lock_engine(t->owner);
  if (!eng) return false;
  bool handed = still_handed_locked(t, seq);
  if (handed) start_locked(eng, t);
  pthread_mutex_unlock(&eng->lock);
  return handed;
}

void tq_unhand(timeout *t, uint64_t seq) {
  engine *eng = lock_engine(t->owner);
  if (!eng) return;
  if (still_handed_locked(t, seq)) {
    t->owner->armed++;
    make_due_locked(t);
  }
  pthread_mutex_unlock(&eng->lock);
}

/* Fixed rate on the grid deadline + k * interval, skipping missed beats:
 * the first grid point strictly after now (and after the last deadline), so
 * that a late run never leaves its own next beat already due. */
static uint64_t next_beat(uint64_t last_deadline_ns, uint64_t interval_ns, uint64_t now_ns) {
  uint64_t beats = now_ns >= last_deadline_ns ? (now_ns - last_deadline_ns) / interval_ns + 1 : 1;
  if (beats > (ENGINE_MAX_DELAY_NS - 1) / interval_ns) return ENGINE_NEVER;
  return deadline_after(last_deadline_ns, beats * interval_ns);
}

static bool finish_locked(engine *eng, timeout *t, uint64_t seq) {
  if (t->seq != seq) return still_held_locked(t);  /* reset while it ran */
  if (t->state == TIMEOUT_RUNNING && t->periodic && !t->owner->stopped) {
    t->deadline_ns = next_beat(t->deadline_ns, t->period_ns, clock_now_ns(eng));
    t->seq = eng->next_seq++;
    arm_locked(eng, t);
    return true;
  }
  if (t->state == TIMEOUT_RUNNING) t->state = TIMEOUT_DONE;
  return false;
}

bool tq_finish(timeout *t, uint64_t seq) {
  engine *eng = lock_engine(t->owner);
  if (!eng) return false;
  bool held = finish_locked(eng, t, seq);
  pthread_mutex_unlock(&eng->lock);
  return held;
}

timeout *tq_finish_and_pop(timeout *done, uint64_t done_seq, bool *done_held, uint64_t seq_limit) {
  timer_queue *q = done->owner;
  engine *eng = lock_engine(q);
  *done_held = false;
  if (!eng) return NULL;
  *done_held = finish_locked(eng, done, done_seq);
  timeout *t = pop_due_locked(eng, q, seq_limit);
  pthread_mutex_unlock(&eng->lock);
  return t;
}

int tq_reset(timeout *t, uint64_t delay_ns) {
  timer_queue *q = t->owner;
  engine *eng = q->eng;
  if (!eng) return TQ_STOPPED;
  uint64_t now_ns = clock_now_ns(eng);            /* outside the lock */
  pthread_mutex_lock(&eng->lock);
  bool pending = still_held_locked(t);
  int result = TQ_OK;
  if (q->stopped) result = TQ_STOPPED;
  else if (!pending && q->stats.pending >= q->admit_below) result = TQ_FULL;
  else result = ensure_worker_locked(eng);
  if (result == TQ_OK) {
    disarm_locked(eng, t);
    if (!pending) q->stats.pending++;
    t->deadline_ns = deadline_after(now_ns, delay_ns);
    t->seq = eng->next_seq++;
    t->has_run = false;
    arm_locked(eng, t);
  }
  pthread_mutex_unlock(&eng->lock);
  return result;
}

/* stats.ticks: the ticks that have ended (a manual clock's wheel has also
 * reached the tick its time lies in). */
static uint64_t ticks_passed_locked(const engine *eng, const timer_queue *q) {
  uint64_t now_tick = eng->manual_clock ? ticks_in(eng, eng->manual_now_ns) : eng->wheel.now_tick;
  return now_tick - q->first_tick;
}

/* Marks an unlinked timeout of a stopping queue ended and appends it. */
static void mark_ended(timeout *t, wheel_list *ended) {
  if (t->has_run) {
    t->state = TIMEOUT_DONE;
  } else {
    t->state = TIMEOUT_CANCELLED;
    t->owner->stats.cancelled++;
  }
  if (ended) wheel_list_push_back(ended, &t->link);
}

static bool owned_by(const wheel_node *n, void *q) {
  return ((const timeout *)(const void *)n)->owner == q;
}

/* The timeouts of q that the caller did not hand to tq_stop: its due list,
 * then, only if some are still armed, a walk of the whole wheel. */
static void end_unheld_locked(engine *eng, timer_queue *q, wheel_list *ended) {
  wheel_node *n;
  while ((n = q->due.head)) {
    disarm_locked(eng, timeout_of(n));
    mark_ended(timeout_of(n), ended);
  }
  while ((n = eng->held.head)) {      /* a manual engine's: it has one queue */
    disarm_locked(eng, timeout_of(n));
    mark_ended(timeout_of(n), ended);
  }
  if (q->armed == 0) return;
  wheel_list found = {0};
  wheel_extract(&eng->wheel, owned_by, q, &found);
  while ((n = wheel_list_pop_front(&found))) {
    q->armed--;
    mark_ended(timeout_of(n), ended);
  }
}

void tq_stop(timer_queue *q, timeout *const *held, size_t count, tq_ended *ended_out) {
  wheel_list *ended = NULL;
  if (ended_out) {
    *ended_out = (tq_ended){0};
    ended = &ended_out->list;
  }
  engine *eng = lock_engine(q);
  if (!eng) return;
  if (q->stopped) {
    pthread_mutex_unlock(&eng->lock);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    timeout *t = held[i];
    if (t->owner != q || !still_held_locked(t)) continue;
    disarm_locked(eng, t);
    mark_ended(t, ended);
  }
  end_unheld_locked(eng, q, ended);
  q->stats.pending = 0;
  q->stats.ticks = ticks_passed_locked(eng, q);
  q->stopped = true;
  q->admit_below = 0;
  if (q->wake_fd_watched) eng->watched_queues--;
  bool last_user = --eng->running_queues == 0;
  pthread_cond_broadcast(&q->due_cond);
  pthread_mutex_unlock(&eng->lock);
  if (ended) due_order_list(ended);
  if (last_user) stop_worker(eng);
}

timeout *tq_ended_pop(tq_ended *ended) {
  wheel_node *n = wheel_list_pop_front(&ended->list);
  return n ? timeout_of(n) : NULL;
}

bool tq_wait(timer_queue *q, uint64_t timeout_ns) {
  engine *eng = lock_engine(q);
  if (!eng) return false;
  uint64_t now_ns = clock_now_ns(eng);
  uint64_t give_up_ns = saturating_add(now_ns, timeout_ns);
  q->waiters++;
  for (;;) {
    if (q->stopped) break;
    if (!eng->manual_clock) collect_locked(eng, now_ns);
    if (q->due.head || eng->manual_clock) break;
    if (timeout_ns == ENGINE_NEVER && q->armed == 0) break;
    if (now_ns >= give_up_ns) break;
    uint64_t wake_ns = give_up_ns, next_tick;
    if (wheel_next_event(&eng->wheel, &next_tick) && next_tick * eng->tick_ns < wake_ns)
      wake_ns = next_tick * eng->tick_ns;
    if (wake_ns < q->waiter_wake_ns) q->waiter_wake_ns = wake_ns;   /* see arm_locked */
    struct timespec until = monotonic_timespec(eng, wake_ns);
    pthread_cond_timedwait(&q->due_cond, &eng->lock, &until);
    now_ns = clock_now_ns(eng);
  }
  if (--q->waiters == 0) q->waiter_wake_ns = ENGINE_NEVER;
  bool due = q->due.head != NULL;
  pthread_mutex_unlock(&eng->lock);
  return due;
}

static uint64_t tick_start_ns(const engine *eng, uint64_t tick) {
  return tick > ENGINE_NEVER / eng->tick_ns ? ENGINE_NEVER : tick * eng->tick_ns;
}

struct earliest {
  const timer_queue *q;
  const timeout *first;
};

/* wheel_first_deadline shows it every node of the first slot that has one
 * of q's: it keeps the earliest by (deadline, seq). */
static bool note_earliest(const wheel_node *n, void *ctx) {
  struct earliest *e = ctx;
  const timeout *t = (const timeout *)(const void *)n;
  if (t->owner != e->q) return false;
  if (!e->first || due_before(t, e->first)) e->first = t;
  return true;
}

/* When q's earliest armed timeout (not due) falls due on the engine's
 * clock: the start of its deadline's tick, or on a manual clock its
 * deadline (held ones come before any in the wheel); ENGINE_NEVER if none. */
static uint64_t first_due_at_locked(engine *eng, timer_queue *q) {
  if (eng->held.head) return timeout_of(eng->held.head)->deadline_ns;
  struct earliest e = {q, NULL};
  uint64_t tick;
  if (!q->armed || !wheel_first_deadline(&eng->wheel, note_earliest, &e, &tick)) return ENGINE_NEVER;
  return eng->manual_clock ? e.first->deadline_ns : tick_start_ns(eng, tick);
}

uint64_t tq_next_due(timer_queue *q) {
  engine *eng = lock_engine(q);
  if (!eng) return ENGINE_NEVER;
  uint64_t now_ns = clock_now_ns(eng);
  collect_locked(eng, now_ns);
  uint64_t due_ns = ENGINE_NEVER;
  if (q->stopped) due_ns = ENGINE_NEVER;
  else if (q->due.head) due_ns = 0;
  else due_ns = first_due_at_locked(eng, q);
  pthread_mutex_unlock(&eng->lock);
  if (due_ns == ENGINE_NEVER) return ENGINE_NEVER;
  return due_ns > now_ns ? due_ns - now_ns : 0;
}

uint64_t tq_deadline(timeout *t) {
  engine *eng = lock_engine(t->owner);
  uint64_t deadline_ns = t->deadline_ns;
  if (eng) pthread_mutex_unlock(&eng->lock);
  return deadline_ns;
}

/* Deadlines and seqs change only on the thread that owns q's timeouts (the
 * caller), so they are sorted outside the lock. */
int tq_select_pending(timer_queue *q, timeout **held, size_t count, size_t *kept) {
  *kept = 0;
  engine *eng = lock_engine(q);
  if (!eng) return TQ_OK;
  for (size_t i = 0; i < count; i++)
    if (held[i]->owner == q && !q->stopped && still_held_locked(held[i])) held[(*kept)++] = held[i];
  pthread_mutex_unlock(&eng->lock);
  if (*kept < 2) return TQ_OK;
  due_entry *entries = malloc(*kept * sizeof *entries);
  if (!entries) return TQ_NO_MEMORY;
  for (size_t i = 0; i < *kept; i++)
    entries[i] = due_entry_of(held[i]);
  due_order_sort(entries, *kept);
  for (size_t i = 0; i < *kept; i++) held[i] = entries[i].t;
  free(entries);
  return TQ_OK;
}

uint64_t tq_step_manual(timer_queue *q, uint64_t until_ns, bool *due) {
  *due = false;
  engine *eng = lock_engine(q);
  if (!eng) return 0;
  if (!q->due.head && !q->stopped) {
    uint64_t first_ns = first_due_at_locked(eng, q);
    uint64_t to_ns = first_ns < until_ns ? first_ns : until_ns;
    if (to_ns > eng->manual_now_ns) {
      eng->manual_now_ns = to_ns > ENGINE_MAX_DELAY_NS ? ENGINE_MAX_DELAY_NS : to_ns;
      collect_locked(eng, eng->manual_now_ns);
    }
  }
  uint64_t now_ns = eng->manual_now_ns;
  *due = q->due.head != NULL && !q->stopped;
  pthread_mutex_unlock(&eng->lock);
  return now_ns;
}

uint64_t tq_late_percentile(timer_queue *q, unsigned percent) {
  engine *eng = lock_engine(q);
  uint64_t middle = late_percentile(&q->lateness, percent);
  if (eng) pthread_mutex_unlock(&eng->lock);
  return middle;
}

uint64_t tq_due_at(timeout *t) {
  engine *eng = lock_engine(t->owner);
  if (!eng) return ENGINE_NEVER;
  uint64_t due_at_ns = ENGINE_NEVER;
  if (t->state == TIMEOUT_DUE) due_at_ns = 0;
  else if (t->state == TIMEOUT_PENDING && eng->manual_clock)
    due_at_ns = t->deadline_ns;
  else if (t->state == TIMEOUT_PENDING && t->deadline_ns != ENGINE_NEVER)
    due_at_ns = tick_start_ns(eng, deadline_tick(eng, t->deadline_ns));
  pthread_mutex_unlock(&eng->lock);
  return due_at_ns;
}

/* From now on q's fd is kept current, and the worker (started now if need
 * be) drives the wheel for q. */
static int watch_fd_locked(engine *eng, timer_queue *q) {
  if (!q->stopped) {
    eng->watched_queues++;
    int result = ensure_worker_locked(eng);
    if (result != TQ_OK) {
      eng->watched_queues--;
      return result;
    }
  }
  q->wake_fd_watched = true;
  collect_locked(eng, clock_now_ns(eng));
  if (q->due.head) signal_due_locked(q);
  pthread_cond_signal(&eng->worker_cond);
  return TQ_OK;
}

int tq_fd(timer_queue *q) {
  engine *eng = lock_engine(q);
  if (!eng) return q->wake_read_fd;
  bool watched = q->wake_fd_watched || watch_fd_locked(eng, q) == TQ_OK;
  pthread_mutex_unlock(&eng->lock);
  return watched ? q->wake_read_fd : -1;
}

void tq_get_stats(timer_queue *q, tq_stats *out) {
  engine *eng = lock_engine(q);
  if (!eng) {
    *out = q->stats;
    return;
  }
  if (!q->stopped) {
    collect_locked(eng, clock_now_ns(eng));
    q->stats.ticks = ticks_passed_locked(eng, q);
  }
  q->stats.worker_wakeups = eng->worker_wakeups;
  *out = q->stats;
  pthread_mutex_unlock(&eng->lock);
}

uint64_t tq_now_ns(timer_queue *q) {
  engine *eng = q->eng;
  return eng ? clock_now_ns(eng) : 0;
}

void tq_advance_manual(timer_queue *q, uint64_t delta_ns) {
  engine *eng = q->eng;
  if (eng) engine_advance_manual(eng, delta_ns);
}

uint64_t tq_pending(timer_queue *q) {
  engine *eng = lock_engine(q);
  if (!eng) return 0;
  uint64_t pending = q->stats.pending;
  pthread_mutex_unlock(&eng->lock);
  return pending;
}

int timeout_state(timeout *t) {
  engine *eng = lock_engine(t->owner);
  if (!eng) return t->state;
  if (t->state == TIMEOUT_PENDING && !eng->manual_clock) collect_locked(eng, clock_now_ns(eng));
  int state = t->state;
  pthread_mutex_unlock(&eng->lock);
  return state;
}

bool timeout_cancelled(timeout *t) {
  engine *eng = lock_engine(t->owner);
  bool cancelled = t->state == TIMEOUT_CANCELLED;
  if (eng) pthread_mutex_unlock(&eng->lock);
  return cancelled;
}

uint64_t timeout_remaining(timeout *t) {
  engine *eng = lock_engine(t->owner);
  if (!eng) return 0;
  uint64_t deadline_ns = t->state == TIMEOUT_PENDING ? t->deadline_ns : 0;
  pthread_mutex_unlock(&eng->lock);
  if (deadline_ns == ENGINE_NEVER) return ENGINE_NEVER;
  uint64_t now_ns = clock_now_ns(eng);
  return deadline_ns > now_ns ? deadline_ns - now_ns : 0;
}
