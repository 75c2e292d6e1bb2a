/*
 * due_order.h — ordering due timeouts by (deadline, seq): pure functions of
 * their arguments (no lock, no clock, no engine state).
 */
#ifndef HWT_DUE_ORDER_H
#define HWT_DUE_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* A due timeout's sort key, copied out of the node so that sorting a tick's
 * batch runs in one array instead of chasing list pointers (cache misses). */
struct due_entry {
  uint64_t deadline_ns, seq;
  timeout *t;
};

static inline bool runs_before(const timeout *a, const timeout *b) {
  return a->deadline_ns != b->deadline_ns ? a->deadline_ns < b->deadline_ns
                                          : a->seq < b->seq;
}

static inline bool entry_before(const struct due_entry *a, const struct due_entry *b) {
  return a->deadline_ns != b->deadline_ns ? a->deadline_ns < b->deadline_ns : a->seq < b->seq;
}

static inline struct due_entry entry_of(timeout *t) {
  return (struct due_entry){t->deadline_ns, t->seq, t};
}

/* Up to this many entries, sort_entries is an insertion sort. */
#define SMALL_SORT 16
/* bucket_sort_entries' most buckets: bucket_ends holds one more. */
#define BATCH_BUCKETS_MAX 4096

void sort_by_deadline(wheel_list *list);
bool order_monotonic(struct due_entry *entries, size_t count);
void sort_entries(struct due_entry *entries, size_t count);
void bucket_sort_entries(const struct due_entry *from, struct due_entry *to, size_t count,
                         size_t *bucket_ends);
void sort_ended(wheel_list *ended);

#endif
