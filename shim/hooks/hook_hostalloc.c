/* hook_hostalloc.c - the program's own page-locking calls, and its questions
 * about page-locked memory.
 *
 * cudaHostAlloc, cudaMallocHost and cudaHostRegister end up in these driver
 * entry points.  Recording their ranges lets the classifier answer "pinned"
 * without asking the driver, and any change invalidates every cached answer
 * (hostmem.c), so a buffer the program registers after its first copy is
 * seen as pinned from then on.
 *
 * Under PAGELOCK_MODE register and auto the shim page-locks some of the
 * program's pageable buffers itself (pinreg.c), and the program must not be
 * able to tell.  Asked about a pointer inside a shim-only registration, the
 * pointer queries answer what the driver answers about pageable memory: the
 * shim asks the driver the same question about a page of its own that is
 * never registered, so the error codes and default values are the driver's
 * own, whatever its version.  The program's register over such memory first
 * makes the shim's registration go (pl_pinreg_yield), so it gets the
 * driver's own answer and not CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED; its
 * unregister of such memory fails as for memory never registered and leaves
 * the shim's registration alone.  Everything else passes through unchanged:
 * a query costs one atomic load more (pl_pinreg_any) while the shim has
 * registered nothing.  Results are returned as they are. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/auxv.h>

#include "pl_internal.h"
#include "engines.h"
#include "hooks.h"
#include "hostmem.h"
#include "pinreg.h"

typedef CUresult (*pl_hostalloc_t)(void **, size_t, unsigned int);
typedef CUresult (*pl_allochost_t)(void **, size_t);
typedef CUresult (*pl_ptr_t)(void *);
typedef CUresult (*pl_register_t)(void *, size_t, unsigned int);
typedef CUresult (*pl_getflags_t)(unsigned int *, void *);
typedef CUresult (*pl_devptr_t)(CUdeviceptr *, void *, unsigned int);
typedef CUresult (*pl_devptr_v1_t)(CUdeviceptr_v1 *, void *, unsigned int);
typedef CUresult (*pl_getattr_t)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*pl_getattrs_t)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);

_Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "a device pointer holds a host address");

/* ---- the stand-in for pageable memory ------------------------------------ */

/* Static, so nobody tracks or registers it: not the shim (it registers only
 * allocations it saw being made), not the program.  Room for two whole
 * pages of up to 64 KiB (aarch64, ppc64le) at whatever address the loader
 * gives: glibc before 2.35 ignores a shared object's alignment above the
 * page size, so the pages are found at run time.  Never touched, so it
 * costs address space only. */
#define PL_PROBE_PAGE_MAX 65536
static char pl_probe_area[3 * PL_PROBE_PAGE_MAX];

typedef struct pl_probe {
  uintptr_t a, b;
} pl_probe;

/* Two never-registered addresses at p's offset in its page, one page apart.
 * Where the GPU can reach pageable memory (HMM, ATS) an address attribute
 * may answer with the address itself (the driver's documentation: "the
 * value returned will equal the input value ptr") or its page, and then the
 * answers for a and b differ by exactly b - a: that tells such an answer
 * from a fixed default (pl_probe_follow). */
static pl_probe pl_probe_for(uintptr_t p) {
  static uintptr_t page;
  uintptr_t pg = __atomic_load_n(&page, __ATOMIC_RELAXED);
  if (PL_UNLIKELY(pg == 0)) {
    pg = (uintptr_t)getauxval(AT_PAGESZ);
    if (pg == 0 || pg > PL_PROBE_PAGE_MAX || (pg & (pg - 1)) != 0) pg = 4096;
    __atomic_store_n(&page, pg, __ATOMIC_RELAXED);
  }
  uintptr_t base = ((uintptr_t)pl_probe_area + pg - 1) & ~(pg - 1);
  uintptr_t off = p & (pg - 1);
  return (pl_probe){.a = base + off, .b = base + pg + off};
}

/* p's answer from the answers va (for probe a) and vb (for probe b), both
 * `mask` wide: one that follows the address moves to p, any other is the
 * same for every pageable address and stays. */
static uint64_t pl_probe_follow(const pl_probe *pr, uintptr_t p, uint64_t va, uint64_t vb,
                                uint64_t mask) {
  if (((vb - va) & mask) != ((uint64_t)(pr->b - pr->a) & mask)) return va;
  return (va - pr->a + p) & mask;
}

/* The attributes whose value is an address in the queried range. */
static bool pl_attr_is_address(CUpointer_attribute a) {
  return a == CU_POINTER_ATTRIBUTE_DEVICE_POINTER || a == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
         a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || a == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR;
}

/* p lies in a registration of the shim's own: the program is told what it
 * would be told about pageable memory.  The shim's own calls (inside the
 * re-entry guard) see the truth. */
static inline bool pl_shim_only(uintptr_t p) {
  if (PL_LIKELY(!pl_pinreg_any())) return false;
  if (pl_shim_inside() || !pl_active()) return false;
  uintptr_t base;
  size_t len;
  return pl_pinreg_find(p, &base, &len);
}

/* ---- allocation and registration ----------------------------------------- */

PL_EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
  pl_hostalloc_t f = (pl_hostalloc_t)pl_hook_real(PL_HOOK_cuMemHostAlloc);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(pp, n, flags);
  if (r == CUDA_SUCCESS && pp && *pp && !pl_shim_inside() && pl_active())
    pl_hostmem_pinned_add(*pp, n, PAGELOCK_MEM_PINNED);
  return r;
}

PL_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t n) {
  pl_allochost_t f = (pl_allochost_t)pl_hook_real(PL_HOOK_cuMemAllocHost_v2);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(pp, n);
  if (r == CUDA_SUCCESS && pp && *pp && !pl_shim_inside() && pl_active())
    pl_hostmem_pinned_add(*pp, n, PAGELOCK_MEM_PINNED);
  return r;
}

PL_EXPORT CUresult cuMemFreeHost(void *p) {
  pl_ptr_t f = (pl_ptr_t)pl_hook_real(PL_HOOK_cuMemFreeHost);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  /* Forget first: once freed, the address can be reused by another thread. */
  if (p && !pl_shim_inside() && pl_active()) pl_hostmem_pinned_remove(p);
  return f(p);
}

/* Both versions: cudart asks for cuMemHostRegister at 6050 (the _v2), a
 * program that looks the bare name up gets the 4000 one. */
static CUresult pl_host_register(int id, void *p, size_t n, unsigned int flags) {
  pl_register_t f = (pl_register_t)pl_hook_real(id);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  /* The shim's registrations overlapping the range go first, and the range
   * is closed to the shim until the registry holds the program's own
   * (pinreg.c).  Also when the shim has registered nothing yet: a copy on
   * another thread may have its registration made between this check and
   * the program's call.  A range the driver refuses anyway (NULL, empty,
   * wrapping) is left to it. */
  if (p != NULL && n > 0 && n <= UINTPTR_MAX - (uintptr_t)p && !pl_shim_inside() && pl_active()) {
    long mode = pl_opt_long(PL_OPT_MODE);
    if (mode == PAGELOCK_MODE_REGISTER || mode == PAGELOCK_MODE_AUTO)
      pl_pinreg_yield((uintptr_t)p, n);
  }
  CUresult r = f(p, n, flags);
  if (r == CUDA_SUCCESS && p && !pl_shim_inside() && pl_active())
    pl_hostmem_pinned_add(p, n, PAGELOCK_MEM_REGISTERED);
  return r;
}

PL_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
  return pl_host_register(PL_HOOK_cuMemHostRegister_v2, p, n, flags);
}

PL_EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags) {
  return pl_host_register(PL_HOOK_cuMemHostRegister, p, n, flags);
}

PL_EXPORT CUresult cuMemHostUnregister(void *p) {
  pl_ptr_t f = (pl_ptr_t)pl_hook_real(PL_HOOK_cuMemHostUnregister);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  /* Inside a shim registration and not one the program made itself (only
   * the program's own registrations classify as REGISTERED: the driver's
   * answer never does): the driver's answer for memory never registered. */
  if (PL_UNLIKELY(pl_shim_only((uintptr_t)p)) &&
      pl_hostmem_classify((CUdeviceptr)(uintptr_t)p) != PAGELOCK_MEM_REGISTERED)
    return f((void *)pl_probe_for((uintptr_t)p).a);
  CUresult r = f(p);
  if (r == CUDA_SUCCESS && p && !pl_shim_inside() && pl_active()) pl_hostmem_pinned_remove(p);
  return r;
}

/* ---- questions about a pointer ------------------------------------------- */

PL_EXPORT CUresult cuMemHostGetFlags(unsigned int *pflags, void *p) {
  pl_getflags_t f = (pl_getflags_t)pl_hook_real(PL_HOOK_cuMemHostGetFlags);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  if (PL_LIKELY(!pl_shim_only((uintptr_t)p))) return f(pflags, p);
  return f(pflags, (void *)pl_probe_for((uintptr_t)p).a);
}

PL_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pd, void *p, unsigned int flags) {
  pl_devptr_t f = (pl_devptr_t)pl_hook_real(PL_HOOK_cuMemHostGetDevicePointer_v2);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  if (PL_LIKELY(!pl_shim_only((uintptr_t)p))) return f(pd, p, flags);
  pl_probe pr = pl_probe_for((uintptr_t)p);
  CUresult r = f(pd, (void *)pr.a, flags);
  CUdeviceptr vb = 0;
  if (r == CUDA_SUCCESS && pd != NULL && *pd != 0 && f(&vb, (void *)pr.b, flags) == CUDA_SUCCESS)
    *pd = (CUdeviceptr)pl_probe_follow(&pr, (uintptr_t)p, *pd, vb, UINT64_MAX);
  return r;
}

/* The 32-bit original, still exported by the driver: what a program that
 * looks the bare name up gets (cudart asks for the name at 3020, the _v2). */
PL_EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pd, void *p, unsigned int flags) {
  pl_devptr_v1_t f = (pl_devptr_v1_t)pl_hook_real(PL_HOOK_cuMemHostGetDevicePointer);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  if (PL_LIKELY(!pl_shim_only((uintptr_t)p))) return f(pd, p, flags);
  pl_probe pr = pl_probe_for((uintptr_t)p);
  CUresult r = f(pd, (void *)pr.a, flags);
  CUdeviceptr_v1 vb = 0;
  if (r == CUDA_SUCCESS && pd != NULL && *pd != 0 && f(&vb, (void *)pr.b, flags) == CUDA_SUCCESS)
    *pd = (CUdeviceptr_v1)pl_probe_follow(&pr, (uintptr_t)p, *pd, vb, UINT32_MAX);
  return r;
}

/* An address attribute the driver answered (nonzero) for probe a, in the
 * program's slot: asked again for probe b, and moved to p if it follows the
 * address.  Zero is the driver's "no such address" default, kept as is. */
static void pl_attr_follow(pl_getattrs_t f, CUpointer_attribute *a, void *slot, const pl_probe *pr,
                           uintptr_t p) {
  uint64_t va, vb = 0;
  memcpy(&va, slot, sizeof va);
  if (va == 0) return;
  void *data[1] = {&vb};
  if (f(1, a, data, pr->b) != CUDA_SUCCESS) return;
  va = pl_probe_follow(pr, p, va, vb, UINT64_MAX);
  memcpy(slot, &va, sizeof va);
}

PL_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) {
  pl_getattr_t f = (pl_getattr_t)pl_hook_real(PL_HOOK_cuPointerGetAttribute);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  if (PL_LIKELY(!pl_shim_only((uintptr_t)ptr))) return f(data, attr, ptr);
  pl_probe pr = pl_probe_for((uintptr_t)ptr);
  CUresult r = f(data, attr, pr.a);
  if (r == CUDA_SUCCESS && data != NULL && pl_attr_is_address(attr)) {
    uint64_t va, vb = 0;
    memcpy(&va, data, sizeof va);
    if (va != 0 && f(&vb, attr, pr.b) == CUDA_SUCCESS) {
      va = pl_probe_follow(&pr, (uintptr_t)ptr, va, vb, UINT64_MAX);
      memcpy(data, &va, sizeof va);
    }
  }
  return r;
}

/* cudaPointerGetAttributes (PyTorch's is_pinned) comes here: the runtime
 * looks this up with cuGetProcAddress. */
PL_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                          CUdeviceptr ptr) {
  pl_getattrs_t f = (pl_getattrs_t)pl_hook_real(PL_HOOK_cuPointerGetAttributes);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  if (PL_LIKELY(!pl_shim_only((uintptr_t)ptr))) return f(n, attrs, data, ptr);
  pl_probe pr = pl_probe_for((uintptr_t)ptr);
  CUresult r = f(n, attrs, data, pr.a);
  if (r != CUDA_SUCCESS || attrs == NULL || data == NULL) return r;
  for (unsigned int i = 0; i < n; i++)
    if (pl_attr_is_address(attrs[i]) && data[i] != NULL)
      pl_attr_follow(f, &attrs[i], data[i], &pr, (uintptr_t)ptr);
  return r;
}

/* ---- device allocation ----------------------------------------------------- */

typedef CUresult (*pl_memalloc_t)(CUdeviceptr *, size_t);

/* Only watched: a context's first device allocation says copies will
 * follow, and the staging pool starts building then (pool.c). */
PL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dp, size_t n) {
  pl_memalloc_t f = (pl_memalloc_t)pl_hook_real(PL_HOOK_cuMemAlloc_v2);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  CUresult r = f(dp, n);
  if (r == CUDA_SUCCESS && !pl_shim_inside() && pl_active()) pl_engines_device_alloc();
  return r;
}

void *const pl_hostalloc_wrappers[PL_HOOK_COUNT - PAGELOCK_API_COUNT] = {
#define PL_WRAPPER(n) (void *)n,
    PL_HOSTALLOC_LIST(PL_WRAPPER)
#undef PL_WRAPPER
};
