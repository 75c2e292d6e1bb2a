/*
 * wheel.c — see wheel.h for the scheme and its costs.
 *
 * Placement rule (as in the tokio wheel): a node goes to the lowest level L
 * whose current block — the ticks that share every bit above level L with
 * now_tick — contains its deadline. Hence the slot of level L that holds
 * now_tick is always empty, and the next slot of level L begins after the
 * whole current block of level L-1: the first level with an occupied slot
 * ahead of now_tick holds the next event.
 */
#include "wheel.h"

#include <stdlib.h>

#define WORD_BITS 64
#define CACHE_LINE 64

static unsigned level_shift(const wheel *w, unsigned level) {
  return level == 0 ? 0 : w->size_bits + WHEEL_LEVEL_BITS * (level - 1);
}

static unsigned level_bits(const wheel *w, unsigned level) {
  return level == 0 ? w->size_bits : WHEEL_LEVEL_BITS;
}

static uint64_t level_slots(const wheel *w, unsigned level) {
  return UINT64_C(1) << level_bits(w, level);
}

static uint64_t slot_index(const wheel *w, unsigned level, uint64_t tick) {
  return (tick >> level_shift(w, level)) & (level_slots(w, level) - 1);
}

/* First tick of the block of `level` that contains tick. */
static uint64_t block_base(const wheel *w, unsigned level, uint64_t tick) {
  unsigned span = level_shift(w, level) + level_bits(w, level);
  return span >= 64 ? 0 : tick & ~((UINT64_C(1) << span) - 1);
}

static unsigned level_for(const wheel *w, uint64_t deadline_tick) {
  uint64_t differing = deadline_tick ^ w->now_tick;
  if ((differing >> w->size_bits) == 0) return 0;
  unsigned high_bit = 63u - (unsigned)__builtin_clzll(differing);
  return 1 + (high_bit - w->size_bits) / WHEEL_LEVEL_BITS;
}

static size_t bitmap_words(uint64_t slots) {
  return slots < WORD_BITS ? 1 : (size_t)(slots / WORD_BITS);
}

static void mark_occupied(wheel *w, unsigned level, uint64_t slot) {
  w->occupied[level][slot / WORD_BITS] |= UINT64_C(1) << (slot % WORD_BITS);
}

static void mark_empty(wheel *w, unsigned level, uint64_t slot) {
  w->occupied[level][slot / WORD_BITS] &= ~(UINT64_C(1) << (slot % WORD_BITS));
}

static bool is_occupied(const wheel *w, unsigned level, uint64_t slot) {
  return w->occupied[level][slot / WORD_BITS] & (UINT64_C(1) << (slot % WORD_BITS));
}

/* Index of the first occupied slot of `level` at or after `from`, or -1. */
static int64_t next_occupied(const wheel *w, unsigned level, uint64_t from) {
  uint64_t slots = level_slots(w, level);
  if (from >= slots) return -1;
  const uint64_t *bits = w->occupied[level];
  size_t word = (size_t)(from / WORD_BITS);
  uint64_t pending = bits[word] & (~UINT64_C(0) << (from % WORD_BITS));
  size_t words = bitmap_words(slots);
  while (!pending) {
    if (++word == words) return -1;
    pending = bits[word];
  }
  return (int64_t)(word * WORD_BITS + (unsigned)__builtin_ctzll(pending));
}

uint32_t wheel_round_size(uint32_t size) {
  uint32_t rounded = 1;
  while (rounded < size) rounded <<= 1;
  return rounded;
}

/* ---- lanes: a slot's lists ------------------------------------------- */

static unsigned lanes_of(const wheel *w, unsigned level) {
  return 1u << w->lane_bits[level];
}

static wheel_node **slot_heads(const wheel *w, unsigned level, uint64_t slot) {
  return &w->heads[level][slot << w->lane_bits[level]];
}

/* The list a node inserted in this slot goes to: its lanes in turn. */
static uint64_t list_for_insert(wheel *w, unsigned level, uint64_t slot) {
  uint8_t *next_lane = w->next_lane[level];
  if (!next_lane) return slot;
  uint8_t lane = next_lane[slot];
  next_lane[slot] = (uint8_t)((lane + 1) % WHEEL_LANES);
  return slot << WHEEL_LANE_BITS | lane;
}

/* One of the slot's lists became empty: the slot may have. */
static void note_list_emptied(wheel *w, unsigned level, uint32_t list) {
  uint64_t slot = list >> w->lane_bits[level];
  wheel_node **heads = slot_heads(w, level, slot);
  for (unsigned lane = 0; lane < lanes_of(w, level); lane++)
    if (heads[lane]) return;
  mark_empty(w, level, slot);
}

static void prefetch_node(const wheel_node *n) {
  __builtin_prefetch(n);
  __builtin_prefetch((const char *)n + CACHE_LINE);  /* the owner's fields after the link */
}

/* ---- the wheel --------------------------------------------------------- */

int wheel_init(wheel *w, uint32_t size, wheel_deadline_fn deadline_of, const void *ctx) {
  *w = (wheel){.deadline_of = deadline_of, .deadline_ctx = ctx};
  w->size = wheel_round_size(size);
  while ((UINT32_C(1) << w->size_bits) < w->size) w->size_bits++;
  w->levels = 1 + (64 - w->size_bits + WHEEL_LEVEL_BITS - 1) / WHEEL_LEVEL_BITS;
  for (unsigned level = 0; level < w->levels; level++) {
    uint64_t slots = level_slots(w, level);
    if (slots <= WHEEL_LANED_SLOTS_MAX) {
      w->lane_bits[level] = WHEEL_LANE_BITS;
      w->next_lane[level] = calloc((size_t)slots, sizeof(uint8_t));
    }
    w->heads[level] = calloc((size_t)slots << w->lane_bits[level], sizeof(wheel_node *));
    w->occupied[level] = calloc(bitmap_words(slots), sizeof(uint64_t));
    if (!w->heads[level] || !w->occupied[level] || (w->lane_bits[level] && !w->next_lane[level])) {
      wheel_free(w);
      return -1;
    }
  }
  return 0;
}

void wheel_free(wheel *w) {
  for (unsigned level = 0; level < WHEEL_LEVELS_MAX; level++) {
    free(w->heads[level]);
    free(w->occupied[level]);
    free(w->next_lane[level]);
    w->heads[level] = NULL;
    w->occupied[level] = NULL;
    w->next_lane[level] = NULL;
    w->lane_bits[level] = 0;
  }
  w->count = 0;
}

bool wheel_insert(wheel *w, wheel_node *n, uint64_t deadline_tick) {
  if (deadline_tick <= w->now_tick) return false;
  unsigned level = level_for(w, deadline_tick);
  uint64_t slot = slot_index(w, level, deadline_tick);
  uint64_t list = list_for_insert(w, level, slot);
  wheel_node **head = &w->heads[level][list];
  n->list = (uint32_t)list;
  n->level = (uint8_t)level;
  n->prev = NULL;
  n->next = *head;
  if (*head) (*head)->prev = n;
  *head = n;
  mark_occupied(w, level, slot);
  w->count++;
  return true;
}

/* Reads the list's head only when n is its first node: a cancel touches
 * the node and its neighbours, not the slot. */
void wheel_remove(wheel *w, wheel_node *n) {
  if (n->prev) {
    n->prev->next = n->next;
  } else {
    w->heads[n->level][n->list] = n->next;
    if (!n->next) note_list_emptied(w, n->level, n->list);
  }
  if (n->next) n->next->prev = n->prev;
  n->next = n->prev = NULL;
  w->count--;
}

bool wheel_next_event(const wheel *w, uint64_t *tick) {
  if (w->count == 0) return false;
  for (unsigned level = 0; level < w->levels; level++) {
    int64_t slot = next_occupied(w, level, slot_index(w, level, w->now_tick) + 1);
    if (slot >= 0) {
      *tick = block_base(w, level, w->now_tick) +
              ((uint64_t)slot << level_shift(w, level));
      return true;
    }
  }
  return false;                              /* unreachable while count > 0 */
}

/* Levels hold later deadlines the higher they are, and within a level the
 * slots after now_tick's run in time order (see the placement rule). */
bool wheel_first_deadline(const wheel *w, wheel_predicate match, void *ctx, uint64_t *tick) {
  for (unsigned level = 0; level < w->levels; level++) {
    for (int64_t slot = next_occupied(w, level, slot_index(w, level, w->now_tick) + 1);
         slot >= 0; slot = next_occupied(w, level, (uint64_t)slot + 1)) {
      bool found = false;
      wheel_node **heads = slot_heads(w, level, (uint64_t)slot);
      for (unsigned lane = 0; lane < lanes_of(w, level); lane++) {
        for (const wheel_node *n = heads[lane]; n; n = n->next) {
          if (match && !match(n, ctx)) continue;
          uint64_t deadline_tick = w->deadline_of(n, w->deadline_ctx);
          if (!found || deadline_tick < *tick) *tick = deadline_tick;
          found = true;
        }
      }
      if (found) return true;
    }
  }
  return false;
}

/* Walks the occupied slots only; the next pointer is read before a node
 * can be unlinked. */
void wheel_extract(wheel *w, wheel_predicate take, void *ctx, wheel_list *out) {
  for (unsigned level = 0; level < w->levels; level++) {
    for (int64_t slot = next_occupied(w, level, 0); slot >= 0;
         slot = next_occupied(w, level, (uint64_t)slot + 1)) {
      wheel_node **heads = slot_heads(w, level, (uint64_t)slot);
      for (unsigned lane = 0; lane < lanes_of(w, level); lane++) {
        for (wheel_node *n = heads[lane], *next; n; n = next) {
          next = n->next;
          if (!take(n, ctx)) continue;
          wheel_remove(w, n);
          wheel_list_push_back(out, n);
        }
      }
    }
  }
}

/* Empties one slot at now_tick: due nodes go to take(), the rest move down
 * (never into this slot). Level 0's slot holds only nodes due at now_tick
 * (a level-0 node's deadline lies in now_tick's block), so only the others
 * need their deadline. The walk takes one node of each lane in turn, the
 * newest lane first: the slot's nodes newest first when none was removed.
 * Each lane's next node is prefetched as its node is taken, a turn of the
 * lanes ahead of its own. */
static void drain_slot(wheel *w, unsigned level, wheel_take take, void *ctx) {
  uint64_t slot = slot_index(w, level, w->now_tick);
  if (!is_occupied(w, level, slot)) return;
  mark_empty(w, level, slot);
  unsigned lanes = lanes_of(w, level);
  unsigned newest = w->next_lane[level] ? w->next_lane[level][slot] + WHEEL_LANES - 1 : 0;
  wheel_node **heads = slot_heads(w, level, slot);
  wheel_node *walk[WHEEL_LANES];
  for (unsigned i = 0; i < lanes; i++) {
    unsigned lane = (newest - i) % lanes;
    walk[i] = heads[lane];
    heads[lane] = NULL;
    if (walk[i]) prefetch_node(walk[i]);
  }
  for (bool walked = true; walked;) {
    walked = false;
    for (unsigned i = 0; i < lanes; i++) {
      wheel_node *n = walk[i];
      if (!n) continue;
      walked = true;
      walk[i] = n->next;
      if (walk[i]) prefetch_node(walk[i]);
      w->count--;
      if (level == 0 || !wheel_insert(w, n, w->deadline_of(n, w->deadline_ctx))) take(n, ctx);
    }
  }
}

/* Only the levels whose slot changes as time moves to event_tick can hold
 * nodes there: the slot of a level that holds now_tick is always empty. */
bool wheel_advance_event_each(wheel *w, uint64_t to_tick, wheel_take take, void *ctx) {
  uint64_t event_tick;
  if (!wheel_next_event(w, &event_tick) || event_tick > to_tick) return false;
  unsigned top = level_for(w, event_tick);
  w->now_tick = event_tick;
  for (unsigned level = top + 1; level-- > 0;) drain_slot(w, level, take, ctx);
  return true;
}

static void append_to_list(wheel_node *n, void *list) {
  wheel_list_push_back(list, n);
}

bool wheel_advance_event(wheel *w, uint64_t to_tick, wheel_list *due) {
  return wheel_advance_event_each(w, to_tick, append_to_list, due);
}

void wheel_advance(wheel *w, uint64_t to_tick, wheel_list *due) {
  while (wheel_advance_event(w, to_tick, due)) {}
  if (to_tick > w->now_tick) w->now_tick = to_tick;
}
