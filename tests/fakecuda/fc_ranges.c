/*
 * fc_ranges.c: the address-range table behind device memory, pinned host
 * memory and registrations.
 *
 * Device memory is ordinary host memory carved out of a PROT_NONE window
 * reserved per device at cuInit, so copies are plain memcpy, yet a device
 * address can never coincide with a malloc'ed host address (as with real
 * UVA), and touching device memory past an allocation's pages faults.
 *
 * mmap/munmap are never called with the table lock held: a preloaded shim
 * intercepts them and may query the driver from its hook.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fc_internal.h"

static pthread_rwlock_t fc_rt_lock = PTHREAD_RWLOCK_INITIALIZER;
static fc_range *fc_rt; /* sorted by start, non-overlapping occupancy */
static size_t fc_rt_n, fc_rt_cap;
static unsigned long long fc_rt_next_id = 1;

static size_t fc_page(void) {
  return (size_t)sysconf(_SC_PAGESIZE); /* glibc answers from the aux vector */
}

static size_t fc_round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Extent a range occupies: the mapping for allocations, the requested
 * bytes rounded out to pages for registrations (the driver pins pages, so
 * two registrations sharing a page conflict). */
static uintptr_t fc_occ_start(const fc_range *r) {
  return r->kind == FC_R_REGISTERED ? r->start / fc_page() * fc_page() : r->start;
}

static uintptr_t fc_occ_end(const fc_range *r) {
  if (r->kind == FC_R_REGISTERED) return fc_round_up(r->start + r->size, fc_page());
  return r->start + r->map_size;
}

/* Index of the first range whose start is > p. */
static size_t fc_rt_upper(uintptr_t p) {
  size_t lo = 0, hi = fc_rt_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fc_rt[mid].start <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/*
 * Take the write lock with room for one more entry.  The array grows
 * outside the lock: a preloaded allocator hook may itself query the
 * driver, and must not find this thread holding the table.
 */
static int fc_rt_wrlock_room(void) {
  for (;;) {
    pthread_rwlock_wrlock(&fc_rt_lock);
    if (fc_rt_n < fc_rt_cap) return 0;
    size_t want = fc_rt_cap ? fc_rt_cap * 2 : 64;
    pthread_rwlock_unlock(&fc_rt_lock);
    fc_range *fresh = malloc(want * sizeof *fresh);
    if (fresh == NULL) return -1;
    fc_range *old = NULL;
    pthread_rwlock_wrlock(&fc_rt_lock);
    if (fc_rt_cap < want) {
      if (fc_rt_n) memcpy(fresh, fc_rt, fc_rt_n * sizeof *fresh);
      old = fc_rt;
      fc_rt = fresh;
      fc_rt_cap = want;
    } else {
      old = fresh; /* another thread grew it meanwhile */
    }
    pthread_rwlock_unlock(&fc_rt_lock);
    free(old);
  }
}

/* Caller holds the lock taken by fc_rt_wrlock_room. */
static void fc_rt_insert_locked(const fc_range *r) {
  size_t i = fc_rt_upper(r->start);
  memmove(&fc_rt[i + 1], &fc_rt[i], (fc_rt_n - i) * sizeof *fc_rt);
  fc_rt[i] = *r;
  fc_rt_n++;
}

/*
 * Exact-start lookup of one kind, dying entries included.  Equal starts
 * happen only when a registration went stale (its memory was unmapped
 * without cuMemHostUnregister) and the kernel handed the pages to a new
 * pinned allocation: both entries are kept, as the driver would keep both.
 */
static fc_range *fc_rt_at_locked(uintptr_t start, int kind) {
  for (size_t i = fc_rt_upper(start); i > 0 && fc_rt[i - 1].start == start; i--)
    if (kind == 0 || fc_rt[i - 1].kind == kind ||
        (kind == FC_R_DEVICE && fc_rt[i - 1].kind == FC_R_MANAGED))
      return &fc_rt[i - 1];
  return NULL;
}

static void fc_rt_remove_locked(uintptr_t start, int kind) {
  fc_range *e = fc_rt_at_locked(start, kind);
  if (e != NULL) {
    size_t i = (size_t)(e - fc_rt);
    memmove(&fc_rt[i], &fc_rt[i + 1], (fc_rt_n - i - 1) * sizeof *fc_rt);
    fc_rt_n--;
  }
}

static int fc_find_locked(uintptr_t p, fc_range *out) {
  size_t i = fc_rt_upper(p);
  if (i == 0) return 0;
  const fc_range *r = &fc_rt[i - 1];
  if (r->dying || p >= r->start + r->size) return 0;
  if (out) *out = *r;
  return 1;
}

int fc_range_find(uintptr_t p, fc_range *out) {
  pthread_rwlock_rdlock(&fc_rt_lock);
  int f = fc_find_locked(p, out);
  pthread_rwlock_unlock(&fc_rt_lock);
  return f;
}

int fc_range_covers(uintptr_t p, size_t n, fc_range *out) {
  fc_range r;
  if (!fc_range_find(p, &r)) return 0;
  if (n == 0) n = 1;
  if (n > r.size || p - r.start > r.size - n) return 0;
  if (out) *out = r;
  return 1;
}

int fc_range_is_pinned_host(uintptr_t p, size_t n) {
  fc_range r;
  return fc_range_covers(p, n, &r) && (r.kind == FC_R_HOSTALLOC || r.kind == FC_R_REGISTERED);
}

static int fc_in_device_window(uintptr_t p, size_t n) {
  for (int d = 0; d < fc_ndevices; d++) {
    uintptr_t b = fc_devices[d].va_base;
    if (b && p < b + fc_devices[d].va_size && p + n > b) return 1;
  }
  return 0;
}

CUresult fc_reserve_device_va(int device, size_t size) {
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_devices[device].va_base = (uintptr_t)p;
  fc_devices[device].va_size = size;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* device and managed memory                                          */

static void fc_count_device(const fc_range *r, int sign) {
  if (sign > 0) {
    FC_STAT_ADD(device_allocs_live, 1);
    FC_STAT_ADD(device_bytes_live, r->size);
  } else {
    FC_STAT_SUB(device_allocs_live, 1);
    FC_STAT_SUB(device_bytes_live, r->size);
  }
}

CUresult fc_dev_alloc(int device, fc_ctx *ctx, size_t size, int kind, uintptr_t *out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t need = fc_round_up(size, fc_page());
  uintptr_t base = fc_devices[device].va_base, end = base + fc_devices[device].va_size;
  if (need < size || need > fc_devices[device].va_size) return CUDA_ERROR_OUT_OF_MEMORY;

  if (fc_rt_wrlock_room() != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  /* First fit among this device's allocations (contiguous in the table). */
  uintptr_t cursor = base, at = 0;
  for (size_t i = fc_rt_upper(base - 1); i < fc_rt_n; i++) {
    const fc_range *r = &fc_rt[i];
    if (r->start >= end) break;
    if (r->start - cursor >= need) {
      at = cursor;
      break;
    }
    cursor = fc_round_up(fc_occ_end(r), fc_page());
  }
  if (at == 0 && end - cursor >= need) at = cursor;
  if (at == 0) {
    pthread_rwlock_unlock(&fc_rt_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  fc_range r = {
      .start = at,
      .size = size,
      .map_size = need,
      .kind = kind,
      .device = device,
      .ctx = ctx,
      .id = fc_rt_next_id++,
      .dying = 1, /* reserved until mapped */
  };
  fc_rt_insert_locked(&r);
  pthread_rwlock_unlock(&fc_rt_lock);

  void *m = mmap((void *)at, need, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  pthread_rwlock_wrlock(&fc_rt_lock);
  if (m == MAP_FAILED) {
    fc_rt_remove_locked(at, kind);
    pthread_rwlock_unlock(&fc_rt_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  fc_rt_at_locked(at, kind)->dying = 0;
  pthread_rwlock_unlock(&fc_rt_lock);
  fc_count_device(&r, +1);
  *out = at;
  return CUDA_SUCCESS;
}

/* Return device pages to the reservation: the window stays PROT_NONE. */
static void fc_unmap_device(uintptr_t at, size_t map_size) {
  mmap((void *)at, map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
       0);
}

CUresult fc_dev_free(uintptr_t p) {
  pthread_rwlock_wrlock(&fc_rt_lock);
  fc_range *e = fc_rt_at_locked(p, FC_R_DEVICE);
  if (e == NULL || e->dying) {
    pthread_rwlock_unlock(&fc_rt_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  e->dying = 1;
  fc_range r = *e;
  pthread_rwlock_unlock(&fc_rt_lock);
  fc_unmap_device(r.start, r.map_size);
  pthread_rwlock_wrlock(&fc_rt_lock);
  fc_rt_remove_locked(r.start, r.kind);
  pthread_rwlock_unlock(&fc_rt_lock);
  fc_count_device(&r, -1);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* pinned host memory                                                 */

CUresult fc_host_alloc(fc_ctx *ctx, size_t size, unsigned flags, void **out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t need = fc_round_up(size, fc_page());
  if (need < size) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t t0 = fc_now_ns();
  void *m = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_range r = {
      .start = (uintptr_t)m,
      .size = size,
      .map_size = need,
      .kind = FC_R_HOSTALLOC,
      .device = ctx->device,
      .ctx = ctx,
      .flags = flags,
  };
  if (fc_rt_wrlock_room() != 0) {
    munmap(m, need);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  r.id = fc_rt_next_id++;
  fc_rt_insert_locked(&r);
  pthread_rwlock_unlock(&fc_rt_lock);
  FC_STAT_ADD(host_allocs_live, 1);
  FC_STAT_ADD(host_alloc_bytes_live, size);
  /* Pinned allocation is slow on real hardware (the pages are locked and
   * mapped for DMA): model it so pool-sizing decisions can be tested. */
  fc_model_time(t0, need, fc_hostalloc_bps);
  *out = m;
  return CUDA_SUCCESS;
}

CUresult fc_host_free(void *p) {
  pthread_rwlock_wrlock(&fc_rt_lock);
  fc_range *e = fc_rt_at_locked((uintptr_t)p, FC_R_HOSTALLOC);
  if (e == NULL || e->dying) {
    pthread_rwlock_unlock(&fc_rt_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  e->dying = 1;
  fc_range r = *e;
  pthread_rwlock_unlock(&fc_rt_lock);
  munmap((void *)r.start, r.map_size);
  pthread_rwlock_wrlock(&fc_rt_lock);
  fc_rt_remove_locked(r.start, FC_R_HOSTALLOC);
  pthread_rwlock_unlock(&fc_rt_lock);
  FC_STAT_SUB(host_allocs_live, 1);
  FC_STAT_SUB(host_alloc_bytes_live, r.size);
  return CUDA_SUCCESS;
}

/* mincore fails with ENOMEM on unmapped pages: the driver cannot pin those. */
static int fc_host_mapped(uintptr_t p, size_t n) {
  size_t pg = fc_page();
  uintptr_t a = p / pg * pg, e = fc_round_up(p + n, pg);
  unsigned char vec[1024];
  while (a < e) {
    size_t chunk = e - a;
    if (chunk > sizeof vec * pg) chunk = sizeof vec * pg;
    if (mincore((void *)a, chunk, vec) != 0 && errno == ENOMEM) return 0;
    a += chunk;
  }
  return 1;
}

CUresult fc_host_register(fc_ctx *ctx, void *p, size_t size, unsigned flags) {
  const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                         CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  uintptr_t a = (uintptr_t)p;
  if (p == NULL || size == 0 || (flags & ~known) || a + size < a) return CUDA_ERROR_INVALID_VALUE;
  if (fc_in_device_window(a, size) || !fc_host_mapped(a, size)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t t0 = fc_now_ns();
  fc_range r = {
      .start = a,
      .size = size,
      .map_size = size,
      .kind = FC_R_REGISTERED,
      .device = ctx->device,
      .ctx = ctx,
      .flags = flags,
  };
  uintptr_t os = fc_occ_start(&r), oe = fc_occ_end(&r);
  if (fc_rt_wrlock_room() != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  /* Any pinned range whose pages meet ours conflicts.  A linear scan:
   * registration is rare and slow on real hardware anyway. */
  for (size_t i = 0; i < fc_rt_n; i++) {
    const fc_range *x = &fc_rt[i];
    if ((x->kind == FC_R_HOSTALLOC || x->kind == FC_R_REGISTERED) && fc_occ_start(x) < oe &&
        fc_occ_end(x) > os) {
      pthread_rwlock_unlock(&fc_rt_lock);
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  }
  r.id = fc_rt_next_id++;
  fc_rt_insert_locked(&r);
  pthread_rwlock_unlock(&fc_rt_lock);
  FC_STAT_ADD(registered_ranges_live, 1);
  fc_stat_registered_add(size);
  fc_model_time(t0, size, __atomic_load_n(&fc_register_bps, __ATOMIC_RELAXED));
  return CUDA_SUCCESS;
}

CUresult fc_host_unregister(void *p) {
  uint64_t t0 = fc_now_ns();
  pthread_rwlock_wrlock(&fc_rt_lock);
  fc_range *e = fc_rt_at_locked((uintptr_t)p, FC_R_REGISTERED);
  if (p == NULL || e == NULL || e->dying) {
    pthread_rwlock_unlock(&fc_rt_lock);
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  size_t size = e->size;
  fc_rt_remove_locked((uintptr_t)p, FC_R_REGISTERED);
  pthread_rwlock_unlock(&fc_rt_lock);
  FC_STAT_SUB(registered_ranges_live, 1);
  FC_STAT_SUB(registered_bytes_live, size);
  /* Unpinning measured at about half the cost of pinning. */
  fc_model_time(t0, size / 2, __atomic_load_n(&fc_register_bps, __ATOMIC_RELAXED));
  return CUDA_SUCCESS;
}

void fc_ranges_release_ctx(fc_ctx *ctx) {
  for (;;) {
    fc_range victim;
    int found = 0;
    pthread_rwlock_wrlock(&fc_rt_lock);
    for (size_t i = 0; i < fc_rt_n; i++) {
      if (fc_rt[i].ctx == ctx && !fc_rt[i].dying) {
        fc_rt[i].dying = 1;
        victim = fc_rt[i];
        found = 1;
        break;
      }
    }
    pthread_rwlock_unlock(&fc_rt_lock);
    if (!found) return;
    switch (victim.kind) {
      case FC_R_DEVICE:
      case FC_R_MANAGED:
        fc_unmap_device(victim.start, victim.map_size);
        fc_count_device(&victim, -1);
        break;
      case FC_R_HOSTALLOC:
        munmap((void *)victim.start, victim.map_size);
        FC_STAT_SUB(host_allocs_live, 1);
        FC_STAT_SUB(host_alloc_bytes_live, victim.size);
        break;
      case FC_R_REGISTERED:
        FC_STAT_SUB(registered_ranges_live, 1);
        FC_STAT_SUB(registered_bytes_live, victim.size);
        break;
    }
    pthread_rwlock_wrlock(&fc_rt_lock);
    fc_rt_remove_locked(victim.start, victim.kind);
    pthread_rwlock_unlock(&fc_rt_lock);
  }
}

void fc_ranges_fini(void) {
  /* Mappings are left to the kernel: the process is exiting, and a late
   * destructor elsewhere may still read pinned buffers. */
  pthread_rwlock_wrlock(&fc_rt_lock);
  fc_range *old = fc_rt;
  fc_rt = NULL;
  fc_rt_n = fc_rt_cap = 0;
  pthread_rwlock_unlock(&fc_rt_lock);
  /* Outside the lock: a preloaded free may ask fakecuda_registered_bytes_in. */
  free(old);
}

/* ------------------------------------------------------------------ */
/* control interface                                                  */

FC_EXPORT int fakecuda_is_registered(const void *p, size_t n) {
  return fc_range_is_pinned_host((uintptr_t)p, n);
}

FC_EXPORT size_t fakecuda_registered_bytes_in(const void *p, size_t n, const void **first,
                                              size_t *first_len) {
  uintptr_t lo = (uintptr_t)p, hi = lo + n < lo ? UINTPTR_MAX : lo + n;
  size_t total = 0;
  int found = 0;
  pthread_rwlock_rdlock(&fc_rt_lock);
  /* Every range starting below hi: a stale registration may overlap a
   * later allocation's pages, so no entry before p can be ruled out by
   * its neighbours alone.  A few hundred entries at most in a test. */
  size_t top = hi ? fc_rt_upper(hi - 1) : 0;
  for (size_t i = 0; i < top; i++) {
    const fc_range *r = &fc_rt[i];
    if (r->kind != FC_R_REGISTERED || r->dying) continue;
    uintptr_t a = r->start > lo ? r->start : lo;
    uintptr_t b = r->start + r->size < hi ? r->start + r->size : hi;
    if (a >= b) continue;
    total += b - a;
    if (!found) {
      found = 1;
      if (first) *first = (const void *)r->start;
      if (first_len) *first_len = r->size;
    }
  }
  pthread_rwlock_unlock(&fc_rt_lock);
  return total;
}
