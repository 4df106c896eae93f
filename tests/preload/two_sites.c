/* two_sites.c - the same cudaMemcpy (same buffers, same size) from two
 * lines of main, 100 times each: one return address into the driver
 * hook (inside cudart) and one stack depth for both, yet two call sites
 * the report must tell apart, 100 copies each (tests/preload/run.sh,
 * case_two_sites). */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  void *d = NULL;
  char *h = malloc(4096);
  if (h == NULL || cudaMalloc(&d, 4096) != cudaSuccess) return 1;
  memset(h, 1, 4096);
  for (int i = 0; i < 100; i++) {
    if (cudaMemcpy(d, h, 4096, cudaMemcpyHostToDevice) != cudaSuccess) return 1; /* first */
    if (cudaMemcpy(d, h, 4096, cudaMemcpyHostToDevice) != cudaSuccess) return 1; /* second */
  }
  cudaFree(d);
  free(h);
  return 0;
}
