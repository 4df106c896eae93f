// static_app.cu - a program as a default `nvcc` build makes it: cudart
// linked statically, its copies made from functions of its own, its host
// buffers allocated in one (tests/gpu/corpus_static.sh).  The report must
// name upload_weights, download_results and make_host_buffer with their
// lines, never cudart's code linked beside them.  Prints the lines and the
// outcome as name=value pairs.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int upload_line, download_line, alloc_line;
static volatile int sink;

__global__ void scale(float *x, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f;
}

__attribute__((noinline)) static float *make_host_buffer(size_t n) {
  float *h = (float *)malloc(n * sizeof *h);
  alloc_line = __LINE__ - 1;
  sink++; /* no tail call: this frame stays on the stack */
  return h;
}

__attribute__((noinline)) static int upload_weights(float *d, const float *h, size_t n) {
  int rc = cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess;
  upload_line = __LINE__ - 1;
  sink++;
  return rc;
}

__attribute__((noinline)) static int download_results(float *h, const float *d, size_t n,
                                                      cudaStream_t s) {
  int rc = cudaMemcpyAsync(h, d, n * sizeof *h, cudaMemcpyDeviceToHost, s) != cudaSuccess;
  download_line = __LINE__ - 1;
  rc |= cudaStreamSynchronize(s) != cudaSuccess;
  sink++;
  return rc;
}

int main(void) {
  const size_t n = 16u << 20; /* 64 MiB of floats */
  const int steps = 20;
  float *d = NULL;
  cudaStream_t s;
  if (cudaMalloc(&d, n * sizeof *d) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) return 1;
  float *in = make_host_buffer(n), *out = make_host_buffer(n);
  if (!in || !out) return 1;
  long wrong = 0;
  for (int step = 0; step < steps; step++) {
    for (size_t i = 0; i < n; i++) in[i] = (float)(i % 1000) + step;
    if (upload_weights(d, in, n)) return 1;
    scale<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(d, n);
    if (download_results(out, d, n, s)) return 1;
    for (size_t i = 0; i < n; i++) wrong += out[i] != in[i] * 2.0f;
  }
  printf("upload_line=%d download_line=%d alloc_line=%d copies=%d wrong=%ld\n", upload_line,
         download_line, alloc_line, 2 * steps, wrong);
  free(in);
  free(out);
  cudaFree(d);
  return wrong != 0;
}
