/* guard_alloc.c - a malloc unlike glibc's, preloaded after the shim
 * (LD_PRELOAD=libpagelock.so:libguard_alloc.so) as the next allocator, or
 * before it as the program's own, as jemalloc or tcmalloc would be.
 *  - Every block starts a fresh mapping right after a PROT_NONE page: there
 *    is no chunk header below it, and reading the word below a block
 *    faults.  The shim's hooks must then call it for every request and
 *    never look below a block (hook_alloc.c, pl_glibc_small).
 *  - It calls mmap and munmap through the dynamic linker (so the shim's
 *    hooks see them) while holding its own mutex, as jemalloc does with its
 *    extent locks.  A hook that allocates from there (the first
 *    backtrace() loads libgcc_s, dlsym may calloc) re-enters this
 *    allocator on the same thread: where jemalloc would deadlock, this one
 *    says so on stderr and exits with status 86.
 *  - It serves the whole malloc family, the aligned calls included, as
 *    jemalloc and tcmalloc do: with posix_memalign and aligned_alloc left
 *    to glibc, 200 threads attached to glibc's arenas beside it and one
 *    run in ~150 aborted inside glibc at thread exit ("assertion failed:
 *    a->attached_threads > 0"), with or without the shim.
 * Blocks are found again through a small table. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GA_SLOTS 65536u
#define GA_PAGE 4096u
static struct {
  char *p;
  size_t n;
} ga_tab[GA_SLOTS];
static pthread_mutex_t ga_mu = PTHREAD_MUTEX_INITIALIZER;
/* volatile: the compiler would otherwise drop the store, as nothing it can
 * see reads it before the store that clears it. */
static __thread volatile int ga_held __attribute__((tls_model("initial-exec")));
/* Blocks this allocator served: the test reads it to see it was used. */
__attribute__((visibility("default"))) unsigned long guard_alloc_count;

static size_t ga_len(size_t n) { return ((n ? n : 1) + GA_PAGE - 1) / GA_PAGE * GA_PAGE + GA_PAGE; }
static size_t ga_hash(const void *p) { return ((uintptr_t)p >> 12) * 2654435761u % GA_SLOTS; }

static void ga_lock(const char *entry) {
  if (ga_held) {
    static const char msg[] =
        "guard_alloc: re-entered from inside its own mmap/munmap (a hook allocated there): ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, entry, strlen(entry)) < 0 ||
        write(2, "\n", 1) < 0) {}
    _exit(86);
  }
  pthread_mutex_lock(&ga_mu);
  ga_held = 1;
}

static void ga_unlock(void) {
  ga_held = 0;
  pthread_mutex_unlock(&ga_mu);
}

/* Held across fork, as every allocator's lock must be: a child must not
 * inherit it locked by a thread that does not exist there. */
static void ga_prefork(void) { pthread_mutex_lock(&ga_mu); }
static void ga_postfork(void) { pthread_mutex_unlock(&ga_mu); }
__attribute__((constructor)) static void ga_init(void) {
  pthread_atfork(ga_prefork, ga_postfork, ga_postfork);
}

/* Size of block p, or (size_t)-1 when p is not ours; `drop` forgets it and
 * unmaps it (under the lock). */
static size_t ga_find(void *p, int drop, const char *entry) {
  size_t n = (size_t)-1;
  ga_lock(entry);
  for (size_t i = ga_hash(p), k = 0; k < GA_SLOTS; k++, i = (i + 1) % GA_SLOTS) {
    if (ga_tab[i].p == NULL) break;
    if (ga_tab[i].p == p) {
      n = ga_tab[i].n;
      if (drop) {
        ga_tab[i].p = (char *)1; /* a tombstone keeps probes going */
        munmap((char *)p - GA_PAGE, ga_len(n));
      }
      break;
    }
  }
  ga_unlock();
  return n;
}

/* A block of n bytes aligned to `align` (a power of two): a page aligns
 * every block; a larger alignment maps that much more and unmaps what lies
 * around [p - GA_PAGE, p - GA_PAGE + ga_len(n)), so a block is always that
 * one mapping (ga_find unmaps exactly it). */
static void *ga_alloc_aligned(size_t align, size_t n, const char *entry) {
  if (n > ((size_t)1 << 40) || align > ((size_t)1 << 30)) {
    errno = ENOMEM;
    return NULL;
  }
  size_t extra = align > GA_PAGE ? align : 0;
  ga_lock(entry);
  char *m =
      mmap(NULL, ga_len(n) + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    ga_unlock();
    errno = ENOMEM;
    return NULL;
  }
  char *p = m + GA_PAGE;
  if (extra) {
    p = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    char *lo = p - GA_PAGE, *hi = lo + ga_len(n);
    if (lo > m) munmap(m, (size_t)(lo - m));
    if (m + ga_len(n) + extra > hi) munmap(hi, (size_t)(m + ga_len(n) + extra - hi));
  }
  mprotect(p - GA_PAGE, GA_PAGE, PROT_NONE);
  size_t i = ga_hash(p), k = 0;
  while (k++ < GA_SLOTS && ga_tab[i].p != NULL && ga_tab[i].p != (char *)1) i = (i + 1) % GA_SLOTS;
  ga_tab[i].p = p;
  ga_tab[i].n = n;
  guard_alloc_count++;
  ga_unlock();
  return p;
}

static void *ga_alloc(size_t n, const char *entry) { return ga_alloc_aligned(GA_PAGE, n, entry); }

__attribute__((visibility("default"))) void *malloc(size_t n) { return ga_alloc(n, "malloc"); }

__attribute__((visibility("default"))) void free(void *p) {
  if (p != NULL) (void)ga_find(p, 1, "free");
}

__attribute__((visibility("default"))) void *calloc(size_t k, size_t n) {
  if (n && k > SIZE_MAX / n) {
    errno = ENOMEM;
    return NULL;
  }
  return ga_alloc(k * n, "calloc"); /* fresh mappings are zero */
}

__attribute__((visibility("default"))) void *realloc(void *old, size_t n) {
  if (old == NULL) return ga_alloc(n, "realloc");
  size_t was = ga_find(old, 0, "realloc");
  if (was == (size_t)-1) {
    errno = EINVAL;
    return NULL;
  }
  void *p = ga_alloc(n, "realloc");
  if (p == NULL) return NULL;
  memcpy(p, old, was < n ? was : n);
  free(old);
  return p;
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void *p) {
  size_t n = p ? ga_find(p, 0, "malloc_usable_size") : 0;
  return n == (size_t)-1 ? 0 : n;
}

static int ga_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

__attribute__((visibility("default"))) int posix_memalign(void **out, size_t align, size_t n) {
  if (!ga_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
  void *p = ga_alloc_aligned(align, n, "posix_memalign");
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

__attribute__((visibility("default"))) void *aligned_alloc(size_t align, size_t n) {
  if (!ga_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return ga_alloc_aligned(align, n, "aligned_alloc");
}

__attribute__((visibility("default"))) void *memalign(size_t align, size_t n) {
  return aligned_alloc(align, n);
}

__attribute__((visibility("default"))) void *valloc(size_t n) { return ga_alloc(n, "valloc"); }

__attribute__((visibility("default"))) void *pvalloc(size_t n) {
  return ga_alloc((n + GA_PAGE - 1) / GA_PAGE * GA_PAGE, "pvalloc");
}
