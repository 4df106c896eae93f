/* bench_path.c - the shim's own time on one copy call, without the driver's.
 *
 * Links the shim's sources (pagelock_core) and drives pl_copy_exec() as the
 * cuMemcpyHtoDAsync_v2 wrapper does, with a native call that returns at
 * once: what is left is classification, call stack, correlation, the two
 * clock reads and the COPY record, for a 256-byte pageable source.  Steadier
 * than `bench_copy ab`, where the driver's own 1.6-1.9 us call and its
 * process-to-process swings come with it; it leaves out what the driver's
 * work does to the shim's cache lines.  The mode is the environment's
 * (PAGELOCK_MODE; stage passes a 256-byte copy through like observe).
 *
 * usage: bench_path [CALLS [REPS]]  (default 200000 calls, 7 repetitions);
 * prints the median ns per call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pl_internal.h"
#include "clock.h"
#include "copy.h"
#include "hostmem.h"
#define BENCH_NAME "bench_path"
#include "bench_util.h"

static CUresult bench_native(const pl_copy *c) {
  (void)c;
  return CUDA_SUCCESS;
}

/* As PL_WRAP_HTOD_ASYNC builds it (shim/hooks/hook_copy.c). */
__attribute__((noinline)) static CUresult bench_wrapper(const void *src) {
  pl_copy c = {.api = PAGELOCK_API_cuMemcpyHtoDAsync_v2,
               .flags = PAGELOCK_COPY_ASYNC,
               .dir = PAGELOCK_DIR_H2D,
               .dst = 0x1000,
               .src = (CUdeviceptr)(uintptr_t)src,
               .bytes = 256,
               .callsite = __builtin_return_address(0),
               .native = bench_native,
               .dst_mem = PAGELOCK_MEM_DEVICE};
  return pl_copy_exec(&c);
}

int main(int argc, char **argv) {
  long calls = argc > 1 ? atol(argv[1]) : 200000;
  int reps = argc > 2 ? atoi(argv[2]) : 7;
  if (calls < 1 || reps < 1 || reps > 100) {
    fprintf(stderr, "usage: bench_path [CALLS [REPS (1-100)]]\n");
    return 2;
  }
  /* The classification asks the driver about a pointer now and then. */
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  CUresult (*init)(unsigned) = h ? (CUresult(*)(unsigned))dlsym(h, "cuInit") : NULL;
  if (!init || init(0) != CUDA_SUCCESS) {
    fprintf(stderr, "bench_path: no CUDA driver\n");
    return 2;
  }
  pl_hostmem_init(64 << 10);
  char *src = malloc(256);
  if (src == NULL) return 1;
  double v[100];
  int failed = 0;
  for (int r = -1; r < reps; r++) {
    double t0 = now_s();
    for (long i = 0; i < calls; i++) failed |= bench_wrapper(src) != CUDA_SUCCESS;
    if (r >= 0) v[r] = (now_s() - t0) * 1e9 / (double)calls;
  }
  printf("result mode=path ns_per_call=%.1f clock=%s\n", median(v, reps),
         pl_clock_calibrated() ? "tsc" : "clock_gettime");
  free(src);
  return failed;
}
