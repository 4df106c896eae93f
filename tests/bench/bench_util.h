/* bench_util.h - what the GPU benchmarks share: failing loudly on a CUDA
 * error (a benchmark that goes on after one measures nothing), a monotonic
 * clock and the median of repetitions.  BENCH_NAME prefixes the errors. */
#ifndef PAGELOCK_BENCH_UTIL_H
#define PAGELOCK_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

#define DRV(x)                                               \
  do {                                                       \
    CUresult r_ = (x);                                       \
    if (r_ != CUDA_SUCCESS) {                                \
      fprintf(stderr, BENCH_NAME ": %s: %d\n", #x, (int)r_); \
      exit(2);                                               \
    }                                                        \
  } while (0)

/* The same for the runtime API, in programs that include it first. */
#ifdef CUDART_VERSION
#define RT(x)                                                               \
  do {                                                                      \
    cudaError_t e_ = (x);                                                   \
    if (e_ != cudaSuccess) {                                                \
      fprintf(stderr, BENCH_NAME ": %s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(2);                                                              \
    }                                                                       \
  } while (0)
#endif

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n), n >= 1 (sorts v). */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
