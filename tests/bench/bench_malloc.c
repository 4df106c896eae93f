/* bench_malloc.c - a malloc-heavy workload: 8 threads, each 200,000
 * operations mixing small (16 B - 4 KiB) and large (64 KiB - 1 MiB)
 * allocations, frees and reallocs.  Prints the median wall time of REPS
 * runs; tests/bench/run.sh runs it with and without the shim. */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 8
#define OPS 200000

static void *work(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *slot[64] = {0};
  for (int i = 0; i < OPS; i++) {
    int k = rand_r(&seed) % 64;
    int big = rand_r(&seed) % 50 == 0; /* 2% large */
    size_t n = big ? (size_t)(65536 + rand_r(&seed) % (1 << 20)) : (size_t)(16 + rand_r(&seed) % 4096);
    if (rand_r(&seed) % 4 == 0 && slot[k]) {
      void *p = realloc(slot[k], n);
      if (p) slot[k] = p;
    } else {
      free(slot[k]);
      slot[k] = malloc(n);
    }
    ((char *)slot[k])[0] = 1;
  }
  for (int k = 0; k < 64; k++) free(slot[k]);
  return NULL;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1 || reps > 100) reps = 5;
  double t[100];
  for (int r = 0; r < reps; r++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, work, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    t[r] = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
  printf("result mode=malloc ms=%.1f\n", t[reps / 2]);
  return 0;
}
