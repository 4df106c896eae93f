/* sample.c - a program of many small copies, for the GPU-timing sampler
 * (shim/record/cupti.c, PAGELOCK_CUPTI_MAX_RATE).
 *
 * usage: test_sample MS [GAP_US [MEMSETS]]
 * Copies 4 KiB up and 8 bytes back down on a stream, a synchronize after
 * each pair, for MS milliseconds, GAP_US microseconds of sleep between
 * pairs (0: none), and checks every byte that came back.  MEMSETS: that
 * many cudaMemsetAsync of 64 bytes after each pair (GPU operations that
 * are not copy calls, as kernels are).  Prints "sample: iters=N
 * wrong=W". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "sample: %s failed: %s\n", #x, cudaGetErrorString(e_)); \
      exit(2);                                                                \
    }                                                                         \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_sample MS [GAP_US [MEMSETS]]\n");
    return 2;
  }
  double ms = atof(argv[1]);
  long gap_us = argc > 2 ? atol(argv[2]) : 0;
  int memsets = argc > 3 ? atoi(argv[3]) : 0;
  unsigned char *up = malloc(4096), *down = malloc(8);
  void *dev;
  cudaStream_t s;
  CHECK(cudaMalloc(&dev, 4096));
  CHECK(cudaStreamCreate(&s));
  unsigned long iters = 0, wrong = 0;
  double end = now_ms() + ms;
  while (now_ms() < end) {
    for (int i = 0; i < 4096; i++) up[i] = (unsigned char)(i * 7u + iters);
    memset(down, 0, 8);
    CHECK(cudaMemcpyAsync(dev, up, 4096, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(down, (char *)dev + 100, 8, cudaMemcpyDeviceToHost, s));
    for (int k = 0; k < memsets; k++) CHECK(cudaMemsetAsync((char *)dev + 1024, k, 64, s));
    CHECK(cudaStreamSynchronize(s));
    if (memcmp(down, up + 100, 8) != 0) wrong++;
    iters++;
    if (gap_us > 0) {
      struct timespec g = {gap_us / 1000000, (gap_us % 1000000) * 1000};
      nanosleep(&g, NULL);
    }
  }
  printf("sample: iters=%lu wrong=%lu\n", iters, wrong);
  return wrong ? 1 : 0;
}
