/*
 * lhwt_dispatch_ffi.c — LuaJIT's take through the FFI, for lua/hwt.lua's
 * dispatch loop there (LuaJIT 2.1 only: compat.h's COMPAT_FFI).
 */
#include "lhwt.h"

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
void settle_released(lua_State *L, drain *d) {
  if (!d->released) return;
  int kind = released_kind(d->released);
  uint32_t slot = released_slot(d->released);
  compat_getuservalue(L, 1, drain_uv_of_kind(kind));
  clear_slot(L, lua_gettop(L), kind, slot);
  lua_pop(L, 1);
  give_back_slot(d->tm, kind, slot);
  d->released = 0;
}
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
  lhwt_queue *tm = d->tm;
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

void probe_task_call(lua_State *L);

/* internal.read_ahead(drain): read_ahead, for the FFI take's loop when its
 * step says so. */
int internal_read_ahead(lua_State *L) {
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
int internal_ffi_anchors(lua_State *L) {
  check_drain(L, 1);
  probe_task_call(L);
  compat_getuservalue(L, 1, DRAIN_UV_ANCHORS);
  return 1;
}

/* Sets, in the internal table at the top, the FFI take's address and the
 * numbers that go with it: ffi_layout has the indexes of the step array, of
 * the single anchors in the anchor table and, in a user value table, of the
 * Timeout, the task and its first argument. */
void set_ffi_take(lua_State *L) {
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
#else
/* ISO C wants a declaration in every file; this one declares nothing used. */
typedef int lhwt_dispatch_ffi_absent;
#endif
