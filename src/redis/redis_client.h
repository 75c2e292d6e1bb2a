/*
 * redis_client.h — what the files of hwt.redis (the C files of src/redis/, module
 * hwt/redis.so) share on the Lua side: building a request from Lua values
 * (redis_request.c) and pushing a reply as Lua values (redis_reply.c). The
 * connection itself has no Lua (redis_conn.h); redis_client.c is the
 * client userdata and the module.
 */
#ifndef HWT_REDIS_CLIENT_H
#define HWT_REDIS_CLIENT_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "../compat.h"

/* A request in RESP, built in memory the client keeps between calls. */
typedef struct redis_request {
  char *data;
  size_t used, size;
} redis_request;

/* Builds the request `command` (NULL: the first argument is the command)
 * with the Lua values first..last as its arguments, each a string or a
 * number; raises naming an argument of another type, before anything is
 * sent. */
void redis_request_build(lua_State *L, redis_request *request, const char *command, size_t command_len,
                         int first, int last);
/* After a request is sent: lets go of a buffer a large request grew. */
void redis_request_trim(redis_request *request);
void redis_request_free(redis_request *request);

/* Converting a reply may raise (memory, a finalizer's error, an error
 * reply), so it runs under lua_pcall, and the reply is freed on every path:
 * redis_reply_prepare() before the reply is taken (it pushes what may need
 * memory), then redis_reply_push() with the reply, which leaves its value
 * in the converter's place, or raises once the reply is freed. */
void redis_reply_prepare(lua_State *L);
void redis_reply_push(lua_State *L, redisReply *reply);

#endif
