/*
 * due_order.h — ordering due timeouts by (deadline, seq): the order in which
 * a queue hands them out. Pure functions of their arguments: no lock, no
 * clock, no engine state; due_order_list alone allocates (and copes without).
 *
 * The timeouts that fall due in one wheel event (a tick's batch) are copied
 * into an array of due_entry, their sort keys, while the wheel's walk has
 * them in the cache; due_order_batch puts the array in order, picking the
 * cheapest way for what it finds. Lists of timeouts (a stopped queue's, or a
 * batch when memory for the array ran short) are ordered by due_order_list.
 */
#ifndef HWT_DUE_ORDER_H
#define HWT_DUE_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* The timeout whose `link` n is: lists of timeouts are linked through it,
 * its first member. */
static inline timeout *timeout_of(wheel_node *n) {
  return (timeout *)(void *)n;
}

/* A due timeout's sort key, copied out of the node so that sorting a tick's
 * batch runs in one array instead of chasing list pointers (cache misses). */
typedef struct due_entry {
  uint64_t deadline_ns, seq;
  timeout *t;
} due_entry;

/* Whether a falls due before b: earlier deadline, or the same deadline and
 * scheduled (or re-armed) first. */
static inline bool due_before(const timeout *a, const timeout *b) {
  return a->deadline_ns != b->deadline_ns ? a->deadline_ns < b->deadline_ns
                                          : a->seq < b->seq;
}

static inline bool due_entry_before(const due_entry *a, const due_entry *b) {
  return a->deadline_ns != b->deadline_ns ? a->deadline_ns < b->deadline_ns : a->seq < b->seq;
}

static inline due_entry due_entry_of(timeout *t) {
  return (due_entry){t->deadline_ns, t->seq, t};
}

/* Up to this many entries, due_order_sort is an insertion sort. */
#define DUE_SMALL_SORT 16
/* due_order_buckets' most buckets; its bucket_ends has room for one more. */
#define DUE_BUCKETS_MAX 4096

/* entries[0..count) (count >= 1) in order, in place, if they are in order
 * or in reverse order (then reversed); false, leaving them as they are,
 * otherwise. O(n). */
bool due_order_monotonic(due_entry *entries, size_t count);
/* entries[0..count) in order, in place: quicksort, insertion sort below
 * DUE_SMALL_SORT entries. O(n log n), not stable (keys are unique). */
void due_order_sort(due_entry *entries, size_t count);
/* from[0..count) (count >= 1) in order into to[0..count), by a bucket sort
 * over their deadlines' span; bucket_ends: DUE_BUCKETS_MAX + 1 of scratch. */
void due_order_buckets(const due_entry *from, due_entry *to, size_t count, size_t *bucket_ends);
/* A tick's batch, entries[0..count), in order: the array that holds them in
 * order, entries itself or spare (room for count entries); bucket_ends as for
 * due_order_buckets. */
const due_entry *due_order_batch(due_entry *entries, due_entry *spare, size_t count,
                                 size_t *bucket_ends);

/* A list of timeouts (linked by their `link`) in order: through an array,
 * or, when there is no memory for it, by due_order_list_merge. */
void due_order_list(wheel_list *list);
/* A list of timeouts in order by a bottom-up merge sort of the list itself:
 * O(n log n), stable, no memory. */
void due_order_list_merge(wheel_list *list);

#endif
