/* guard_alloc.c - a next allocator unlike glibc's, preloaded after the
 * shim (LD_PRELOAD=libpagelock.so:libguard_alloc.so), as jemalloc or
 * tcmalloc would be.  Every block starts a fresh mapping right after a
 * PROT_NONE page: there is no chunk header below it, and reading the word
 * below a block faults.  The shim's hooks must then call it for every
 * request and never look below a block (hook_alloc.c, pl_glibc_small).
 * Blocks are found again through a small table; mappings are made with
 * the raw system call so the shim's mmap hook does not see them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GA_SLOTS 65536u
#define GA_PAGE 4096u
static struct { char *p; size_t n; } ga_tab[GA_SLOTS];
static pthread_mutex_t ga_mu = PTHREAD_MUTEX_INITIALIZER;
/* Blocks this allocator served: the test reads it to see it was used. */
__attribute__((visibility("default"))) unsigned long guard_alloc_count;

static size_t ga_len(size_t n) { return ((n ? n : 1) + GA_PAGE - 1) / GA_PAGE * GA_PAGE + GA_PAGE; }
static size_t ga_hash(const void *p) { return ((uintptr_t)p >> 12) * 2654435761u % GA_SLOTS; }

/* Size of block p, or (size_t)-1 when p is not ours; `drop` forgets it. */
static size_t ga_find(void *p, int drop) {
  size_t n = (size_t)-1;
  pthread_mutex_lock(&ga_mu);
  for (size_t i = ga_hash(p), k = 0; k < GA_SLOTS; k++, i = (i + 1) % GA_SLOTS) {
    if (ga_tab[i].p == NULL) break;
    if (ga_tab[i].p == p) {
      n = ga_tab[i].n;
      if (drop) ga_tab[i].p = (char *)1; /* a tombstone keeps probes going */
      break;
    }
  }
  pthread_mutex_unlock(&ga_mu);
  return n;
}

__attribute__((visibility("default"))) void *malloc(size_t n) {
  if (n > ((size_t)1 << 40)) { errno = ENOMEM; return NULL; }
  char *m = (char *)syscall(SYS_mmap, NULL, ga_len(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) { errno = ENOMEM; return NULL; }
  syscall(SYS_mprotect, m, GA_PAGE, PROT_NONE);
  char *p = m + GA_PAGE;
  pthread_mutex_lock(&ga_mu);
  size_t i = ga_hash(p), k = 0;
  while (k++ < GA_SLOTS && ga_tab[i].p != NULL && ga_tab[i].p != (char *)1) i = (i + 1) % GA_SLOTS;
  ga_tab[i].p = p;
  ga_tab[i].n = n;
  guard_alloc_count++;
  pthread_mutex_unlock(&ga_mu);
  return p;
}

__attribute__((visibility("default"))) void free(void *p) {
  if (p == NULL) return;
  size_t n = ga_find(p, 1);
  if (n != (size_t)-1) syscall(SYS_munmap, (char *)p - GA_PAGE, ga_len(n));
}

__attribute__((visibility("default"))) void *calloc(size_t k, size_t n) {
  if (n && k > SIZE_MAX / n) { errno = ENOMEM; return NULL; }
  return malloc(k * n); /* fresh mappings are zero */
}

__attribute__((visibility("default"))) void *realloc(void *old, size_t n) {
  if (old == NULL) return malloc(n);
  size_t was = ga_find(old, 0);
  if (was == (size_t)-1) { errno = EINVAL; return NULL; }
  void *p = malloc(n);
  if (p == NULL) return NULL;
  memcpy(p, old, was < n ? was : n);
  free(old);
  return p;
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void *p) {
  size_t n = p ? ga_find(p, 0) : 0;
  return n == (size_t)-1 ? 0 : n;
}
