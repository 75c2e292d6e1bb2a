/*
 * lhwt.h — the binding's private header: what the files of the Lua binding
 * (module hwt.core, src/lhwt*.c) share. The binding has no threads of its
 * own and no wheel logic: it checks arguments, anchors Lua values and gives
 * lua/hwt.lua the steps of running tasks, or on Lua 5.3+ the loop that calls
 * them (lhwt_drain.c, lhwt_dispatch_*.c).
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
#ifndef HWT_LHWT_H
#define HWT_LHWT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "engine.h"
#include "hwt.h"

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
  anchor_slots slots[ANCHOR_KINDS];
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
#if COMPAT_FFI
  int32_t released;             /* a slot the FFI take let go, until settled (see there) */
#endif
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

#if COMPAT_FFI
static inline int anchor_kind(const lhwt_timeout *to) {
  int shape = call_shape(to);
  return shape == 1 || shape == 2 ? ANCHOR_SINGLE : ANCHOR_MAIN;
}
#else
#define anchor_kind(to) ((void)(to), ANCHOR_MAIN)
#endif

/* Where slot `slot` keeps its Timeout in the anchor table. */
static inline int anchor_index(uint32_t slot) {
  return (int)((slot - 1) * ANCHOR_STRIDE + 1);
}

/* The count sticks at its top (65,535 suspended runs of one timeout): the
 * timeout then stays anchored until its timer stops. */
static inline void count_drain_in(lhwt_timeout *to) {
  if (to->drains < UINT16_MAX) to->drains++;
}

static inline void count_drain_out(lhwt_timeout *to) {
  if (to->drains < UINT16_MAX) to->drains--;
}

/* The user values of a queue and of a drain that hold the table of `kind`. */
#if COMPAT_FFI
static inline int queue_uv_of_kind(int kind) {
  return kind == ANCHOR_SINGLE ? QUEUE_UV_SINGLES : QUEUE_UV_ANCHORS;
}

static inline int drain_uv_of_kind(int kind) {
  return kind == ANCHOR_SINGLE ? DRAIN_UV_SINGLES : DRAIN_UV_ANCHORS;
}
#else
#define queue_uv_of_kind(kind) ((void)(kind), QUEUE_UV_ANCHORS)
#define drain_uv_of_kind(kind) ((void)(kind), DRAIN_UV_ANCHORS)
#endif

/* ---- what each file gives the others ---------------------------------- */

/* lhwt_state.c */
void list_timer(state_timers *home, lhwt_queue *tm);
void release_queue(lhwt_queue *tm);
void set_state_entry(lua_State *L, int uv, int key_idx);
void retire_queue(lua_State *L, lhwt_queue *tm, int queue_idx);
int queue_gc(lua_State *L);
void keep_library_loaded(void);
void push_state_timers(lua_State *L);
void make_internal_metatable(lua_State *L, const char *name, lua_CFunction gc);
bool state_can_stop_timers(lua_State *L, state_timers *home);
void push_timer_of_queue(lua_State *L, int queue_idx);

/* lhwt_anchor.c */
int push_kind_table(lua_State *L, int queue_idx, const lhwt_timeout *to);
void anchor(lua_State *L, int table_idx, int queue_idx, lhwt_timeout *to, int timeout_idx, int task_idx);
void clear_slot(lua_State *L, int table_idx, int kind, uint32_t slot);
void give_back_slot(lhwt_queue *tm, int kind, uint32_t slot);
void unanchor(lua_State *L, lhwt_queue *tm, int table_idx, lhwt_timeout *to);
int push_singles(lua_State *L, int anchors_idx);
void push_anchored_in(lua_State *L, int anchors_idx, const lhwt_timeout *to);
size_t list_anchored(lua_State *L, int anchors_idx, timeout **out, size_t room);
timeout **held_timeouts(lua_State *L, int anchors_idx, size_t *count);

/* lhwt_report.c */
int traceback_handler(lua_State *L);
void report_task_error(lua_State *L, int on_error_idx, int timeout_idx);
void push_on_error_of_drain(lua_State *L, int drain_idx);
void tell_if_earlier(lua_State *L, lhwt_queue *tm, int queue_idx, lhwt_timeout *to);
int internal_report_error(lua_State *L);

/* lhwt_drain.c */
drain *check_drain(lua_State *L, int idx);
drain *begin_poll(lua_State *L, lhwt_queue *tm);
bool has_on_error(lua_State *L);
void push_anchored(lua_State *L, lhwt_timeout *to);
int internal_drain(lua_State *L);
void make_current(drain *d, lhwt_timeout *to);
bool read_ahead_due(drain *d);
void read_ahead(lua_State *L, drain *d, int anchors_idx);
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

#if COMPAT_FFI
/* lhwt_dispatch_ffi.c */
void settle_released(lua_State *L, drain *d);
int internal_read_ahead(lua_State *L);
int internal_ffi_anchors(lua_State *L);
void set_ffi_take(lua_State *L);
#else
#define settle_released(L, d) ((void)0)
#endif

#if COMPAT_CALLK
/* lhwt_dispatch_callk.c */
int internal_run_batch(lua_State *L);
int internal_poll(lua_State *L);
#endif

/* lhwt_timer.c */
int hwt_now(lua_State *L);
int arming_failed(lua_State *L, const lhwt_queue *tm, int result);
int timer_timeout(lua_State *L);
int timer_every(lua_State *L);
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
