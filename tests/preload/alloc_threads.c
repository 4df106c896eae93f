/* alloc_threads.c - 200 threads allocating at once, started together, under
 * whatever allocator the program has: glibc's, or jemalloc, tcmalloc or
 * mimalloc preloaded before or after the shim (tests/preload/alloc_matrix.sh).
 * Every malloc-family call, and mmap, mremap and munmap, with sizes on
 * both sides of PAGELOCK_TRACK_MIN; meanwhile one more thread dlopens and
 * dlcloses a library (the loader mallocs while it holds its lock) and the
 * main thread forks children that allocate.  Each thread ends holding one
 * malloc'd and one mmap'd block of 256 KiB; under the shim, its registry
 * must be consistent and hold exactly those it can see: the malloc'd ones
 * when its malloc is the program's (not when an allocator preloaded ahead
 * of it serves malloc), the mapped ones when its mmap is (tcmalloc defines
 * mmap too), and nothing else (an allocator's own arenas are not
 * allocations).
 *   usage: alloc_threads [THREADS [ROUNDS [LIBRARY_TO_DLOPEN]]]
 * Prints one line; exit 0 when every byte held and the counts match, 1
 * when not, 3 when its watchdog found it hung. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP (256u << 10)
#define PAGE 4096u

static int rounds = 30;
static pthread_barrier_t start;
static atomic_int workers_left, bad;
static atomic_long ops;
static void *keep_heap[1024], *keep_map[1024];

/* A byte per page and the last one, so that large blocks cost little. */
static void fill(unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i += PAGE) p[i] = (unsigned char)(v + i / PAGE);
  p[n - 1] = v;
}

static int check(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n - 1; i += PAGE)
    if (p[i] != (unsigned char)(v + i / PAGE)) return 0;
  return p[n - 1] == v;
}

static void fail(const char *what, size_t n) {
  fprintf(stderr, "alloc_threads: %s (%zu bytes)\n", what, n);
  bad++;
}

static size_t pick(unsigned *seed) {
  /* half small (a few bytes to 4 KiB), half 64 KiB to 576 KiB */
  return rand_r(seed) % 2 ? 1 + (size_t)rand_r(seed) % 4096
                          : (64u << 10) + (size_t)rand_r(seed) % (512u << 10);
}

static void one_op(unsigned *seed) {
  size_t n = pick(seed);
  unsigned char v = (unsigned char)rand_r(seed);
  unsigned char *p;
  switch (rand_r(seed) % 6) {
    case 0:
      if ((p = malloc(n)) == NULL) {
        fail("malloc failed", n);
        return;
      }
      fill(p, n, v);
      if (!check(p, n, v)) fail("malloc'd bytes changed", n);
      free(p);
      break;
    case 1:
      if ((p = calloc(1, n)) == NULL) {
        fail("calloc failed", n);
        return;
      }
      for (size_t i = 0; i < n; i += PAGE / 4)
        if (p[i] != 0) {
          fail("calloc'd memory not zero", n);
          break;
        }
      free(p);
      break;
    case 2: {
      if ((p = malloc(n)) == NULL) {
        fail("malloc failed", n);
        return;
      }
      fill(p, n, v);
      size_t m = pick(seed);
      unsigned char *q = realloc(p, m);
      if (q == NULL) {
        fail("realloc failed", m);
        free(p);
        return;
      }
      size_t k = n < m ? n : m;
      for (size_t i = 0; i + 1 < k; i += PAGE)
        if (q[i] != (unsigned char)(v + i / PAGE)) {
          fail("realloc lost bytes", m);
          break;
        }
      free(q);
      break;
    }
    case 3: {
      void *a = NULL;
      if (posix_memalign(&a, 4096, n) != 0 || ((uintptr_t)a & 4095)) {
        fail("posix_memalign", n);
        return;
      }
      fill(a, n, v);
      free(a);
      if ((p = aligned_alloc(64, (n + 63) & ~(size_t)63)) == NULL || ((uintptr_t)p & 63)) {
        fail("aligned_alloc", n);
        return;
      }
      free(p);
      break;
    }
    case 4: {
      size_t len = (n + PAGE - 1) & ~(size_t)(PAGE - 1);
      p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        fail("mmap failed", len);
        return;
      }
      fill(p, len, v);
      unsigned char *q = mremap(p, len, len * 2, MREMAP_MAYMOVE);
      if (q == MAP_FAILED) {
        fail("mremap failed", len * 2);
        munmap(p, len);
        return;
      }
      if (!check(q, len, v)) fail("mremap lost bytes", len);
      if (munmap(q, len * 2) != 0) fail("munmap failed", len * 2);
      break;
    }
    default: {
      /* unmap the middle of a mapping: the registry forgets all of it */
      size_t len = 3 * (64u << 10);
      p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        fail("mmap failed", len);
        return;
      }
      fill(p, len, v);
      if (munmap(p + (64u << 10), 64u << 10) != 0) fail("munmap of the middle failed", len);
      munmap(p, 64u << 10);
      munmap(p + (128u << 10), 64u << 10);
      break;
    }
  }
  ops++;
}

static void *worker(void *arg) {
  long i = (long)arg;
  unsigned seed = (unsigned)i * 2654435761u + 1;
  pthread_barrier_wait(&start);
  for (int r = 0; r < rounds; r++) one_op(&seed);
  /* left live on purpose: the registry must hold these and nothing else */
  keep_heap[i] = malloc(KEEP);
  keep_map[i] = mmap(NULL, KEEP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (keep_heap[i] == NULL || keep_map[i] == MAP_FAILED)
    fail("kept block", KEEP);
  else {
    fill(keep_heap[i], KEEP, 7);
    fill(keep_map[i], KEEP, 9);
  }
  workers_left--;
  return NULL;
}

static void *loader(void *arg) {
  const char *lib = arg;
  pthread_barrier_wait(&start);
  while (atomic_load(&workers_left) > 0) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      fprintf(stderr, "alloc_threads: dlopen %s: %s\n", lib, dlerror());
      bad++;
      return NULL;
    }
    dlclose(h);
  }
  return NULL;
}

/* 1 when the program's `name` is the one defined next to `shim_fn`. */
static int shim_serves(void *shim_fn, const char *name) {
  Dl_info a, b;
  return dladdr(shim_fn, &a) && dladdr(dlsym(RTLD_DEFAULT, name), &b) && a.dli_fbase == b.dli_fbase;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "alloc_threads: watchdog fired: deadlock or hang\n";
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(3);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 200;
  if (argc > 2) rounds = atoi(argv[2]);
  const char *lib = argc > 3 ? argv[3] : NULL;
  if (threads < 1 || threads > 1024 || rounds < 0) {
    fprintf(stderr, "usage: alloc_threads [THREADS (1-1024) [ROUNDS [LIBRARY]]]\n");
    return 2;
  }
  signal(SIGALRM, watchdog);
  alarm(120);
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1 + (lib != NULL));
  workers_left = threads;
  pthread_t t[1024], lt;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256u << 10);
  for (long i = 0; i < threads; i++)
    if (pthread_create(&t[i], &attr, worker, (void *)i) != 0) {
      fprintf(stderr, "alloc_threads: pthread_create\n");
      return 1;
    }
  if (lib && pthread_create(&lt, &attr, loader, (void *)lib) != 0) {
    fprintf(stderr, "alloc_threads: pthread_create\n");
    return 1;
  }
  pthread_barrier_wait(&start);
  /* Forks while everyone allocates: each child allocates and exits. */
  int forks = 0;
  for (int f = 0; f < 4 && atomic_load(&workers_left) > 0; f++) {
    pid_t pid = fork();
    if (pid == 0) {
      void *p = malloc(1 << 20),
           *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == NULL || m == MAP_FAILED) _exit(1);
      memset(p, 1, 1 << 20);
      free(p);
      munmap(m, 1 << 20);
      _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fail("forked child", 0);
      break;
    }
    forks++;
  }
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  if (lib) pthread_join(lt, NULL);
  for (int i = 0; i < threads; i++)
    if (!check(keep_heap[i], KEEP, 7) || !check(keep_map[i], KEEP, 9))
      fail("a kept block changed", KEEP);

  char verdict[200] = "shim=no";
  int (*registry_check)(size_t *, size_t *) =
      (int (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "pagelock_registry_check");
  if (registry_check) {
    /* The shim sees malloc'd blocks only when its malloc is the program's,
     * and mapped ones when its mmap is (tcmalloc defines mmap too). */
    int heap = shim_serves(registry_check, "malloc"), map = shim_serves(registry_check, "mmap");
    size_t tracked = 0, want = (size_t)threads * (size_t)(heap + map);
    int ok = registry_check(&tracked, NULL);
    snprintf(verdict, sizeof verdict,
             "registry=%s tracked=%zu expected=%zu shim_malloc=%s shim_mmap=%s",
             ok ? "consistent" : "BROKEN", tracked, want, heap ? "yes" : "no", map ? "yes" : "no");
    if (!ok || tracked != want) bad++;
  }
  for (int i = 0; i < threads; i++) {
    free(keep_heap[i]);
    munmap(keep_map[i], KEEP);
  }
  printf("alloc_threads: %s threads=%d ops=%ld forks=%d %s\n", bad ? "FAIL" : "ok", threads,
         atomic_load(&ops), forks, verdict);
  return bad ? 1 : 0;
}
