/*
 * chaos_host.c — the chaos run. CHAOS_THREADS threads (default 4), each
 * running test/stress/chaos.lua in one fresh lua_State after another, a new seed
 * each, for CHAOS_SECONDS (default 60). hwt is linked in statically
 * (hwt_preload), so every state of the process shares the real-clock engines
 * of equal tick and wheel size. Each state is one test case: it fails when
 * the script raises (an invariant failure) or warns "chaos-fail: ..." while
 * lua_close runs. A state is closed on the thread that ran it, or handed to
 * another thread to close, or kept open (its timers still firing on the
 * shared engines) while its thread runs the next seed.
 *
 * Output: a line per failing seed, the range of seeds tried, and last
 * "chaos: N passed, N failed" (test/run.sh counts it). A sanitizer report
 * ends the process (abort_on_error / halt_on_error): the seeds in flight
 * (running, in lua_close, open, closed last) are printed first, with the
 * total so far plus one failed case; replay one seed alone, on one thread,
 * with CHAOS_SEED=N CHAOS_ONE=1 (programs on the real clock replay only
 * approximately: which tasks are due depends on timing).
 * Other knobs: CHAOS_SEED (first seed, default 1), CHAOS_THREADS, CHAOS_OPS
 * (operations per seed), CHAOS_VERBOSE=1 (a line per seed, Lua warnings,
 * tracebacks), CHAOS_HANG_SECONDS (default 60: a seed that runs or closes
 * longer is reported as a hang and aborts), CHAOS_SCRIPT (default
 * test/stress/chaos.lua); the script reads CHAOS_SKIP, CHAOS_STATS and
 * CHAOS_ALLOC_STRESS (a collector step at every allocation) itself. Run
 * from the repository root (package.path gets lua/?.lua).
 *
 * Lua 5.4 or LuaJIT 2.1 (make LUA=luajit). On LuaJIT the host gives the
 * script a warn() of its own (5.4's pieces, into the same watch), and each
 * state allocates through realloc/free, as 5.4's luaL_newstate does, instead
 * of LuaJIT's own mmap-based allocator: so ASan sees every Lua object
 * (userdata, cdata, tables) that hwt's C code reads or writes, and reports a
 * use after the collector freed it. LuaJIT's own code is not instrumented.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "hwt.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HAVE_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HAVE_SANITIZER 1
#endif
#endif
#ifdef HAVE_SANITIZER
#include <sanitizer/common_interface_defs.h>
#endif

#define MAX_THREADS 16
#define ERROR_SIZE 1024
#define RECENT 8                /* closed seeds remembered for a death report */
#define LINGER_MS 100           /* after the last lua_close: time for a stray worker to show */

enum close_mode { CLOSE_HERE, HAND_OVER, KEEP_OPEN };
static const char *const close_mode_names[] = {"closed here", "handed over", "kept open"};

/* One seed in one lua_State, from luaL_newstate to lua_close. */
typedef struct chaos_run {
  long long seed;
  lua_State *L;
  int owner;                    /* the thread that ran it */
  bool failed;
  char error[ERROR_SIZE];
  char warning[ERROR_SIZE];     /* a warning being assembled from its pieces */
  size_t warning_length;
  struct chaos_run *next;       /* in the hand-over list */
} chaos_run;

/* What each thread is doing, for the death callback and the watchdog. */
typedef struct activity {
  atomic_llong seed;            /* -1: idle */
  atomic_int closing;           /* 0: running the script, 1: in lua_close */
  atomic_llong since_ms;
  atomic_llong kept_seed;       /* a state it keeps open meanwhile; -1: none */
} activity;

static struct {
  const char *script;
  long long first_seed;
  long ops;                     /* 0: the script's default */
  int threads;
  double seconds;
  double hang_seconds;
  bool one;
  bool verbose;
} config;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long next_seed;               /* guarded by lock */
static long long last_seed = -1;
static int passed, failed;
static chaos_run *handed_over;
static double deadline;
static activity activities[MAX_THREADS + 1];   /* [config.threads]: main */
static atomic_bool finished_all;
static atomic_llong recently_closed[RECENT];   /* a hwt thread may touch a state after lua_close */
static atomic_uint recent_count;
static atomic_flag death_reported = ATOMIC_FLAG_INIT;

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long now_ms(void) { return (long long)(now_seconds() * 1000); }

static void set_activity(int thread, long long seed, int closing) {
  atomic_store(&activities[thread].seed, seed);
  atomic_store(&activities[thread].closing, closing);
  atomic_store(&activities[thread].since_ms, now_ms());
}

/* ---- a death report names the seeds in flight ---------------------------- */

static void report_seeds_in_flight(const char *why) {
  if (atomic_flag_test_and_set(&death_reported)) return;
  fprintf(stderr, "chaos: %s; seeds in flight:", why);
  for (int i = 0; i <= config.threads; i++) {
    long long seed = atomic_load(&activities[i].seed);
    if (seed >= 0)
      fprintf(stderr, " %lld (%s)", seed, atomic_load(&activities[i].closing) ? "in lua_close" : "running");
    long long kept = atomic_load(&activities[i].kept_seed);
    if (kept >= 0) fprintf(stderr, " %lld (open, not polled)", kept);
  }
  if (pthread_mutex_trylock(&lock) == 0) {     /* the thread that holds it may be the one dying */
    for (chaos_run *run = handed_over; run; run = run->next)
      fprintf(stderr, " %lld (open, handed over)", run->seed);
    pthread_mutex_unlock(&lock);
  }
  fprintf(stderr, "; closed last:");
  unsigned closed = atomic_load(&recent_count);
  for (unsigned i = closed > RECENT ? closed - RECENT : 0; i < closed; i++)
    fprintf(stderr, " %lld", atomic_load(&recently_closed[i % RECENT]));
  fprintf(stderr, "\nchaos: replay one with CHAOS_SEED=N CHAOS_ONE=1\n");
  fflush(stderr);
  /* The total so far, with the report as one more failed case, for test/run.sh. */
  if (pthread_mutex_trylock(&lock) == 0) {
    printf("chaos: %d passed, %d failed\n", passed, failed + 1);
    pthread_mutex_unlock(&lock);
  }
  fflush(stdout);
}

#ifdef HAVE_SANITIZER
static void on_sanitizer_death(void) { report_seeds_in_flight("sanitizer report"); }
#endif

static void on_abort(int signal_number) {
  (void)signal_number;
  report_seeds_in_flight("abort");
  signal(SIGABRT, SIG_DFL);
  raise(SIGABRT);
}

/* ---- one state ----------------------------------------------------------- */

static void set_error(chaos_run *run, const char *message) {
  if (!run->failed) snprintf(run->error, sizeof run->error, "%s", message);
  run->failed = true;
}

/* Lua's warn(): "chaos-fail: ..." is an invariant failure found while the
 * state closes; other warnings (Lua's "error in __gc", which chaos
 * provokes at the C-stack limit) only show with CHAOS_VERBOSE. */
static void on_warning(void *ud, const char *piece, int to_be_continued) {
  chaos_run *run = ud;
  size_t room = sizeof run->warning - 1 - run->warning_length;
  size_t length = strlen(piece);
  if (length > room) length = room;
  memcpy(run->warning + run->warning_length, piece, length);
  run->warning_length += length;
  run->warning[run->warning_length] = '\0';
  if (to_be_continued) return;
  if (strncmp(run->warning, "chaos-fail: ", 12) == 0)
    set_error(run, run->warning);
  else if (config.verbose && run->warning[0] != '@')
    fprintf(stderr, "chaos: seed %lld: warning: %s\n", run->seed, run->warning);
  run->warning_length = 0;
}

#if LUA_VERSION_NUM < 504
/* warn(msg1, ...) where Lua has none (LuaJIT): 5.4's, into on_warning. */
static int host_warn(lua_State *L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) luaL_checkstring(L, i);
  luaL_argcheck(L, n > 0, 1, "string expected");
  chaos_run *run = lua_touserdata(L, lua_upvalueindex(1));
  for (int i = 1; i <= n; i++) on_warning(run, lua_tostring(L, i), i < n);
  return 0;
}
#endif

#ifdef COMPAT_FFI
/* LuaJIT: Lua's memory from malloc, where ASan watches it (see the top). */
static void *system_alloc(void *ud, void *block, size_t old_size, size_t new_size) {
  (void)ud;
  (void)old_size;
  if (new_size == 0) {
    free(block);
    return NULL;
  }
  return realloc(block, new_size);
}

static int on_panic(lua_State *L) {
  const char *message = lua_tostring(L, -1);
  fprintf(stderr, "chaos: PANIC: unprotected error in call to Lua API (%s)\n",
          message ? message : "error object is not a string");
  fflush(stderr);
  abort();
}
#endif

static int traceback(lua_State *L) {
  const char *message = lua_tostring(L, 1);
  luaL_traceback(L, L, message ? message : "(error object is not a string)", 1);
  return 1;
}

static void run_script(chaos_run *run) {
  lua_State *L = run->L;
  luaL_openlibs(L);
  hwt_preload(L);
  if (luaL_dostring(L, "package.path = 'lua/?.lua;' .. package.path") != LUA_OK) {
    set_error(run, lua_tostring(L, -1));
    return;
  }
  lua_pushcfunction(L, traceback);
  if (luaL_loadfile(L, config.script) != LUA_OK) {
    set_error(run, lua_tostring(L, -1));
    return;
  }
  lua_pushinteger(L, (lua_Integer)run->seed);
  int nargs = 1;
  if (config.ops > 0) {
    lua_pushinteger(L, (lua_Integer)config.ops);
    nargs++;
  }
  if (lua_pcall(L, nargs, 1, 1) != LUA_OK) {
    const char *message = lua_tostring(L, -1);
    char first_line[ERROR_SIZE];
    snprintf(first_line, sizeof first_line, "%s", message ? message : "(error object is not a string)");
    if (!config.verbose) first_line[strcspn(first_line, "\n")] = '\0';   /* without the traceback */
    set_error(run, first_line);
  }
  lua_settop(L, 0);
}

static chaos_run *start_run(long long seed, int thread) {
  chaos_run *run = calloc(1, sizeof *run);
  if (!run) {
    fprintf(stderr, "chaos: out of memory\n");
    exit(2);
  }
  run->seed = seed;
  run->owner = thread;
  set_activity(thread, seed, 0);
  if (config.verbose) fprintf(stderr, "chaos: thread %d: seed %lld\n", thread, seed);
#ifdef COMPAT_FFI
  run->L = lua_newstate(system_alloc, NULL);
  if (run->L) lua_atpanic(run->L, on_panic);
#else
  run->L = luaL_newstate();
#endif
  if (!run->L) {
    set_error(run, "luaL_newstate failed");
    return run;
  }
#if LUA_VERSION_NUM >= 504
  lua_setwarnf(run->L, on_warning, run);
#else
  lua_pushlightuserdata(run->L, run);
  lua_pushcclosure(run->L, host_warn, 1);
  lua_setglobal(run->L, "warn");
#endif
  run_script(run);
  return run;
}

/* Closes the state and counts the case. */
static void close_run(chaos_run *run, int thread, enum close_mode mode) {
  set_activity(thread, run->seed, 1);
  if (run->L) lua_close(run->L);
  atomic_store(&recently_closed[atomic_fetch_add(&recent_count, 1) % RECENT], run->seed);
  set_activity(thread, -1, 0);
  pthread_mutex_lock(&lock);
  if (run->failed) {
    failed++;
    printf("chaos: seed %lld failed: %s\n", run->seed, run->error);
    fflush(stdout);
  } else {
    passed++;
  }
  pthread_mutex_unlock(&lock);
  if (config.verbose)
    fprintf(stderr, "chaos: seed %lld %s, ran on thread %d, closed on thread %d\n", run->seed,
            close_mode_names[mode], run->owner, thread);
  free(run);
}

/* ---- threads ------------------------------------------------------------- */

/* A mix of the seed's bits, so that neighbouring seeds close differently. */
static enum close_mode close_mode_of(long long seed) {
  unsigned long long x = (unsigned long long)seed * 0x9E3779B97F4A7C15ull;
  switch ((x >> 40) % 4) {
    case 0: return HAND_OVER;
    case 1: return KEEP_OPEN;
    default: return CLOSE_HERE;
  }
}

/* The next seed, or -1 when the time (or CHAOS_ONE's single seed) is up. */
static long long take_seed(void) {
  pthread_mutex_lock(&lock);
  long long seed = -1;
  if (config.one ? next_seed == config.first_seed : now_seconds() < deadline) seed = next_seed++;
  if (seed >= 0) last_seed = seed;
  pthread_mutex_unlock(&lock);
  return seed;
}

static void hand_over(chaos_run *run) {
  pthread_mutex_lock(&lock);
  run->next = handed_over;
  handed_over = run;
  pthread_mutex_unlock(&lock);
}

/* A state handed over by another thread than `thread` (any, for main). */
static chaos_run *take_handed_over(int thread) {
  pthread_mutex_lock(&lock);
  chaos_run **link = &handed_over;
  while (*link && (*link)->owner == thread) link = &(*link)->next;
  chaos_run *run = *link;
  if (run) *link = run->next;
  pthread_mutex_unlock(&lock);
  return run;
}

static void *chaos_thread(void *arg) {
  int self = (int)(intptr_t)arg;
  chaos_run *kept = NULL;
  long long seed;
  while ((seed = take_seed()) >= 0) {
    chaos_run *other = take_handed_over(self);
    if (other) close_run(other, self, HAND_OVER);
    chaos_run *run = start_run(seed, self);
    set_activity(self, -1, 0);
    if (kept) {                                   /* it stayed open during this seed */
      atomic_store(&activities[self].kept_seed, -1);
      close_run(kept, self, KEEP_OPEN);
      kept = NULL;
    }
    enum close_mode mode = close_mode_of(seed);
    if (mode == HAND_OVER) hand_over(run);
    else if (mode == KEEP_OPEN && !config.one) kept = run;
    else close_run(run, self, CLOSE_HERE);
    atomic_store(&activities[self].kept_seed, kept ? kept->seed : -1);
  }
  atomic_store(&activities[self].kept_seed, -1);
  if (kept) close_run(kept, self, KEEP_OPEN);
  return NULL;
}

/* Aborts (naming the seeds) when a seed runs or closes for too long. */
static void *watchdog(void *arg) {
  (void)arg;
  while (!atomic_load(&finished_all)) {
    thrd_sleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
    long long now = now_ms();
    for (int i = 0; i <= config.threads; i++) {
      long long seed = atomic_load(&activities[i].seed);
      if (seed < 0 || now - atomic_load(&activities[i].since_ms) <= config.hang_seconds * 1000) continue;
      fprintf(stderr, "chaos: seed %lld hangs (%s for more than %g s)\n", seed,
              atomic_load(&activities[i].closing) ? "in lua_close" : "running", config.hang_seconds);
      report_seeds_in_flight("a seed hangs");
      abort();
    }
  }
  return NULL;
}

/* ---- main ---------------------------------------------------------------- */

static double env_number(const char *name, double fallback) {
  const char *text = getenv(name);
  return text && *text ? strtod(text, NULL) : fallback;
}

static void read_config(void) {
  config.script = getenv("CHAOS_SCRIPT") ? getenv("CHAOS_SCRIPT") : "test/stress/chaos.lua";
  config.first_seed = (long long)env_number("CHAOS_SEED", 1);
  config.ops = (long)env_number("CHAOS_OPS", 0);
  config.one = env_number("CHAOS_ONE", 0) != 0;
  config.verbose = env_number("CHAOS_VERBOSE", 0) != 0;
  config.threads = config.one ? 1 : (int)env_number("CHAOS_THREADS", 4);
  if (config.threads < 1) config.threads = 1;
  if (config.threads > MAX_THREADS) config.threads = MAX_THREADS;
  config.seconds = env_number("CHAOS_SECONDS", 60);
  config.hang_seconds = env_number("CHAOS_HANG_SECONDS", 60);
  if (config.first_seed < 0) config.first_seed = 0;
}

int main(void) {
  read_config();
  for (int i = 0; i <= MAX_THREADS; i++) {
    atomic_init(&activities[i].seed, -1);
    atomic_init(&activities[i].kept_seed, -1);
  }
#ifdef HAVE_SANITIZER
  __sanitizer_set_death_callback(on_sanitizer_death);
#endif
  signal(SIGABRT, on_abort);
  next_seed = config.first_seed;
  double started = now_seconds();
  deadline = started + config.seconds;

  pthread_t threads[MAX_THREADS], dog;
  pthread_create(&dog, NULL, watchdog, NULL);
  for (int i = 0; i < config.threads; i++)
    pthread_create(&threads[i], NULL, chaos_thread, (void *)(intptr_t)i);
  for (int i = 0; i < config.threads; i++) pthread_join(threads[i], NULL);
  chaos_run *run;
  while ((run = take_handed_over(config.threads))) close_run(run, config.threads, HAND_OVER);
  thrd_sleep(&(struct timespec){.tv_nsec = LINGER_MS * 1000 * 1000}, NULL);
  atomic_store(&finished_all, true);
  pthread_join(dog, NULL);

  if (last_seed >= config.first_seed)
    printf("chaos: seeds %lld..%lld, %d thread%s, %.1f s\n", config.first_seed, last_seed,
           config.threads, config.threads == 1 ? "" : "s", now_seconds() - started);
  printf("chaos: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
