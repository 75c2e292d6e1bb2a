/*
 * lateness.c — see lateness.h.
 */
#include "lateness.h"

/* The middle of a bucket: what every lateness in it reads as. */
static uint64_t late_bucket_middle(unsigned bucket) {
  if (bucket == 0) return 0;
  if (bucket == 1) return UINT64_C(1) << (LATE_FIRST_POWER - 1);
  unsigned power = LATE_FIRST_POWER + (bucket - 2) / LATE_SUB_BUCKETS;
  uint64_t width = UINT64_C(1) << (power - LATE_SUB_BITS);
  uint64_t low = (UINT64_C(1) << power) + ((bucket - 2) % LATE_SUB_BUCKETS) * width;
  return low + width / 2;
}

uint64_t late_percentile(const late_histogram *h, unsigned percent) {
  uint64_t rank = h->total / 100 * percent + (h->total % 100 * percent + 99) / 100;
  uint64_t seen = 0, middle = 0;
  for (unsigned bucket = 0; rank > 0 && bucket < LATE_BUCKETS; bucket++) {
    seen += h->count[bucket];
    if (seen >= rank) {
      middle = late_bucket_middle(bucket);
      break;
    }
  }
  return middle;
}
