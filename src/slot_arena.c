/*
 * slot_arena.c — timeouts in C memory, named by slot and generation. See
 * slot_arena.h.
 */
#include "slot_arena.h"

#include <stdlib.h>
#include <string.h>

#define DIRECTORY_MIN 16

void slot_arena_init(slot_arena *a) { memset(a, 0, sizeof *a); }

/* Frees every chunk, orphans included; slot numbers find nothing after. */
static void free_memory(slot_arena *a) {
  for (uint32_t i = 0; i < a->block_count; i++) free(a->blocks[i]);
  free(a->blocks);
  free(a->chunks);
  free(a->resume_gen);
  free(a->vacant);
  memset(a, 0, sizeof *a);
  a->closed = true;
}

void slot_arena_close(slot_arena *a) {
  a->closed = true;
  if (a->owners == 0) free_memory(a);
}

void slot_owner_attach(slot_arena *a, slot_owner *owner) {
  *owner = (slot_owner){.attached = true};
  a->owners++;
}

slot_chunk *slot_chunk_of(const slot *s) {
  return (slot_chunk *)((uintptr_t)s & ~(uintptr_t)(SLOT_CHUNK_BYTES - 1));
}

uint32_t slot_number(const slot *s) {
  slot_chunk *chunk = slot_chunk_of(s);
  return chunk->record.index * SLOT_CHUNK_SIZE + (uint32_t)(s - chunk->slots);
}

slot *slot_at(const slot_arena *a, uint32_t number) {
  uint32_t index = number / SLOT_CHUNK_SIZE, place = number % SLOT_CHUNK_SIZE;
  if (index >= a->count || place == 0 || !a->chunks[index]) return NULL;
  return &a->chunks[index]->slots[place];
}

slot *slot_find(const slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = slot_at(a, number);
  return s && s->gen == gen && s->use != SLOT_FREE ? s : NULL;
}

slot_owner *slot_owner_of(const slot_arena *a, uint32_t number, uint32_t gen) {
  slot *s = slot_at(a, number);
  if (!s) return NULL;
  slot_chunk_record *record = &slot_chunk_of(s)->record;
  bool this_owners = gen >= record->owner_first_gen && (record->next_gen == 0 || gen < record->next_gen);
  return this_owners ? record->owner : NULL;
}

/* ---- chunks ------------------------------------------------------------ */

static bool grow_directory(slot_arena *a) {
  uint32_t capacity = a->capacity ? 2 * a->capacity : DIRECTORY_MIN;
  slot_chunk **chunks = realloc(a->chunks, capacity * sizeof *chunks);
  if (!chunks) return false;
  a->chunks = chunks;
  uint32_t *resume_gen = realloc(a->resume_gen, capacity * sizeof *resume_gen);
  if (!resume_gen) return false;
  a->resume_gen = resume_gen;
  uint32_t *vacant = realloc(a->vacant, capacity * sizeof *vacant);
  if (!vacant) return false;
  a->vacant = vacant;
  a->capacity = capacity;
  return true;
}

/* A directory index for a new chunk: a vacant one, or the next. */
static bool take_index(slot_arena *a, uint32_t *index) {
  if (a->vacant_count) {
    *index = a->vacant[--a->vacant_count];
    return true;
  }
  if (a->count == SLOT_CHUNKS_MAX) return false;
  if (a->count == a->capacity && !grow_directory(a)) return false;
  *index = a->count;
  a->chunks[a->count] = NULL;
  a->resume_gen[a->count++] = 1;
  return true;
}

/* A new block of chunks. Each chunk must be aligned to its size (a slot
 * finds its chunk by masking its address): one chunk more than the block's
 * is allocated, and the first aligned address used. An aligned_alloc per
 * chunk would cost glibc a page beside each. */
static bool add_block(slot_arena *a) {
  if (a->block_count == a->block_capacity) {
    uint32_t capacity = a->block_capacity ? 2 * a->block_capacity : DIRECTORY_MIN;
    void **blocks = realloc(a->blocks, capacity * sizeof *blocks);
    if (!blocks) return false;
    a->blocks = blocks;
    a->block_capacity = capacity;
  }
  void *block = malloc((SLOT_BLOCK_CHUNKS + 1) * SLOT_CHUNK_BYTES);
  if (!block) return false;
  a->blocks[a->block_count++] = block;
  uintptr_t first = ((uintptr_t)block + SLOT_CHUNK_BYTES - 1) & ~(uintptr_t)(SLOT_CHUNK_BYTES - 1);
  a->next_in_block = (slot_chunk *)first;
  a->block_chunks_left = SLOT_BLOCK_CHUNKS;
  return true;
}

/* A chunk's memory: a spare one, or the next of the last block. */
static slot_chunk *take_chunk_memory(slot_arena *a) {
  slot_chunk *chunk = a->spare;
  if (chunk) {
    a->spare = chunk->record.next_of_owner;
    return chunk;
  }
  if (!a->block_chunks_left && !add_block(a)) return NULL;
  a->block_chunks_left--;
  return a->next_in_block++;
}

/* A directory entry whose generations ran out is never used again. */
static void vacate(slot_arena *a, slot_chunk *chunk) {
  uint32_t index = chunk->record.index;
  a->chunks[index] = NULL;
  a->resume_gen[index] = chunk->record.next_gen;
  if (chunk->record.next_gen) a->vacant[a->vacant_count++] = index;
  chunk->record.next_of_owner = a->spare;
  a->spare = chunk;
}

static void give_free_slots(slot_owner *owner, slot_chunk *chunk) {
  for (uint32_t place = SLOT_CHUNK_SIZE - 1; place >= 1; place--) {
    slot *s = &chunk->slots[place];
    if (s->use != SLOT_FREE) continue;
    s->node.link.next = owner->free ? &owner->free->node.link : NULL;
    owner->free = s;
  }
}

static bool add_chunk(slot_arena *a, slot_owner *owner) {
  uint32_t index;
  if (!take_index(a, &index)) return false;
  slot_chunk *chunk = take_chunk_memory(a);
  if (!chunk) {
    a->vacant[a->vacant_count++] = index;
    return false;
  }
  memset(chunk, 0, sizeof *chunk);
  chunk->record = (slot_chunk_record){
      .owner = owner, .next_of_owner = owner->chunks, .index = index,
      .next_gen = a->resume_gen[index], .owner_first_gen = a->resume_gen[index]};
  owner->chunks = chunk;
  a->chunks[index] = chunk;
  give_free_slots(owner, chunk);
  return true;
}

/* ---- slots ------------------------------------------------------------- */

static slot *pop_free(slot_owner *owner) {
  slot *s = owner->free;
  owner->free = s->node.link.next ? (slot *)(void *)s->node.link.next : NULL;
  return s;
}

slot *slot_reserve(slot_arena *a, slot_owner *owner, uint32_t *number, uint32_t *gen) {
  slot *s;
  slot_chunk_record *record;
  do {                                          /* skipping chunks whose generations ran out */
    if (!owner->free && !add_chunk(a, owner)) return NULL;
    s = pop_free(owner);
    record = &slot_chunk_of(s)->record;
  } while (record->next_gen == 0);
  memset(&s->node, 0, sizeof s->node);
  s->gen = record->next_gen++;
  s->use = SLOT_RESERVED;
  s->drains = 0;
  record->busy++;
  *number = slot_number(s);
  *gen = s->gen;
  return s;
}

void slot_free(slot_arena *a, slot *s) {
  slot_chunk *chunk = slot_chunk_of(s);
  slot_owner *owner = chunk->record.owner;
  s->use = SLOT_FREE;
  chunk->record.busy--;
  if (!owner) {
    if (chunk->record.busy == 0) vacate(a, chunk);
  } else if (chunk->record.next_gen) {        /* else its generations ran out */
    s->node.link.next = owner->free ? &owner->free->node.link : NULL;
    owner->free = s;
  }
}

/* The slots its owner's going ends: all but those drains hold. */
static void drop_unheld(slot_chunk *chunk) {
  for (uint32_t place = 1; place < SLOT_CHUNK_SIZE; place++) {
    slot *s = &chunk->slots[place];
    if (s->use == SLOT_FREE || (s->use == SLOT_LIVE && s->drains)) continue;
    s->use = SLOT_FREE;
    chunk->record.busy--;
  }
}

void slot_owner_release(slot_arena *a, slot_owner *owner) {
  if (!owner->attached) return;
  owner->attached = false;
  slot_chunk *chunk = owner->chunks;
  while (chunk) {
    slot_chunk *next = chunk->record.next_of_owner;
    drop_unheld(chunk);
    chunk->record.owner = NULL;
    chunk->record.next_of_owner = NULL;
    if (chunk->record.busy == 0) vacate(a, chunk);
    chunk = next;
  }
  owner->chunks = NULL;
  owner->free = NULL;
  if (--a->owners == 0 && a->closed) free_memory(a);
}
