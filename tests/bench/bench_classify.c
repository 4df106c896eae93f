/* bench_classify.c - cost of classifying a host pointer, cached.
 * Links the shim's sources (pagelock_core) and the program's libcuda; a
 * tracked 1 MiB buffer is classified once (driver query) and then 1e6
 * times from the registry.  Prints the median ns per call of REPS runs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pl_internal.h"
#include "hostmem.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 7;
  if (reps < 1 || reps > 100) reps = 7;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  CUresult (*init)(unsigned) = h ? (CUresult(*)(unsigned))dlsym(h, "cuInit") : NULL;
  if (!init || init(0) != CUDA_SUCCESS) {
    fprintf(stderr, "bench_classify: no CUDA driver\n");
    return 2;
  }
  size_t n = 1 << 20;
  char *buf = malloc(n);
  pl_hostmem_init(64 << 10);
  pl_hostmem_track(buf, n, 0);
  int first = pl_hostmem_classify((CUdeviceptr)(uintptr_t)buf);
  double t[100];
  const int calls = 1000000;
  volatile int sink = 0;
  for (int r = 0; r < reps; r++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < calls; i++)
      sink += pl_hostmem_classify((CUdeviceptr)(uintptr_t)(buf + (i & 0xfffff)));
    clock_gettime(CLOCK_MONOTONIC, &b);
    t[r] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / calls;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
  /* the driver query itself, for comparison */
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  char *other = malloc(4096);
  for (int i = 0; i < 100000; i++)
    sink += pl_hostmem_classify((CUdeviceptr)(uintptr_t)(other + (i & 1023)));
  clock_gettime(CLOCK_MONOTONIC, &b);
  double q = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 100000;
  printf("result mode=classify kind=%s cached_ns=%.1f uncached_ns=%.1f\n",
         first == PAGELOCK_MEM_PAGEABLE ? "pageable" : "other", t[reps / 2], q);
  return 0;
}
