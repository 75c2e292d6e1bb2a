/*
 * splitmix64.h — the C tests' random numbers: fixed seeds, so that a
 * failure replays (Steele, Lea and Flood's SplitMix64).
 */
#ifndef HWT_TEST_SPLITMIX64_H
#define HWT_TEST_SPLITMIX64_H

#include <stdint.h>

static inline uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

#endif
