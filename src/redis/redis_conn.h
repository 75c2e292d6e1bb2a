/*
 * redis_conn.h — one connection to Redis over libhiredis, with no Lua: it
 * connects (TCP or a unix socket) within a timeout, sends a whole request,
 * waits for a reply within the timeout, and takes the replies that have
 * come without waiting. hiredis connects and parses (its reader builds each
 * reply as a redisReply); the sends and reads are this file's, so that a
 * write to a closed socket raises no SIGPIPE and a reply that trickles in
 * still meets a deadline.
 *
 * A connection that fails (a timeout, the peer closed it, bytes that are
 * not RESP) records why in `failure` and is used for nothing more: a reply
 * it still owes would be taken as the answer to the next request. Its
 * socket stays open until redis_conn_close(), so that whoever watches the
 * fd (an event loop) can stop watching before the fd is closed.
 */
#ifndef HWT_REDIS_CONN_H
#define HWT_REDIS_CONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#define REDIS_CONN_PEER_SIZE 128     /* "host:port" or a socket path, for messages */
#define REDIS_CONN_FAILURE_SIZE 256

typedef struct redis_target {
  const char *host;                  /* TCP, unless path is set */
  int port;
  const char *path;                  /* a unix socket, or NULL */
  double timeout;                    /* seconds, for the connect and each send and reply; 0: none */
} redis_target;

typedef struct redis_conn {
  redisContext *context;             /* NULL until opened, and once closed */
  redisReply *ahead;                 /* a whole reply redis_conn_has_reply() took early */
  double timeout;
  char peer[REDIS_CONN_PEER_SIZE];
  char failure[REDIS_CONN_FAILURE_SIZE];   /* why it failed; "" while it works */
} redis_conn;

/* Each returns 0, or -1 with conn->failure set (also for the connect). The
 * others than open and close are for a connection that is open and has not
 * failed (redis_conn_usable). */
int redis_conn_open(redis_conn *conn, const redis_target *target);
int redis_conn_usable(const redis_conn *conn);
int redis_conn_send(redis_conn *conn, const char *data, size_t len);
/* Waits for the next reply; NULL when the connection failed. */
redisReply *redis_conn_await(redis_conn *conn);
/* Reads what the socket holds now, without waiting. */
int redis_conn_receive_ready(redis_conn *conn);
/* The next reply already read, or *reply = NULL when none is whole yet. */
int redis_conn_take(redis_conn *conn, redisReply **reply);
/* 1 when a read would give something without waiting: a whole reply, or
 * the failure; 0 for a closed connection. */
int redis_conn_has_reply(redis_conn *conn);
int redis_conn_fd(const redis_conn *conn);   /* -1 once closed */
/* Frees everything the connection holds; a second call does nothing. */
void redis_conn_close(redis_conn *conn);

#endif
