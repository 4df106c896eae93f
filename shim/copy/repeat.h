/* repeat.h - the repeat fast path (repeat.c): a copy the thread made
 * before, exactly (the same call, the same call path, nothing its record
 * rests on moved), takes no classification, no route, no stack and no
 * record of its own: it adds to the run its first copy opened (run.h). */
#ifndef PL_REPEAT_H
#define PL_REPEAT_H

#include "copycall.h"
#include "run.h"
#include "trace.h"

/* Larger copies are each recorded: a 256 KiB pageable copy takes ~35 us
 * on the GPU hosts, of which the whole path's ~0.2 us is 0.6%. */
#define PL_RUN_BYTES (256u << 10)

/* Copy c may repeat a run, or open one: a 1D copy of at most PL_RUN_BYTES
 * on a thread with a ring (pl_my_runs is NULL without one, and under
 * PAGELOCK_REPEATS=each). */
static inline bool pl_repeat_may(const pl_copy *c) {
  return pl_my_runs != NULL && c->args == NULL && c->bytes <= PL_RUN_BYTES;
}

/* The run copy c repeats, if this thread has one open; a run that c
 * matches but that cannot take it is written and closed, and c takes the
 * whole way (NULL). */
pl_run *pl_repeat_find(const pl_copy *c);
/* Copy c as one more of run r: the native call, and the run's count. */
CUresult pl_repeat_copy(pl_copy *c, pl_run *r);

/* What a run opened from a copy that took the whole way rests on: the
 * registry's stamp and the device memo's generation, read before that
 * copy's answers were asked (a change meanwhile leaves the run already
 * stale), the flags its entry point set, whether the mode registers, and
 * what tells its call path again. */
typedef struct pl_repeat_basis {
  uint64_t hm_stamp;
  unsigned dev_gen;
  uint32_t flags;
  bool autopin;
  pl_stack_check check;
} pl_repeat_basis;
/* A slot for the run of the copy that just took the whole way: a closed
 * one, or the one next in turn, written and closed first; NULL when every
 * run is busy. */
pl_run *pl_repeat_slot(void);
/* Open a run in `slot` from copy c, whose record is *proto (its first-use
 * flag is cleared: the repeats are not). */
void pl_repeat_open(pl_run *slot, const pl_copy *c, const pl_repeat_basis *b,
                    pagelock_rec_copy *proto);

#endif
