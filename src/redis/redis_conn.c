/*
 * redis_conn.c — one connection to Redis over libhiredis (redis_conn.h).
 *
 * Timeouts: the socket's SO_RCVTIMEO and SO_SNDTIMEO (redisSetTimeout) bound
 * each recv and send by the timeout, and the clock is read between them, so
 * a reply that trickles in fails at the first read after its deadline: a
 * request never waits more than twice the timeout for its reply.
 *
 * Limits: hiredis 0.14 refuses replies nested deeper than 7 arrays and
 * counts above INT_MAX (a protocol error, which fails the connection); a
 * reply's size is bounded only by memory and the timeout.
 */
#define _POSIX_C_SOURCE 200809L
#include "redis_conn.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef MSG_NOSIGNAL            /* where send() has no such flag, SO_NOSIGPIPE (below) */
#define MSG_NOSIGNAL 0
#endif

#define READ_SIZE (16 * 1024)   /* bytes per recv, as hiredis' own reads */

static double monotonic_s(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* The time a step started now must end by: never, without a timeout. */
static double deadline_of(const redis_conn *conn) {
  return conn->timeout > 0 ? monotonic_s() + conn->timeout : INFINITY;
}

static int past(double deadline) {
  return deadline != INFINITY && monotonic_s() > deadline;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int fail(redis_conn *conn, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(conn->failure, sizeof conn->failure, format, args);
  va_end(args);
  return -1;
}

/* waiting_for: "cannot send to" or "no reply from". */
static int fail_timeout(redis_conn *conn, const char *waiting_for) {
  return fail(conn, "timeout: %s %s within %g s", waiting_for, conn->peer, conn->timeout);
}

/* A failed send or recv, by its errno (EAGAIN: SO_SNDTIMEO, SO_RCVTIMEO). */
static int fail_io(redis_conn *conn, int error, const char *waiting_for) {
  if (error == EAGAIN || error == EWOULDBLOCK) return fail_timeout(conn, waiting_for);
  if (error == ECONNRESET || error == EPIPE)
    return fail(conn, "%s closed the connection (%s)", conn->peer, strerror(error));
  return fail(conn, "%s: %s", conn->peer, strerror(error));
}

static struct timeval timeval_of(double seconds) {
  struct timeval tv;
  tv.tv_sec = (time_t)seconds;
  tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
  return tv;
}

static redisContext *connect_to(const redis_target *target) {
  struct timeval tv = timeval_of(target->timeout);
  if (target->path)
    return target->timeout > 0 ? redisConnectUnixWithTimeout(target->path, tv) : redisConnectUnix(target->path);
  return target->timeout > 0 ? redisConnectWithTimeout(target->host, target->port, tv)
                             : redisConnect(target->host, target->port);
}

int redis_conn_open(redis_conn *conn, const redis_target *target) {
  conn->timeout = target->timeout;
  if (target->path)
    snprintf(conn->peer, sizeof conn->peer, "%s", target->path);
  else
    snprintf(conn->peer, sizeof conn->peer, "%s:%d", target->host, target->port);
  redisContext *context = connect_to(target);
  if (!context) return fail(conn, "cannot connect to %s (out of memory)", conn->peer);
  if (!context->err && target->timeout > 0) redisSetTimeout(context, timeval_of(target->timeout));
  if (context->err) {
    fail(conn, "cannot connect to %s (%s)", conn->peer, context->errstr);
    redisFree(context);
    return -1;
  }
#ifdef SO_NOSIGPIPE
  int on = 1;
  setsockopt(context->fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
  conn->context = context;
  return 0;
}

int redis_conn_usable(const redis_conn *conn) {
  return conn->context != NULL && conn->failure[0] == '\0';
}

int redis_conn_send(redis_conn *conn, const char *data, size_t len) {
  double deadline = deadline_of(conn);
  while (len > 0) {
    ssize_t sent = send(conn->context->fd, data, len, MSG_NOSIGNAL);
    if (sent > 0) {
      data += sent;
      len -= (size_t)sent;
    } else if (sent < 0 && errno != EINTR) {
      return fail_io(conn, errno, "cannot send to");
    }
    if (len > 0 && past(deadline)) return fail_timeout(conn, "cannot send to");
  }
  return 0;
}

/* One recv (flags: 0 waits, MSG_DONTWAIT does not) into hiredis' reader. */
static int receive(redis_conn *conn, int flags) {
  char buffer[READ_SIZE];
  ssize_t got = recv(conn->context->fd, buffer, sizeof buffer, flags);
  if (got > 0) {
    if (redisReaderFeed(conn->context->reader, buffer, (size_t)got) != REDIS_OK)
      return fail(conn, "reading from %s: %s", conn->peer, conn->context->reader->errstr);
    return 0;
  }
  if (got == 0) return fail(conn, "%s closed the connection", conn->peer);
  if (errno == EINTR || ((flags & MSG_DONTWAIT) && (errno == EAGAIN || errno == EWOULDBLOCK))) return 0;
  return fail_io(conn, errno, "no reply from");
}

int redis_conn_take(redis_conn *conn, redisReply **reply) {
  *reply = conn->ahead;
  if (conn->ahead) {
    conn->ahead = NULL;
    return 0;
  }
  void *parsed = NULL;
  redisReader *reader = conn->context->reader;
  if (redisReaderGetReply(reader, &parsed) != REDIS_OK)
    return fail(conn, "protocol error from %s (%s)", conn->peer, reader->errstr);
  *reply = parsed;
  return 0;
}

redisReply *redis_conn_await(redis_conn *conn) {
  double deadline = deadline_of(conn);
  for (;;) {
    redisReply *reply;
    if (redis_conn_take(conn, &reply) != 0) return NULL;
    if (reply) return reply;
    if (past(deadline)) {
      fail_timeout(conn, "no reply from");
      return NULL;
    }
    if (receive(conn, 0) != 0) return NULL;
  }
}

int redis_conn_receive_ready(redis_conn *conn) {
  return receive(conn, MSG_DONTWAIT);
}

int redis_conn_has_reply(redis_conn *conn) {
  if (!conn->context) return 0;
  if (!redis_conn_usable(conn)) return 1;
  if (!conn->ahead && redis_conn_take(conn, &conn->ahead) != 0) return 1;
  return conn->ahead != NULL;
}

int redis_conn_fd(const redis_conn *conn) {
  return conn->context ? conn->context->fd : -1;
}

void redis_conn_close(redis_conn *conn) {
  if (conn->ahead) freeReplyObject(conn->ahead);
  if (conn->context) redisFree(conn->context);
  conn->ahead = NULL;
  conn->context = NULL;
}
