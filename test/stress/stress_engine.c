/*
 * stress_engine.c — the engine under concurrent load, for ThreadSanitizer.
 *
 * One engine on the real clock (1 ms ticks, a small wheel so that timeouts
 * cascade), one timer_queue, several producer threads and one or more
 * consumer threads:
 *
 *   producers  schedule one-shots (0..50 ms, a few far away or never) and
 *              periodic timeouts (short intervals) from their own pools, and
 *              cancel random timeouts of their own and of the other producers;
 *   the worker ticks the wheel (when the queue's fd is watched; in the last
 *              case it is not, and the consumers' own calls do);
 *   consumers  drain the queue with tq_wait / tq_poll_begin / tq_pop_due /
 *              tq_finish;
 *   at the end tq_stop hands back what is still pending.
 *
 * Every way a timeout can end is recorded with C11 atomics and checked: each
 * scheduled one-shot ends exactly one way (ran once, cancelled, or returned
 * by tq_stop), nothing runs before its deadline, periodic timeouts end by
 * cancel or stop, and the totals match tq_get_stats.
 *
 * Ownership (engine.h): the caller keeps a timeout alive and does not
 * re-schedule it while the engine holds it. Here a one-shot is free again
 * once tq_cancel returned true or its tq_finish returned false. A periodic
 * one cancelled while a consumer runs it is still in that consumer's hands
 * until tq_finish, so it is re-used only after every consumer has passed an
 * idle point (holding no timeout) since the cancel. Each item has a mutex
 * that serialises the caller's own tq_schedule / tq_cancel on it, so a
 * producer never cancels a timeout that another one is re-scheduling.
 *
 * Runs ~5 s by default; STRESS_SECONDS=N runs about N s in all.
 * Prints "stress_engine: N passed, N failed"; exits non-zero on failure.
 *
 *   make build/tsan/stress_engine     (with the engine's files: every
 *                                      src file but the binding's, lhwt*.c)
 *   TSAN_OPTIONS=halt_on_error=1 build/tsan/stress_engine
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"

#define MS UINT64_C(1000000)
#define US UINT64_C(1000)

#define MAX_PRODUCERS 8
#define MAX_CONSUMERS 4
#define ONESHOT_POOL 256          /* per producer */
#define PERIODIC_POOL 32          /* per producer */

static atomic_int checks_failed;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      atomic_fetch_add(&checks_failed, 1);                                     \
    }                                                                          \
  } while (0)

/* Like CHECK, but rate-limited: for checks inside the hot loops. */
#define CHECK_HOT(cond, counter)                                               \
  do {                                                                         \
    if (!(cond)) {                                                             \
      if (atomic_fetch_add(&(counter), 1) < 5)                                 \
        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      atomic_fetch_add(&checks_failed, 1);                                     \
    }                                                                          \
  } while (0)

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  nanosleep(&ts, NULL);
}

static uint64_t rng_next(uint64_t *s) {          /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * UINT64_C(2685821657736338717);
}

/* ---- items: a timeout and how its current incarnation ends ---------------- */

enum item_status {
  ITEM_FREE = 0,       /* never scheduled, or ended and free to re-use */
  ITEM_ARMED,          /* scheduled: the engine holds it */
  ITEM_RETIRED,        /* periodic, cancelled: may still be in a consumer */
  ITEM_STOPPED         /* handed back by tq_stop */
};

typedef struct item {
  timeout t;                           /* first: a timeout * is an item * */
  pthread_mutex_t mu;                  /* the caller's schedule vs cancel */
  bool periodic;
  int producer;
  atomic_int status;                   /* enum item_status */
  atomic_uint_fast64_t runs;           /* pops of the current incarnation */
  /* Periodic, ITEM_RETIRED (under mu): runs seen right after the cancel and
   * each consumer's idle count then. */
  uint64_t runs_at_cancel;
  uint64_t idle_at_cancel[MAX_CONSUMERS];
} item;

static item *item_of(timeout *t) { return (item *)(void *)t; }

typedef struct config {
  const char *name;
  uint32_t wheel_size;
  int producers;
  int consumers;
  bool watch_fd;                       /* the worker drives the wheel (tq_fd) */
  double share;                        /* of STRESS_SECONDS */
} config;

typedef struct tally {
  atomic_uint_fast64_t oneshot_scheduled, oneshot_ran, oneshot_cancelled;
  atomic_uint_fast64_t periodic_scheduled, periodic_runs, periodic_cancelled;
  atomic_uint_fast64_t periodic_finish_false;  /* cancelled while running */
  atomic_uint_fast64_t cancel_calls, cancel_false, cross_cancels;
  atomic_uint_fast64_t polls, waits;
  /* failures, by kind (rate-limits the messages) */
  atomic_uint_fast64_t early, double_run, double_end, bad_state, reuse;
} tally;

typedef struct stress {
  const config *cfg;
  engine *eng;
  timer_queue q;
  item *pool[MAX_PRODUCERS];           /* ONESHOT_POOL + PERIODIC_POOL each */
  atomic_bool producers_stop, consumers_stop;
  atomic_uint_fast64_t idle[MAX_CONSUMERS];   /* consumer idle points */
  tally n;
} stress;

typedef struct worker_arg {
  stress *s;
  int id;
} worker_arg;

#define POOL_SIZE (ONESHOT_POOL + PERIODIC_POOL)

/* ---- producers ------------------------------------------------------------ */

static uint64_t pick_delay(uint64_t *rng) {
  uint64_t r = rng_next(rng) % 1000;
  if (r < 5) return ENGINE_NEVER;                      /* 0.5%: never */
  if (r < 20) return (1 + rng_next(rng) % 60) * 1000 * MS; /* 1.5%: 1..60 s */
  if (r < 60) return 0;                                /* 4%: at once */
  /* 0..50 ms with sub-tick jitter, so ticks are rounded up both ways */
  return rng_next(rng) % (50 * MS + 1);
}

/* The quiescence rule for re-using a cancelled periodic timeout. */
static bool consumers_let_go(stress *s, const item *it) {
  for (int c = 0; c < s->cfg->consumers; c++)
    if (atomic_load(&s->idle[c]) <= it->idle_at_cancel[c]) return false;
  return true;
}

/* Under it->mu. */
static void schedule_item(stress *s, item *it, uint64_t *rng) {
  int status = atomic_load(&it->status);
  if (status == ITEM_RETIRED) {
    if (!consumers_let_go(s, it)) return;
    /* At most the one pop that was in flight at the cancel came after it. */
    CHECK_HOT(atomic_load(&it->runs) <= it->runs_at_cancel + 1, s->n.reuse);
  } else if (status != ITEM_FREE) {
    return;
  }
  uint64_t delay = pick_delay(rng), interval = 0;
  if (it->periodic) {
    interval = (1 + rng_next(rng) % 5) * MS - rng_next(rng) % (MS / 2);
    if (delay == ENGINE_NEVER || delay > 50 * MS) delay = rng_next(rng) % (10 * MS);
  }
  atomic_store(&it->runs, 0);
  atomic_store(&it->status, ITEM_ARMED);       /* before a consumer can see it */
  int rc = tq_schedule(&s->q, &it->t, delay, interval);
  CHECK(rc == TQ_OK);
  if (rc != TQ_OK) {
    atomic_store(&it->status, ITEM_FREE);
    return;
  }
  if (it->periodic) atomic_fetch_add(&s->n.periodic_scheduled, 1);
  else atomic_fetch_add(&s->n.oneshot_scheduled, 1);
}

/* Under it->mu. */
static void cancel_item(stress *s, item *it) {
  if (atomic_load(&it->status) != ITEM_ARMED) return;
  atomic_fetch_add(&s->n.cancel_calls, 1);
  if (!tq_cancel(&it->t)) {
    atomic_fetch_add(&s->n.cancel_false, 1);
    return;
  }
  if (it->periodic) {
    it->runs_at_cancel = atomic_load(&it->runs);
    for (int c = 0; c < s->cfg->consumers; c++) it->idle_at_cancel[c] = atomic_load(&s->idle[c]);
    int armed = ITEM_ARMED;
    CHECK_HOT(atomic_compare_exchange_strong(&it->status, &armed, ITEM_RETIRED), s->n.double_end);
    atomic_fetch_add(&s->n.periodic_cancelled, 1);
  } else {
    /* cancel succeeds only before the pop: it never ran */
    CHECK_HOT(atomic_load(&it->runs) == 0, s->n.double_end);
    int armed = ITEM_ARMED;
    CHECK_HOT(atomic_compare_exchange_strong(&it->status, &armed, ITEM_FREE), s->n.double_end);
    atomic_fetch_add(&s->n.oneshot_cancelled, 1);
  }
}

static void *producer_main(void *arg) {
  worker_arg *a = arg;
  stress *s = a->s;
  item *own = s->pool[a->id];
  uint64_t rng = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(a->id + 1) ^ engine_monotonic_ns();
  if (!rng) rng = 1;
  for (uint64_t op = 0; !atomic_load(&s->producers_stop); op++) {
    uint64_t r = rng_next(&rng) % 100;
    item *it;
    if (r < 82) {                                      /* one-shot */
      it = &own[rng_next(&rng) % ONESHOT_POOL];
      pthread_mutex_lock(&it->mu);
      schedule_item(s, it, &rng);
      pthread_mutex_unlock(&it->mu);
    } else if (r < 85) {                               /* periodic */
      it = &own[ONESHOT_POOL + rng_next(&rng) % PERIODIC_POOL];
      pthread_mutex_lock(&it->mu);
      schedule_item(s, it, &rng);
      pthread_mutex_unlock(&it->mu);
    } else if (r < 95) {                               /* cancel one of ours */
      it = &own[rng_next(&rng) % POOL_SIZE];
      pthread_mutex_lock(&it->mu);
      cancel_item(s, it);
      pthread_mutex_unlock(&it->mu);
    } else {                                           /* someone else's */
      int other = (int)(rng_next(&rng) % (uint64_t)s->cfg->producers);
      it = &s->pool[other][rng_next(&rng) % POOL_SIZE];
      pthread_mutex_lock(&it->mu);
      if (other != a->id) atomic_fetch_add(&s->n.cross_cancels, 1);
      cancel_item(s, it);
      pthread_mutex_unlock(&it->mu);
    }
    if (op % 32 == 31) sleep_ns(rng_next(&rng) % (300 * US));
  }
  return NULL;
}

/* ---- consumers ------------------------------------------------------------ */

static void run_one(stress *s, timeout *t, uint64_t *rng) {
  uint64_t now = engine_now(s->eng);
  item *it = item_of(t);
  CHECK_HOT(now >= t->deadline_ns, s->n.early);
  uint64_t runs = atomic_fetch_add(&it->runs, 1) + 1;
  if (!it->periodic) {
    CHECK_HOT(runs == 1, s->n.double_run);
    CHECK_HOT(atomic_load(&it->status) == ITEM_ARMED, s->n.bad_state);
  }
  if (rng_next(rng) % 64 == 0) sleep_ns(rng_next(rng) % (200 * US));   /* a slow task */
  bool again = tq_finish(t, t->seq);
  if (!it->periodic) {
    CHECK_HOT(!again, s->n.bad_state);
    int armed = ITEM_ARMED;
    CHECK_HOT(atomic_compare_exchange_strong(&it->status, &armed, ITEM_FREE), s->n.double_end);
    atomic_fetch_add(&s->n.oneshot_ran, 1);         /* `it` is the owner's again */
  } else {
    atomic_fetch_add(&s->n.periodic_runs, 1);
    if (!again) atomic_fetch_add(&s->n.periodic_finish_false, 1);
  }
}

static void *consumer_main(void *arg) {
  worker_arg *a = arg;
  stress *s = a->s;
  uint64_t rng = UINT64_C(0xD1B54A32D192ED03) * (uint64_t)(a->id + 7) ^ engine_monotonic_ns();
  if (!rng) rng = 1;
  while (!atomic_load(&s->consumers_stop)) {
    atomic_fetch_add(&s->idle[a->id], 1);          /* holds no timeout here */
    if (rng_next(&rng) % 4 != 0) {
      atomic_fetch_add(&s->n.waits, 1);
      if (!tq_wait(&s->q, (1 + rng_next(&rng) % 10) * MS)) continue;
    } else {
      sleep_ns(rng_next(&rng) % (500 * US));
    }
    atomic_fetch_add(&s->n.polls, 1);
    uint64_t limit = tq_poll_begin(&s->q);
    timeout *t;
    while ((t = tq_pop_due(&s->q, limit))) run_one(s, t, &rng);
  }
  atomic_fetch_add(&s->idle[a->id], 1);
  return NULL;
}

/* ---- one run -------------------------------------------------------------- */

static double stress_seconds(void) {
  const char *env = getenv("STRESS_SECONDS");
  double seconds = env ? atof(env) : 5.0;
  return seconds > 0 ? seconds : 5.0;
}

static void run_stress(const config *cfg) {
  stress *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  if (!s) return;
  s->cfg = cfg;
  s->eng = engine_new(MS, cfg->wheel_size, false);
  CHECK(s->eng != NULL);
  if (!s->eng) { free(s); return; }
  CHECK(engine_wheel_size(s->eng) == cfg->wheel_size);
  CHECK(tq_init(&s->q, s->eng, 0) == TQ_OK);
  if (cfg->watch_fd) tq_fd(&s->q);
  for (int p = 0; p < cfg->producers; p++) {
    s->pool[p] = calloc(POOL_SIZE, sizeof(item));
    CHECK(s->pool[p] != NULL);
    if (!s->pool[p]) exit(2);
    for (int i = 0; i < POOL_SIZE; i++) {
      item *it = &s->pool[p][i];
      pthread_mutex_init(&it->mu, NULL);
      it->periodic = i >= ONESHOT_POOL;
      it->producer = p;
      atomic_init(&it->status, ITEM_FREE);
      atomic_init(&it->runs, 0);
    }
  }

  uint64_t started = engine_monotonic_ns();
  pthread_t producers[MAX_PRODUCERS], consumers[MAX_CONSUMERS];
  worker_arg pargs[MAX_PRODUCERS], cargs[MAX_CONSUMERS];
  for (int c = 0; c < cfg->consumers; c++) {
    cargs[c] = (worker_arg){s, c};
    CHECK(pthread_create(&consumers[c], NULL, consumer_main, &cargs[c]) == 0);
  }
  for (int p = 0; p < cfg->producers; p++) {
    pargs[p] = (worker_arg){s, p};
    CHECK(pthread_create(&producers[p], NULL, producer_main, &pargs[p]) == 0);
  }
  sleep_ns((uint64_t)(stress_seconds() * cfg->share * 1e9));
  atomic_store(&s->producers_stop, true);
  for (int p = 0; p < cfg->producers; p++) pthread_join(producers[p], NULL);
  sleep_ns(60 * MS);                 /* let the short ones fire and be run */
  atomic_store(&s->consumers_stop, true);
  for (int c = 0; c < cfg->consumers; c++) pthread_join(consumers[c], NULL);
  double elapsed = (double)(engine_monotonic_ns() - started) / 1e9;

  /* Quiet now: only the worker runs. What is still armed is pending. */
  uint64_t armed = 0;
  for (int p = 0; p < cfg->producers; p++)
    for (int i = 0; i < POOL_SIZE; i++) armed += atomic_load(&s->pool[p][i].status) == ITEM_ARMED;
  CHECK(tq_pending(&s->q) == armed);
  tq_stats before_stop;
  tq_get_stats(&s->q, &before_stop);   /* the worker's wake-ups, while alive */

  /* tq_stop hands back every pending timeout: each must be armed. */
  size_t items = (size_t)cfg->producers * POOL_SIZE, count = 0;
  timeout **held = calloc(items, sizeof *held);
  CHECK(held != NULL);
  if (!held) exit(2);
  for (int p = 0; p < cfg->producers; p++)
    for (int i = 0; i < POOL_SIZE; i++) held[count++] = &s->pool[p][i].t;
  tq_ended ended;
  tq_stop(&s->q, held, count, &ended);  /* releases the engine's last reference */
  free(held);
  uint64_t stopped_oneshot = 0, stopped_periodic = 0, stopped_never_ran = 0;
  uint64_t last_deadline = 0;
  for (timeout *n; (n = tq_ended_pop(&ended));) {
    item *it = item_of(n);
    int was = ITEM_ARMED;
    CHECK(atomic_compare_exchange_strong(&it->status, &was, ITEM_STOPPED));
    CHECK(it->t.deadline_ns >= last_deadline);                 /* sorted */
    last_deadline = it->t.deadline_ns;
    uint64_t runs = atomic_load(&it->runs);
    if (it->periodic) {
      stopped_periodic++;
      CHECK(it->t.state == (runs ? TIMEOUT_DONE : TIMEOUT_CANCELLED));
    } else {
      stopped_oneshot++;
      CHECK(runs == 0 && it->t.state == TIMEOUT_CANCELLED);
    }
    stopped_never_ran += it->t.state == TIMEOUT_CANCELLED;
  }
  CHECK(stopped_oneshot + stopped_periodic == armed);

  /* Every incarnation ended: nothing is left armed; cancelled periodic ones
   * ran at most once more (in flight) after their cancel. */
  for (int p = 0; p < cfg->producers; p++)
    for (int i = 0; i < POOL_SIZE; i++) {
      item *it = &s->pool[p][i];
      int status = atomic_load(&it->status);
      CHECK(status != ITEM_ARMED);
      if (status == ITEM_RETIRED) CHECK(atomic_load(&it->runs) <= it->runs_at_cancel + 1);
    }

  tally *n = &s->n;
  uint64_t os = atomic_load(&n->oneshot_scheduled), ran = atomic_load(&n->oneshot_ran);
  uint64_t oc = atomic_load(&n->oneshot_cancelled);
  uint64_t ps = atomic_load(&n->periodic_scheduled), pr = atomic_load(&n->periodic_runs);
  uint64_t pc = atomic_load(&n->periodic_cancelled);
  CHECK(os == ran + oc + stopped_oneshot);
  CHECK(ps == pc + stopped_periodic);
  CHECK(atomic_load(&n->periodic_finish_false) <= pc);
  CHECK(atomic_load(&n->early) == 0);
  CHECK(atomic_load(&n->double_run) == 0);
  CHECK(atomic_load(&n->double_end) == 0);
  CHECK(atomic_load(&n->bad_state) == 0);
  CHECK(atomic_load(&n->reuse) == 0);

  tq_stats st;
  tq_get_stats(&s->q, &st);
  CHECK(st.fired == ran + pr);
  CHECK(st.cancelled == oc + pc + stopped_never_ran);
  CHECK(st.pending == 0 && st.due == 0);
  CHECK(cfg->watch_fd ? before_stop.worker_wakeups > 0 : before_stop.worker_wakeups == 0);

  printf("%s: wheel %u, %d producers, %d consumers, %.2f s\n", cfg->name,
         cfg->wheel_size, cfg->producers, cfg->consumers, elapsed);
  printf("  one-shot: %llu scheduled = %llu ran + %llu cancelled + %llu stopped\n",
         (unsigned long long)os, (unsigned long long)ran, (unsigned long long)oc,
         (unsigned long long)stopped_oneshot);
  printf("  periodic: %llu scheduled = %llu cancelled + %llu stopped; %llu runs, "
         "%llu cancelled while running\n",
         (unsigned long long)ps, (unsigned long long)pc, (unsigned long long)stopped_periodic,
         (unsigned long long)pr, (unsigned long long)atomic_load(&n->periodic_finish_false));
  printf("  cancel calls %llu (%llu false, %llu cross-producer), polls %llu, waits %llu\n",
         (unsigned long long)atomic_load(&n->cancel_calls),
         (unsigned long long)atomic_load(&n->cancel_false),
         (unsigned long long)atomic_load(&n->cross_cancels),
         (unsigned long long)atomic_load(&n->polls), (unsigned long long)atomic_load(&n->waits));
  printf("  stats: fired %llu, cancelled %llu, ticks %llu, late_max %.3f ms, worker wakeups %llu\n",
         (unsigned long long)st.fired, (unsigned long long)st.cancelled,
         (unsigned long long)st.ticks, (double)st.late_max_ns / 1e6,
         (unsigned long long)before_stop.worker_wakeups);

  tq_destroy(&s->q);
  for (int p = 0; p < cfg->producers; p++) {
    for (int i = 0; i < POOL_SIZE; i++) pthread_mutex_destroy(&s->pool[p][i].mu);
    free(s->pool[p]);
  }
  free(s);
}

static const config cases[] = {
  {"stress_wheel64", 64, 4, 1, true, 0.4},
  {"stress_wheel1_two_consumers", 1, 4, 2, true, 0.3},
  {"stress_wheel64_consumers_drive", 64, 4, 2, false, 0.3},
};

int main(void) {
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int before = atomic_load(&checks_failed);
    run_stress(&cases[i]);
    if (atomic_load(&checks_failed) == before) passed++;
    else { failed++; fprintf(stderr, "FAILED: %s\n", cases[i].name); }
  }
  printf("stress_engine: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
