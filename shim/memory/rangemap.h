/* rangemap.h - ordered map of disjoint address ranges (see rangemap.c).
 * Not thread-safe: all maps share one node pool, so every call on any map
 * must hold the one lock that guards them all (hostmem.c's). */
#ifndef PL_RANGEMAP_H
#define PL_RANGEMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pl_range {
  uintptr_t base;
  size_t size;
  uint32_t stack_id; /* allocation site, 0 unknown */
  uint32_t gen;      /* pinned-status generation the cache was taken at */
  uint8_t cached;    /* pagelock_mem from the driver, 0 = not asked yet */
  uint8_t kind;      /* owner-defined */
  uint8_t spans;     /* granmap.c: linked into every granule it covers */
  uint32_t prio;
  struct pl_range *left, *right;
} pl_range;

typedef struct pl_rangemap {
  pl_range *root;
  size_t count;
} pl_rangemap;

/* The range containing p, or NULL. */
pl_range *pl_rangemap_find(const pl_rangemap *m, uintptr_t p);
/* Insert [base, base+size), first erasing every range it overlaps.
 * Returns the node (to fill in) or NULL when out of memory. */
pl_range *pl_rangemap_insert(pl_rangemap *m, uintptr_t base, size_t size);
/* Erase the range starting exactly at base; false if there is none. */
bool pl_rangemap_erase(pl_rangemap *m, uintptr_t base);
/* Erase every range overlapping [p, p+n); returns how many. */
size_t pl_rangemap_erase_overlap(pl_rangemap *m, uintptr_t p, size_t n);
/* Structural invariants hold (ordered, disjoint, heap, count). */
bool pl_rangemap_check(const pl_rangemap *m);
void pl_rangemap_clear(pl_rangemap *m);

#endif
