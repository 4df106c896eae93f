/* bench_enqueue.c - what queuing one operation costs the calling thread.
 *
 * The asynchronous device-to-host path of the staging engine returns once
 * it has queued its DMAs and host functions, so its call time is the sum
 * of these costs.  Each is measured on a stream in three states: held by
 * a 200 ms kernel, held by a host function waiting for a flag, and idle
 * (every operation starts at once).
 *
 *   bench_enqueue [CHUNK_MIB]   prints one "result hold=... key=value ..."
 *                               line per state, median ns per call */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "../../demo/spin_ptx.h"
#define BENCH_NAME "bench_enqueue"
#include "bench_util.h"

static void CUDA_CB noop(void *arg) { (void)arg; }
static atomic_int gate;
static void CUDA_CB wait_gate(void *arg) {
  (void)arg;
  while (!atomic_load(&gate)) {}
}

#define N 32

int main(int argc, char **argv) {
  size_t chunk = (size_t)(argc > 1 ? atoi(argv[1]) : 8) << 20;
  CUdevice dev;
  CUcontext ctx;
  CUmodule m;
  CUfunction f;
  CUstream s;
  CUdeviceptr d;
  void *h;
  DRV(cuInit(0));
  DRV(cuDeviceGet(&dev, 0));
  DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
  DRV(cuCtxSetCurrent(ctx));
  DRV(cuModuleLoadData(&m, pagelock_spin_ptx));
  DRV(cuModuleGetFunction(&f, m, "pagelock_spin"));
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  DRV(cuMemAlloc(&d, 4 * chunk));
  DRV(cuMemHostAlloc(&h, 4 * chunk, CU_MEMHOSTALLOC_PORTABLE));
  unsigned long long spin = 200000000ull;
  void *params[] = {&spin};
  double dma[N], fn[N], id[N], batch[N], big[N];
  static const char *const holds[] = {"kernel", "kernel", "hostfn",
                                      "idle"}; /* the first pass warms up */
  for (int rep = 0; rep < 4; rep++) {
    atomic_store(&gate, 0);
    if (rep < 2)
      DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    else if (rep == 2)
      DRV(cuLaunchHostFunc(s, wait_gate, NULL));
    for (int i = 0; i < N; i++) {
      double t0 = now_s() * 1e9;
      DRV(cuMemcpyDtoHAsync((char *)h + (size_t)(i % 4) * chunk, d + (size_t)(i % 4) * chunk, chunk,
                            s));
      double t1 = now_s() * 1e9;
      DRV(cuLaunchHostFunc(s, noop, NULL));
      double t2 = now_s() * 1e9;
      unsigned long long sid;
      DRV(cuStreamGetId(s, &sid));
      double t3 = now_s() * 1e9;
      /* four chunks in one call */
      CUdeviceptr dsts[4], srcs[4];
      size_t sizes[4], idx = 0;
      for (int k = 0; k < 4; k++) {
        dsts[k] = (CUdeviceptr)(uintptr_t)((char *)h + (size_t)k * chunk);
        srcs[k] = d + (size_t)k * chunk;
        sizes[k] = chunk;
      }
      CUmemcpyAttributes at;
      memset(&at, 0, sizeof at);
      at.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
      at.srcLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
      at.dstLocHint.type = CU_MEM_LOCATION_TYPE_HOST;
      CUresult br = cuMemcpyBatchAsync(dsts, srcs, sizes, 4, &at, &idx, 1, s);
      double t4 = now_s() * 1e9;
      DRV(cuMemcpyDtoHAsync(h, d, 4 * chunk, s));
      double t5 = now_s() * 1e9;
      dma[i] = t1 - t0;
      fn[i] = t2 - t1;
      id[i] = t3 - t2;
      batch[i] = br == CUDA_SUCCESS ? t4 - t3 : -1;
      big[i] = t5 - t4;
    }
    atomic_store(&gate, 1);
    DRV(cuStreamSynchronize(s));
    if (rep > 0)
      printf(
          "result hold=%s chunk_mib=%zu dma_ns=%.0f hostfn_ns=%.0f streamid_ns=%.0f batch4_ns=%.0f dma4x_ns=%.0f\n",
          holds[rep], chunk >> 20, median(dma, N), median(fn, N), median(id, N), median(batch, N),
          median(big, N));
  }
  return 0;
}
