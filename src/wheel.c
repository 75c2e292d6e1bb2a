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
#define PREFETCH_AHEAD 16          /* nodes prefetched ahead of a slot walk */
#define CACHE_LINE 64
#define HINTS_STALE_SLACK 64       /* stale hints a slot may keep beyond its live ones */
#define HINTS_KEPT_MAX 4096        /* a larger record is freed once its slot is emptied */
#define HINTED_SLOTS_MAX (UINT64_C(1) << 16)   /* a larger level keeps no hints:
                                                   their table would be 24 B a slot */

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

/* ---- hints: where a slot's nodes are, for prefetching ------------------ */

static wheel_hints *slot_hints(const wheel *w, unsigned level, uint64_t slot) {
  return w->hints[level] ? &w->hints[level][slot] : NULL;
}

static bool grow_hints(wheel_hints *h) {
  uint32_t capacity = h->capacity ? 2 * h->capacity : 8;
  if (capacity < h->capacity) return false;
  const wheel_node **at = realloc(h->at, capacity * sizeof *at);
  if (!at) return false;
  h->at = at;
  h->capacity = capacity;
  return true;
}

/* A hint that cannot be kept (no memory) only costs a prefetch. */
static void note_inserted(wheel_hints *h, const wheel_node *n) {
  if (!h) return;
  h->live++;
  if (h->count >= 2 * h->live + HINTS_STALE_SLACK) h->count = 0;   /* mostly stale */
  if (h->count == h->capacity && !grow_hints(h)) return;
  h->at[h->count++] = n;
}

static void note_removed(wheel_hints *h) {
  if (h) h->live--;
}

static void prefetch_node(const wheel_node *n) {
  __builtin_prefetch(n);
  __builtin_prefetch((const char *)n + CACHE_LINE);  /* the owner's fields after the link */
}

/* Forgets a slot's hints (it is being emptied); a large record is freed. */
static void clear_hints(wheel_hints *h) {
  h->count = h->live = 0;
  if (h->capacity > HINTS_KEPT_MAX) {
    free(h->at);
    h->at = NULL;
    h->capacity = 0;
  }
}

/* ---- the wheel --------------------------------------------------------- */

int wheel_init(wheel *w, uint32_t size, wheel_deadline_fn deadline_of, const void *ctx) {
  *w = (wheel){.deadline_of = deadline_of, .deadline_ctx = ctx};
  w->size = wheel_round_size(size);
  while ((UINT32_C(1) << w->size_bits) < w->size) w->size_bits++;
  w->levels = 1 + (64 - w->size_bits + WHEEL_LEVEL_BITS - 1) / WHEEL_LEVEL_BITS;
  for (unsigned level = 0; level < w->levels; level++) {
    uint64_t slots = level_slots(w, level);
    w->slots[level] = calloc((size_t)slots, sizeof(wheel_node *));
    w->occupied[level] = calloc(bitmap_words(slots), sizeof(uint64_t));
    if (!w->slots[level] || !w->occupied[level]) {
      wheel_free(w);
      return -1;
    }
    if (slots <= HINTED_SLOTS_MAX)                /* optional: NULL costs prefetches only */
      w->hints[level] = calloc((size_t)slots, sizeof(wheel_hints));
  }
  return 0;
}

void wheel_free(wheel *w) {
  for (unsigned level = 0; level < WHEEL_LEVELS_MAX; level++) {
    for (uint64_t slot = 0; w->hints[level] && slot < level_slots(w, level); slot++)
      free(w->hints[level][slot].at);
    free(w->hints[level]);
    free(w->slots[level]);
    free(w->occupied[level]);
    w->hints[level] = NULL;
    w->slots[level] = NULL;
    w->occupied[level] = NULL;
  }
  w->count = 0;
}

bool wheel_insert(wheel *w, wheel_node *n, uint64_t deadline_tick) {
  if (deadline_tick <= w->now_tick) return false;
  unsigned level = level_for(w, deadline_tick);
  uint64_t slot = slot_index(w, level, deadline_tick);
  wheel_node **head = &w->slots[level][slot];
  n->slot = (uint32_t)slot;
  n->level = (uint8_t)level;
  n->prev = NULL;
  n->next = *head;
  if (*head) (*head)->prev = n;
  *head = n;
  mark_occupied(w, level, slot);
  note_inserted(slot_hints(w, level, slot), n);
  w->count++;
  return true;
}

void wheel_remove(wheel *w, wheel_node *n) {
  uint32_t slot = n->slot;
  wheel_node **head = &w->slots[n->level][slot];
  if (n->prev) n->prev->next = n->next; else *head = n->next;
  if (n->next) n->next->prev = n->prev;
  if (!*head) mark_empty(w, n->level, slot);
  note_removed(slot_hints(w, n->level, slot));
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
      for (const wheel_node *n = w->slots[level][slot]; n; n = n->next) {
        if (match && !match(n, ctx)) continue;
        uint64_t deadline_tick = w->deadline_of(n, w->deadline_ctx);
        if (!found || deadline_tick < *tick) *tick = deadline_tick;
        found = true;
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
      for (wheel_node *n = w->slots[level][slot], *next; n; n = next) {
        next = n->next;
        if (!take(n, ctx)) continue;
        wheel_remove(w, n);
        wheel_list_push_back(out, n);
      }
    }
  }
}

/* Empties one slot at now_tick: due nodes go to take(), the rest move down
 * (never into this slot). Level 0's slot holds only nodes due at now_tick
 * (a level-0 node's deadline lies in now_tick's block), so only the others
 * need their deadline. The list runs newest first, the hints oldest first:
 * the walk prefetches from the hints' end, PREFETCH_AHEAD ahead. */
static void drain_slot(wheel *w, unsigned level, wheel_take take, void *ctx) {
  uint64_t slot = slot_index(w, level, w->now_tick);
  wheel_node *n = w->slots[level][slot];
  if (!n) return;
  w->slots[level][slot] = NULL;
  mark_empty(w, level, slot);
  wheel_hints *h = slot_hints(w, level, slot);
  const wheel_node **hint = h ? h->at : NULL;
  uint32_t unfetched = h ? h->count : 0;
  for (int i = 0; i < PREFETCH_AHEAD && unfetched; i++) prefetch_node(hint[--unfetched]);
  while (n) {
    if (unfetched) prefetch_node(hint[--unfetched]);
    wheel_node *next = n->next;
    w->count--;
    if (level == 0 || !wheel_insert(w, n, w->deadline_of(n, w->deadline_ctx))) take(n, ctx);
    n = next;
  }
  if (h) clear_hints(h);
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
