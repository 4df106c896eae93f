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

/* Ranges of at most this many granules are linked only into the granule
 * where they start (one compare-and-swap to track or forget them); longer
 * ones into every granule they cover, so a lookup never scans further back
 * than this. */
#define PL_GM_SPAN 16

extern unsigned pl_gm_shift;
extern size_t pl_gm_top_len;
extern pl_gslot *_Atomic *pl_gm_top;

/* Node fields read by one thread while another may be recycling the node
 * (nodes are reused, never unmapped): relaxed atomic accesses, plain moves
 * on x86-64 and aarch64, and no data race. */
#define PL_RBASE(r) __atomic_load_n(&(r)->base, __ATOMIC_RELAXED)
#define PL_RSIZE(r) __atomic_load_n(&(r)->size, __ATOMIC_RELAXED)
#define PL_RSPANS(r) __atomic_load_n(&(r)->spans, __ATOMIC_RELAXED)

/* The slots of granule g, or NULL where no leaf is mapped. */
static inline pl_gslot *pl_gm_slot(uintptr_t g) {
  pl_gslot *_Atomic *top = pl_gm_top;
  size_t hi = g >> PL_LEAF_BITS;
  if (top == NULL || hi >= pl_gm_top_len) return NULL;
  pl_gslot *leaf = atomic_load_explicit(&top[hi], memory_order_acquire);
  return leaf ? &leaf[g & (((uintptr_t)1 << PL_LEAF_BITS) - 1)] : NULL;
}

/* The tracked range starting exactly at p, or NULL: the question every
 * free() of the program asks, so one slot load, inline, no lock. */
static inline pl_range *pl_granmap_find_base(uintptr_t p) {
  pl_gslot *s = pl_gm_slot(p >> pl_gm_shift);
  if (s == NULL) return NULL;
  for (int k = 0; k < 2; k++) {
    pl_range *r = atomic_load_explicit(&s->s[k], memory_order_acquire);
    if (r && PL_RBASE(r) == p) return r;
  }
  return NULL;
}

/* The tracked range containing p, or NULL.  No lock: p's granule, then
 * back at most PL_GM_SPAN granules to the nearest range start. */
pl_range *pl_granmap_find(uintptr_t p);
/* Forget the range starting exactly at base; false if none. */
bool pl_granmap_erase(uintptr_t base);
/* Forget every range overlapping [p, p+n). */
void pl_granmap_erase_overlap(uintptr_t p, size_t n);
size_t pl_granmap_count(void);
/* Every node sits in exactly the granules it covers, once (tests). */
bool pl_granmap_check(void);
void pl_granmap_atfork_child(void);

#endif
