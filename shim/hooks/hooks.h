/* hooks.h - what the hook files (hook_*.c, hooks.c) tell each other and
 * start-up (init.c).  Their exported names are the driver's and libc's
 * own, declared by cuda.h and the C library. */
#ifndef PL_HOOKS_H
#define PL_HOOKS_H

#include "pl_internal.h"

/* ---- hooks.c: the wrapper of every wrapped driver symbol ---------------- */

/* Our wrapper for hook id `id`. */
void *pl_hook_wrapper(int id);
/* Hook id of an exact driver symbol name, or -1. */
int pl_hook_find_name(const char *name);
/* The wrappers, defined next to them (hook_copy.c, hook_hostalloc.c). */
extern void *const pl_copy_wrappers[PAGELOCK_API_COUNT];
extern void *const pl_hostalloc_wrappers[PL_HOOK_COUNT - PAGELOCK_API_COUNT];

/* ---- hook_cupti.c: the CUPTI entry points -------------------------------- */

/* What dlsym hands out for a real cuptiSubscribe: our wrapper, which gives
 * CUPTI over to the program (remembering `real` to forward to). */
void *pl_cupti_subscribe_wrapper(void *real);
/* The same for cuptiActivityRegisterCallbacks. */
void *pl_cupti_register_wrapper(void *real);

/* ---- hook_alloc.c ------------------------------------------------------- */

/* Resolve the next mmap, munmap and mremap, and the malloc family, first
 * thing in the constructor; the mmap hooks use the raw system calls until
 * then (they must never call dlsym: an allocator may call them holding a
 * mutex that dlsym's own allocations need). */
void pl_alloc_init(void);
/* Start tracking allocations (from the constructor, after the config). */
void pl_alloc_enable(void);

/* ---- hook_exit.c -------------------------------------------------------- */

/* _exit and _Exit run `finish` (init.c's, which knows what ending the
 * trace takes), then the next _exit; resolved in the constructor. */
void pl_exit_hook_arm(void (*finish)(void));

#endif
