/*
 * lhwt.c — the Lua binding, module hwt.core. No threads of its own and no
 * wheel logic: it checks arguments, anchors Lua values and gives lua/hwt.lua
 * the steps of running tasks, or on Lua 5.3+ the loop that calls them (see
 * dispatch).
 *
 * Memory: the engine links two kinds of Lua memory. A Timeout userdata
 * embeds its `timeout` node; while the node is pending, due or running, the
 * userdata is anchored in its timer's anchor table (at a slot the binding
 * hands out: see anchor_slots), and it is
 * unanchored at the moment the engine lets go (cancel returned true,
 * tq_finish returned false, or stop handed it back), or, if a drain has
 * taken it, when that drain finishes it. A timer's queue lives in
 * a "queue" userdata of its own, apart from the Timer userdata the script
 * holds; the Timer points to it. While the queue runs (until it is stopped),
 * the state's `running` table holds the queue userdata, which holds the
 * anchor table: so the memory the engine uses stays alive even when Lua
 * frees a Timer without calling its __gc (Lua skips a finalizer that it
 * cannot call at the C stack limit). Nothing there holds the Timer itself,
 * so dropping a Timer still lets its __gc stop the queue, and for that the
 * functions a script gives (on_error, on_earlier's) hang on the Timer.
 * On LuaJIT the anchor table also holds each anchored timeout's call, for
 * the FFI take, and at 0 a table of single anchors (see anchor_slots).
 * Timer user values: 1 anchor table, 2 its queue, 3 on_error, 4 the
 * on_earlier watcher. Queue user values: 1 the anchor table, 2 the memory
 * of its free anchor slots, 3 its idle drain; on LuaJIT also 4 that of its
 * free single anchor slots, 5 the single anchors. Timeout user values: 1 its
 * timer's queue, 2 its task, 3.. the extra arguments (on LuaJIT, 0: itself,
 * once single-anchored). Drain user values: 1 its queue, 2 the anchor
 * table, 3 a hand-off's timeout; on LuaJIT also 4 the single anchors.
 *
 * Lifetime: a timer's __gc stops it. Lua does not finalize objects created
 * while the state closes (5.4 does not register them; 5.1-5.3 never call
 * them), so every state that loads the module also gets a `state_timers`
 * userdata in its registry, made when the module is opened, which lists the
 * state's running queues; its finalizer runs at lua_close after those of
 * every object created later, and stops whatever queue is still listed,
 * before the state's memory is freed and this library unloaded. Scripts
 * cannot remove a finalizer: the metatables are protected (__metatable).
 */
#define _GNU_SOURCE             /* dladdr, RTLD_NODELETE */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "engine.h"
#include "hwt.h"

#if LUA_VERSION_NUM == 501
#include <dlfcn.h>
#endif

#define HWT_VERSION "hwt 0.2.0"
#define TIMER_MT "hwt.Timer"
#define TIMEOUT_MT "hwt.Timeout"
#define QUEUE_MT "hwt.queue"
#define DRAIN_MT "hwt.drain"
#define TIMER_UV_ANCHORS 1
#define TIMER_UV_QUEUE 2
#define TIMER_UV_ON_ERROR 3
#define TIMER_UV_WATCHER 4      /* on_earlier's function */
#define TIMER_UVS 4
#define QUEUE_UV_ANCHORS 1
#define QUEUE_UV_FREE_SLOTS 2
#define QUEUE_UV_IDLE_DRAIN 3   /* a finished poll's drain, for the next poll */
#define QUEUE_UV_FREE_SINGLES 4 /* LuaJIT: the memory of its free single anchor slots */
#define QUEUE_UV_SINGLES 5      /* LuaJIT: its single anchors (see anchor_slots) */
#define DRAIN_UV_QUEUE 1
#define DRAIN_UV_ANCHORS 2      /* its queue's anchor table */
#define DRAIN_UV_HANDED 3       /* a hand-off's timeout, until it starts */
#define DRAIN_UV_SINGLES 4      /* LuaJIT: its queue's single anchors */
#define STATE_UV_RUNNING 1      /* queue userdata -> true, while running */
#define STATE_UV_TIMERS 2       /* queue userdata -> its Timer (weak) */
#define TIMEOUT_UV_QUEUE 1
#define TIMEOUT_UV_TASK 2
#define TIMEOUT_UV_ARGS 3
#define NS_PER_SEC 1e9
#define DEFAULT_TICK 0.01
#define DEFAULT_WHEEL_SIZE 512
#define MAX_TASK_ARGS 250
#define MAX_LUA_FRAME 255       /* registers of a Lua function (MAXREGS) */
#define TAKE_SLOTS 8            /* take()'s stack use besides the task's arguments */
#define STATE_TIMERS_KEY "hwt.state_timers"

typedef struct state_timers state_timers;

/* Slots of a timer's anchor table: 1..used have been handed out, and `free`
 * (capacity >= used, in a userdata the queue holds) keeps those given back,
 * so giving one back never allocates. Cheaper than luaL_ref, which keeps its
 * free list in the table itself and reads it on every call. */
typedef struct anchor_slots {
  uint32_t *free;
  uint32_t free_count, used, capacity;
} anchor_slots;
/* Where a timeout is anchored. On LuaJIT a task with one or two arguments
 * is anchored by a single entry, its user value table, which also holds the
 * Timeout (at TIMEOUT_UV_SELF), in a second table, the single anchors (kept
 * in the anchor table at SINGLES_INDEX, and beside it in the queue's and
 * the drains' user values for the common paths); every other timeout by two
 * entries of the anchor table (see keep_call). A pending timeout costs the
 * collector one entry fewer than two would on the OpenResty idiom,
 * timer:timeout(d, handler, conn). "The table of its kind": the anchor
 * table, or the single anchors. */
enum { ANCHOR_MAIN, ANCHOR_SINGLE };
#if COMPAT_FFI
#define ANCHOR_KINDS 2
#define ANCHOR_STRIDE 2         /* a Timeout, then its task (see keep_call) */
#define SINGLES_INDEX 0         /* the anchor table's entry for the single anchors */
#define TIMEOUT_UV_SELF 0       /* a single-anchored Timeout in its user value table */
#define QUEUE_UVS 5
#define DRAIN_UVS 4
#else
#define ANCHOR_KINDS 1
#define ANCHOR_STRIDE 1
#define QUEUE_UVS 3
#define DRAIN_UVS 3
#endif
#define ANCHOR_SLOTS_MIN 64
/* A slot's entries are at table indexes, an int on 5.1. */
#define ANCHOR_SLOTS_MAX ((UINT32_C(1) << 30) / ANCHOR_STRIDE)

/* The queue userdata. */
typedef struct lhwt_timer {
  timer_queue queue;
  bool initialized;             /* false once stopped for good and released */
  bool manual_clock;
  bool shared_engine;
  uint64_t tick_ns;
  uint64_t epoch_ns;            /* CLOCK_MONOTONIC at its clock's 0 (0: manual) */
  uint32_t wheel_size;
  bool has_watcher;             /* its Timer's TIMER_UV_WATCHER is set */
  uint64_t told_due_ns;         /* the due time the watcher last heard of */
  anchor_slots slots[ANCHOR_KINDS];
  state_timers *home;           /* the list it is in while running */
  struct lhwt_timer *prev_in_state, *next_in_state;
} lhwt_timer;

/* The Timer userdata: the script's handle on a queue. */
typedef struct timer_handle {
  lhwt_timer *tm;               /* in its queue userdata (user value 3) */
} timer_handle;

/* One lua_State's running queues (those not yet stopped). */
struct state_timers {
  lhwt_timer *first;
  bool closing;                 /* its finalizer ran: the state is closing */
  bool finalizer_sure;          /* its finalizer is known to be registered */
};

typedef struct lhwt_timeout {
  timeout node;                 /* first: engine pointers convert back */
  uint32_t anchor;              /* its anchor slot (of its kind); 0 while not anchored */
  uint8_t nargs;                /* <= MAX_TASK_ARGS */
  bool run_method;              /* task is a TimerTask table: task:run(...) */
  uint16_t drains;              /* drains that took it and have not finished it:
                                   while > 0 it stays anchored (see dispatch) */
} lhwt_timeout;
/* Allocators round a userdata up to 16 B: at 80 B it cost one such step more. */
_Static_assert(sizeof(lhwt_timeout) <= 64, "a Timeout's C part fits in 64 B");

/* How many timeouts a poll reads at once: its current one and those due
 * after it. */
#define READ_AHEAD 16
/* A poll's first take reads nothing ahead: most polls of a server run one
 * task, and reading ahead would cost each of them a lock round-trip. */
#define FIRST_TAKES_ALONE 1
/* Nor does a poll while more are due than the cache holds (1024 timeouts
 * are 64 KiB of nodes, and as much again in the Lua objects read): then the
 * engine's walk of the due list would wait for each node in turn, where a
 * take's prefetch lets the miss overlap the task before. */
#define READ_AHEAD_DUE_MAX 1024

/* A drain: one draining call's hold on the timeouts it runs (see the
 * dispatch section). */
typedef struct drain {
  lhwt_timer *tm;               /* its queue userdata: user value 1 */
  uint64_t seq_limit;           /* a poll: what was scheduled before it began */
  uint64_t handed_seq;          /* a hand-off: the seq its timeout was handed under */
  lhwt_timeout *current;        /* taken, not yet finished (so anchored) */
  uint64_t current_seq;         /* its seq when taken: a reset changes it */
  lua_Integer taken;            /* how many take() took */
  lhwt_timeout *handed;         /* a hand-off's timeout until it starts: user value 3 */
  bool is_handoff;              /* runs one handed timeout, once */
  unsigned ahead_left;          /* takes before the next read_ahead */
#if COMPAT_FFI
  int32_t released;             /* a slot the FFI take let go, until settled (see there) */
#endif
} drain;

/* ---- small helpers ---------------------------------------------------- */

/* Every function of the module has both metatables as upvalues: checking a
 * type is a pointer comparison, not a registry lookup by name. The third is
 * the state's state_timers; the fifth, a C function that does nothing, for
 * the probe (pushing a C function makes a closure on 5.1 and LuaJIT); the
 * last, on Lua 5.3+, internal.run_batch, which internal.poll calls (a
 * closure made per poll would be garbage). */
#define TIMER_MT_UPVALUE lua_upvalueindex(1)
#define TIMEOUT_MT_UPVALUE lua_upvalueindex(2)
#define STATE_TIMERS_UPVALUE lua_upvalueindex(3)
#define DRAIN_MT_UPVALUE lua_upvalueindex(4)
#define DO_NOTHING_UPVALUE lua_upvalueindex(5)
#define RUN_BATCH_UPVALUE lua_upvalueindex(6)
#define MODULE_UPVALUES 6

static int do_nothing(lua_State *L) {
  (void)L;
  return 0;
}

/* The object at idx if its class is that of mt_upvalue, else NULL. */
static void *test_class(lua_State *L, int idx, int mt_upvalue) {
  void *object = lua_touserdata(L, idx);
  if (!object || !lua_getmetatable(L, idx)) return NULL;
  bool same_class = lua_topointer(L, -1) == lua_topointer(L, mt_upvalue);  /* cheaper than rawequal */
  lua_pop(L, 1);
  return same_class ? object : NULL;
}

static void *check_class(lua_State *L, int idx, int mt_upvalue, const char *name) {
  void *object = test_class(L, idx, mt_upvalue);
  return object ? object : compat_checkudata(L, idx, name);   /* raises the usual message */
}

static lhwt_timer *check_timer(lua_State *L, int idx) {
  timer_handle *handle = check_class(L, idx, TIMER_MT_UPVALUE, TIMER_MT);
  return handle->tm;
}

static lhwt_timeout *check_timeout(lua_State *L, int idx) {
  return check_class(L, idx, TIMEOUT_MT_UPVALUE, TIMEOUT_MT);
}

static void set_integer_field(lua_State *L, const char *name, uint64_t value) {
  lua_pushinteger(L, (lua_Integer)value);
  lua_setfield(L, -2, name);
}

static double ns_to_seconds(uint64_t ns) {
  return ns == ENGINE_NEVER ? HUGE_VAL : (double)ns / NS_PER_SEC;
}

/* Seconds (finite, >= 0) to nanoseconds, rounded to the nearest, clamped. */
static uint64_t seconds_to_ns(double seconds) {
  double ns = seconds * NS_PER_SEC + 0.5;
  return ns >= (double)ENGINE_MAX_DELAY_NS ? ENGINE_MAX_DELAY_NS : (uint64_t)ns;
}

/* A delay argument: a number >= 0; math.huge means never. */
static uint64_t check_delay_ns(lua_State *L, int idx, const char *name) {
  double seconds = luaL_checknumber(L, idx);
  if (!(seconds >= 0)) {                        /* negative or NaN */
    lua_pushfstring(L, "%s must be a number >= 0, got %f", name, seconds);
    luaL_argerror(L, idx, lua_tostring(L, -1));
  }
  return isinf(seconds) ? ENGINE_NEVER : seconds_to_ns(seconds);
}

/* A function, or a value whose __call metamethod is a function. */
static bool is_callable(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TFUNCTION) return true;
  if (!luaL_getmetafield(L, idx, "__call")) return false;
  bool callable = lua_type(L, -1) == LUA_TFUNCTION;
  lua_pop(L, 1);
  return callable;
}

/* A task is a function, a callable, or a table with a `run` method. Returns
 * true for the last kind. */
static bool check_task(lua_State *L, int idx) {
  if (is_callable(L, idx)) return false;
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_getfield(L, idx, "run");
    bool has_run = is_callable(L, -1);
    lua_pop(L, 1);
    if (has_run) return true;
  }
  return luaL_argerror(L, idx,
      "task must be a function, a callable or a table with a 'run' method");
}

static void push_anchors(lua_State *L, int timer_idx) {
  compat_getuservalue(L, timer_idx, TIMER_UV_ANCHORS);
}

/* The queue (the timer's state) that a timeout belongs to. */
static lhwt_timer *timer_of(const lhwt_timeout *to) {
  return (lhwt_timer *)(void *)timeout_queue(&to->node);    /* the queue is its first member */
}

/* How lua/hwt.lua calls a task: task(t) .. task(t, a, b) straight from the
 * values take() returns (no vararg call on the common path), or, for a
 * TimerTask or more arguments, with what internal.args() returns. */
#define CALL_WITH_ARGS 3          /* 0, 1, 2: that many extra arguments */

static int call_shape(const lhwt_timeout *to) {
  return to->run_method || to->nargs >= CALL_WITH_ARGS ? CALL_WITH_ARGS : to->nargs;
}

#if COMPAT_FFI
static int anchor_kind(const lhwt_timeout *to) {
  int shape = call_shape(to);
  return shape == 1 || shape == 2 ? ANCHOR_SINGLE : ANCHOR_MAIN;
}
#else
#define anchor_kind(to) ((void)(to), ANCHOR_MAIN)
#endif

/* Doubles the room for free slots of `kind` of the queue at queue_idx. The
 * allocation may run a finalizer that anchors timeouts of this queue, and so
 * grows the room itself: what the slots hold is read after it. */
static void grow_anchor_slots(lua_State *L, lhwt_timer *tm, int kind, int queue_idx) {
  anchor_slots *slots = &tm->slots[kind];
  if (slots->capacity >= ANCHOR_SLOTS_MAX) luaL_error(L, "too many timeouts anchored");
  uint32_t capacity = slots->capacity ? 2 * slots->capacity : ANCHOR_SLOTS_MIN;
  uint32_t *free_slots = compat_newuserdata(L, capacity * sizeof *free_slots, 0);
  if (slots->capacity >= capacity) {           /* a finalizer grew it meanwhile */
    lua_pop(L, 1);
    return;
  }
  if (slots->free_count) memcpy(free_slots, slots->free, slots->free_count * sizeof *free_slots);
  compat_setuservalue(L, lua_absindex(L, queue_idx),
                      kind == ANCHOR_MAIN ? QUEUE_UV_FREE_SLOTS : QUEUE_UV_FREE_SINGLES);
  slots->free = free_slots;
  slots->capacity = capacity;
}

/* Where slot `slot` keeps its Timeout in the anchor table. */
static int anchor_index(uint32_t slot) {
  return (int)((slot - 1) * ANCHOR_STRIDE + 1);
}

#if COMPAT_FFI
/* On LuaJIT the anchor table also keeps each timeout's call, for the FFI
 * take's loop (lua/hwt.lua), which can read neither a userdata's
 * environment nor a C function's stack: slot s holds the Timeout at 2s - 1
 * and its task at 2s. (A task with one or two arguments is anchored by its
 * user value table instead, where the loop finds the Timeout, the task and
 * the arguments: see anchor_single.) Written and cleared with the Timeout,
 * in the table at hand. task_idx: the task's index, or 0 to read it from
 * the Timeout's user values. */
static void keep_call(lua_State *L, int anchors_idx, const lhwt_timeout *to, int timeout_idx,
                      int task_idx) {
  if (task_idx) lua_pushvalue(L, task_idx);
  else compat_getuservalue(L, timeout_idx, TIMEOUT_UV_TASK);
  lua_rawseti(L, anchors_idx, anchor_index(to->anchor) + 1);
}

static void drop_call(lua_State *L, int anchors_idx, uint32_t slot) {
  lua_pushnil(L);
  lua_rawseti(L, anchors_idx, anchor_index(slot) + 1);
}

/* Anchors the Timeout at timeout_idx by its user value table, which holds
 * the Timeout too, at slot to->anchor of the single anchors at singles_idx. */
static void anchor_single(lua_State *L, int singles_idx, const lhwt_timeout *to, int timeout_idx) {
  compat_getuvtable(L, timeout_idx);
  lua_pushvalue(L, timeout_idx);
  lua_rawseti(L, -2, TIMEOUT_UV_SELF);
  lua_rawseti(L, singles_idx, (int)to->anchor);
}

static void clear_single(lua_State *L, int singles_idx, uint32_t slot) {
  lua_pushnil(L);
  lua_rawseti(L, singles_idx, (int)slot);
}

/* The user values of a queue and of a drain that hold the table of `kind`. */
static int queue_uv_of_kind(int kind) {
  return kind == ANCHOR_SINGLE ? QUEUE_UV_SINGLES : QUEUE_UV_ANCHORS;
}

static int drain_uv_of_kind(int kind) {
  return kind == ANCHOR_SINGLE ? DRAIN_UV_SINGLES : DRAIN_UV_ANCHORS;
}
#else
#define keep_call(L, anchors_idx, to, timeout_idx, task_idx) ((void)(task_idx))
#define drop_call(L, anchors_idx, slot) ((void)0)
#define anchor_single(L, singles_idx, to, timeout_idx) ((void)0)
#define clear_single(L, singles_idx, slot) ((void)0)
#define queue_uv_of_kind(kind) ((void)(kind), QUEUE_UV_ANCHORS)
#define drain_uv_of_kind(kind) ((void)(kind), DRAIN_UV_ANCHORS)
#endif

/* Pushes the table of the kind of `to` from the queue userdata at queue_idx;
 * returns its index. */
static int push_kind_table(lua_State *L, int queue_idx, const lhwt_timeout *to) {
  compat_getuservalue(L, queue_idx, queue_uv_of_kind(anchor_kind(to)));
  return lua_gettop(L);
}

/* Anchors the Timeout at timeout_idx (whose task is at task_idx, or 0: in
 * its user values) in the table of its kind at table_idx; its queue
 * userdata is at queue_idx. */
static void anchor(lua_State *L, int table_idx, int queue_idx, lhwt_timeout *to,
                   int timeout_idx, int task_idx) {
  lhwt_timer *tm = lua_touserdata(L, queue_idx);
  int kind = anchor_kind(to);
  anchor_slots *slots = &tm->slots[kind];
  while (slots->free_count == 0 && slots->used == slots->capacity)   /* see grow_anchor_slots */
    grow_anchor_slots(L, tm, kind, queue_idx);
  if (to->anchor) return;                      /* a finalizer run by the growth reset it */
  to->anchor = slots->free_count ? slots->free[--slots->free_count] : ++slots->used;
  if (kind == ANCHOR_SINGLE) {
    anchor_single(L, table_idx, to, timeout_idx);
    return;
  }
  lua_pushvalue(L, timeout_idx);
  lua_rawseti(L, table_idx, anchor_index(to->anchor));
  keep_call(L, table_idx, to, timeout_idx, task_idx);
}

/* Empties the entries of slot `slot` of `kind` in the table of that kind at
 * table_idx. */
static void clear_slot(lua_State *L, int table_idx, int kind, uint32_t slot) {
  if (kind == ANCHOR_SINGLE) {
    clear_single(L, table_idx, slot);
    return;
  }
  lua_pushnil(L);
  lua_rawseti(L, table_idx, anchor_index(slot));
  drop_call(L, table_idx, slot);
}

/* Puts an emptied slot on tm's free list (never full: see anchor_slots). */
static void give_back_slot(lhwt_timer *tm, int kind, uint32_t slot) {
  anchor_slots *slots = &tm->slots[kind];
  slots->free[slots->free_count++] = slot;
}

/* Releases the anchor of a timeout of tm, from the table of its kind at
 * table_idx; a second call does nothing. */
static void unanchor(lua_State *L, lhwt_timer *tm, int table_idx, lhwt_timeout *to) {
  if (to->anchor == 0) return;
  int kind = anchor_kind(to);
  clear_slot(L, table_idx, kind, to->anchor);
  give_back_slot(tm, kind, to->anchor);
  to->anchor = 0;
}

/* Pushes the single anchors of the anchor table at anchors_idx (on PUC Lua,
 * which has none, that table); returns its index. */
static int push_singles(lua_State *L, int anchors_idx) {
#if COMPAT_FFI
  lua_rawgeti(L, anchors_idx, SINGLES_INDEX);
#else
  lua_pushvalue(L, anchors_idx);
#endif
  return lua_gettop(L);
}

/* Pushes the anchored Timeout `to`, from the anchor table at anchors_idx. */
static void push_anchored_in(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
#if COMPAT_FFI
  if (anchor_kind(to) == ANCHOR_SINGLE) {
    lua_rawgeti(L, push_singles(L, anchors_idx), (int)to->anchor);
    lua_rawgeti(L, -1, TIMEOUT_UV_SELF);
    lua_replace(L, -3);
    lua_pop(L, 1);
    return;
  }
#endif
  lua_rawgeti(L, anchors_idx, anchor_index(to->anchor));
}

/* ---- the state's timers ----------------------------------------------- */

static void list_timer(state_timers *home, lhwt_timer *tm) {
  tm->home = home;
  tm->prev_in_state = NULL;
  tm->next_in_state = home->first;
  if (home->first) home->first->prev_in_state = tm;
  home->first = tm;
}

static void unlist_timer(lhwt_timer *tm) {
  if (!tm->home) return;
  if (tm->prev_in_state) tm->prev_in_state->next_in_state = tm->next_in_state;
  else tm->home->first = tm->next_in_state;
  if (tm->next_in_state) tm->next_in_state->prev_in_state = tm->prev_in_state;
  tm->home = NULL;
}

/* Lets go of the queue's engine, stopping it first if need be; after this,
 * no hwt thread touches the queue or its timeouts. */
static void release_queue(lhwt_timer *tm) {
  if (!tm->initialized) return;
  tq_destroy(&tm->queue);
  unlist_timer(tm);
  tm->initialized = false;
}

/* Sets table[key at key_idx] = the value at the top (popped); the table is
 * the state_timers user value `uv`. */
static void set_state_entry(lua_State *L, int uv, int key_idx) {
  key_idx = lua_absindex(L, key_idx);
  compat_getuservalue(L, STATE_TIMERS_UPVALUE, uv);
  lua_pushvalue(L, key_idx);
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  lua_pop(L, 2);
}

/* After a stop: the queue no longer needs to outlive its Timer. queue_idx:
 * the queue userdata. */
static void retire_queue(lua_State *L, lhwt_timer *tm, int queue_idx) {
  unlist_timer(tm);
  queue_idx = lua_absindex(L, queue_idx);
  lua_pushnil(L);
  set_state_entry(L, STATE_UV_RUNNING, queue_idx);
}

/* The queue's own finalizer: a stop that its Timer's __gc did not make. */
static int queue_gc(lua_State *L) {
  release_queue(lua_touserdata(L, 1));
  return 0;
}

/* At lua_close: the queues still listed are those whose Timer Lua did not
 * (or will not) finalize. Without their anchors at hand, each stop walks the
 * engine's wheel: O(its pending timeouts) per such queue. */
static int state_timers_gc(lua_State *L) {
  state_timers *home = lua_touserdata(L, 1);
  home->closing = true;
  while (home->first) release_queue(home->first);
  return 0;
}

/* Whether this call may come from a finalizer, where a finalizer set now may
 * never run (if the state is closing). Only Lua 5.4 can tell (PUC 5.1-5.3
 * cannot; LuaJIT runs finalizers set during lua_close, so it need not). */
static bool maybe_in_finalizer(lua_State *L) {
#if LUA_VERSION_NUM >= 504
  return lua_gc(L, LUA_GCCOUNT, 0) < 0;       /* refused only inside __gc */
#else
  (void)L;
  return false;
#endif
}

#if LUA_VERSION_NUM == 501
/* Lua 5.1 and LuaJIT unload a C library when the finalizer of its handle runs
 * during lua_close, yet go on to run finalizers of objects older than that
 * handle, and LuaJIT also those of objects made during the close: some are
 * hwt's (a Timer's __gc) or call it. So this library stays loaded. 5.2+ unload
 * C libraries after every other finalizer. */
static void keep_library_loaded(void) {
  static const char in_this_library = 0;
  Dl_info self;
  if (dladdr(&in_this_library, &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}
#endif

/* The state's state_timers, made on first use, with its running table and
 * its weak table of Timers (user values); left at the top. */
static void push_state_timers(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, STATE_TIMERS_KEY);
  if (lua_touserdata(L, -1)) return;
  lua_pop(L, 1);
  state_timers *home = compat_newuserdata(L, sizeof *home, 2);
  *home = (state_timers){.finalizer_sure = !maybe_in_finalizer(L)};
  int home_idx = lua_gettop(L);
  lua_newtable(L);
  compat_setuservalue(L, home_idx, STATE_UV_RUNNING);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  compat_setuservalue(L, home_idx, STATE_UV_TIMERS);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, state_timers_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, home_idx);
  lua_pushvalue(L, home_idx);
  lua_setfield(L, LUA_REGISTRYINDEX, STATE_TIMERS_KEY);
}

/* A metatable for an internal userdata: a finalizer, and protected. */
static void make_internal_metatable(lua_State *L, const char *name, lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
}

/* Whether a timer made now would be stopped with the state: false while the
 * state is closing, or while that cannot be ruled out. */
static bool state_can_stop_timers(lua_State *L, state_timers *home) {
  if (!home->finalizer_sure && !maybe_in_finalizer(L)) home->finalizer_sure = true;
  return home->finalizer_sure && !home->closing;
}

/* ---- dispatch ---------------------------------------------------------
 *
 * Tasks are called from a Lua loop (lua/hwt.lua) or, on Lua 5.3+, from a C
 * loop with lua_callk (internal_run_batch), never by lua_pcall from here, so
 * that a task may yield wherever its caller could (LuaJIT and 5.1 cannot
 * yield across a C call at all). This section gives the loop its steps. A drain
 * is one draining call's hold on what it takes: a poll's drain takes due
 * timeouts scheduled before it began; a hand-off's drain holds one timeout
 * handed to `spawn` and starts it once. take() records the timeout it takes
 * as the drain's current one, and ends it (re-arms a periodic one, or
 * releases the anchor) when it is called again, or finish() does. A drain
 * abandoned with a current timeout (its coroutine dropped while the task was
 * suspended) finishes it in __gc; one whose hand-off never started gives it
 * back to the due list there. A task that resets its timeout and waits may
 * see it taken again by another drain before it finishes: a timeout counts
 * the drains that hold it, and its anchor goes only when none does and the
 * engine has let it go. */

/* The count sticks at its top (65,535 suspended runs of one timeout): the
 * timeout then stays anchored until its timer stops. */
static void count_drain_in(lhwt_timeout *to) {
  if (to->drains < UINT16_MAX) to->drains++;
}

static void count_drain_out(lhwt_timeout *to) {
  if (to->drains < UINT16_MAX) to->drains--;
}

static int traceback_handler(lua_State *L) {
  const char *message = lua_tostring(L, 1);
  if (!message)
    message = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, message, 1);
  return 1;
}

/* Never converts (a conversion allocates, and nothing here may raise). */
static const char *error_text(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx)
                                         : "(error object is not a string)";
}

/* The error is at the top (popped); timeout_idx: the Timeout, or 0. */
static void report_task_error(lua_State *L, int on_error_idx, int timeout_idx) {
  if (lua_isnil(L, on_error_idx)) {
    fprintf(stderr, "hwt: timer task failed: %s\n", error_text(L, -1));
    fflush(stderr);
    lua_pop(L, 1);
    return;
  }
  lua_pushvalue(L, on_error_idx);
  lua_insert(L, -2);
  if (timeout_idx) lua_pushvalue(L, timeout_idx); else lua_pushnil(L);
  if (lua_pcall(L, 2, 0, 0) != 0) {
    fprintf(stderr, "hwt: on_error failed: %s\n", error_text(L, -1));
    fflush(stderr);
    lua_pop(L, 1);
  }
}

static void push_timer_of_queue(lua_State *L, int queue_idx);

/* Pushes the on_error of the timer of the drain at drain_idx: nil when it
 * has none, or once the timer was collected. */
static void push_on_error_of_drain(lua_State *L, int drain_idx) {
  compat_getuservalue(L, drain_idx, DRAIN_UV_QUEUE);
  push_timer_of_queue(L, -1);
  lua_remove(L, -2);
  if (lua_isnil(L, -1)) return;
  compat_getuservalue(L, -1, TIMER_UV_ON_ERROR);
  lua_remove(L, -2);
}

/* Pushes the Timer of the queue userdata at queue_idx, or nil once it was
 * collected. The queue must not hold its Timer's on_error or watcher
 * itself: the state holds a running queue, and a function that refers to
 * its timer would keep the timer alive for ever. (Through the registry, not
 * an upvalue: finalizers call this too.) */
static void push_timer_of_queue(lua_State *L, int queue_idx) {
  queue_idx = lua_absindex(L, queue_idx);
  lua_getfield(L, LUA_REGISTRYINDEX, STATE_TIMERS_KEY);
  compat_getuservalue(L, -1, STATE_UV_TIMERS);
  lua_pushvalue(L, queue_idx);
  lua_rawget(L, -2);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* Tells the watcher (on_earlier) when `to`, just armed, falls due before
 * the time it last heard of. queue_idx: the queue userdata. */
static void tell_if_earlier(lua_State *L, lhwt_timer *tm, int queue_idx, lhwt_timeout *to) {
  if (!tm->has_watcher || !tm->initialized) return;   /* a released queue has no clock */
  uint64_t now_ns = tq_now_ns(&tm->queue);
  uint64_t due_at_ns = tq_due_at(&to->node);
  if (due_at_ns < now_ns) due_at_ns = now_ns;       /* due: as next_due() counts it */
  if (due_at_ns >= tm->told_due_ns) return;
  tm->told_due_ns = due_at_ns;
  push_timer_of_queue(L, queue_idx);
  int timer_idx = lua_gettop(L);
  if (lua_isnil(L, timer_idx)) {
    lua_pop(L, 1);
    return;
  }
  compat_getuservalue(L, timer_idx, TIMER_UV_WATCHER);
  lua_pushnumber(L, ns_to_seconds(due_at_ns > now_ns ? due_at_ns - now_ns : 0));
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    compat_getuservalue(L, timer_idx, TIMER_UV_ON_ERROR);
    lua_insert(L, -2);
    report_task_error(L, lua_gettop(L) - 1, 0);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static drain *check_drain(lua_State *L, int idx) {
  return check_class(L, idx, DRAIN_MT_UPVALUE, DRAIN_MT);
}

/* A new drain of the queue userdata at queue_idx, left at the top. */
static drain *new_drain(lua_State *L, int queue_idx) {
  queue_idx = lua_absindex(L, queue_idx);
  drain *d = compat_newuserdata(L, sizeof *d, DRAIN_UVS);
  *d = (drain){.tm = lua_touserdata(L, queue_idx)};
  lua_pushvalue(L, DRAIN_MT_UPVALUE);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, queue_idx);
  compat_setuservalue(L, -2, DRAIN_UV_QUEUE);
  compat_getuservalue(L, queue_idx, QUEUE_UV_ANCHORS);
  compat_setuservalue(L, -2, DRAIN_UV_ANCHORS);
#if COMPAT_FFI
  compat_getuservalue(L, queue_idx, QUEUE_UV_SINGLES);
  compat_setuservalue(L, -2, DRAIN_UV_SINGLES);
#endif
  return d;
}

/* The idle drain of the queue userdata at queue_idx, made ready for a new
 * poll, or a new drain when there is none; left at the top. Reusing it
 * spares each poll an allocation and, later, a finalizer call. */
static drain *idle_or_new_drain(lua_State *L, int queue_idx) {
  queue_idx = lua_absindex(L, queue_idx);
  compat_getuservalue(L, queue_idx, QUEUE_UV_IDLE_DRAIN);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return new_drain(L, queue_idx);
  }
  lua_pushnil(L);
  compat_setuservalue(L, queue_idx, QUEUE_UV_IDLE_DRAIN);
  drain *d = lua_touserdata(L, -1);
  d->taken = 0;
  return d;
}

/* The drain of a poll of tm, whose Timer is at index 1, made ready and left
 * at the top; NULL, with nothing pushed, when nothing is due or tm is
 * stopped. */
static drain *begin_poll(lua_State *L, lhwt_timer *tm) {
  uint64_t seq_limit = tm->initialized ? tq_poll_begin(&tm->queue) : 0;
  if (seq_limit == 0) return NULL;
  compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  drain *d = idle_or_new_drain(L, -1);
  lua_remove(L, -2);
  d->seq_limit = seq_limit;
  d->ahead_left = FIRST_TAKES_ALONE;
  return d;
}

/* Whether the Timer at index 1 has an on_error (else errors want a
 * traceback). */
static bool has_on_error(lua_State *L) {
  compat_getuservalue(L, 1, TIMER_UV_ON_ERROR);
  bool has_one = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return has_one;
}

/* Pushes the anchored Timeout `to` of the drain at index 1. */
static void push_anchored(lua_State *L, lhwt_timeout *to) {
  compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);
  push_anchored_in(L, lua_gettop(L), to);
  lua_remove(L, -2);
}

/* The drain at index 1 holds the handed timeout `to` (its user value: a
 * cancel or a stop unanchors a handed timeout). Raises nothing. */
static void hold_handed(lua_State *L, lhwt_timeout *to) {
  push_anchored(L, to);
  compat_setuservalue(L, 1, DRAIN_UV_HANDED);
}

static void drop_handed(lua_State *L) {
  lua_pushnil(L);
  compat_setuservalue(L, 1, DRAIN_UV_HANDED);
}

/* internal.drain(timer) -> a poll's drain, or nil when nothing is due or
 * the timer is stopped; and whether the timer has an on_error (else errors
 * want a traceback). false when `timer` is not a Timer: poll() checks its
 * self here, and raises its own message. */
static int internal_drain(lua_State *L) {
  timer_handle *handle = test_class(L, 1, TIMER_MT_UPVALUE);
  if (!handle) {
    lua_pushboolean(L, false);
    return 1;
  }
  if (!begin_poll(L, handle->tm)) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushboolean(L, has_on_error(L));
  return 2;
}

/* Pushes the timeout's call: the task, the Timeout, its CALL_* shape and,
 * for shapes 0-2, the extra arguments. */
static int push_call(lua_State *L, int timeout_idx, lhwt_timeout *to) {
  int shape = call_shape(to);
  int uvs = compat_uservalues_open(L, timeout_idx);
  compat_uv_get(L, uvs, TIMEOUT_UV_TASK);
  lua_pushvalue(L, timeout_idx);
  lua_pushinteger(L, shape);
  for (int i = 0; shape < CALL_WITH_ARGS && i < shape; i++)
    compat_uv_get(L, uvs, TIMEOUT_UV_ARGS + i);
  compat_uservalues_close(L, uvs);
  return 3 + (shape < CALL_WITH_ARGS ? shape : 0);
}

/* Ends the drain's current timeout (index 1: the drain): a periodic one is
 * re-armed (its watcher told); any other is let go, unless a reset armed it
 * again or another drain holds it. A taken timeout stays anchored until
 * here (cancel() and stop() leave its anchor to the drain), so the drain
 * need not hold it otherwise. anchors_idx: where the caller keeps the
 * drain's anchor table (a dispatch loop's, fetched once for all its tasks),
 * or 0. */
static void after_finish(lua_State *L, drain *d, lhwt_timeout *to, bool still_pending,
                         int anchors_idx) {
  if (still_pending && d->tm->has_watcher) {
    compat_getuservalue(L, 1, DRAIN_UV_QUEUE);
    tell_if_earlier(L, d->tm, -1, to);
    lua_pop(L, 1);
  } else if (!still_pending && to->drains == 0) {
    int kind = anchor_kind(to);
    if (anchors_idx && kind == ANCHOR_MAIN) {
      unanchor(L, d->tm, anchors_idx, to);
      return;
    }
    compat_getuservalue(L, 1, drain_uv_of_kind(kind));
    unanchor(L, d->tm, lua_gettop(L), to);
    lua_pop(L, 1);
  }
}

static void finish_current(lua_State *L, drain *d) {
  lhwt_timeout *to = d->current;
  if (!to) return;
  d->current = NULL;
  count_drain_out(to);
  after_finish(L, d, to, tq_finish(&to->node, d->current_seq), 0);
}

#if COMPAT_FFI
/* A slot let go as the FFI take reports it: negated for a single anchor. */
static int32_t released_id(const lhwt_timeout *to) {
  return anchor_kind(to) == ANCHOR_SINGLE ? -(int32_t)to->anchor : (int32_t)to->anchor;
}

static int released_kind(int32_t released) {
  return released > 0 ? ANCHOR_MAIN : ANCHOR_SINGLE;
}

static uint32_t released_slot(int32_t released) {
  return (uint32_t)(released > 0 ? released : -released);
}

/* The slot the FFI take let go and Lua cleared (or, after an error, may not
 * have): cleared here again, which changes nothing if it was, and given
 * back. Drain at index 1. */
static void settle_released(lua_State *L, drain *d) {
  if (!d->released) return;
  int kind = released_kind(d->released);
  uint32_t slot = released_slot(d->released);
  compat_getuservalue(L, 1, drain_uv_of_kind(kind));
  clear_slot(L, lua_gettop(L), kind, slot);
  lua_pop(L, 1);
  give_back_slot(d->tm, kind, slot);
  d->released = 0;
}
#else
#define settle_released(L, d) ((void)0)
#endif

static void make_current(drain *d, lhwt_timeout *to) {
  d->current = to;
  d->current_seq = timeout_seq(&to->node);
  d->taken++;
  count_drain_in(to);
}

/* A poll's step from its current timeout to the next due one, with one
 * engine lock round-trip; the next is current before the finished one's
 * anchor is dealt with (which may raise). With a watcher, which a re-armed
 * periodic may have to tell (a call into Lua), the finished one is dealt
 * with first: no Lua runs between a take and its task's call, where a stop
 * would find the taken timeout started and its task not yet called, and a
 * cancel of a taken periodic would return true with its run still to come.
 * anchors_idx: as in after_finish. */
static lhwt_timeout *step_poll(lua_State *L, drain *d, int anchors_idx) {
  if (d->tm->has_watcher) finish_current(L, d);
  lhwt_timeout *done = d->current;
  if (!done) {
    lhwt_timeout *first = (lhwt_timeout *)tq_pop_due(&d->tm->queue, d->seq_limit);
    if (first) make_current(d, first);
    return first;
  }
  d->current = NULL;
  count_drain_out(done);
  bool done_pending;
  lhwt_timeout *to = (lhwt_timeout *)tq_finish_and_pop(&done->node, d->current_seq, &done_pending,
                                                       d->seq_limit);
  if (to) make_current(d, to);
  after_finish(L, d, done, done_pending, anchors_idx);
  return to;
}

/* Pushes the first value on the way from the anchor table at anchors_idx
 * to the task of `to`: its Timeout, or on LuaJIT its task (see keep_call)
 * or its user value table (see anchor_single); nil if it is not anchored. */
static void push_anchor_entry(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
  if (!to->anchor) {
    lua_pushnil(L);
    return;
  }
#if COMPAT_FFI
  if (anchor_kind(to) == ANCHOR_SINGLE) {
    lua_rawgeti(L, push_singles(L, anchors_idx), (int)to->anchor);
    lua_remove(L, -2);
    return;
  }
  lua_rawgeti(L, anchors_idx, anchor_index(to->anchor) + 1);
#else
  lua_rawgeti(L, anchors_idx, anchor_index(to->anchor));
#endif
}

/* Pushes the task of `to` from what push_anchor_entry pushed, at entry_idx. */
static void push_task_from_entry(lua_State *L, int entry_idx, const lhwt_timeout *to) {
#if COMPAT_FFI
  if (anchor_kind(to) == ANCHOR_MAIN) lua_pushvalue(L, entry_idx);
  else lua_rawgeti(L, entry_idx, TIMEOUT_UV_TASK);
#else
  (void)to;
  compat_getuservalue(L, entry_idx, TIMEOUT_UV_TASK);
#endif
}

/* Whether the poll's current timeout is the first of a new read_ahead. */
static bool read_ahead_due(drain *d) {
  if (d->ahead_left == 0) return true;
  d->ahead_left--;
  return false;
}

/* Reads the anchor entries and the tasks of the drain's current timeout and
 * of the next READ_AHEAD - 1 due ones, and prefetches the tasks. Each lies
 * anywhere in memory: read here, one after another, their cache misses
 * overlap, where each take would otherwise wait for its own (bench/RESULTS.md,
 * twenty-second round). Only a hint: the due ones may change before their
 * takes. anchors_idx: as in after_finish. */
static void read_ahead(lua_State *L, drain *d, int anchors_idx) {
  d->ahead_left = READ_AHEAD - 1;
  /* The room first: nothing between the walk and the reads may allocate. */
  if (!lua_checkstack(L, READ_AHEAD + 2)) return;
  timeout *ahead[READ_AHEAD];
  ahead[0] = &d->current->node;
  unsigned n = 1 + tq_due_ahead(&d->tm->queue, ahead + 1, READ_AHEAD - 1, READ_AHEAD_DUE_MAX);
  if (n == 1) return;
  int base = lua_gettop(L);
  for (unsigned i = 0; i < n; i++) push_anchor_entry(L, anchors_idx, (const lhwt_timeout *)ahead[i]);
  for (unsigned i = 0; i < n; i++) {
    int entry_idx = base + 1 + (int)i;
    if (lua_isnil(L, entry_idx)) continue;
    push_task_from_entry(L, entry_idx, (const lhwt_timeout *)ahead[i]);
    __builtin_prefetch(lua_topointer(L, -1));
    lua_pop(L, 1);
  }
  lua_settop(L, base);
}

/* Finishes the current timeout of the drain `d` (at index 1) and makes the
 * next one current, started; returns it, or NULL when there is none.
 * anchors_idx: as in after_finish. */
static lhwt_timeout *take_next(lua_State *L, drain *d, int anchors_idx) {
  settle_released(L, d);
  if (d->is_handoff && d->current) return NULL;  /* fn called again while its task runs */
  lhwt_timeout *to = NULL;
  if (d->handed) {
    to = tq_start(&d->handed->node, d->handed_seq) ? d->handed : NULL;
    d->handed = NULL;
    drop_handed(L);
    if (to) make_current(d, to);
  } else if (d->seq_limit) {
    to = step_poll(L, d, anchors_idx);        /* makes it current */
    if (to && read_ahead_due(d)) read_ahead(L, d, anchors_idx);
  } else {
    finish_current(L, d);
  }
  return to;
}

/* internal.take(drain) -> finishes the drain's current timeout, then
 * returns the next one's call (see push_call), now started and current;
 * nothing when there is none. Raises nothing after the start, so a taken
 * timeout is always called. */
static int internal_take(lua_State *L) {
  drain *d = check_drain(L, 1);
  compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);   /* stays below the results */
  int anchors_idx = lua_gettop(L);
  lhwt_timeout *to = take_next(L, d, anchors_idx);
  if (!to) return 0;
  push_anchored_in(L, anchors_idx, to);
  return push_call(L, lua_gettop(L), to);
}

#if COMPAT_FFI
/* LuaJIT's take, through the FFI: a classic C call before each task costs a
 * LuaJIT loop whose tasks miss the cache about 190 ns, an FFI call about 65
 * (bench/call_boundary.lua). It does internal_take's step for a poll without
 * the Lua API, and lua/hwt.lua reads the call from the anchor table (see
 * keep_call). What
 * needs the API it leaves to the classic take, before changing anything: a
 * hand-off, a watcher to tell, a finish alone. A timeout it lets go loses its
 * anchor slot here, but Lua clears the slot's entries: the slot waits in
 * d->released, given back only by the next FFI take that Lua says the
 * entries were cleared for (`cleared`), or by settle_released, so that no
 * schedule can take it while the entries hold the old timeout.
 * Returns the next timeout's slot (its call's shape in step[FFI_SHAPE],
 * which also tells where it is anchored; the slot let go, or 0, in
 * step[FFI_RELEASED], negated for a single anchor), 0 when none is due,
 * FFI_TAKE_CLASSIC to call the classic take. */
#define FFI_TAKE_CLASSIC (-1)
enum { FFI_RELEASED, FFI_SHAPE, FFI_READ_AHEAD, FFI_STEP_SIZE };

static int32_t ffi_take(drain *d, int32_t cleared, int32_t *step) {
  lhwt_timer *tm = d->tm;
  if (d->released) {
    if (cleared != d->released) return FFI_TAKE_CLASSIC;
    give_back_slot(tm, released_kind(d->released), released_slot(d->released));
    d->released = 0;
  }
  if (!d->seq_limit || d->handed || d->is_handoff || tm->has_watcher) return FFI_TAKE_CLASSIC;
  lhwt_timeout *done = d->current, *to;
  step[FFI_RELEASED] = 0;
  if (!done) {
    to = (lhwt_timeout *)tq_pop_due(&tm->queue, d->seq_limit);
  } else {
    d->current = NULL;
    count_drain_out(done);
    bool done_pending;
    to = (lhwt_timeout *)tq_finish_and_pop(&done->node, d->current_seq, &done_pending, d->seq_limit);
    if (!done_pending && done->drains == 0) {
      d->released = step[FFI_RELEASED] = released_id(done);
      done->anchor = 0;
    }
  }
  if (!to) return 0;
  make_current(d, to);
  step[FFI_SHAPE] = call_shape(to);
  step[FFI_READ_AHEAD] = read_ahead_due(d);
  return (int32_t)to->anchor;
}

static void probe_task_call(lua_State *L);

/* internal.read_ahead(drain): read_ahead, for the FFI take's loop when its
 * step says so. */
static int internal_read_ahead(lua_State *L) {
  drain *d = check_drain(L, 1);
  if (!d->current) return 0;
  compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);
  read_ahead(L, d, lua_gettop(L));
  return 0;
}

/* internal.ffi_anchors(drain) -> its anchor table, for the FFI take's loop
 * (which passes the drain itself: the FFI converts a userdata to its address
 * in compiled code, a light userdata not); first the loop's probe, as
 * internal.probe, which the loop would otherwise call just before. */
static int internal_ffi_anchors(lua_State *L) {
  check_drain(L, 1);
  probe_task_call(L);
  compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);
  return 1;
}

/* Sets, in the internal table at the top, the FFI take's address and the
 * numbers that go with it: ffi_layout has the indexes of the step array, of
 * the single anchors in the anchor table and, in a user value table, of the
 * Timeout, the task and its first argument. */
static void set_ffi_take(lua_State *L) {
  lua_pushlightuserdata(L, (void *)(uintptr_t)ffi_take);
  lua_setfield(L, -2, "ffi_take");
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, FFI_TAKE_CLASSIC);
  lua_setfield(L, -2, "classic");
  set_integer_field(L, "released", FFI_RELEASED);
  set_integer_field(L, "shape", FFI_SHAPE);
  set_integer_field(L, "read_ahead", FFI_READ_AHEAD);
  set_integer_field(L, "step_size", FFI_STEP_SIZE);
  set_integer_field(L, "task", TIMEOUT_UV_TASK);
  set_integer_field(L, "first_arg", TIMEOUT_UV_ARGS);
  set_integer_field(L, "self", TIMEOUT_UV_SELF);
  set_integer_field(L, "singles", SINGLES_INDEX);
  lua_setfield(L, -2, "ffi_layout");
}
#endif

/* internal.args(drain) -> whether the current timeout's task is a TimerTask
 * (task:run(...)), and its extra arguments. The probe made room for the
 * most arguments, but a collection may have shrunk the stack since: growing
 * it again can only fail for memory, and that is this task's error. */
static int internal_args(lua_State *L) {
  drain *d = check_drain(L, 1);
  lhwt_timeout *to = d->current;
  if (!to) return 0;
  if (TAKE_SLOTS + to->nargs > LUA_MINSTACK && !lua_checkstack(L, TAKE_SLOTS + to->nargs))
    luaL_error(L, "not enough memory");
  push_anchored(L, to);
  int uvs = compat_uservalues_open(L, -1);
  lua_pushboolean(L, to->run_method);
  for (int i = 0; i < to->nargs; i++) compat_uv_get(L, uvs, TIMEOUT_UV_ARGS + i);
  compat_uservalues_close(L, uvs);
  return 1 + to->nargs;
}

/* Finishes the drain at index 1 (unchecked). */
static int finish_drain(lua_State *L) {
  drain *d = lua_touserdata(L, 1);
  settle_released(L, d);
  finish_current(L, d);
  return 0;
}

static int internal_finish(lua_State *L) {
  check_drain(L, 1);
  return finish_drain(L);
}

/* The poll that used the drain `d` (at index 1) has returned. A poll's
 * drain with nothing taken and unfinished becomes its queue's idle drain
 * (the next poll's); it can take nothing until then. */
static void recycle(lua_State *L, drain *d) {
  settle_released(L, d);
  if (d->is_handoff || d->current || d->handed) return;
  d->seq_limit = 0;
  compat_getuservalue(L, 1, DRAIN_UV_QUEUE);
  lua_pushvalue(L, 1);
  compat_setuservalue(L, -2, QUEUE_UV_IDLE_DRAIN);
  lua_pop(L, 1);
}

/* internal.recycle(drain): see recycle. */
static int internal_recycle(lua_State *L) {
  recycle(L, check_drain(L, 1));
  return 0;
}

/* internal.current(drain) -> the Timeout taken and not finished (or nil),
 * and how many timeouts the drain has taken. */
static int internal_current(lua_State *L) {
  drain *d = check_drain(L, 1);
  if (d->current) push_anchored(L, d->current); else lua_pushnil(L);
  lua_pushinteger(L, d->taken);
  return 2;
}

/* internal.hand(drain) -> a hand-off's drain for the next due timeout, now
 * HANDED; nothing when there is none. */
static int internal_hand(lua_State *L) {
  drain *d = check_drain(L, 1);
  compat_getuservalue(L, 1, DRAIN_UV_QUEUE);
  drain *handoff = new_drain(L, -1);          /* before taking: it may raise */
  lhwt_timeout *to = d->seq_limit ? (lhwt_timeout *)tq_hand_due(&d->tm->queue, d->seq_limit) : NULL;
  if (!to) return 0;
  lua_replace(L, 1);
  handoff->is_handoff = true;
  handoff->handed = to;
  handoff->handed_seq = timeout_seq(&to->node);
  hold_handed(L, to);
  lua_settop(L, 1);                           /* the hand-off */
  return 1;
}

/* Gives a hand-off's timeout that has not started back to the due list. */
static void give_back(lua_State *L, drain *d) {
  lhwt_timeout *to = d->handed;
  if (!to) return;
  d->handed = NULL;
  tq_unhand(&to->node, d->handed_seq);
  compat_getuservalue(L, 1, DRAIN_UV_QUEUE);
  compat_getuservalue(L, 1, DRAIN_UV_HANDED);
  drop_handed(L);
  tell_if_earlier(L, d->tm, -2, lua_touserdata(L, -1));
  lua_pop(L, 2);
}

/* internal.unhand(handoff): the hand-off failed (spawn raised). */
static int internal_unhand(lua_State *L) {
  give_back(L, check_drain(L, 1));
  return 0;
}

static int drain_gc(lua_State *L) {
  drain *d = lua_touserdata(L, 1);
  settle_released(L, d);
  finish_current(L, d);
  give_back(L, d);
  return 0;
}

/* internal.probe(): as deep in C calls and as wide on the Lua stack as a
 * task call of the dispatch loop, doing nothing. The loop calls it, as it
 * would call a task, before it takes anything, so that a poll nested in
 * tasks past the C stack or the Lua stack raises without taking a timeout. */
static void probe_task_call(lua_State *L) {
  if (!lua_checkstack(L, MAX_TASK_ARGS + 8 + MAX_LUA_FRAME))
    luaL_error(L, "not enough memory or stack space to run tasks (poll() nested too deep?)");
  lua_pushvalue(L, DO_NOTHING_UPVALUE);
  lua_call(L, 0, 0);
}

static int internal_probe(lua_State *L) {
  probe_task_call(L);
  return 0;
}

#if COMPAT_CALLK
/* The dispatch loop in C, for Lua 5.3+: it calls each task with lua_callk,
 * whose continuation goes on with the loop after a task that yielded, so
 * that a task may yield as it may from the Lua loop. A task then needs no
 * call into C before it: with its lock and its results, that call costs a
 * loop whose tasks miss the cache about 150 ns a task on Lua 5.4
 * (bench/call_boundary.lua, classic against c_loop). Lua 5.1 and LuaJIT
 * cannot yield across a C call, and 5.2's lua_callk has a continuation of
 * another shape: they keep the loop in lua/hwt.lua. */

/* Pushes the call of the timeout `to`, just taken: the function, the
 * Timeout and the arguments; returns how many arguments. As in
 * internal_args, a stack the collector shrank since the probe can only fail
 * to grow for memory, and that is this task's error. */
static int push_task_call(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
  if (TAKE_SLOTS + to->nargs > LUA_MINSTACK && !lua_checkstack(L, TAKE_SLOTS + to->nargs))
    luaL_error(L, "not enough memory");
  push_anchored_in(L, anchors_idx, to);
  int timeout_idx = lua_gettop(L);
  int uvs = compat_uservalues_open(L, timeout_idx);
  compat_uv_get(L, uvs, TIMEOUT_UV_TASK);
  if (to->run_method) {                       /* task:run(t, ...) */
    lua_getfield(L, -1, "run");
    if (!is_callable(L, -1))
      luaL_error(L, "TimerTask's 'run' method: function expected, got %s", luaL_typename(L, -1));
    lua_insert(L, -2);
  }
  lua_pushvalue(L, timeout_idx);
  for (int i = 0; i < to->nargs; i++) compat_uv_get(L, uvs, TIMEOUT_UV_ARGS + i);
  compat_uservalues_close(L, uvs);
  return to->run_method + 1 + to->nargs;
}

/* internal.run_batch's stack: the drain, the budget, the anchor table. */
enum { BATCH_DRAIN_IDX = 1, BATCH_BUDGET_IDX, BATCH_ANCHORS_IDX };

/* The budget as a count the continuation's context can hold: a larger one
 * (poll() with no max is math.huge) ends the batch early, and run_drain
 * starts the next. */
static lua_KContext batch_budget(lua_State *L) {
  const lua_Number most = (lua_Number)(INTPTR_MAX < LUA_MAXINTEGER ? INTPTR_MAX : LUA_MAXINTEGER);
  lua_Number budget = lua_tonumber(L, BATCH_BUDGET_IDX);
  return budget < most ? (lua_KContext)budget : (lua_KContext)most;
}

static int batch_result(lua_State *L, bool nothing_due, lua_KContext taken) {
  lua_pushboolean(L, nothing_due);
  lua_pushinteger(L, (lua_Integer)taken);
  return 2;
}

/* The loop from the batch's (taken + 1)th task on; also the continuation of
 * a task that yielded, the one before it. */
static int run_batch_from(lua_State *L, int status, lua_KContext taken) {
  (void)status;
  drain *d = lua_touserdata(L, BATCH_DRAIN_IDX);
  lua_KContext budget = batch_budget(L);
  for (; taken < budget; taken++) {
    lua_settop(L, BATCH_ANCHORS_IDX);
    lhwt_timeout *to = take_next(L, d, BATCH_ANCHORS_IDX);
    if (!to) return batch_result(L, true, taken);
    int nargs = push_task_call(L, BATCH_ANCHORS_IDX, to);
    lua_callk(L, nargs, 0, taken + 1, run_batch_from);
  }
  return batch_result(L, false, budget);
}

/* internal.run_batch(drain, budget) -> whether nothing more is due, and how
 * many tasks it took: lua/hwt.lua's run_batch, in C (see there). */
static int internal_run_batch(lua_State *L) {
  check_drain(L, BATCH_DRAIN_IDX);
  luaL_checknumber(L, BATCH_BUDGET_IDX);
  lua_settop(L, BATCH_BUDGET_IDX);
  probe_task_call(L);
  compat_getuservalue(L, BATCH_DRAIN_IDX, DRAIN_UV_ANCHORS);
  return run_batch_from(L, LUA_OK, 0);
}

/* internal.poll's stack: the drain, the error handler. */
enum { POLL_DRAIN_IDX = 1, POLL_HANDLER_IDX };

static int pass_error(lua_State *L) {
  lua_settop(L, 1);
  return 1;
}

static int poll_from(lua_State *L, int status, lua_KContext ran);

/* Runs the poll's next batch, protected; returns its status, its results
 * (or its error) at the top. Its continuation goes on with the poll after
 * a task that yielded. */
static int call_batch(lua_State *L, lua_KContext ran) {
  lua_settop(L, POLL_HANDLER_IDX);
  lua_pushvalue(L, RUN_BATCH_UPVALUE);
  lua_pushvalue(L, POLL_DRAIN_IDX);
  lua_pushnumber(L, HUGE_VAL);
  return lua_pcallk(L, 2, 2, POLL_HANDLER_IDX, ran, poll_from);
}

/* A batch raised (its error at the top), with `ran` tasks run before it.
 * If it took no task, the poll fails with that error, as lua/hwt.lua's
 * run_drain does; else the error was its last task's, reported as a task's
 * error. Returns how many tasks have now run. */
static lua_KContext after_batch_error(lua_State *L, lua_KContext ran) {
  drain *d = lua_touserdata(L, POLL_DRAIN_IDX);
  int error_idx = lua_gettop(L);
  if ((lua_KContext)d->taken == ran) {
    lua_pushcfunction(L, finish_drain);
    lua_pushvalue(L, POLL_DRAIN_IDX);
    lua_pcall(L, 1, 0, 0);
    lua_settop(L, error_idx);
    return lua_error(L);
  }
  push_on_error_of_drain(L, POLL_DRAIN_IDX);
  int on_error_idx = lua_gettop(L);
  int timeout_idx = 0;
  if (d->current) {
    push_anchored(L, d->current);
    timeout_idx = lua_gettop(L);
  }
  lua_pushvalue(L, error_idx);
  report_task_error(L, on_error_idx, timeout_idx);
  return (lua_KContext)d->taken;
}

/* The poll's loop over batches, from one that returned (or raised) with
 * `ran` tasks run before it; also the continuation of a batch whose task
 * yielded. */
static int poll_from(lua_State *L, int status, lua_KContext ran) {
  for (;;) {
    if (status == LUA_OK || status == LUA_YIELD) {
      bool nothing_due = lua_toboolean(L, -2);
      ran += (lua_KContext)lua_tointeger(L, -1);
      if (nothing_due) break;
    } else {
      ran = after_batch_error(L, ran);
    }
    status = call_batch(L, ran);
  }
  recycle(L, lua_touserdata(L, POLL_DRAIN_IDX));
  lua_pushinteger(L, (lua_Integer)ran);
  return 1;
}

/* internal.poll(timer) -> how many tasks ran: poll() with neither max nor
 * spawn, in C: lua/hwt.lua's drain_timer with its run_drain, without the
 * Lua calls between the wake-up and the first task (each costs a wake-up
 * whose caches are cold; bench/RESULTS.md, twentieth round). false when
 * `timer` is not a Timer: poll() raises its own message. */
static int internal_poll(lua_State *L) {
  timer_handle *handle = test_class(L, 1, TIMER_MT_UPVALUE);
  if (!handle) {
    lua_pushboolean(L, false);
    return 1;
  }
  lua_settop(L, 1);
  if (!begin_poll(L, handle->tm)) {
    lua_pushinteger(L, 0);
    return 1;
  }
  lua_CFunction handler = has_on_error(L) ? pass_error : traceback_handler;
  lua_replace(L, POLL_DRAIN_IDX);
  lua_pushcfunction(L, handler);
  return poll_from(L, call_batch(L, 0), 0);
}
#endif

/* ---- Timer ------------------------------------------------------------ */

static int hwt_now(lua_State *L) {
  lua_pushnumber(L, ns_to_seconds(engine_monotonic_ns()));
  return 1;
}

static void push_refusal(lua_State *L, uint64_t max_pending) {
  char message[80];
  snprintf(message, sizeof message, "too many pending timeouts (max_pending = %llu)",
           (unsigned long long)max_pending);
  lua_pushstring(L, message);
}

#define NO_THREAD_MESSAGE "cannot start the timer's worker thread"

/* A failed tq_schedule or tq_reset: raises once stopped, else nil and why. */
static int arming_failed(lua_State *L, const lhwt_timer *tm, int result) {
  if (result == TQ_STOPPED) return luaL_error(L, "timer is stopped");
  lua_pushnil(L);
  if (result == TQ_FULL)
    push_refusal(L, tq_max_pending(&tm->queue));
  else
    lua_pushliteral(L, NO_THREAD_MESSAGE);
  return 2;
}

static int schedule(lua_State *L, lhwt_timer *tm, uint64_t delay_ns, uint64_t interval_ns) {
  bool run_method = check_task(L, 3);
  int nargs = lua_gettop(L) - 3;
  luaL_argcheck(L, nargs <= MAX_TASK_ARGS, 3 + MAX_TASK_ARGS, "too many task arguments");
  lhwt_timeout *to = compat_newuserdata(L, sizeof *to, TIMEOUT_UV_ARGS - 1 + nargs);
  memset(to, 0, sizeof *to);
  to->nargs = (uint8_t)nargs;
  to->run_method = run_method;
  lua_pushvalue(L, TIMEOUT_MT_UPVALUE);
  lua_setmetatable(L, -2);
  int timeout_idx = lua_gettop(L);
  compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  int queue_idx = timeout_idx + 1;
  int uvs = compat_uservalues_open(L, timeout_idx);
  lua_pushvalue(L, queue_idx);
  compat_uv_set(L, uvs, TIMEOUT_UV_QUEUE);
  lua_pushvalue(L, 3);
  compat_uv_set(L, uvs, TIMEOUT_UV_TASK);
  for (int i = 0; i < nargs; i++) {
    lua_pushvalue(L, 4 + i);
    compat_uv_set(L, uvs, TIMEOUT_UV_ARGS + i);
  }
  compat_uservalues_close(L, uvs);
  int table_idx = push_kind_table(L, queue_idx, to);
  anchor(L, table_idx, queue_idx, to, timeout_idx, 3);
  int result = tq_schedule(&tm->queue, &to->node, delay_ns, interval_ns);
  if (result == TQ_OK) {
    if (tm->has_watcher) tell_if_earlier(L, tm, queue_idx, to);   /* not on the common path */
    lua_pushvalue(L, timeout_idx);              /* returned from the top: no settop */
    return 1;
  }
  unanchor(L, tm, table_idx, to);
  return arming_failed(L, tm, result);
}

static int timer_timeout(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  return schedule(L, tm, check_delay_ns(L, 2, "delay"), 0);
}

static int timer_every(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  luaL_argcheck(L, luaL_checknumber(L, 2) > 0, 2, "interval must be > 0");
  uint64_t interval_ns = check_delay_ns(L, 2, "interval");
  if (interval_ns == 0) interval_ns = 1;         /* below a nanosecond */
  return schedule(L, tm, interval_ns, interval_ns);
}

static uint64_t opt_wait_ns(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) ? ENGINE_NEVER : check_delay_ns(L, idx, "seconds");
}

static int timer_wait(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  lua_pushboolean(L, tq_wait(&tm->queue, opt_wait_ns(L, 2)));
  return 1;
}

static lhwt_timer *check_manual_timer(lua_State *L, int idx, const char *fname) {
  lhwt_timer *tm = check_timer(L, idx);
  if (!tm->manual_clock)
    luaL_error(L, "%s() needs a timer created with clock = \"manual\"", fname);
  return tm;
}

/* internal.clock_mark(timer, seconds) -> the manual clock's time `seconds`
 * from now, in a userdata (nanoseconds, exact on every Lua). */
static int internal_clock_mark(lua_State *L) {
  lhwt_timer *tm = check_manual_timer(L, 1, "run_for");
  uint64_t delta_ns = seconds_to_ns(luaL_checknumber(L, 2));
  uint64_t *mark_ns = compat_newuserdata(L, sizeof *mark_ns, 0);
  uint64_t now_ns = tm->initialized ? tq_now_ns(&tm->queue) : 0;
  *mark_ns = delta_ns > ENGINE_MAX_DELAY_NS - now_ns ? ENGINE_MAX_DELAY_NS : now_ns + delta_ns;
  return 1;
}

/* internal.step_to(timer, mark) -> whether the manual clock is at the mark,
 * whether it moved, and whether something is due: it moves to the timer's
 * next deadline, or to the mark if that comes first (not while something
 * is due). Once stopped, the timer is at its mark with nothing due. */
static int internal_step_to(lua_State *L) {
  lhwt_timer *tm = check_manual_timer(L, 1, "run_for");
  const uint64_t *mark_ns = lua_touserdata(L, 2);
  luaL_argcheck(L, mark_ns != NULL, 2, "clock mark expected");
  bool due = false, moved = false, at_mark = true;
  if (tm->initialized && !tq_is_stopped(&tm->queue)) {
    uint64_t before_ns = tq_now_ns(&tm->queue);
    uint64_t now_ns = tq_step_manual(&tm->queue, *mark_ns, &due);
    at_mark = now_ns >= *mark_ns;
    moved = now_ns != before_ns;
  }
  lua_pushboolean(L, at_mark);
  lua_pushboolean(L, moved);
  lua_pushboolean(L, due);
  return 3;
}

/* internal.advance_clock(timer, seconds): the manual clock's move, without
 * the poll (lua/hwt.lua checks the arguments and drains). */
static int internal_advance_clock(lua_State *L) {
  lhwt_timer *tm = check_manual_timer(L, 1, "advance");
  double seconds = luaL_checknumber(L, 2);
  if (!tq_is_stopped(&tm->queue)) tq_advance_manual(&tm->queue, seconds_to_ns(seconds));
  return 0;
}

/* internal.clock_state(timer) -> whether its clock is manual, whether it is
 * stopped: what stats() says, without building the table. */
static int internal_clock_state(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  lua_pushboolean(L, tm->manual_clock);
  lua_pushboolean(L, !tm->initialized || tq_is_stopped(&tm->queue));
  return 2;
}

static int timer_pending(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)tq_pending(&check_timer(L, 1)->queue));
  return 1;
}

/* Raises once the timer was collected (reachable only from finalizers). */
static lhwt_timer *check_alive_timer(lua_State *L, int idx) {
  lhwt_timer *tm = check_timer(L, idx);
  if (!tm->initialized) luaL_error(L, "timer was garbage-collected or its Lua state is closing");
  return tm;
}

/* The real clock reads as hwt.now(); a manual one counts from 0. */
static int timer_now(lua_State *L) {
  lhwt_timer *tm = check_alive_timer(L, 1);
  if (!tm->manual_clock) return hwt_now(L);
  lua_pushnumber(L, ns_to_seconds(tq_now_ns(&tm->queue)));
  return 1;
}

static int timer_fd(lua_State *L) {
  int fd = tq_fd(&check_alive_timer(L, 1)->queue);
  if (fd < 0) {
    lua_pushnil(L);
    lua_pushliteral(L, NO_THREAD_MESSAGE);
    return 2;
  }
  lua_pushinteger(L, fd);
  return 1;
}

/* Seconds until a poll would run something; nil when nothing can fall due.
 * What it returns is also what on_earlier's watcher compares with. */
static int timer_next_due(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  uint64_t due_in_ns = tm->initialized ? tq_next_due(&tm->queue) : ENGINE_NEVER;
  if (due_in_ns == ENGINE_NEVER) {
    tm->told_due_ns = ENGINE_NEVER;
    lua_pushnil(L);
    return 1;
  }
  tm->told_due_ns = tq_now_ns(&tm->queue) + due_in_ns;
  lua_pushnumber(L, ns_to_seconds(due_in_ns));
  return 1;
}

/* on_earlier(fn | nil): fn(seconds) hears when an arming makes next_due()
 * earlier than what it last returned or told. */
static int timer_on_earlier(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  if (!lua_isnoneornil(L, 2) && !is_callable(L, 2))
    luaL_argerror(L, 2, "function or nil expected");
  lua_settop(L, 2);
  tm->has_watcher = !lua_isnil(L, 2);            /* before the set pops it */
  compat_setuservalue(L, 1, TIMER_UV_WATCHER);
  tm->told_due_ns = ENGINE_NEVER;
  return 0;
}

static int timer_stats(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  tq_stats stats;
  tq_get_stats(&tm->queue, &stats);
  lua_createtable(L, 0, 16);
  set_integer_field(L, "pending", stats.pending);
  set_integer_field(L, "due", stats.due);
  set_integer_field(L, "fired", stats.fired);
  set_integer_field(L, "cancelled", stats.cancelled);
  set_integer_field(L, "ticks", stats.ticks);
  set_integer_field(L, "worker_wakeups", stats.worker_wakeups);
  set_integer_field(L, "wheel_size", tm->wheel_size);
  set_integer_field(L, "max_pending", tq_max_pending(&tm->queue));
  lua_pushnumber(L, ns_to_seconds(stats.late_max_ns));
  lua_setfield(L, -2, "late_max");
  lua_pushnumber(L, ns_to_seconds(tq_late_percentile(&tm->queue, 50)));
  lua_setfield(L, -2, "late_p50");
  lua_pushnumber(L, ns_to_seconds(tq_late_percentile(&tm->queue, 99)));
  lua_setfield(L, -2, "late_p99");
  lua_pushnumber(L, ns_to_seconds(tm->tick_ns));
  lua_setfield(L, -2, "tick");
  lua_pushstring(L, tm->manual_clock ? "manual" : "monotonic");
  lua_setfield(L, -2, "clock");
  lua_pushboolean(L, tq_is_stopped(&tm->queue));
  lua_setfield(L, -2, "stopped");
  lua_pushboolean(L, tm->shared_engine);
  lua_setfield(L, -2, "shared");
  return 1;
}

/* Whether lua_next's entry (key at -2, value at -1) is a Timeout's anchor,
 * and not a task that is a userdata too. */
static bool at_anchor_entry(lua_State *L) {
  return lua_type(L, -1) == LUA_TUSERDATA &&
         (ANCHOR_STRIDE == 1 || lua_tointeger(L, -2) % ANCHOR_STRIDE == 1);
}

/* The Timeouts anchored in the table at anchors_idx, every one the engine
 * holds and those that drains hold: how many, and the first `room` of them
 * in `out` unless NULL. Allocates nothing, so no finalizer runs meanwhile. */
static size_t list_anchored(lua_State *L, int anchors_idx, timeout **out, size_t room) {
  size_t count = 0;
  for (lua_pushnil(L); lua_next(L, anchors_idx); lua_pop(L, 1)) {
    if (!at_anchor_entry(L)) continue;
    if (out && count < room) out[count] = lua_touserdata(L, -1);
    count++;
  }
#if COMPAT_FFI
  int singles_idx = push_singles(L, anchors_idx);
  for (lua_pushnil(L); lua_next(L, singles_idx); lua_pop(L, 1)) {
    lua_rawgeti(L, -1, TIMEOUT_UV_SELF);
    if (out && count < room) out[count] = lua_touserdata(L, -1);
    lua_pop(L, 1);
    count++;
  }
  lua_pop(L, 1);
#endif
  return count;
}

/* The anchored Timeouts in a malloc'd array (not Lua's allocator: this runs
 * in __gc too). NULL when there are none or memory is short. */
static timeout **held_timeouts(lua_State *L, int anchors_idx, size_t *count) {
  size_t capacity = list_anchored(L, anchors_idx, NULL, 0);
  timeout **held = capacity ? malloc(capacity * sizeof *held) : NULL;
  *count = held ? capacity : 0;
  if (held) list_anchored(L, anchors_idx, held, capacity);
  return held;
}

/* tq_stop with the timer's anchored timeouts (without them the engine would
 * walk its whole wheel, which other timers may share). */
static void stop_queue(lua_State *L, lhwt_timer *tm, int anchors_idx, tq_ended *ended) {
  size_t count;
  timeout **held = held_timeouts(L, anchors_idx, &count);
  tq_stop(&tm->queue, held, count, ended);
  free(held);
}

/* Stops the timer at index 1; returns the timeouts that never ran, in
 * deadline order, as an array at the top of the stack. */
static void stop_timer(lua_State *L, lhwt_timer *tm) {
  lua_createtable(L, (int)tq_pending(&tm->queue), 0);
  int result_idx = lua_gettop(L);
  push_anchors(L, 1);
  int anchors_idx = lua_gettop(L);
  int singles_idx = push_singles(L, anchors_idx);
  tq_ended ended;
  stop_queue(L, tm, anchors_idx, &ended);
  compat_getuservalue(L, 1, TIMER_UV_QUEUE);
  retire_queue(L, tm, -1);
  int count = 0;
  timeout *n;
  while ((n = tq_ended_pop(&ended))) {
    lhwt_timeout *to = (lhwt_timeout *)n;
    if (!timeout_has_run(&to->node)) {                  /* CANCELLED, not DONE */
      push_anchored_in(L, anchors_idx, to);
      lua_rawseti(L, result_idx, ++count);
    }
    if (to->drains == 0)                          /* else its drain's finish does */
      unanchor(L, tm, anchor_kind(to) == ANCHOR_SINGLE ? singles_idx : anchors_idx, to);
  }
  lua_settop(L, result_idx);
}

/* timer:timeouts() -> what pending() counts, in (deadline, seq) order. Its
 * two allocations (the list of anchored timeouts and the result, sized for
 * all of them) come before the anchors are read: a finalizer they run may
 * arm or cancel timeouts of this timer, so the reading starts again if more
 * were anchored meanwhile. From the reading on nothing allocates, so every
 * Timeout listed is still anchored when it is stored. */
static int timer_timeouts(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  lua_settop(L, 1);
  push_anchors(L, 1);
  luaL_checkstack(L, 8, "timeouts()");
  size_t room = 0, count;
  timeout **held;
  do {
    lua_settop(L, 2);
    room = list_anchored(L, 2, NULL, 0) + ANCHOR_SLOTS_MIN;
    held = compat_newuserdata(L, room * sizeof *held, 0);
    lua_createtable(L, (int)room, 0);
    count = list_anchored(L, 2, held, room);
  } while (count > room);
  size_t kept = 0;
  if (tm->initialized && tq_select_pending(&tm->queue, held, count, &kept) != TQ_OK)
    return luaL_error(L, "not enough memory");
  for (size_t i = 0; i < kept; i++) {
    push_anchored_in(L, 2, (lhwt_timeout *)held[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int timer_stop(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  lua_settop(L, 1);
  stop_timer(L, tm);
  return 1;
}

/* Through the stop method, so that what extends it (lua/hwt.lua) runs too. */
static int timer_close(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  lua_settop(L, 1);
  if (!tm->initialized) return 0;
  lua_getfield(L, 1, "stop");
  lua_pushvalue(L, 1);
  lua_call(L, 1, 0);
  return 0;
}

static int timer_gc(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  if (tm->initialized) {
    push_anchors(L, 1);
    stop_queue(L, tm, lua_gettop(L), NULL);
    compat_getuservalue(L, 1, TIMER_UV_QUEUE);
    retire_queue(L, tm, -1);
    release_queue(tm);
    lua_pushvalue(L, 1);           /* Lua cleared it; a later finalizer may resurrect us */
    set_state_entry(L, STATE_UV_TIMERS, -2);
  }
  return 0;
}

/* internal.report_error(timer or drain, err [, timeout]): err goes where a
 * task's error goes (on_error, or stderr). */
static int internal_report_error(lua_State *L) {
  lua_settop(L, 3);
  if (luaL_testudata(L, 1, DRAIN_MT)) {
    push_on_error_of_drain(L, 1);
  } else {
    check_timer(L, 1);
    compat_getuservalue(L, 1, TIMER_UV_ON_ERROR);
  }
  int on_error_idx = lua_gettop(L);
  lua_pushvalue(L, 2);
  report_task_error(L, on_error_idx, lua_isnil(L, 3) ? 0 : 3);
  return 0;
}

static int timer_tostring(lua_State *L) {
  lhwt_timer *tm = check_timer(L, 1);
  if (!tm->initialized || tq_is_stopped(&tm->queue))
    lua_pushfstring(L, "hwt.Timer (stopped): %p", (void *)tm);
  else
    lua_pushfstring(L, "hwt.Timer (tick %fs, %d pending): %p", ns_to_seconds(tm->tick_ns),
                    (int)tq_pending(&tm->queue), (void *)tm);
  return 1;
}

/* ---- hwt.new ---------------------------------------------------------- */

typedef struct timer_options {
  double tick;
  lua_Integer wheel_size, max_pending;
  bool manual_clock;
  bool shared;
} timer_options;

static lua_Number option_number(lua_State *L, const char *key) {
  if (!lua_isnumber(L, -1))
    luaL_error(L, "bad option '%s' to 'new' (number expected, got %s)", key, luaL_typename(L, -1));
  return lua_tonumber(L, -1);
}

/* `expected` says the range in words, for the error message. */
static lua_Integer option_integer(lua_State *L, const char *key, lua_Integer lo,
                                  lua_Integer hi, const char *expected) {
  option_number(L, key);
  int is_integer;
  lua_Integer value = compat_tointegerx(L, -1, &is_integer);
  if (!is_integer || value < lo || value > hi)
    luaL_error(L, "bad option '%s' to 'new' (%s expected)", key, expected);
  return value;
}

/* Reads the option at the top of the stack, named by the key below it. */
static void read_option(lua_State *L, timer_options *opts, int timer_idx) {
  if (lua_type(L, -2) != LUA_TSTRING)
    luaL_error(L, "bad argument #1 to 'new' (option names must be strings)");
  const char *key = lua_tostring(L, -2);
  if (strcmp(key, "tick") == 0) {
    opts->tick = option_number(L, key);
    if (!(opts->tick >= ENGINE_TICK_MIN_NS / NS_PER_SEC &&
          opts->tick <= ENGINE_MAX_DELAY_NS / NS_PER_SEC))
      luaL_error(L, "bad option 'tick' to 'new' (seconds from 1e-06 to 4.6e+09 expected, got %f)",
                 opts->tick);
  } else if (strcmp(key, "wheel_size") == 0) {
    opts->wheel_size = option_integer(L, key, 1, ENGINE_WHEEL_SIZE_MAX, "integer from 1 to 2^30");
  } else if (strcmp(key, "max_pending") == 0) {
    opts->max_pending = option_integer(L, key, 0, LUA_MAXINTEGER, "integer >= 0");
  } else if (strcmp(key, "on_error") == 0) {
    if (!is_callable(L, -1))
      luaL_error(L, "bad option 'on_error' to 'new' (function expected, got %s)", luaL_typename(L, -1));
    lua_pushvalue(L, -1);
    compat_setuservalue(L, timer_idx, TIMER_UV_ON_ERROR);
  } else if (strcmp(key, "shared") == 0) {
    if (lua_type(L, -1) != LUA_TBOOLEAN)
      luaL_error(L, "bad option 'shared' to 'new' (boolean expected, got %s)", luaL_typename(L, -1));
    opts->shared = lua_toboolean(L, -1);
  } else if (strcmp(key, "clock") == 0) {
    const char *clock = lua_tostring(L, -1);
    bool known = lua_type(L, -1) == LUA_TSTRING &&
                 (strcmp(clock, "manual") == 0 || strcmp(clock, "monotonic") == 0);
    if (!known)
      luaL_error(L, "bad option 'clock' to 'new' (\"monotonic\" or \"manual\" expected)");
    opts->manual_clock = strcmp(clock, "manual") == 0;
  } else {
    luaL_error(L, "bad argument #1 to 'new' (unknown option '%s')", key);
  }
}

/* A new queue userdata whose anchor table is that of the Timer at timer_idx;
 * it becomes the Timer's user value TIMER_UV_QUEUE and stays at the top. */
static lhwt_timer *new_queue(lua_State *L, int timer_idx) {
  lhwt_timer *tm = compat_newuserdata(L, sizeof *tm, QUEUE_UVS);
  memset(tm, 0, sizeof *tm);
  tm->told_due_ns = ENGINE_NEVER;
  compat_getuservalue(L, timer_idx, TIMER_UV_ANCHORS);
#if COMPAT_FFI
  lua_rawgeti(L, -1, SINGLES_INDEX);
  compat_setuservalue(L, -3, QUEUE_UV_SINGLES);
#endif
  compat_setuservalue(L, -2, QUEUE_UV_ANCHORS);
  luaL_setmetatable(L, QUEUE_MT);
  lua_pushvalue(L, -1);
  compat_setuservalue(L, timer_idx, TIMER_UV_QUEUE);
  return tm;
}

static int hwt_new(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  timer_handle *handle = compat_newuserdata(L, sizeof *handle, TIMER_UVS);
  int timer_idx = lua_gettop(L);
  lua_newtable(L);
#if COMPAT_FFI
  lua_newtable(L);
  lua_rawseti(L, -2, SINGLES_INDEX);
#endif
  compat_setuservalue(L, timer_idx, TIMER_UV_ANCHORS);
  lhwt_timer *tm = handle->tm = new_queue(L, timer_idx);
  int queue_idx = lua_gettop(L);
  timer_options opts = {DEFAULT_TICK, DEFAULT_WHEEL_SIZE, 0, false, true};
  if (lua_istable(L, 1)) {
    lua_pushnil(L);
    while (lua_next(L, 1)) {
      read_option(L, &opts, timer_idx);
      lua_pop(L, 1);
    }
  }
  lua_pushvalue(L, TIMER_MT_UPVALUE);
  lua_setmetatable(L, timer_idx);
  tm->manual_clock = opts.manual_clock;
  tm->tick_ns = seconds_to_ns(opts.tick);
  tm->shared_engine = opts.shared && !opts.manual_clock;   /* manual time is private */
  state_timers *home = lua_touserdata(L, STATE_TIMERS_UPVALUE);
  if (!state_can_stop_timers(L, home)) {                  /* born stopped */
    lua_settop(L, timer_idx);
    return 1;
  }
  engine *eng = tm->shared_engine
                    ? engine_acquire_shared(tm->tick_ns, (uint32_t)opts.wheel_size)
                    : engine_new(tm->tick_ns, (uint32_t)opts.wheel_size, opts.manual_clock);
  if (!eng) return luaL_error(L, "not enough memory for a wheel of %d slots", (int)opts.wheel_size);
  tm->wheel_size = engine_wheel_size(eng);
  tm->epoch_ns = engine_epoch_ns(eng);
  int result = tq_init(&tm->queue, eng, (uint64_t)opts.max_pending);
  engine_release(eng);                           /* the queue holds it now */
  if (result != TQ_OK) return luaL_error(L, "cannot create the timer's wake-up descriptor");
  tm->initialized = true;
  list_timer(home, tm);
  lua_pushboolean(L, true);
  set_state_entry(L, STATE_UV_RUNNING, queue_idx);
  lua_pushvalue(L, timer_idx);
  set_state_entry(L, STATE_UV_TIMERS, queue_idx);
  lua_settop(L, timer_idx);
  return 1;
}

/* ---- Timeout ---------------------------------------------------------- */

static int timeout_cancel(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  bool cancelled = tq_cancel(&to->node);
  if (cancelled && to->drains == 0) {         /* else its drain's finish unanchors */
    compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
    unanchor(L, timer_of(to), push_kind_table(L, lua_gettop(L), to), to);
  }
  lua_pushboolean(L, cancelled);
  return 1;
}

/* t:reset([delay]) -> true, or nil and why (max_pending); raises once the
 * timer stopped. Anchors t first when nothing held it (it ran or was
 * cancelled): that may raise, and must not follow a re-arming. The queue
 * userdata is the owner's container, so the common case (t anchored, no
 * watcher) needs no user value. */
static int timeout_reset(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  uint64_t delay_ns = lua_isnoneornil(L, 2) ? timeout_period_ns(&to->node) : check_delay_ns(L, 2, "delay");
  lhwt_timer *tm = timer_of(to);
  bool anchored_here = to->anchor == 0;
  if (anchored_here) {
    lua_settop(L, 1);
    compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
    push_kind_table(L, 2, to);
    anchor(L, 3, 2, to, 1, 0);
  }
  int result = tm->initialized ? tq_reset(&to->node, delay_ns) : TQ_STOPPED;
  if (result == TQ_OK) {
    if (tm->has_watcher) {
      compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
      tell_if_earlier(L, tm, -1, to);
    }
    lua_pushboolean(L, true);
    return 1;
  }
  if (anchored_here) unanchor(L, tm, 3, to);
  return arming_failed(L, tm, result);
}

/* t:deadline() -> on the timer's clock (timer:now()); math.huge: never. */
static int timeout_deadline(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
  const lhwt_timer *tm = lua_touserdata(L, -1);
  uint64_t deadline_ns = tq_deadline(&to->node);
  lua_pushnumber(L, deadline_ns == ENGINE_NEVER ? HUGE_VAL : ns_to_seconds(tm->epoch_ns + deadline_ns));
  return 1;
}

static int timeout_close(lua_State *L) {
  timeout_cancel(L);
  return 0;
}

static int timeout_is_cancelled(lua_State *L) {
  lua_pushboolean(L, timeout_cancelled(&check_timeout(L, 1)->node));
  return 1;
}

static int timeout_is_expired(lua_State *L) {
  lua_pushboolean(L, timeout_has_run(&check_timeout(L, 1)->node));
  return 1;
}

/* nil once the timer was collected: a Timeout does not keep it alive. */
static int timeout_timer(lua_State *L) {
  check_timeout(L, 1);
  compat_getuservalue(L, STATE_TIMERS_UPVALUE, STATE_UV_TIMERS);
  compat_getuservalue(L, 1, TIMEOUT_UV_QUEUE);
  lua_rawget(L, -2);
  return 1;
}

static int timeout_task(lua_State *L) {
  check_timeout(L, 1);
  compat_getuservalue(L, 1, TIMEOUT_UV_TASK);
  return 1;
}

static int timeout_remaining_seconds(lua_State *L) {
  lua_pushnumber(L, ns_to_seconds(timeout_remaining(&check_timeout(L, 1)->node)));
  return 1;
}

static const char *state_name(const lhwt_timeout *to, int state) {
  switch (state) {
    case TIMEOUT_PENDING: return timeout_has_run(&to->node) ? "pending (periodic)" : "pending";
    case TIMEOUT_DUE: return "due";
    case TIMEOUT_RUNNING: return "running";
    case TIMEOUT_HANDED: return "due, handed to spawn";
    case TIMEOUT_CANCELLED: return "cancelled";
    default: return "expired";
  }
}

static int timeout_tostring(lua_State *L) {
  lhwt_timeout *to = check_timeout(L, 1);
  const char *state = state_name(to, timeout_state(&to->node));
  uint64_t remaining_ns = timeout_remaining(&to->node);
  if (remaining_ns == ENGINE_NEVER)
    lua_pushfstring(L, "hwt.Timeout (%s, never due): %p", state, (void *)to);
  else
    lua_pushfstring(L, "hwt.Timeout (%s, due in %fs): %p", state,
                    ns_to_seconds(remaining_ns), (void *)to);
  return 1;
}

/* ---- registration ----------------------------------------------------- */

/* poll, run and advance are lua/hwt.lua's: they call tasks (see dispatch). */
static const luaL_Reg timer_methods[] = {
  {"timeout", timer_timeout}, {"every", timer_every}, {"wait", timer_wait},
  {"pending", timer_pending}, {"now", timer_now}, {"fd", timer_fd},
  {"next_due", timer_next_due}, {"on_earlier", timer_on_earlier},
  {"timeouts", timer_timeouts}, {"stats", timer_stats}, {"stop", timer_stop}, {NULL, NULL}
};

static const luaL_Reg timer_metamethods[] = {
  {"__gc", timer_gc}, {"__close", timer_close}, {"__tostring", timer_tostring},
  {NULL, NULL}
};

static const luaL_Reg timeout_methods[] = {
  {"cancel", timeout_cancel}, {"is_cancelled", timeout_is_cancelled},
  {"is_expired", timeout_is_expired}, {"timer", timeout_timer},
  {"task", timeout_task}, {"remaining", timeout_remaining_seconds},
  {"reset", timeout_reset}, {"deadline", timeout_deadline}, {NULL, NULL}
};

static const luaL_Reg timeout_metamethods[] = {
  {"__close", timeout_close}, {"__tostring", timeout_tostring}, {NULL, NULL}
};

static const luaL_Reg module_functions[] = {
  {"new", hwt_new}, {"now", hwt_now}, {NULL, NULL}
};

/* For lua/hwt.lua alone (core.internal; not exported by hwt). */
static const luaL_Reg internal_functions[] = {
  {"drain", internal_drain}, {"take", internal_take}, {"args", internal_args},
  {"finish", internal_finish}, {"recycle", internal_recycle},
  {"current", internal_current}, {"hand", internal_hand}, {"unhand", internal_unhand},
  {"probe", internal_probe}, {"traceback", traceback_handler},
  {"report_error", internal_report_error}, {"advance_clock", internal_advance_clock},
  {"clock_mark", internal_clock_mark}, {"step_to", internal_step_to},
  {"clock_state", internal_clock_state},
#if COMPAT_FFI
  {"ffi_anchors", internal_ffi_anchors}, {"read_ahead", internal_read_ahead},
#endif
#if COMPAT_CALLK
  {"run_batch", internal_run_batch}, {"poll", internal_poll},
#endif
  {NULL, NULL}
};

/* Sets the functions of `functions` into the table at the top, each with the
 * module's upvalues (at upvalues_idx ...). */
static void set_module_functions(lua_State *L, int upvalues_idx, const luaL_Reg *functions) {
  for (int i = 0; i < MODULE_UPVALUES; i++) lua_pushvalue(L, upvalues_idx + i);
  luaL_setfuncs(L, functions, MODULE_UPVALUES);
}

/* Fills the metatable at mt_idx: its metamethods, its name, __metatable (a
 * script must not reach __gc) and an __index table of methods, which it
 * leaves on the stack. */
static void fill_class(lua_State *L, int mt_idx, int upvalues_idx, const char *name,
                       const luaL_Reg *meta, const luaL_Reg *methods) {
  lua_pushvalue(L, mt_idx);
  set_module_functions(L, upvalues_idx, meta);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable");
  lua_newtable(L);
  set_module_functions(L, upvalues_idx, methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lua_remove(L, -2);
}

int luaopen_hwt_core(lua_State *L) {
#if LUA_VERSION_NUM == 501
  keep_library_loaded();
#endif
  luaL_newmetatable(L, TIMER_MT);
  int mts_idx = lua_gettop(L);
  luaL_newmetatable(L, TIMEOUT_MT);
  make_internal_metatable(L, QUEUE_MT, queue_gc);
  make_internal_metatable(L, DRAIN_MT, drain_gc);
  push_state_timers(L);
  luaL_getmetatable(L, DRAIN_MT);
  lua_pushcfunction(L, do_nothing);
#if COMPAT_CALLK
  for (int i = 0; i < MODULE_UPVALUES - 1; i++) lua_pushvalue(L, mts_idx + i);
  lua_pushcclosure(L, internal_run_batch, MODULE_UPVALUES - 1);
#else
  lua_pushnil(L);
#endif
  lua_newtable(L);
  int module_idx = lua_gettop(L);
  set_module_functions(L, mts_idx, module_functions);
  lua_newtable(L);
  set_module_functions(L, mts_idx, internal_functions);
#if COMPAT_FFI
  set_ffi_take(L);
#endif
  lua_setfield(L, module_idx, "internal");
  fill_class(L, mts_idx, mts_idx, TIMER_MT, timer_metamethods, timer_methods);
  lua_setfield(L, module_idx, "Timer");
  fill_class(L, mts_idx + 1, mts_idx, TIMEOUT_MT, timeout_metamethods, timeout_methods);
  lua_setfield(L, module_idx, "Timeout");
  lua_pushliteral(L, HWT_VERSION);
  lua_setfield(L, module_idx, "_VERSION");
  return 1;
}

void hwt_preload(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_hwt_core);
  lua_setfield(L, -2, "hwt.core");
  lua_pop(L, 2);
}
