/* fresh.c - a buffer allocated anew for every step, each copied once
 * (fresh), against one buffer copied again and again (reuse): 12 steps
 * of a 2 MiB upload either way.  The report must tell them apart: the
 * first gets "12 buffers allocated at ... were each copied once", the
 * second the advice to pin the buffer it reuses (tests/preload/run.sh,
 * case_fresh_buffers). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 12
#define N ((size_t)2 << 20)

__attribute__((noinline)) static unsigned char *make_batch(void) { return malloc(N); }

int main(int argc, char **argv) {
  int fresh = argc > 1 && strcmp(argv[1], "fresh") == 0;
  void *d;
  if (cudaMalloc(&d, N) != cudaSuccess) return 1;
  unsigned char *keep = fresh ? NULL : make_batch();
  for (int i = 0; i < STEPS; i++) {
    unsigned char *h = fresh ? make_batch() : keep;
    memset(h, i, N);
    if (cudaMemcpy(d, h, N, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
    if (fresh) free(h);
  }
  free(keep);
  cudaFree(d);
  printf("steps=%d fresh=%d\n", STEPS, fresh);
  return 0;
}
