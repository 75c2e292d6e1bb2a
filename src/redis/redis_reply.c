/*
 * redis_reply.c — a Redis reply as Lua values, as redis-lua gives them: a
 * string for a bulk string, nil for a nil bulk or array, a number for an
 * integer (a Lua integer on 5.3+), a table for an array (a nil element is a
 * hole), true for the status OK and the text of any other status. An error
 * reply, at any depth, raises "redis error: <its text>".
 */
#include "redis_client.h"

#include <limits.h>
#include <string.h>

#define ERROR_REPLY_PREFIX "redis error: "

static void push_value(lua_State *L, const redisReply *reply);

static void push_array(lua_State *L, const redisReply *reply) {
  luaL_checkstack(L, 2, "a Redis reply nested too deep");
  lua_createtable(L, reply->elements > INT_MAX ? 0 : (int)reply->elements, 0);
  for (size_t i = 0; i < reply->elements; i++) {
    push_value(L, reply->element[i]);
    lua_rawseti(L, -2, (int)(i + 1));
  }
}

static void push_integer(lua_State *L, long long value) {
#if LUA_VERSION_NUM >= 503
  lua_pushinteger(L, (lua_Integer)value);
#else
  lua_pushnumber(L, (lua_Number)value);
#endif
}

static void raise_error_reply(lua_State *L, const redisReply *reply) {
  lua_pushliteral(L, ERROR_REPLY_PREFIX);
  lua_pushlstring(L, reply->str, reply->len);
  lua_concat(L, 2);
  lua_error(L);
}

static void push_value(lua_State *L, const redisReply *reply) {
  switch (reply->type) {
  case REDIS_REPLY_STRING:
    lua_pushlstring(L, reply->str, reply->len);
    break;
  case REDIS_REPLY_STATUS:
    if (reply->len == 2 && memcmp(reply->str, "OK", 2) == 0)
      lua_pushboolean(L, 1);
    else
      lua_pushlstring(L, reply->str, reply->len);
    break;
  case REDIS_REPLY_INTEGER:
    push_integer(L, reply->integer);
    break;
  case REDIS_REPLY_NIL:
    lua_pushnil(L);
    break;
  case REDIS_REPLY_ARRAY:
    push_array(L, reply);
    break;
  case REDIS_REPLY_ERROR:
    raise_error_reply(L, reply);
    break;
  default:
    luaL_error(L, "hwt.redis: a reply of unknown type %d", reply->type);
  }
}

/* lua_pcall's function: the reply (a light userdata) as Lua values. */
static int push_protected(lua_State *L) {
  push_value(L, lua_touserdata(L, 1));
  return 1;
}

void redis_reply_prepare(lua_State *L) {
  luaL_checkstack(L, 2, "no room for a Redis reply");
  lua_pushcfunction(L, push_protected);    /* a closure, allocated, on 5.1 and LuaJIT */
}

void redis_reply_push(lua_State *L, redisReply *reply) {
  lua_pushlightuserdata(L, reply);         /* in the slot prepare reserved: no allocation */
  int status = lua_pcall(L, 1, 1, 0);
  freeReplyObject(reply);
  if (status != LUA_OK) lua_error(L);
}
