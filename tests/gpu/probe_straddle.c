/* probe_straddle.c - what the real driver does with a copy whose host range
 * crosses the edge of a registered range (cudaHostRegister).  The shim's
 * registration engine cuts pass-through copies at those edges
 * (shim/engines/pinreg.c, pl_pinreg_native) and fakecuda models the answer
 * (tests/fakecuda/fc_copy.c); this program is where the answer comes from.
 * Prints one line per case: the error each copy returned, sync and async.
 * Build: nvcc -o probe_straddle probe_straddle.c (tests/gpu/run.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define PG 4096

static void one(const char *what, char *h, size_t n, void *dev, cudaStream_t s) {
  cudaError_t a = cudaMemcpy(dev, h, n, cudaMemcpyHostToDevice);
  cudaGetLastError();
  cudaError_t b = cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, s);
  cudaGetLastError();
  cudaError_t c = cudaMemcpyAsync(h, dev, n, cudaMemcpyDeviceToHost, s);
  cudaGetLastError();
  cudaStreamSynchronize(s);
  printf("probe_straddle: %-44s H2D sync %d, H2D async %d, D2H async %d\n", what, (int)a, (int)b,
         (int)c);
}

int main(void) {
  char *p = aligned_alloc(PG, 8 * PG);
  void *dev;
  cudaStream_t s;
  if (p == NULL || cudaMalloc(&dev, 8 * PG) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess)
    return 2;
  memset(p, 1, 8 * PG);
  /* registered: pages 2..5 */
  if (cudaHostRegister(p + 2 * PG, 4 * PG, 0) != cudaSuccess) return 3;
  one("inside", p + 2 * PG + 100, 2 * PG, dev, s);
  one("starts inside, ends at the end", p + 2 * PG + 100, 4 * PG - 100, dev, s);
  one("starts inside, runs past the end", p + 2 * PG + 100, 4 * PG, dev, s);
  one("starts before, ends inside", p + PG, 2 * PG, dev, s);
  one("starts before, runs past the end", p + PG, 6 * PG, dev, s);
  cudaHostUnregister(p + 2 * PG);
  return 0;
}
