/* hostmem.c - what kind of memory a host pointer is, and where it came from.
 *
 * Two range maps under one lock:
 *  - tracked: heap and mmap allocations of at least PAGELOCK_TRACK_MIN bytes,
 *    with their allocation site (fed by hook_alloc.c);
 *  - pinned: host memory the program itself page-locked (cuMemHostAlloc,
 *    cuMemAllocHost, cuMemHostRegister; fed by hook_hostalloc.c).
 * The driver's pointer-attribute query stays the ground truth: a tracked
 * range caches the driver's answer, and any page-locking change anywhere
 * bumps a generation number that invalidates every cached answer, so the
 * cache can never outlive the truth.  The lock is never held across a
 * driver call. */
#define _GNU_SOURCE
#include <pthread.h>

#include "pl_internal.h"
#include "rangemap.h"

/* Adaptive: the critical sections are a few hundred nanoseconds, so under
 * contention from many allocating threads a short spin beats a futex sleep. */
static pthread_mutex_t pl_hm_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static pl_rangemap pl_tracked, pl_pinned;
static atomic_uint pl_pin_gen = 1;

/* Ask the driver (no lock held). */
static int pl_hostmem_query(CUdeviceptr p) {
  const pl_driver *d = pl_driver_get();
  if (d == NULL || d->cuPointerGetAttributes == NULL) return PAGELOCK_MEM_UNKNOWN;
  /* The attributes are written as enums and bools of driver-chosen width;
   * zeroed 8-byte slots read correctly for any of them (little endian). */
  uint64_t type = 0, managed = 0;
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *data[2] = {&type, &managed};
  CUresult r = d->cuPointerGetAttributes(2, attrs, data, p);
  if (r != CUDA_SUCCESS) {
    pl_log(PL_LOG_INFO, PL_LK_ATTR_QUERY, "pointer attribute query failed (%d); copy recorded as unknown", (int)r);
    return PAGELOCK_MEM_UNKNOWN;
  }
  if ((uint32_t)managed) return PAGELOCK_MEM_MANAGED;
  switch ((uint32_t)type) {
    case 0: return PAGELOCK_MEM_PAGEABLE;
    case CU_MEMORYTYPE_HOST: return PAGELOCK_MEM_PINNED;
    case CU_MEMORYTYPE_DEVICE: return PAGELOCK_MEM_DEVICE;
    case CU_MEMORYTYPE_ARRAY: return PAGELOCK_MEM_ARRAY;
    case CU_MEMORYTYPE_UNIFIED: return PAGELOCK_MEM_MANAGED;
    default: return PAGELOCK_MEM_UNKNOWN;
  }
}

int pl_hostmem_classify_site(CUdeviceptr p, uint32_t *alloc_stack) {
  if (alloc_stack) *alloc_stack = 0;
  if (p == 0) return PAGELOCK_MEM_UNKNOWN;
  unsigned gen = atomic_load_explicit(&pl_pin_gen, memory_order_acquire);
  uintptr_t base = 0;
  pthread_mutex_lock(&pl_hm_lock);
  pl_range *r = pl_rangemap_find(&pl_pinned, (uintptr_t)p);
  if (r) {
    int kind = r->kind;
    pthread_mutex_unlock(&pl_hm_lock);
    return kind;
  }
  r = pl_rangemap_find(&pl_tracked, (uintptr_t)p);
  if (r) {
    if (alloc_stack) *alloc_stack = r->stack_id;
    if (r->cached && r->gen == gen) {
      int kind = r->cached;
      pthread_mutex_unlock(&pl_hm_lock);
      return kind;
    }
    base = r->base;
  }
  pthread_mutex_unlock(&pl_hm_lock);
  int kind = pl_hostmem_query(p);
  if (base && kind != PAGELOCK_MEM_UNKNOWN) {
    /* The range may have been freed (and reused) meanwhile: only cache into
     * the node that still starts at the same base and contains p. */
    pthread_mutex_lock(&pl_hm_lock);
    r = pl_rangemap_find(&pl_tracked, (uintptr_t)p);
    if (r && r->base == base && atomic_load(&pl_pin_gen) == gen) {
      r->cached = (uint8_t)kind;
      r->gen = gen;
    }
    pthread_mutex_unlock(&pl_hm_lock);
  }
  return kind;
}

int pl_hostmem_classify(CUdeviceptr p) { return pl_hostmem_classify_site(p, NULL); }

void pl_hostmem_track(void *p, size_t n, uint32_t stack_id) {
  pthread_mutex_lock(&pl_hm_lock);
  pl_range *r = pl_rangemap_insert(&pl_tracked, (uintptr_t)p, n);
  if (r) r->stack_id = stack_id;
  pthread_mutex_unlock(&pl_hm_lock);
}

bool pl_hostmem_untrack(void *p) {
  pthread_mutex_lock(&pl_hm_lock);
  bool had = pl_rangemap_erase(&pl_tracked, (uintptr_t)p);
  pthread_mutex_unlock(&pl_hm_lock);
  return had;
}

void pl_hostmem_untrack_range(void *p, size_t n) {
  pthread_mutex_lock(&pl_hm_lock);
  pl_rangemap_erase_overlap(&pl_tracked, (uintptr_t)p, n);
  pthread_mutex_unlock(&pl_hm_lock);
}

void pl_hostmem_pinned_add(void *p, size_t n, int kind) {
  pthread_mutex_lock(&pl_hm_lock);
  pl_range *r = pl_rangemap_insert(&pl_pinned, (uintptr_t)p, n);
  if (r) r->kind = (uint8_t)kind;
  atomic_fetch_add(&pl_pin_gen, 1);
  pthread_mutex_unlock(&pl_hm_lock);
}

void pl_hostmem_pinned_remove(void *p) {
  pthread_mutex_lock(&pl_hm_lock);
  pl_rangemap_erase(&pl_pinned, (uintptr_t)p);
  atomic_fetch_add(&pl_pin_gen, 1);
  pthread_mutex_unlock(&pl_hm_lock);
}

bool pl_hostmem_check(size_t *tracked, size_t *pinned) {
  pthread_mutex_lock(&pl_hm_lock);
  bool ok = pl_rangemap_check(&pl_tracked) && pl_rangemap_check(&pl_pinned);
  if (tracked) *tracked = pl_tracked.count;
  if (pinned) *pinned = pl_pinned.count;
  pthread_mutex_unlock(&pl_hm_lock);
  return ok;
}

void pl_hostmem_atfork_prepare(void) { pthread_mutex_lock(&pl_hm_lock); }
void pl_hostmem_atfork_parent(void) { pthread_mutex_unlock(&pl_hm_lock); }
void pl_hostmem_atfork_child(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(&pl_hm_lock, &a);
  pthread_mutexattr_destroy(&a);
}

/* Exported for tests and debugging: 1 when the registry's invariants hold.
 * Counts of tracked allocations and program-pinned ranges go to the
 * pointers when they are not NULL. */
PL_EXPORT int pagelock_registry_check(size_t *tracked, size_t *pinned) {
  return pl_hostmem_check(tracked, pinned) ? 1 : 0;
}
