// bandwidth_like.cu - what cuda-samples' bandwidthTest --memory=pageable
// does, in a default nvcc build (static cudart): per transfer size, a
// malloc'd host buffer copied MEMCOPY_ITERATIONS times with cudaMemcpyAsync
// on the default stream between two events, then freed
// (tests/gpu/corpus_static.sh).  Under auto the report's allocation-site
// table must hold a row for every pageable copy (it printed its header and
// no rows), named by the test function that allocated the buffer.
// Arguments (CI runs it over the fake CUDA, compiled as C): iterations per
// size (100) and a divisor of the sizes (1).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMCOPY_ITERATIONS 100

static int h2d_alloc_line, d2h_alloc_line;

static int iterations = MEMCOPY_ITERATIONS;

__attribute__((noinline)) static float testHostToDeviceTransfer(size_t bytes) {
  unsigned char *h = (unsigned char *)malloc(bytes);
  h2d_alloc_line = __LINE__ - 1;
  void *d = NULL;
  if (!h || cudaMalloc(&d, bytes) != cudaSuccess) exit(1);
  memset(h, 1, bytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, 0);
  for (int i = 0; i < iterations; i++)
    if (cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, 0) != cudaSuccess) exit(1);
  cudaEventRecord(b, 0);
  cudaDeviceSynchronize();
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  free(h);
  cudaFree(d);
  return ms;
}

__attribute__((noinline)) static float testDeviceToHostTransfer(size_t bytes) {
  unsigned char *h = (unsigned char *)malloc(bytes);
  d2h_alloc_line = __LINE__ - 1;
  void *d = NULL;
  if (!h || cudaMalloc(&d, bytes) != cudaSuccess) exit(1);
  cudaMemset(d, 2, bytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, 0);
  for (int i = 0; i < iterations; i++)
    if (cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, 0) != cudaSuccess) exit(1);
  cudaEventRecord(b, 0);
  cudaDeviceSynchronize();
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  long wrong = 0;
  for (size_t i = 0; i < bytes; i++) wrong += h[i] != 2;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  free(h);
  cudaFree(d);
  if (wrong) {
    printf("wrong=%ld\n", wrong);
    exit(2);
  }
  return ms;
}

int main(int argc, char **argv) {
  /* bandwidthTest's quick mode copies 32 MB; two more sizes as its range mode does */
  size_t sizes[] = {4u << 20, 32u << 20, 64u << 20};
  size_t div = argc > 2 ? (size_t)atol(argv[2]) : 1;
  if (argc > 1) iterations = atoi(argv[1]);
  if (iterations < 1 || div < 1) return 1;
  int copies = 0;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t bytes = sizes[k] / div;
    float h2d = testHostToDeviceTransfer(bytes);
    float d2h = testDeviceToHostTransfer(bytes);
    printf("size %zu: H2D %.2f GB/s, D2H %.2f GB/s\n", bytes,
           bytes * (double)iterations / (h2d * 1e6), bytes * (double)iterations / (d2h * 1e6));
    copies += 2 * iterations;
  }
  printf("h2d_alloc_line=%d d2h_alloc_line=%d copies=%d wrong=0\n", h2d_alloc_line, d2h_alloc_line,
         copies);
  return 0;
}
