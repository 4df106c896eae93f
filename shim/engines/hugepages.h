/* hugepages.h - transparent huge pages for blocks that may be registered
 * (hugepages.c): a registration costs less in 2 MiB pages. */
#ifndef PL_HUGEPAGES_H
#define PL_HUGEPAGES_H

#include "pl_internal.h"

/* Read PAGELOCK_MODE, PAGELOCK_HUGEPAGES and the kernel's transparent
 * huge page mode, once, before allocations are tracked (hook_alloc.c). */
void pl_huge_init(void);
/* A tracked block [p, p+n) of the malloc family that is a mapping of its
 * own (a glibc chunk served by mmap) was just made: in register and auto
 * modes, under the kernel's `madvise` mode, advise transparent huge pages
 * on its 2 MiB-aligned interior when it is at least PAGELOCK_HUGEPAGES
 * bytes, so that a later registration of it costs less.  One system
 * call, no lock, no allocation: safe inside the allocation hooks.  Keeps
 * errno. */
void pl_huge_advise(void *p, size_t n);

#endif
