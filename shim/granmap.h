/* granmap.h - lock-free map of tracked allocations by address (granmap.c).
 * Thread-safe.  Nodes are pl_range (rangemap.h); their stack_id, cached and
 * gen fields belong to the caller (hostmem.c). */
#ifndef PL_GRANMAP_H
#define PL_GRANMAP_H

#include "pl_internal.h"
#include "rangemap.h"

/* Size the granules from PAGELOCK_TRACK_MIN (at least 4 KiB); false when
 * the table cannot be mapped (nothing is tracked then). */
bool pl_granmap_init(size_t track_min);
/* Granule size, 0 before init: ranges smaller than this are not tracked. */
size_t pl_granmap_granule(void);
/* Track [base, base+size), first erasing any stale overlapping range.
 * Returns the node, or NULL when it could not be tracked. */
pl_range *pl_granmap_insert(uintptr_t base, size_t size);
#define PL_ADDR_BITS 48
#define PL_LEAF_BITS 18

/* One cache line per granule: neighbouring granules often hold allocations
 * of different threads (mmap places them side by side), and sharing a line
 * would make their CAS traffic bounce it between cores.  Leaves are mapped
 * lazily and only touched pages become resident. */
typedef struct pl_gslot {
  pl_range *_Atomic s[2];
  char pad[64 - 2 * sizeof(void *)];
} pl_gslot;

extern unsigned pl_gm_shift;
extern size_t pl_gm_top_len;
extern pl_gslot *_Atomic *pl_gm_top;

/* The tracked range containing p, or NULL.  Two loads, no lock; inline
 * because every free() of the program asks. */
static inline pl_range *pl_granmap_find(uintptr_t p) {
  pl_gslot *_Atomic *top = pl_gm_top;
  if (top == NULL) return NULL;
  uintptr_t g = p >> pl_gm_shift;
  size_t hi = g >> PL_LEAF_BITS;
  if (hi >= pl_gm_top_len) return NULL;
  pl_gslot *leaf = atomic_load_explicit(&top[hi], memory_order_acquire);
  if (leaf == NULL) return NULL;
  pl_gslot *s = &leaf[g & (((uintptr_t)1 << PL_LEAF_BITS) - 1)];
  for (int k = 0; k < 2; k++) {
    pl_range *r = atomic_load_explicit(&s->s[k], memory_order_acquire);
    if (r && p >= r->base && p - r->base < r->size) return r;
  }
  return NULL;
}
/* Forget the range starting exactly at base; false if none. */
bool pl_granmap_erase(uintptr_t base);
/* Forget every range overlapping [p, p+n). */
void pl_granmap_erase_overlap(uintptr_t p, size_t n);
size_t pl_granmap_count(void);
/* Every node sits in exactly the granules it covers, once (tests). */
bool pl_granmap_check(void);
void pl_granmap_atfork_child(void);

#endif
