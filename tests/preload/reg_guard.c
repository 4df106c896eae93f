/* reg_guard.c - fails a test loudly the moment memory is released while
 * any byte of it is still page-locked (issue 18: no stale registrations).
 *
 * Preloaded after the shim, LD_PRELOAD=libpagelock.so:libpl_reg_guard.so,
 * it is what the shim's hooks call as the next free, realloc, munmap,
 * mremap, madvise, brk and sbrk: it sees each release after the shim has
 * had its chance to undo its registrations and before the allocator or the
 * kernel gets the memory.  It asks the fake driver
 * (fakecuda_registered_bytes_in) whether any byte of the range is still
 * registered and, if so, prints
 *   reg_guard: STALE REGISTRATION: <call> of [p, p+n) while [a, b) is registered
 * on stderr and exits with status 86.  Over the real driver a registration
 * whose memory is freed keeps the old pages pinned and DMA goes to them:
 * silent corruption, which is why this has to be caught in CI.
 *
 * It keeps the rules of the hooks it sits under: nothing here allocates,
 * unwinds or takes a lock but the fake driver's own range lock (which the
 * fake never holds across a call into the allocator); the next functions
 * are resolved in the constructor with the real dlsym (the shim owns
 * dlsym: dlvsym reaches libc's), and before that the calls go to glibc
 * directly, unchecked (nothing can be registered before main).
 *
 * The driver is looked up with dlopen("libcuda.so.1", RTLD_NOLOAD): in the
 * constructor when the program links it, else when the fake driver's own
 * constructor calls reg_guard_driver_loaded (a runtime dlopens it later).
 * The real driver has no fakecuda_registered_bytes_in: then nothing is
 * checked.  In a forked child nothing is checked either: the registrations
 * are the parent's, and the child may free its copy of their pages.
 *
 * Built twice: libpl_reg_guard.so wraps all seven calls;
 * libpl_reg_guard_map.so (RG_MAP_ONLY) leaves free and realloc alone,
 * because the shim registers mmap'd ranges only when its next free is
 * glibc's (tests/preload/run.sh, case_autopin_churn).
 *
 * REG_GUARD_VERBOSE=1: at exit, one line saying how many releases were
 * checked (a test can then tell that the guard was really watching). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RG_EXPORT __attribute__((visibility("default")))
#define RG_STATUS 86

typedef size_t (*rg_query_fn)(const void *, size_t, const void **, size_t *);
typedef void *(*rg_dlsym_fn)(void *, const char *);

static struct {
  void (*free)(void *);
  void *(*realloc)(void *, size_t);
  size_t (*usable)(void *);
  int (*munmap)(void *, size_t);
  void *(*mremap)(void *, size_t, size_t, int, ...);
  int (*madvise)(void *, size_t, int);
  int (*brk)(void *);
  void *(*sbrk)(intptr_t);
} rg_next;
static atomic_bool rg_ready;          /* rg_next is complete */
static _Atomic(rg_query_fn) rg_query; /* the fake driver's, once found */
static atomic_bool rg_child;          /* a forked child: the registrations are the parent's */
static atomic_ulong rg_checked;
static size_t rg_page = 4096;
static int rg_verbose;

/* glibc's own entry points, for calls that arrive before the constructor. */
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__sbrk(intptr_t);

static rg_dlsym_fn rg_real_dlsym(void) {
  rg_dlsym_fn f = (rg_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (f == NULL) f = (rg_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (f == NULL) f = (rg_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17"); /* aarch64 */
  return f;
}

/* Find the fake driver's query.  Called from constructors only (ours, or
 * the fake driver's while it is being loaded), never from a hook. */
RG_EXPORT void reg_guard_driver_loaded(void) {
  if (atomic_load(&rg_query) != NULL) return;
  rg_dlsym_fn real = rg_real_dlsym();
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (real == NULL || h == NULL) return;
  /* The handle is kept: the driver then stays loaded while we point into it. */
  rg_query_fn q = (rg_query_fn)real(h, "fakecuda_registered_bytes_in");
  if (q != NULL) atomic_store(&rg_query, q);
}

static void rg_atfork_child(void) { atomic_store(&rg_child, true); }

__attribute__((constructor)) static void rg_init(void) {
  long pg = sysconf(_SC_PAGESIZE);
  if (pg > 0) rg_page = (size_t)pg;
  const char *v = getenv("REG_GUARD_VERBOSE");
  rg_verbose = v != NULL && v[0] == '1';
  rg_dlsym_fn real = rg_real_dlsym();
  if (real != NULL) {
    /* Called from here, the real dlsym's RTLD_NEXT is relative to this
     * library: the functions after us (glibc's). */
#define RG_NEXT(field, name) *(void **)&rg_next.field = real(RTLD_NEXT, name)
    RG_NEXT(free, "free");
    RG_NEXT(realloc, "realloc");
    RG_NEXT(usable, "malloc_usable_size");
    RG_NEXT(munmap, "munmap");
    RG_NEXT(mremap, "mremap");
    RG_NEXT(madvise, "madvise");
    RG_NEXT(brk, "brk");
    RG_NEXT(sbrk, "sbrk");
#undef RG_NEXT
    if (rg_next.free && rg_next.realloc && rg_next.usable && rg_next.munmap && rg_next.mremap &&
        rg_next.madvise && rg_next.brk && rg_next.sbrk)
      atomic_store_explicit(&rg_ready, true, memory_order_release);
  }
  pthread_atfork(NULL, NULL, rg_atfork_child);
  reg_guard_driver_loaded();
}

static void rg_puts(const char *s) {
  if (write(2, s, strlen(s)) < 0) {}
}

__attribute__((destructor)) static void rg_fini(void) {
  if (!rg_verbose || atomic_load(&rg_child) || atomic_load(&rg_query) == NULL) return;
  char buf[96] = "reg_guard: checked ", digits[24];
  unsigned long n = atomic_load(&rg_checked);
  int k = 0;
  do digits[k++] = (char)('0' + n % 10);
  while ((n /= 10) != 0);
  size_t at = strlen(buf);
  while (k > 0) buf[at++] = digits[--k];
  buf[at] = 0;
  rg_puts(buf);
  rg_puts(" releases against the driver's registrations\n");
}

static char *rg_hex(char *out, uintptr_t v) {
  char tmp[2 * sizeof v];
  int k = 0;
  do tmp[k++] = "0123456789abcdef"[v & 15];
  while ((v >>= 4) != 0);
  *out++ = '0';
  *out++ = 'x';
  while (k > 0) *out++ = tmp[--k];
  return out;
}

static __attribute__((noreturn)) void rg_die(const char *call, uintptr_t p, size_t n, const void *a,
                                             size_t len) {
  char line[256], *o = line;
  static const char head[] = "reg_guard: STALE REGISTRATION: ";
  memcpy(o, head, sizeof head - 1);
  o += sizeof head - 1;
  size_t cl = strlen(call);
  memcpy(o, call, cl);
  o += cl;
  memcpy(o, " of [", 5);
  o = rg_hex(o + 5, p);
  *o++ = ',';
  *o++ = ' ';
  o = rg_hex(o, p + n);
  memcpy(o, ") while [", 9);
  o = rg_hex(o + 9, (uintptr_t)a);
  *o++ = ',';
  *o++ = ' ';
  o = rg_hex(o, (uintptr_t)a + len);
  static const char tail[] = ") is registered\n";
  memcpy(o, tail, sizeof tail - 1);
  o += sizeof tail - 1;
  if (write(2, line, (size_t)(o - line)) < 0) {}
  _exit(RG_STATUS);
}

/* The release of [p, p+n) by `call` is about to reach the allocator or the
 * kernel: nothing of it may still be registered. */
static inline void rg_check(const char *call, const void *p, size_t n) {
  rg_query_fn q = atomic_load_explicit(&rg_query, memory_order_acquire);
  if (q == NULL || n == 0 || atomic_load_explicit(&rg_child, memory_order_relaxed)) return;
  atomic_fetch_add_explicit(&rg_checked, 1, memory_order_relaxed);
  const void *a = NULL;
  size_t len = 0;
  if (q(p, n, &a, &len) != 0) rg_die(call, (uintptr_t)p, n, a, len);
}

/* The kernel releases whole pages. */
static size_t rg_pages(const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p, e = a + n;
  if (e < a) return UINTPTR_MAX - a;
  return (size_t)((e + rg_page - 1) / rg_page * rg_page - a);
}

static inline bool rg_on(void) { return atomic_load_explicit(&rg_ready, memory_order_acquire); }

#ifndef RG_MAP_ONLY
RG_EXPORT void free(void *p) {
  if (!rg_on()) {
    __libc_free(p);
    return;
  }
  if (p != NULL) rg_check("free", p, rg_next.usable(p));
  rg_next.free(p);
}

RG_EXPORT void *realloc(void *old, size_t n) {
  if (!rg_on()) return __libc_realloc(old, n);
  /* A realloc may always move the block: all of it counts as released. */
  if (old != NULL) rg_check("realloc", old, rg_next.usable(old));
  return rg_next.realloc(old, n);
}
#endif

RG_EXPORT int munmap(void *p, size_t n) {
  if (!rg_on()) return (int)syscall(SYS_munmap, p, n);
  rg_check("munmap", p, rg_pages(p, n));
  return rg_next.munmap(p, n);
}

RG_EXPORT void *mremap(void *old, size_t old_n, size_t new_n, int flags, ...) {
  void *want = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    want = va_arg(ap, void *);
    va_end(ap);
  }
  if (!rg_on()) return (void *)syscall(SYS_mremap, old, old_n, new_n, flags, want);
  /* old_n == 0 duplicates a shared mapping: nothing is released. */
  rg_check("mremap", old, rg_pages(old, old_n));
  return rg_next.mremap(old, old_n, new_n, flags, want);
}

RG_EXPORT int madvise(void *p, size_t n, int advice) {
  if (!rg_on()) return (int)syscall(SYS_madvise, p, n, advice);
  bool discards = advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE;
#ifdef MADV_DONTNEED_LOCKED
  discards = discards || advice == MADV_DONTNEED_LOCKED;
#endif
  if (discards) rg_check("madvise", p, rg_pages(p, n));
  return rg_next.madvise(p, n, advice);
}

RG_EXPORT int brk(void *end) {
  if (!rg_on()) {
    void *cur = __sbrk(0);
    return __sbrk((intptr_t)((uintptr_t)end - (uintptr_t)cur)) == (void *)-1 ? -1 : 0;
  }
  uintptr_t cur = (uintptr_t)rg_next.sbrk(0);
  if ((uintptr_t)end < cur) rg_check("brk", end, cur - (uintptr_t)end);
  return rg_next.brk(end);
}

RG_EXPORT void *sbrk(intptr_t inc) {
  if (!rg_on()) return __sbrk(inc);
  if (inc < 0) {
    uintptr_t cur = (uintptr_t)rg_next.sbrk(0);
    rg_check("sbrk", (void *)(cur - (uintptr_t)-inc), (size_t)-inc);
  }
  return rg_next.sbrk(inc);
}
