/*
 * fuzz_wheel.c — libFuzzer harness for the timing wheel (src/wheel.h).
 *
 * The input is decoded as a wheel size (first byte) and then a sequence of
 * operations on a fixed pool of nodes: insert, remove, advance, and list work
 * (wheel_list_push_back / insert_after / remove / pop_front) on a "parked"
 * list of nodes that are not in the wheel. A reference model keeps every
 * node's state and deadline; after each operation the wheel is checked
 * against it, and after each advance the due list must be exactly the live
 * nodes with deadline <= to, in non-decreasing deadline order.
 *
 * Deadlines are chosen to hit the interesting places: small and medium
 * deltas, every level boundary (relative to now and absolute, aligned to
 * the block of each level, a few ticks either side), the top of the range
 * up to UINT64_MAX, arbitrary 64-bit values and deadlines not in the future.
 *
 * Any mismatch aborts (__builtin_trap) so that libFuzzer records a crash.
 *
 * Build and run (from the repository root):
 *   mkdir -p build
 *   clang -std=c11 -Wall -Wextra -Wpedantic -Werror -g -O1 \
 *     -fsanitize=fuzzer,address,undefined -Isrc \
 *     test/stress/fuzz/fuzz_wheel.c src/wheel.c -o build/fuzz_wheel
 *   build/fuzz_wheel -max_total_time=30 -seed=1 -max_len=4096
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wheel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define POOL 256

enum node_state { NODE_FREE = 0, NODE_LIVE, NODE_PARKED };

static wheel_node nodes[POOL];
static uint8_t state[POOL];          /* enum node_state */
static uint64_t deadline[POOL];      /* the model's deadline while LIVE */
static uint8_t seen[POOL];           /* scratch for due-set checks */
static size_t live_count;

/* The model of the parked list: node indexes, head first. */
static uint16_t parked[POOL];
static size_t parked_len;

static wheel_list parked_list;

#define FAIL(...)                                                          \
  do {                                                                     \
    fprintf(stderr, "fuzz_wheel: %s:%d: ", __FILE__, __LINE__);            \
    fprintf(stderr, __VA_ARGS__);                                          \
    fputc('\n', stderr);                                                   \
    __builtin_trap();                                                      \
  } while (0)

#define ASSERT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) FAIL("assertion failed: %s", #cond);                      \
  } while (0)

/* ---- input reader ------------------------------------------------------ */

typedef struct reader {
  const uint8_t *p, *end;
} reader;

static bool more(const reader *r) { return r->p < r->end; }

static uint8_t u8(reader *r) { return r->p < r->end ? *r->p++ : 0; }

static uint16_t u16(reader *r) {
  uint16_t hi = u8(r);
  return (uint16_t)(hi << 8 | u8(r));
}

static uint64_t u64(reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | u8(r);
  return v;
}

/* ---- helpers ----------------------------------------------------------- */

static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_sub(uint64_t a, uint64_t b) { return a < b ? 0 : a - b; }

static size_t index_of(const wheel_node *n) {
  ASSERT(n >= nodes && n < nodes + POOL);
  return (size_t)(n - nodes);
}

/* The wheel's wheel_deadline_fn: the model's deadline, asked only of a node
 * in the wheel. */
static uint64_t model_deadline(const wheel_node *n, const void *ctx) {
  ASSERT(ctx == deadline);
  size_t idx = index_of(n);
  ASSERT(state[idx] == NODE_LIVE);
  return deadline[idx];
}

/* n is linked in the list its level and list fields name. */
static bool in_its_list(const wheel *w, const wheel_node *n) {
  if (n->level >= w->levels) return false;
  for (const wheel_node *p = w->heads[n->level][n->list]; p; p = p->next)
    if (p == n) return true;
  return false;
}

/* 1..4096 from one byte: powers of two, their neighbours, and others. */
static uint32_t pick_size(uint8_t b) {
  uint32_t power = UINT32_C(1) << (b / 4 % 13);      /* 1 .. 4096 */
  uint32_t size;
  switch (b % 4) {
    case 0: size = power; break;
    case 1: size = power + 1; break;
    case 2: size = power - 1; break;
    default: size = 1 + (uint32_t)b * 16; break;       /* 1 .. 4081 */
  }
  if (size < 1) size = 1;
  if (size > 4096) size = 4096;
  return size;
}

/* Bit position where level `level` ends (its blocks are 1 << this wide). */
static unsigned level_span(const wheel *w, unsigned level) {
  return w->size_bits + WHEEL_LEVEL_BITS * level;
}

/* A deadline (absolute tick) chosen by the input; may be <= now. */
static uint64_t pick_deadline(reader *r, const wheel *w) {
  uint64_t now = w->now_tick;
  uint8_t kind = u8(r);
  switch (kind % 10) {
    case 0:                                          /* small delta */
      return sat_add(now, u8(r));
    case 1:                                          /* medium delta */
      return sat_add(now, u16(r));
    case 2:
    case 3: {                                        /* relative boundary */
      unsigned level = u8(r) % (w->levels + 1);
      unsigned span = level_span(w, level);
      int off = (int)(u8(r) % 9) - 4;                /* -4 .. +4 */
      uint64_t delta = span >= 64 ? UINT64_MAX : UINT64_C(1) << span;
      delta = off < 0 ? sat_sub(delta, (uint64_t)-off) : sat_add(delta, (uint64_t)off);
      return sat_add(now, delta);
    }
    case 4:
    case 5: {                                        /* absolute boundary */
      unsigned level = u8(r) % (w->levels + 1);
      unsigned span = level_span(w, level);
      uint8_t b = u8(r);
      uint64_t k = 1 + b % 3;                        /* 1st .. 3rd next block */
      int off = (int)(b / 3 % 7) - 3;                /* -3 .. +3 */
      uint64_t base;
      if (span >= 64) {
        base = UINT64_MAX;
      } else {
        uint64_t block = UINT64_C(1) << span;
        uint64_t start = now & ~(block - 1);
        base = start;
        for (uint64_t i = 0; i < k; i++) base = sat_add(base, block);
      }
      return off < 0 ? sat_sub(base, (uint64_t)-off) : sat_add(base, (uint64_t)off);
    }
    case 6:                                          /* the very top */
      return UINT64_MAX - u8(r) % 4;
    case 7:                                          /* any 64-bit value */
      return u64(r);
    case 8: {                                        /* scaled delta */
      uint64_t v = u16(r);
      unsigned shift = u8(r) % 64;
      uint64_t delta = v > (UINT64_MAX >> shift) ? UINT64_MAX : v << shift;
      return sat_add(now, delta);
    }
    default:                                         /* now or the past */
      return sat_sub(now, u8(r) % 3);
  }
}

/* ---- checks ------------------------------------------------------------ */

static void check_list(const wheel_list *l, size_t expect_len) {
  size_t len = 0;
  const wheel_node *prev = NULL;
  for (const wheel_node *n = l->head; n; n = n->next) {
    ASSERT(n->prev == prev);
    ASSERT(len < POOL);
    prev = n;
    len++;
  }
  ASSERT(l->tail == prev);
  ASSERT(len == expect_len);
}

static void check_parked(void) {
  check_list(&parked_list, parked_len);
  size_t i = 0;
  for (const wheel_node *n = parked_list.head; n; n = n->next, i++) {
    ASSERT(index_of(n) == parked[i]);
    ASSERT(state[parked[i]] == NODE_PARKED);
  }
}

static bool model_earliest(uint64_t *out) {
  bool any = false;
  uint64_t min = UINT64_MAX;
  for (size_t i = 0; i < POOL; i++)
    if (state[i] == NODE_LIVE && deadline[i] <= min) { min = deadline[i]; any = true; }
  *out = min;
  return any;
}

static void check_wheel(const wheel *w) {
  ASSERT(w->count == live_count);
  uint64_t tick = 0, earliest;
  bool has = wheel_next_event(w, &tick);
  bool any = model_earliest(&earliest);
  if (has != any) FAIL("next_event %d but model has %d live", has, any);
  if (has) {
    if (!(tick > w->now_tick))
      FAIL("next_event %llu <= now %llu", (unsigned long long)tick,
           (unsigned long long)w->now_tick);
    if (!(tick <= earliest))
      FAIL("next_event %llu > earliest deadline %llu (now %llu)",
           (unsigned long long)tick, (unsigned long long)earliest,
           (unsigned long long)w->now_tick);
    ASSERT(earliest > w->now_tick);
  }
}

/* ---- operations -------------------------------------------------------- */

static void parked_take(size_t idx) {
  size_t pos = 0;
  while (pos < parked_len && parked[pos] != idx) pos++;
  ASSERT(pos < parked_len);
  memmove(&parked[pos], &parked[pos + 1], (parked_len - pos - 1) * sizeof parked[0]);
  parked_len--;
}

static void unpark(size_t idx) {
  wheel_list_remove(&parked_list, &nodes[idx]);
  ASSERT(nodes[idx].next == NULL && nodes[idx].prev == NULL);
  parked_take(idx);
  state[idx] = NODE_FREE;
}

static void op_insert(reader *r, wheel *w) {
  size_t idx = u8(r) % POOL;
  if (state[idx] == NODE_LIVE) {
    wheel_remove(w, &nodes[idx]);
    state[idx] = NODE_FREE;
    live_count--;
  } else if (state[idx] == NODE_PARKED) {
    unpark(idx);
  }
  uint64_t d = pick_deadline(r, w);
  bool future = d > w->now_tick;
  bool linked = wheel_insert(w, &nodes[idx], d);
  if (linked != future)
    FAIL("insert(%llu) at now %llu returned %d", (unsigned long long)d,
         (unsigned long long)w->now_tick, linked);
  if (linked) {
    ASSERT(in_its_list(w, &nodes[idx]));
    state[idx] = NODE_LIVE;
    deadline[idx] = d;
    live_count++;
  }
}

static void op_remove(reader *r, wheel *w) {
  size_t idx = u8(r) % POOL;
  if (state[idx] == NODE_LIVE) {
    wheel_remove(w, &nodes[idx]);
    ASSERT(nodes[idx].next == NULL && nodes[idx].prev == NULL);
    state[idx] = NODE_FREE;
    live_count--;
  } else if (state[idx] == NODE_PARKED) {
    unpark(idx);
  }
}

/* Moves a free node into the parked list at a chosen place. */
static void op_park(reader *r) {
  size_t idx = u8(r) % POOL;
  if (state[idx] != NODE_FREE) return;
  uint8_t how = u8(r);
  if (how % 2 == 0 || parked_len == 0) {
    if (how % 4 == 0) {
      wheel_list_push_back(&parked_list, &nodes[idx]);
      parked[parked_len] = (uint16_t)idx;
    } else {                                         /* insert_after(NULL) */
      wheel_list_insert_after(&parked_list, NULL, &nodes[idx]);
      memmove(&parked[1], &parked[0], parked_len * sizeof parked[0]);
      parked[0] = (uint16_t)idx;
    }
  } else {
    size_t pos = u8(r) % parked_len;
    wheel_list_insert_after(&parked_list, &nodes[parked[pos]], &nodes[idx]);
    memmove(&parked[pos + 2], &parked[pos + 1], (parked_len - pos - 1) * sizeof parked[0]);
    parked[pos + 1] = (uint16_t)idx;
  }
  parked_len++;
  state[idx] = NODE_PARKED;
}

static void op_pop_parked(void) {
  wheel_node *n = wheel_list_pop_front(&parked_list);
  if (parked_len == 0) {
    ASSERT(n == NULL);
    return;
  }
  ASSERT(n != NULL && index_of(n) == parked[0]);
  ASSERT(n->next == NULL && n->prev == NULL);
  parked_take(parked[0]);
  state[index_of(n)] = NODE_FREE;
}

static void op_advance(reader *r, wheel *w) {
  uint64_t now = w->now_tick, to, next = 0, earliest = 0;
  uint8_t how = u8(r);
  bool has_next = wheel_next_event(w, &next);
  bool has_live = model_earliest(&earliest);
  switch (how % 6) {
    case 0: to = has_next ? next : now; break;
    case 1: to = has_next ? next - 1 : now; break;
    case 2: to = has_live ? earliest : now; break;
    case 3: to = has_live ? earliest - 1 : now; break;
    case 4: to = now; break;
    default: to = pick_deadline(r, w); break;
  }
  if (to < now) to = now;
  bool into_parked = how / 6 % 2;    /* append to a non-empty list too */

  wheel_list fresh = {0};
  wheel_list *due = into_parked ? &parked_list : &fresh;
  wheel_node *old_tail = due->tail;
  size_t expect = 0;
  for (size_t i = 0; i < POOL; i++)
    if (state[i] == NODE_LIVE && deadline[i] <= to) expect++;

  wheel_advance(w, to, due);

  if (w->now_tick != to)
    FAIL("now_tick %llu after advance to %llu", (unsigned long long)w->now_tick,
         (unsigned long long)to);
  if (into_parked) check_list(due, parked_len + expect);
  else check_list(due, expect);

  memset(seen, 0, sizeof seen);
  uint64_t last = 0;
  size_t got = 0;
  for (wheel_node *n = old_tail ? old_tail->next : due->head; n; n = n->next) {
    size_t idx = index_of(n);
    if (state[idx] != NODE_LIVE) FAIL("due node %zu was not live (state %d)", idx, state[idx]);
    if (seen[idx]) FAIL("due node %zu listed twice", idx);
    seen[idx] = 1;
    if (deadline[idx] > to)
      FAIL("node %zu due early: deadline %llu > to %llu (from %llu)", idx,
           (unsigned long long)deadline[idx], (unsigned long long)to,
           (unsigned long long)now);
    if (deadline[idx] < last)
      FAIL("due list out of order: %llu after %llu", (unsigned long long)deadline[idx],
           (unsigned long long)last);
    last = deadline[idx];
    got++;
  }
  if (got != expect)
    FAIL("advance %llu -> %llu: %zu due, model expects %zu", (unsigned long long)now,
         (unsigned long long)to, got, expect);

  /* The due nodes have left the wheel. */
  for (wheel_node *n = old_tail ? old_tail->next : due->head; n; n = n->next) {
    size_t idx = index_of(n);
    live_count--;
    if (into_parked) {
      state[idx] = NODE_PARKED;
      parked[parked_len++] = (uint16_t)idx;
    } else {
      state[idx] = NODE_FREE;
    }
  }
  if (!into_parked) {                               /* empty it with pop_front */
    size_t popped = 0;
    wheel_node *n;
    while ((n = wheel_list_pop_front(due))) {
      ASSERT(n->next == NULL && n->prev == NULL);
      popped++;
    }
    ASSERT(popped == expect && due->head == NULL && due->tail == NULL);
  }
  for (size_t i = 0; i < POOL; i++)
    if (state[i] == NODE_LIVE && deadline[i] <= to) FAIL("node %zu due but kept", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  reader r = {data, data + size};
  wheel w;
  uint32_t wheel_size = pick_size(u8(&r));
  if (wheel_init(&w, wheel_size, model_deadline, deadline) != 0) return 0;
  ASSERT(w.size == wheel_round_size(wheel_size));
  ASSERT(w.size >= wheel_size && (w.size & (w.size - 1)) == 0);
  ASSERT((UINT32_C(1) << w.size_bits) == w.size);
  ASSERT(w.levels >= 1 && w.levels <= WHEEL_LEVELS_MAX);
  ASSERT(w.now_tick == 0 && w.count == 0);

  memset(nodes, 0, sizeof nodes);
  memset(state, 0, sizeof state);
  live_count = 0;
  parked_len = 0;
  parked_list = (wheel_list){0};

  while (more(&r)) {
    uint8_t op = u8(&r);
    switch (op % 16) {
      case 0: case 1: case 2: case 3: case 4: case 5:
        op_insert(&r, &w);
        break;
      case 6: case 7:
        op_remove(&r, &w);
        break;
      case 8: case 9: case 10: case 11:
        op_advance(&r, &w);
        break;
      case 12: case 13:
        op_park(&r);
        break;
      case 14:
        op_pop_parked();
        break;
      default: {                                    /* remove from the middle */
        if (parked_len) unpark(parked[u8(&r) % parked_len]);
        break;
      }
    }
    check_wheel(&w);
    check_parked();
  }

  /* Drain everything: advancing to the end of time empties the wheel. */
  size_t remaining = live_count;
  wheel_list due = {0};
  wheel_advance(&w, UINT64_MAX, &due);
  ASSERT(w.now_tick == UINT64_MAX);
  if (w.count != 0)
    FAIL("advance to UINT64_MAX left %zu of %zu nodes in the wheel", w.count, remaining);
  check_list(&due, remaining);
  uint64_t last = 0;
  for (wheel_node *n = due.head; n; n = n->next) {
    size_t idx = index_of(n);
    ASSERT(state[idx] == NODE_LIVE);
    ASSERT(deadline[idx] >= last);
    last = deadline[idx];
    state[idx] = NODE_FREE;
  }
  uint64_t tick;
  ASSERT(!wheel_next_event(&w, &tick));
  ASSERT(!wheel_insert(&w, &nodes[0], UINT64_MAX));
  wheel_free(&w);
  return 0;
}
