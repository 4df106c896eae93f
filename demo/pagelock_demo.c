/* pagelock_demo.c - the workload `pagelock demo` runs: the same copy/compute
 * loop from pageable and from pinned memory, so the report shows what
 * pageable memory costs.  Plain CUDA runtime API plus the driver API for a
 * hand-written PTX kernel, so it builds with a C compiler alone.  The
 * driver functions come through cudaGetDriverEntryPointByVersion rather
 * than from linking libcuda: the real build then links only the static
 * runtime, and runs (and installs, and packages) on a machine whose
 * libcuda.so.1 comes from whatever driver install it has. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spin_ptx.h"

#define BIG (32u << 20)
#define SMALL 4096u
#define SPIN_NS 2000000ull

/* Wall-clock milliseconds for the phase timings the demo prints. */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The driver API calls the demo makes, resolved once at start. */
static struct {
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
} drv;

/* Exits 1 with the failing call's text when a runtime call fails. */
static void check_rt(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "pagelock-demo: %s failed: %s (%d)\n", what, cudaGetErrorString(e), (int)e);
  exit(1);
}

/* Same for driver API calls. */
static void check_drv(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  const char *s = NULL;
  if (!drv.GetErrorString || drv.GetErrorString(r, &s) != CUDA_SUCCESS || !s) s = "unknown error";
  fprintf(stderr, "pagelock-demo: %s failed: %s (%d)\n", what, s, (int)r);
  exit(1);
}

#define RT(call) check_rt((call), #call)
#define DRV(call) check_drv((call), #call)

/* Fills buf with a pattern that differs per seed so a stale buffer cannot
 * pass verification. */
static void fill(unsigned char *buf, size_t n, unsigned seed) {
  uint32_t x = 2463534242u ^ seed * 0x9e3779b9u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    buf[i] = (unsigned char)x;
  }
}

/* Exits 1 naming the first differing byte when a round trip lost data. */
static void verify(const void *a, const void *b, size_t n, const char *what) {
  if (memcmp(a, b, n) == 0) return;
  const unsigned char *x = a, *y = b;
  size_t i = 0;
  while (x[i] == y[i]) i++;
  fprintf(stderr,
          "pagelock-demo: %s: data mismatch at byte %zu (sent 0x%02x, got "
          "back 0x%02x)\n",
          what, i, x[i], y[i]);
  exit(1);
}

typedef struct demo {
  cudaStream_t stream;
  CUfunction spin;
  void *dev;
} demo;

/* Queues the 2 ms spin kernel on the demo stream: the compute copies
 * could overlap with. */
static void launch_spin(demo *d) {
  unsigned long long ns = SPIN_NS;
  void *params[] = {&ns};
  DRV(drv.LaunchKernel(d->spin, 1, 1, 1, 1, 1, 1, 0, (CUstream)d->stream, params, NULL));
}

/* iters x {H2D BIG from src, spin, D2H BIG into dst} on one stream, then a
 * round-trip check.  Returns the phase's wall time in ms. */
static double run_phase(demo *d, unsigned char *src, unsigned char *dst, int iters, unsigned seed,
                        const char *name) {
  fill(src, BIG, seed);
  memset(dst, 0, BIG);
  double t0 = now_ms();
  for (int i = 0; i < iters; i++) {
    RT(cudaMemcpyAsync(d->dev, src, BIG, cudaMemcpyHostToDevice, d->stream));
    launch_spin(d);
    RT(cudaMemcpyAsync(dst, d->dev, BIG, cudaMemcpyDeviceToHost, d->stream));
  }
  RT(cudaStreamSynchronize(d->stream));
  double ms = now_ms() - t0;
  verify(src, dst, BIG, name);
  return ms;
}

/* 4 KiB copies from each kind of host memory, sync and async, so the
 * report shows every kind it knows. */
static double small_copies(demo *d, unsigned char *pageable, unsigned char *pinned) {
  unsigned char *reg = aligned_alloc(SMALL, SMALL);
  unsigned char *back = malloc(SMALL);
  void *dev2 = NULL;
  if (!reg || !back) {
    fprintf(stderr, "pagelock-demo: out of memory\n");
    exit(1);
  }
  RT(cudaHostRegister(reg, SMALL, cudaHostRegisterDefault));
  RT(cudaMalloc(&dev2, SMALL));
  double t0 = now_ms();
  unsigned char *hosts[] = {pageable, pinned, reg};
  const char *names[] = {"small pageable", "small pinned", "small registered"};
  for (int k = 0; k < 3; k++) {
    fill(hosts[k], SMALL, 100 + k);
    RT(cudaMemcpy(d->dev, hosts[k], SMALL, cudaMemcpyHostToDevice));
    RT(cudaMemcpyAsync(dev2, d->dev, SMALL, cudaMemcpyDeviceToDevice, d->stream));
    RT(cudaStreamSynchronize(d->stream));
    memset(back, 0, SMALL);
    RT(cudaMemcpy(back, dev2, SMALL, cudaMemcpyDeviceToHost));
    verify(hosts[k], back, SMALL, names[k]);
    memcpy(back, hosts[k], SMALL);
    memset(hosts[k], 0, SMALL);
    RT(cudaMemcpyAsync(hosts[k], dev2, SMALL, cudaMemcpyDeviceToHost, d->stream));
    RT(cudaStreamSynchronize(d->stream));
    verify(back, hosts[k], SMALL, names[k]);
  }
  double ms = now_ms() - t0;
  RT(cudaFree(dev2));
  RT(cudaHostUnregister(reg));
  free(reg);
  free(back);
  return ms;
}

/* Fills drv, after the runtime has initialised (cudaSetDevice). */
static void resolve_driver(void) {
#define PL_DEMO_RESOLVE(field, name) \
  RT(cudaGetDriverEntryPointByVersion(name, (void **)&drv.field, 12000, cudaEnableDefault, NULL))
  PL_DEMO_RESOLVE(GetErrorString, "cuGetErrorString");
  PL_DEMO_RESOLVE(ModuleLoadData, "cuModuleLoadData");
  PL_DEMO_RESOLVE(ModuleGetFunction, "cuModuleGetFunction");
  PL_DEMO_RESOLVE(ModuleUnload, "cuModuleUnload");
  PL_DEMO_RESOLVE(LaunchKernel, "cuLaunchKernel");
#undef PL_DEMO_RESOLVE
}

int main(int argc, char **argv) {
  int iters = 8;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      iters = 2;
    } else {
      fprintf(stderr, "usage: pagelock-demo [--quick]\n");
      return 2;
    }
  }
  demo d;
  memset(&d, 0, sizeof d);
  /* cudaFree(0) makes the primary context current, so the driver-API
   * module below lands in the same context as the runtime's buffers. */
  RT(cudaSetDevice(0));
  RT(cudaFree(0));
  CUmodule mod;
  resolve_driver();
  DRV(drv.ModuleLoadData(&mod, pagelock_spin_ptx));
  DRV(drv.ModuleGetFunction(&d.spin, mod, "pagelock_spin"));
  RT(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
  RT(cudaMalloc(&d.dev, BIG));

  unsigned char *pg_src = malloc(BIG), *pg_dst = malloc(BIG);
  if (!pg_src || !pg_dst) {
    fprintf(stderr, "pagelock-demo: out of memory\n");
    return 1;
  }
  void *pn_src = NULL, *pn_dst = NULL;
  RT(cudaMallocHost(&pn_src, BIG));
  RT(cudaMallocHost(&pn_dst, BIG));

  printf(
      "pagelock-demo: %d x (H2D 32 MiB, 2 ms kernel, D2H 32 MiB) on one "
      "stream\n",
      iters);
  fflush(stdout);
  double pg = run_phase(&d, pg_src, pg_dst, iters, 1, "pageable phase");
  printf("  pageable (malloc):        %9.2f ms\n", pg);
  fflush(stdout);
  double pn = run_phase(&d, pn_src, pn_dst, iters, 2, "pinned phase");
  printf("  pinned (cudaMallocHost):  %9.2f ms\n", pn);
  double sm = small_copies(&d, pg_src, pn_src);
  printf("  4 KiB copies, every kind: %9.2f ms\n", sm);
  printf("pagelock-demo: all bytes round-tripped\n");
  fflush(stdout);

  RT(cudaFreeHost(pn_src));
  RT(cudaFreeHost(pn_dst));
  free(pg_src);
  free(pg_dst);
  RT(cudaFree(d.dev));
  RT(cudaStreamDestroy(d.stream));
  DRV(drv.ModuleUnload(mod));
  return 0;
}
