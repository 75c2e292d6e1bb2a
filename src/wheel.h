/*
 * wheel.h — a hierarchical hashed timing wheel: the data structure alone.
 *
 * No threads, no clock, no Lua: time is a tick counter that only moves when
 * wheel_advance() is called. Level 0 has `wheel_size` slots of one tick each
 * (Netty's ticksPerWheel); every higher level has 64 slots, each as wide as a
 * whole turn of the level below (Varghese & Lauck scheme 7, as in the Linux
 * and tokio wheels). A node lives in the slot of the lowest level whose
 * current block contains its deadline, so a timeout is moved down at most
 * once per level: the work per timeout does not grow with its delay.
 *
 * Costs: insert O(1), remove O(1), wheel_next_event O(wheel_size / 64) in the
 * worst case (a bitmap scan of level 0), advance O(levels) per due node plus
 * O(wheel_size / 64) per occupied slot reached. Idle ticks cost nothing.
 *
 * Memory order: a slot's nodes lie scattered, so walking one list of them
 * would wait for one cache miss per node. A slot therefore keeps its nodes
 * in WHEEL_LANES lists, its lanes, filled in turn, and advance walks the
 * lanes side by side, prefetching each lane's next node: up to WHEEL_LANES
 * misses overlap, and no memory is spent per node. A level of more than
 * WHEEL_LANED_SLOTS_MAX slots keeps one list a slot (its lanes would take
 * 128 B a slot).
 */
#ifndef HWT_WHEEL_H
#define HWT_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WHEEL_SIZE_MAX (UINT32_C(1) << 30)
#define WHEEL_LEVEL_BITS 6                         /* levels >= 1: 64 slots */
#define WHEEL_LEVELS_MAX (1 + (64 + WHEEL_LEVEL_BITS - 1) / WHEEL_LEVEL_BITS)
#define WHEEL_LANE_BITS 4
#define WHEEL_LANES (1u << WHEEL_LANE_BITS)                 /* lists per slot */
#define WHEEL_LANED_SLOTS_MAX (UINT64_C(1) << 14)

/* Intrusive node; embed it in your own struct. The link fields are also free
 * for the owner's use while the node is not in a wheel (see wheel_list). A
 * node keeps where it is linked, not its deadline tick, which the wheel asks
 * its owner for (wheel_deadline_fn): so a node takes 24 B, three of them
 * (owner_bytes) the owner's, which alignment would otherwise waste. */
typedef struct wheel_node {
  struct wheel_node *next, *prev;
  uint32_t list;       /* slot << lane bits | lane: its list within its level */
  uint8_t level;                                   /* valid while linked */
  uint8_t owner_bytes[3];                          /* never touched by the wheel */
} wheel_node;

/* The deadline tick a linked node was inserted with. Asked only when a node
 * moves down a level and by wheel_first_deadline; insert and remove never
 * ask. */
typedef uint64_t (*wheel_deadline_fn)(const wheel_node *n, const void *ctx);

/* A NULL-terminated doubly linked list with head and tail. */
typedef struct wheel_list {
  wheel_node *head, *tail;
} wheel_list;

typedef struct wheel {
  uint64_t now_tick;           /* every deadline <= now_tick has been expired */
  size_t count;                /* nodes in the wheel */
  uint32_t size;               /* level-0 slots, a power of two */
  unsigned size_bits;          /* log2(size) */
  unsigned levels;
  wheel_node **heads[WHEEL_LEVELS_MAX];    /* per list (node->list), NULL when empty */
  uint64_t *occupied[WHEEL_LEVELS_MAX];    /* one bit per non-empty slot */
  uint8_t *next_lane[WHEEL_LEVELS_MAX];    /* per slot; NULL: one list a slot */
  uint8_t lane_bits[WHEEL_LEVELS_MAX];     /* WHEEL_LANE_BITS, or 0: one list */
  wheel_deadline_fn deadline_of;
  const void *deadline_ctx;                /* passed to deadline_of */
} wheel;

/* Rounds size up to a power of two; size must be 1..WHEEL_SIZE_MAX.
 * deadline_of(n, ctx) must give back the tick n was inserted with.
 * Returns 0, or -1 when memory is short (the wheel is then left empty). */
int wheel_init(wheel *w, uint32_t size, wheel_deadline_fn deadline_of, const void *ctx);
void wheel_free(wheel *w);
uint32_t wheel_round_size(uint32_t size);

/* Links n to fire at deadline_tick. Returns false, without linking, when the
 * deadline is not in the future (deadline_tick <= now_tick): it is due now. */
bool wheel_insert(wheel *w, wheel_node *n, uint64_t deadline_tick);
void wheel_remove(wheel *w, wheel_node *n);

/* The slot of its level a linked node is in. */
static inline uint32_t wheel_node_slot(const wheel *w, const wheel_node *n) {
  return n->list >> w->lane_bits[n->level];
}

/* Unlinks every node for which take(node, ctx) is true and appends it to
 * `out`. O(slots + nodes): for rare bulk work, such as ending one owner's
 * nodes in a wheel that several owners share. */
typedef bool (*wheel_predicate)(const wheel_node *n, void *ctx);
void wheel_extract(wheel *w, wheel_predicate take, void *ctx, wheel_list *out);

/* The earliest tick at which wheel_advance has work (a node falls due or a
 * slot must be moved down a level). false when the wheel is empty. */
bool wheel_next_event(const wheel *w, uint64_t *tick);

/* The earliest deadline tick among the nodes for which match(node, ctx) is
 * true (every node when match is NULL); false when there is none. Walks the
 * occupied slots in time order and stops at the first slot with a match:
 * O(wheel_size / 64 + the nodes before the first match). */
bool wheel_first_deadline(const wheel *w, wheel_predicate match, void *ctx, uint64_t *tick);

/* Moves time to to_tick (>= now_tick) and appends every node whose deadline
 * is <= to_tick to `due`, in deadline-tick order (any order within a tick). */
void wheel_advance(wheel *w, uint64_t to_tick, wheel_list *due);
/* One step of wheel_advance: moves time to the next event at or before
 * to_tick and appends the nodes due then; false, time unchanged, when there
 * is none (the caller then moves time with wheel_advance). */
bool wheel_advance_event(wheel *w, uint64_t to_tick, wheel_list *due);

/* wheel_advance_event that hands each due node, unlinked, to take(node, ctx)
 * instead: take runs while the walk has just brought the node into the
 * cache, so it is the place to read what the caller needs from the node
 * (a second walk over a long list of scattered nodes misses again). */
typedef void (*wheel_take)(wheel_node *n, void *ctx);
bool wheel_advance_event_each(wheel *w, uint64_t to_tick, wheel_take take, void *ctx);

static inline void wheel_list_push_back(wheel_list *l, wheel_node *n) {
  n->next = NULL;
  n->prev = l->tail;
  if (l->tail) l->tail->next = n; else l->head = n;
  l->tail = n;
}

static inline void wheel_list_insert_after(wheel_list *l, wheel_node *pos,
                                           wheel_node *n) {
  if (!pos) {                                      /* at the front */
    n->prev = NULL;
    n->next = l->head;
    if (l->head) l->head->prev = n; else l->tail = n;
    l->head = n;
    return;
  }
  n->prev = pos;
  n->next = pos->next;
  if (pos->next) pos->next->prev = n; else l->tail = n;
  pos->next = n;
}

static inline void wheel_list_remove(wheel_list *l, wheel_node *n) {
  if (n->prev) n->prev->next = n->next; else l->head = n->next;
  if (n->next) n->next->prev = n->prev; else l->tail = n->prev;
  n->next = n->prev = NULL;
}

static inline wheel_node *wheel_list_pop_front(wheel_list *l) {
  wheel_node *n = l->head;
  if (n) wheel_list_remove(l, n);
  return n;
}

#endif
