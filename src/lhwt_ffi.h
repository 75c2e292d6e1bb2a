/*
 * lhwt_ffi.h — what LuaJIT's two binding files share: the structs Lua sees
 * through the FFI (a Timeout, a step, a drain), the C ABI's table and the
 * slot helpers lhwt_ffi.c gives lhwt_ffi_holds.c. LuaJIT 2.1 only.
 */
#ifndef HWT_LHWT_FFI_H
#define HWT_LHWT_FFI_H

#include "lhwt.h"
#include "slot_arena.h"

#define LUA_TCDATA 10           /* LuaJIT's type number of a cdata (lj_obj.h) */

enum { END_RAN = 1, END_CANCELLED = 2 };   /* in a handle, above its slot number */
#define ARM_TELL 16                        /* or'ed into TQ_OK: tell the watcher */
#define RESET_ENDED 32                     /* the timeout ended: nothing to reset */
#define TAKE_TELL UINT32_MAX               /* a re-armed periodic's watcher first */

/* A Timeout: its slot number (and, once it ended, how: END_* << the number's
 * bits), its generation, and once it ended its deadline then (on the
 * timer's clock; while it lives the slot has it). */
typedef struct hwt_handle {
  uint32_t slot;
  uint32_t gen;
  double ended_at;              /* its deadline, once it ended */
} hwt_handle;

/* What a take or a finish tells Lua besides its result: the slot it
 * released (0: none), how that one ended and its deadline, and the call
 * shape of the slot it took. */
typedef struct hwt_step {
  uint32_t released;
  int32_t end_bits;
  double deadline;
  int32_t shape;
} hwt_step;

typedef struct ffi_drain {
  lhwt_queue *tm;               /* its queue userdata: user value 1 */
  uint64_t seq_limit;           /* a poll: what was scheduled before it began */
  uint64_t current_seq;         /* the current's seq when taken */
  uint64_t handed_seq;          /* a hand-off: its timeout's seq when handed */
  double taken;                 /* how many it took */
  uint32_t current;             /* the slot taken and not finished; 0: none */
  uint32_t handed, handed_gen;  /* a hand-off's slot until it starts */
  bool is_handoff;
} ffi_drain;

typedef struct hwt_abi {
  int32_t (*reserve)(lhwt_queue *, hwt_handle *, int32_t);
  int32_t (*arm)(lhwt_queue *, uint32_t, double, double);
  int32_t (*cancel)(slot_arena *, hwt_handle *);
  int32_t (*reset)(slot_arena *, uint32_t, uint32_t, double);
  int32_t (*state)(slot_arena *, uint32_t, uint32_t);
  double (*remaining)(slot_arena *, uint32_t, uint32_t);
  double (*deadline)(slot_arena *, uint32_t, uint32_t);
  int32_t (*kept)(slot_arena *, uint32_t, uint32_t);
  uint32_t (*take)(ffi_drain *, hwt_step *);
  void (*finish)(ffi_drain *, hwt_step *);
  uint32_t (*current)(ffi_drain *);
  double (*taken)(ffi_drain *);
} hwt_abi;

/* lhwt_ffi.c: the ABI, its declarations for ffi.cdef, and the slot helpers. */
extern const hwt_abi ffi_abi_table;
extern const char ffi_cdef[];
lhwt_queue *queue_of_owner(slot_owner *owner);
slot *live_slot(slot_arena *a, uint32_t number, uint32_t gen);
int end_bits(slot *s);
double ended_deadline(slot *s);
void release_into(slot_arena *a, slot *s, hwt_step *step);
void mark_ended(hwt_handle *h, const hwt_step *step);
bool finish_current(ffi_drain *d, hwt_step *step);

#endif
