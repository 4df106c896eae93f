/* copies.c - a CUDA runtime program with a known set of copies.
 *
 * Makes exactly PL_PAGEABLE pageable and PL_PINNED pinned host<->device
 * copies (sync and async, both directions, odd sizes), checks that every
 * byte arrives, and prints what it did so the test can compare the trace.
 * Built against the fake cudart in CI and the real one on the GPU machine. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "copies: %s failed: %s\n", #x, cudaGetErrorString(e_)); \
      exit(2);                                                                \
    }                                                                         \
  } while (0)

static const size_t sizes[] = {1, 4097, 65536, (1u << 20) + 3, 5u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed);
}

/* One round trip host->device->host through `src`/`dst` host buffers. */
static int roundtrip(unsigned char *src, unsigned char *dst, void *dev, size_t n, int async,
                     cudaStream_t s, unsigned seed) {
  fill(src, n, seed);
  memset(dst, 0, n);
  if (async) {
    CHECK(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dst, dev, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
  } else {
    CHECK(cudaMemcpy(dev, src, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dst, dev, n, cudaMemcpyDeviceToHost));
  }
  if (memcmp(src, dst, n) != 0) {
    fprintf(stderr, "copies: bytes differ after a %zu-byte %s round trip\n", n,
            async ? "async" : "sync");
    return 1;
  }
  return 0;
}

int main(void) {
  size_t max = sizes[NSIZES - 1];
  unsigned char *ps = malloc(max), *pd = malloc(max), *hs, *hd;
  void *dev;
  cudaStream_t s;
  CHECK(cudaMalloc(&dev, max));
  CHECK(cudaMallocHost((void **)&hs, max));
  CHECK(cudaMallocHost((void **)&hd, max));
  CHECK(cudaStreamCreate(&s));
  int bad = 0;
  unsigned long pageable = 0, pinned = 0, pageable_bytes = 0, pinned_bytes = 0;
  for (size_t i = 0; i < NSIZES; i++) {
    for (int async = 0; async < 2; async++) {
      bad |= roundtrip(ps, pd, dev, sizes[i], async, s, (unsigned)(i * 7 + async));
      pageable += 2, pageable_bytes += 2 * sizes[i];
      bad |= roundtrip(hs, hd, dev, sizes[i], async, s, (unsigned)(i * 11 + async));
      pinned += 2, pinned_bytes += 2 * sizes[i];
    }
  }
  /* cudaMemcpyDefault goes through cuMemcpy: the shim must classify both
   * sides itself. */
  fill(ps, 4096, 99);
  CHECK(cudaMemcpy(dev, ps, 4096, cudaMemcpyDefault));
  CHECK(cudaMemcpy(pd, dev, 4096, cudaMemcpyDefault));
  pageable += 2, pageable_bytes += 8192;
  if (memcmp(ps, pd, 4096) != 0) {
    fprintf(stderr, "copies: cudaMemcpyDefault bytes differ\n");
    bad = 1;
  }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(hs));
  CHECK(cudaFreeHost(hd));
  free(ps);
  free(pd);
  printf("pageable=%lu pageable_bytes=%lu pinned=%lu pinned_bytes=%lu\n", pageable, pageable_bytes,
         pinned, pinned_bytes);
  return bad;
}
