/* hostmem.h - the allocation registry (hostmem.c over granmap.c and
 * rangemap.c): what kind of memory a pointer is, and where it came from. */
#ifndef PL_HOSTMEM_H
#define PL_HOSTMEM_H

#include "pl_internal.h"

/* Classify one pointer: the program's own pinned ranges first, then the
 * cached driver answer of the tracked allocation containing it, else the
 * driver's attribute query.  Never holds the registry lock across a
 * driver call. */
int pl_hostmem_classify(CUdeviceptr p);
/* The same, also giving the allocation site (stack id, 0 unknown) and
 * whether this is the first time the tracked allocation holding p was
 * classified: the first copy of a buffer the program allocated anew. */
int pl_hostmem_classify_site(CUdeviceptr p, uint32_t *alloc_stack, bool *fresh);
/* Moves whenever an answer of pl_hostmem_classify_site may change: the
 * program pins or unpins, maps or unmaps, or an allocation is tracked.
 * The same stamp, the same answer for any pointer asked before (but for
 * a registration the hooks never saw: see pl_hostmem_spend). */
uint64_t pl_hostmem_stamp(void);
/* n more answers for p's page taken from this thread's memo of untracked
 * pageable pages without asking it (a run's copies, copy.c): the memo's
 * bound on how long a registration the hooks never saw goes unnoticed
 * holds for them too. */
void pl_hostmem_spend(CUdeviceptr p, uint32_t n);
/* Size the tracked-range table for allocations of at least track_min
 * bytes; returns the smallest size that can be tracked (0: none). */
size_t pl_hostmem_init(size_t track_min);
/* Tracked allocations (heap/mmap) from hook_alloc.c.  Lock-free. */
void pl_hostmem_track(void *p, size_t n, uint32_t stack_id);
/* Where a tracked allocation came from (the low bits of its kind), which
 * decides whether the shim may page-lock it (autopin.c). */
enum pl_origin {
  PL_ORIGIN_HEAP = 0,    /* the malloc family */
  PL_ORIGIN_MMAP = 1,    /* anonymous private writable mmap */
  PL_ORIGIN_SHARED = 2,  /* MAP_SHARED or file-backed: never registered */
  PL_ORIGIN_MAPONLY = 3, /* a mapping while another allocator than glibc
                            serves malloc (its arenas reach mmap too, and it
                            releases them under its own lock): never */
  PL_ORIGIN_MASK = 3,
  PL_ALLOC_REG_FAILED = 4, /* the driver refused to register it: staged */
  PL_ALLOC_OWN_PAGES = 8,  /* a mapping of its own (a glibc mmapped chunk, an
                              anonymous mmap): no other allocation shares
                              the pages its bytes lie in */
};
/* The same, with its origin and PL_ALLOC_OWN_PAGES when it applies. */
void pl_hostmem_track_as(void *p, size_t n, uint32_t stack_id, int origin);
/* The tracked allocation containing p: its base, size and kind (origin
 * and PL_ALLOC_* flags).  Lock-free. */
bool pl_hostmem_lookup(uintptr_t p, uintptr_t *base, size_t *size, int *kind);
/* Set PL_ALLOC_* flags on the tracked allocation [base, base+size), if it
 * is still tracked (a new allocation starts with none). */
void pl_hostmem_mark(uintptr_t base, size_t size, int flags);
/* The shim page-locks [p, p+n) itself (from before the driver call until
 * after the undo): such memory classifies as pageable.  add: false when
 * it cannot be recorded (then it must not be registered). */
bool pl_hostmem_shim_add(uintptr_t p, size_t n);
void pl_hostmem_shim_remove(uintptr_t p);
bool pl_hostmem_shim_has(uintptr_t p);
/* Forget the allocation starting at p; false if it was not tracked. */
bool pl_hostmem_untrack(void *p);
/* Forget every tracked allocation overlapping [p, p+n) (munmap). */
void pl_hostmem_untrack_range(void *p, size_t n);
/* The program page-locked [p, p+n) (kind PINNED or REGISTERED), or undid
 * it; any change invalidates every cached classification. */
void pl_hostmem_pinned_add(void *p, size_t n, int kind);
void pl_hostmem_pinned_remove(void *p);
/* Something may have changed what kind of memory some page is (an mmap,
 * munmap or mremap): drop every cached classification.  [gone, gone+n):
 * pages that may be unmapped or replaced (n 0: none). */
void pl_hostmem_invalidate(const void *gone, size_t n);
/* Registry invariants hold; counts of tracked and pinned ranges. */
bool pl_hostmem_check(size_t *tracked, size_t *pinned);
void pl_hostmem_atfork_prepare(void);
void pl_hostmem_atfork_parent(void);
void pl_hostmem_atfork_child(void);

#endif
