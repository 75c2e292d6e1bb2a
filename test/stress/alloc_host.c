/*
 * alloc_host.c — hwt under allocation failure.
 *
 * For N = 1, 2, 3, ...: a fresh lua_State whose allocator refuses the Nth
 * allocation (new block or growth) made after arming — and Lua's emergency
 * retry of that same request, so that the refusal really surfaces — runs the
 * scenario of test/stress/alloc_scenario.lua under lua_pcall. The pcall must end
 * normally or with "not enough memory" (LUA_ERRMEM); never a crash. Then,
 * with the allocator disarmed, the SAME state runs the check (the timers the
 * scenario left behind still work; every timeout ended exactly one way), and
 * lua_close must free everything: no Lua bytes left, no file descriptor and
 * no thread left behind. The loop ends at the first N the scenario never
 * reaches. Last line: "alloc_host: P passed, F failed" (one case per N).
 *
 *   build/alloc_host [-v] [-s] [-n N] [CPATH [LUA_PATH [SCENARIO]]]
 *   defaults: build/lua5.4/?.so  lua/?.lua  test/stress/alloc_scenario.lua   (run from the repo root)
 *   -v    do not capture the scenario's stderr; print every case
 *   -s    sticky: after the Nth, refuse every later allocation too (until
 *         disarmed) — the error paths themselves run short of memory
 *   -n N  run case N alone (implies -v), to reproduce a failure
 *
 * Build and run (from the repository root, after `make all`):
 *   cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g $(pkg-config --cflags lua5.4) \
 *      test/stress/alloc_host.c -o build/alloc_host $(pkg-config --libs lua5.4)
 *   build/alloc_host
 * Under ASan + UBSan (after `make build/lua5.4/asan/hwt/core.so`; Debian's lua is
 * not instrumented, so the runtimes are preloaded, as test/run.sh does):
 *   LD_PRELOAD="$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so)" \
 *   ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1 \
 *   build/alloc_host 'build/lua5.4/asan/?.so'
 *
 * hwt writes task errors to stderr; that output is captured per case in a
 * temporary file and shown only for a failing case (or on SIGABRT, e.g. an
 * ASan report with abort_on_error=1). With -v, each case also says at which
 * Lua line of the main thread the refusal struck.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#define MAX_CASES 200000UL
#define MAX_REPORTED_FAILURES 20
#define REGISTRY_KEY "alloc_host.scenario"

/* ---- the allocator ------------------------------------------------------ */

typedef struct alloc_ctl {
  bool armed;
  unsigned long count;          /* new blocks and growths since arming */
  unsigned long fail_at;        /* the one to refuse, 1-based */
  bool hit;                     /* it was refused */
  bool sticky;                  /* -s: refuse every later one too */
  bool retry_pending;           /* refuse Lua's emergency retry of it too */
  void *retry_ptr;
  size_t retry_osize, retry_nsize;
  long long live_bytes;
  lua_State *L;                 /* -v: where the refusal struck */
  char where[160];
} alloc_ctl;

/* -v only: the innermost Lua line of the main thread at the refusal. */
static void note_where(alloc_ctl *a) {
  lua_Debug ar;
  a->where[0] = '\0';
  for (int level = 0; a->L && lua_getstack(a->L, level, &ar); level++) {
    if (lua_getinfo(a->L, "Sl", &ar) && ar.currentline > 0) {
      snprintf(a->where, sizeof a->where, "%s:%d", ar.short_src, ar.currentline);
      return;
    }
  }
}

static void *test_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  alloc_ctl *a = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    a->live_bytes -= (long long)old;
    return NULL;
  }
  if (a->armed && nsize > old) {
    if (a->sticky && a->hit) return NULL;
    if (a->retry_pending) {
      a->retry_pending = false;
      if (ptr == a->retry_ptr && osize == a->retry_osize && nsize == a->retry_nsize)
        return NULL;            /* luaM_realloc_'s tryagain() after its full GC */
    }
    if (++a->count == a->fail_at) {
      a->hit = true;
      a->retry_pending = true;
      a->retry_ptr = ptr;
      a->retry_osize = osize;
      a->retry_nsize = nsize;
      note_where(a);
      return NULL;
    }
  }
  void *block = realloc(ptr, nsize);
  if (block) a->live_bytes += (long long)nsize - (long long)old;
  return block;
}

/* ---- stderr capture ------------------------------------------------------ */

static int capture_fd = -1, saved_stderr = -1;
static volatile sig_atomic_t capturing;
static char capture_path[] = "/tmp/alloc_host.XXXXXX";

static void capture_begin(void) {
  if (capture_fd < 0) return;
  fflush(stderr);
  if (ftruncate(capture_fd, 0) != 0) return;
  lseek(capture_fd, 0, SEEK_SET);
  dup2(capture_fd, STDERR_FILENO);
  capturing = 1;
}

static void capture_end(void) {
  if (!capturing) return;
  fflush(stderr);
  dup2(saved_stderr, STDERR_FILENO);
  capturing = 0;
}

/* Copies the captured text to the real stderr (async-signal-safe). */
static void capture_dump(void) {
  if (capture_fd < 0) return;
  char buf[4096];
  off_t at = 0;
  ssize_t got;
  size_t total = 0;
  while (total < 64 * 1024 && (got = pread(capture_fd, buf, sizeof buf, at)) > 0) {
    ssize_t written = write(saved_stderr, buf, (size_t)got);
    (void)written;
    at += got;
    total += (size_t)got;
  }
}

static void on_abort(int sig) {
  if (capturing) {
    dup2(saved_stderr, STDERR_FILENO);
    static const char note[] = "alloc_host: aborted; the case's stderr follows\n";
    ssize_t written = write(saved_stderr, note, sizeof note - 1);
    (void)written;
    capture_dump();
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void capture_open(void) {
  saved_stderr = dup(STDERR_FILENO);
  capture_fd = mkstemp(capture_path);
  if (capture_fd < 0 || saved_stderr < 0) {
    capture_fd = -1;
    return;
  }
  unlink(capture_path);           /* the open descriptor keeps it */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_abort;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGABRT, &sa, NULL);
}

/* ---- process resources ---------------------------------------------------- */

static int count_entries(const char *dir_path) {
  DIR *dir = opendir(dir_path);
  if (!dir) return -1;
  int n = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)))
    if (entry->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- one case -------------------------------------------------------------- */

typedef struct config {
  const char *cpath, *path, *scenario;
  bool verbose, sticky;
  unsigned long only;           /* -n N: run that case alone */
} config;

enum outcome { OUT_CLEAN, OUT_RAISED, OUT_RECOVERED, OUT_FAILED };

typedef struct case_result {
  enum outcome outcome;
  bool hit;
  unsigned long allocations;
  char message[1024];
} case_result;

static int message_handler(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  alloc_ctl *a = ud;
  bool armed = a->armed;
  a->armed = false;                       /* the traceback itself may allocate */
  const char *message = lua_tostring(L, 1);
  if (!message)
    message = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, message, 1);
  a->armed = armed;
  return 1;
}

/* Loads the libraries and the scenario file, runs its setup(). Disarmed. */
static int prepare(lua_State *L) {
  const config *cfg = lua_touserdata(L, 1);
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_pushstring(L, cfg->path);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, cfg->cpath);
  lua_setfield(L, -2, "cpath");
  lua_pop(L, 1);
  if (luaL_dofile(L, cfg->scenario) != LUA_OK) return lua_error(L);
  luaL_checktype(L, -1, LUA_TTABLE);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, REGISTRY_KEY);
  lua_getfield(L, -1, "setup");
  lua_call(L, 0, 0);
  return 0;
}

/* Calls scenario-table field `name`(flag) under pcall with a traceback;
 * returns the status and leaves the error message (or nothing) in `message`. */
static int call_phase(lua_State *L, const char *name, bool flag, char *message, size_t size) {
  int base = lua_gettop(L);
  lua_pushcfunction(L, message_handler);
  lua_getfield(L, LUA_REGISTRYINDEX, REGISTRY_KEY);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_pushboolean(L, flag);
  int status = lua_pcall(L, 1, 0, base + 1);
  message[0] = '\0';
  if (status != LUA_OK) {
    const char *text = lua_tostring(L, -1);
    snprintf(message, size, "%s", text ? text : "(error object is not a string)");
  }
  lua_settop(L, base);
  return status;
}

/* A joined thread can stay listed in /proc/self/task for a moment: waits
 * up to a second for the count to fall to at_most, and returns it. */
static int count_threads_settled(int at_most) {
  int count = count_entries("/proc/self/task");
  struct timespec pause = {0, 1000000};
  for (int waited = 0; count > at_most && waited < 1000; waited++) {
    nanosleep(&pause, NULL);
    count = count_entries("/proc/self/task");
  }
  return count;
}

static void run_case(unsigned long n, const config *cfg, case_result *out) {
  memset(out, 0, sizeof *out);
  alloc_ctl ctl;
  memset(&ctl, 0, sizeof ctl);
  int fds_before = count_entries("/proc/self/fd");
  int threads_before = count_threads_settled(1);   /* the host's own thread */

  lua_State *L = lua_newstate(test_alloc, &ctl);
  if (!L) {
    out->outcome = OUT_FAILED;
    snprintf(out->message, sizeof out->message, "lua_newstate failed");
    return;
  }
  lua_pushcfunction(L, prepare);
  lua_pushlightuserdata(L, (void *)cfg);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    out->outcome = OUT_FAILED;
    snprintf(out->message, sizeof out->message, "setup failed: %s", lua_tostring(L, -1));
    lua_close(L);
    return;
  }

  ctl.fail_at = n;
  ctl.sticky = cfg->sticky;
  if (cfg->verbose) ctl.L = L;
  ctl.armed = true;
  char message[sizeof out->message - 128];
  int status = call_phase(L, "scenario", false, message, sizeof message);
  ctl.armed = false;
  out->hit = ctl.hit;
  out->allocations = ctl.count;

  if (status == LUA_OK) {
    out->outcome = ctl.hit ? OUT_RECOVERED : OUT_CLEAN;
  } else if (status == LUA_ERRMEM || strstr(message, "not enough memory")) {
    out->outcome = ctl.hit ? OUT_RAISED : OUT_FAILED;
    if (!ctl.hit) snprintf(out->message, sizeof out->message, "out of memory without a refusal: %s", message);
    else snprintf(out->message, sizeof out->message, "%.*s (refused at %s)",
                  (int)strcspn(message, "\n"), message, ctl.where[0] ? ctl.where : "?");
  } else {
    out->outcome = OUT_FAILED;
    snprintf(out->message, sizeof out->message, "scenario raised (status %d): %s", status, message);
  }

  if (out->outcome != OUT_FAILED) {
    status = call_phase(L, "check", out->outcome == OUT_CLEAN, message, sizeof message);
    if (status != LUA_OK) {
      out->outcome = OUT_FAILED;
      snprintf(out->message, sizeof out->message, "check failed after %s: %s",
               out->hit ? "the refusal" : "a clean run", message);
    }
  }
  lua_close(L);

  if (out->outcome != OUT_FAILED && ctl.live_bytes != 0) {
    out->outcome = OUT_FAILED;
    snprintf(out->message, sizeof out->message, "lua_close left %lld bytes allocated", ctl.live_bytes);
  }
  int fds_after = count_entries("/proc/self/fd");
  if (out->outcome != OUT_FAILED && fds_after != fds_before) {
    out->outcome = OUT_FAILED;
    snprintf(out->message, sizeof out->message, "file descriptors: %d before, %d after lua_close",
             fds_before, fds_after);
  }
  int threads_after = count_threads_settled(threads_before);
  if (out->outcome != OUT_FAILED && threads_after != threads_before) {
    out->outcome = OUT_FAILED;
    snprintf(out->message, sizeof out->message, "threads: %d before, %d after lua_close",
             threads_before, threads_after);
  }
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv) {
  config cfg = {"build/lua5.4/?.so", "lua/?.lua", "test/stress/alloc_scenario.lua", false, false, 0};
  int positional = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0) {
      cfg.verbose = true;
    } else if (strcmp(argv[i], "-s") == 0) {
      cfg.sticky = true;
    } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      cfg.only = strtoul(argv[++i], NULL, 10);
      cfg.verbose = true;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [-v] [-s] [-n N] [CPATH [LUA_PATH [SCENARIO]]]\n", argv[0]);
      return 2;
    } else if (positional == 0) {
      cfg.cpath = argv[i]; positional++;
    } else if (positional == 1) {
      cfg.path = argv[i]; positional++;
    } else if (positional == 2) {
      cfg.scenario = argv[i]; positional++;
    } else {
      fprintf(stderr, "usage: %s [-v] [-s] [-n N] [CPATH [LUA_PATH [SCENARIO]]]\n", argv[0]);
      return 2;
    }
  }
  if (!cfg.verbose) capture_open();

  unsigned long passed = 0, failed = 0, raised = 0, recovered = 0, clean = 0, tried = 0;
  unsigned long allocations = 0;
  bool finished = false;
  double started = seconds_now();
  for (unsigned long n = cfg.only ? cfg.only : 1; n <= MAX_CASES; n++) {
    case_result result;
    capture_begin();
    run_case(n, &cfg, &result);
    capture_end();
    tried++;
    if (result.outcome == OUT_FAILED) {
      failed++;
      if (failed <= MAX_REPORTED_FAILURES) {
        fprintf(stderr, "alloc_host: FAILED at N=%lu: %s\n", n, result.message);
        capture_dump();
      }
    } else {
      passed++;
      if (result.outcome == OUT_RAISED) raised++;
      if (result.outcome == OUT_RECOVERED) recovered++;
      if (result.outcome == OUT_CLEAN) clean++;
    }
    if (cfg.verbose)
      printf("N=%lu: %s%s%s\n", n,
             result.outcome == OUT_CLEAN ? "clean" :
             result.outcome == OUT_RAISED ? "raised not enough memory" :
             result.outcome == OUT_RECOVERED ? "recovered inside the scenario" : "FAILED",
             result.message[0] ? ": " : "", result.message);
    if (!result.hit || cfg.only) {    /* the scenario never got to N */
      allocations = result.allocations;
      finished = true;
      break;
    }
  }
  double elapsed = seconds_now() - started;
  if (!finished) {
    failed++;
    fprintf(stderr, "alloc_host: the scenario still reached N after %lu cases\n", MAX_CASES);
  }
  printf("alloc_host: the scenario makes %lu allocations; %lu cases (N = %lu..%lu%s) in %.1f s\n",
         allocations, tried, cfg.only ? cfg.only : 1, (cfg.only ? cfg.only : 1) + tried - 1,
         cfg.sticky ? ", sticky" : "", elapsed);
  printf("alloc_host: %lu raised \"not enough memory\", %lu recovered inside the scenario, "
         "%lu ran clean\n", raised, recovered, clean);
  printf("alloc_host: %lu passed, %lu failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
