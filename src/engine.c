/*
 * engine.c — an engine: the monotonic clock and the tick's reciprocal, the
 * registry of engines (shared engines, fork()) and the worker thread. See
 * engine.h; the layout is in engine_internal.h.
 */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <signal.h>
#include <stdlib.h>

/* ---- clock ---------------------------------------------------------- */

uint64_t engine_monotonic_ns(void) { return monotonic_ns(); }

uint64_t engine_epoch_ns(const engine *eng) { return eng->epoch_ns; }

uint64_t engine_now(engine *eng) { return clock_now_ns(eng); }

struct timespec monotonic_timespec(engine *eng, uint64_t at_ns) {
  uint64_t abs_ns = saturating_add(eng->epoch_ns, at_ns);
  return (struct timespec){.tv_sec = (time_t)(abs_ns / NS_PER_SEC),
                           .tv_nsec = (long)(abs_ns % NS_PER_SEC)};
}

int init_monotonic_cond(pthread_cond_t *cond) {
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr)) return -1;
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int failed = pthread_cond_init(cond, &attr);
  pthread_condattr_destroy(&attr);
  return failed ? -1 : 0;
}

/* ---- the list of all engines: fork() and sharing ------------------------ */
/* Lock order: all_engines_lock, then an engine's lock. */

static pthread_mutex_t all_engines_lock = PTHREAD_MUTEX_INITIALIZER;
static engine *all_engines;
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

static void before_fork(void) {
  pthread_mutex_lock(&all_engines_lock);
  for (engine *e = all_engines; e; e = e->fork_next) pthread_mutex_lock(&e->lock);
}

static void after_fork_in_parent(void) {
  for (engine *e = all_engines; e; e = e->fork_next) pthread_mutex_unlock(&e->lock);
  pthread_mutex_unlock(&all_engines_lock);
}

/* The worker does not exist in the child: forget it (while an fd is watched,
 * the next timeout or fd() starts a new one) and give the child fresh
 * synchronisation objects. */
static void after_fork_in_child(void) {
  for (engine *e = all_engines; e; e = e->fork_next) {
    e->worker_started = e->stopping = e->joining = false;
    e->worker_wake_ns = ENGINE_NEVER;
    pthread_mutex_init(&e->lock, NULL);
    init_monotonic_cond(&e->worker_cond);
  }
  pthread_mutex_init(&all_engines_lock, NULL);
}

static void install_fork_handlers(void) {
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

static void list_engine(engine *eng) {           /* all_engines_lock held */
  eng->fork_next = all_engines;
  if (all_engines) all_engines->fork_prev = eng;
  all_engines = eng;
}

static void unlist_engine(engine *eng) {         /* all_engines_lock held */
  if (eng->fork_prev) eng->fork_prev->fork_next = eng->fork_next;
  else all_engines = eng->fork_next;
  if (eng->fork_next) eng->fork_next->fork_prev = eng->fork_prev;
}

/* ---- engine ------------------------------------------------------------ */

/* A schedule turns its deadline into a tick on its way to the wheel, and so
 * does each timeout that an expiry moves down a level. A 64-bit divide there
 * costs about 6 ns on this project's VMs, a multiply by a reciprocal made
 * once per engine about 2: ticks_in (engine_internal.h) multiplies. With
 * l = ceil(log2 tick_ns) and m = ceil(2^(63+l) / tick_ns),
 * floor(m n / 2^(63+l)) = floor(n / tick_ns) for every n < 2^63 (Granlund and
 * Montgomery 1994, theorem 4.2). The engine divides nothing above 2^63: a time
 * and a delay are each at most ENGINE_MAX_DELAY_NS. */
#ifdef __SIZEOF_INT128__
static void set_tick(engine *eng, uint64_t tick_ns) {
  unsigned l = 64 - (unsigned)__builtin_clzll(tick_ns - 1);    /* tick_ns > 1 */
  eng->tick_ns = tick_ns;
  eng->tick_reciprocal = (uint64_t)((((uint128)1 << (63 + l)) + tick_ns - 1) / tick_ns);
  eng->tick_shift = l - 1;
}
#else
static void set_tick(engine *eng, uint64_t tick_ns) { eng->tick_ns = tick_ns; }
#endif

/* The wheel's wheel_deadline_fn. */
static uint64_t node_deadline_tick(const wheel_node *n, const void *eng) {
  return deadline_tick(eng, ((const timeout *)(const void *)n)->deadline_ns);
}

/* A new engine, not yet listed. */
static engine *create_engine(uint64_t tick_ns, uint32_t wheel_size, bool manual_clock) {
  engine *eng = calloc(1, sizeof *eng);
  if (!eng) return NULL;
  if (wheel_init(&eng->wheel, wheel_size, node_deadline_tick, eng)) goto no_wheel;
  if (pthread_mutex_init(&eng->lock, NULL)) goto no_lock;
  if (init_monotonic_cond(&eng->worker_cond)) goto no_cond;
  set_tick(eng, tick_ns < ENGINE_TICK_MIN_NS ? ENGINE_TICK_MIN_NS : tick_ns);
  eng->manual_clock = manual_clock;
  eng->epoch_ns = manual_clock ? 0 : engine_monotonic_ns();
  eng->worker_wake_ns = ENGINE_NEVER;
  eng->refs = 1;
  return eng;
no_cond:
  pthread_mutex_destroy(&eng->lock);
no_lock:
  wheel_free(&eng->wheel);
no_wheel:
  free(eng);
  return NULL;
}

/* Joins the worker. A queue whose fd was watched meanwhile gets a new one; a
 * second caller while a join is under way has nothing to do. */
void stop_worker(engine *eng) {
  pthread_mutex_lock(&eng->lock);
  bool joinable = eng->worker_started && !eng->joining;
  if (joinable) {
    eng->stopping = true;
    eng->joining = true;
    pthread_cond_signal(&eng->worker_cond);
  }
  pthread_mutex_unlock(&eng->lock);
  if (!joinable) return;
  pthread_join(eng->worker, NULL);
  pthread_mutex_lock(&eng->lock);
  eng->stopping = eng->joining = eng->worker_started = false;
  eng->worker_wake_ns = ENGINE_NEVER;
  ensure_worker_locked(eng);
  pthread_mutex_unlock(&eng->lock);
}

engine *engine_new(uint64_t tick_ns, uint32_t wheel_size, bool manual_clock) {
  pthread_once(&fork_handlers_once, install_fork_handlers);
  engine *eng = create_engine(tick_ns, wheel_size, manual_clock);
  if (!eng) return NULL;
  pthread_mutex_lock(&all_engines_lock);
  list_engine(eng);
  pthread_mutex_unlock(&all_engines_lock);
  return eng;
}

engine *engine_acquire_shared(uint64_t tick_ns, uint32_t wheel_size) {
  pthread_once(&fork_handlers_once, install_fork_handlers);
  uint32_t slots = wheel_round_size(wheel_size);
  pthread_mutex_lock(&all_engines_lock);
  engine *eng = all_engines;
  while (eng && !(eng->shared && eng->tick_ns == tick_ns && eng->wheel.size == slots))
    eng = eng->fork_next;
  if (eng) {
    pthread_mutex_lock(&eng->lock);
    eng->refs++;
    pthread_mutex_unlock(&eng->lock);
  } else if ((eng = create_engine(tick_ns, wheel_size, false))) {
    eng->shared = true;
    list_engine(eng);
  }
  pthread_mutex_unlock(&all_engines_lock);
  return eng;
}

/* The last reference unlists the engine under all_engines_lock, so that
 * engine_acquire_shared never finds an engine on its way out. */
void engine_release(engine *eng) {
  pthread_mutex_lock(&all_engines_lock);
  pthread_mutex_lock(&eng->lock);
  bool last = --eng->refs == 0;
  pthread_mutex_unlock(&eng->lock);
  if (last) unlist_engine(eng);
  pthread_mutex_unlock(&all_engines_lock);
  if (!last) return;
  stop_worker(eng);
  pthread_cond_destroy(&eng->worker_cond);
  pthread_mutex_destroy(&eng->lock);
  wheel_free(&eng->wheel);
  free(eng->sort_scratch);
  free(eng->sorted);
  free(eng->bucket_ends);
  free(eng);
}

uint32_t engine_wheel_size(const engine *eng) { return eng->wheel.size; }

/* ---- worker ---------------------------------------------------------- */

/* Brings the wheel up to date for the queues whose fd is watched, and says
 * at which tick to do so next; false: sleep until signalled. With no fd
 * watched there is nothing to do: each queue's own calls collect for it, so
 * a wait()/poll() loop or a host driven by next_due() costs no wake-ups
 * of this thread. */
static bool drive_locked(engine *eng, uint64_t *next_tick) {
  if (eng->watched_queues == 0) return false;
  collect_locked(eng, engine_now(eng));
  return wheel_next_event(&eng->wheel, next_tick);
}

static void *worker_main(void *arg) {
  engine *eng = arg;
  pthread_mutex_lock(&eng->lock);
  while (!eng->stopping) {
    uint64_t next_tick;
    if (drive_locked(eng, &next_tick)) {
      eng->worker_wake_ns = next_tick * eng->tick_ns;
      struct timespec until = monotonic_timespec(eng, eng->worker_wake_ns);
      pthread_cond_timedwait(&eng->worker_cond, &eng->lock, &until);
    } else {
      eng->worker_wake_ns = ENGINE_NEVER;
      pthread_cond_wait(&eng->worker_cond, &eng->lock);
    }
    eng->worker_wakeups++;
  }
  pthread_mutex_unlock(&eng->lock);
  return NULL;
}

/* Starts the worker, once a queue's fd is watched: only such a queue needs it
 * (the others bring the wheel up to date in their own calls), and a process
 * that never starts a thread keeps glibc's single-threaded locks, whose
 * unlock is a plain store rather than a fenced exchange. The worker blocks
 * every signal: a process-directed signal (SIGCHLD, SIGQUIT in an nginx
 * master) must reach the threads that wait for it. */
__attribute__((noinline)) int start_worker_locked(engine *eng) {
  sigset_t all_signals, caller_mask;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &caller_mask);
  int failed = pthread_create(&eng->worker, NULL, worker_main, eng);
  pthread_sigmask(SIG_SETMASK, &caller_mask, NULL);
  if (failed) return TQ_NO_THREAD;
  eng->worker_started = true;
  return TQ_OK;
}

void engine_advance_manual(engine *eng, uint64_t delta_ns) {
  pthread_mutex_lock(&eng->lock);
  eng->manual_now_ns = saturating_add(eng->manual_now_ns, delta_ns);
  if (eng->manual_now_ns > ENGINE_MAX_DELAY_NS) eng->manual_now_ns = ENGINE_MAX_DELAY_NS;
  collect_locked(eng, eng->manual_now_ns);
  pthread_mutex_unlock(&eng->lock);
}
