// sync_reuse.cu - the synchronous loop cuda-samples' bandwidthTest times:
// one malloc'd (or, with "pinned", cudaMallocHost'd) 256 MiB buffer copied
// with cudaMemcpy 100 times to the device, then 100 times back, each
// direction averaged from its first copy; the first three uploads and
// downloads also timed one by one (a buffer's first copies: issue 42).
// The bytes are checked at the end.  Prints one line of key=value pairs
// (tests/gpu/speed_real.sh).  A default nvcc build: static cudart.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#define CK(x)                                                        \
  do {                                                               \
    cudaError_t e_ = (x);                                            \
    if (e_ != cudaSuccess) {                                         \
      fprintf(stderr, "sync_reuse: %s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(1);                                                       \
    }                                                                \
  } while (0)

int main(int argc, char **argv) {
  int pinned = argc > 1 && strcmp(argv[1], "pinned") == 0;
  int iters = argc > 2 ? atoi(argv[2]) : 100;
  size_t n = (size_t)256 << 20;
  unsigned char *h;
  void *d;
  CK(cudaFree(0));
  if (pinned)
    CK(cudaMallocHost((void **)&h, n));
  else
    h = (unsigned char *)malloc(n);
  CK(cudaMalloc(&d, n));
  for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + 3);
  double first_up[3], first_down[3];
  double t0 = now_ms();
  for (int i = 0; i < iters; i++) {
    double a = now_ms();
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    if (i < 3) first_up[i] = now_ms() - a;
  }
  double up = (now_ms() - t0) / iters;
  memset(h, 0, n);
  t0 = now_ms();
  for (int i = 0; i < iters; i++) {
    double a = now_ms();
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    if (i < 3) first_down[i] = now_ms() - a;
  }
  double down = (now_ms() - t0) / iters;
  long wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += h[i] != (unsigned char)(i * 7 + 3);
  printf("sync_reuse %s h2d_ms=%.3f d2h_ms=%.3f h2d_gbps=%.2f d2h_gbps=%.2f first_up=%.2f,%.2f,%.2f "
         "first_down=%.2f,%.2f,%.2f wrong=%ld\n",
         pinned ? "pinned" : "pageable", up, down, n / up / 1e6, n / down / 1e6, first_up[0],
         first_up[1], first_up[2], first_down[0], first_down[1], first_down[2], wrong);
  return wrong != 0;
}
