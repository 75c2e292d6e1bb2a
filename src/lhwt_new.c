/*
 * lhwt_new.c — hwt.new: its options, the Timer and its queue.
 */
#include "lhwt.h"

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

/* A new queue userdata; it becomes the Timer's (at timer_idx) user value
 * TIMER_UV_QUEUE and stays at the top. */
static lhwt_queue *new_queue(lua_State *L, int timer_idx) {
  lhwt_queue *tm = compat_newuserdata(L, sizeof *tm, QUEUE_UVS);
  memset(tm, 0, sizeof *tm);
  tm->told_due_ns = ENGINE_NEVER;
  luaL_setmetatable(L, QUEUE_MT);
  lua_pushvalue(L, -1);
  compat_setuservalue(L, timer_idx, TIMER_UV_QUEUE);
  return tm;
}

int hwt_new(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lhwt_timer *handle = compat_newuserdata(L, sizeof *handle, TIMER_UVS);
  int timer_idx = lua_gettop(L);
  lhwt_queue *tm = handle->tm = new_queue(L, timer_idx);
  int queue_idx = lua_gettop(L);
  new_holds(L, tm, timer_idx, queue_idx);
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
  remember_timer(L, tm, timer_idx);
  lua_settop(L, timer_idx);
  return 1;
}
