/*
 * lhwt_drain.c — Lua 5.1-5.4's drain: one draining call's hold on the
 * timeouts it runs, and its steps (take, finish, hand-off, read-ahead) that
 * each dispatch loop calls: lua/hwt/dispatch.lua's and
 * lhwt_dispatch_callk.c's. (LuaJIT's are lhwt_ffi.c's and lhwt_ffi_holds.c's.)
 */
#include "lhwt.h"

#if !COMPAT_FFI

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

drain *check_drain(lua_State *L, int idx) {
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
drain *begin_poll(lua_State *L, lhwt_queue *tm) {
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
bool has_on_error(lua_State *L) {
  compat_getuservalue(L, 1, TIMER_UV_ON_ERROR);
  bool has_one = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return has_one;
}

/* Pushes the anchored Timeout `to` of the drain at index 1. */
void push_anchored(lua_State *L, lhwt_timeout *to) {
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
int internal_drain(lua_State *L) {
  lhwt_timer *handle = test_class(L, 1, TIMER_MT_UPVALUE);
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
    tell_if_earlier(L, d->tm, -1, &to->node);
    lua_pop(L, 1);
  } else if (!still_pending && to->drains == 0) {
    if (anchors_idx) {
      unanchor(L, d->tm, anchors_idx, to);
      return;
    }
    compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);
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

/* Pushes the Timeout `to` from the anchor table at anchors_idx; nil if it
 * is not anchored. */
static void push_anchor_entry(lua_State *L, int anchors_idx, const lhwt_timeout *to) {
  if (!to->anchor) {
    lua_pushnil(L);
    return;
  }
  lua_rawgeti(L, anchors_idx, (int)to->anchor);
}

/* Pushes the task of the Timeout at entry_idx. */
static void push_task_from_entry(lua_State *L, int entry_idx) {
  compat_getuservalue(L, entry_idx, TIMEOUT_UV_TASK);
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
 * overlap, where each take would otherwise wait for its own. Only a hint:
 * the due ones may change before their takes. anchors_idx: as in
 * after_finish. */
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
    push_task_from_entry(L, entry_idx);
    __builtin_prefetch(lua_topointer(L, -1));
    lua_pop(L, 1);
  }
  lua_settop(L, base);
}

/* Finishes the current timeout of the drain `d` (at index 1) and makes the
 * next one current, started; returns it, or NULL when there is none.
 * anchors_idx: as in after_finish. */
lhwt_timeout *take_next(lua_State *L, drain *d, int anchors_idx) {
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
int internal_take(lua_State *L) {
  drain *d = check_drain(L, 1);
  compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);   /* stays below the results */
  int anchors_idx = lua_gettop(L);
  lhwt_timeout *to = take_next(L, d, anchors_idx);
  if (!to) return 0;
  push_anchored_in(L, anchors_idx, to);
  return push_call(L, lua_gettop(L), to);
}

/* internal.args(drain) -> whether the current timeout's task is a TimerTask
 * (task:run(...)), and its extra arguments. The probe made room for the
 * most arguments, but a collection may have shrunk the stack since: growing
 * it again can only fail for memory, and that is this task's error. */
int internal_args(lua_State *L) {
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
int finish_drain(lua_State *L) {
  drain *d = lua_touserdata(L, 1);
  finish_current(L, d);
  return 0;
}

int internal_finish(lua_State *L) {
  check_drain(L, 1);
  return finish_drain(L);
}

/* The poll that used the drain `d` (at index 1) has returned. A poll's
 * drain with nothing taken and unfinished becomes its queue's idle drain
 * (the next poll's); it can take nothing until then. */
void recycle(lua_State *L, drain *d) {
  if (d->is_handoff || d->current || d->handed) return;
  d->seq_limit = 0;
  compat_getuservalue(L, 1, DRAIN_UV_QUEUE);
  lua_pushvalue(L, 1);
  compat_setuservalue(L, -2, QUEUE_UV_IDLE_DRAIN);
  lua_pop(L, 1);
}

/* internal.recycle(drain): see recycle. */
int internal_recycle(lua_State *L) {
  recycle(L, check_drain(L, 1));
  return 0;
}

/* internal.current(drain) -> the Timeout taken and not finished (or nil),
 * and how many timeouts the drain has taken. */
int internal_current(lua_State *L) {
  drain *d = check_drain(L, 1);
  if (d->current) push_anchored(L, d->current); else lua_pushnil(L);
  lua_pushinteger(L, d->taken);
  return 2;
}

/* internal.hand(drain) -> a hand-off's drain for the next due timeout, now
 * HANDED; nothing when there is none. */
int internal_hand(lua_State *L) {
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
int internal_unhand(lua_State *L) {
  give_back(L, check_drain(L, 1));
  return 0;
}

int drain_gc(lua_State *L) {
  drain *d = lua_touserdata(L, 1);
  finish_current(L, d);
  give_back(L, d);
  return 0;
}

#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_drain_absent;
#endif
