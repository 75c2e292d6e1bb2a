/*
 * bench_engine.c — microbenchmark of the engine alone (no Lua).
 *
 *   cc -O2 -std=c11 -Wall -Wextra -Wpedantic -Werror -Isrc -pthread \
 *      bench/bench_engine.c src/wheel.c src/due_order.c src/lateness.c \
 *      src/engine.c src/timer_queue.c -o build/bench_engine
 *   build/bench_engine [N [PHASE]]  (N defaults to 1000000)
 *
 * PHASE (for profiling one part alone): real, manual, expire or ref;
 * all of them by default.
 *
 * With N timeouts from one calloc'd array (pre-faulted, so page faults are
 * not charged to the engine; their cost is printed as an INFO line):
 *
 *   schedule         tq_schedule, delays uniform in [1 s, 60 s], tick 1 ms,
 *                    wheel 512, real clock (engine_new(..., false); no fd
 *                    is watched, so no worker thread runs)
 *   cancel           tq_cancel of all of them, in random order (INFO: a
 *                    second draw scheduled on the same wheel, whose hint
 *                    records have grown already)
 *   schedule_manual  the same schedule on a manual-clock engine
 *   expire           manual clock, delays uniform in [0, 1 s]: then
 *                    engine_advance_manual in 1 ms steps, each followed by
 *                    tq_poll_begin, then tq_finish_and_pop until drained
 *                    (one lock round-trip per task, as the binding's poll);
 *                    the time of advance + pop + finish per expired timeout
 *                    (INFO: the same with the array in deadline order, the
 *                    latency of one dependent cache miss over as much memory
 *                    as the timeouts take, and the cost of one miss among
 *                    independent ones, which the CPU overlaps)
 *   ref_*            reference costs: a clock read, a lock, the least a
 *                    schedule on the real clock does (ref_schedule_floor),
 *                    the same with src/wheel.c's insert in place of the push
 *                    (ref_schedule_wheel: the wheel's share, without the
 *                    engine's bookkeeping), a cache miss, a random node
 *                    changed alone and under a lock, a random node
 *                    unlinked from a list in random order under a lock
 *                    (and the same with the lock found through the node,
 *                    ref_unlink_locked_via_node, as tq_cancel finds it),
 *                    the wheel's share of a cancel (ref_cancel_wheel:
 *                    cancel's draw removed from src/wheel.c under a lock
 *                    found through the node, its state set; and
 *                    ref_cancel_wheel_counted, with the three counts the
 *                    engine keeps: each is one more store), the same
 *                    with slots that are arrays, another design for a
 *                    cancel that does not touch the neighbours
 *                    (ref_cancel_slot_array),
 *                    the memory an expiry must touch
 *                    (ref_expire_memory: expire's nodes read in the wheel's
 *                    order, prefetched as it does), the wheel's share of an
 *                    expiry (ref_expire_wheel: src/wheel.c advanced into a
 *                    due list, each node taken under a lock, without the
 *                    engine's sort, counts and lateness), and the CPU time a
 *                    thread's 1 ms sleep costs (ref_sleep_cpu: a timer that
 *                    fires every tick pays it once a tick), and wake_cpu:
 *                    the CPU of one engine wake-up (tq_wait, then a poll of
 *                    the timeout due), to set beside it
 *
 * Output: `RESULT engine <op> ns_per_op <value>` lines, plus INFO lines
 * (breakdowns and reference costs) that scripts may ignore. Delays and the
 * cancel order are drawn before timing starts, so the RNG is not measured.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "due_order.h"                   /* timeout_of: the reference lists */
#include "engine.h"

#define TICK_NS UINT64_C(1000000)
#define WHEEL_SLOTS 512
#define SEC UINT64_C(1000000000)
#define EXPIRE_SPAN_NS SEC                /* expire's delays: uniform in [0, this] */
#define WALK_PREFETCH_AHEAD WHEEL_LANES /* as src/wheel.c: a turn of its lanes ahead */
#define CACHE_LINE 64

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = UINT64_C(0x9E3779B97F4A7C15);

static uint64_t rng_next(void) {                 /* splitmix64 */
  uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (the modulo bias is far below what matters here). */
static uint64_t rng_range(uint64_t lo, uint64_t hi) {
  return lo + rng_next() % (hi - lo + 1);
}

static void fail(const char *what) {
  fprintf(stderr, "bench_engine: %s\n", what);
  exit(1);
}

static void result(const char *op, double ns_per_op) {
  printf("RESULT engine %s ns_per_op %.1f\n", op, ns_per_op);
  fflush(stdout);
}

static void info(const char *what, double ns_per_op) {
  printf("INFO engine %s ns_per_op %.1f\n", what, ns_per_op);
  fflush(stdout);
}

typedef struct bench {
  size_t n;
  timeout *timeouts;          /* one calloc'd array of n */
  uint64_t *delays;
  uint32_t *order;            /* a random permutation of 0..n-1 */
} bench;

static void draw_delays(bench *b, uint64_t lo, uint64_t hi) {
  for (size_t i = 0; i < b->n; i++) b->delays[i] = rng_range(lo, hi);
}

static engine *new_engine(bool manual, timer_queue *q) {
  engine *eng = engine_new(TICK_NS, WHEEL_SLOTS, manual);
  if (!eng) fail("engine_new failed");
  if (tq_init(q, eng, 0) != TQ_OK) fail("tq_init failed");
  engine_release(eng);                           /* the queue holds it */
  return eng;
}

/* ns per tq_schedule of all n timeouts. */
static double time_schedule(bench *b, timer_queue *q) {
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++)
    if (tq_schedule(q, &b->timeouts[i], b->delays[i], 0) != TQ_OK) fail("tq_schedule failed");
  uint64_t elapsed = now_ns() - start;
  if (tq_pending(q) != b->n) fail("pending count wrong after scheduling");
  return (double)elapsed / (double)b->n;
}

/* ns per tq_cancel of all n timeouts, in random order or in array order. */
static double time_cancel(bench *b, timer_queue *q, bool random_order) {
  size_t cancelled = 0;
  uint64_t start = now_ns();
  if (random_order) {
    for (size_t i = 0; i < b->n; i++) cancelled += tq_cancel(&b->timeouts[b->order[i]]);
  } else {
    for (size_t i = 0; i < b->n; i++) cancelled += tq_cancel(&b->timeouts[i]);
  }
  uint64_t elapsed = now_ns() - start;
  if (cancelled != b->n || tq_pending(q) != 0) fail("not every timeout was cancelled");
  return (double)elapsed / (double)b->n;
}

/* Reference costs: what a clock read and an uncontended lock pair cost here. */
static void reference_costs(void) {
  enum { REPS = 10000000 };
  volatile uint64_t sink = 0;
  uint64_t start = now_ns();
  for (int i = 0; i < REPS; i++) sink += engine_monotonic_ns();
  result("ref_clock_gettime", (double)(now_ns() - start) / REPS);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  start = now_ns();
  for (int i = 0; i < REPS; i++) {
    pthread_mutex_lock(&m);
    sink++;
    pthread_mutex_unlock(&m);
  }
  result("ref_lock_unlock", (double)(now_ns() - start) / REPS);
  (void)sink;
}

/* The floor of a schedule on the real clock: read the clock, take a lock
 * (the worker thread shares the wheel), fill in the node and push it on one
 * of 64 lists picked by its deadline: no levels, no bitmap, no lanes,
 * no counts. */
static void reference_schedule_floor(bench *b) {
  enum { LISTS = 64 };
  wheel_node *heads[LISTS] = {0};
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  draw_delays(b, 1 * SEC, 60 * SEC);
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    uint64_t deadline_ns = engine_monotonic_ns() + b->delays[i];
    pthread_mutex_lock(&m);
    timeout *t = &b->timeouts[i];
    t->deadline_ns = deadline_ns;
    t->seq = i;
    wheel_node **head = &heads[(deadline_ns / TICK_NS) % LISTS];
    t->link.prev = NULL;
    t->link.next = *head;
    if (*head) (*head)->prev = &t->link;
    *head = &t->link;
    pthread_mutex_unlock(&m);
  }
  result("ref_schedule_floor", (double)(now_ns() - start) / (double)b->n);
}

/* The tick a delay from tick 0 falls due in (rounded up, as the engine's). */
static size_t due_tick(uint64_t delay_ns) {
  return (size_t)((delay_ns + TICK_NS - 1) / TICK_NS);
}

/* The references' wheel_deadline_fn: a node's deadline_ns, on the wheel's
 * clock, rounded up to its tick. */
static uint64_t node_tick(const wheel_node *n, const void *ctx) {
  (void)ctx;
  return due_tick(((const timeout *)(const void *)n)->deadline_ns);
}

/* The wheel's whole share of a schedule on the real clock: read the clock,
 * take a lock, round the deadline up to a tick of a run-time length and
 * insert the node with src/wheel.c (levels, occupancy bits, lanes),
 * as the engine does; none of the engine's own bookkeeping. */
static void reference_schedule_wheel(bench *b) {
  wheel w;
  if (wheel_init(&w, WHEEL_SLOTS, node_tick, NULL)) fail("wheel_init failed");
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  volatile uint64_t tick_setting = TICK_NS;       /* divided at run time, as the engine's */
  uint64_t tick_ns = tick_setting, epoch_ns = engine_monotonic_ns();
  draw_delays(b, 1 * SEC, 60 * SEC);
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    uint64_t deadline_ns = engine_monotonic_ns() - epoch_ns + b->delays[i];
    pthread_mutex_lock(&m);
    timeout *t = &b->timeouts[i];
    t->deadline_ns = deadline_ns;
    uint64_t tick = deadline_ns / tick_ns + (deadline_ns % tick_ns != 0);
    if (!wheel_insert(&w, &t->link, tick)) fail("wheel_insert refused");
    pthread_mutex_unlock(&m);
  }
  result("ref_schedule_wheel", (double)(now_ns() - start) / (double)b->n);
  wheel_free(&w);
}

static double process_cpu_ns(void) {
  struct timespec cpu;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
  return (double)cpu.tv_sec * (double)SEC + (double)cpu.tv_nsec;
}

/* The process CPU time one 1 ms sleep costs: entering the kernel, the
 * timer, the switch to idle and back. On a VM it is tens of microseconds. */
static void reference_sleep_cpu(void) {
  enum { SLEEPS = 2000 };
  const struct timespec one_tick = {0, (long)TICK_NS};
  double cpu0 = process_cpu_ns();
  for (int i = 0; i < SLEEPS; i++) clock_nanosleep(CLOCK_MONOTONIC, 0, &one_tick, NULL);
  result("ref_sleep_cpu", (process_cpu_ns() - cpu0) / SLEEPS);
}

/* The process CPU time of one engine wake-up, to set beside ref_sleep_cpu:
 * WAKES timeouts one tick apart on the real clock, drained as the binding's
 * wait() and poll() do (tq_wait, tq_poll_begin, tq_pop_due, then
 * tq_finish_and_pop), one wake-up a tick. */
static void bench_wake_cpu(bench *b) {
  enum { WAKES = 2000 };
  if (b->n < WAKES) return;
  timer_queue q;
  new_engine(false, &q);
  for (size_t i = 0; i < WAKES; i++)
    if (tq_schedule(&q, &b->timeouts[i], (i + 1) * TICK_NS + TICK_NS / 2, 0) != TQ_OK)
      fail("tq_schedule failed");
  size_t fired = 0;
  double cpu0 = process_cpu_ns();
  while (tq_wait(&q, ENGINE_NEVER)) {
    uint64_t seq_limit = tq_poll_begin(&q);
    for (timeout *t = tq_pop_due(&q, seq_limit); t; fired++) {
      bool still_pending;
      t = tq_finish_and_pop(t, t->seq, &still_pending, seq_limit);
    }
  }
  double cpu1 = process_cpu_ns();
  if (fired != WAKES || tq_pending(&q) != 0) fail("not every timeout fired");
  result("wake_cpu", (cpu1 - cpu0) / WAKES);
  tq_destroy(&q);
}

/* 1) schedule + cancel on the real clock. No fd is watched, so no worker
 * thread runs, as in a process that drives its timer with wait() and poll().
 * Then a second draw scheduled on the same wheel (INFO): the wheel's hint
 * records have grown already, as in a process that has run a while, so
 * their fresh pages are not faulted in again. */
static void bench_real_clock(bench *b) {
  timer_queue q;
  new_engine(false, &q);
  draw_delays(b, 1 * SEC, 60 * SEC);
  result("schedule", time_schedule(b, &q));
  result("cancel", time_cancel(b, &q, true));
  draw_delays(b, 1 * SEC, 60 * SEC);
  info("schedule_again", time_schedule(b, &q));
  tq_destroy(&q);
}

/* 2) the same on a manual clock (no worker, no clock_gettime), plus
 * cancel in array order, which shows what the random order's cache misses
 * cost. */
static void bench_manual_clock(bench *b) {
  timer_queue q;
  new_engine(true, &q);
  draw_delays(b, 1 * SEC, 60 * SEC);
  result("schedule_manual", time_schedule(b, &q));
  info("cancel_manual_random_order", time_cancel(b, &q, true));
  info("schedule_manual_again", time_schedule(b, &q));
  result("cancel_array_order", time_cancel(b, &q, false));
  tq_destroy(&q);
}

/* The floor of any cancel in random order: change one field of a random
 * node, alone and under a lock. The lock is an atomic read-modify-write,
 * which x86 lets run only once earlier stores have reached the cache, so a
 * node's miss cannot overlap the next one's. Cancel must change the node
 * under such an instruction: the worker may be making it due meanwhile. */
static void reference_random_touch(bench *b) {
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) b->timeouts[b->order[i]].has_run ^= 1;
  result("ref_touch_random", (double)(now_ns() - start) / (double)b->n);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    pthread_mutex_lock(&m);
    b->timeouts[b->order[i]].has_run ^= 1;
    pthread_mutex_unlock(&m);
  }
  result("ref_locked_touch_random", (double)(now_ns() - start) / (double)b->n);
}

/* Reads and changes each node of walk[], the next WALK_PREFETCH_AHEAD
 * (both of a node's cache lines) requested ahead, as the wheel's walk does
 * with its lanes. */
static uint64_t touch_walk(timeout *const *walk, size_t count) {
  uint64_t sum = 0;
  for (size_t i = 0; i < count; i++) {
    if (i + WALK_PREFETCH_AHEAD < count) {
      __builtin_prefetch(walk[i + WALK_PREFETCH_AHEAD]);
      __builtin_prefetch((const char *)walk[i + WALK_PREFETCH_AHEAD] + CACHE_LINE);
    }
    sum += walk[i]->deadline_ns;
    walk[i]->has_run ^= 1;
  }
  return sum;
}

/* The memory an expiry of expire's draw must touch, and nothing else: the
 * timeouts that move down a level (due past level 0's WHEEL_SLOTS ticks)
 * once, in the order they were scheduled, then each timeout once, in the
 * order of its tick. No lists, no sort, no lock: per expiry. */
static void reference_expire_memory(bench *b) {
  draw_delays(b, 0, EXPIRE_SPAN_NS);
  size_t ticks = due_tick(EXPIRE_SPAN_NS) + 1;
  size_t *tick_end = calloc(ticks + 1, sizeof *tick_end);
  timeout **moved = malloc(b->n * sizeof *moved), **expired = malloc(b->n * sizeof *expired);
  if (!tick_end || !moved || !expired) fail("out of memory");
  size_t moved_count = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (due_tick(b->delays[i]) >= WHEEL_SLOTS) moved[moved_count++] = &b->timeouts[i];
    tick_end[due_tick(b->delays[i]) + 1]++;
  }
  for (size_t tick = 1; tick <= ticks; tick++) tick_end[tick] += tick_end[tick - 1];
  for (size_t i = 0; i < b->n; i++) expired[tick_end[due_tick(b->delays[i])]++] = &b->timeouts[i];
  uint64_t start = now_ns();
  volatile uint64_t keep = touch_walk(moved, moved_count) + touch_walk(expired, b->n);
  result("ref_expire_memory", (double)(now_ns() - start) / (double)b->n);
  (void)keep;
  free(expired);
  free(moved);
  free(tick_end);
}

/* The wheel's whole share of an expiry, with the lock that lets a cancel win
 * until the start: expire's draw in a bare src/wheel.c, advanced one tick at
 * a time under the lock into a due list, each node then taken off that list
 * and marked under the lock. No sort by deadline within a tick, no counts, no
 * lateness, no finish: per expiry. */
static void reference_expire_wheel(bench *b) {
  draw_delays(b, 0, EXPIRE_SPAN_NS);
  wheel w;
  if (wheel_init(&w, WHEEL_SLOTS, node_tick, NULL)) fail("wheel_init failed");
  wheel_list due = {0};
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[i];
    t->deadline_ns = b->delays[i];
    if (!wheel_insert(&w, &t->link, due_tick(t->deadline_ns))) wheel_list_push_back(&due, &t->link);
  }
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  size_t expired = 0;
  uint64_t start = now_ns();
  for (uint64_t tick = 1; tick <= due_tick(EXPIRE_SPAN_NS); tick++) {
    pthread_mutex_lock(&m);
    wheel_advance(&w, tick, &due);
    pthread_mutex_unlock(&m);
    for (;;) {
      pthread_mutex_lock(&m);
      wheel_node *n = wheel_list_pop_front(&due);
      if (n) timeout_of(n)->state = TIMEOUT_DONE;
      pthread_mutex_unlock(&m);
      if (!n) break;
      expired++;
    }
  }
  result("ref_expire_wheel", (double)(now_ns() - start) / (double)b->n);
  if (expired != b->n) fail("the reference wheel did not expire every node");
  wheel_free(&w);
}

/* The floor of a cancel that unlinks at once, as an intrusive list's must:
 * a random node taken out of a doubly linked list whose order is random too
 * (so both neighbours are random nodes), under a lock. */
static void reference_random_unlink(bench *b) {
  wheel_list list = {0};
  for (size_t i = 0; i < b->n; i++) wheel_list_push_back(&list, &b->timeouts[b->order[b->order[i]]].link);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    pthread_mutex_lock(&m);
    wheel_list_remove(&list, &b->timeouts[b->order[i]].link);
    pthread_mutex_unlock(&m);
  }
  result("ref_locked_unlink_random", (double)(now_ns() - start) / (double)b->n);
  if (list.head) fail("the reference list is not empty");
}

/* The same, with the lock found through the node, as tq_cancel(t) finds its
 * queue's (t->owner): the lock then waits for the node's miss. The lock's
 * index is read from the node (always 0, which the compiler cannot know). */
static void reference_unlink_locked_via_node(bench *b) {
  wheel_list list = {0};
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[b->order[b->order[i]]];
    t->periodic = false;
    wheel_list_push_back(&list, &t->link);
  }
  pthread_mutex_t locks[1] = {PTHREAD_MUTEX_INITIALIZER};
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[b->order[i]];
    pthread_mutex_t *m = &locks[t->periodic];
    pthread_mutex_lock(m);
    wheel_list_remove(&list, &t->link);
    pthread_mutex_unlock(m);
  }
  result("ref_unlink_locked_via_node", (double)(now_ns() - start) / (double)b->n);
  if (list.head) fail("the reference list is not empty");
}

/* The references' cancel draw in a bare src/wheel.c, each node's lock index
 * (periodic, always false) set for a lock found through the node. */
static void place_cancel_draw(bench *b, wheel *w) {
  draw_delays(b, 1 * SEC, 60 * SEC);
  if (wheel_init(w, WHEEL_SLOTS, node_tick, NULL)) fail("wheel_init failed");
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[i];
    t->deadline_ns = b->delays[i];
    t->periodic = false;
    if (!wheel_insert(w, &t->link, due_tick(t->deadline_ns))) fail("wheel_insert refused");
  }
}

/* The engine's three counts, on a struct the loop has in the cache. Volatile
 * so that each count is stored, as the engine's are before its unlock:
 * otherwise the compiler keeps them in registers, and folds the two equal
 * ones into one. */
typedef struct cancel_counts {
  uint64_t pending, cancelled, armed;
} cancel_counts;

static void count_cancel(volatile cancel_counts *counts) {
  counts->pending--;
  counts->cancelled++;
  counts->armed--;
}

/* The wheel's whole share of a cancel in random order: cancel's draw in a
 * bare src/wheel.c, each timeout removed under a lock found through the node
 * (as tq_cancel finds its queue's) and marked cancelled; with `counted`, the
 * engine's three counts too. Per cancel. */
static void reference_cancel_wheel(bench *b, bool counted) {
  wheel w;
  place_cancel_draw(b, &w);
  pthread_mutex_t locks[1] = {PTHREAD_MUTEX_INITIALIZER};
  volatile cancel_counts counts = {b->n, 0, b->n};
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[b->order[i]];
    pthread_mutex_t *m = &locks[t->periodic];
    pthread_mutex_lock(m);
    if (counted) count_cancel(&counts);
    t->state = TIMEOUT_CANCELLED;
    wheel_remove(&w, &t->link);
    pthread_mutex_unlock(m);
  }
  result(counted ? "ref_cancel_wheel_counted" : "ref_cancel_wheel",
         (double)(now_ns() - start) / (double)b->n);
  if (w.count) fail("the reference wheel is not empty");
  wheel_free(&w);
}

/* A slot's index among all the wheel's slots, level 0's first. */
static size_t flat_slot(const wheel *w, const wheel_node *n) {
  size_t slot = wheel_node_slot(w, n);
  return n->level == 0 ? slot : WHEEL_SLOTS + ((size_t)(n->level - 1) << WHEEL_LEVEL_BITS) + slot;
}

/* ref_cancel_wheel_counted with slots that are arrays of pointers: another
 * design for a cancel that leaves the neighbours alone. The
 * draw is placed in the slots src/wheel.c gives it, each slot's pointers
 * together in one array, a node keeping its place in its `next` field (free
 * while a node is in no list). A cancel clears its pointer and counts the
 * slot's live nodes. Per cancel. */
static void reference_cancel_slot_array(bench *b) {
  wheel w;
  place_cancel_draw(b, &w);                         /* kept for the nodes' slots */
  size_t slots = WHEEL_SLOTS + ((size_t)WHEEL_LEVELS_MAX << WHEEL_LEVEL_BITS);
  size_t *slot_start = calloc(slots + 1, sizeof *slot_start);
  uint32_t *live = calloc(slots, sizeof *live);
  timeout **at = malloc(b->n * sizeof *at);
  if (!slot_start || !live || !at) fail("out of memory");
  for (size_t i = 0; i < b->n; i++) slot_start[flat_slot(&w, &b->timeouts[i].link) + 1]++;
  for (size_t s = 0; s < slots; s++) slot_start[s + 1] += slot_start[s];
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[i];
    size_t s = flat_slot(&w, &t->link), place = slot_start[s] + live[s]++;
    at[place] = t;
    t->link.next = (wheel_node *)(uintptr_t)place;
  }
  pthread_mutex_t locks[1] = {PTHREAD_MUTEX_INITIALIZER};
  volatile cancel_counts counts = {b->n, 0, b->n};
  uint64_t start = now_ns();
  for (size_t i = 0; i < b->n; i++) {
    timeout *t = &b->timeouts[b->order[i]];
    pthread_mutex_t *m = &locks[t->periodic];
    pthread_mutex_lock(m);
    count_cancel(&counts);
    t->state = TIMEOUT_CANCELLED;
    at[(uintptr_t)t->link.next] = NULL;
    live[flat_slot(&w, &t->link)]--;
    pthread_mutex_unlock(m);
  }
  result("ref_cancel_slot_array", (double)(now_ns() - start) / (double)b->n);
  for (size_t s = 0; s < slots; s++)
    if (live[s]) fail("the reference slots are not empty");
  wheel_free(&w);
  free(at);
  free(live);
  free(slot_start);
}

/* Random loads whose addresses are all known in advance (next[] holds a
 * permutation): the CPU overlaps the misses, as it can for a batch of
 * independent nodes, but not along a list. */
static void reference_miss_throughput(const size_t *next, size_t slots) {
  enum { STEPS = 2000000 };
  size_t sum = 0, at = 0;
  uint64_t start = now_ns();
  for (int i = 0; i < STEPS; i++, at = (at + 1) % slots) sum += next[next[at]];
  result("ref_cache_miss_independent", (double)(now_ns() - start) / STEPS);
  volatile size_t keep = sum;
  (void)keep;
}

/* A dependent random walk over `bytes` of memory: what one cache miss costs
 * when the next address is known only after the load, as in a list walk. */
static void reference_miss_latency(size_t bytes) {
  size_t slots = bytes / sizeof(size_t);
  size_t *next = malloc(slots * sizeof *next);
  if (!next) fail("out of memory");
  for (size_t i = 0; i < slots; i++) next[i] = i;
  for (size_t i = slots - 1; i > 0; i--) {        /* Sattolo: one long cycle */
    size_t j = (size_t)(rng_next() % i);
    size_t swap = next[i];
    next[i] = next[j];
    next[j] = swap;
  }
  enum { STEPS = 2000000 };
  size_t at = 0;
  uint64_t start = now_ns();
  for (int i = 0; i < STEPS; i++) at = next[at];
  result("ref_cache_miss", (double)(now_ns() - start) / STEPS);
  volatile size_t keep = at;                     /* the walk must not be elided */
  (void)keep;
  reference_miss_throughput(next, slots);
  free(next);
}

/* Sorts the delays, so that nodes lie in memory in deadline order. */
static int compare_delays(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* 3) expiry: advance in 1 ms steps and drain after each. With in_order, the
 * timeouts' memory follows their deadlines (no cache misses in the slot
 * lists): the difference is what scattered nodes cost. */
static void bench_expire(bench *b, bool in_order) {
  timer_queue q;
  engine *eng = new_engine(true, &q);
  draw_delays(b, 0, EXPIRE_SPAN_NS);
  if (in_order) qsort(b->delays, b->n, sizeof *b->delays, compare_delays);
  info(in_order ? "schedule_manual_0_to_1s_in_order" : "schedule_manual_0_to_1s",
       time_schedule(b, &q));
  uint64_t advance_ns = 0, drain_ns = 0, fired = 0;
  uint64_t steps = EXPIRE_SPAN_NS / TICK_NS;
  for (uint64_t step = 0; step < steps; step++) {
    uint64_t t0 = now_ns();
    engine_advance_manual(eng, TICK_NS);
    uint64_t t1 = now_ns();
    uint64_t seq_limit = tq_poll_begin(&q);
    timeout *t = tq_pop_due(&q, seq_limit);
    while (t) {                                 /* as the binding's poll() steps */
      bool still_pending;
      t = tq_finish_and_pop(t, t->seq, &still_pending, seq_limit);
      if (still_pending) fail("a one-shot timeout was re-armed");
      fired++;
    }
    uint64_t t2 = now_ns();
    advance_ns += t1 - t0;
    drain_ns += t2 - t1;
  }
  if (fired != b->n || tq_pending(&q) != 0) fail("not every timeout expired");
  for (size_t i = 0; i < b->n; i++)
    if (timeout_state(&b->timeouts[i]) != TIMEOUT_DONE) fail("a timeout is not done");
  double per_expiry = (double)(advance_ns + drain_ns) / (double)b->n;
  if (in_order) {
    result("expire_in_deadline_order", per_expiry);
  } else {
    result("expire", per_expiry);
    info("expire_advance_part", (double)advance_ns / (double)b->n);
    info("expire_poll_part", (double)drain_ns / (double)b->n);
  }
  tq_destroy(&q);
}

int main(int argc, char **argv) {
  bench b = {.n = 1000000};
  const char *phase = argc > 2 ? argv[2] : "all";
  bool all = strcmp(phase, "all") == 0;
  if (!all && strcmp(phase, "real") && strcmp(phase, "manual") && strcmp(phase, "expire") &&
      strcmp(phase, "ref"))
    fail("PHASE must be all, real, manual, expire or ref");
  if (argc > 1) {
    char *end;
    unsigned long long n = strtoull(argv[1], &end, 10);
    if (*end || n == 0 || n > UINT32_MAX) fail("usage: bench_engine [N [PHASE]], 1 <= N < 2^32");
    b.n = (size_t)n;
  }
  b.timeouts = calloc(b.n, sizeof *b.timeouts);
  b.delays = malloc(b.n * sizeof *b.delays);
  b.order = malloc(b.n * sizeof *b.order);
  if (!b.timeouts || !b.delays || !b.order) fail("out of memory");

  /* Fault the array's pages in now: that cost belongs to the allocator. */
  uint64_t start = now_ns();
  memset(b.timeouts, 0, b.n * sizeof *b.timeouts);
  info("prefault_timeout_array", (double)(now_ns() - start) / (double)b.n);

  for (size_t i = 0; i < b.n; i++) b.order[i] = (uint32_t)i;
  for (size_t i = b.n - 1; i > 0; i--) {         /* Fisher-Yates */
    size_t j = (size_t)(rng_next() % (i + 1));
    uint32_t swap = b.order[i];
    b.order[i] = b.order[j];
    b.order[j] = swap;
  }
  printf("INFO engine n %zu sizeof_timeout %zu tick_ns %" PRIu64 " wheel %d\n", b.n,
         sizeof(timeout), TICK_NS, WHEEL_SLOTS);

  if (all || !strcmp(phase, "real")) bench_real_clock(&b);
  if (all || !strcmp(phase, "manual")) bench_manual_clock(&b);
  if (all || !strcmp(phase, "expire")) {
    bench_expire(&b, false);
    bench_expire(&b, true);
  }
  if (all || !strcmp(phase, "ref")) {
    reference_costs();
    reference_schedule_floor(&b);
    reference_schedule_wheel(&b);
    reference_sleep_cpu();
    bench_wake_cpu(&b);
    reference_random_touch(&b);
    reference_random_unlink(&b);
    reference_unlink_locked_via_node(&b);
    reference_cancel_wheel(&b, false);
    reference_cancel_wheel(&b, true);
    reference_cancel_slot_array(&b);
    reference_expire_memory(&b);
    reference_expire_wheel(&b);
    reference_miss_latency(b.n * sizeof(timeout));
  }

  free(b.order);
  free(b.delays);
  free(b.timeouts);
  return 0;
}
