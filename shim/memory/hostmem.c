/* hostmem.c - what kind of memory a host pointer is, and where it came from.
 *
 * Three range maps:
 *  - tracked: heap and mmap allocations of at least PAGELOCK_TRACK_MIN bytes,
 *    with their allocation site and origin (fed by hook_alloc.c);
 *    lock-free (granmap.c), because every free() of the program consults it;
 *  - pinned: host memory the program itself page-locked (cuMemHostAlloc,
 *    cuMemAllocHost, cuMemHostRegister; fed by hook_hostalloc.c); a treap
 *    under the registry lock, changed rarely;
 *  - shim: the ranges the shim page-locked itself (pinreg.c), from just
 *    before its cuMemHostRegister until just after its cuMemHostUnregister,
 *    so that no answer the driver gives for them is taken for the program's
 *    pinned memory.  To the program, and to the report, they stay pageable.
 * The driver's pointer-attribute query stays the ground truth: a tracked
 * range caches the driver's answer, and any page-locking change by the
 * program bumps a generation number that invalidates every cached answer,
 * so the cache can never outlive the truth.  The lock is never held across
 * a driver call. */
#define _GNU_SOURCE
#include <pthread.h>

#include "pl_internal.h"
#include "hostmem.h"
#include "granmap.h"
#include "pystack.h"
#include "rangemap.h"

/* Adaptive: the critical sections are a few hundred nanoseconds, so under
 * contention from many allocating threads a short spin beats a futex sleep. */
static pthread_mutex_t pl_hm_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
/* Held as the shim's own business (pl_shim_enter): a release hook that
 * interrupts the holder (a signal handler's munmap) then hands its undo
 * over instead of reaching pl_hostmem_shim_remove, which takes this lock
 * (pinreg.c, pl_may_wait). */
static void pl_hm_take(void) {
  pl_shim_enter();
  atomic_signal_fence(memory_order_seq_cst);
  pthread_mutex_lock(&pl_hm_lock);
}
static void pl_hm_give(void) {
  pthread_mutex_unlock(&pl_hm_lock);
  atomic_signal_fence(memory_order_seq_cst);
  pl_shim_leave();
}
static pl_rangemap pl_pinned;
static pl_rangemap pl_shimreg;
static atomic_uint pl_pin_gen = 1;

/* Ask the driver (no lock held). */
static int pl_hostmem_query(CUdeviceptr p) {
  const pl_drv *d = pl_drv_get();
  if (d == NULL || d->PointerGetAttributes == NULL) return PAGELOCK_MEM_UNKNOWN;
  /* The attributes are written as enums and bools of driver-chosen width;
   * zeroed 8-byte slots read correctly for any of them (little endian). */
  uint64_t type = 0, managed = 0;
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *data[2] = {&type, &managed};
  CUresult r = d->PointerGetAttributes(2, attrs, data, p);
  if (r != CUDA_SUCCESS) {
    pl_log(PL_LOG_INFO, PL_LK_ATTR_QUERY,
           "pointer attribute query failed (%d); copy recorded as unknown", (int)r);
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

/* Per-thread memo of pages the driver called pageable that no tracked
 * allocation covers (small heap blocks, stack, static data): a loop of
 * small copies from one buffer would otherwise pay the registry lock and a
 * driver query (~100 ns) on every call.  An entry holds while the
 * generation holds (it moves whenever the program pins or unpins memory
 * through the hooks, or maps or unmaps anything through mmap: the ways a
 * page stops being plain pageable memory), and for PL_NEG_USES answers at
 * most, so a registration the hooks never saw is noticed within that many
 * copies. */
#define PL_NEG_SLOTS 8
#ifndef PL_NEG_USES /* other values: diagnostic builds (docs/benchmarks.md) */
#define PL_NEG_USES 64
#endif
/* An entry whose whole page no tracked allocation touched when it was
 * made (`whole`) answers before the registry is even asked, for as long as
 * no allocation has been tracked since (`epoch`, pl_track_epoch): the
 * registry lookup of an untracked pointer took 90 of the ~480
 * instructions the shim adds to a copy from a small buffer.  Any other
 * entry answers only once the registry has found nothing at the pointer.
 * The whole page matters because the memo is per page: a tracked block
 * may end on it (tracked ranges are longer than a page, so one that
 * touches the page holds its first or its last byte). */
typedef struct pl_neg_entry {
  uintptr_t page;
  unsigned gen, uses, epoch;
  bool whole;
} pl_neg_entry;
static PL_TLS pl_neg_entry pl_neg[PL_NEG_SLOTS];
/* Moves each time an allocation starts being tracked: a pointer the
 * registry did not know may be inside one now; and each time one stops
 * (pl_hostmem_stamp).  A line of its own: every tracked allocation writes
 * it, every copy reads it. */
static struct {
  _Alignas(64) atomic_uint v;
  char pad[64 - sizeof(atomic_uint)];
} pl_track_epoch;

/* Per-thread memo of the last program-pinned range a classification found
 * (a loop of small copies from one pinned buffer would otherwise take the
 * registry lock on every call).  The registry changes only with the
 * generation, so the entry holds exactly while its generation does. */
typedef struct pl_pos_entry {
  uintptr_t base, end;
  unsigned gen;
  int kind;
} pl_pos_entry;
static PL_TLS pl_pos_entry pl_pos;

void pl_hostmem_invalidate(const void *gone, size_t n) {
  atomic_fetch_add_explicit(&pl_pin_gen, 1, memory_order_acq_rel);
  if (n) pl_py_unmapped((uintptr_t)gone, n);
}

int pl_hostmem_classify_site(CUdeviceptr p, uint32_t *alloc_stack, bool *fresh) {
  if (alloc_stack) *alloc_stack = 0;
  if (fresh) *fresh = false;
  if (p == 0) return PAGELOCK_MEM_UNKNOWN;
  unsigned gen = atomic_load_explicit(&pl_pin_gen, memory_order_acquire);
  /* Memory the program pinned, as last found by this thread: the answer
   * the registry lookup below would give, for as long as the generation
   * holds, so it goes first (a loop of pinned copies costs no more).
   * Pinned memory carries no allocation site: the report lists sites for
   * pageable memory only. */
  if (pl_pos.gen == gen && (uintptr_t)p - pl_pos.base < pl_pos.end - pl_pos.base)
    return pl_pos.kind;
  /* Read before the registry: an allocation tracked while it is asked
   * leaves the memo entry made from its answer already out of date. */
  unsigned epoch = atomic_load_explicit(&pl_track_epoch.v, memory_order_acquire);
  uintptr_t page = (uintptr_t)p >> 12;
  pl_neg_entry *neg = &pl_neg[page & (PL_NEG_SLOTS - 1)];
  if (neg->whole && neg->page == page && neg->gen == gen && neg->epoch == epoch && neg->uses > 0) {
    neg->uses--;
    return PAGELOCK_MEM_PAGEABLE;
  }
  /* Fast path, no lock: a tracked range whose cached driver answer is still
   * current (any page-locking change since bumps the generation). */
  pl_range *t = pl_granmap_find((uintptr_t)p);
  uintptr_t base = 0;
  if (t) {
    if (alloc_stack) *alloc_stack = __atomic_load_n(&t->stack_id, __ATOMIC_ACQUIRE);
    unsigned cgen = __atomic_load_n(&t->gen, __ATOMIC_ACQUIRE);
    uint8_t cached = __atomic_load_n(&t->cached, __ATOMIC_RELAXED);
    if (cached && cgen == gen) return cached;
    if (fresh) *fresh = cached == 0; /* a node is zeroed when tracked */
    base = PL_RBASE(t);
  }
  if (t == NULL && neg->page == page && neg->gen == gen && neg->uses > 0) {
    neg->uses--;
    return PAGELOCK_MEM_PAGEABLE;
  }
  pl_hm_take();
  pl_range *r = pl_rangemap_find(&pl_pinned, (uintptr_t)p);
  int kind = r ? r->kind : PAGELOCK_MEM_UNKNOWN;
  /* The generation read above, not the current one: a change since then
   * must not be hidden behind an entry that looks current. */
  if (r)
    pl_pos = (pl_pos_entry){.base = r->base, .end = r->base + r->size, .gen = gen, .kind = kind};
  bool shim =
      r == NULL && pl_shimreg.root != NULL && pl_rangemap_find(&pl_shimreg, (uintptr_t)p) != NULL;
  pl_hm_give();
  if (kind != PAGELOCK_MEM_UNKNOWN) {
    if (alloc_stack) *alloc_stack = 0; /* as the memo answers */
    return kind;
  }
  /* Page-locked by the shim alone: pageable, as it would be without it
   * (the copy engines tell their own route apart by its flag).  The map
   * holds a shim range from before the driver registers it until after it
   * is undone, so a "page-locked" answer caused by the shim finds it there
   * when asked again; an undo bumps the generation, so no answer taken
   * while it was registered is cached. */
  kind = shim ? PAGELOCK_MEM_PAGEABLE : pl_hostmem_query(p);
  if (kind == PAGELOCK_MEM_PINNED && pl_hostmem_shim_has((uintptr_t)p))
    kind = PAGELOCK_MEM_PAGEABLE;
  if (t == NULL && kind == PAGELOCK_MEM_PAGEABLE) {
    neg->page = page;
    neg->gen = gen;
    neg->uses = PL_NEG_USES;
    neg->epoch = epoch;
    neg->whole =
        pl_granmap_find(page << 12) == NULL && pl_granmap_find((page << 12) + 4095) == NULL;
  } else if (t == NULL && neg->page == page) {
    neg->page = 0; /* no longer pageable: forget it */
  }
  if (base && kind != PAGELOCK_MEM_UNKNOWN) {
    /* Cache only into the node that still starts at the same base: the
     * range may have been freed and reused meanwhile. */
    t = pl_granmap_find((uintptr_t)p);
    if (t && PL_RBASE(t) == base && atomic_load(&pl_pin_gen) == gen) {
      __atomic_store_n(&t->cached, (uint8_t)kind, __ATOMIC_RELAXED);
      __atomic_store_n(&t->gen, gen, __ATOMIC_RELEASE);
    }
  }
  return kind;
}

int pl_hostmem_classify(CUdeviceptr p) { return pl_hostmem_classify_site(p, NULL, NULL); }

void pl_hostmem_spend(CUdeviceptr p, uint32_t n) {
  uintptr_t page = (uintptr_t)p >> 12;
  pl_neg_entry *neg = &pl_neg[page & (PL_NEG_SLOTS - 1)];
  if (neg->page == page) neg->uses = neg->uses > n ? neg->uses - n : 0;
}

uint64_t pl_hostmem_stamp(void) {
  return (uint64_t)atomic_load_explicit(&pl_pin_gen, memory_order_acquire) << 32 |
         atomic_load_explicit(&pl_track_epoch.v, memory_order_acquire);
}

size_t pl_hostmem_init(size_t track_min) {
  return pl_granmap_init(track_min) ? pl_granmap_granule() : 0;
}

void pl_hostmem_track(void *p, size_t n, uint32_t stack_id) {
  pl_hostmem_track_as(p, n, stack_id, PL_ORIGIN_HEAP);
}

void pl_hostmem_track_as(void *p, size_t n, uint32_t stack_id, int origin) {
  pl_range *r = pl_granmap_insert((uintptr_t)p, n);
  if (r == NULL) return;
  /* A recycled node keeps its last owner's kind: set all of it. */
  __atomic_store_n(&r->kind, (uint8_t)(origin & (PL_ORIGIN_MASK | PL_ALLOC_OWN_PAGES)),
                   __ATOMIC_RELAXED);
  __atomic_store_n(&r->stack_id, stack_id, __ATOMIC_RELEASE);
  atomic_fetch_add_explicit(&pl_track_epoch.v, 1, memory_order_release);
}

bool pl_hostmem_lookup(uintptr_t p, uintptr_t *base, size_t *size, int *kind) {
  pl_range *t = pl_granmap_find(p);
  if (t == NULL) return false;
  uintptr_t b = PL_RBASE(t);
  size_t n = PL_RSIZE(t);
  uint8_t k = __atomic_load_n(&t->kind, __ATOMIC_RELAXED);
  /* A node recycled under us names another range: p must still be in it. */
  if (p - b >= n) return false;
  *base = b;
  *size = n;
  *kind = k;
  return true;
}

void pl_hostmem_mark(uintptr_t base, size_t size, int flags) {
  pl_range *t = pl_granmap_find_base(base);
  if (t && PL_RSIZE(t) == size) __atomic_fetch_or(&t->kind, (uint8_t)flags, __ATOMIC_RELAXED);
}

bool pl_hostmem_shim_add(uintptr_t p, size_t n) {
  pl_hm_take();
  bool ok = pl_rangemap_insert(&pl_shimreg, p, n) != NULL;
  pl_hm_give();
  return ok;
}

void pl_hostmem_shim_remove(uintptr_t p) {
  pl_hm_take();
  pl_rangemap_erase(&pl_shimreg, p);
  atomic_fetch_add(&pl_pin_gen, 1);
  pl_hm_give();
}

bool pl_hostmem_shim_has(uintptr_t p) {
  pl_hm_take();
  bool has = pl_shimreg.root != NULL && pl_rangemap_find(&pl_shimreg, p) != NULL;
  pl_hm_give();
  return has;
}

/* An untracked range moves the epoch too: the allocation site a run of
 * copies from it recorded (run.h) no longer holds for its bytes. */
bool pl_hostmem_untrack(void *p) {
  if (!pl_granmap_erase((uintptr_t)p)) return false;
  atomic_fetch_add_explicit(&pl_track_epoch.v, 1, memory_order_release);
  return true;
}

void pl_hostmem_untrack_range(void *p, size_t n) {
  pl_granmap_erase_overlap((uintptr_t)p, n);
  atomic_fetch_add_explicit(&pl_track_epoch.v, 1, memory_order_release);
}

void pl_hostmem_pinned_add(void *p, size_t n, int kind) {
  pl_hm_take();
  pl_range *r = pl_rangemap_insert(&pl_pinned, (uintptr_t)p, n);
  if (r) r->kind = (uint8_t)kind;
  atomic_fetch_add(&pl_pin_gen, 1);
  pl_hm_give();
}

void pl_hostmem_pinned_remove(void *p) {
  pl_hm_take();
  pl_rangemap_erase(&pl_pinned, (uintptr_t)p);
  atomic_fetch_add(&pl_pin_gen, 1);
  pl_hm_give();
}

bool pl_hostmem_check(size_t *tracked, size_t *pinned) {
  pl_hm_take();
  bool ok = pl_granmap_check() && pl_rangemap_check(&pl_pinned);
  if (tracked) *tracked = pl_granmap_count();
  if (pinned) *pinned = pl_pinned.count;
  pl_hm_give();
  return ok;
}

void pl_hostmem_atfork_prepare(void) { pthread_mutex_lock(&pl_hm_lock); }
void pl_hostmem_atfork_parent(void) { pthread_mutex_unlock(&pl_hm_lock); }
void pl_hostmem_atfork_child(void) {
  pl_granmap_atfork_child();
  /* The parent's registrations are the parent's: the child forgets them
   * (pinreg.c), and so does this map. */
  pl_rangemap_clear(&pl_shimreg);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(&pl_hm_lock, &a);
  pthread_mutexattr_destroy(&a);
}
