/* static_sites.c - a program linked with a static CUDA runtime, as a
 * default nvcc build is, whose copies come from functions of its own and
 * whose buffers are allocated in one: the report must name these
 * functions and lines, not the runtime's code linked beside them
 * (tests/preload/run.sh, case_static_sites).  Prints the lines it expects
 * as name=value pairs. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PL_BYTES (4u << 20)

static int upload_line, download_line, alloc_line;
static volatile int sink;

__attribute__((noinline)) static char *make_batch(size_t n) {
  char *h = malloc(n);
  alloc_line = __LINE__ - 1;
  if (h) memset(h, 7, n);
  sink++; /* no tail call: this frame stays on the stack */
  return h;
}

__attribute__((noinline)) static int upload_batch(void *d, const char *h, size_t n) {
  int rc = cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess;
  upload_line = __LINE__ - 1;
  sink++;
  return rc;
}

__attribute__((noinline)) static int download_result(char *h, const void *d, size_t n) {
  int rc = cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess;
  download_line = __LINE__ - 1;
  sink++;
  return rc;
}

int main(void) {
  void *d = NULL;
  if (cudaMalloc(&d, PL_BYTES) != cudaSuccess) return 1;
  char *in = make_batch(PL_BYTES), *out = make_batch(PL_BYTES);
  if (!in || !out) return 1;
  for (int i = 0; i < 4; i++) {
    if (upload_batch(d, in, PL_BYTES) || download_result(out, d, PL_BYTES)) return 1;
    if (memcmp(in, out, PL_BYTES) != 0) return 2;
  }
  printf("upload_line=%d download_line=%d alloc_line=%d\n", upload_line, download_line, alloc_line);
  free(in);
  free(out);
  cudaFree(d);
  return 0;
}
