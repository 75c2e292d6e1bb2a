/*
 * lateness.h — the lateness histogram and its percentiles. No lock, no clock:
 * the caller records each lateness and reads percentiles under its own lock.
 */
#ifndef HWT_LATENESS_H
#define HWT_LATENESS_H

#include <stdint.h>

/* Lateness (start - deadline) of every task started: one bucket for 0, one
 * for 1..511 ns, then LATE_SUB_BUCKETS per power of two up to 2^63, so that
 * a bucket's middle is within 1/16 of any value in it. O(1) per task. */
#define LATE_SUB_BITS 3
#define LATE_SUB_BUCKETS (1 << LATE_SUB_BITS)
#define LATE_FIRST_POWER 9                 /* 512 ns */
#define LATE_BUCKETS (2 + (64 - LATE_FIRST_POWER) * LATE_SUB_BUCKETS)
typedef struct late_histogram {
  uint64_t count[LATE_BUCKETS];
  uint64_t total;
} late_histogram;

static inline unsigned late_bucket(uint64_t late_ns) {
  if (late_ns == 0) return 0;
  if (late_ns < (UINT64_C(1) << LATE_FIRST_POWER)) return 1;
  unsigned power = 63u - (unsigned)__builtin_clzll(late_ns);
  unsigned sub = (unsigned)(late_ns >> (power - LATE_SUB_BITS)) & (LATE_SUB_BUCKETS - 1);
  return 2 + (power - LATE_FIRST_POWER) * LATE_SUB_BUCKETS + sub;
}

static inline void late_record(late_histogram *h, uint64_t late_ns) {
  h->count[late_bucket(late_ns)]++;
  h->total++;
}

/* Nearest-rank percentile (1..100), in ns: the middle of its bucket (0 for
 * exactly 0); 0 when nothing was recorded. */
uint64_t late_percentile(const late_histogram *h, unsigned percent);

#endif
