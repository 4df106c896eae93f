/* hook_hostalloc.c - the program's own page-locking calls.
 *
 * cudaHostAlloc, cudaMallocHost and cudaHostRegister end up in these driver
 * entry points.  Recording their ranges lets the classifier answer "pinned"
 * without asking the driver, and any change invalidates every cached answer
 * (hostmem.c), so a buffer the program registers after its first copy is
 * seen as pinned from then on.  The calls themselves pass through unchanged
 * and their results are returned as they are. */
#define _GNU_SOURCE
#include "pl_internal.h"

typedef CUresult (*pl_hostalloc_t)(void **, size_t, unsigned int);
typedef CUresult (*pl_allochost_t)(void **, size_t);
typedef CUresult (*pl_ptr_t)(void *);
typedef CUresult (*pl_register_t)(void *, size_t, unsigned int);

PL_EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
  pl_hostalloc_t f = (pl_hostalloc_t)pl_hook_real(PL_HOOK_cuMemHostAlloc);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(pp, n, flags);
  if (r == CUDA_SUCCESS && pp && *pp && !pl_in_shim && pl_active())
    pl_hostmem_pinned_add(*pp, n, PAGELOCK_MEM_PINNED);
  return r;
}

PL_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t n) {
  pl_allochost_t f = (pl_allochost_t)pl_hook_real(PL_HOOK_cuMemAllocHost_v2);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(pp, n);
  if (r == CUDA_SUCCESS && pp && *pp && !pl_in_shim && pl_active())
    pl_hostmem_pinned_add(*pp, n, PAGELOCK_MEM_PINNED);
  return r;
}

PL_EXPORT CUresult cuMemFreeHost(void *p) {
  pl_ptr_t f = (pl_ptr_t)pl_hook_real(PL_HOOK_cuMemFreeHost);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  /* Forget first: once freed, the address can be reused by another thread. */
  if (p && !pl_in_shim && pl_active()) pl_hostmem_pinned_remove(p);
  return f(p);
}

PL_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
  pl_register_t f = (pl_register_t)pl_hook_real(PL_HOOK_cuMemHostRegister_v2);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(p, n, flags);
  if (r == CUDA_SUCCESS && p && !pl_in_shim && pl_active())
    pl_hostmem_pinned_add(p, n, PAGELOCK_MEM_REGISTERED);
  return r;
}

PL_EXPORT CUresult cuMemHostUnregister(void *p) {
  pl_ptr_t f = (pl_ptr_t)pl_hook_real(PL_HOOK_cuMemHostUnregister);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(p);
  if (r == CUDA_SUCCESS && p && !pl_in_shim && pl_active()) pl_hostmem_pinned_remove(p);
  return r;
}

void *const pl_hostalloc_wrappers[PL_HOOK_COUNT - PAGELOCK_API_COUNT] = {
#define PL_WRAPPER(n) (void *)n,
    PL_HOSTALLOC_LIST(PL_WRAPPER)
#undef PL_WRAPPER
};
