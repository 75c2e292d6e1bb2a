/*
 * due_order.c — see due_order.h.
 */
#include "due_order.h"

#include <stdlib.h>

void due_order_list_merge(wheel_list *list) {
  wheel_node *head = list->head;
  if (!head) return;
  for (size_t run = 1;; run *= 2) {
    wheel_node *rest = head, *merged_head = NULL, *merged_tail = NULL;
    size_t merges = 0;
    while (rest) {
      wheel_node *left = rest, *right = rest;
      size_t left_len = 0, right_len = run;
      while (left_len < run && right) { right = right->next; left_len++; }
      merges++;
      while (left_len > 0 || (right_len > 0 && right)) {
        wheel_node *take;
        if (left_len == 0) { take = right; right = right->next; right_len--; }
        else if (right_len == 0 || !right ||
                 !due_before(timeout_of(right), timeout_of(left))) {
          take = left; left = left->next; left_len--;
        } else { take = right; right = right->next; right_len--; }
        take->prev = merged_tail;
        if (merged_tail) merged_tail->next = take; else merged_head = take;
        merged_tail = take;
      }
      rest = right;
    }
    merged_tail->next = NULL;
    head = merged_head;
    list->head = merged_head;
    list->tail = merged_tail;
    if (merges <= 1) return;
  }
}

static void swap_entries(due_entry *a, due_entry *b) {
  due_entry held = *a;
  *a = *b;
  *b = held;
}

/* Timeouts scheduled with one delay (request timeouts, heartbeats) reach a
 * slot in deadline order, and leave its LIFO list reversed: such a batch is
 * put in order in O(n). Returns false when it is in neither order. */
bool due_order_monotonic(due_entry *entries, size_t count) {
  size_t ascending = 1, descending = 1;
  for (size_t i = 1; i < count; i++) {
    ascending += due_entry_before(&entries[i - 1], &entries[i]);
    descending += due_entry_before(&entries[i], &entries[i - 1]);
  }
  if (ascending == count) return true;
  if (descending != count) return false;
  for (size_t i = 0, j = count - 1; i < j; i++, j--) swap_entries(&entries[i], &entries[j]);
  return true;
}

/* Quicksort with an inlined comparison (qsort's indirect calls cost more than
 * the sort itself here); insertion sort below DUE_SMALL_SORT entries. Recurses
 * into the smaller side only, so the depth is O(log n). */
void due_order_sort(due_entry *entries, size_t count) {
  while (count > DUE_SMALL_SORT) {
    size_t last = count - 1, middle = count / 2;
    if (due_entry_before(&entries[middle], &entries[0])) swap_entries(&entries[middle], &entries[0]);
    if (due_entry_before(&entries[last], &entries[0])) swap_entries(&entries[last], &entries[0]);
    if (due_entry_before(&entries[last], &entries[middle])) swap_entries(&entries[last], &entries[middle]);
    due_entry pivot = entries[middle];
    size_t i = 0, j = last;
    for (;;) {
      while (due_entry_before(&entries[i], &pivot)) i++;
      while (due_entry_before(&pivot, &entries[j])) j--;
      if (i >= j) break;
      swap_entries(&entries[i++], &entries[j--]);
    }
    size_t left = j + 1;                       /* [0, j] and [j + 1, count) */
    if (left < count - left) {
      due_order_sort(entries, left);
      entries += left;
      count -= left;
    } else {
      due_order_sort(entries + left, count - left);
      count = left;
    }
  }
  for (size_t i = 1; i < count; i++) {
    due_entry moving = entries[i];
    size_t j = i;
    for (; j > 0 && due_entry_before(&moving, &entries[j - 1]); j--) entries[j] = entries[j - 1];
    entries[j] = moving;
  }
}

static void fill_entries(due_entry *entries, const wheel_list *list) {
  size_t i = 0;
  for (wheel_node *n = list->head; n; n = n->next, i++) entries[i] = due_entry_of(timeout_of(n));
}

/* Bucket sort of a batch: a batch's deadlines lie within one tick, so with
 * about one bucket per entry over their span most buckets hold one entry or
 * none, and the sort is a few passes over the array. Quicksort's
 * mispredicted compares cost 40 ns an entry on a tick of 10^3 random
 * deadlines (bench_engine expire); the bucket sort is already faster at 32
 * entries a tick. Up to DUE_SMALL_SORT entries, an insertion sort is. */
static unsigned bucket_shift(uint64_t span, size_t buckets) {
  unsigned shift = 0;
  while ((span >> shift) >= buckets) shift++;
  return shift;
}

static size_t bucket_of(const due_entry *e, uint64_t base, unsigned shift) {
  return (size_t)((e->deadline_ns - base) >> shift);
}

/* Stable scatter of `from` into `to` by bucket; bucket_ends[b] ends up as
 * the end of bucket b in `to`. */
static void scatter_by_bucket(const due_entry *from, due_entry *to, size_t count,
                              uint64_t base, unsigned shift, size_t buckets, size_t *bucket_ends) {
  for (size_t b = 0; b <= buckets; b++) bucket_ends[b] = 0;
  for (size_t i = 0; i < count; i++) bucket_ends[bucket_of(&from[i], base, shift) + 1]++;
  for (size_t b = 1; b <= buckets; b++) bucket_ends[b] += bucket_ends[b - 1];
  for (size_t i = 0; i < count; i++) to[bucket_ends[bucket_of(&from[i], base, shift)]++] = from[i];
}

void due_order_buckets(const due_entry *from, due_entry *to, size_t count, size_t *bucket_ends) {
  uint64_t low = from[0].deadline_ns, high = low;
  for (size_t i = 1; i < count; i++) {
    if (from[i].deadline_ns < low) low = from[i].deadline_ns;
    if (from[i].deadline_ns > high) high = from[i].deadline_ns;
  }
  size_t buckets = DUE_BUCKETS_MAX;
  while (buckets / 2 >= count) buckets /= 2;
  scatter_by_bucket(from, to, count, low, bucket_shift(high - low, buckets), buckets, bucket_ends);
  for (size_t b = 0, begin = 0; b < buckets; begin = bucket_ends[b++])
    if (bucket_ends[b] - begin > 1) due_order_sort(to + begin, bucket_ends[b] - begin);
}

const due_entry *due_order_batch(due_entry *entries, due_entry *spare, size_t count,
                                 size_t *bucket_ends) {
  if (due_order_monotonic(entries, count)) return entries;
  if (count <= DUE_SMALL_SORT) {
    due_order_sort(entries, count);
    return entries;
  }
  due_order_buckets(entries, spare, count, bucket_ends);
  return spare;
}

/* Through an array, which is many times faster than the list merge sort on a
 * large list of scattered nodes (a stopped queue's timeouts). */
void due_order_list(wheel_list *list) {
  size_t count = 0;
  for (wheel_node *n = list->head; n; n = n->next) count++;
  due_entry *entries = count > 1 ? malloc(count * sizeof *entries) : NULL;
  if (!entries) {
    due_order_list_merge(list);
    return;
  }
  fill_entries(entries, list);
  due_order_sort(entries, count);
  *list = (wheel_list){0};
  for (size_t i = 0; i < count; i++) wheel_list_push_back(list, &entries[i].t->link);
  free(entries);
}
