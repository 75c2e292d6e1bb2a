/* floor_mod: the bare building blocks a Lua timer library pays for (a C call,
 * a userdata with a user value and a metatable, a registry-style reference,
 * a cache miss, a cancel's lock and anchor), measured by bench/floor.lua. Builds against Lua 5.4 and
 * LuaJIT 2.1 (5.1 API); see bench/floor.sh. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>
#include <time.h>
#include "lua.h"
#include "lauxlib.h"

#define UD_SIZE 80 /* about the size of a timeout's C struct */

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

static int now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

static const luaL_Reg funcs[] = {
  {"noop", noop},   {"noop2", noop2}, {"newud", newud}, {"ref", ref},
  {"unref", unref}, {"touch", touch}, {"now", now},     {"setslot", setslot},
  {NULL, NULL}
};

int luaopen_floor_mod(lua_State *L) {
  /* metatable: methods on itself (mt.__index = mt), as bindings usually do */
  lua_createtable(L, 0, 3);
  lua_pushcfunction(L, noop);
  lua_setfield(L, -2, "noop");
  lua_pushcfunction(L, release);
  lua_setfield(L, -2, "release");
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__index");
  lua_createtable(L, 0, 7);
  lua_insert(L, -2);
  luaL_setfuncs(L, funcs, 1); /* every function gets the metatable as upvalue 1 */
  return 1;
}
