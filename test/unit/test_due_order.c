/*
 * test_due_order.c — the due ordering routines alone (src/due_order.c): no
 * engine, no lock, no clock. Each routine is checked against the order it
 * promises, (deadline, seq), on arrays and lists whose keys are drawn with
 * fixed seeds: many equal deadlines (so that the seq decides), sorted and
 * reversed runs, and the sizes around each routine's thresholds.
 *
 * A failed check prints one line "file:line: check failed: ..."; the last
 * line is "due_order: N passed, N failed" (N counts test cases), and the
 * exit status is 1 when any case failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "due_order.h"
#include "check.h"
#include "splitmix64.h"


#define MAX_N 5000

static timeout pool[MAX_N];
static due_entry entries[MAX_N], spare[MAX_N], copy[MAX_N];
static size_t bucket_ends[DUE_BUCKETS_MAX + 1];

/* How the deadlines of a draw are laid out. */
enum shape { RANDOM, ASCENDING, DESCENDING, ALL_EQUAL, ORGAN_PIPE };

/* n timeouts with deadlines base + [0, span) (span 0: all equal) laid out as
 * `shape`, seqs a permutation of distinct values, so that every key is
 * unique, as the engine's are; then their entries. */
static void draw(size_t n, uint64_t base, uint64_t span, enum shape shape, uint64_t *rng) {
  for (size_t i = 0; i < n; i++) {
    uint64_t d = span ? splitmix64(rng) % span : 0;
    switch (shape) {
    case RANDOM: break;
    case ALL_EQUAL: d = 0; break;
    case ASCENDING: d = span ? (span / (n + 1)) * i : 0; break;
    case DESCENDING: d = span ? (span / (n + 1)) * (n - i) : 0; break;
    case ORGAN_PIPE: d = span ? (span / (n + 1)) * (i < n / 2 ? i : n - i) : 0; break;
    }
    pool[i] = (timeout){0};
    pool[i].deadline_ns = base + d;
    pool[i].seq = 1000 + 7 * (uint64_t)i;
  }
  for (size_t i = n; i > 1; i--) {          /* shuffle the seqs among the draw */
    size_t j = (size_t)(splitmix64(rng) % i);
    uint64_t seq = pool[i - 1].seq;
    pool[i - 1].seq = pool[j].seq;
    pool[j].seq = seq;
  }
  if (shape == ASCENDING || shape == DESCENDING) {  /* seqs follow the layout */
    for (size_t i = 0; i < n; i++) pool[i].seq = shape == ASCENDING ? 1000 + i : 1000 + n - i;
  }
  for (size_t i = 0; i < n; i++) entries[i] = due_entry_of(&pool[i]);
}

/* Whether a[0..n) is in strictly increasing (deadline, seq) order, holds
 * each of pool[0..n) exactly once, and carries each timeout's own key. */
static bool in_order(const due_entry *a, size_t n) {
  static unsigned char seen[MAX_N];
  memset(seen, 0, n);
  for (size_t i = 0; i < n; i++) {
    size_t at = (size_t)(a[i].t - pool);
    if (at >= n || seen[at]++) return false;
    if (a[i].deadline_ns != a[i].t->deadline_ns || a[i].seq != a[i].t->seq) return false;
    if (i > 0 && !due_entry_before(&a[i - 1], &a[i])) return false;
  }
  return true;
}

/* The same for a list of timeouts, with its links and tail checked. */
static bool list_in_order(const wheel_list *l, size_t n) {
  static unsigned char seen[MAX_N];
  memset(seen, 0, n);
  size_t count = 0;
  wheel_node *prev = NULL;
  for (wheel_node *at = l->head; at; prev = at, at = at->next, count++) {
    size_t i = (size_t)(timeout_of(at) - pool);
    if (i >= n || seen[i]++ || at->prev != prev) return false;
    if (prev && !due_before(timeout_of(prev), timeout_of(at))) return false;
  }
  return count == n && l->tail == prev;
}

static const size_t sizes[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 100, 1000, MAX_N};
#define SIZES (sizeof sizes / sizeof sizes[0])

static void test_before_by_deadline_then_seq(void) {
  timeout a = {0}, b = {0};
  a.deadline_ns = 10, a.seq = 9;
  b.deadline_ns = 11, b.seq = 1;
  CHECK(due_before(&a, &b) && !due_before(&b, &a));      /* deadline first */
  b.deadline_ns = 10;
  CHECK(due_before(&b, &a) && !due_before(&a, &b));      /* then seq */
  CHECK(!due_before(&a, &a));                            /* strict */
  due_entry ea = due_entry_of(&a), eb = due_entry_of(&b);
  CHECK(ea.t == &a && ea.deadline_ns == 10 && ea.seq == 9);
  CHECK(due_entry_before(&eb, &ea) && !due_entry_before(&ea, &eb) && !due_entry_before(&ea, &ea));
  eb.deadline_ns = UINT64_MAX;                           /* never: last */
  CHECK(due_entry_before(&ea, &eb));
}

/* Ascending: kept as it is; descending: reversed; anything else: refused
 * and left untouched. */
static void test_monotonic(void) {
  uint64_t rng = 1;
  for (size_t s = 0; s < SIZES; s++) {
    size_t n = sizes[s];
    draw(n, 5000, 1000000, ASCENDING, &rng);
    memcpy(copy, entries, n * sizeof *copy);
    CHECK(due_order_monotonic(entries, n) && memcmp(copy, entries, n * sizeof *copy) == 0);
    draw(n, 5000, 1000000, DESCENDING, &rng);
    CHECK(due_order_monotonic(entries, n) && in_order(entries, n));
    draw(n, 5000, 0, DESCENDING, &rng);                  /* equal deadlines, seqs down */
    CHECK(due_order_monotonic(entries, n) && in_order(entries, n));
    if (n < 3) continue;
    draw(n, 5000, 1000000, ASCENDING, &rng);
    due_entry held = entries[n / 2];                     /* one pair out of order */
    entries[n / 2] = entries[n / 2 + 1];
    entries[n / 2 + 1] = held;
    memcpy(copy, entries, n * sizeof *copy);
    CHECK(!due_order_monotonic(entries, n) && memcmp(copy, entries, n * sizeof *copy) == 0);
    draw(n, 5000, 1000000, ORGAN_PIPE, &rng);
    memcpy(copy, entries, n * sizeof *copy);
    CHECK(!due_order_monotonic(entries, n) && memcmp(copy, entries, n * sizeof *copy) == 0);
  }
}

static void test_sort(void) {
  uint64_t rng = 2;
  const enum shape shapes[] = {RANDOM, ASCENDING, DESCENDING, ALL_EQUAL, ORGAN_PIPE};
  const uint64_t spans[] = {0, 7, 1000000, UINT64_C(1) << 62};
  for (size_t s = 0; s < SIZES; s++)
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
      for (size_t p = 0; p < sizeof spans / sizeof spans[0]; p++) {
        draw(sizes[s], 123, spans[p], shapes[k], &rng);
        due_order_sort(entries, sizes[s]);
        CHECK(in_order(entries, sizes[s]));
      }
  due_order_sort(entries, 0);                            /* nothing to do */
}

/* The bucket sort into `to`, over spans from none (one bucket) to the
 * widest the engine passes; `from` is left as it was. */
static void test_buckets(void) {
  uint64_t rng = 3;
  const uint64_t spans[] = {0, 1, 7, 1000, 1000000, UINT64_C(1) << 62};
  for (size_t s = 0; s < SIZES; s++)
    for (size_t p = 0; p < sizeof spans / sizeof spans[0]; p++)
      for (int shape = RANDOM; shape <= ORGAN_PIPE; shape++) {
        size_t n = sizes[s];
        draw(n, UINT64_C(1) << 40, spans[p], (enum shape)shape, &rng);
        memcpy(copy, entries, n * sizeof *copy);
        due_order_buckets(entries, spare, n, bucket_ends);
        CHECK(in_order(spare, n));
        CHECK(memcmp(copy, entries, n * sizeof *copy) == 0);
      }
}

/* A batch comes back in order, in the array the choice used: in place when
 * it was monotonic or small, else in the spare. */
static void test_batch(void) {
  uint64_t rng = 4;
  for (size_t s = 0; s < SIZES; s++) {
    size_t n = sizes[s];
    draw(n, 0, 1000000, ASCENDING, &rng);
    CHECK(due_order_batch(entries, spare, n, bucket_ends) == entries && in_order(entries, n));
    draw(n, 0, 1000000, DESCENDING, &rng);
    CHECK(due_order_batch(entries, spare, n, bucket_ends) == entries && in_order(entries, n));
    for (int round = 0; round < 4; round++) {
      draw(n, 77, round % 2 ? 1000000 : 3, RANDOM, &rng);
      bool monotonic_draw = n < 3;                       /* any 1 or 2 entries are */
      const due_entry *out = due_order_batch(entries, spare, n, bucket_ends);
      CHECK(out == (n <= DUE_SMALL_SORT || monotonic_draw ? entries : spare));
      CHECK(in_order(out, n));
    }
  }
}

/* pool[0..n) linked into a list in a random order. */
static wheel_list shuffled_list(size_t n, uint64_t *rng) {
  static size_t order[MAX_N];
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(splitmix64(rng) % i), held = order[i - 1];
    order[i - 1] = order[j];
    order[j] = held;
  }
  wheel_list l = {0};
  for (size_t i = 0; i < n; i++) wheel_list_push_back(&l, &pool[order[i]].link);
  return l;
}

static void check_list_sort(void (*sort)(wheel_list *), uint64_t seed) {
  uint64_t rng = seed;
  wheel_list empty = {0};
  sort(&empty);
  CHECK(empty.head == NULL && empty.tail == NULL);
  for (size_t s = 0; s < SIZES; s++)
    for (int shape = RANDOM; shape <= ORGAN_PIPE; shape++) {
      size_t n = sizes[s];
      draw(n, 9, shape == RANDOM ? 50 : 1000000, (enum shape)shape, &rng);
      wheel_list l = shuffled_list(n, &rng);
      sort(&l);
      CHECK(list_in_order(&l, n));
    }
}

static void test_list(void) { check_list_sort(due_order_list, 5); }
static void test_list_merge(void) { check_list_sort(due_order_list_merge, 6); }

static const test_case tests[] = {
  {"before_by_deadline_then_seq", test_before_by_deadline_then_seq},
  {"monotonic", test_monotonic},
  {"sort", test_sort},
  {"buckets", test_buckets},
  {"batch", test_batch},
  {"list", test_list},
  {"list_merge", test_list_merge},
};

int main(void) {
  return run_tests("due_order", tests, sizeof tests / sizeof tests[0]);
}
