/* hook_alloc.c - the malloc family and mmap/munmap/mremap.
 *
 * Why: the report names the line that allocated a pageable buffer, and the
 * classification cache must forget a range the moment its memory is
 * released.  Only allocations of at least PAGELOCK_TRACK_MIN bytes are
 * tracked; everything else costs a size comparison.
 *
 * Rules that keep this safe inside any program (after LTTng-UST's libc
 * wrapper and mimalloc's alloc-override):
 *  - the next allocator is whatever dlsym(RTLD_NEXT) finds (glibc, or a
 *    jemalloc/tcmalloc preloaded after us);
 *  - while that lookup runs (dlsym itself may calloc), requests are served
 *    from a static bootstrap arena, and freeing arena memory is a no-op;
 *  - an initial-exec TLS guard keeps the shim's own allocations (backtrace,
 *    dlopen) untracked and out of recursion;
 *  - the bookkeeping never allocates and never holds a lock across a call
 *    that could allocate;
 *  - free() keeps errno, and untracks even when the guard is set, because a
 *    stale range would misclassify whatever reuses the address. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pl_internal.h"
#include "granmap.h"

typedef struct pl_next_alloc {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void *(*memalign)(size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void *);
  void *(*mmap)(void *, size_t, int, int, int, off_t);
  int (*munmap)(void *, size_t);
  void *(*mremap)(void *, size_t, size_t, int, ...);
} pl_next_alloc;

static pl_next_alloc pl_next;
static atomic_int pl_next_state; /* 0 unresolved, 1 resolving, 2 ready */
static PL_TLS int pl_resolving;
static atomic_bool pl_tracking;   /* set once the shim is initialised */
/* The next allocator is glibc's (>= 2.33): its free keeps errno itself
 * (a preloaded jemalloc or tcmalloc may not, and then we keep it), and the
 * chunk header just below a block gives its size, so most frees can be told
 * untracked without looking anything up. */
static bool pl_next_is_glibc;
static size_t pl_track_min = 64 << 10;
/* What the fast paths compare against: pl_track_min once glibc is known to
 * be the next allocator, else 0 (nothing is below it, so every call takes
 * the general path).  One load and one compare decide a call: every
 * malloc and free of the program pays for this test. */
static size_t pl_fast_lim;

/* ---- bootstrap arena ----------------------------------------------------- */

#define PL_ARENA_SIZE (256u << 10)
static _Alignas(64) char pl_arena[PL_ARENA_SIZE];
static atomic_size_t pl_arena_used;

static inline bool pl_in_arena(const void *p) {
  return (uintptr_t)p - (uintptr_t)pl_arena < PL_ARENA_SIZE; /* one compare */
}

/* The word below every arena block: read as a glibc chunk header it says
 * "larger than any threshold", so the fast paths of free and realloc send
 * arena blocks to the general path without testing for the arena. */
#define PL_ARENA_HDR (~(size_t)7)

/* glibc's own entry points: when glibc is the next allocator the hot paths
 * jump straight to them (a tail call, no frame, no pointer load). */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

/* A glibc block that was never tracked: its chunk header (the word before
 * it: size, low 3 bits flags) says it is smaller than the threshold.
 * Nothing is read unless glibc is the next allocator (pl_fast_lim != 0):
 * another allocator's block may start a mapping, with no readable word
 * below it (tests/preload/guard_alloc.c). */
static inline bool pl_glibc_small(const void *p) {
  size_t lim = pl_fast_lim;
  return lim != 0 && (((const size_t *)p)[-1] & ~(size_t)7) < lim;
}

/* Bump allocation for the few requests made while the next allocator is
 * being looked up; never freed.  Each block has PL_ARENA_HDR below it. */
static void *pl_arena_alloc(size_t n, size_t align) {
  if (align < 16) align = 16;
  size_t old = atomic_load(&pl_arena_used), start, end;
  do {
    start = (old + sizeof(size_t) + align - 1) & ~(align - 1);
    end = start + n;
    if (end > PL_ARENA_SIZE || end < start) return NULL;
  } while (!atomic_compare_exchange_weak(&pl_arena_used, &old, end));
  /* Nothing else writes this word: it lies between the blocks. */
  memcpy(pl_arena + start - sizeof(size_t), &(size_t){PL_ARENA_HDR}, sizeof(size_t));
  return pl_arena + start; /* static memory: already zero */
}

/* Resolve the next allocator.  Returns false while this thread is itself
 * in the middle of resolving (caller uses the arena). */
static bool pl_next_resolve(void);
static inline bool pl_next_ready(void) {
  if (PL_LIKELY(atomic_load_explicit(&pl_next_state, memory_order_acquire) == 2)) return true;
  return pl_next_resolve();
}

static __attribute__((noinline)) bool pl_next_resolve(void) {
  if (pl_resolving) return false;
  pl_resolving = 1;
  pl_next_alloc n;
#define PL_NEXT(f) n.f = pl_real_dlsym(RTLD_NEXT, #f)
  PL_NEXT(malloc); PL_NEXT(free); PL_NEXT(calloc); PL_NEXT(realloc);
  PL_NEXT(posix_memalign); PL_NEXT(aligned_alloc); PL_NEXT(memalign);
  PL_NEXT(valloc); PL_NEXT(pvalloc); PL_NEXT(malloc_usable_size);
  PL_NEXT(mmap); PL_NEXT(munmap); PL_NEXT(mremap);
#undef PL_NEXT
  pl_resolving = 0;
  if (n.malloc == NULL || n.free == NULL || n.calloc == NULL || n.realloc == NULL) return false;
  /* Benign race: every thread resolves the same pointers. */
  pl_next = n;
  atomic_store_explicit(&pl_next_state, 2, memory_order_release);
  return true;
}

void pl_alloc_enable(void) {
  size_t min = (size_t)pl_opt_long(PL_OPT_TRACK_MIN);
  size_t granule = pl_hostmem_init(min);
  if (granule == 0) return; /* no table: nothing is tracked */
  /* The table cannot hold ranges smaller than its granule (4 KiB at least). */
  pl_track_min = min < granule ? granule : min;
  if (pl_next_ready()) {
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    int maj = 0, mnr = 0;
    if (libc && pl_real_dlsym(libc, "free") == (void *)pl_next.free &&
        sscanf(gnu_get_libc_version(), "%d.%d", &maj, &mnr) == 2)
      pl_next_is_glibc = maj > 2 || (maj == 2 && mnr >= 33);
    if (libc) dlclose(libc);
  }
  pl_fast_lim = pl_next_is_glibc ? pl_track_min : 0;
  atomic_store(&pl_tracking, true);
}

/* ---- tracking ------------------------------------------------------------ */

/* Track [p, p+n) with its allocation site.  ra is the hook's return address
 * and sp a stack address in the hook's frame: together they let a repeated
 * allocation from the same place skip the unwind (pl_stack_capture_at). */
static void pl_track(void *p, size_t n, const void *ra, const void *sp) {
  if (p == NULL || n < pl_track_min || pl_in_shim || !atomic_load_explicit(&pl_tracking, memory_order_relaxed))
    return;
  pl_in_shim++;
  /* Skip pl_track: the innermost frame kept is the hook's caller's call. */
  uint32_t site = pl_stack_capture_at(2, ra, sp);
  pl_hostmem_track(p, n, site);
  pl_in_shim--;
}

/* Forget p if it was tracked: a few loads, inline, when it was not. */
static inline void pl_untrack(void *p) {
  if (pl_glibc_small(p)) return; /* never true unless glibc is next */
  if (PL_UNLIKELY(pl_granmap_find_base((uintptr_t)p) != NULL)) pl_hostmem_untrack(p);
}

/* The hooked call's return address and a stack address in the hook's
 * frame, for the allocation-site memo. */
#define PL_SITE __builtin_return_address(0), __builtin_frame_address(0)

/* Everything but glibc's untracked fast path, out of line so that path
 * sets up no frame.  ra: the hook's return address; this function's frame
 * address is the hook's plus a constant, which is all the site memo needs. */
static __attribute__((noinline)) void *pl_malloc_slow(size_t n, const void *ra) {
  if (PL_UNLIKELY(!pl_next_ready())) return pl_arena_alloc(n, 16);
  void *p = pl_next.malloc(n);
  if (n >= pl_track_min) pl_track(p, n, ra, __builtin_frame_address(0));
  return p;
}

/* ---- the malloc family --------------------------------------------------- */

PL_EXPORT void *malloc(size_t n) {
  if (PL_LIKELY(n < pl_fast_lim)) return __libc_malloc(n);
  return pl_malloc_slow(n, __builtin_return_address(0));
}

/* Everything but glibc's untracked fast path, out of line so that path
 * pushes nothing. */
static __attribute__((noinline)) void pl_free_slow(void *p) {
  if (p == NULL || PL_UNLIKELY(pl_in_arena(p))) return;
  if (PL_UNLIKELY(!pl_next_ready())) return; /* cannot happen for heap memory */
  /* Nothing on the untrack path can set errno (no system call, no
   * allocation); only a next allocator other than glibc's might. */
  pl_untrack(p);
  if (PL_LIKELY(pl_next_is_glibc)) {
    pl_next.free(p);
    return;
  }
  int saved = errno;
  pl_next.free(p);
  errno = saved;
}

PL_EXPORT void free(void *p) {
  /* glibc keeps a block's size (low 3 bits: flags) in the word before it;
   * a block smaller than the threshold was never tracked.  Arena blocks
   * and any next allocator but glibc fail the test (PL_ARENA_HDR,
   * pl_fast_lim). */
  if (PL_LIKELY(p != NULL) && PL_LIKELY(pl_glibc_small(p))) {
    __libc_free(p);
    return;
  }
  pl_free_slow(p);
}

PL_EXPORT void *calloc(size_t k, size_t n) {
  if (PL_LIKELY(k < pl_fast_lim && n < pl_fast_lim && k * n < pl_fast_lim))
    return __libc_calloc(k, n); /* a product that wraps is glibc's to refuse: it checks */
  if (PL_UNLIKELY(!pl_next_ready())) {
    if (n && k > SIZE_MAX / n) return NULL;
    return pl_arena_alloc(k * n, 16);
  }
  void *p = pl_next.calloc(k, n);
  if (p && n && k <= SIZE_MAX / n && k * n >= pl_track_min) pl_track(p, k * n, PL_SITE);
  return p;
}

/* Everything but glibc's untracked fast path, out of line so that path
 * sets up no frame. */
static __attribute__((noinline)) void *pl_realloc_slow(void *old, size_t n, const void *ra) {
  const void *sp = __builtin_frame_address(0);
  if (PL_UNLIKELY(old != NULL && pl_in_arena(old))) {
    /* Leaving the arena: copy into the real heap (the old size is not
     * known; copy what can exist). */
    void *p = malloc(n);
    if (p) {
      size_t avail = (size_t)(pl_arena + PL_ARENA_SIZE - (char *)old);
      memcpy(p, old, n < avail ? n : avail);
    }
    return p;
  }
  if (PL_UNLIKELY(!pl_next_ready())) return pl_arena_alloc(n, 16);
  /* Untrack before: once realloc returns, the old range may already be
   * someone else's. */
  if (old) pl_untrack(old);
  void *p = pl_next.realloc(old, n);
  if (p == NULL && old != NULL && n != 0) {
    /* Failed: the old block is intact; track it again. */
    size_t u = pl_next.malloc_usable_size ? pl_next.malloc_usable_size(old) : 0;
    if (u >= pl_track_min) pl_track(old, u, ra, sp);
    return NULL;
  }
  if (n >= pl_track_min) pl_track(p, n, ra, sp);
  return p;
}

PL_EXPORT void *realloc(void *old, size_t n) {
  if (PL_LIKELY(n < pl_fast_lim) && PL_LIKELY(old != NULL) && PL_LIKELY(pl_glibc_small(old)))
    return __libc_realloc(old, n);
  return pl_realloc_slow(old, n, __builtin_return_address(0));
}

PL_EXPORT int posix_memalign(void **out, size_t align, size_t n) {
  if (PL_UNLIKELY(!pl_next_ready())) {
    void *p = pl_arena_alloc(n, align);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
  }
  int r = pl_next.posix_memalign(out, align, n);
  if (r == 0 && n >= pl_track_min) pl_track(*out, n, PL_SITE);
  return r;
}

#define PL_ALIGNED_HOOK(name, ...)                                          \
  do {                                                                      \
    if (PL_UNLIKELY(!pl_next_ready())) return pl_arena_alloc(n, 4096);     \
    if (pl_next.name == NULL) { errno = ENOMEM; return NULL; }              \
    void *p = pl_next.name(__VA_ARGS__);                                    \
    if (n >= pl_track_min) pl_track(p, n, PL_SITE);                                  \
    return p;                                                               \
  } while (0)

PL_EXPORT void *aligned_alloc(size_t align, size_t n) { PL_ALIGNED_HOOK(aligned_alloc, align, n); }
PL_EXPORT void *memalign(size_t align, size_t n) { PL_ALIGNED_HOOK(memalign, align, n); }
PL_EXPORT void *valloc(size_t n) { PL_ALIGNED_HOOK(valloc, n); }
PL_EXPORT void *pvalloc(size_t n) { PL_ALIGNED_HOOK(pvalloc, n); }

PL_EXPORT size_t malloc_usable_size(void *p) {
  if (p == NULL) return 0;
  if (PL_UNLIKELY(pl_in_arena(p))) return 0;
  if (PL_UNLIKELY(!pl_next_ready()) || pl_next.malloc_usable_size == NULL) return 0;
  return pl_next.malloc_usable_size(p);
}

/* ---- mmap ---------------------------------------------------------------- */

/* Only memory a program could copy from: anonymous, writable. */
static bool pl_mmap_trackable(int prot, int flags) {
  return (flags & MAP_ANONYMOUS) && (prot & PROT_WRITE);
}

PL_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (PL_UNLIKELY(!pl_next_ready() || pl_next.mmap == NULL)) {
    errno = ENOSYS;
    return MAP_FAILED;
  }
  void *p = pl_next.mmap(addr, len, prot, flags, fd, off);
  if (p == MAP_FAILED || !atomic_load_explicit(&pl_tracking, memory_order_relaxed)) return p;
  int saved = errno;
  pl_hostmem_invalidate();
  /* A fixed mapping replaces whatever was there. */
  if (flags & MAP_FIXED) pl_hostmem_untrack_range(p, len);
  if (pl_mmap_trackable(prot, flags) && len >= pl_track_min) pl_track(p, len, PL_SITE);
  errno = saved;
  return p;
}
PL_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

PL_EXPORT int munmap(void *addr, size_t len) {
  if (PL_UNLIKELY(!pl_next_ready() || pl_next.munmap == NULL)) {
    errno = ENOSYS;
    return -1;
  }
  /* Untrack first: after munmap the address can be reused at once. */
  if (atomic_load_explicit(&pl_tracking, memory_order_relaxed)) {
    int saved = errno;
    pl_hostmem_untrack_range(addr, len);
    pl_hostmem_invalidate();
    errno = saved;
  }
  return pl_next.munmap(addr, len);
}

PL_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *new_addr = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void *);
    va_end(ap);
  }
  if (PL_UNLIKELY(!pl_next_ready() || pl_next.mremap == NULL)) {
    errno = ENOSYS;
    return MAP_FAILED;
  }
  bool tracking = atomic_load_explicit(&pl_tracking, memory_order_relaxed);
  if (tracking) {
    int saved = errno;
    pl_hostmem_untrack_range(old, old_len);
    pl_hostmem_invalidate();
    errno = saved;
  }
  void *p = pl_next.mremap(old, old_len, new_len, flags, new_addr);
  if (tracking) {
    int saved = errno;
    if (p != MAP_FAILED) {
      if (new_len >= pl_track_min) pl_track(p, new_len, PL_SITE);
    } else if (old_len >= pl_track_min) {
      pl_track(old, old_len, PL_SITE); /* unchanged: keep knowing it */
    }
    errno = saved;
  }
  return p;
}
