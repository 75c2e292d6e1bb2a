/*
 * slot_arena.h — timeouts in C memory, named by a slot number and a
 * generation: LuaJIT's binding (lhwt_ffi.c) keeps its timeouts here, and a
 * Timeout handle is the pair (slot, gen). No Lua, no threads.
 *
 * An arena (one per lua_State) hands out slots in chunks: 4 KiB, aligned to
 * their size, whose first 64 B are the chunk's own record, so that a slot
 * finds its chunk by masking its address. Each chunk belongs to one owner (a
 * timer queue), so stopping a queue walks its own slots only. A slot's generation is new each time it is handed
 * out, so a handle kept after its timeout ended never matches the slot's next
 * use: the generations of a chunk come from one counter that never goes
 * back, even when the chunk's memory is freed and its place in the directory
 * reused (the counter's next value is kept there); a chunk whose counter
 * would wrap hands out no more slots. Memory: 65 B a slot (64, and the
 * chunk's record shared by 63), plus 16 B a chunk in the directory. Chunks
 * come from blocks of SLOT_BLOCK_CHUNKS, and a freed chunk's memory is kept
 * for the next chunk: the arena holds what its timers held at their most,
 * until slot_arena_free.
 *
 * Lifetime: a slot is FREE, RESERVED (handed out, not yet armed), LIVE
 * (armed once: the engine may hold it, or drains that took it may) or KEPT
 * (ended, kept until its owner goes). It goes back to FREE by slot_free,
 * when the engine has let go and no drain holds it. When an owner goes
 * (slot_owner_release), its slots are freed but those drains hold, which
 * are orphans: their chunks are freed when the last is.
 */
#ifndef HWT_SLOT_ARENA_H
#define HWT_SLOT_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

#define SLOT_BLOCK_CHUNKS 64   /* 256 KiB a block */
#define SLOT_CHUNK_BITS 6
#define SLOT_CHUNK_SIZE (1u << SLOT_CHUNK_BITS)     /* slots[0] is the chunk's record */
/* A slot's number is its chunk's index * SLOT_CHUNK_SIZE + its place (1..63),
 * so numbers start at 1 (Lua arrays); the two bits above them are what a
 * handle records when its timeout ends. */
#define SLOT_NUMBER_BITS 30
#define SLOT_NUMBER_MAX ((UINT32_C(1) << SLOT_NUMBER_BITS) - 1)
#define SLOT_CHUNKS_MAX (SLOT_NUMBER_MAX / SLOT_CHUNK_SIZE)

/* KEPT: ended, but kept for its owner's life (what a stop hands back). */
enum slot_use { SLOT_FREE, SLOT_RESERVED, SLOT_LIVE, SLOT_KEPT };

typedef struct slot {
  timeout node;                 /* first: engine pointers convert back */
  uint32_t gen;                 /* the handle's; 0 while free */
  uint16_t drains;              /* drains that took it and have not finished it */
  uint8_t use;                  /* enum slot_use */
  uint8_t shape;                /* how its task is called (the binding's) */
} slot;
_Static_assert(sizeof(slot) == 64, "a slot is one cache line");

typedef struct slot_owner slot_owner;

typedef struct slot_chunk_record {
  slot_owner *owner;            /* NULL once its owner went: its live slots are orphans */
  union slot_chunk *next_of_owner;
  uint32_t index;               /* in the directory */
  uint32_t next_gen;            /* the next slot handed out gets it; 0: none left */
  uint32_t owner_first_gen;     /* generations below it were handed out for an earlier owner */
  uint32_t busy;                /* slots not FREE */
} slot_chunk_record;

typedef union slot_chunk {
  slot_chunk_record record;
  slot slots[SLOT_CHUNK_SIZE];  /* from 1 */
} slot_chunk;
#define SLOT_CHUNK_BYTES sizeof(slot_chunk)
_Static_assert(sizeof(slot_chunk) == 4096, "a chunk is a page");

/* A queue's part: its chunks and its free slots (linked through node.link.next). */
struct slot_owner {
  slot_chunk *chunks;
  slot *free;
  bool attached;                /* from slot_owner_attach to slot_owner_release */
};

typedef struct slot_arena {
  slot_chunk **chunks;          /* the directory; NULL where a chunk was freed */
  uint32_t *resume_gen;         /* a freed chunk's next_gen, for the next chunk in its place */
  uint32_t *vacant;             /* directory indexes whose chunk was freed */
  uint32_t count, capacity, vacant_count;
  void **blocks;                /* the memory chunks come from (see take_chunk_memory) */
  uint32_t block_count, block_capacity, block_chunks_left;
  slot_chunk *next_in_block;    /* the next chunk the last block has not handed out */
  slot_chunk *spare;            /* freed chunks, linked through record.next_of_owner */
  unsigned owners;              /* attached and not yet released */
  bool closed;                  /* slot_arena_close: its memory goes with the last owner */
} slot_arena;

void slot_arena_init(slot_arena *a);
/* The arena's user goes (lua_close): its memory is freed now if no owner
 * is attached, else by the last slot_owner_release. Until then owners may
 * still walk their chunks; slot numbers find nothing once it is freed. */
void slot_arena_close(slot_arena *a);

/* An owner starts using the arena (slot_owner_release ends that). */
void slot_owner_attach(slot_arena *a, slot_owner *owner);

/* A FREE slot of owner's, made RESERVED with a new generation; its number
 * and generation in *number and *gen. NULL when memory (or the slot numbers)
 * ran out. */
slot *slot_reserve(slot_arena *a, slot_owner *owner, uint32_t *number, uint32_t *gen);
/* Back to FREE; a slot of a chunk whose owner went is freed with its chunk
 * when it was the chunk's last. */
void slot_free(slot_arena *a, slot *s);

/* The slot `number` while its generation is `gen` and it is not FREE, else NULL. */
slot *slot_find(const slot_arena *a, uint32_t number, uint32_t gen);
/* The slot `number`, in whatever use (number from slot_reserve). */
slot *slot_at(const slot_arena *a, uint32_t number);
/* The slot's number. */
uint32_t slot_number(const slot *s);
/* The chunk a slot is in. */
slot_chunk *slot_chunk_of(const slot *s);
/* The owner that handed out (number, gen), while it has not gone; NULL otherwise. */
slot_owner *slot_owner_of(const slot_arena *a, uint32_t number, uint32_t gen);

/* The owner goes (its engine queue already destroyed): every slot no drain
 * holds is freed, chunks left without a busy slot too; the rest are kept
 * until their orphans (slots drains hold) are freed. A second call does
 * nothing. */
void slot_owner_release(slot_arena *a, slot_owner *owner);

static inline slot *slot_of_timeout(timeout *t) { return (slot *)(void *)t; }

#endif
