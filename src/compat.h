/*
 * compat.h — the few Lua C API differences hwt meets, 5.1 to 5.4 and LuaJIT.
 * Everything version-specific lives here; lhwt.c is written against 5.4.
 */
#ifndef HWT_COMPAT_H
#define HWT_COMPAT_H

#include <math.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM >= 504

#define compat_newuserdata(L, size, nuv) lua_newuserdatauv(L, size, nuv)
#define compat_getuservalue(L, idx, n) ((void)lua_getiuservalue(L, idx, n))
#define compat_setuservalue(L, idx, n) ((void)lua_setiuservalue(L, idx, n))

/* Several user values of the userdata at idx: compat_uservalues_open
 * returns the index to pass to compat_uv_get / compat_uv_set (which pops
 * the value), and compat_uservalues_close(L, uvs) ends the access, leaving
 * what was pushed meanwhile. On 5.1-5.3 that is one lookup of the user
 * value table instead of one per value. */
#define compat_uservalues_open(L, idx) lua_absindex(L, idx)
#define compat_uservalues_close(L, uvs) ((void)(uvs))
#define compat_uv_get(L, uvs, n) ((void)lua_getiuservalue(L, uvs, n))
#define compat_uv_set(L, uvs, n) ((void)lua_setiuservalue(L, uvs, n))

#else  /* one table of user values, kept as the single uservalue/environment */

#if LUA_VERSION_NUM == 501
#define compat_setuvtable(L, idx) lua_setfenv(L, idx)
#define compat_getuvtable(L, idx) lua_getfenv(L, idx)
#define lua_absindex(L, idx) \
  ((idx) > 0 || (idx) <= LUA_REGISTRYINDEX ? (idx) : lua_gettop(L) + (idx) + 1)
#define lua_rawlen(L, idx) lua_objlen(L, idx)

/* LuaJIT 2.1 (and OpenResty's luajit2) reports 501 but declares part of the
 * 5.2 API: luaL_setfuncs, luaL_setmetatable, luaL_traceback, ... Its lua.h
 * defines LUA_OK along with them; PUC 5.1 and LuaJIT 2.0 define neither. */
#if defined(LUA_OK)
#define COMPAT_FFI 1            /* LuaJIT 2.1: scripts have its FFI */
#else
#define LUA_OK 0
/* 5.2's luaL_setfuncs: each function gets the nup values below the table's
 * top as upvalues; they are popped. */
static inline void luaL_setfuncs(lua_State *L, const luaL_Reg *reg, int nup) {
  for (; reg->name; reg++) {
    for (int i = 0; i < nup; i++) lua_pushvalue(L, -nup);
    lua_pushcclosure(L, reg->func, nup);
    lua_setfield(L, -(nup + 2), reg->name);
  }
  lua_pop(L, nup);
}
#define luaL_setmetatable(L, name) (luaL_getmetatable(L, name), lua_setmetatable(L, -2))

static inline void *luaL_testudata(lua_State *L, int idx, const char *name) {
  void *p = lua_touserdata(L, idx);
  if (!p || !lua_getmetatable(L, idx)) return NULL;
  luaL_getmetatable(L, name);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same ? p : NULL;
}

/* 5.1 has no luaL_traceback: ask debug.traceback, or keep the message. */
static inline void luaL_traceback(lua_State *L, lua_State *L1, const char *msg, int level) {
  (void)L1;
  lua_getglobal(L, "debug");
  if (lua_istable(L, -1)) lua_getfield(L, -1, "traceback");
  if (!lua_isfunction(L, -1)) {
    lua_settop(L, lua_gettop(L) - (lua_istable(L, -2) ? 2 : 1));
    lua_pushstring(L, msg);
    return;
  }
  lua_remove(L, -2);
  lua_pushstring(L, msg);
  lua_pushinteger(L, level + 1);
  lua_call(L, 2, 1);
}
#endif /* !LUA_OK */
#else
#define compat_setuvtable(L, idx) lua_setuservalue(L, idx)
#define compat_getuvtable(L, idx) lua_getuservalue(L, idx)
#endif

static inline void *compat_newuserdata(lua_State *L, size_t size, int nuv) {
  void *p = lua_newuserdata(L, size);
  lua_createtable(L, nuv, 0);
  compat_setuvtable(L, -2);
  return p;
}

static inline void compat_getuservalue(lua_State *L, int idx, int n) {
  compat_getuvtable(L, idx);
  lua_rawgeti(L, -1, n);
  lua_remove(L, -2);
}

static inline void compat_setuservalue(lua_State *L, int idx, int n) {
  idx = lua_absindex(L, idx);
  compat_getuvtable(L, idx);
  lua_insert(L, -2);
  lua_rawseti(L, -2, n);
  lua_pop(L, 1);
}

static inline int compat_uservalues_open(lua_State *L, int idx) {
  compat_getuvtable(L, idx);
  return lua_gettop(L);
}
#define compat_uservalues_close(L, uvs) lua_remove(L, uvs)
#define compat_uv_get(L, uvs, n) lua_rawgeti(L, uvs, n)
#define compat_uv_set(L, uvs, n) lua_rawseti(L, uvs, n)

#endif

/* lua_callk with 5.3's continuation (5.2's takes a lua_CFunction). */
#if LUA_VERSION_NUM >= 503
#define COMPAT_CALLK 1
#endif

#if LUA_VERSION_NUM >= 503
#define compat_tointegerx(L, idx, is_integer) lua_tointegerx(L, idx, is_integer)
#define compat_optinteger(L, idx, def) luaL_optinteger(L, idx, def)
#define compat_checkudata(L, idx, tname) luaL_checkudata(L, idx, tname)
#else
#define LUA_MAXINTEGER PTRDIFF_MAX

/* An integral number that fits lua_Integer (5.3 semantics, for 5.1/5.2). */
static inline lua_Integer compat_tointegerx(lua_State *L, int idx, int *is_integer) {
  lua_Number n = lua_tonumber(L, idx);
  *is_integer = lua_isnumber(L, idx) && n == floor(n) &&
                n >= -(lua_Number)LUA_MAXINTEGER && n < (lua_Number)LUA_MAXINTEGER;
  return *is_integer ? (lua_Integer)n : 0;
}

/* 5.3's luaL_optinteger: a number with no integer representation is an
 * error (5.1/5.2 truncate it). */
static inline lua_Integer compat_optinteger(lua_State *L, int idx, lua_Integer def) {
  if (lua_isnoneornil(L, idx)) return def;
  int is_integer;
  lua_Integer value = compat_tointegerx(L, idx, &is_integer);
  if (!is_integer) {
    if (!lua_isnumber(L, idx)) luaL_checknumber(L, idx);     /* "number expected" */
    luaL_argerror(L, idx, "number has no integer representation");
  }
  return value;
}

/* 5.3's luaL_checkudata: the message names what it got by its __name
 * ("hwt.Timer expected, got hwt.Timeout"); 5.1/5.2 say "userdata". */
static inline void *compat_checkudata(lua_State *L, int idx, const char *tname) {
  void *p = lua_touserdata(L, idx);
  if (p && lua_getmetatable(L, idx)) {
    luaL_getmetatable(L, tname);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (same) return p;
  }
  const char *got;
  if (luaL_getmetafield(L, idx, "__name") && lua_type(L, -1) == LUA_TSTRING)
    got = lua_tostring(L, -1);
  else if (lua_type(L, idx) == LUA_TLIGHTUSERDATA)
    got = "light userdata";
  else
    got = luaL_typename(L, idx);
  luaL_argerror(L, idx, lua_pushfstring(L, "%s expected, got %s", tname, got));
  return NULL;
}
#endif

#endif
