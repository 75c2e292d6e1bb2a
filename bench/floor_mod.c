/* floor_mod: the bare building blocks a Lua timer library pays for (a C call,
 * a userdata with a user value and a metatable, a registry-style reference,
 * a cache miss, a cancel's lock and anchor), measured by bench/floor.lua;
 * the C call before each task, for bench/call_boundary.lua; and the
 * contract's floor: a timer binding without its timer, run as
 * bench/lua_bench.lua's `contract` peer (bench/contract.sh). Builds against
 * Lua 5.4 and LuaJIT 2.1 (5.1 API); see bench/floor.sh. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "lua.h"
#include "lauxlib.h"

#define UD_SIZE 64 /* the size of hwt's Timeout C struct (lhwt_timeout) */
#define NS_PER_SEC UINT64_C(1000000000)
#define RUN_TICKS_MAX (UINT64_C(1) << 26) /* run()'s tick table: 512 MiB at most */

static int noop(lua_State *L) {
  (void)L;
  return 0;
}

static int noop2(lua_State *L) {
  /* read both arguments, as a real function would; xor cannot overflow */
  lua_pushinteger(L, lua_tointeger(L, 1) ^ lua_tointeger(L, 2));
  return 1;
}

/* newud(task): the metatable is upvalue 1 (set once by luaopen_floor_mod). */
static int newud(lua_State *L) {
  void *p;
  lua_settop(L, 1);
#if LUA_VERSION_NUM >= 504
  p = lua_newuserdatauv(L, UD_SIZE, 2);
  memset(p, 0, UD_SIZE);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
#else
  /* 5.1 API: user values live in the userdata's environment table */
  p = lua_newuserdata(L, UD_SIZE);
  memset(p, 0, UD_SIZE);
  lua_createtable(L, 2, 0);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  lua_setfenv(L, -2);
#endif
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

static int ref(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  lua_pushinteger(L, luaL_ref(L, 1));
  return 1;
}

static int unref(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_unref(L, 1, (int)luaL_checkinteger(L, 2));
  return 0;
}

static int touch(lua_State *L) {
  const volatile unsigned char *p = lua_touserdata(L, 1);
  if (p == NULL) return luaL_argerror(L, 1, "userdata expected");
  (void)p[0]; /* volatile: the load is kept */
  return 0;
}

/* An anchor slot number kept in the userdata, as a Timeout keeps its own. */
static int setslot(lua_State *L) {
  unsigned char *p = lua_touserdata(L, 1);
  int slot = (int)luaL_checkinteger(L, 2);
  if (p == NULL) return luaL_argerror(L, 1, "userdata expected");
  memcpy(p + sizeof slot, &slot, sizeof slot);
  return 0;
}

/* bench/call_boundary.lua's drain order: a random permutation of 1..n,
 * handed out one index per call under a lock, as hwt's take hands out the
 * next due task. One order per process. */
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t *drain_order;
static int32_t order_next, order_count;

/* set_order(n): a new permutation (xorshift64*, fixed seed), in the last one's memory. */
static int set_order(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 1 || n > INT32_MAX) return luaL_argerror(L, 1, "n must be in 1..2^31-1");
  int32_t *order = realloc(drain_order, (size_t)n * sizeof *order);
  if (order == NULL) return luaL_error(L, "not enough memory");
  uint64_t x = UINT64_C(0x9E3779B97F4A7C15);
  for (int32_t i = 0; i < (int32_t)n; i++) order[i] = i + 1;
  for (int32_t i = (int32_t)n - 1; i > 0; i--) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    int32_t j = (int32_t)((x * UINT64_C(0x2545F4914F6CDD1D)) % (uint64_t)(i + 1));
    int32_t swap = order[i];
    order[i] = order[j];
    order[j] = swap;
  }
  drain_order = order;
  order_next = 0;
  order_count = (int32_t)n;
  return 0;
}

/* The next index of the order, 0 once it is used up; exported for the FFI. */
int32_t floor_next_index(void);
int32_t floor_next_index(void) {
  pthread_mutex_lock(&order_lock);
  int32_t index = order_next < order_count ? drain_order[order_next++] : 0;
  pthread_mutex_unlock(&order_lock);
  return index;
}

/* next_index(): floor_next_index as a classic C function. */
static int next_index(lua_State *L) {
  lua_pushinteger(L, floor_next_index());
  return 1;
}

/* call_in_order(tasks): calls tasks[i]() for each index of the order, from
 * C, as a C dispatch loop would. On Lua 5.3+ each call is a lua_callk, so
 * that a task may yield: the continuation goes on with the next index. */
#if LUA_VERSION_NUM >= 503
static int call_in_order_from(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  (void)ctx;
  for (int32_t i; (i = floor_next_index()) != 0;) {
    lua_rawgeti(L, 1, i);
    lua_callk(L, 0, 0, 0, call_in_order_from);
  }
  return 0;
}
#else
static int call_in_order_from(lua_State *L, int status, int ctx) {
  (void)status;
  (void)ctx;
  for (int32_t i; (i = floor_next_index()) != 0;) {
    lua_rawgeti(L, 1, i);
    lua_call(L, 0, 0);
  }
  return 0;
}
#endif

static int call_in_order(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return call_in_order_from(L, 0, 0);
}

/* ud:release(anchors): the least a cancel from Lua does: change the object
 * under a lock (a timer's thread may be making it due meanwhile), then clear
 * its anchor slot. */
static pthread_mutex_t release_lock = PTHREAD_MUTEX_INITIALIZER;
static int release(lua_State *L) {
  unsigned char *p = lua_touserdata(L, 1);
  int slot;
  if (p == NULL) return luaL_argerror(L, 1, "userdata expected");
  luaL_checktype(L, 2, LUA_TTABLE);
  pthread_mutex_lock(&release_lock);
  p[0] ^= 1;
  memcpy(&slot, p + sizeof slot, sizeof slot);
  pthread_mutex_unlock(&release_lock);
  lua_pushnil(L);
  lua_rawseti(L, 2, slot);
  return 0;
}

/* ---- the contract's floor: a timer that does everything the API asks of
 * a binding (a Timeout userdata that keeps its timer, task and argument, a
 * class check, anchored while armed) and nothing of a timer's own (no clock,
 * no lock-protected wheel). */

/* The timer userdata: a stack of free anchor slots, room for `capacity`.
 * Its user value 1 (5.1: environment) is the anchor table. A timer made with
 * a tick also reads the clock at each arm and keeps the deadline per anchor
 * slot (user value 2 holds that array), so that run() can fire its timeouts:
 * the floor of the fire workloads (W4, W6). */
typedef struct floor_timer {
  int free_count, used, capacity;
  uint64_t tick_ns;            /* 0: no clock, arm only (W1-W3s) */
  uint64_t *deadline_ns;       /* per anchor slot, 0 when not armed */
  int free[];
} floor_timer;

#if LUA_VERSION_NUM >= 504
#define new_ud(L, size, nuv) lua_newuserdatauv(L, size, nuv)
#define set_uv(L, idx, n) lua_setiuservalue(L, idx, n)
#define get_uv(L, idx, n) lua_getiuservalue(L, idx, n)
#else
/* 5.1 API: a userdata's values live in its environment table. */
static void *new_ud(lua_State *L, size_t size, int nuv) {
  void *p = lua_newuserdata(L, size);
  lua_createtable(L, nuv, 0);
  lua_setfenv(L, -2);
  return p;
}
static void set_uv(lua_State *L, int idx, int n) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  lua_getfenv(L, idx);
  lua_insert(L, -2);
  lua_rawseti(L, -2, n);
  lua_pop(L, 1);
}
static void get_uv(lua_State *L, int idx, int n) {
  lua_getfenv(L, idx);
  lua_rawgeti(L, -1, n);
  lua_remove(L, -2);
}
#endif

static void *check_floor_class(lua_State *L, int idx) {
  void *p = lua_touserdata(L, idx);
  if (p == NULL || !lua_getmetatable(L, idx) || !lua_rawequal(L, -1, lua_upvalueindex(1)))
    luaL_argerror(L, idx, "floor_mod object expected");
  lua_pop(L, 1);
  return p;
}

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* newtimer(capacity [, tick]): tick in seconds, for run(). */
static int newtimer(lua_State *L) {
  int capacity = (int)luaL_checkinteger(L, 1);
  double tick = luaL_optnumber(L, 2, 0);
  luaL_argcheck(L, capacity > 0 && tick >= 0 && tick < 1, 1, "capacity > 0, 0 <= tick < 1 s");
  floor_timer *tm = new_ud(L, sizeof *tm + (size_t)capacity * sizeof tm->free[0], 2);
  tm->free_count = tm->used = 0;
  tm->capacity = capacity;
  tm->tick_ns = (uint64_t)(tick * (double)NS_PER_SEC);
  tm->deadline_ns = NULL;
  lua_newtable(L);
  set_uv(L, -2, 1);
  if (tm->tick_ns) {
    size_t bytes = ((size_t)capacity + 1) * sizeof *tm->deadline_ns;
    tm->deadline_ns = lua_newuserdata(L, bytes);
    memset(tm->deadline_ns, 0, bytes);
    set_uv(L, -2, 2);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

/* timer:arm(delay, task [, arg]) -> a userdata holding timer, task and arg
 * (if given), anchored at a slot it records (as setslot does). */
static int arm(lua_State *L) {
  floor_timer *tm = check_floor_class(L, 1);
  luaL_checknumber(L, 2);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  int nargs = lua_gettop(L) > 4 ? 1 : lua_gettop(L) - 3;
  lua_settop(L, 4);
  unsigned char *p = new_ud(L, UD_SIZE, 2 + nargs);
  memset(p, 0, UD_SIZE);
  lua_pushvalue(L, 1);
  set_uv(L, 5, 1);
  for (int i = 0; i <= nargs; i++) {
    lua_pushvalue(L, 3 + i);
    set_uv(L, 5, 2 + i);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, 5);
  if (tm->free_count == 0 && tm->used == tm->capacity) return luaL_error(L, "capacity");
  int slot = tm->free_count ? tm->free[--tm->free_count] : ++tm->used;
  memcpy(p + sizeof slot, &slot, sizeof slot);
  if (tm->tick_ns) tm->deadline_ns[slot] = monotonic_ns() + (uint64_t)(lua_tonumber(L, 2) * 1e9);
  get_uv(L, 1, 1);
  lua_pushvalue(L, 5);
  lua_rawseti(L, -2, slot);
  lua_pushvalue(L, 5);
  return 1;
}

/* ud:disarm(): release's lock and change, then its slot cleared in its
 * timer's anchor table and given back. */
static int disarm(lua_State *L) {
  unsigned char *p = check_floor_class(L, 1);
  int slot;
  pthread_mutex_lock(&release_lock);
  p[0] ^= 1;
  memcpy(&slot, p + sizeof slot, sizeof slot);
  pthread_mutex_unlock(&release_lock);
  get_uv(L, 1, 1);
  floor_timer *tm = lua_touserdata(L, -1);
  get_uv(L, -1, 1);
  lua_pushnil(L);
  lua_rawseti(L, -2, slot);
  tm->free[tm->free_count++] = slot;
  if (tm->tick_ns) tm->deadline_ns[slot] = 0;
  return 0;
}

static uint64_t tick_of(const floor_timer *tm, uint64_t deadline_ns) {
  return deadline_ns / tm->tick_ns + (deadline_ns % tm->tick_ns != 0);
}

static void sleep_until(uint64_t at_ns) {
  if (monotonic_ns() >= at_ns) return;
  struct timespec ts = {(time_t)(at_ns / NS_PER_SEC), (long)(at_ns % NS_PER_SEC)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}

/* timer:run(): the least a timer does to fire what is armed: sorts it by
 * tick (a counting sort, stable: order within a tick is arming order),
 * sleeps until each tick that has timeouts, and calls their tasks with their
 * Timeout, letting go of each anchor after its call. No clock reads besides
 * the one before each sleep, no lock, nothing armed meanwhile. */
static int run(lua_State *L) {
  floor_timer *tm = check_floor_class(L, 1);
  if (!tm->tick_ns) return luaL_error(L, "run: the timer was made without a tick");
  lua_settop(L, 1);
  get_uv(L, 1, 1);                                 /* 2: the anchors */
  uint64_t first = UINT64_MAX, last = 0;
  int armed = 0;
  for (int slot = 1; slot <= tm->used; slot++) {
    if (!tm->deadline_ns[slot]) continue;
    uint64_t tick = tick_of(tm, tm->deadline_ns[slot]);
    if (tick < first) first = tick;
    if (tick > last) last = tick;
    armed++;
  }
  if (armed == 0) return 0;
  if (last - first >= RUN_TICKS_MAX) return luaL_error(L, "run: deadlines span too many ticks");
  size_t ticks = (size_t)(last - first + 1);
  size_t *end = lua_newuserdata(L, ticks * sizeof *end);   /* end[t]: past tick t's last */
  int *order = lua_newuserdata(L, (size_t)armed * sizeof *order);
  memset(end, 0, ticks * sizeof *end);
  for (int slot = 1; slot <= tm->used; slot++)
    if (tm->deadline_ns[slot]) end[tick_of(tm, tm->deadline_ns[slot]) - first]++;
  for (size_t t = 1; t < ticks; t++) end[t] += end[t - 1];
  for (int slot = tm->used; slot >= 1; slot--)     /* backwards: stable */
    if (tm->deadline_ns[slot]) order[--end[tick_of(tm, tm->deadline_ns[slot]) - first]] = slot;
  /* end[t] is now where tick t begins */
  for (size_t t = 0; t < ticks; t++) {
    size_t from = end[t], to = t + 1 < ticks ? end[t + 1] : (size_t)armed;
    if (from == to) continue;
    sleep_until((first + t) * tm->tick_ns);
    for (size_t i = from; i < to; i++) {
      int slot = order[i];
      lua_rawgeti(L, 2, slot);                     /* the Timeout */
      get_uv(L, -1, 2);                            /* its task */
      lua_insert(L, -2);
      lua_call(L, 1, 0);
      lua_pushnil(L);
      lua_rawseti(L, 2, slot);
      tm->deadline_ns[slot] = 0;
      tm->free[tm->free_count++] = slot;
    }
  }
  return 0;
}

static int now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

static const luaL_Reg funcs[] = {
  {"noop", noop},   {"noop2", noop2}, {"newud", newud}, {"ref", ref},
  {"unref", unref}, {"touch", touch}, {"now", now},     {"setslot", setslot},
  {"newtimer", newtimer}, {"set_order", set_order}, {"next_index", next_index},
  {"call_in_order", call_in_order},
  {NULL, NULL}
};

int luaopen_floor_mod(lua_State *L) {
  /* metatable: methods on itself (mt.__index = mt), as bindings usually do */
  lua_createtable(L, 0, 6);
  lua_pushcfunction(L, noop);
  lua_setfield(L, -2, "noop");
  lua_pushcfunction(L, release);
  lua_setfield(L, -2, "release");
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, arm, 1);
  lua_setfield(L, -2, "arm");
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, disarm, 1);
  lua_setfield(L, -2, "disarm");
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, run, 1);
  lua_setfield(L, -2, "run");
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  lua_createtable(L, 0, 11);
  lua_insert(L, -2);
  luaL_setfuncs(L, funcs, 1); /* every function gets the metatable as upvalue 1 */
  return 1;
}
