/* hook_alloc.c - the malloc family, mmap/munmap/mremap, madvise, brk/sbrk.
 *
 * Why: the report names the line that allocated a pageable buffer, the
 * classification cache must forget a range the moment its memory is
 * released, and under PAGELOCK_MODE register and auto every registration
 * of the shim's own (pinreg.c) must be undone before any byte of it is
 * freed, reallocated, unmapped, remapped, discarded or returned by brk
 * (no stale registrations).  Only allocations of at least
 * PAGELOCK_TRACK_MIN bytes are tracked; everything else costs a size
 * comparison, and the release paths one atomic load while the shim has
 * registered nothing (pl_pinreg_any).
 *
 * Releases of registered memory:
 *  - free: the block is handed whole to the shim's thread, which undoes
 *    the registration and then frees it (pl_pinreg_defer_free): an
 *    unregister can wait on GPU work that this very thread must drive
 *    (UCX PR #9345), so the program's thread never makes one;
 *  - realloc: a realloc may always move, so a registered block moves:
 *    malloc, memcpy, and the old block goes as free does;
 *  - munmap, mremap, madvise(MADV_DONTNEED/FREE/REMOVE), MAP_FIXED over
 *    it, brk/sbrk shrinking: undone synchronously before the real call,
 *    since the memory goes when the call returns (pinreg.h,
 *    pl_pinreg_unmap and its siblings), except where the thread may not
 *    wait for that: a signal handler that interrupted the shim, a host
 *    function's thread.  There the release is handed to the shim's thread
 *    and the program still sees its effect at once.  Only the program's
 *    own calls can reach a registration there: the allocators release
 *    only memory they own, and a registered block stays allocated until
 *    its registration is gone.
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
 *    stale range would misclassify whatever reuses the address.
 *
 * The mmap family is stricter, because allocators call mmap and munmap
 * while holding their own mutexes (jemalloc's extent and arena locks,
 * tcmalloc's page-heap lock).  Anything those hooks do that may allocate
 * or wait for a lock an allocating thread can hold closes a cycle through
 * that mutex: an unwind may malloc (glibc's backtrace() dlopens libgcc_s
 * on its first call, even when libgcc_s is already loaded; libgcc's
 * unwinder sorts the frame tables objects registered on its first look),
 * and jemalloc then waits for itself; a lazy dlsym waits for the
 * loader's lock, which a thread in dlopen holds while it mallocs; any
 * lock the hook took would have to be one nobody holds while allocating
 * (STACK records are written under a lock, and writing can allocate, so
 * interning a stack takes none).  So the mmap family:
 *  - calls the next mmap/munmap/mremap resolved in the constructor
 *    (pl_alloc_init), and the raw system call before that, never dlsym;
 *  - records a one-frame allocation site (the hooked call's return
 *    address), with no unwinding, no lock and no allocation
 *    (pl_stack_capture_ra);
 *  - does not track mappings made by the allocator itself (an arena or
 *    extent is not a buffer: the malloc hooks track the blocks carved out
 *    of it, and a site inside the allocator would name nothing useful).
 * The malloc family unwinds only after the next allocator has returned,
 * so no allocator lock is held then, and the constructor unwinds once
 * first (pl_stack_warm), so that no hook's unwind is the unwinder's first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_internal.h"
#include "granmap.h"
#include "hooks.h"
#include "hostmem.h"
#include "hugepages.h"
#include "pinreg.h"
#include "stack.h"

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
} pl_next_alloc;

/* Resolved once in the constructor, published by pl_map_ready. */
typedef struct pl_next_map {
  void *(*mmap)(void *, size_t, int, int, int, off_t);
  int (*munmap)(void *, size_t);
  void *(*mremap)(void *, size_t, size_t, int, ...);
  int (*madvise)(void *, size_t, int);
} pl_next_map;
static pl_next_map pl_map;
static atomic_bool pl_map_ready;

/* The code of an allocator other than glibc (the next one, or one
 * preloaded before us): mappings it makes itself are its arenas. */
typedef struct pl_text {
  uintptr_t lo, len;
} pl_text;
static pl_text pl_alloc_text[2];
/* An allocator other than glibc serves malloc (next, or preloaded ahead of
 * us): its own extents reach mmap too, and it madvises and unmaps them
 * under its own lock, so no mapping may be registered then (only the
 * malloc family's blocks, which it never releases while they live). */
static bool pl_foreign_heap;

static pl_next_alloc pl_next;
static atomic_int pl_next_state; /* 0 unresolved, 1 resolving, 2 ready */
static PL_TLS int pl_resolving;
static atomic_bool pl_tracking; /* set once the shim is initialised */
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

/* A glibc block that is a mapping of its own: the IS_MMAPPED bit (2) of
 * its chunk header.  Such a block is unmapped when freed, so whatever the
 * shim advised on it ends with it (pl_huge_advise). */
static inline bool pl_glibc_mmapped(const void *p) {
  return pl_next_is_glibc && (((const size_t *)p)[-1] & 2) != 0;
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
  PL_NEXT(malloc);
  PL_NEXT(free);
  PL_NEXT(calloc);
  PL_NEXT(realloc);
  PL_NEXT(posix_memalign);
  PL_NEXT(aligned_alloc);
  PL_NEXT(memalign);
  PL_NEXT(valloc);
  PL_NEXT(pvalloc);
  PL_NEXT(malloc_usable_size);
#undef PL_NEXT
  pl_resolving = 0;
  if (n.malloc == NULL || n.free == NULL || n.calloc == NULL || n.realloc == NULL) return false;
  /* Benign race: every thread resolves the same pointers. */
  pl_next = n;
  atomic_store_explicit(&pl_next_state, 2, memory_order_release);
  return true;
}

void pl_alloc_init(void) {
  pl_next_map m;
  m.mmap = pl_real_dlsym(RTLD_NEXT, "mmap");
  m.munmap = pl_real_dlsym(RTLD_NEXT, "munmap");
  m.mremap = pl_real_dlsym(RTLD_NEXT, "mremap");
  m.madvise = pl_real_dlsym(RTLD_NEXT, "madvise");
  if (m.mmap != NULL && m.munmap != NULL && m.mremap != NULL && m.madvise != NULL) {
    pl_map = m;
    atomic_store_explicit(&pl_map_ready, true, memory_order_release);
  }
  (void)pl_next_ready();
}

/* ---- who serves malloc --------------------------------------------------- */

typedef struct pl_text_find {
  uintptr_t addr; /* in: an address inside the object */
  pl_text text;   /* out: the extent of its executable segments */
} pl_text_find;

static int pl_text_cb(struct dl_phdr_info *info, size_t sz, void *arg) {
  (void)sz;
  pl_text_find *f = arg;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t s = info->dlpi_addr + ph->p_vaddr;
    if (f->addr - s < ph->p_memsz) mine = true;
    if (!(ph->p_flags & PF_X)) continue;
    if (s < lo) lo = s;
    if (s + ph->p_memsz > hi) hi = s + ph->p_memsz;
  }
  if (!mine) return 0;
  if (hi > lo) f->text = (pl_text){lo, hi - lo};
  return 1;
}

/* The object defining fn: its link map entry, or NULL. */
static struct link_map *pl_object_of(void *fn) {
  Dl_info info;
  struct link_map *lm = NULL;
  if (fn == NULL || dladdr1(fn, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0) return NULL;
  return lm;
}

static const char *pl_base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static bool pl_is_libc(const struct link_map *lm) {
  return lm->l_name != NULL && strncmp(pl_base_name(lm->l_name), "libc.so", 7) == 0;
}

/* Remember the code of the allocator behind fn, unless it is glibc's, the
 * shim's or the program's own (whose mmap calls are the program's). */
static void pl_note_allocator_text(void *fn, struct link_map *self, int slot) {
  struct link_map *lm = pl_object_of(fn);
  if (lm == NULL || lm == self || lm->l_name == NULL || lm->l_name[0] == 0 || pl_is_libc(lm))
    return;
  pl_text_find f = {.addr = (uintptr_t)fn};
  dl_iterate_phdr(pl_text_cb, &f);
  pl_alloc_text[slot] = f.text;
}

/* A mapping made from the allocator's own code. */
static inline bool pl_from_allocator(const void *ra) {
  uintptr_t a = (uintptr_t)ra;
  return a - pl_alloc_text[0].lo < pl_alloc_text[0].len ||
         a - pl_alloc_text[1].lo < pl_alloc_text[1].len;
}

/* When the program's malloc (or mmap) is not ours, because an allocator
 * is preloaded before the shim or linked into the program, its buffers are
 * never tracked: say so in the trace, so that the report does not just
 * lack their allocation sites without a word.  (tcmalloc defines mmap as
 * well, and then mapped buffers are not seen either.) */
/* What the program's calls of name reach: dlsym(RTLD_DEFAULT) answers with
 * the address of a PLT stub where a non-PIE program takes the function's
 * address (Debian's python3 does malloc's), an undefined symbol of its
 * own; the stub jumps to the first definition of the objects after it. */
static void *pl_served_by(const char *name) {
  void *f = pl_real_dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  struct link_map *lm = NULL;
  if (f == NULL || dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL ||
      sym->st_shndx != SHN_UNDEF || dladdr1(f, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0)
    return f;
  for (lm = lm ? lm->l_next : NULL; lm != NULL; lm = lm->l_next) {
    void *h = lm->l_name && lm->l_name[0] ? dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    void *g = h ? pl_real_dlsym(h, name) : NULL;
    if (h) dlclose(h);
    if (g != NULL && pl_object_of(g) == lm) return g;
  }
  return f;
}

static void pl_check_owners(struct link_map *self) {
  void *m = pl_served_by("malloc"), *mm = pl_served_by("mmap");
  struct link_map *heap = pl_object_of(m), *map = pl_object_of(mm);
  /* glibc ahead of us: the shim was not preloaded at all (loaded by the
   * driver as a CUDA injection), and then no copy is hooked either. */
  bool h = heap != NULL && heap != self && !pl_is_libc(heap),
       p = map != NULL && map != self && !pl_is_libc(map);
  if (!h && !p) return;
  if (h) pl_note_allocator_text(m, self, 1);
  pl_foreign_heap = pl_foreign_heap || h;
  struct link_map *who = h ? heap : map;
  const char *what = h && p ? "malloc'd and mmap'd buffers"
                     : h    ? "malloc'd buffers"
                            : "mmap'd buffers";
  const char *me = self && self->l_name ? pl_base_name(self->l_name) : "libpagelock.so";
  char text[400];
  if (who->l_name != NULL && who->l_name[0] != 0)
    snprintf(text, sizeof text,
             "allocation sites are missing for %s because %s is preloaded before %s; "
             "put %s first in LD_PRELOAD (`pagelock run` does this)",
             what, pl_base_name(who->l_name), me, me);
  else
    snprintf(
        text, sizeof text,
        "allocation sites are missing for %s because the program (%s) defines %s itself, ahead of %s",
        what, program_invocation_short_name, h ? "malloc" : "mmap", me);
  pl_stack_note(PAGELOCK_NOTE_WARNING, text);
}

void pl_alloc_enable(void) {
  size_t min = (size_t)pl_opt_long(PL_OPT_TRACK_MIN);
  /* Before anything is tracked: the malloc hooks' first unwind must not
   * be the unwinder's first. */
  pl_stack_warm();
  size_t granule = pl_hostmem_init(min);
  if (granule == 0) return; /* no table: nothing is tracked */
  /* The table cannot hold ranges smaller than its granule (4 KiB at least). */
  pl_track_min = min < granule ? granule : min;
  struct link_map *self = pl_object_of((void *)pl_alloc_enable);
  pl_check_owners(self);
  if (pl_next_ready()) {
    pl_note_allocator_text((void *)pl_next.malloc, self, 0);
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    int maj = 0, mnr = 0;
    if (libc && pl_real_dlsym(libc, "free") == (void *)pl_next.free &&
        sscanf(gnu_get_libc_version(), "%d.%d", &maj, &mnr) == 2)
      pl_next_is_glibc = maj > 2 || (maj == 2 && mnr >= 33);
    if (libc) dlclose(libc);
  }
  pl_fast_lim = pl_next_is_glibc ? pl_track_min : 0;
  pl_huge_init();
  pl_foreign_heap = pl_foreign_heap || !pl_next_is_glibc;
  atomic_store_explicit(&pl_tracking, true, memory_order_release);
}

/* ---- tracking ------------------------------------------------------------ */

/* Track [p, p+n) with its allocation site.  ra is the hook's return address
 * and sp a stack address in the hook's frame: together they let a repeated
 * allocation from the same place skip the unwind (pl_stack_capture_at). */
static void pl_track(void *p, size_t n, const void *ra, const void *sp) {
  if (p == NULL || n < pl_track_min || pl_shim_inside() ||
      !atomic_load_explicit(&pl_tracking, memory_order_relaxed))
    return;
  pl_shim_enter();
  /* Skip pl_track: the innermost frame kept is the hook's caller's call. */
  uint32_t site = pl_stack_capture_at(2, ra, sp, NULL);
  bool own = pl_glibc_mmapped(p);
  pl_hostmem_track_as(p, n, site, PL_ORIGIN_HEAP | (own ? PL_ALLOC_OWN_PAGES : 0));
  if (own) pl_huge_advise(p, n);
  pl_shim_leave();
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
  /* Registered: the shim's thread undoes it, then frees the block. */
  if (PL_UNLIKELY(pl_pinreg_any()) && pl_pinreg_defer_free(p, 0, pl_next.free)) return;
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

/* realloc of a block `u` bytes long that a registration of the shim's
 * covers: the block moves, as a realloc may always do, and the old one is
 * freed as free() frees it (its registration undone on the shim's thread).
 * Shrinking to nothing frees: the registration is undone here first. */
static void *pl_realloc_registered(void *old, size_t u, size_t n, const void *ra, const void *sp) {
  if (n == 0) {
    /* glibc's realloc(p, 0) frees p and returns NULL: as free() does. */
    pl_untrack(old);
    if (!pl_pinreg_defer_free(old, u, pl_next.free)) pl_next.free(old);
    return NULL;
  }
  void *p = pl_next.malloc(n);
  if (p == NULL) return NULL; /* the old block is intact, still tracked */
  memcpy(p, old, n < u ? n : u);
  pl_untrack(old);
  if (!pl_pinreg_defer_free(old, u, pl_next.free)) pl_next.free(old);
  if (n >= pl_track_min) pl_track(p, n, ra, sp);
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
  if (old && PL_UNLIKELY(pl_pinreg_any())) {
    size_t u = pl_next.malloc_usable_size ? pl_next.malloc_usable_size(old) : 0;
    if (u && pl_pinreg_touches((uintptr_t)old, u)) return pl_realloc_registered(old, u, n, ra, sp);
  }
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

#define PL_ALIGNED_HOOK(name, ...)                                     \
  do {                                                                 \
    if (PL_UNLIKELY(!pl_next_ready())) return pl_arena_alloc(n, 4096); \
    if (pl_next.name == NULL) {                                        \
      errno = ENOMEM;                                                  \
      return NULL;                                                     \
    }                                                                  \
    void *p = pl_next.name(__VA_ARGS__);                               \
    if (n >= pl_track_min) pl_track(p, n, PL_SITE);                    \
    return p;                                                          \
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

/* Only memory a program could copy from, and what the registration
 * engine may do with it: anonymous private writable mappings may be
 * registered (unless another allocator serves malloc); shared and
 * file-backed ones are tracked so that the report can say why they never
 * are: registering them costs MMU-notifier work (2-12x slower model loads
 * in vLLM and SGLang).  -1: not tracked. */
static int pl_mmap_origin(int prot, int flags) {
  if ((flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE)
    return (prot & PROT_WRITE) ? (pl_foreign_heap ? PL_ORIGIN_MAPONLY : PL_ORIGIN_MMAP) : -1;
  return (prot & (PROT_READ | PROT_WRITE)) ? PL_ORIGIN_SHARED : -1;
}

/* The next mmap family, or the system call itself before the constructor
 * resolved them (the allocator's own start-up can map memory that early). */
static inline bool pl_map_resolved(void) {
  return atomic_load_explicit(&pl_map_ready, memory_order_acquire);
}

static void *pl_next_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (PL_LIKELY(pl_map_resolved())) return pl_map.mmap(addr, len, prot, flags, fd, off);
  return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* Track a mapping [p, p+n) made from return address ra: a one-frame site
 * (see the top of this file), nothing for the allocator's own arenas. */
static void pl_track_mapping(void *p, size_t n, const void *ra, int origin) {
  if (n < pl_track_min || pl_shim_inside() || pl_from_allocator(ra)) return;
  pl_shim_enter();
  pl_hostmem_track_as(p, n, pl_stack_capture_ra(ra),
                      origin == PL_ORIGIN_MMAP ? origin | PL_ALLOC_OWN_PAGES : origin);
  pl_shim_leave();
}

/* [p, p+n) is about to be released: undo the shim's registrations in it
 * first.  One atomic load while there are none. */
static inline void pl_release(const void *p, size_t n) {
  if (PL_LIKELY(!pl_pinreg_any())) return;
  int saved = errno;
  pl_pinreg_release((uintptr_t)p, n);
  errno = saved;
}

static inline bool pl_tracking_on(void) {
  return atomic_load_explicit(&pl_tracking, memory_order_acquire);
}

PL_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  /* A fixed mapping replaces whatever was there. */
  if ((flags & MAP_FIXED) && PL_UNLIKELY(pl_pinreg_any())) {
    int saved = errno;
    pl_pinreg_map_fixed((uintptr_t)addr, len);
    errno = saved;
  }
  void *p = pl_next_mmap(addr, len, prot, flags, fd, off);
  if (p == MAP_FAILED || !pl_tracking_on()) return p;
  int saved = errno;
  pl_hostmem_invalidate(p, (flags & MAP_FIXED) ? len : 0);
  if (flags & MAP_FIXED) pl_hostmem_untrack_range(p, len);
  int origin = pl_mmap_origin(prot, flags);
  if (origin >= 0) pl_track_mapping(p, len, __builtin_return_address(0), origin);
  errno = saved;
  return p;
}
PL_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

PL_EXPORT int munmap(void *addr, size_t len) {
  /* Untrack first: after munmap the address can be reused at once. */
  if (pl_tracking_on()) {
    int saved = errno;
    pl_hostmem_untrack_range(addr, len);
    pl_hostmem_invalidate(addr, len);
    errno = saved;
  }
  int rc;
  if (PL_UNLIKELY(pl_pinreg_any())) {
    int saved = errno;
    if (pl_pinreg_unmap((uintptr_t)addr, len, &rc)) return rc;
    errno = saved;
  }
  if (PL_LIKELY(pl_map_resolved())) return pl_map.munmap(addr, len);
  return (int)syscall(SYS_munmap, addr, len);
}

PL_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *new_addr = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void *);
    va_end(ap);
  }
  bool tracking = pl_tracking_on();
  /* What it was stays what it is: a mapping of unknown origin (too small
   * to be tracked) is never registered. */
  int origin = PL_ORIGIN_MAPONLY;
  if (tracking) {
    int saved = errno;
    uintptr_t b;
    size_t sz;
    int kind;
    if (pl_hostmem_lookup((uintptr_t)old, &b, &sz, &kind)) origin = kind & PL_ORIGIN_MASK;
    pl_hostmem_untrack_range(old, old_len);
    pl_hostmem_invalidate(old, old_len);
    errno = saved;
  }
  void *p = MAP_FAILED;
  bool done = false;
  if (PL_UNLIKELY(pl_pinreg_any())) {
    int saved = errno;
    if ((flags & MREMAP_FIXED) && new_addr != NULL)
      pl_pinreg_map_fixed((uintptr_t)new_addr, new_len);
    done = pl_pinreg_remap((uintptr_t)old, old_len, new_len, flags, new_addr, &p);
    if (!done) errno = saved;
  }
  if (!done)
    p = PL_LIKELY(pl_map_resolved())
            ? pl_map.mremap(old, old_len, new_len, flags, new_addr)
            : (void *)syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
  if (tracking) {
    int saved = errno;
    const void *ra = __builtin_return_address(0);
    if (p != MAP_FAILED)
      pl_track_mapping(p, new_len, ra, origin);
    else
      pl_track_mapping(old, old_len, ra, origin); /* unchanged: keep knowing it */
    errno = saved;
  }
  return p;
}

/* Same rules as mmap: no unwinding, no dlsym, no allocation on the way to
 * the real call (an allocator madvises its free extents holding its own
 * lock; those never hold a registration, so pl_release finds nothing). */
PL_EXPORT int madvise(void *addr, size_t len, int advice) {
  bool discards = advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE;
#ifdef MADV_DONTNEED_LOCKED
  discards = discards || advice == MADV_DONTNEED_LOCKED;
#endif
  if (discards && PL_UNLIKELY(pl_pinreg_any())) {
    int rc, saved = errno;
    if (pl_pinreg_discard((uintptr_t)addr, len, advice, &rc)) return rc;
    errno = saved;
  }
  if (PL_LIKELY(pl_map_resolved())) return pl_map.madvise(addr, len, advice);
  return (int)syscall(SYS_madvise, addr, len, advice);
}

/* The heap's end, moved by the program itself (glibc's own malloc moves it
 * with internal calls that never come here). */
extern void *__sbrk(intptr_t);

PL_EXPORT void *sbrk(intptr_t incr) {
  if (incr < 0 && PL_UNLIKELY(pl_pinreg_any())) {
    char *end = __sbrk(0);
    if (end != (char *)-1) pl_release(end + incr, (size_t)-incr);
  }
  return __sbrk(incr);
}

PL_EXPORT int brk(void *addr) {
  char *end = __sbrk(0);
  if (end == (char *)-1) return -1;
  if ((char *)addr < end) pl_release(addr, (size_t)(end - (char *)addr));
  return __sbrk((char *)addr - end) == (void *)-1 ? -1 : 0;
}
