/*
 * lhwt.h — the binding's private header: what the files of the Lua binding
 * (module hwt.core, src/lhwt*.c) share. The binding has no threads of its
 * own and no wheel logic: it checks arguments, anchors Lua values and gives
 * lua/hwt.lua the steps of running tasks, or on Lua 5.3+ the loop that calls
 * them (lhwt_drain.c, lhwt_dispatch_callk.c); on LuaJIT a C ABI for the FFI
 * (lhwt_ffi.c, lhwt_ffi_holds.c).
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
 * Timer user values: 1 anchor table, 2 its queue, 3 on_error, 4 the
 * on_earlier watcher. Queue user values: 1 the anchor table, 2 the memory
 * of its free anchor slots, 3 its idle drain. Timeout user values: 1 its
 * timer's queue, 2 its task, 3.. the extra arguments. Drain user values: 1
 * its queue, 2 the anchor table, 3 a hand-off's timeout.
 *
 * That is the hold strategy of Lua 5.1-5.4 (lhwt_anchor.c). On LuaJIT a
 * Timeout is a cdata and its timeout lives in C memory, at a slot of the
 * state's slot arena; the Lua layer keeps its task and arguments in tables
 * indexed by slot (lhwt_ffi.c, lhwt_ffi_holds.c, lua/hwt/jit.lua). The Timer, its queue and
 * their lifetime are the same on every Lua.
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
#ifndef HWT_LHWT_H
#define HWT_LHWT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "engine.h"
#include "hwt.h"
#include "slot_arena.h"

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
#define QUEUE_UVS 3
#define DRAIN_UV_QUEUE 1
#define DRAIN_UV_ANCHORS 2      /* its queue's anchor table */
#define DRAIN_UV_HANDED 3       /* a hand-off's timeout, until it starts */
#define DRAIN_UVS 3
#define STATE_UV_RUNNING 1      /* queue userdata -> true, while running */
#define STATE_UV_TIMERS 2       /* a queue's address -> its Timer (weak) */
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
#define ANCHOR_SLOTS_MIN 64
/* A slot's entries are at table indexes, an int on 5.1. */
#define ANCHOR_SLOTS_MAX (UINT32_C(1) << 30)

/* The queue userdata. */
typedef struct lhwt_queue {
  timer_queue queue;
  bool initialized;             /* false once stopped for good and released */
  bool manual_clock;
  bool shared_engine;
  uint64_t tick_ns;
  uint64_t epoch_ns;            /* CLOCK_MONOTONIC at its clock's 0 (0: manual) */
  uint32_t wheel_size;
  bool has_watcher;             /* its Timer's TIMER_UV_WATCHER is set */
  uint64_t told_due_ns;         /* the due time the watcher last heard of */
#if COMPAT_FFI
  slot_arena *arena;            /* its state's */
  slot_owner owned;             /* its slots there */
#else
  anchor_slots slots;
#endif
  state_timers *home;           /* the list it is in while running */
  struct lhwt_queue *prev_in_state, *next_in_state;
} lhwt_queue;

/* The Timer userdata: the script's handle on a queue. */
typedef struct lhwt_timer {
  lhwt_queue *tm;               /* in its queue userdata (user value 3) */
} lhwt_timer;

/* One lua_State's running queues (those not yet stopped). */
struct state_timers {
  lhwt_queue *first;
  bool closing;                 /* its finalizer ran: the state is closing */
  bool finalizer_sure;          /* its finalizer is known to be registered */
#if COMPAT_FFI
  slot_arena arena;             /* the state's timeouts (its memory outlives every finalizer) */
#endif
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

/* A drain: one draining call's hold on the timeouts it runs (see the
 * dispatch section). */
typedef struct drain {
  lhwt_queue *tm;               /* its queue userdata: user value 1 */
  uint64_t seq_limit;           /* a poll: what was scheduled before it began */
  uint64_t handed_seq;          /* a hand-off: the seq its timeout was handed under */
  lhwt_timeout *current;        /* taken, not yet finished (so anchored) */
  uint64_t current_seq;         /* its seq when taken: a reset changes it */
  lua_Integer taken;            /* how many take() took */
  lhwt_timeout *handed;         /* a hand-off's timeout until it starts: user value 3 */
  bool is_handoff;              /* runs one handed timeout, once */
  unsigned ahead_left;          /* takes before the next read_ahead */
} drain;

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

/* How lua/hwt.lua calls a task: task(t) .. task(t, a, b) straight from the
 * values take() returns (no vararg call on the common path), or, for a
 * TimerTask or more arguments, with what internal.args() returns. */
#define CALL_WITH_ARGS 3          /* 0, 1, 2: that many extra arguments */

/* ---- checks, conversions and small helpers every file uses ------------ */

/* The object at idx if its class is that of mt_upvalue, else NULL. */
static inline void *test_class(lua_State *L, int idx, int mt_upvalue) {
  void *object = lua_touserdata(L, idx);
  if (!object || !lua_getmetatable(L, idx)) return NULL;
  bool same_class = lua_topointer(L, -1) == lua_topointer(L, mt_upvalue);  /* cheaper than rawequal */
  lua_pop(L, 1);
  return same_class ? object : NULL;
}

static inline void *check_class(lua_State *L, int idx, int mt_upvalue, const char *name) {
  void *object = test_class(L, idx, mt_upvalue);
  return object ? object : compat_checkudata(L, idx, name);   /* raises the usual message */
}

static inline lhwt_queue *check_timer(lua_State *L, int idx) {
  lhwt_timer *handle = check_class(L, idx, TIMER_MT_UPVALUE, TIMER_MT);
  return handle->tm;
}

static inline lhwt_timeout *check_timeout(lua_State *L, int idx) {
  return check_class(L, idx, TIMEOUT_MT_UPVALUE, TIMEOUT_MT);
}

static inline void set_integer_field(lua_State *L, const char *name, uint64_t value) {
  lua_pushinteger(L, (lua_Integer)value);
  lua_setfield(L, -2, name);
}

static inline double ns_to_seconds(uint64_t ns) {
  return ns == ENGINE_NEVER ? HUGE_VAL : (double)ns / NS_PER_SEC;
}

/* Seconds (finite, >= 0) to nanoseconds, rounded to the nearest, clamped. */
static inline uint64_t seconds_to_ns(double seconds) {
  double ns = seconds * NS_PER_SEC + 0.5;
  return ns >= (double)ENGINE_MAX_DELAY_NS ? ENGINE_MAX_DELAY_NS : (uint64_t)ns;
}

/* A delay argument: a number >= 0; math.huge means never. */
static inline uint64_t check_delay_ns(lua_State *L, int idx, const char *name) {
  double seconds = luaL_checknumber(L, idx);
  if (!(seconds >= 0)) {                        /* negative or NaN */
    lua_pushfstring(L, "%s must be a number >= 0, got %f", name, seconds);
    luaL_argerror(L, idx, lua_tostring(L, -1));
  }
  return isinf(seconds) ? ENGINE_NEVER : seconds_to_ns(seconds);
}

/* A function, or a value whose __call metamethod is a function. */
static inline bool is_callable(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TFUNCTION) return true;
  if (!luaL_getmetafield(L, idx, "__call")) return false;
  bool callable = lua_type(L, -1) == LUA_TFUNCTION;
  lua_pop(L, 1);
  return callable;
}

/* A task is a function, a callable, or a table with a `run` method. Returns
 * true for the last kind. */
static inline bool check_task(lua_State *L, int idx) {
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

/* The queue (the timer's state) that a timeout belongs to. */
static inline lhwt_queue *timer_of(const lhwt_timeout *to) {
  return (lhwt_queue *)(void *)timeout_queue(&to->node);    /* the queue is its first member */
}

static inline int call_shape(const lhwt_timeout *to) {
  return to->run_method || to->nargs >= CALL_WITH_ARGS ? CALL_WITH_ARGS : to->nargs;
}


/* The count sticks at its top (65,535 suspended runs of one timeout): the
 * timeout then stays anchored until its timer stops. */
static inline void count_drain_in(lhwt_timeout *to) {
  if (to->drains < UINT16_MAX) to->drains++;
}

static inline void count_drain_out(lhwt_timeout *to) {
  if (to->drains < UINT16_MAX) to->drains--;
}

/* ---- what each file gives the others ---------------------------------- */

/* lhwt_state.c */
void list_timer(state_timers *home, lhwt_queue *tm);
void release_queue(lua_State *L, lhwt_queue *tm);
void set_state_entry(lua_State *L, int uv, int key_idx);
void retire_queue(lua_State *L, lhwt_queue *tm, int queue_idx);
int queue_gc(lua_State *L);
void keep_library_loaded(void);
void push_state_timers(lua_State *L);
void make_internal_metatable(lua_State *L, const char *name, lua_CFunction gc);
bool state_can_stop_timers(lua_State *L, state_timers *home);
void push_timer_of_queue(lua_State *L, int queue_idx);
void push_timer_of(lua_State *L, const lhwt_queue *tm);
void remember_timer(lua_State *L, const lhwt_queue *tm, int timer_idx);

/* The hold strategy: how a timer keeps its timeouts' Lua values alive and
 * finds them again. lhwt_anchor.c on Lua 5.1-5.4, lhwt_ffi_holds.c on LuaJIT. */
void new_holds(lua_State *L, lhwt_queue *tm, int timer_idx, int queue_idx);
void stop_holds(lua_State *L, lhwt_queue *tm, int timer_idx, bool want_result);
int push_pending_timeouts(lua_State *L, lhwt_queue *tm, int timer_idx);
void release_holds(lua_State *L, lhwt_queue *tm);
void close_holds(state_timers *home);
void open_holds(lua_State *L, int upvalues_idx);

/* lhwt_anchor.c */
int push_anchor_table(lua_State *L, int queue_idx);
void anchor(lua_State *L, int table_idx, int queue_idx, lhwt_timeout *to, int timeout_idx);
void unanchor(lua_State *L, lhwt_queue *tm, int table_idx, lhwt_timeout *to);
void push_anchored_in(lua_State *L, int anchors_idx, const lhwt_timeout *to);

/* lhwt_report.c */
int traceback_handler(lua_State *L);
void report_task_error(lua_State *L, int on_error_idx, int timeout_idx);
void push_on_error_of_drain(lua_State *L, int drain_idx);
void tell_if_earlier(lua_State *L, lhwt_queue *tm, int queue_idx, timeout *node);
int internal_report_error(lua_State *L);

/* lhwt_drain.c */
drain *check_drain(lua_State *L, int idx);
drain *begin_poll(lua_State *L, lhwt_queue *tm);
bool has_on_error(lua_State *L);
void push_anchored(lua_State *L, lhwt_timeout *to);
int internal_drain(lua_State *L);
lhwt_timeout *take_next(lua_State *L, drain *d, int anchors_idx);
int internal_take(lua_State *L);
int internal_args(lua_State *L);
int finish_drain(lua_State *L);
int internal_finish(lua_State *L);
void recycle(lua_State *L, drain *d);
int internal_recycle(lua_State *L);
int internal_current(lua_State *L);
int internal_hand(lua_State *L);
int internal_unhand(lua_State *L);
int drain_gc(lua_State *L);
void probe_task_call(lua_State *L);
int internal_probe(lua_State *L);

#if COMPAT_CALLK
/* lhwt_dispatch_callk.c */
int internal_run_batch(lua_State *L);
int internal_poll(lua_State *L);
#endif

/* lhwt_timer.c */
int hwt_now(lua_State *L);
int arming_failed(lua_State *L, const lhwt_queue *tm, int result);
int timer_wait(lua_State *L);
int internal_clock_mark(lua_State *L);
int internal_step_to(lua_State *L);
int internal_advance_clock(lua_State *L);
int internal_clock_state(lua_State *L);
int timer_pending(lua_State *L);
int timer_now(lua_State *L);
int timer_fd(lua_State *L);
int timer_next_due(lua_State *L);
int timer_on_earlier(lua_State *L);
int timer_stats(lua_State *L);
int timer_timeouts(lua_State *L);
int timer_stop(lua_State *L);
int timer_close(lua_State *L);
int timer_gc(lua_State *L);
int timer_tostring(lua_State *L);

/* lhwt_new.c */
int hwt_new(lua_State *L);

/* lhwt_timeout.c */
int timer_timeout(lua_State *L);
int timer_every(lua_State *L);
int timeout_cancel(lua_State *L);
int timeout_reset(lua_State *L);
int timeout_deadline(lua_State *L);
int timeout_close(lua_State *L);
int timeout_is_cancelled(lua_State *L);
int timeout_is_expired(lua_State *L);
int timeout_timer(lua_State *L);
int timeout_task(lua_State *L);
int timeout_remaining_seconds(lua_State *L);
int timeout_tostring(lua_State *L);

#endif
