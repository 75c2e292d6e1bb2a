/*
 * test_slot_arena.c — the slot arena (src/slot_arena.c) alone: numbers and
 * generations, what a stale pair finds, owners and their release, orphans,
 * reuse of a freed chunk's place, and generations that run out.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "slot_arena.h"

#define MANY 1000

static slot *reserve(slot_arena *a, slot_owner *owner, uint32_t *number, uint32_t *gen) {
  slot *s = slot_reserve(a, owner, number, gen);
  CHECK(s != NULL);
  return s;
}

/* An arena with one owner attached (most tests need no more), and its end. */
static void open_arena(slot_arena *a, slot_owner *owner) {
  slot_arena_init(a);
  slot_owner_attach(a, owner);
}

static void close_arena(slot_arena *a, slot_owner *owner) {
  slot_owner_release(a, owner);
  slot_arena_close(a);
}

static void test_numbers_and_find(void) {
  slot_arena a;
  slot_owner owner;
  open_arena(&a, &owner);
  uint32_t numbers[MANY], gens[MANY];
  for (int i = 0; i < MANY; i++) {
    slot *s = reserve(&a, &owner, &numbers[i], &gens[i]);
    CHECK(numbers[i] >= 1 && numbers[i] % SLOT_CHUNK_SIZE != 0);
    CHECK(gens[i] != 0);
    CHECK(slot_number(s) == numbers[i]);
    CHECK(slot_at(&a, numbers[i]) == s);
    CHECK(slot_find(&a, numbers[i], gens[i]) == s);
    CHECK(slot_find(&a, numbers[i], gens[i] + 1) == NULL);
    CHECK(slot_owner_of(&a, numbers[i], gens[i]) == &owner);
    CHECK(s->use == SLOT_RESERVED);
    for (int j = 0; j < i; j++) CHECK(numbers[j] != numbers[i]);
  }
  CHECK(slot_at(&a, 0) == NULL);
  CHECK(slot_at(&a, SLOT_CHUNK_SIZE) == NULL);        /* a chunk's record, not a slot */
  close_arena(&a, &owner);
}

/* A freed slot's next use has a new generation: the old pair finds nothing. */
static void test_stale_pairs_never_match(void) {
  slot_arena a;
  slot_owner owner;
  open_arena(&a, &owner);
  uint32_t number, gen, again, gen_again;
  slot *s = reserve(&a, &owner, &number, &gen);
  slot_free(&a, s);
  CHECK(slot_find(&a, number, gen) == NULL);
  for (int i = 0; i < MANY; i++) {
    s = reserve(&a, &owner, &again, &gen_again);
    CHECK(again == number);                             /* the free list is LIFO */
    CHECK(gen_again != gen);
    CHECK(slot_find(&a, number, gen) == NULL);
    slot_free(&a, s);
  }
  close_arena(&a, &owner);
}

/* A released owner's chunks without live slots are freed; their places go
 * to the next owner, whose generations continue: an old pair never matches. */
static void test_release_and_reuse(void) {
  slot_arena a;
  slot_arena_init(&a);
  slot_owner first, second;
  slot_owner_attach(&a, &first);
  slot_owner_attach(&a, &second);
  uint32_t number, gen;
  slot *s = reserve(&a, &first, &number, &gen);
  slot_free(&a, s);
  slot_owner_release(&a, &first);
  CHECK(slot_at(&a, number) == NULL);
  CHECK(slot_owner_of(&a, number, gen) == NULL);
  uint32_t number2, gen2;
  reserve(&a, &second, &number2, &gen2);
  CHECK(number2 == number);                            /* the vacant place again */
  CHECK(gen2 > gen);
  CHECK(slot_find(&a, number, gen) == NULL);
  CHECK(slot_owner_of(&a, number, gen) == NULL);       /* not the second owner's */
  CHECK(slot_owner_of(&a, number2, gen2) == &second);
  slot_owner_release(&a, &second);
  slot_arena_close(&a);
}

/* A live slot outlives its owner (a drain holds it): an orphan, freed with
 * its chunk when it is freed. */
static void test_orphans(void) {
  slot_arena a;
  slot_owner owner;
  open_arena(&a, &owner);
  uint32_t number, gen, other, other_gen;
  slot *held = reserve(&a, &owner, &number, &gen);
  held->use = SLOT_LIVE;
  held->drains = 1;                                    /* a drain holds it */
  slot_free(&a, reserve(&a, &owner, &other, &other_gen));
  slot_owner_release(&a, &owner);
  CHECK(slot_find(&a, number, gen) == held);           /* still there */
  CHECK(slot_chunk_of(held)->record.owner == NULL);
  CHECK(slot_owner_of(&a, number, gen) == NULL);
  slot_free(&a, held);
  CHECK(slot_at(&a, number) == NULL);                  /* its chunk went with it */
  slot_arena_close(&a);
}

/* Two owners never share a chunk. */
static void test_owners_apart(void) {
  slot_arena a;
  slot_arena_init(&a);
  slot_owner one, two;
  slot_owner_attach(&a, &one);
  slot_owner_attach(&a, &two);
  slot *taken[2][200];
  for (int i = 0; i < 200; i++) {
    uint32_t n1, g1, n2, g2;
    slot *s1 = taken[0][i] = reserve(&a, &one, &n1, &g1);
    slot *s2 = taken[1][i] = reserve(&a, &two, &n2, &g2);
    CHECK(slot_chunk_of(s1) != slot_chunk_of(s2));
    CHECK(slot_owner_of(&a, n1, g1) == &one && slot_owner_of(&a, n2, g2) == &two);
  }
  for (int i = 0; i < 200; i++) {
    slot_free(&a, taken[0][i]);
    slot_free(&a, taken[1][i]);
  }
  slot_owner_release(&a, &one);
  slot_owner_release(&a, &two);
  CHECK(a.vacant_count == a.count);                    /* every chunk was freed */
  slot_arena_close(&a);
}

/* A chunk whose generations run out hands out no more slots. */
static void test_generations_run_out(void) {
  slot_arena a;
  slot_owner owner;
  open_arena(&a, &owner);
  uint32_t number, gen;
  slot *s = reserve(&a, &owner, &number, &gen);
  slot_chunk *chunk = slot_chunk_of(s);
  slot_free(&a, s);
  chunk->record.next_gen = UINT32_MAX;                 /* as after 2^32 - 2 arming */
  s = reserve(&a, &owner, &number, &gen);
  CHECK(gen == UINT32_MAX && slot_chunk_of(s) == chunk);
  slot_free(&a, s);
  uint32_t later, later_gen;
  s = reserve(&a, &owner, &later, &later_gen);
  CHECK(slot_chunk_of(s) != chunk);                    /* a new chunk */
  CHECK(later_gen != 0);
  slot_free(&a, s);
  slot_owner_release(&a, &owner);
  CHECK(a.vacant_count == 1);                          /* the spent place is not reused */
  slot_arena_close(&a);
}

/* Closing the arena while an owner is attached keeps its memory (the
 * owner's finalizer may run after lua_close's); the last release frees it. */
static void test_close_waits_for_owners(void) {
  slot_arena a;
  slot_owner owner;
  open_arena(&a, &owner);
  uint32_t number, gen;
  slot *s = reserve(&a, &owner, &number, &gen);
  slot_arena_close(&a);
  CHECK(slot_find(&a, number, gen) == s);              /* still there */
  slot_free(&a, s);
  slot_owner_release(&a, &owner);
  CHECK(slot_at(&a, number) == NULL);                  /* freed with the last owner */
  slot_owner_release(&a, &owner);                      /* a second release does nothing */
  CHECK(a.owners == 0 && a.closed);
}

static const test_case tests[] = {
  {"numbers_and_find", test_numbers_and_find},
  {"stale_pairs_never_match", test_stale_pairs_never_match},
  {"release_and_reuse", test_release_and_reuse},
  {"orphans", test_orphans},
  {"owners_apart", test_owners_apart},
  {"generations_run_out", test_generations_run_out},
  {"close_waits_for_owners", test_close_waits_for_owners},
};

int main(void) {
  return run_tests("slot_arena", tests, sizeof tests / sizeof tests[0]);
}
