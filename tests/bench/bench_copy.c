/* bench_copy.c - copy timings for tests/bench/run.sh.
 *
 *   bench_copy h2d|d2h KIND SIZE REPS    bandwidth (stream-synchronised) and
 *                                        the time the call itself took (d2h
 *                                        pageable: also the same call from a
 *                                        pinned buffer, pinned_call_us)
 *   bench_copy small KIND 256 REPS       host time per cudaMemcpyAsync call
 *                                        (10,000 calls a repetition)
 *   bench_copy overlap KIND SIZE REPS    a kernel stream and a copy stream:
 *                                        end-to-end time of 8 copies of SIZE
 *                                        beside 8 kernels of equal length
 *   bench_copy pipe KIND SIZE REPS       a pipeline: 8 uploads of SIZE on one
 *                                        stream beside 8 downloads of SIZE on
 *                                        another, end-to-end time
 *   bench_copy tiny KIND 4096 REPS       the profiler's worst case: 2,000
 *                                        empty kernels each followed by a
 *                                        4 KB copy on one stream, time per
 *                                        pair (us), end to end
 *   bench_copy probe pinned SIZE REPS    what this process pays for the
 *                                        basics: a clock read, a trivial
 *                                        driver call, a stream query, a
 *                                        host function, and one SIZE copy
 *                                        call from pinned memory (us); they
 *                                        differ from process to process
 *                                        (tests/bench/diag_proc.sh)
 * KIND is pinned or pageable.  Prints one line "result key=value ..." with
 * medians over REPS; the shim (or not) is chosen by whoever runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "../../reporter/demo/spin_ptx.h"
#define BENCH_NAME "bench_copy"
#include "bench_util.h"

#define RT(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) { fprintf(stderr, "bench_copy: %s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } \
  } while (0)
static void *host_alloc(const char *kind, size_t n) {
  void *p;
  if (strcmp(kind, "pinned") == 0) RT(cudaMallocHost(&p, n));
  else p = malloc(n);
  memset(p, 0x5a, n); /* fault the pages in: first-touch is not the copy's cost */
  return p;
}

static void CUDA_CB bench_nop(void *arg) { (void)arg; }

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: bench_copy h2d|d2h|small|overlap|pipe|tiny|probe pinned|pageable SIZE REPS\n"); return 2; }
  const char *mode = argv[1], *kind = argv[2];
  size_t size = strtoull(argv[3], NULL, 10);
  int reps = atoi(argv[4]);
  if (reps < 1 || reps > 1000) reps = 5;
  double *v = calloc((size_t)reps, sizeof *v), *call = calloc((size_t)reps, sizeof *call);
  void *dev;
  cudaStream_t s, k;
  RT(cudaFree(0));
  RT(cudaMalloc(&dev, size < 256 ? 256 : size));
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  RT(cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking));
  void *host = host_alloc(kind, size);

  if (!strcmp(mode, "h2d") || !strcmp(mode, "d2h")) {
    int h2d = mode[0] == 'h';
    /* Three warm-up repetitions: the shim's pinned pool grows on demand
     * (a cuMemHostAlloc of ~2.7 ms per 8 MiB chunk, once), and the steady
     * state is what a program copying in a loop sees. */
    for (int r = -3; r < reps; r++) {
      double t0 = now_s();
      if (h2d) RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      else RT(cudaMemcpyAsync(host, dev, size, cudaMemcpyDeviceToHost, s));
      double t1 = now_s();
      RT(cudaStreamSynchronize(s));
      double t2 = now_s();
      if (r >= 0) { v[r] = size / (t2 - t0) / 1e9; call[r] = (t1 - t0) * 1e6; }
      if (getenv("BENCH_VERBOSE")) fprintf(stderr, "rep %d: %.2f GB/s, call %.1f us\n", r, size / (t2 - t0) / 1e9, (t1 - t0) * 1e6);
    }
    double gbps = median(v, reps), us = median(call, reps);
    /* The same call from a pinned buffer, in this process, after it: the
     * driver's own cost of queuing one copy.  It differs from process to
     * process (on the H200 host 2 us in some, 10-20 us in others, on any
     * CPU), and a staged asynchronous download pays it for every DMA and
     * host function it queues. */
    double ref = 0;
    if (!h2d && strcmp(kind, "pageable") == 0) {
      void *pin;
      RT(cudaMallocHost(&pin, size));
      for (int r = -3; r < reps; r++) {
        double t0 = now_s();
        RT(cudaMemcpyAsync(pin, dev, size, cudaMemcpyDeviceToHost, s));
        double t1 = now_s();
        RT(cudaStreamSynchronize(s));
        if (r >= 0) call[r] = (t1 - t0) * 1e6;
      }
      ref = median(call, reps);
      RT(cudaFreeHost(pin));
    }
    printf("result mode=%s kind=%s size=%zu gbps=%.2f call_us=%.1f pinned_call_us=%.1f\n", mode, kind, size, gbps, us, ref);
  } else if (!strcmp(mode, "small")) {
    const int calls = 10000;
    for (int r = -1; r < reps; r++) {
      double t0 = now_s();
      for (int i = 0; i < calls; i++) RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      double t1 = now_s();
      RT(cudaStreamSynchronize(s));
      if (r >= 0) v[r] = (t1 - t0) / calls * 1e9;
    }
    printf("result mode=small kind=%s size=%zu ns_per_call=%.1f\n", kind, size, median(v, reps));
  } else if (!strcmp(mode, "overlap")) {
    CUmodule m;
    CUfunction f;
    DRV(cuModuleLoadData(&m, pagelock_spin_ptx));
    DRV(cuModuleGetFunction(&f, m, "pagelock_spin"));
    /* Each kernel lasts as long as one pinned copy of SIZE at ~50 GB/s, so
     * perfect overlap halves the serial time. */
    unsigned long long ns = (unsigned long long)(size / 50.0);
    void *params[] = {&ns};
    for (int r = -1; r < reps; r++) {
      RT(cudaDeviceSynchronize());
      double t0 = now_s();
      for (int i = 0; i < 8; i++) {
        DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)k, params, NULL));
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      }
      RT(cudaDeviceSynchronize());
      if (r >= 0) v[r] = (now_s() - t0) * 1e3;
    }
    printf("result mode=overlap kind=%s size=%zu ms=%.2f kernel_ms=%.2f\n", kind, size, median(v, reps),
           8 * ns / 1e6);
  } else if (!strcmp(mode, "pipe")) {
    /* Uploads of the next batch on s beside downloads of the last results
     * on k: what a training loop does.  The download's buffer is apart. */
    void *out = host_alloc(kind, size), *dev2;
    RT(cudaMalloc(&dev2, size));
    for (int r = -1; r < reps; r++) {
      RT(cudaDeviceSynchronize());
      double t0 = now_s();
      for (int i = 0; i < 8; i++) {
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
        RT(cudaMemcpyAsync(out, dev2, size, cudaMemcpyDeviceToHost, k));
      }
      RT(cudaDeviceSynchronize());
      if (r >= 0) v[r] = (now_s() - t0) * 1e3;
    }
    printf("result mode=pipe kind=%s size=%zu ms=%.2f\n", kind, size, median(v, reps));
  } else if (!strcmp(mode, "probe")) {
    const int n = 100000;
    struct timespec ts;
    CUcontext cx;
    double t0 = now_s();
    for (int i = 0; i < n; i++) clock_gettime(CLOCK_MONOTONIC, &ts);
    double clock_ns = (now_s() - t0) / n * 1e9;
    t0 = now_s();
    for (int i = 0; i < n; i++) DRV(cuCtxGetCurrent(&cx));
    double ctx_ns = (now_s() - t0) / n * 1e9;
    t0 = now_s();
    for (int i = 0; i < n; i++) (void)cuStreamQuery((CUstream)s);
    double query_ns = (now_s() - t0) / n * 1e9;
    t0 = now_s();
    for (int i = 0; i < 1000; i++) RT(cudaLaunchHostFunc(s, bench_nop, NULL));
    double hostfn_ns = (now_s() - t0) / 1000 * 1e9;
    RT(cudaStreamSynchronize(s));
    for (int r = -2; r < reps; r++) {
      t0 = now_s();
      RT(cudaMemcpyAsync(host, dev, size, cudaMemcpyDeviceToHost, s));
      double t1 = now_s();
      RT(cudaStreamSynchronize(s));
      if (r >= 0) call[r] = (t1 - t0) * 1e6;
    }
    printf("result mode=probe clock_ns=%.1f ctx_ns=%.1f stream_query_ns=%.1f hostfn_ns=%.0f call_us=%.1f\n", clock_ns,
           ctx_ns, query_ns, hostfn_ns, median(call, reps));
  } else if (!strcmp(mode, "tiny")) {
    CUmodule m;
    CUfunction f;
    DRV(cuModuleLoadData(&m, pagelock_spin_ptx));
    DRV(cuModuleGetFunction(&f, m, "pagelock_spin"));
    unsigned long long ns = 0;
    void *params[] = {&ns};
    const int pairs = 2000;
    for (int r = -1; r < reps; r++) {
      RT(cudaDeviceSynchronize());
      double t0 = now_s();
      for (int i = 0; i < pairs; i++) {
        DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, params, NULL));
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      }
      RT(cudaStreamSynchronize(s));
      if (r >= 0) v[r] = (now_s() - t0) / pairs * 1e6;
    }
    printf("result mode=tiny kind=%s size=%zu us_per_pair=%.2f\n", kind, size, median(v, reps));
  } else {
    fprintf(stderr, "bench_copy: unknown mode %s\n", mode);
    return 2;
  }
  return 0;
}
