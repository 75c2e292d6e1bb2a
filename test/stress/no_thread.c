/*
 * no_thread.c — an LD_PRELOAD shim whose pthread_create always fails with
 * EAGAIN, as when a process is at its thread limit: test/stress/no_thread_test.lua
 * runs under it to see what hwt does when the system refuses its worker.
 */
#include <errno.h>
#include <pthread.h>

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                   void *arg) {
  (void)thread;
  (void)attr;
  (void)start;
  (void)arg;
  return EAGAIN;
}
