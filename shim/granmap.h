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
/* The tracked range containing p, or NULL.  Two loads, no lock. */
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
