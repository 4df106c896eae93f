/* bench_malloc.c - a malloc-heavy workload: 8 threads, each 200,000
 * operations mixing small (16 B - 4 KiB) and large (64 KiB - 1 MiB)
 * allocations, frees and reallocs.  Prints the median wall time of REPS
 * runs; tests/bench/run.sh runs it with and without the shim.
 *
 *   bench_malloc REPS ab    the same workload through malloc/free/realloc
 *                           as the program finds them (the shim's hooks,
 *                           when preloaded) and through glibc's own
 *                           __libc_malloc/__libc_free/__libc_realloc,
 *                           alternating in one process: the hooks' cost
 *                           with the process-to-process spread (about 10%
 *                           on the GPU hosts) cancelled. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 8
#define OPS 200000

/* The allocator a run uses: both sets are called through pointers, as a
 * program calls malloc through its PLT. */
typedef struct allocator {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*realloc)(void *, size_t);
} allocator;
static allocator use;

static void *work(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *slot[64] = {0};
  for (int i = 0; i < OPS; i++) {
    int k = rand_r(&seed) % 64;
    int big = rand_r(&seed) % 50 == 0; /* 2% large */
    size_t n =
        big ? (size_t)(65536 + rand_r(&seed) % (1 << 20)) : (size_t)(16 + rand_r(&seed) % 4096);
    if (rand_r(&seed) % 4 == 0 && slot[k]) {
      void *p = use.realloc(slot[k], n);
      if (p) slot[k] = p;
    } else {
      use.free(slot[k]);
      slot[k] = use.malloc(n);
    }
    ((char *)slot[k])[0] = 1;
  }
  for (int k = 0; k < 64; k++) use.free(slot[k]);
  return NULL;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One run of the workload with allocator a: wall time, ms. */
static double run_once(allocator a) {
  use = a;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t th[THREADS];
  for (long i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, work, (void *)(i + 1));
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
}

static double med(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_d);
  return v[n / 2];
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1 || reps > 100) reps = 5;
  double t[100], u[100], q[100];
  allocator found = {malloc, free, realloc};
  if (argc > 2 && strcmp(argv[2], "ab") == 0) {
    allocator libc = {(void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc"),
                      (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free"),
                      (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "__libc_realloc")};
    if (!libc.malloc || !libc.free || !libc.realloc) {
      fprintf(stderr, "bench_malloc: no __libc_malloc\n");
      return 2;
    }
    (void)run_once(found); /* warm-up: arenas and threads' caches */
    (void)run_once(libc);
    for (int r = 0; r < reps; r++) {
      /* which goes first alternates: drift falls on both alike */
      if (r & 1) {
        u[r] = run_once(libc);
        t[r] = run_once(found);
      } else {
        t[r] = run_once(found);
        u[r] = run_once(libc);
      }
      q[r] = t[r] / u[r];
    }
    printf("result mode=malloc_ab hooked_ms=%.1f libc_ms=%.1f ratio=%.3f same=%d\n", med(t, reps),
           med(u, reps), med(q, reps), found.malloc == libc.malloc);
    return 0;
  }
  for (int r = 0; r < reps; r++) t[r] = run_once(found);
  printf("result mode=malloc ms=%.1f\n", med(t, reps));
  return 0;
}
