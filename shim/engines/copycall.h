/* copycall.h - one copy call of the program, as the engines are handed it:
 * what its wrapper knows (hook_copy.c), and what classification adds
 * (copy.c).  Apart from copy.h because every engine executes one. */
#ifndef PL_COPYCALL_H
#define PL_COPYCALL_H

#include "pl_internal.h"

/* Everything one copy call needs, filled by its wrapper.  The native thunk
 * reissues the exact original call from the saved arguments. */
typedef struct pl_copy pl_copy;
typedef CUresult (*pl_native_fn)(const pl_copy *c);

struct pl_copy {
  int api;
  uint32_t flags;       /* PAGELOCK_COPY_* known from the entry point */
  uint64_t seq;         /* the COPY record's correlation (set by pl_copy_exec) */
  int dir;              /* pagelock_dir, UNKNOWN until classified */
  CUdeviceptr dst, src; /* as passed; host pointers cast */
  size_t bytes;
  CUstream stream;
  void *callsite;
  const void *args; /* entry-point specific (2D/3D/batch params) */
  pl_native_fn native;
  /* filled by classification */
  uint8_t src_mem, dst_mem;
  uint8_t why;          /* pagelock_why: why a pageable copy was not registered */
  uint32_t alloc_stack; /* allocation site of the host side, 0 unknown */
};

#endif
