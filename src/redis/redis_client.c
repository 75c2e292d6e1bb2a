/*
 * redis_client.c — the module hwt.redis: a Redis client over libhiredis,
 * shaped like redis-lua's. redis.connect(host, port [, timeout]) or
 * redis.connect{host=, port=, path=, timeout=} gives a client (userdata
 * "hwt.redis.Client"); any other name is a command: c:evalsha(sha, 1, k)
 * sends EVALSHA sha 1 k and waits for its reply (redis_reply.c says how it
 * maps), c:call("SET", k, v) the same with the command as an argument.
 *
 * Errors raise. An error reply raises "redis error: <its text>", as
 * redis-lua's do; anything else that fails raises "hwt.redis: <why>": no
 * connection, a timeout, the peer closed it, bytes that are not RESP. After
 * such a failure the client only raises (its reply may still come and would
 * answer the next request) until close(). Bad arguments raise naming them.
 *
 * For Pub/Sub and event loops: c:send(...) sends a command without waiting,
 * c:ready_replies() gives the replies that have come (never waiting),
 * c:getfd() and c:dirty() let LuaSocket's socket.select (and any loop that
 * polls an fd) wait for them.
 *
 * Memory: a client owns its connection and its request buffer, freed once,
 * by close(), __close or __gc. Lua can run a finalizer at any allocation,
 * and a finalizer may close this very client: so every call does all its
 * Lua allocations first, then checks the client, then does its I/O, and
 * converts a reply under lua_pcall so that the reply is freed on every path
 * (redis_client.h).
 */
#include "redis_client.h"

#include <math.h>
#include <string.h>

#include "redis_conn.h"

#define CLIENT_TYPE "hwt.redis.Client"
#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 6379
#define PORT_MAX 65535
#define TIMEOUT_MAX 31536000.0   /* seconds, a year: what time_t and hiredis' milliseconds hold */

typedef struct client {
  redis_conn conn;
  redis_request request;
} client;

static client *check_client(lua_State *L) {
  return compat_checkudata(L, 1, CLIENT_TYPE);
}

/* Raises "hwt.redis: <when><why>" for a connection that failed: like an
 * error reply's message, with no position in front, so that it reads the
 * same wherever it is caught. */
static int raise_failure(lua_State *L, const redis_conn *conn, const char *when) {
  char why[REDIS_CONN_FAILURE_SIZE];
  memcpy(why, conn->failure, sizeof why);   /* the message's allocation may run a finalizer that closes c */
  lua_pushfstring(L, "hwt.redis: %s%s", when, why);
  return lua_error(L);
}

/* c's connection, open and working, or raises. Called after a call's last
 * Lua allocation and before its I/O. */
static redis_conn *usable(lua_State *L, client *c) {
  if (!c->conn.context) {
    lua_pushliteral(L, "hwt.redis: the client is closed");
    lua_error(L);
  }
  if (c->conn.failure[0]) raise_failure(L, &c->conn, "unusable after a failure: ");
  return &c->conn;
}

/* Builds the request from the arguments first..last (after `command`, or
 * the first of them is the command) and sends it whole. */
static redis_conn *send_request(lua_State *L, client *c, const char *command, size_t command_len, int first,
                                int last) {
  redis_request_build(L, &c->request, command, command_len, first, last);
  redis_conn *conn = usable(L, c);
  if (redis_conn_send(conn, c->request.data, c->request.used) != 0) raise_failure(L, conn, "");
  redis_request_trim(&c->request);
  return conn;
}

/* Sends a request and pushes its reply. */
static int exchange(lua_State *L, client *c, const char *command, size_t command_len, int first) {
  int last = lua_gettop(L);
  redis_reply_prepare(L);
  redis_conn *conn = send_request(L, c, command, command_len, first, last);
  redisReply *reply = redis_conn_await(conn);
  if (!reply) raise_failure(L, conn, "");
  redis_reply_push(L, reply);
  return 1;
}

/* c:<command>(...): the command is the method's name (upvalue 1). */
static int client_command(lua_State *L) {
  client *c = check_client(L);
  size_t command_len;
  const char *command = lua_tolstring(L, lua_upvalueindex(1), &command_len);
  return exchange(L, c, command, command_len, 2);
}

/* c:call(command, ...) */
static int client_call(lua_State *L) {
  client *c = check_client(L);
  luaL_checktype(L, 2, LUA_TSTRING);
  return exchange(L, c, NULL, 0, 2);
}

/* c:send(command, ...) -> true: sent; its reply comes later (ready_replies). */
static int client_send(lua_State *L) {
  client *c = check_client(L);
  luaL_checktype(L, 2, LUA_TSTRING);
  send_request(L, c, NULL, 0, 2, lua_gettop(L));
  lua_pushboolean(L, 1);
  return 1;
}

/* c:ready_replies() -> an array of the replies that have come whole: what
 * the socket holds is read, without waiting. */
static int client_ready_replies(lua_State *L) {
  client *c = check_client(L);
  lua_settop(L, 1);
  lua_newtable(L);
  if (redis_conn_receive_ready(usable(L, c)) != 0) raise_failure(L, &c->conn, "");
  for (int n = 1;; n++) {
    redis_reply_prepare(L);
    redis_conn *conn = usable(L, c);
    redisReply *reply;
    if (redis_conn_take(conn, &reply) != 0) raise_failure(L, conn, "");
    if (!reply) break;
    redis_reply_push(L, reply);
    lua_rawseti(L, 2, n);
  }
  lua_settop(L, 2);
  return 1;
}

/* c:getfd() -> the socket's descriptor; -1 once closed (socket.select then
 * leaves the client out, as it does a closed LuaSocket socket). */
static int client_getfd(lua_State *L) {
  lua_pushinteger(L, redis_conn_fd(&check_client(L)->conn));
  return 1;
}

/* c:dirty() -> true when ready_replies() would give a reply (or raise the
 * failure) without the socket turning readable: socket.select returns at
 * once for such a client. */
static int client_dirty(lua_State *L) {
  lua_pushboolean(L, redis_conn_has_reply(&check_client(L)->conn));
  return 1;
}

static void release(client *c) {
  redis_conn_close(&c->conn);
  redis_request_free(&c->request);
}

/* c:close() and c:quit() (redis-lua's name) -> true; again: nothing more. */
static int client_close(lua_State *L) {
  release(check_client(L));
  lua_pushboolean(L, 1);
  return 1;
}

static int client_gc(lua_State *L) {
  release(check_client(L));
  return 0;
}

static int client_tostring(lua_State *L) {
  client *c = check_client(L);
  const char *state = !c->conn.context ? " (closed)" : c->conn.failure[0] ? " (failed)" : "";
  lua_pushfstring(L, CLIENT_TYPE ": %s%s", c->conn.peer, state);
  return 1;
}

/* __index: a method (upvalue 1), else the command of that name, made once
 * and kept while in use (upvalue 2, weak values). */
static int client_index(lua_State *L) {
  lua_settop(L, 2);
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (!lua_isnil(L, -1) || lua_type(L, 2) != LUA_TSTRING) return 1;
  lua_pop(L, 1);
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(2));
  if (!lua_isnil(L, -1)) return 1;
  lua_pop(L, 1);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, client_command, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, lua_upvalueindex(2));
  return 1;
}

/* ---- connect ------------------------------------------------------------ */

/* Raises "bad argument #arg to 'connect' ([field: ]<expected> expected, got
 * <got>)". */
static void bad_value(lua_State *L, int arg, const char *field, const char *expected, const char *got) {
  luaL_argerror(L, arg, lua_pushfstring(L, "%s%s%s expected, got %s", field ? field : "", field ? ": " : "",
                                        expected, got));
}

static void check_type(lua_State *L, int idx, int type, int arg, const char *field) {
  if (lua_type(L, idx) != type) bad_value(L, arg, field, lua_typename(L, type), luaL_typename(L, idx));
}

static void bad_number(lua_State *L, int idx, int arg, const char *field, const char *expected) {
  bad_value(L, arg, field, expected, lua_pushfstring(L, "%f", lua_tonumber(L, idx)));
}

static const char *check_text(lua_State *L, int idx, int arg, const char *field) {
  check_type(L, idx, LUA_TSTRING, arg, field);
  size_t len;
  const char *text = lua_tolstring(L, idx, &len);
  if (strlen(text) != len) bad_value(L, arg, field, "a string without NUL bytes", "one with them");
  return text;
}

static int check_port(lua_State *L, int idx, int arg, const char *field) {
  check_type(L, idx, LUA_TNUMBER, arg, field);
  lua_Number port = lua_tonumber(L, idx);
  if (!(port >= 1 && port <= PORT_MAX) || port != floor(port)) bad_number(L, idx, arg, field, "port 1-65535");
  return (int)port;
}

static double check_timeout(lua_State *L, int idx, int arg, const char *field) {
  check_type(L, idx, LUA_TNUMBER, arg, field);
  double seconds = (double)lua_tonumber(L, idx);
  if (!(seconds > 0 && seconds <= TIMEOUT_MAX)) bad_number(L, idx, arg, field, "seconds > 0 and <= 31536000");
  return seconds;
}

/* connect(host, port, timeout), each optional. */
static void read_arguments(lua_State *L, redis_target *target) {
  if (!lua_isnoneornil(L, 1)) target->host = check_text(L, 1, 1, NULL);
  if (!lua_isnoneornil(L, 2)) target->port = check_port(L, 2, 2, NULL);
  if (!lua_isnoneornil(L, 3)) target->timeout = check_timeout(L, 3, 3, NULL);
}

static const char *const OPTIONS[] = { "host", "port", "path", "timeout", NULL };

static void check_option_names(lua_State *L) {
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    int known = 0;
    for (int i = 0; OPTIONS[i] && !known; i++)
      known = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), OPTIONS[i]) == 0;
    if (!known) {
      const char *name = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
      luaL_argerror(L, 1, lua_pushfstring(L, "unknown option '%s'", name));
    }
  }
}

/* connect{host=, port=, path=, timeout=}: the options' values stay on the
 * stack (2..5) while the connect uses their strings. */
static void read_options(lua_State *L, redis_target *target) {
  check_option_names(L);
  lua_settop(L, 1);
  for (int i = 0; OPTIONS[i]; i++) lua_getfield(L, 1, OPTIONS[i]);
  if (!lua_isnil(L, 2)) target->host = check_text(L, 2, 1, "host");
  if (!lua_isnil(L, 3)) target->port = check_port(L, 3, 1, "port");
  if (!lua_isnil(L, 4)) {
    if (!lua_isnil(L, 2) || !lua_isnil(L, 3)) luaL_argerror(L, 1, "path: not with host or port");
    target->path = check_text(L, 4, 1, "path");
  }
  if (!lua_isnil(L, 5)) target->timeout = check_timeout(L, 5, 1, "timeout");
}

static int redis_connect(lua_State *L) {
  redis_target target = { DEFAULT_HOST, DEFAULT_PORT, NULL, 0 };
  if (lua_type(L, 1) == LUA_TTABLE)
    read_options(L, &target);
  else
    read_arguments(L, &target);
  client *c = compat_newuserdata(L, sizeof *c, 0);   /* before the connection: it owns it at once */
  memset(c, 0, sizeof *c);
  luaL_setmetatable(L, CLIENT_TYPE);
  if (redis_conn_open(&c->conn, &target) != 0) raise_failure(L, &c->conn, "");
  return 1;
}

/* redis.is_client(v) -> true for a client of this module. */
static int redis_is_client(lua_State *L) {
  lua_pushboolean(L, luaL_testudata(L, 1, CLIENT_TYPE) != NULL);
  return 1;
}

static const luaL_Reg METHODS[] = {
  { "call", client_call },     { "send", client_send },   { "ready_replies", client_ready_replies },
  { "getfd", client_getfd },   { "dirty", client_dirty }, { "close", client_close },
  { "quit", client_close },    { NULL, NULL },
};

static const luaL_Reg METAMETHODS[] = {
  { "__gc", client_gc }, { "__close", client_gc }, { "__tostring", client_tostring }, { NULL, NULL },
};

static const luaL_Reg FUNCTIONS[] = {
  { "connect", redis_connect }, { "is_client", redis_is_client }, { NULL, NULL },
};

#if defined(__GNUC__)
#define REDIS_EXPORT __attribute__((visibility("default")))
#else
#define REDIS_EXPORT
#endif

REDIS_EXPORT int luaopen_hwt_redis(lua_State *L);

REDIS_EXPORT int luaopen_hwt_redis(lua_State *L) {
  luaL_newmetatable(L, CLIENT_TYPE);
  lua_pushliteral(L, CLIENT_TYPE);
  lua_setfield(L, -2, "__name");          /* 5.1, 5.2 and LuaJIT do not set it */
  luaL_setfuncs(L, METAMETHODS, 0);
  lua_newtable(L);
  luaL_setfuncs(L, METHODS, 0);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushcclosure(L, client_index, 2);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_setfuncs(L, FUNCTIONS, 0);
  return 1;
}
