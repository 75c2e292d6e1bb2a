/*
 * redis_request.c — a Redis request in RESP (an array of bulk strings) from
 * Lua values: strings as they are (binary-safe), numbers as text Redis
 * reads back exactly: integers as integers (5.3+ integers, and integral
 * floats below 2^63), other floats with the fewest digits that give the
 * same double (at most 17).
 */
#include "redis_client.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_SIZE 512           /* bytes: an EVALSHA of hwt.jobs fits */
#define KEPT_SIZE (64 * 1024)    /* a larger buffer is freed after its request */
#define HEADER_SIZE 24           /* "$" or "*", a size_t in decimal, "\r\n" */
#define NUMBER_SIZE 32           /* "%.17g" of any double, "%.0f" below 2^63 */
#define INTEGRAL_LIMIT 9223372036854775808.0   /* 2^63 */

static void reserve(lua_State *L, redis_request *request, size_t more) {
  if (more <= request->size - request->used) return;
  if (more > SIZE_MAX / 2 - request->used) luaL_error(L, "hwt.redis: request too large");
  size_t size = request->size ? request->size : FIRST_SIZE;
  while (size - request->used < more) size *= 2;
  char *data = realloc(request->data, size);
  if (!data) luaL_error(L, "hwt.redis: not enough memory for the request");
  request->data = data;
  request->size = size;
}

static void add_header(lua_State *L, redis_request *request, char kind, size_t n) {
  reserve(L, request, HEADER_SIZE);
  int len = snprintf(request->data + request->used, HEADER_SIZE, "%c%zu\r\n", kind, n);
  request->used += (size_t)len;
}

static void add_bulk(lua_State *L, redis_request *request, const char *bytes, size_t len) {
  add_header(L, request, '$', len);
  reserve(L, request, len + 2);
  memcpy(request->data + request->used, bytes, len);
  memcpy(request->data + request->used + len, "\r\n", 2);
  request->used += len + 2;
}

/* The shortest of %.15g, %.16g and %.17g that reads back as `value`. */
static size_t format_float(double value, char *out) {
  int len = 0;
  for (int digits = 15; digits <= 17; digits++) {
    len = snprintf(out, NUMBER_SIZE, "%.*g", digits, value);
    if (strtod(out, NULL) == value) break;
  }
  return (size_t)len;
}

static size_t format_number(lua_State *L, int arg, char *out) {
#if LUA_VERSION_NUM >= 503
  if (lua_isinteger(L, arg))
    return (size_t)snprintf(out, NUMBER_SIZE, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, arg));
#endif
  double value = (double)lua_tonumber(L, arg);
  if (value == floor(value) && fabs(value) < INTEGRAL_LIMIT)
    return (size_t)snprintf(out, NUMBER_SIZE, "%.0f", value);
  return format_float(value, out);
}

static void add_argument(lua_State *L, redis_request *request, int arg) {
  switch (lua_type(L, arg)) {
  case LUA_TSTRING: {
    size_t len;
    const char *bytes = lua_tolstring(L, arg, &len);
    add_bulk(L, request, bytes, len);
    break;
  }
  case LUA_TNUMBER: {
    char digits[NUMBER_SIZE];
    size_t len = format_number(L, arg, digits);
    add_bulk(L, request, digits, len);
    break;
  }
  default:
    luaL_argerror(L, arg, lua_pushfstring(L, "string or number expected, got %s", luaL_typename(L, arg)));
  }
}

void redis_request_build(lua_State *L, redis_request *request, const char *command, size_t command_len,
                         int first, int last) {
  request->used = 0;
  size_t count = (size_t)(last >= first ? last - first + 1 : 0) + (command != NULL);
  add_header(L, request, '*', count);
  if (command) add_bulk(L, request, command, command_len);
  for (int arg = first; arg <= last; arg++) add_argument(L, request, arg);
}

void redis_request_trim(redis_request *request) {
  if (request->size > KEPT_SIZE) redis_request_free(request);
}

void redis_request_free(redis_request *request) {
  free(request->data);
  request->data = NULL;
  request->used = request->size = 0;
}
