/*
 * test_wheel.c — unit tests for the hierarchical timing wheel (src/wheel.c).
 *
 * Plain C11, no framework. Every test case is a named function registered in
 * the table in main(). A failed check prints one line "file:line: message";
 * the last line is "wheel: N passed, N failed" (N counts test cases), and the
 * exit status is 1 when any case failed.
 *
 * Build: cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -Isrc \
 *           test/unit/test_wheel.c src/wheel.c -o build/test_wheel
 */
#include "wheel.h"
#include "splitmix64.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Check helpers                                                            */
/* ------------------------------------------------------------------------ */

static int g_case_failed;            /* the running case has a failed check */
static unsigned long g_checks_failed;          /* failed checks, all cases */
static char g_context[160];       /* appended to a failure line when set */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void fail_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  printf("%s:%d: ", file, line);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  if (g_context[0]) printf(" %s", g_context);
  putchar('\n');
  fflush(stdout);
  g_case_failed = 1;
  g_checks_failed++;
}

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) fail_at(__FILE__, __LINE__, __VA_ARGS__);                    \
  } while (0)

/* Unsigned equality with both values printed. */
#define CHECK_EQ(actual, expected)                                            \
  do {                                                                        \
    uint64_t a_ = (uint64_t)(actual), e_ = (uint64_t)(expected);              \
    if (a_ != e_)                                                             \
      fail_at(__FILE__, __LINE__, "%s == %s: got %" PRIu64                   \
              ", expected %" PRIu64, #actual, #expected, a_, e_);             \
  } while (0)

#define CHECK_TRUE(cond) CHECK((cond), "expected true: %s", #cond)
#define CHECK_FALSE(cond) CHECK(!(cond), "expected false: %s", #cond)

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static size_t list_len(const wheel_list *l) {
  size_t n = 0;
  for (const wheel_node *p = l->head; p; p = p->next) n++;
  return n;
}

/* Checks that the list is well formed (prev/next/tail agree). */
static bool list_consistent(const wheel_list *l) {
  const wheel_node *prev = NULL;
  for (const wheel_node *p = l->head; p; p = p->next) {
    if (p->prev != prev) return false;
    prev = p;
  }
  return l->tail == prev;
}

static bool list_contains(const wheel_list *l, const wheel_node *n) {
  for (const wheel_node *p = l->head; p; p = p->next)
    if (p == n) return true;
  return false;
}

/* The wheel keeps where a node is linked, not its deadline: it asks the
 * owner (wheel_deadline_fn). A test node records the tick it was inserted
 * with; every node handed to wheel_insert is one, through insert_at. */
typedef struct test_node {
  wheel_node link;                /* first member: wheel_node* casts back */
  uint64_t deadline_tick;         /* the tick passed to wheel_insert */
} test_node;

static const test_node *test_node_of(const wheel_node *n) {
  return (const test_node *)(const void *)n;
}

/* The ctx every test wheel is opened with: the callback must get it back. */
static const char g_deadline_ctx[] = "test wheel";

/* The deadline a node (linked or fired) was inserted with. */
static uint64_t deadline_of_node(const wheel_node *n) {
  return test_node_of(n)->deadline_tick;
}

static uint64_t test_deadline(const wheel_node *n, const void *ctx) {
  CHECK(ctx == g_deadline_ctx, "deadline_of called with ctx %p", ctx);
  return deadline_of_node(n);
}

/* wheel_insert, recording the tick for test_deadline first. */
static bool insert_at(wheel *w, test_node *n, uint64_t tick) {
  n->deadline_tick = tick;
  return wheel_insert(w, &n->link, tick);
}

/* Where the placement rule puts a deadline, derived independently of
 * wheel.c: the lowest level whose current block (the ticks sharing every
 * bit above that level's slots with now_tick) holds it, and its slot there. */
static unsigned expected_level(const wheel *w, uint64_t deadline_tick) {
  for (unsigned l = 0;; l++) {
    unsigned span = w->size_bits + WHEEL_LEVEL_BITS * l;
    if (span >= 64 || (deadline_tick >> span) == (w->now_tick >> span)) return l;
  }
}

static uint64_t expected_slot(const wheel *w, unsigned level, uint64_t deadline_tick) {
  if (level == 0) return deadline_tick & (w->size - 1);
  unsigned shift = w->size_bits + WHEEL_LEVEL_BITS * (level - 1);
  return (deadline_tick >> shift) & ((UINT64_C(1) << WHEEL_LEVEL_BITS) - 1);
}

/* The node is linked where its deadline maps to, and that slot's list of
 * the wheel holds it. */
static bool placed_at(const wheel *w, const wheel_node *n, uint64_t deadline_tick) {
  unsigned level = expected_level(w, deadline_tick);
  uint64_t slot = expected_slot(w, level, deadline_tick);
  if (level >= w->levels || n->level != level || wheel_node_slot(w, n) != slot) return false;
  for (const wheel_node *p = w->heads[level][n->list]; p; p = p->next)
    if (p == n) return true;
  return false;
}

/* A wheel_predicate true for one node only (ctx). */
static bool is_node(const wheel_node *n, void *which) { return n == which; }

/* Expected number of levels: the smallest L covering all 64 tick bits. */
static unsigned expected_levels(unsigned size_bits) {
  unsigned levels = 1;
  while (size_bits + WHEEL_LEVEL_BITS * (levels - 1) < 64) levels++;
  return levels;
}

static unsigned log2u(uint32_t v) {
  unsigned b = 0;
  while ((UINT32_C(1) << b) < v) b++;
  return b;
}

/* Fresh wheel advanced to `start`; reports init failure as a check. */
static bool open_wheel(wheel *w, uint32_t size, uint64_t start) {
  if (wheel_init(w, size, test_deadline, g_deadline_ctx) != 0) {
    fail_at(__FILE__, __LINE__, "wheel_init(%" PRIu32 ") failed", size);
    return false;
  }
  if (start) {
    wheel_list due = {0};
    wheel_advance(w, start, &due);
  }
  return true;
}

/* ------------------------------------------------------------------------ */
/* init / round_size / free                                                 */
/* ------------------------------------------------------------------------ */

static void test_round_size(void) {
  CHECK_EQ(wheel_round_size(1), 1);
  CHECK_EQ(wheel_round_size(2), 2);
  CHECK_EQ(wheel_round_size(3), 4);
  CHECK_EQ(wheel_round_size(4), 4);
  CHECK_EQ(wheel_round_size(5), 8);
  CHECK_EQ(wheel_round_size(511), 512);
  CHECK_EQ(wheel_round_size(512), 512);
  CHECK_EQ(wheel_round_size(513), 1024);
  CHECK_EQ(wheel_round_size(1000), 1024);
  CHECK_EQ(wheel_round_size((UINT32_C(1) << 29) + 1), WHEEL_SIZE_MAX);
  CHECK_EQ(wheel_round_size(WHEEL_SIZE_MAX - 1), WHEEL_SIZE_MAX);
  CHECK_EQ(wheel_round_size(WHEEL_SIZE_MAX), WHEEL_SIZE_MAX);
}

static void test_init_sizes(void) {
  static const struct {
    uint32_t request, size;
    unsigned bits, levels;
  } cases[] = {
      {1, 1, 0, 12},   {2, 2, 1, 12},     {3, 4, 2, 12},
      {512, 512, 9, 11}, {1000, 1024, 10, 10},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    wheel w;
    int rc = wheel_init(&w, cases[i].request, test_deadline, g_deadline_ctx);
    CHECK(rc == 0, "wheel_init(%" PRIu32 ") returned %d", cases[i].request, rc);
    if (rc != 0) continue;
    CHECK_EQ(w.size, cases[i].size);
    CHECK_EQ(w.size_bits, cases[i].bits);
    CHECK_EQ(w.levels, cases[i].levels);
    CHECK_EQ(w.levels, expected_levels(w.size_bits));
    CHECK(w.levels <= WHEEL_LEVELS_MAX, "levels %u > WHEEL_LEVELS_MAX", w.levels);
    /* the levels cover all 64 bits of a tick, and no level is superfluous */
    CHECK(w.size_bits + WHEEL_LEVEL_BITS * (w.levels - 1) >= 64,
          "size %" PRIu32 ": levels %u do not cover 64 bits", w.size, w.levels);
    CHECK(w.size_bits + WHEEL_LEVEL_BITS * (w.levels - 2) < 64,
          "size %" PRIu32 ": levels %u: one too many", w.size, w.levels);
    CHECK_EQ(w.now_tick, 0);
    CHECK_EQ(w.count, 0);
    CHECK(w.deadline_of == test_deadline && w.deadline_ctx == g_deadline_ctx,
          "size %" PRIu32 ": deadline callback not kept", w.size);
    for (unsigned l = 0; l < w.levels; l++) {
      CHECK(w.heads[l] != NULL, "size %" PRIu32 ": heads[%u] NULL", w.size, l);
      CHECK(w.occupied[l] != NULL, "size %" PRIu32 ": occupied[%u] NULL",
            w.size, l);
    }
    uint64_t t = 0;
    CHECK_FALSE(wheel_next_event(&w, &t));
    wheel_free(&w);
  }
}

static void test_init_levels_all_sizes(void) {
  for (unsigned bits = 0; bits <= 20; bits++) {
    wheel w;
    uint32_t size = UINT32_C(1) << bits;
    if (wheel_init(&w, size, test_deadline, g_deadline_ctx) != 0) {
      fail_at(__FILE__, __LINE__, "wheel_init(%" PRIu32 ") failed", size);
      continue;
    }
    CHECK_EQ(w.size, size);
    CHECK_EQ(w.size_bits, bits);
    CHECK_EQ(w.levels, expected_levels(bits));
    wheel_free(&w);
    /* a non-power of two rounds up */
    if (bits >= 2) {
      if (wheel_init(&w, size - 1, test_deadline, g_deadline_ctx) != 0) {
        fail_at(__FILE__, __LINE__, "wheel_init(%" PRIu32 ") failed", size - 1);
        continue;
      }
      CHECK_EQ(w.size, size);
      CHECK_EQ(w.size_bits, bits);
      wheel_free(&w);
    }
  }
}

static void test_free(void) {
  wheel w;
  if (!open_wheel(&w, 64, 0)) return;
  test_node n[3];
  CHECK_TRUE(insert_at(&w, &n[0], 5));
  CHECK_TRUE(insert_at(&w, &n[1], 500));
  CHECK_TRUE(insert_at(&w, &n[2], UINT64_C(1) << 40));
  wheel_free(&w);
  CHECK_EQ(w.count, 0);
  for (unsigned l = 0; l < WHEEL_LEVELS_MAX; l++) {
    CHECK(w.heads[l] == NULL, "heads[%u] not NULL after free", l);
    CHECK(w.next_lane[l] == NULL, "next_lane[%u] not NULL after free", l);
    CHECK(w.occupied[l] == NULL, "occupied[%u] not NULL after free", l);
  }
  wheel_free(&w);                                 /* twice is harmless */
  CHECK_EQ(w.count, 0);
  /* the struct can be initialised again after free */
  if (!open_wheel(&w, 8, 0)) return;
  CHECK_TRUE(insert_at(&w, &n[0], 3));
  CHECK_EQ(w.count, 1);
  wheel_free(&w);
}

/* ------------------------------------------------------------------------ */
/* insert                                                                   */
/* ------------------------------------------------------------------------ */

static void test_insert_not_future(void) {
  wheel w;
  if (!open_wheel(&w, 16, 0)) return;
  test_node n;
  memset(&n, 0, sizeof n);
  uint64_t t;
  CHECK_FALSE(insert_at(&w, &n, 0));              /* deadline == now == 0 */
  CHECK_EQ(w.count, 0);
  CHECK_FALSE(wheel_next_event(&w, &t));

  wheel_list due = {0};
  wheel_advance(&w, 1000, &due);
  CHECK_EQ(w.now_tick, 1000);
  CHECK_FALSE(insert_at(&w, &n, 0));
  CHECK_FALSE(insert_at(&w, &n, 999));
  CHECK_FALSE(insert_at(&w, &n, 1000));            /* == now */
  CHECK_EQ(w.count, 0);
  CHECK_FALSE(wheel_next_event(&w, &t));
  wheel_advance(&w, UINT64_MAX, &due);             /* nothing was linked */
  CHECK(due.head == NULL, "a node refused by insert fired");
  wheel_free(&w);
}

static void test_insert_future_and_count(void) {
  wheel w;
  if (!open_wheel(&w, 16, 7)) return;
  test_node n[8];
  const uint64_t d[8] = {8, 9, 22, 23, 7 + 16 * 64, 7 + 16 * 64 * 64,
                         UINT64_C(1) << 50, UINT64_MAX};
  for (size_t i = 0; i < 8; i++) {
    CHECK(insert_at(&w, &n[i], d[i]), "insert deadline %" PRIu64
          " at now 7 returned false", d[i]);
    CHECK_EQ(w.count, i + 1);
    /* the wheel keeps where the deadline maps to, not the deadline */
    CHECK(placed_at(&w, &n[i].link, d[i]), "deadline %" PRIu64 ": linked at "
          "level %u slot %" PRIu32 ", expected level %u slot %" PRIu64, d[i],
          (unsigned)n[i].link.level, wheel_node_slot(&w, &n[i].link), expected_level(&w, d[i]),
          expected_slot(&w, expected_level(&w, d[i]), d[i]));
  }
  uint64_t t = 0;
  CHECK_TRUE(wheel_next_event(&w, &t));
  CHECK_EQ(t, 8);
  /* and gets each node's deadline back from the owner */
  for (size_t i = 0; i < 8; i++) {
    t = 0;
    CHECK(wheel_first_deadline(&w, is_node, &n[i].link, &t) && t == d[i],
          "first_deadline of the node inserted at %" PRIu64 ": %" PRIu64, d[i], t);
  }
  wheel_free(&w);
}

/* Placement rule: the lowest level whose current block holds the deadline. */
static void test_insert_level_placement(void) {
  wheel w;
  if (!open_wheel(&w, 8, 0)) return;               /* size_bits = 3 */
  test_node n[12];
  CHECK_TRUE(insert_at(&w, &n[0], 7));
  CHECK_EQ(n[0].link.level, 0);
  for (unsigned l = 1; l < w.levels; l++) {
    unsigned bit = w.size_bits + WHEEL_LEVEL_BITS * (l - 1);
    CHECK_TRUE(insert_at(&w, &n[l], UINT64_C(1) << bit));
    CHECK(n[l].link.level == l, "deadline 2^%u: level %u, expected %u", bit,
          (unsigned)n[l].link.level, l);
  }
  CHECK_EQ(w.count, w.levels);
  wheel_free(&w);
}

/* ------------------------------------------------------------------------ */
/* advance: boundaries                                                      */
/* ------------------------------------------------------------------------ */

/* Inserts one node at start+delta, checks it does not fire at deadline-1 and
 * fires (alone) at the deadline. Returns nothing; reports through checks. */
static void fire_exactly_at(uint32_t size, uint64_t start, uint64_t delta,
                            int line) {
  wheel w;
  if (!open_wheel(&w, size, start)) return;
  uint64_t deadline = start + delta;
  test_node n, other;
  wheel_list due = {0};
  if (!insert_at(&w, &n, deadline)) {
    fail_at(__FILE__, line, "size %" PRIu32 " start %" PRIu64 " delta %" PRIu64
            ": insert returned false", size, start, delta);
    wheel_free(&w);
    return;
  }
  /* a later node that must stay put */
  bool have_other = deadline < UINT64_MAX && insert_at(&w, &other, deadline + 1);
  uint64_t ev = 0;
  if (!wheel_next_event(&w, &ev) || ev <= start || ev > deadline)
    fail_at(__FILE__, line, "size %" PRIu32 " deadline %" PRIu64
            ": next_event %" PRIu64 " not in (now, deadline]", size, deadline, ev);
  wheel_advance(&w, deadline - 1, &due);
  if (due.head || w.now_tick != deadline - 1)
    fail_at(__FILE__, line, "size %" PRIu32 " start %" PRIu64 " delta %" PRIu64
            ": advance to deadline-1: %zu due, now %" PRIu64, size, start, delta,
            list_len(&due), w.now_tick);
  wheel_advance(&w, deadline, &due);
  if (due.head != &n.link || due.tail != &n.link || w.now_tick != deadline)
    fail_at(__FILE__, line, "size %" PRIu32 " start %" PRIu64 " delta %" PRIu64
            ": advance to deadline: %zu due (want exactly the node), now %" PRIu64,
            size, start, delta, list_len(&due), w.now_tick);
  if (w.count != (have_other ? 1u : 0u))
    fail_at(__FILE__, line, "size %" PRIu32 " delta %" PRIu64 ": count %zu after fire",
            size, delta, w.count);
  if (have_other) {
    wheel_list due2 = {0};
    wheel_advance(&w, deadline + 1, &due2);
    if (due2.head != &other.link || due2.tail != &other.link)
      fail_at(__FILE__, line, "size %" PRIu32 " delta %" PRIu64
              ": node at deadline+1 did not fire alone at deadline+1", size, delta);
  }
  wheel_free(&w);

  /* the same deadline reached in one jump past it */
  if (!open_wheel(&w, size, start)) return;
  due = (wheel_list){0};
  if (insert_at(&w, &n, deadline)) {
    uint64_t to = deadline + (deadline < UINT64_MAX - 1000 ? 1000 : 0);
    wheel_advance(&w, to, &due);
    if (due.head != &n.link || due.tail != &n.link || w.now_tick != to || w.count != 0)
      fail_at(__FILE__, line, "size %" PRIu32 " delta %" PRIu64
              ": jump past deadline did not fire it", size, delta);
  }
  wheel_free(&w);
}

static void test_advance_boundaries(void) {
  static const uint32_t sizes[] = {1, 2, 8, 64, 512, 1000};
  static const uint64_t starts[] = {0, 1, 12345, (UINT64_C(1) << 33) - 3};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    uint64_t s = wheel_round_size(sizes[si]);
    const uint64_t deltas[] = {
        1,        2,         s - 1 ? s - 1 : 1, s,          s + 1,
        s * 64 - 1, s * 64,    s * 64 + 1,        s * 64 * 64 - 1,
        s * 64 * 64, s * 64 * 64 + 1, s * 64 * 64 * 64 + 7,
        UINT64_C(1) << 40, (UINT64_C(1) << 40) + 1,
    };
    for (size_t st = 0; st < sizeof starts / sizeof starts[0]; st++)
      for (size_t di = 0; di < sizeof deltas / sizeof deltas[0]; di++)
        fire_exactly_at(sizes[si], starts[st], deltas[di], __LINE__);
    /* deadlines exactly on each level's block boundary relative to start */
    for (size_t st = 0; st < sizeof starts / sizeof starts[0]; st++) {
      uint64_t start = starts[st];
      for (unsigned k = log2u((uint32_t)s); k < 64; k += WHEEL_LEVEL_BITS) {
        uint64_t boundary = ((start >> k) + 1) << k;
        if (boundary == 0) continue;               /* wrapped */
        for (int off = -1; off <= 1; off++) {
          uint64_t d = boundary + (uint64_t)(int64_t)off;
          if (d > start) fire_exactly_at(sizes[si], start, d - start, __LINE__);
        }
      }
    }
  }
}

static void test_advance_huge_deadlines(void) {
  static const uint32_t sizes[] = {1, 8, 512, 1024, 4096};
  const uint64_t deadlines[] = {UINT64_MAX / 2, UINT64_C(1) << 62,
                                (UINT64_C(1) << 62) + 1, UINT64_C(1) << 63,
                                UINT64_MAX - 1, UINT64_MAX};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    for (size_t di = 0; di < sizeof deadlines / sizeof deadlines[0]; di++) {
      uint64_t d = deadlines[di];
      fire_exactly_at(sizes[si], 0, d, __LINE__);
      fire_exactly_at(sizes[si], 1000, d - 1000, __LINE__);

      /* straight jump from 0: never fires before its tick */
      wheel w;
      if (!open_wheel(&w, sizes[si], 0)) continue;
      test_node n;
      wheel_list due = {0};
      CHECK_TRUE(insert_at(&w, &n, d));
      wheel_advance(&w, d / 2, &due);
      CHECK(due.head == NULL, "size %" PRIu32 ": deadline %" PRIu64
            " fired at %" PRIu64, sizes[si], d, d / 2);
      wheel_advance(&w, d - 1, &due);
      CHECK(due.head == NULL, "size %" PRIu32 ": deadline %" PRIu64
            " fired at deadline-1", sizes[si], d);
      CHECK_EQ(w.count, 1);
      wheel_advance(&w, d, &due);
      CHECK(due.head == &n.link && due.tail == &n.link, "size %" PRIu32
            ": deadline %" PRIu64 " did not fire at its tick", sizes[si], d);
      CHECK_EQ(w.count, 0);
      CHECK_EQ(w.now_tick, d);
      wheel_free(&w);
    }
  }
}

static void test_advance_sets_now(void) {
  wheel w;
  if (!open_wheel(&w, 32, 0)) return;
  wheel_list due = {0};
  wheel_advance(&w, 0, &due);
  CHECK_EQ(w.now_tick, 0);
  wheel_advance(&w, 5, &due);
  CHECK_EQ(w.now_tick, 5);
  wheel_advance(&w, 5, &due);                       /* same tick */
  CHECK_EQ(w.now_tick, 5);
  test_node n;
  CHECK_TRUE(insert_at(&w, &n, 100));
  wheel_advance(&w, 99, &due);
  CHECK_EQ(w.now_tick, 99);
  wheel_advance(&w, 1000000, &due);
  CHECK_EQ(w.now_tick, 1000000);
  CHECK(due.head == &n.link, "node did not fire");
  wheel_advance(&w, UINT64_C(1) << 61, &due);
  CHECK_EQ(w.now_tick, UINT64_C(1) << 61);
  wheel_advance(&w, UINT64_MAX, &due);
  CHECK_EQ(w.now_tick, UINT64_MAX);
  CHECK_EQ(list_len(&due), 1);
  wheel_free(&w);
}

/* advance appends to a non-empty due list and keeps what was there. */
static void test_advance_appends_to_due(void) {
  wheel w;
  if (!open_wheel(&w, 8, 0)) return;
  wheel_node pre;                                 /* only ever in a list */
  test_node a, b;
  wheel_list due = {0};
  wheel_list_push_back(&due, &pre);
  CHECK_TRUE(insert_at(&w, &a, 3));
  CHECK_TRUE(insert_at(&w, &b, 300));
  wheel_advance(&w, 1000, &due);
  CHECK(due.head == &pre, "pre-existing head lost");
  CHECK(pre.next == &a.link && a.link.next == &b.link && b.link.next == NULL &&
        due.tail == &b.link,
        "due list not [pre, a, b]");
  CHECK_TRUE(list_consistent(&due));
  wheel_free(&w);
}

/* advance_event takes one event at a time: a cascade alone moves time and
 * appends nothing; past the last event it is false and leaves time alone. */
static void test_advance_event_one_at_a_time(void) {
  wheel w;
  if (!open_wheel(&w, 8, 0)) return;
  test_node a, b, c;
  CHECK_TRUE(insert_at(&w, &a, 3));
  CHECK_TRUE(insert_at(&w, &b, 3));
  CHECK_TRUE(insert_at(&w, &c, 20));               /* level 1: moved down at 16 */
  wheel_list due = {0};
  CHECK_TRUE(wheel_advance_event(&w, 100, &due));
  CHECK_EQ(w.now_tick, 3);
  CHECK_EQ(list_len(&due), 2);
  CHECK_TRUE(wheel_advance_event(&w, 100, &due));  /* the cascade */
  CHECK_EQ(w.now_tick, 16);
  CHECK_EQ(list_len(&due), 2);
  CHECK(!wheel_advance_event(&w, 19, &due), "an event after to_tick was taken");
  CHECK_EQ(w.now_tick, 16);
  CHECK_TRUE(wheel_advance_event(&w, 20, &due));
  CHECK_EQ(w.now_tick, 20);
  CHECK(due.tail == &c.link && list_len(&due) == 3, "c not appended last");
  CHECK(!wheel_advance_event(&w, 1000, &due), "an empty wheel has an event");
  CHECK_EQ(w.now_tick, 20);
  wheel_free(&w);
}

/* ------------------------------------------------------------------------ */
/* remove                                                                   */
/* ------------------------------------------------------------------------ */

static void test_remove_each_level(void) {
  static const uint32_t sizes[] = {1, 8, 512};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    for (int parity = 0; parity < 2; parity++) {
      wheel w;
      if (!open_wheel(&w, sizes[si], 0)) continue;
      test_node n[WHEEL_LEVELS_MAX + 1];
      uint64_t d[WHEEL_LEVELS_MAX + 1];
      unsigned levels = w.levels, first = w.size > 1 ? 0 : 1;
      for (unsigned l = first; l < levels; l++) {
        d[l] = l == 0 ? w.size - 1
                      : (UINT64_C(1) << (w.size_bits + WHEEL_LEVEL_BITS * (l - 1))) + 3;
        CHECK_TRUE(insert_at(&w, &n[l], d[l]));
        CHECK(n[l].link.level == l, "size %" PRIu32 ": node %u at level %u",
              w.size, l, (unsigned)n[l].link.level);
      }
      size_t count = w.count;
      /* remove every other level */
      for (unsigned l = first; l < levels; l++) {
        if ((l & 1u) != (unsigned)parity) continue;
        wheel_remove(&w, &n[l].link);
        count--;
        CHECK_EQ(w.count, count);
        uint64_t t;
        if (count) {
          CHECK_TRUE(wheel_next_event(&w, &t));
          CHECK(t > w.now_tick, "next_event %" PRIu64 " <= now", t);
        } else {
          CHECK_FALSE(wheel_next_event(&w, &t));
        }
      }
      wheel_list due = {0};
      wheel_advance(&w, UINT64_MAX, &due);
      CHECK_EQ(list_len(&due), count);
      CHECK_EQ(w.count, 0);
      for (unsigned l = first; l < levels; l++) {
        bool removed = (l & 1u) == (unsigned)parity;
        CHECK(list_contains(&due, &n[l].link) == !removed,
              "size %" PRIu32 " level %u: %s", w.size, l,
              removed ? "removed node fired" : "live node did not fire");
      }
      wheel_free(&w);
    }
  }
}

/* A node that was cascaded down a level can still be removed. */
static void test_remove_after_cascade(void) {
  static const uint32_t sizes[] = {1, 8, 512};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    wheel w;
    if (!open_wheel(&w, sizes[si], 0)) continue;
    uint64_t s = w.size;
    uint64_t d = s * 64 * 64 + s * 5 + 3;           /* level 2 at tick 0 */
    test_node n, keep;
    wheel_list due = {0};
    CHECK_TRUE(insert_at(&w, &n, d));
    CHECK_TRUE(insert_at(&w, &keep, d + 1));
    unsigned level0 = n.link.level;
    /* walk events until the node has moved down at least once */
    uint64_t t;
    for (int guard = 0; guard < 100 && n.link.level == level0; guard++) {
      if (!wheel_next_event(&w, &t)) break;
      wheel_advance(&w, t, &due);
    }
    CHECK(n.link.level < level0, "size %" PRIu32 ": node never cascaded", w.size);
    CHECK(due.head == NULL, "fired early");
    wheel_remove(&w, &n.link);
    CHECK_EQ(w.count, 1);
    wheel_advance(&w, UINT64_MAX, &due);
    CHECK(due.head == &keep.link && due.tail == &keep.link,
          "size %" PRIu32 ": removed cascaded node fired, or keep did not", w.size);
    wheel_free(&w);
  }
}

/* Head / middle / tail removal within one slot's list. */
static void test_remove_within_slot(void) {
  for (int victim = 0; victim < 3; victim++) {
    wheel w;
    if (!open_wheel(&w, 16, 0)) continue;
    test_node n[3];
    for (int i = 0; i < 3; i++) CHECK_TRUE(insert_at(&w, &n[i], 10));
    wheel_remove(&w, &n[victim].link);
    CHECK_EQ(w.count, 2);
    uint64_t t = 0;
    CHECK_TRUE(wheel_next_event(&w, &t));
    CHECK_EQ(t, 10);
    wheel_list due = {0};
    wheel_advance(&w, 10, &due);
    CHECK_EQ(list_len(&due), 2);
    CHECK_TRUE(list_consistent(&due));
    for (int i = 0; i < 3; i++)
      CHECK(list_contains(&due, &n[i].link) == (i != victim),
            "victim %d: node %d wrong", victim, i);
    wheel_free(&w);
  }
}

static bool is_even_node(const wheel_node *n, void *base) {
  return (test_node_of(n) - (const test_node *)base) % 2 == 0;
}

/* wheel_extract takes exactly the chosen nodes from every level; the rest
 * stay and still fall due at their ticks. */
static void test_extract(void) {
  enum { NODES = 200 };
  wheel w;
  if (!open_wheel(&w, 8, 0)) return;
  test_node n[NODES];
  for (int i = 0; i < NODES; i++)
    CHECK_TRUE(insert_at(&w, &n[i], 1 + (uint64_t)i * 37 % 5000));
  wheel_list taken = {0};
  wheel_extract(&w, is_even_node, n, &taken);
  CHECK_EQ(list_len(&taken), NODES / 2);
  CHECK_TRUE(list_consistent(&taken));
  CHECK_EQ(w.count, NODES / 2);
  wheel_list due = {0};
  wheel_advance(&w, 5000, &due);
  CHECK_EQ(list_len(&due), NODES / 2);
  for (int i = 0; i < NODES; i++)
    CHECK(list_contains(i % 2 ? &due : &taken, &n[i].link),
          "node %d in the wrong list", i);
  CHECK_TRUE(!wheel_next_event(&w, &(uint64_t){0}));
  wheel_free(&w);
}

static void test_remove_only_node_of_slot(void) {
  static const uint32_t sizes[] = {1, 8, 512};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    wheel w;
    if (!open_wheel(&w, sizes[si], 100)) continue;
    uint64_t s = w.size;
    test_node a, b, c;
    uint64_t t = 0;
    /* a alone in an early slot, b and c later */
    CHECK_TRUE(insert_at(&w, &a, 101));
    CHECK_TRUE(insert_at(&w, &b, 100 + s * 70));
    CHECK_TRUE(insert_at(&w, &c, 100 + s * 64 * 64 * 3));
    CHECK_TRUE(wheel_next_event(&w, &t));
    CHECK(t <= 101, "next_event %" PRIu64 " after earliest deadline 101", t);
    wheel_remove(&w, &a.link);
    CHECK_TRUE(wheel_next_event(&w, &t));
    CHECK(t > 101 && t <= 100 + s * 70,
          "size %" PRIu32 ": after removing the only node of the first slot, "
          "next_event %" PRIu64 " not in (101, %" PRIu64 "]", w.size, t, 100 + s * 70);
    /* advancing to the reported tick fires nothing yet (a is gone) */
    wheel_list due = {0};
    uint64_t t_b = t;
    wheel_remove(&w, &b.link);
    CHECK_TRUE(wheel_next_event(&w, &t));
    CHECK(t > t_b, "size %" PRIu32 ": next_event %" PRIu64
          " still points at b's emptied slot %" PRIu64, w.size, t, t_b);
    CHECK(t <= 100 + s * 64 * 64 * 3, "next_event past c");
    wheel_remove(&w, &c.link);
    CHECK_EQ(w.count, 0);
    CHECK_FALSE(wheel_next_event(&w, &t));
    wheel_advance(&w, UINT64_MAX, &due);
    CHECK(due.head == NULL, "removed nodes fired");
    /* now is UINT64_MAX: no deadline is in the future any more */
    CHECK_FALSE(insert_at(&w, &a, UINT64_MAX));
    CHECK_EQ(w.count, 0);
    wheel_free(&w);

    /* same slot reused after remove: insert, remove, insert again */
    if (!open_wheel(&w, sizes[si], 0)) continue;
    CHECK_TRUE(insert_at(&w, &a, 7 + s));
    wheel_remove(&w, &a.link);
    CHECK_FALSE(wheel_next_event(&w, &t));
    CHECK_TRUE(insert_at(&w, &a, 7 + s));
    CHECK_TRUE(wheel_next_event(&w, &t));
    due = (wheel_list){0};
    wheel_advance(&w, 7 + s, &due);
    CHECK(due.head == &a.link && due.tail == &a.link, "re-inserted node did not fire");
    wheel_free(&w);
  }
}

/* ------------------------------------------------------------------------ */
/* next_event                                                               */
/* ------------------------------------------------------------------------ */

static void test_next_event_empty(void) {
  wheel w;
  if (!open_wheel(&w, 64, 0)) return;
  uint64_t t = 12345;
  CHECK_FALSE(wheel_next_event(&w, &t));
  test_node n;
  CHECK_TRUE(insert_at(&w, &n, 3));
  wheel_list due = {0};
  wheel_advance(&w, 3, &due);
  CHECK_FALSE(wheel_next_event(&w, &t));            /* empty again */
  wheel_free(&w);
}

/* Below `bound` (bound > 0). Modulo bias is irrelevant here. */
static uint64_t rnd_below(uint64_t *state, uint64_t bound) {
  return splitmix64(state) % bound;
}

/* Walks event by event: next_event > now; advancing to event-1 yields
 * nothing; advancing to the event yields due nodes or moves nodes down. */
static void test_next_event_contract(void) {
  static const uint32_t sizes[] = {1, 8, 512};
  enum { N = 200 };
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    wheel w;
    if (!open_wheel(&w, sizes[si], 77)) continue;
    static test_node n[N];
    bool linked[N];
    uint64_t rng = 42 + si;
    uint64_t spans[] = {w.size, (uint64_t)w.size * 64, (uint64_t)w.size * 4096,
                        UINT64_C(1) << 30};
    for (int i = 0; i < N; i++) {
      uint64_t d = w.now_tick + 1 + rnd_below(&rng, spans[i % 4]);
      linked[i] = insert_at(&w, &n[i], d);
      CHECK_TRUE(linked[i]);
    }
    int fired = 0, steps = 0;
    uint64_t t;
    while (wheel_next_event(&w, &t)) {
      if (++steps > 100000) {
        fail_at(__FILE__, __LINE__, "size %" PRIu32 ": too many events", w.size);
        break;
      }
      uint64_t now = w.now_tick;
      size_t count = w.count;
      unsigned long failed_before = g_checks_failed;
      if (t <= now) {
        fail_at(__FILE__, __LINE__, "size %" PRIu32 ": next_event %" PRIu64
                " <= now %" PRIu64, w.size, t, now);
        break;
      }
      uint64_t min_deadline = UINT64_MAX, level_sum = 0;
      for (int i = 0; i < N; i++)
        if (linked[i]) {
          if (n[i].deadline_tick < min_deadline) min_deadline = n[i].deadline_tick;
          level_sum += n[i].link.level;
        }
      CHECK(t <= min_deadline, "size %" PRIu32 ": next_event %" PRIu64
            " after earliest deadline %" PRIu64, w.size, t, min_deadline);
      wheel_list due = {0};
      wheel_advance(&w, t - 1, &due);
      CHECK(due.head == NULL, "size %" PRIu32 ": advance to next_event-1 = %"
            PRIu64 " fired %zu nodes", w.size, t - 1, list_len(&due));
      CHECK_EQ(w.count, count);
      uint64_t t2;
      CHECK(wheel_next_event(&w, &t2) && t2 == t, "size %" PRIu32
            ": next_event moved from %" PRIu64 " after advancing to it minus 1",
            w.size, t);
      wheel_advance(&w, t, &due);
      CHECK_EQ(w.now_tick, t);
      size_t got = list_len(&due);
      for (wheel_node *p = due.head; p; p = p->next) {
        int i = (int)(test_node_of(p) - n);
        CHECK(deadline_of_node(p) == t, "fired deadline %" PRIu64 " at %" PRIu64,
              deadline_of_node(p), t);
        if (i >= 0 && i < N) linked[i] = false;
      }
      fired += (int)got;
      CHECK_EQ(w.count, count - got);
      if (got == 0) {
        uint64_t after = 0;
        for (int i = 0; i < N; i++)
          if (linked[i]) after += n[i].link.level;
        CHECK(after < level_sum, "size %" PRIu32 ": event at %" PRIu64
              " fired nothing and moved nothing down", w.size, t);
      }
      if (g_checks_failed != failed_before) break;   /* one event's worth */
    }
    if (!g_case_failed) {
      CHECK_EQ(fired, N);
      CHECK_EQ(w.count, 0);
    }
    wheel_free(&w);
  }
}

/* ------------------------------------------------------------------------ */
/* due order / size 1                                                       */
/* ------------------------------------------------------------------------ */

static void test_due_order(void) {
  static const uint32_t sizes[] = {1, 8, 512, 4096};
  enum { N = 5000 };
  static test_node n[N];
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    wheel w;
    if (!open_wheel(&w, sizes[si], 3)) continue;
    uint64_t rng = 1000 + si, maxd = 0;
    for (int i = 0; i < N; i++) {
      uint64_t span = (i % 3 == 0) ? 50 : (i % 3 == 1) ? 100000 : UINT64_C(1) << 36;
      uint64_t d = 4 + rnd_below(&rng, span);
      CHECK_TRUE(insert_at(&w, &n[i], d));
      if (d > maxd) maxd = d;
    }
    wheel_list due = {0};
    wheel_advance(&w, maxd, &due);
    CHECK_EQ(list_len(&due), N);
    CHECK_TRUE(list_consistent(&due));
    CHECK_EQ(w.count, 0);
    uint64_t last = 0;
    for (wheel_node *p = due.head; p; p = p->next) {
      if (deadline_of_node(p) < last) {
        fail_at(__FILE__, __LINE__, "size %" PRIu32 ": due order %" PRIu64
                " after %" PRIu64, w.size, deadline_of_node(p), last);
        break;
      }
      last = deadline_of_node(p);
    }
    wheel_free(&w);
  }
}

static void test_size_one(void) {
  wheel w;
  if (!open_wheel(&w, 1, 0)) return;
  CHECK_EQ(w.size, 1);
  CHECK_EQ(w.size_bits, 0);
  test_node n[6];
  const uint64_t d[6] = {1, 2, 63, 64, 65, 4097};
  for (int i = 0; i < 6; i++) {
    CHECK_TRUE(insert_at(&w, &n[i], d[i]));
    CHECK(n[i].link.level >= 1, "size 1: node at level 0");
  }
  wheel_list due = {0};
  for (uint64_t tick = 1; tick <= 5000; tick++) {
    size_t before = list_len(&due);
    wheel_advance(&w, tick, &due);
    size_t expect = 0;
    for (int i = 0; i < 6; i++) expect += d[i] == tick;
    if (list_len(&due) - before != expect) {
      fail_at(__FILE__, __LINE__, "size 1: tick %" PRIu64 ": %zu fired, "
              "expected %zu", tick, list_len(&due) - before, expect);
      break;                                        /* report the first */
    }
  }
  CHECK_EQ(w.count, 0);
  CHECK_EQ(list_len(&due), 6);
  uint64_t t;
  CHECK_FALSE(wheel_next_event(&w, &t));
  wheel_free(&w);
}

/* ------------------------------------------------------------------------ */
/* wheel_list helpers (static inline in wheel.h)                            */
/* ------------------------------------------------------------------------ */

static void test_list_helpers(void) {
  wheel_node a, b, c, d;
  wheel_list l = {0};
  CHECK(wheel_list_pop_front(&l) == NULL, "pop_front of empty list");
  wheel_list_insert_after(&l, NULL, &b);           /* into empty list */
  CHECK(l.head == &b && l.tail == &b, "insert_after(NULL) into empty list");
  wheel_list_insert_after(&l, NULL, &a);           /* at the front */
  wheel_list_push_back(&l, &d);
  wheel_list_insert_after(&l, &b, &c);             /* in the middle */
  CHECK(l.head == &a && a.next == &b && b.next == &c && c.next == &d &&
        d.next == NULL && l.tail == &d, "list not [a, b, c, d]");
  CHECK_TRUE(list_consistent(&l));
  wheel_list_remove(&l, &c);                       /* middle */
  CHECK(b.next == &d && d.prev == &b, "remove middle");
  CHECK(c.next == NULL && c.prev == NULL, "removed node links not cleared");
  wheel_list_remove(&l, &d);                       /* tail */
  CHECK(l.tail == &b && b.next == NULL, "remove tail");
  wheel_list_insert_after(&l, &b, &d);             /* after the tail */
  CHECK(l.tail == &d && b.next == &d, "insert_after tail");
  CHECK_TRUE(list_consistent(&l));
  CHECK(wheel_list_pop_front(&l) == &a && l.head == &b && b.prev == NULL,
        "pop_front");
  CHECK(wheel_list_pop_front(&l) == &b, "pop_front 2");
  CHECK(wheel_list_pop_front(&l) == &d, "pop_front 3");
  CHECK(l.head == NULL && l.tail == NULL, "list not empty after pops");
  CHECK(wheel_list_pop_front(&l) == NULL, "pop_front of emptied list");
}

/* ------------------------------------------------------------------------ */
/* Randomized differential test against a reference model                   */
/* ------------------------------------------------------------------------ */

enum { POOL = 100000, OPS_PER_SIZE = 250000 };

typedef struct tnode {
  test_node node;                 /* first member: wheel_node* casts back */
  uint64_t deadline;              /* reference deadline while live */
  uint32_t live_pos;              /* index in live[] while live */
  bool live;
} tnode;

static tnode g_pool[POOL];
static uint32_t g_free[POOL], g_free_n;
static uint32_t g_live[POOL], g_live_n;
static uint32_t g_exp[POOL], g_got[POOL];

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static void live_add(uint32_t id, uint64_t deadline) {
  g_pool[id].live = true;
  g_pool[id].deadline = deadline;
  g_pool[id].live_pos = g_live_n;
  g_live[g_live_n++] = id;
}

static void live_del(uint32_t id) {
  uint32_t pos = g_pool[id].live_pos, last = g_live[--g_live_n];
  g_live[pos] = last;
  g_pool[last].live_pos = pos;
  g_pool[id].live = false;
  g_free[g_free_n++] = id;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* A deadline relative to now over several magnitudes and exact boundaries;
 * may be <= now (then insert must refuse it). */
static uint64_t random_deadline(const wheel *w, uint64_t *rng) {
  uint64_t now = w->now_tick, s = w->size;
  unsigned kind = (unsigned)rnd_below(rng, 20);
  switch (kind) {
    case 0: return now;                                       /* refused */
    case 1: return now ? now - rnd_below(rng, now < 100 ? now : 100) : 0;
    case 2: return now + 1;
    case 3: case 4: return sat_add(now, rnd_below(rng, s + 1));
    case 5: case 6: return sat_add(now, rnd_below(rng, s * 64 + 1));
    case 7: case 8: return sat_add(now, rnd_below(rng, s * 64 * 64 + 1));
    case 9: return sat_add(now, rnd_below(rng, (UINT64_C(1) << 40) + 1));
    case 10: return sat_add(now, rnd_below(rng, 16));
    case 11: return sat_add(now, rnd_below(rng, (UINT64_C(1) << 62)));
    case 12: case 13: case 14: {              /* exact level boundary +-1 */
      unsigned k = w->size_bits +
                   WHEEL_LEVEL_BITS * (unsigned)rnd_below(rng, w->levels);
      if (k >= 64) return sat_add(now, 1);
      /* one of the next few block boundaries of that level */
      uint64_t m = rnd_below(rng, 3) + 1;
      if ((now >> k) + m > (UINT64_MAX >> k)) return UINT64_MAX;
      uint64_t boundary = ((now >> k) + m) << k;
      int off = (int)rnd_below(rng, 3) - 1;
      return boundary + (uint64_t)(int64_t)off;
    }
    case 15: {                                 /* same tick as a live node */
      if (g_live_n == 0) return now + 1;
      return g_pool[g_live[rnd_below(rng, g_live_n)]].deadline;
    }
    default: return sat_add(now, 1 + rnd_below(rng, s * 4));
  }
}

static uint64_t random_advance_to(const wheel *w, uint64_t *rng) {
  uint64_t now = w->now_tick, s = w->size, t;
  unsigned kind = (unsigned)rnd_below(rng, 100);
  if (kind < 10) return now;                                  /* 0 */
  if (kind < 25) return sat_add(now, 1);
  if (kind < 45) return sat_add(now, rnd_below(rng, 16));
  if (kind < 60) return sat_add(now, rnd_below(rng, s * 4 + 1));
  if (kind < 70) return sat_add(now, rnd_below(rng, s * 64 * 3 + 1));
  if (kind < 75) return sat_add(now, rnd_below(rng, s * 64 * 64 * 2 + 1));
  /* exact targets, unless far away: time must not run to the end of the
   * tick range, or the rest of the run would test nothing */
  if (kind < 85) {                          /* exactly to next_event (-1) */
    if (!wheel_next_event(w, &t) || t - now > (UINT64_C(1) << 50))
      return sat_add(now, 1);
    return t - rnd_below(rng, 2);
  }
  if (kind < 90 && g_live_n) {           /* exactly to a live deadline (-1) */
    t = g_pool[g_live[rnd_below(rng, g_live_n)]].deadline;
    if (t - now > (UINT64_C(1) << 50)) return sat_add(now, 2);
    return t - rnd_below(rng, 2);
  }
  if (kind < 99) return sat_add(now, rnd_below(rng, UINT64_C(1) << 24));
  /* occasionally a huge jump */
  if (rnd_below(rng, 8) == 0 && now < (UINT64_C(1) << 62))
    return now + rnd_below(rng, UINT64_C(1) << 61);
  return sat_add(now, rnd_below(rng, UINT64_C(1) << 44));
}

#define RCHECK(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      snprintf(g_context, sizeof g_context,                                   \
               "(random test: size %" PRIu32 ", seed %#" PRIx64 ", op %ld,"    \
               " now %" PRIu64 ")", size, seed, op, w.now_tick);              \
      fail_at(__FILE__, __LINE__, __VA_ARGS__);                               \
      g_context[0] = '\0';                                                    \
      goto done;                                                              \
    }                                                                         \
  } while (0)

static bool is_odd_pool_node(const wheel_node *n, void *ctx) {
  (void)ctx;
  return ((const tnode *)(const void *)n - g_pool) % 2 == 1;
}

/* Returns the number of operations done. */
static long random_run(uint32_t size, uint64_t seed, long ops) {
  wheel w;
  long op = -1;
  if (wheel_init(&w, size, test_deadline, g_deadline_ctx) != 0) {
    fail_at(__FILE__, __LINE__, "wheel_init(%" PRIu32 ") failed", size);
    return 0;
  }
  uint64_t rng = seed;
  g_live_n = 0;
  g_free_n = 0;
  for (uint32_t i = 0; i < POOL; i++) {
    g_pool[i].live = false;
    g_free[g_free_n++] = POOL - 1 - i;
  }
  /* population target changes by phase so both sparse and dense wheels
   * are exercised; the reference scan costs O(live) per advance */
  static const uint32_t targets[] = {4, 64, 512, 3000, 20000};
  uint32_t target = 64;
  for (op = 0; op < ops; op++) {
    if (op % 5000 == 0)
      target = targets[rnd_below(&rng, sizeof targets / sizeof targets[0])];
    unsigned r = (unsigned)rnd_below(&rng, 100);
    unsigned p_insert = g_live_n < target ? 55 : 20;
    unsigned p_remove = g_live_n < target ? 15 : 35;
    if (target >= 20000) p_insert = g_live_n < target ? 85 : 20;

    if (r < p_insert && g_free_n > 0) {
      /* ---- insert ---- */
      uint64_t d = random_deadline(&w, &rng);
      uint32_t id = g_free[g_free_n - 1];
      bool expect = d > w.now_tick;
      bool ok = insert_at(&w, &g_pool[id].node, d);
      RCHECK(ok == expect, "insert(%" PRIu64 ") at now %" PRIu64
             " returned %d, expected %d", d, w.now_tick, ok, expect);
      if (ok) {
        g_free_n--;
        live_add(id, d);
        RCHECK(placed_at(&w, &g_pool[id].node.link, d), "deadline %" PRIu64
               " linked at level %u slot %" PRIu32 ", expected level %u", d,
               (unsigned)g_pool[id].node.link.level, wheel_node_slot(&w, &g_pool[id].node.link),
               expected_level(&w, d));
      }
    } else if (r < p_insert + p_remove && g_live_n > 0) {
      /* ---- remove a random live node ---- */
      uint32_t id = g_live[rnd_below(&rng, g_live_n)];
      wheel_remove(&w, &g_pool[id].node.link);
      live_del(id);
    } else {
      /* ---- advance ---- */
      uint64_t prev = w.now_tick, to = random_advance_to(&w, &rng), ev = 0;
      bool has_ev = wheel_next_event(&w, &ev);
      RCHECK(has_ev == (g_live_n > 0), "next_event returned %d with %" PRIu32
             " live nodes", has_ev, g_live_n);
      /* reference: scan the plain array */
      uint32_t exp_n = 0;
      uint64_t min_d = UINT64_MAX;
      for (uint32_t i = 0; i < g_live_n; i++) {
        uint32_t id = g_live[i];
        uint64_t d = g_pool[id].deadline;
        if (d < min_d) min_d = d;
        if (d <= to) g_exp[exp_n++] = id;
      }
      uint64_t min_odd = UINT64_MAX, first = 0;
      bool any_odd = false;
      for (uint32_t i = 0; i < g_live_n; i++) {
        if (g_live[i] % 2 == 0) continue;
        any_odd = true;
        if (g_pool[g_live[i]].deadline < min_odd) min_odd = g_pool[g_live[i]].deadline;
      }
      bool has_first = wheel_first_deadline(&w, NULL, NULL, &first);
      RCHECK(has_first == (g_live_n > 0) && (!has_first || first == min_d),
             "first_deadline %d/%" PRIu64 ", expected %" PRIu64, has_first, first, min_d);
      has_first = wheel_first_deadline(&w, is_odd_pool_node, NULL, &first);
      RCHECK(has_first == any_odd && (!has_first || first == min_odd),
             "first_deadline(odd) %d/%" PRIu64 ", expected %" PRIu64, has_first, first, min_odd);
      if (has_ev) {
        RCHECK(ev > prev, "next_event %" PRIu64 " <= now %" PRIu64, ev, prev);
        RCHECK(ev <= min_d, "next_event %" PRIu64 " after earliest deadline %"
               PRIu64, ev, min_d);
      }
      RCHECK(g_live_n == 0 || min_d > prev, "reference holds deadline %"
             PRIu64 " <= now %" PRIu64, min_d, prev);
      wheel_list due = {0};
      wheel_advance(&w, to, &due);
      RCHECK(w.now_tick == to, "after advance(%" PRIu64 ") now_tick %" PRIu64,
             to, w.now_tick);
      uint32_t got_n = 0;
      uint64_t last = 0;
      for (wheel_node *p = due.head; p; p = p->next) {
        tnode *t = (tnode *)(void *)p;
        RCHECK(t >= g_pool && t < g_pool + POOL, "foreign node in due list");
        RCHECK(got_n < POOL, "due list longer than the pool (cycle?)");
        uint32_t id = (uint32_t)(t - g_pool);
        RCHECK(t->live, "node %" PRIu32 " fired but is not live", id);
        uint64_t pd = deadline_of_node(p);
        RCHECK(pd == t->deadline, "node %" PRIu32
               " deadline_tick %" PRIu64 " != %" PRIu64, id, pd, t->deadline);
        RCHECK(pd > prev && pd <= to,
               "node %" PRIu32 " deadline %" PRIu64 " fired outside (%" PRIu64
               ", %" PRIu64 "]", id, pd, prev, to);
        RCHECK(pd >= last, "due list out of order: %" PRIu64
               " after %" PRIu64, pd, last);
        last = pd;
        g_got[got_n++] = id;
      }
      RCHECK(list_consistent(&due), "due list links inconsistent");
      qsort(g_exp, exp_n, sizeof g_exp[0], cmp_u32);
      qsort(g_got, got_n, sizeof g_got[0], cmp_u32);
      for (uint32_t i = 0; i < exp_n || i < got_n; i++) {
        RCHECK(i < exp_n && i < got_n && g_exp[i] == g_got[i],
               "advance %" PRIu64 " -> %" PRIu64 ": due set differs "
               "(expected %" PRIu32 " nodes, got %" PRIu32 "; first difference "
               "at sorted index %" PRIu32 ": expected id %ld, got id %ld)",
               prev, to, exp_n, got_n, i,
               i < exp_n ? (long)g_exp[i] : -1L, i < got_n ? (long)g_got[i] : -1L);
      }
      for (uint32_t i = 0; i < exp_n; i++) live_del(g_exp[i]);
    }
    RCHECK(w.count == g_live_n, "count %zu != reference %" PRIu32, w.count,
           g_live_n);
    uint64_t t;
    if (wheel_next_event(&w, &t))
      RCHECK(t > w.now_tick, "next_event %" PRIu64 " <= now %" PRIu64, t,
             w.now_tick);
    else
      RCHECK(g_live_n == 0, "next_event false with %" PRIu32 " live", g_live_n);
  }
  /* final drain: everything left fires by UINT64_MAX */
  {
    wheel_list due = {0};
    uint32_t left = g_live_n;
    wheel_advance(&w, UINT64_MAX, &due);
    RCHECK(list_len(&due) == left, "final drain fired %zu, expected %" PRIu32,
           list_len(&due), left);
    RCHECK(w.count == 0, "count %zu after final drain", w.count);
  }
done:
  wheel_free(&w);
  return op < 0 ? 0 : op;
}

/* The last size keeps one list a slot on level 0 (no lanes). */
static void test_random_differential(void) {
  static const uint32_t sizes[] = {1, 8, 512, 4096, 2 * (uint32_t)WHEEL_LANED_SLOTS_MAX};
  long total = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    total += random_run(sizes[i], UINT64_C(0x5EED0000) + sizes[i], OPS_PER_SIZE);
  if (!g_case_failed)
    CHECK(total >= 1000000, "only %ld random operations", total);
}

/* ------------------------------------------------------------------------ */
/* lanes: a slot's nodes in WHEEL_LANES lists, walked side by side           */
/* ------------------------------------------------------------------------ */

static size_t chain_len(const wheel_node *n) {
  size_t len = 0;
  for (; n; n = n->next) len++;
  return len;
}

/* A slot's lanes are filled in turn, and its nodes come out newest first
 * when none was removed: the engine skips its sort for timeouts scheduled
 * in deadline order because of it. The turn goes on from where an emptied
 * slot left it. */
static void test_lanes_filled_in_turn(void) {
  enum { EARLIER = 3, NODES = 3 * WHEEL_LANES + 2 };
  wheel w;
  if (!open_wheel(&w, 512, 0)) return;
  test_node earlier[EARLIER], n[NODES];
  for (int i = 0; i < EARLIER; i++) CHECK_TRUE(insert_at(&w, &earlier[i], 7));
  for (int i = 0; i < EARLIER; i++) wheel_remove(&w, &earlier[i].link);
  for (int i = 0; i < NODES; i++) CHECK_TRUE(insert_at(&w, &n[i], 7));
  for (unsigned lane = 0; lane < WHEEL_LANES; lane++) {
    size_t len = chain_len(w.heads[0][7 << WHEEL_LANE_BITS | lane]);
    CHECK(len == NODES / WHEEL_LANES || len == NODES / WHEEL_LANES + 1,
          "lane %u holds %zu of %d nodes", lane, len, NODES);
  }
  wheel_list due = {0};
  wheel_advance(&w, 7, &due);
  CHECK_EQ(list_len(&due), NODES);
  const wheel_node *got = due.head;
  for (int i = NODES - 1; i >= 0 && got; i--, got = got->next)
    CHECK(got == &n[i].link, "node %d came out of its slot out of turn", i);
  wheel_free(&w);
}

/* A slot stays occupied while any of its lanes holds a node, whichever
 * node goes first: a lane's head, its middle, a lane's only node. */
static void test_lanes_removal_keeps_slot(void) {
  enum { NODES = 2 * WHEEL_LANES + 3 };
  wheel w;
  if (!open_wheel(&w, 512, 0)) return;
  test_node n[NODES];
  for (int i = 0; i < NODES; i++) CHECK_TRUE(insert_at(&w, &n[i], 9));
  int order[NODES];                               /* a fixed shuffle */
  uint64_t rng = UINT64_C(0x1A7E5);
  for (int i = 0; i < NODES; i++) order[i] = i;
  for (int i = NODES - 1; i > 0; i--) {
    int j = (int)rnd_below(&rng, (uint64_t)i + 1), swap = order[i];
    order[i] = order[j];
    order[j] = swap;
  }
  for (int i = 0; i < NODES; i++) {
    uint64_t tick = 0;
    CHECK(wheel_next_event(&w, &tick) && tick == 9, "slot lost with %d nodes left", NODES - i);
    wheel_remove(&w, &n[order[i]].link);
  }
  uint64_t tick = 0;
  CHECK_FALSE(wheel_next_event(&w, &tick));
  for (unsigned lane = 0; lane < WHEEL_LANES; lane++)
    CHECK(w.heads[0][9 << WHEEL_LANE_BITS | lane] == NULL, "lane %u kept a node", lane);
  wheel_list due = {0};
  wheel_advance(&w, 9, &due);
  CHECK_EQ(list_len(&due), 0);
  wheel_free(&w);
}

/* A level of more than WHEEL_LANED_SLOTS_MAX slots keeps one list a slot,
 * and works as well; the levels above it keep their lanes. */
static void test_lanes_absent_on_huge_levels(void) {
  enum { NODES = 5 };
  const uint32_t size = (uint32_t)WHEEL_LANED_SLOTS_MAX * 2;
  wheel w;
  if (!open_wheel(&w, size, 0)) return;
  CHECK_EQ(w.lane_bits[0], 0);
  CHECK_TRUE(w.next_lane[0] == NULL);
  CHECK_EQ(w.lane_bits[1], WHEEL_LANE_BITS);
  test_node n[NODES], later;
  for (int i = 0; i < NODES; i++) CHECK_TRUE(insert_at(&w, &n[i], 5));
  CHECK_TRUE(insert_at(&w, &later, (uint64_t)size + 5));
  CHECK_EQ(later.link.level, 1);
  wheel_remove(&w, &n[2].link);
  wheel_list due = {0};
  wheel_advance(&w, (uint64_t)size + 5, &due);
  CHECK_EQ(list_len(&due), NODES);
  CHECK_TRUE(list_consistent(&due));
  const wheel_node *got = due.head;
  static const int newest_first[NODES - 1] = {4, 3, 1, 0};
  for (int i = 0; i < NODES - 1 && got; i++, got = got->next)
    CHECK(got == &n[newest_first[i]].link, "node %d out of turn", newest_first[i]);
  CHECK(got == &later.link, "the later node is missing");
  wheel_free(&w);
}

/* ------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  void (*fn)(void);
} test_case;

int main(void) {
  static const test_case tests[] = {
      {"round_size", test_round_size},
      {"init_sizes", test_init_sizes},
      {"init_levels_all_sizes", test_init_levels_all_sizes},
      {"free", test_free},
      {"insert_not_future", test_insert_not_future},
      {"insert_future_and_count", test_insert_future_and_count},
      {"insert_level_placement", test_insert_level_placement},
      {"advance_boundaries", test_advance_boundaries},
      {"advance_huge_deadlines", test_advance_huge_deadlines},
      {"advance_sets_now", test_advance_sets_now},
      {"advance_appends_to_due", test_advance_appends_to_due},
      {"advance_event_one_at_a_time", test_advance_event_one_at_a_time},
      {"remove_each_level", test_remove_each_level},
      {"remove_after_cascade", test_remove_after_cascade},
      {"remove_within_slot", test_remove_within_slot},
      {"extract", test_extract},
      {"remove_only_node_of_slot", test_remove_only_node_of_slot},
      {"next_event_empty", test_next_event_empty},
      {"next_event_contract", test_next_event_contract},
      {"due_order", test_due_order},
      {"size_one", test_size_one},
      {"list_helpers", test_list_helpers},
      {"random_differential", test_random_differential},
      {"lanes_filled_in_turn", test_lanes_filled_in_turn},
      {"lanes_removal_keeps_slot", test_lanes_removal_keeps_slot},
      {"lanes_absent_on_huge_levels", test_lanes_absent_on_huge_levels},
  };
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    g_case_failed = 0;
    tests[i].fn();
    if (g_case_failed) {
      printf("FAIL %s\n", tests[i].name);
      failed++;
    } else {
      passed++;
    }
  }
  printf("wheel: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
