/*
 * test_engine.c — the engine alone (no Lua): manual and real clocks, the
 * worker thread, cancel, stop, wait, the wake-up fd and idle behaviour.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "check.h"
#include "splitmix64.h"

#define MS UINT64_C(1000000)
#define TICK_1MS MS


static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  nanosleep(&ts, NULL);
}

static bool fd_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

/* A queue on a new engine that the queue alone holds (as the binding does). */
static engine *open_queue(timer_queue *q, uint64_t tick_ns, uint32_t wheel_size,
                          bool manual_clock, uint64_t max_pending) {
  engine *eng = engine_new(tick_ns, wheel_size, manual_clock);
  CHECK(eng && tq_init(q, eng, max_pending) == TQ_OK);
  engine_release(eng);
  return eng;
}

/* Watches q's fd, so that the worker thread drives the wheel for q. */
static void watch(timer_queue *q) { (void)tq_fd(q); }

/* Pops everything due now into out[]; returns how many. */
static size_t drain(timer_queue *q, timeout **out, size_t cap) {
  uint64_t limit = tq_poll_begin(q);
  size_t n = 0;
  timeout *t;
  while (n < cap && (t = tq_pop_due(q, limit))) {
    out[n++] = t;
    tq_finish(t, t->seq);
  }
  return n;
}

static void test_manual_order_and_boundaries(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout t[5] = {0};
  uint64_t delays[5] = {25 * MS, 20 * MS, 21 * MS, 20 * MS, 0};
  for (int i = 0; i < 5; i++) CHECK(tq_schedule(&q, &t[i], delays[i], 0) == TQ_OK);
  timeout *out[8];
  CHECK(drain(&q, out, 8) == 1 && out[0] == &t[4]);       /* delay 0 */
  engine_advance_manual(eng, 19 * MS);
  CHECK(drain(&q, out, 8) == 0);
  engine_advance_manual(eng, 1 * MS);                      /* now 20 ms */
  CHECK(drain(&q, out, 8) == 2 && out[0] == &t[1] && out[1] == &t[3]);
  engine_advance_manual(eng, 10 * MS);                     /* now 30 ms */
  CHECK(drain(&q, out, 8) == 2 && out[0] == &t[2] && out[1] == &t[0]);
  CHECK(tq_pending(&q) == 0);
  tq_destroy(&q);
}

/* Cancels one timeout and checks what it leaves: cancelled, one fewer
 * pending, counted once, and a second cancel refused. */
static void check_cancelled(timer_queue *q, timeout *t) {
  tq_stats before, after;
  tq_get_stats(q, &before);
  CHECK(tq_cancel(t) && t->state == TIMEOUT_CANCELLED && !tq_cancel(t));
  tq_get_stats(q, &after);
  CHECK(after.pending == before.pending - 1 && after.cancelled == before.cancelled + 1);
}

/* tq_cancel from every place a timeout can be: the wheel, the manual clock's
 * held list, never firing, due, handed, and a periodic one whose task runs;
 * refused for a one-shot whose task runs, one that ran, and once stopped. */
static void test_cancel_from_everywhere(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout in_wheel = {0}, held = {0}, never = {0}, handed = {0}, due = {0};
  engine_advance_manual(eng, 5 * MS);              /* mid-tick: a deadline later in it is held */
  CHECK(tq_schedule(&q, &in_wheel, 100 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &held, 3 * MS, 0) == TQ_OK && held.state == TIMEOUT_PENDING);
  CHECK(tq_schedule(&q, &never, ENGINE_NEVER, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &handed, 0, 0) == TQ_OK && tq_schedule(&q, &due, 0, 0) == TQ_OK);
  CHECK(tq_hand_due(&q, tq_poll_begin(&q)) == &handed && due.state == TIMEOUT_DUE);
  CHECK(tq_pending(&q) == 5);
  timeout *const each[] = {&in_wheel, &held, &never, &due, &handed};
  for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) check_cancelled(&q, each[i]);
  CHECK(!tq_start(&handed, handed.seq) && tq_pending(&q) == 0);
  engine_advance_manual(eng, 200 * MS);
  CHECK(tq_pop_due(&q, tq_poll_begin(&q)) == NULL);             /* none of them fires */

  timeout beat = {0}, once = {0}, later = {0};
  CHECK(tq_schedule(&q, &beat, 0, 10 * MS) == TQ_OK && tq_schedule(&q, &once, 0, 0) == TQ_OK);
  uint64_t seq_limit = tq_poll_begin(&q);
  CHECK(tq_pop_due(&q, seq_limit) == &beat);
  check_cancelled(&q, &beat);                                    /* while its task runs */
  CHECK(!tq_finish(&beat, beat.seq));                            /* and not re-armed */
  CHECK(tq_pop_due(&q, seq_limit) == &once && !tq_cancel(&once));
  CHECK(!tq_finish(&once, once.seq) && !tq_cancel(&once) && tq_pending(&q) == 0);
  CHECK(tq_schedule(&q, &later, 100 * MS, 0) == TQ_OK);
  tq_ended ended;
  tq_stop(&q, NULL, 0, &ended);
  CHECK(tq_ended_pop(&ended) == &later && tq_ended_pop(&ended) == NULL);
  CHECK(!tq_cancel(&later) && later.state == TIMEOUT_CANCELLED);
  tq_destroy(&q);
}

static void test_manual_cancel_due_and_stop(void) {
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 512, true, 0);
  timeout a = {0}, b = {0}, c = {0}, never = {0};
  CHECK(tq_schedule(&q, &a, 5 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &b, 5 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &c, 3000 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &never, ENGINE_NEVER, 0) == TQ_OK);
  engine_advance_manual(eng, 5 * MS);
  CHECK(!q.wake_fd_readable);               /* nobody watches the fd: no write */
  CHECK(fd_readable(tq_fd(&q)));                           /* watched: now readable */
  CHECK(tq_cancel(&a));                                    /* due, unpolled */
  CHECK(!tq_cancel(&a));
  timeout *out[4];
  CHECK(drain(&q, out, 4) == 1 && out[0] == &b);
  CHECK(!fd_readable(tq_fd(&q)));
  CHECK(timeout_remaining(&never) == ENGINE_NEVER);
  timeout *const held[] = {&never, &a, &c, &b};         /* any order */
  tq_ended ended;
  tq_stop(&q, held, 4, &ended);
  CHECK(tq_ended_pop(&ended) == &c && tq_ended_pop(&ended) == &never);
  CHECK(tq_ended_pop(&ended) == NULL);
  CHECK(c.state == TIMEOUT_CANCELLED && never.state == TIMEOUT_CANCELLED);
  CHECK(tq_schedule(&q, &a, 0, 0) == TQ_STOPPED);
  tq_stats stats;
  tq_get_stats(&q, &stats);
  CHECK(stats.cancelled == 3 && stats.fired == 1 && stats.pending == 0);
  tq_destroy(&q);
}

/* A hand-off stays pending until tq_start; cancel, stop and a give-back
 * win over a late start; next_due follows the earliest armed timeout. */
static void test_hand_off_and_next_due(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout a = {0}, b = {0}, c = {0}, far = {0};
  CHECK(tq_next_due(&q) == ENGINE_NEVER);
  CHECK(tq_schedule(&q, &far, 5000 * MS, 0) == TQ_OK);
  CHECK(tq_next_due(&q) == 5000 * MS);                     /* a higher level */
  CHECK(tq_schedule(&q, &a, 15 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &b, 20 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &c, 20 * MS, 0) == TQ_OK);
  CHECK(tq_next_due(&q) == 15 * MS);                       /* exact: a manual clock */
  CHECK(tq_due_at(&a) == 15 * MS && tq_due_at(&far) == 5000 * MS);
  engine_advance_manual(eng, 20 * MS);
  CHECK(tq_next_due(&q) == 0 && tq_due_at(&a) == 0);
  uint64_t seq_limit = tq_poll_begin(&q);
  timeout *handed = tq_hand_due(&q, seq_limit);
  CHECK(handed == &a && a.state == TIMEOUT_HANDED && tq_pending(&q) == 4);
  CHECK(tq_hand_due(&q, seq_limit) == &b && tq_hand_due(&q, seq_limit) == &c);
  CHECK(tq_next_due(&q) == 4980 * MS);                     /* handed: not due */
  CHECK(tq_start(&a, a.seq) && a.state == TIMEOUT_RUNNING && tq_pending(&q) == 3);
  CHECK(!tq_start(&a, a.seq));                             /* once */
  CHECK(!tq_finish(&a, a.seq) && a.state == TIMEOUT_DONE);
  CHECK(tq_cancel(&b) && !tq_start(&b, b.seq));            /* cancel wins */
  tq_unhand(&c, c.seq + 1);                                /* another hand-off's */
  CHECK(c.state == TIMEOUT_HANDED);
  tq_unhand(&c, c.seq);                                    /* given back: due */
  CHECK(c.state == TIMEOUT_DUE && tq_next_due(&q) == 0);
  CHECK(tq_hand_due(&q, tq_poll_begin(&q)) == &c);
  timeout *const held[] = {&c, &far};
  tq_ended ended;
  tq_stop(&q, held, 2, &ended);
  CHECK(tq_ended_pop(&ended) == &c && c.state == TIMEOUT_CANCELLED);  /* stop wins */
  CHECK(!tq_start(&c, c.seq) && tq_next_due(&q) == ENGINE_NEVER);
  tq_destroy(&q);
}

/* tq_due_ahead lists the due timeouts in the order the pops take them, at
 * most `most`, and follows a cancel; nothing before anything is due, nor
 * when more than max_due are. */
static void test_due_ahead_in_pop_order(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout t[4], *ahead[4];
  memset(t, 0, sizeof t);
  const uint64_t delays[4] = {30 * MS, 10 * MS, 20 * MS, 10 * MS};
  for (int i = 0; i < 4; i++) CHECK(tq_schedule(&q, &t[i], delays[i], 0) == TQ_OK);
  CHECK(tq_due_ahead(&q, ahead, 4, 4) == 0);               /* none due yet */
  engine_advance_manual(eng, 30 * MS);
  uint64_t limit = tq_poll_begin(&q);
  CHECK(tq_due_ahead(&q, ahead, 4, 3) == 0);               /* 4 due */
  CHECK(tq_due_ahead(&q, ahead, 3, 4) == 3);
  CHECK(ahead[0] == &t[1] && ahead[1] == &t[3] && ahead[2] == &t[2]);
  CHECK(tq_cancel(&t[3]));
  CHECK(tq_due_ahead(&q, ahead, 4, 3) == 3 && ahead[1] == &t[2] && ahead[2] == &t[0]);
  for (int i = 0; i < 3; i++) {
    timeout *popped = tq_pop_due(&q, limit);
    CHECK(popped == ahead[i]);
    if (popped) tq_finish(popped, popped->seq);
  }
  CHECK(tq_due_ahead(&q, ahead, 4, 4) == 0);
  tq_destroy(&q);
}

/* A poll that begins with nothing due gets limit 0 (the binding then makes
 * no drain); once something is due, a limit that hands it out. */
static void test_poll_begin_zero_when_nothing_due(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout t = {0};
  CHECK(tq_poll_begin(&q) == 0);                           /* nothing scheduled */
  CHECK(tq_schedule(&q, &t, 10 * MS, 0) == TQ_OK);
  CHECK(tq_poll_begin(&q) == 0);                           /* pending, not due */
  engine_advance_manual(eng, 10 * MS);
  uint64_t limit = tq_poll_begin(&q);
  CHECK(limit > t.seq && tq_pop_due(&q, limit) == &t);
  CHECK(!tq_finish(&t, t.seq) && tq_poll_begin(&q) == 0);  /* drained */
  tq_destroy(&q);
}

/* On the real clock a timeout falls due at its deadline rounded up to the
 * tick. The engine divides by the tick with a reciprocal: this checks that
 * division for tick lengths of every shape and deadlines up to 2^63 (a time
 * plus a delay, each at most ENGINE_MAX_DELAY_NS), exact multiples and their
 * neighbours included. The deadline is set by hand on a pending timeout that
 * no worker touches; tq_due_at only reads it. */
static void test_due_at_rounds_up_to_tick(void) {
  enum { RANDOM_DEADLINES = 2000 };
  static const uint64_t ticks[] = {1000, 1001, 1024, 999983, MS, 3 * MS + 7,
                                   UINT64_C(1) << 40, (UINT64_C(1) << 62) - 1, UINT64_C(1) << 62};
  const uint64_t top = UINT64_C(1) << 63;
  uint64_t state = 0x7E57;
  for (size_t i = 0; i < sizeof ticks / sizeof ticks[0]; i++) {
    uint64_t tick = ticks[i], last = top / tick * tick;
    const uint64_t edges[] = {1, tick - 1, tick, tick + 1, last - tick, last - tick + 1,
                              last - 1, last, top - 1, top};
    size_t edge_count = sizeof edges / sizeof edges[0];
    timer_queue q;
    open_queue(&q, tick, 64, false, 0);
    timeout t = {0};
    CHECK(tq_schedule(&q, &t, ENGINE_MAX_DELAY_NS, 0) == TQ_OK);
    uint64_t scheduled = t.deadline_ns;
    for (size_t k = 0; k < edge_count + RANDOM_DEADLINES; k++) {
      uint64_t deadline = k < edge_count ? edges[k] : 1 + splitmix64(&state) % top;
      if (k >= edge_count && k % 2) deadline = (deadline / tick) * tick + (k % 4 == 1);
      if (deadline == 0 || deadline > top) deadline = tick;
      t.deadline_ns = deadline;
      uint64_t expected = (deadline / tick + (deadline % tick != 0)) * tick;
      CHECK(tq_due_at(&t) == expected);
    }
    t.deadline_ns = scheduled;
    CHECK(tq_cancel(&t));
    tq_destroy(&q);
  }
}

static void test_max_pending(void) {
  timer_queue q;
  open_queue(&q, TICK_1MS, 64, true, 2);
  timeout t[3] = {0};
  CHECK(tq_schedule(&q, &t[0], MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &t[1], MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &t[2], MS, 0) == TQ_FULL);
  CHECK(tq_cancel(&t[0]));
  CHECK(tq_schedule(&q, &t[2], MS, 0) == TQ_OK);
  tq_stop(&q, NULL, 0, NULL);
  CHECK(tq_schedule(&q, &t[0], MS, 0) == TQ_STOPPED);    /* stopped, not full */
  CHECK(tq_reset(&t[1], MS) == TQ_STOPPED);
  tq_destroy(&q);
}

static void test_periodic_skips_missed_beats(void) {
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 64, true, 0);
  timeout beat = {0};
  CHECK(tq_schedule(&q, &beat, 10 * MS, 10 * MS) == TQ_OK);
  engine_advance_manual(eng, 105 * MS);
  timeout *out[4];
  CHECK(drain(&q, out, 4) == 1);
  CHECK(beat.deadline_ns == 110 * MS);                     /* on the grid */
  CHECK(tq_pending(&q) == 1);
  tq_destroy(&q);
}

/* Real clock: many timeouts, never early, all fire, in deadline order. */
static void test_worker_fires_in_order(void) {
  enum { N = 2000 };
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 64, false, 0);
  watch(&q);
  timeout *t = calloc(N, sizeof *t);
  uint64_t seed = 42;
  for (int i = 0; i < N; i++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    CHECK(tq_schedule(&q, &t[i], (seed >> 33) % (200 * MS), 0) == TQ_OK);
  }
  size_t fired = 0;
  uint64_t last_deadline = 0;
  while (fired < N && tq_wait(&q, 2000 * MS)) {
    uint64_t limit = tq_poll_begin(&q);
    timeout *due;
    while ((due = tq_pop_due(&q, limit))) {
      CHECK(engine_now(eng) >= due->deadline_ns);
      CHECK(due->deadline_ns >= last_deadline);
      last_deadline = due->deadline_ns;
      tq_finish(due, due->seq);
      fired++;
    }
  }
  CHECK(fired == N);
  tq_destroy(&q);
  free(t);
}

/* n timeouts over `ticks` ticks, deadlines spread over each tick and a
 * quarter of them tied. */
static void schedule_spread(timer_queue *q, timeout *t, size_t n, uint64_t tick_ns,
                            unsigned ticks) {
  uint64_t seed = 7, delay = 0;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    if (i % 4 != 3) delay = (seed >> 11) % (ticks * tick_ns);
    CHECK(tq_schedule(q, &t[i], delay, 0) == TQ_OK);
  }
}

/* Manual clock: the n timeouts of schedule_spread come out in (deadline,
 * seq) order, none early. */
static void check_fired_in_order(timer_queue *q, engine *eng, uint64_t tick_ns, size_t n,
                                 unsigned ticks) {
  enum { STEP_TICKS = 3 };
  size_t fired = 0;
  timeout *last = NULL;
  for (unsigned step = 0; step * STEP_TICKS <= ticks; step++) {
    engine_advance_manual(eng, STEP_TICKS * tick_ns);
    uint64_t limit = tq_poll_begin(q);
    timeout *due;
    while ((due = tq_pop_due(q, limit))) {
      CHECK(due->deadline_ns <= engine_now(eng));
      CHECK(!last || last->deadline_ns < due->deadline_ns ||
            (last->deadline_ns == due->deadline_ns && last->seq < due->seq));
      last = due;
      tq_finish(due, due->seq);
      fired++;
    }
  }
  CHECK(fired == n);
}

/* A 1 s tick spreads a batch over 10^9 ns, a 1 ms tick over 10^6. */
static void check_batches_in_order(uint64_t tick_ns, size_t n, unsigned ticks) {
  timer_queue q;
  engine *eng = open_queue(&q, tick_ns, 512, true, 0);
  timeout *t = calloc(n, sizeof *t);
  schedule_spread(&q, t, n, tick_ns, ticks);
  check_fired_in_order(&q, eng, tick_ns, n, ticks);
  tq_destroy(&q);
  free(t);
}

/* The sanitizers reserve terabytes of address space: no cap applies there. */
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define CAN_CAP_ADDRESS_SPACE

/* Caps this process's address space at what it maps now plus `room`. Large
 * blocks are then always mapped anew (not carved from memory that earlier
 * tests freed), so that the cap applies to them. */
static bool limit_address_space(size_t room) {
  enum { LARGE_BLOCK = 128 * 1024 };
  if (!mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK)) return false;
  unsigned long pages = 0;
  FILE *statm = fopen("/proc/self/statm", "r");
  bool read = statm && fscanf(statm, "%lu", &pages) == 1;
  if (statm) fclose(statm);
  struct rlimit limit = {.rlim_cur = pages * (size_t)sysconf(_SC_PAGESIZE) + room};
  limit.rlim_max = limit.rlim_cur;
  return read && setrlimit(RLIMIT_AS, &limit) == 0;
}

/* One tick's batch of 10^5 when the sort buffers cannot be had: the engine
 * sorts the batch as a list, and nothing is lost or out of order. Run in a
 * new process (this program with WITHOUT_SORT_MEMORY as its argument), whose
 * address space is capped once its timeouts exist: one forked from here
 * would inherit the memory earlier tests freed, and take the buffers from it. */
#define WITHOUT_SORT_MEMORY "batch-without-sort-memory"
static void batch_without_sort_memory(void) {
  enum { N = 100000 };
  const size_t room = 1u << 20;        /* far less than the buffers need */
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 512, true, 0);
  timeout *t = calloc(N, sizeof *t);
  schedule_spread(&q, t, N, TICK_1MS, 1);
  CHECK(limit_address_space(room));
  void *probe = malloc(N * 2 * sizeof(uint64_t));  /* an entry holds more */
  CHECK(probe == NULL);                            /* so the limit bites */
  free(probe);
  check_fired_in_order(&q, eng, TICK_1MS, N, 1);
}

static void test_batch_without_sort_memory(void) {
  fflush(NULL);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    execl("/proc/self/exe", "test_engine", WITHOUT_SORT_MEMORY, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
#endif

/* Hundreds a tick; then two ticks of 7*10^4 each, collected by one advance,
 * which the engine sorts in buffers it does not keep between them. */
static void test_large_batches_in_order(void) {
  check_batches_in_order(TICK_1MS, 20000, 40);
  check_batches_in_order(1000 * MS, 20000, 40);
  check_batches_in_order(TICK_1MS, 140000, 2);
}

/* The wake-up fd becomes readable from the worker alone, with no poll. */
static void test_worker_signals_fd(void) {
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 512, false, 0);
  timeout t = {0};
  CHECK(tq_schedule(&q, &t, 20 * MS, 0) == TQ_OK);
  CHECK(!fd_readable(tq_fd(&q)));
  struct pollfd p = {.fd = tq_fd(&q), .events = POLLIN};
  CHECK(poll(&p, 1, 2000) == 1);
  CHECK(engine_now(eng) >= t.deadline_ns);
  timeout *out[1];
  CHECK(drain(&q, out, 1) == 1);
  CHECK(!fd_readable(tq_fd(&q)));
  tq_destroy(&q);
}

/* No wake-ups while nothing is pending, nor before a far deadline. */
static void test_idle_worker_sleeps(void) {
  timer_queue q;
  open_queue(&q, TICK_1MS, 512, false, 0);
  watch(&q);
  timeout soon = {0}, far = {0};
  CHECK(tq_schedule(&q, &soon, MS, 0) == TQ_OK);
  timeout *out[1];
  CHECK(tq_wait(&q, 2000 * MS));
  CHECK(drain(&q, out, 1) == 1);
  tq_stats before, after;
  sleep_ns(20 * MS);
  tq_get_stats(&q, &before);
  sleep_ns(300 * MS);
  tq_get_stats(&q, &after);
  CHECK(after.worker_wakeups == before.worker_wakeups);
  CHECK(tq_schedule(&q, &far, 60000 * MS, 0) == TQ_OK);
  sleep_ns(20 * MS);
  tq_get_stats(&q, &before);
  sleep_ns(300 * MS);
  tq_get_stats(&q, &after);
  CHECK(after.worker_wakeups == before.worker_wakeups);
  tq_destroy(&q);
}

/* Cancels racing with the worker: each timeout ends exactly one way. */
typedef struct race {
  timer_queue *q;
  timeout *t;
  size_t n;
  size_t cancelled;
} race;

static void *cancel_half(void *arg) {
  race *r = arg;
  for (size_t i = 0; i < r->n; i += 2)
    if (tq_cancel(&r->t[i])) r->cancelled++;
  return NULL;
}

static void test_cancel_races_worker(void) {
  enum { N = 20000 };
  timer_queue q;
  open_queue(&q, TICK_1MS, 256, false, 0);
  watch(&q);
  timeout *t = calloc(N, sizeof *t);
  for (size_t i = 0; i < N; i++) CHECK(tq_schedule(&q, &t[i], (i % 50) * MS / 10, 0) == TQ_OK);
  race r = {&q, t, N, 0};
  pthread_t canceller;
  pthread_create(&canceller, NULL, cancel_half, &r);
  size_t fired = 0;
  bool joined = false;
  while (tq_pending(&q) > 0 || !joined) {
    if (!joined) { pthread_join(canceller, NULL); joined = true; }
    tq_wait(&q, 100 * MS);
    uint64_t limit = tq_poll_begin(&q);
    timeout *due;
    while ((due = tq_pop_due(&q, limit))) { tq_finish(due, due->seq); fired++; }
  }
  CHECK(fired + r.cancelled == N);
  size_t done = 0, cancelled = 0;
  for (size_t i = 0; i < N; i++) {
    done += t[i].state == TIMEOUT_DONE;
    cancelled += t[i].state == TIMEOUT_CANCELLED;
  }
  CHECK(done == fired && cancelled == r.cancelled);
  tq_destroy(&q);
  free(t);
}

/* Reads the SigBlk mask of the one thread other than the main one. */
static unsigned long long other_thread_blocked_signals(void) {
  DIR *tasks = opendir("/proc/self/task");
  unsigned long long mask = 0;
  struct dirent *entry;
  while (tasks && (entry = readdir(tasks))) {
    if (entry->d_name[0] == '.' || atoi(entry->d_name) == getpid()) continue;
    char path[300], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", entry->d_name);
    FILE *status = fopen(path, "r");
    while (status && fgets(line, sizeof line, status))
      if (strncmp(line, "SigBlk:", 7) == 0) mask = strtoull(line + 7, NULL, 16);
    if (status) fclose(status);
  }
  if (tasks) closedir(tasks);
  return mask;
}

/* The worker blocks every signal, so process-directed ones go elsewhere. */
static void test_worker_blocks_signals(void) {
  timer_queue q;
  open_queue(&q, TICK_1MS, 64, false, 0);
  CHECK(tq_fd(&q) >= 0);                               /* starts the worker */
  timeout far = {0};
  CHECK(tq_schedule(&q, &far, 60000 * MS, 0) == TQ_OK);
  unsigned long long mask = other_thread_blocked_signals();
  CHECK(mask & (1ull << (SIGQUIT - 1)));
  CHECK(mask & (1ull << (SIGCHLD - 1)));
  tq_destroy(&q);
}

/* tq_stop finds what the caller does not hand it: due and wheel timeouts
 * (walking a wheel shared with another queue), in order; a never-firing one
 * left out stays inert. */
static void test_stop_finds_unheld(void) {
  timer_queue q, other;
  engine *eng = open_queue(&q, TICK_1MS, 8, true, 0);
  CHECK(tq_init(&other, eng, 0) == TQ_OK);
  timeout t[6], foreign, never;
  memset(t, 0, sizeof t);
  foreign = never = t[0];
  uint64_t delays_ms[6] = {900, 2, 40, 5000, 3, 7};
  for (int i = 0; i < 6; i++) CHECK(tq_schedule(&q, &t[i], delays_ms[i] * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&other, &foreign, 4 * MS, 0) == TQ_OK);
  CHECK(tq_schedule(&q, &never, ENGINE_NEVER, 0) == TQ_OK);
  engine_advance_manual(eng, 3 * MS);                  /* t[1], t[4] due */
  timeout *const held[] = {&t[2]};
  tq_ended ended;
  tq_stop(&q, held, 1, &ended);
  int order[] = {1, 4, 5, 2, 0, 3}, i = 0;
  for (timeout *n; (n = tq_ended_pop(&ended)); i++) {
    CHECK(i < 6 && n == &t[order[i]]);
    CHECK(n->state == TIMEOUT_CANCELLED);
  }
  CHECK(i == 6);
  CHECK(!tq_cancel(&never) && tq_pending(&q) == 0);
  CHECK(foreign.state == TIMEOUT_PENDING && tq_pending(&other) == 1);
  engine_advance_manual(eng, 1 * MS);
  timeout *out[1];
  CHECK(drain(&other, out, 1) == 1 && out[0] == &foreign);
  tq_destroy(&q);
  tq_destroy(&other);
}

/* Regression: tq_stop racing with tq_cancel on the same queue (a data race
 * on the stopped flag, and a use of the engine after stop released it). */
static void test_stop_races_cancel(void) {
  enum { N = 20000 };
  timer_queue q;
  open_queue(&q, TICK_1MS, 64, false, 0);
  timeout *t = calloc(N, sizeof *t);
  for (size_t i = 0; i < N; i++) CHECK(tq_schedule(&q, &t[i], 10000 * MS, 0) == TQ_OK);
  race r = {&q, t, N, 0};
  pthread_t canceller;
  pthread_create(&canceller, NULL, cancel_half, &r);
  sleep_ns(MS / 5);
  tq_ended ended;
  tq_stop(&q, NULL, 0, &ended);                      /* found by a wheel walk */
  pthread_join(canceller, NULL);
  size_t returned = 0;
  while (tq_ended_pop(&ended)) returned++;
  CHECK(returned + r.cancelled == N);
  CHECK(tq_schedule(&q, &t[0], 0, 0) == TQ_STOPPED);
  tq_destroy(&q);
  CHECK(!tq_cancel(&t[1]) && tq_pending(&q) == 0);  /* destroyed: acts stopped */
  free(t);
}

/* A timer whose worker runs in the parent keeps working in a forked child. */
static __attribute__((unused)) void test_fork_child_gets_new_worker(void) {
  timer_queue q;
  open_queue(&q, TICK_1MS, 64, false, 0);
  timeout parent_far = {0}, child_soon = {0};
  CHECK(tq_schedule(&q, &parent_far, 60000 * MS, 0) == TQ_OK);   /* worker runs */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);                                     /* a hang fails the test */
    bool ok = tq_schedule(&q, &child_soon, 5 * MS, 0) == TQ_OK;
    struct pollfd p = {.fd = tq_fd(&q), .events = POLLIN};
    ok = ok && poll(&p, 1, 5000) == 1;             /* only the worker signals */
    timeout *out[2];
    ok = ok && drain(&q, out, 2) == 1 && out[0] == &child_soon;
    tq_destroy(&q);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(tq_pending(&q) == 1);                      /* the parent is untouched */
  tq_destroy(&q);
}

/* tq_reset re-arms from any state with a new seq; a run it interrupts is no
 * longer finished; a hand-off it overtakes is void; max_pending counts it
 * only when it was not pending. */
static void test_reset(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 2);
  timeout a = {0}, b = {0}, c = {0};
  CHECK(tq_schedule(&q, &a, 30 * MS, 0) == TQ_OK && a.period_ns == 30 * MS);
  CHECK(tq_schedule(&q, &b, 30 * MS, 0) == TQ_OK);
  uint64_t first_seq = a.seq;
  CHECK(tq_reset(&a, 50 * MS) == TQ_OK && a.seq > b.seq && tq_pending(&q) == 2);
  CHECK(tq_deadline(&a) == 50 * MS && tq_next_due(&q) == 30 * MS);
  engine_advance_manual(eng, 30 * MS);                       /* b due */
  CHECK(tq_reset(&b, 0) == TQ_OK && b.state == TIMEOUT_DUE && b.seq > first_seq);
  uint64_t limit = tq_poll_begin(&q);
  timeout *run = tq_pop_due(&q, limit);
  CHECK(run == &b && tq_pending(&q) == 1);
  uint64_t run_seq = b.seq;
  CHECK(tq_reset(&b, 10 * MS) == TQ_OK && tq_pending(&q) == 2);   /* inside its own run */
  CHECK(tq_finish(&b, run_seq) && b.state == TIMEOUT_PENDING);     /* not ended by it */
  CHECK(tq_cancel(&b) && tq_pending(&q) == 1);
  CHECK(tq_schedule(&q, &c, 0, 0) == TQ_OK && tq_pending(&q) == 2);
  CHECK(tq_reset(&b, 0) == TQ_FULL && b.state == TIMEOUT_CANCELLED);  /* at max_pending */
  CHECK(tq_reset(&c, 5 * MS) == TQ_OK);                      /* pending: allowed at the cap */
  engine_advance_manual(eng, 5 * MS);
  timeout *handed = tq_hand_due(&q, tq_poll_begin(&q));
  CHECK(handed == &c);
  uint64_t handed_seq = c.seq;
  CHECK(tq_reset(&c, 1 * MS) == TQ_OK && !tq_start(&c, handed_seq) && tq_pending(&q) == 2);
  timeout *const held[] = {&a, &b, &c};
  tq_ended ended;
  tq_stop(&q, held, 3, &ended);
  CHECK(tq_ended_pop(&ended) == &c && tq_ended_pop(&ended) == &a && a.state == TIMEOUT_CANCELLED);
  CHECK(tq_ended_pop(&ended) == NULL);
  CHECK(tq_reset(&a, 0) == TQ_STOPPED);
  tq_destroy(&q);
}

/* A periodic timeout reset while it runs beats from the new deadline on. */
static void test_reset_periodic(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout p = {0};
  CHECK(tq_schedule(&q, &p, 100 * MS, 100 * MS) == TQ_OK && p.periodic);
  engine_advance_manual(eng, 100 * MS);
  timeout *run = tq_pop_due(&q, tq_poll_begin(&q));
  uint64_t run_seq = p.seq;
  CHECK(run == &p && tq_reset(&p, 30 * MS) == TQ_OK && tq_pending(&q) == 1);
  CHECK(tq_finish(&p, run_seq) && tq_deadline(&p) == 130 * MS);
  engine_advance_manual(eng, 30 * MS);
  run = tq_pop_due(&q, tq_poll_begin(&q));
  CHECK(run == &p && tq_finish(&p, p.seq) && tq_deadline(&p) == 230 * MS);
  tq_destroy(&q);
}

/* tq_select_pending keeps what tq_pending counts, in (deadline, seq) order. */
static void test_select_pending(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout t[5] = {0};
  uint64_t delays[5] = {40 * MS, ENGINE_NEVER, 20 * MS, 40 * MS, 10 * MS};
  for (int i = 0; i < 5; i++) CHECK(tq_schedule(&q, &t[i], delays[i], 0) == TQ_OK);
  CHECK(tq_cancel(&t[4]));
  engine_advance_manual(eng, 20 * MS);                       /* t[2] due */
  timeout *held[5] = {&t[0], &t[1], &t[2], &t[3], &t[4]};
  size_t kept;
  CHECK(tq_select_pending(&q, held, 5, &kept) == TQ_OK && kept == tq_pending(&q) && kept == 4);
  CHECK(held[0] == &t[2] && held[1] == &t[0] && held[2] == &t[3] && held[3] == &t[1]);
  tq_destroy(&q);
}

/* The manual clock steps to each deadline of the queue, never past until. */
static void test_step_manual(void) {
  timer_queue q;
  open_queue(&q, 10 * MS, 8, true, 0);
  timeout a = {0}, b = {0};
  bool due;
  CHECK(tq_schedule(&q, &a, 7 * MS, 0) == TQ_OK && tq_schedule(&q, &b, 3001 * MS, 0) == TQ_OK);
  CHECK(tq_step_manual(&q, 1000 * MS, &due) == 7 * MS && due && a.state == TIMEOUT_DUE);
  CHECK(tq_step_manual(&q, 1000 * MS, &due) == 7 * MS && due);   /* not while one is due */
  CHECK(tq_pop_due(&q, tq_poll_begin(&q)) == &a);
  CHECK(tq_step_manual(&q, 1000 * MS, &due) == 1000 * MS && !due && b.state == TIMEOUT_PENDING);
  CHECK(tq_step_manual(&q, 9000 * MS, &due) == 3001 * MS && due && b.state == TIMEOUT_DUE);
  CHECK(tq_step_manual(&q, 10 * MS, &due) == 3001 * MS);          /* never backwards */
  tq_stop(&q, NULL, 0, NULL);
  CHECK(tq_step_manual(&q, 9000 * MS, &due) == 3001 * MS && !due);
  tq_destroy(&q);
}

/* Percentiles of the lateness histogram: nearest rank, within 1/16. */
static void test_late_percentiles(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  CHECK(tq_late_percentile(&q, 50) == 0);
  static timeout t[100];
  for (int i = 0; i < 100; i++) CHECK(tq_schedule(&q, &t[i], (uint64_t)(i + 1) * MS, 0) == TQ_OK);
  engine_advance_manual(eng, 1000 * MS);       /* lateness 999, 998, ... 900 ms */
  timeout *out[100];
  CHECK(drain(&q, out, 100) == 100);
  uint64_t p50 = tq_late_percentile(&q, 50), p99 = tq_late_percentile(&q, 99);
  CHECK(p50 >= 949 * MS - 949 * MS / 16 && p50 <= 949 * MS + 949 * MS / 16);
  CHECK(p99 >= 998 * MS - 998 * MS / 16 && p99 <= 998 * MS + 998 * MS / 16);
  CHECK(tq_late_percentile(&q, 1) <= p50);
  timeout on_time = {0};
  CHECK(tq_schedule(&q, &on_time, 0, 0) == TQ_OK && drain(&q, out, 1) == 1);
  CHECK(q.lateness.count[0] == 1);                           /* exactly 0 */
  tq_destroy(&q);
}

/* Resets race the worker: each moves a timeout out of the wheel or the due
 * list (or re-arms one that ran) while the worker collects. Nothing runs
 * before its deadline, and once the resets end everything drains. */
static void test_reset_races_worker(void) {
  enum { COUNT = 256, ROUNDS = 4000 };
  static timeout t[COUNT];
  memset(t, 0, sizeof t);
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 16, false, 0);
  watch(&q);
  for (int i = 0; i < COUNT; i++) CHECK(tq_schedule(&q, &t[i], (uint64_t)(i % 4) * MS, 0) == TQ_OK);
  uint32_t rng = 12345;
  uint64_t fired = 0;
  for (int round = 0; round < ROUNDS; round++) {
    rng = rng * 1103515245u + 12345u;
    CHECK(tq_reset(&t[(rng >> 8) % COUNT], (uint64_t)((rng >> 20) % 3) * MS) == TQ_OK);
    if (round % 64 == 0) {
      uint64_t limit = tq_poll_begin(&q);
      timeout *due;
      while ((due = tq_pop_due(&q, limit))) {
        CHECK(engine_now(eng) >= due->deadline_ns);
        tq_finish(due, due->seq);
        fired++;
      }
    }
  }
  while (tq_pending(&q) > 0) {
    tq_wait(&q, 100 * MS);
    uint64_t limit = tq_poll_begin(&q);
    timeout *due;
    while ((due = tq_pop_due(&q, limit))) {
      CHECK(engine_now(eng) >= due->deadline_ns);
      tq_finish(due, due->seq);
      fired++;
    }
  }
  tq_stats stats;
  tq_get_stats(&q, &stats);
  CHECK(stats.fired == fired && stats.pending == 0 && stats.due == 0);
  for (int i = 0; i < COUNT; i++) CHECK(timeout_state(&t[i]) == TIMEOUT_DONE);
  tq_destroy(&q);
}

/* The drain's step: finish one task and take the next under one lock. */
static void test_finish_and_pop(void) {
  timer_queue q;
  engine *eng = open_queue(&q, 10 * MS, 8, true, 0);
  timeout p = {0}, a = {0};
  CHECK(tq_schedule(&q, &p, 10 * MS, 10 * MS) == TQ_OK && tq_schedule(&q, &a, 10 * MS, 0) == TQ_OK);
  engine_advance_manual(eng, 10 * MS);
  uint64_t limit = tq_poll_begin(&q);
  CHECK(tq_pop_due(&q, limit) == &p);
  bool held = false;
  CHECK(tq_finish_and_pop(&p, p.seq, &held, limit) == &a && held && p.state == TIMEOUT_PENDING);
  CHECK(a.state == TIMEOUT_RUNNING && tq_deadline(&p) == 20 * MS);
  CHECK(tq_finish_and_pop(&a, a.seq, &held, limit) == NULL && !held && a.state == TIMEOUT_DONE);
  CHECK(tq_pending(&q) == 1);
  tq_destroy(&q);
}

/* Nobody watches the fd: the worker never wakes, and the queue's own calls
 * bring it up to date (wait, state, the first tq_fd). */
static void test_unwatched_queue_drives_itself(void) {
  timer_queue q;
  engine *eng = open_queue(&q, TICK_1MS, 64, false, 0);
  timeout soon = {0}, later = {0};
  CHECK(tq_schedule(&q, &soon, 5 * MS, 0) == TQ_OK);
  sleep_ns(30 * MS);
  CHECK(timeout_state(&soon) == TIMEOUT_DUE);             /* collected on reading */
  timeout *out[2];
  CHECK(drain(&q, out, 2) == 1 && out[0] == &soon);
  CHECK(tq_schedule(&q, &later, 20 * MS, 0) == TQ_OK);
  CHECK(tq_wait(&q, 2000 * MS));                           /* the waiter drives */
  CHECK(engine_now(eng) >= later.deadline_ns);
  CHECK(drain(&q, out, 2) == 1 && out[0] == &later);
  tq_stats stats;
  tq_get_stats(&q, &stats);
  CHECK(stats.worker_wakeups == 0);
  CHECK(tq_schedule(&q, &soon, 5 * MS, 0) == TQ_OK);
  sleep_ns(30 * MS);
  CHECK(fd_readable(tq_fd(&q)));                           /* collected when first watched */
  CHECK(drain(&q, out, 2) == 1);
  tq_destroy(&q);
}

/* Another thread arms an earlier timeout while a thread waits: the waiter
 * wakes for it, not at the later deadline it went to sleep for. */
typedef struct arming {
  timer_queue *q;
  timeout *t;
} arming;

static void *arm_soon(void *arg) {
  arming *a = arg;
  sleep_ns(20 * MS);
  CHECK(tq_schedule(a->q, a->t, 10 * MS, 0) == TQ_OK);
  return NULL;
}

static void test_waiter_wakes_for_earlier_arming(void) {
  timer_queue q;
  open_queue(&q, TICK_1MS, 8192, false, 0);   /* late's tick is the next event */
  timeout late = {0}, early = {0};
  CHECK(tq_schedule(&q, &late, 3000 * MS, 0) == TQ_OK);
  arming a = {&q, &early};
  pthread_t armer;
  pthread_create(&armer, NULL, arm_soon, &a);
  CHECK(tq_wait(&q, 10000 * MS));
  pthread_join(armer, NULL);
  timeout *out[2];
  CHECK(drain(&q, out, 2) == 1 && out[0] == &early);      /* late is not due yet */
  tq_destroy(&q);
}

static const test_case tests[] = {
  {"manual_order_and_boundaries", test_manual_order_and_boundaries},
  {"manual_cancel_due_and_stop", test_manual_cancel_due_and_stop},
  {"cancel_from_everywhere", test_cancel_from_everywhere},
  {"hand_off_and_next_due", test_hand_off_and_next_due},
  {"reset", test_reset},
  {"finish_and_pop", test_finish_and_pop},
  {"reset_periodic", test_reset_periodic},
  {"select_pending", test_select_pending},
  {"step_manual", test_step_manual},
  {"late_percentiles", test_late_percentiles},
  {"due_ahead_in_pop_order", test_due_ahead_in_pop_order},
  {"poll_begin_zero_when_nothing_due", test_poll_begin_zero_when_nothing_due},
  {"max_pending", test_max_pending},
  {"due_at_rounds_up_to_tick", test_due_at_rounds_up_to_tick},
  {"periodic_skips_missed_beats", test_periodic_skips_missed_beats},
  {"large_batches_in_order", test_large_batches_in_order},
  {"worker_fires_in_order", test_worker_fires_in_order},
  {"unwatched_queue_drives_itself", test_unwatched_queue_drives_itself},
  {"waiter_wakes_for_earlier_arming", test_waiter_wakes_for_earlier_arming},
  {"worker_signals_fd", test_worker_signals_fd},
  {"idle_worker_sleeps", test_idle_worker_sleeps},
  {"cancel_races_worker", test_cancel_races_worker},
  {"reset_races_worker", test_reset_races_worker},
  {"stop_finds_unheld", test_stop_finds_unheld},
  {"stop_races_cancel", test_stop_races_cancel},
  {"worker_blocks_signals", test_worker_blocks_signals},
#ifndef __SANITIZE_THREAD__   /* TSan cannot start threads after a fork */
  {"fork_child_gets_new_worker", test_fork_child_gets_new_worker},
#endif
#ifdef CAN_CAP_ADDRESS_SPACE
  {"batch_without_sort_memory", test_batch_without_sort_memory},
#endif
};

int main(int argc, char **argv) {
#ifdef CAN_CAP_ADDRESS_SPACE
  if (argc == 2 && strcmp(argv[1], WITHOUT_SORT_MEMORY) == 0) {
    batch_without_sort_memory();
    return checks_failed ? 1 : 0;
  }
#endif
  (void)argc;
  (void)argv;
  return run_tests("engine", tests, sizeof tests / sizeof tests[0]);
}
