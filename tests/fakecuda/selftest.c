/*
 * selftest.c: checks the fake CUDA driver and runtime against the
 * behaviour pagelock's tests rely on.  Built against the fake libcudart
 * only, like an unmodified application; the driver and the fakecuda_*
 * controls are reached through dlopen/dlsym and cuGetProcAddress.
 *
 * Timing checks use lower bounds wherever possible (a sleep cannot finish
 * early) and generous margins otherwise, so a loaded CI machine passes.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"

/* What nvcc --default-stream per-thread compiles these calls to; the
 * header only declares them in that mode. */
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream);
cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

/* atomic: one test checks from a second thread */
static atomic_int g_pass, g_fail;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (cond) {                                                       \
      g_pass++;                                                       \
    } else {                                                          \
      g_fail++;                                                       \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                 \
  } while (0)
#define CK(call) CHECK((call) == cudaSuccess)
#define CU(call) CHECK((call) == CUDA_SUCCESS)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* fake-only controls, looked up in the loaded libcuda.so.1 */
static struct {
  int (*fail)(const char *, int, int);
  void (*clear_faults)(void);
  void (*get_stats)(struct fakecuda_stats *);
  void (*reset_stats)(void);
  int (*is_registered)(const void *, size_t);
  unsigned long (*call_count)(const char *);
  void (*set_bandwidth)(double, double);
  size_t (*registered_bytes_in)(const void *, size_t, const void **, size_t *);
} fc;

/* driver entry points, resolved the way an application would */
static PFN_cuGetProcAddress_v12000 p_getproc;
static PFN_cuModuleLoadData_v2000 p_module_load;
static PFN_cuModuleGetFunction_v2000 p_get_function;
static PFN_cuLaunchKernel_v4000 p_launch;
static PFN_cuGraphGetNodes_v10000 p_graph_nodes;
static PFN_cuGraphNodeGetType_v10000 p_node_type;
static PFN_cuPointerGetAttribute_v4000 p_ptr_attr;
static PFN_cuPointerGetAttributes_v7000 p_ptr_attrs;
static PFN_cuMemHostGetFlags_v2030 p_host_flags;
static PFN_cuMemHostGetDevicePointer_v3020 p_host_dptr;
static PFN_cuMemHostRegister_v6050 p_register;
static PFN_cuMemHostUnregister_v4000 p_unregister;
static PFN_cuThreadExchangeStreamCaptureMode_v10010 p_xmode;
static void *g_libcuda;
static CUfunction g_spin, g_noop;

static void *sym(const char *name) {
  void *p = dlsym(g_libcuda, name);
  if (p == NULL) fprintf(stderr, "missing symbol %s\n", name);
  return p;
}

static void *proc(const char *base, int version, cuuint64_t flags) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st;
  return p_getproc(base, &p, version, flags, &st) == CUDA_SUCCESS ? p : NULL;
}

static void spin(cudaStream_t s, uint64_t ns) {
  void *args[] = {&ns};
  CU(p_launch(g_spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static struct fakecuda_stats stats(void) {
  struct fakecuda_stats s;
  fc.get_stats(&s);
  return s;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed);
}

/* ------------------------------------------------------------------ */

static void test_init(void) {
  int n = 0, v = 0;
  CK(cudaGetDeviceCount(&n));
  CHECK(n >= 1);
  CK(cudaDriverGetVersion(&v));
  CHECK(v == 13000);
  CK(cudaRuntimeGetVersion(&v));
  CHECK(v == 13000);
  CK(cudaSetDevice(0));
  CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);

  g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(g_libcuda != NULL);
  if (g_libcuda == NULL) exit(1);
  fc.fail = (int (*)(const char *, int, int))sym("fakecuda_fail");
  fc.clear_faults = (void (*)(void))sym("fakecuda_clear_faults");
  fc.get_stats = (void (*)(struct fakecuda_stats *))sym("fakecuda_get_stats");
  fc.reset_stats = (void (*)(void))sym("fakecuda_reset_stats");
  fc.is_registered = (int (*)(const void *, size_t))sym("fakecuda_is_registered");
  fc.call_count = (unsigned long (*)(const char *))sym("fakecuda_call_count");
  fc.set_bandwidth = (void (*)(double, double))sym("fakecuda_set_bandwidth");
  fc.registered_bytes_in =
      (size_t(*)(const void *, size_t, const void **, size_t *))sym("fakecuda_registered_bytes_in");
  p_getproc = (PFN_cuGetProcAddress_v12000)sym("cuGetProcAddress_v2");
  if (!fc.fail || !fc.get_stats || !fc.call_count || !p_getproc || !fc.set_bandwidth ||
      !fc.clear_faults || !fc.reset_stats || !fc.is_registered || !fc.registered_bytes_in)
    exit(1);
  p_module_load = (PFN_cuModuleLoadData_v2000)proc("cuModuleLoadData", 2000, 0);
  p_get_function = (PFN_cuModuleGetFunction_v2000)proc("cuModuleGetFunction", 2000, 0);
  p_launch = (PFN_cuLaunchKernel_v4000)proc("cuLaunchKernel", 4000, 0);
  p_graph_nodes = (PFN_cuGraphGetNodes_v10000)proc("cuGraphGetNodes", 10000, 0);
  p_node_type = (PFN_cuGraphNodeGetType_v10000)proc("cuGraphNodeGetType", 10000, 0);
  p_ptr_attr = (PFN_cuPointerGetAttribute_v4000)proc("cuPointerGetAttribute", 4000, 0);
  p_ptr_attrs = (PFN_cuPointerGetAttributes_v7000)proc("cuPointerGetAttributes", 7000, 0);
  p_host_flags = (PFN_cuMemHostGetFlags_v2030)proc("cuMemHostGetFlags", 2030, 0);
  p_host_dptr = (PFN_cuMemHostGetDevicePointer_v3020)proc("cuMemHostGetDevicePointer", 3020, 0);
  p_register = (PFN_cuMemHostRegister_v6050)proc("cuMemHostRegister", 6050, 0);
  p_unregister = (PFN_cuMemHostUnregister_v4000)proc("cuMemHostUnregister", 4000, 0);
  p_xmode = (PFN_cuThreadExchangeStreamCaptureMode_v10010)proc("cuThreadExchangeStreamCaptureMode",
                                                               10010, 0);
  if (!p_module_load || !p_get_function || !p_launch || !p_graph_nodes || !p_node_type ||
      !p_ptr_attr || !p_ptr_attrs || !p_host_flags || !p_host_dptr || !p_register ||
      !p_unregister || !p_xmode)
    exit(1);
  CUmodule mod;
  static const char image[] = "fake cubin";
  CU(p_module_load(&mod, image));
  CU(p_get_function(&g_spin, mod, "pagelock_spin"));
  CU(p_get_function(&g_noop, mod, "anything"));
}

static void test_procaddr(void) {
  /* cudart resolved its driver functions through cuGetProcAddress_v2,
   * each twice (default and per-thread). */
  CHECK(fc.call_count("cuGetProcAddress_v2") >= 100);
  CHECK(fc.call_count("cuGetProcAddress") == 0);

  const cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  CHECK(proc("cuMemcpyHtoD", 3020, 0) == sym("cuMemcpyHtoD_v2"));
  CHECK(proc("cuMemcpyHtoD", 2000, 0) == sym("cuMemcpyHtoD"));
  CHECK(proc("cuMemcpyHtoD", 3020, PT) == sym("cuMemcpyHtoD_v2_ptds"));
  CHECK(proc("cuMemcpyHtoDAsync", 3020, 0) == sym("cuMemcpyHtoDAsync_v2"));
  CHECK(proc("cuMemcpyHtoDAsync", 3020, PT) == sym("cuMemcpyHtoDAsync_v2_ptsz"));
  CHECK(proc("cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM) ==
        sym("cuMemcpyHtoDAsync_v2"));
  CHECK(proc("cuMemcpyAsync", 4000, PT) == sym("cuMemcpyAsync_ptsz"));
  CHECK(proc("cuMemcpy", 4000, PT) == sym("cuMemcpy_ptds"));
  CHECK(proc("cuMemcpyBatchAsync", 12080, 0) == sym("cuMemcpyBatchAsync"));
  CHECK(proc("cuMemcpyBatchAsync", 12090, PT) == sym("cuMemcpyBatchAsync_ptsz"));
  CHECK(proc("cuMemcpyBatchAsync", 13000, 0) == sym("cuMemcpyBatchAsync_v2"));
  CHECK(proc("cuMemcpyBatchAsync", 13000, PT) == sym("cuMemcpyBatchAsync_v2_ptsz"));
  CHECK(proc("cuGetProcAddress", 12000, 0) == sym("cuGetProcAddress_v2"));
  CHECK(proc("cuGetProcAddress", 11030, 0) == sym("cuGetProcAddress"));
  CHECK(proc("cuStreamSynchronize", 2000, PT) == sym("cuStreamSynchronize_ptsz"));
  CHECK(proc("cuMemAlloc", 3020, PT) == sym("cuMemAlloc_v2")); /* no twin: default */
  CHECK(proc("cuEventElapsedTime", 13000, 0) == sym("cuEventElapsedTime_v2"));
  CHECK(proc("cuGraphInstantiate", 12000, 0) == sym("cuGraphInstantiateWithFlags"));
  CHECK(proc("cuCtxCreate", 13000, 0) == sym("cuCtxCreate_v4"));

  void *p = (void *)1;
  CUdriverProcAddressQueryResult st;
  CHECK(p_getproc("cuMemcpyHtoD_v2", &p, 13000, 0, &st) == CUDA_ERROR_NOT_FOUND);
  CHECK(p == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(p_getproc("cuLaunchHostFunc", &p, 9000, 0, &st) == CUDA_ERROR_NOT_FOUND);
  CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(p_getproc("cuMemcpy", &p, 13010, 0, &st) == CUDA_ERROR_INVALID_VALUE);
  CHECK(p_getproc("cuMemcpy", &p, 4000, 4, &st) == CUDA_ERROR_INVALID_VALUE);
}

static void test_copies(void) {
  const size_t n = 1u << 20;
  unsigned char *pin_a, *pin_b, *page = malloc(n), *page_back = malloc(n);
  void *d;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaMallocHost((void **)&pin_a, n));
  CK(cudaHostAlloc((void **)&pin_b, n, cudaHostAllocPortable));
  CK(cudaMalloc(&d, n));
  fill(pin_a, n, 1);
  fill(page, n, 2);
  /* Slow links make the model dominate scheduling noise: 1 MiB takes
   * 42 ms pinned (25 MB/s) and 84 ms pageable (12.5 MB/s). */
  const double pinned_ms = n / 0.025e9 * 1e3, pageable_ms = n / 0.0125e9 * 1e3;
  fc.set_bandwidth(0.025, 0.0125);
  fc.reset_stats();

  double t0 = now_ms();
  CK(cudaMemcpyAsync(d, pin_a, n, cudaMemcpyHostToDevice, s));
  double t_pinned_call = now_ms() - t0;
  CK(cudaStreamSynchronize(s));
  double t_pinned_total = now_ms() - t0;
  CK(cudaMemcpy(pin_b, d, n, cudaMemcpyDeviceToHost));
  CHECK(memcmp(pin_a, pin_b, n) == 0);
  CHECK(t_pinned_call < pinned_ms / 2);      /* returned before the transfer */
  CHECK(t_pinned_total >= pinned_ms * 0.95); /* the worker modelled the bandwidth */

  t0 = now_ms();
  CK(cudaMemcpyAsync(d, page, n, cudaMemcpyHostToDevice, s));
  double t_pageable_call = now_ms() - t0;
  CHECK(t_pageable_call >= pageable_ms * 0.95); /* pageable: the caller waits it out */
  CK(cudaMemcpyAsync(page_back, d, n, cudaMemcpyDeviceToHost, s));
  /* no sync needed: a pageable D2H has completed on return */
  CHECK(memcmp(page, page_back, n) == 0);

  struct fakecuda_stats st = stats();
  CHECK(st.copies_pinned == 2 && st.copies_pageable == 2);
  CHECK(st.bytes_h2d == 2 * n && st.bytes_d2h == 2 * n);
  CHECK(st.bytes_pinned == 2 * n && st.bytes_pageable == 2 * n);
  CHECK(st.host_allocs_live == 2 && st.host_alloc_bytes_live == 2 * n);
  CHECK(st.device_allocs_live == 1);

  /* copy engines: two uploads serialise, an upload and a download overlap */
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  void *d2;
  CK(cudaMalloc(&d2, n));
  t0 = now_ms();
  CK(cudaMemcpyAsync(d, pin_a, n, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(d2, pin_a, n, cudaMemcpyHostToDevice, s2));
  CK(cudaDeviceSynchronize());
  double t_two_up = now_ms() - t0;
  t0 = now_ms();
  CK(cudaMemcpyAsync(d, pin_a, n, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(pin_b, d2, n, cudaMemcpyDeviceToHost, s2));
  CK(cudaDeviceSynchronize());
  double t_up_down = now_ms() - t0;
  CHECK(t_two_up >= 2 * pinned_ms * 0.95);
  CHECK(t_up_down < 1.6 * pinned_ms);
  fc.set_bandwidth(24, 6);

  /* invalid arguments and 0-byte copies */
  CHECK(cudaMemcpy((char *)d + n - 8, pin_a, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d, NULL, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(page, (void *)0x1000, 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CK(cudaMemcpy(d, NULL, 0, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d, pin_a, 16, (enum cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection);
  cudaGetLastError();

  /* unified (cudaMemcpyDefault) and device-to-device */
  fill(pin_a, 4096, 9);
  CK(cudaMemcpy(d, pin_a, 4096, cudaMemcpyDefault));
  CK(cudaMemcpy(d2, d, 4096, cudaMemcpyDeviceToDevice));
  memset(page_back, 0, 4096);
  CK(cudaMemcpy(page_back, d2, 4096, cudaMemcpyDefault));
  CHECK(memcmp(page_back, pin_a, 4096) == 0);

  /* memset and 2D */
  CK(cudaMemset(d, 0x5a, 4096));
  CK(cudaMemcpy(page_back, d, 4096, cudaMemcpyDeviceToHost));
  CHECK(page_back[0] == 0x5a && page_back[4095] == 0x5a);
  fill(page, 64 * 32, 3);
  memset(page_back, 0, 64 * 32);
  CK(cudaMemcpy2D(d, 128, page, 64, 48, 32, cudaMemcpyHostToDevice));
  CK(cudaMemcpy2DAsync(page_back, 64, d, 128, 48, 32, cudaMemcpyDeviceToHost, s));
  int same = 1;
  for (int y = 0; y < 32; y++)
    same &= memcmp(page + y * 64, page_back + y * 64, 48) == 0 && page_back[y * 64 + 50] == 0;
  CHECK(same);

  /* batch (CUDA 13 signature): refuses the legacy stream */
  void *dsts[2] = {d, (char *)d + 4096};
  const void *srcs[2] = {pin_a, pin_a + 4096};
  size_t sizes[2] = {4096, 4096}, idx[1] = {0};
  struct cudaMemcpyAttributes attr = {.srcAccessOrder = cudaMemcpySrcAccessOrderStream};
  fill(pin_a, 8192, 4);
  CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, idx, 1, s));
  CK(cudaMemcpyAsync(pin_b, d, 8192, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  CHECK(memcmp(pin_a, pin_b, 8192) == 0);
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, idx, 1, 0) == cudaErrorInvalidValue);
  cudaGetLastError();

  CK(cudaFree(d));
  CK(cudaFree(d2));
  CK(cudaFreeHost(pin_a));
  CK(cudaFreeHost(pin_b));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  st = stats();
  CHECK(st.host_allocs_live == 0 && st.device_allocs_live == 0);
  free(page);
  free(page_back);
}

static void test_per_thread(void) {
  unsigned char *pin;
  void *d;
  CK(cudaMallocHost((void **)&pin, 4096));
  CK(cudaMalloc(&d, 4096));
  unsigned long plain = fc.call_count("cuMemcpyHtoDAsync_v2");
  unsigned long ptsz = fc.call_count("cuMemcpyHtoDAsync_v2_ptsz");
  CK(cudaMemcpyAsync(d, pin, 4096, cudaMemcpyHostToDevice, 0));
  CK(cudaMemcpyAsync_ptsz(d, pin, 4096, cudaMemcpyHostToDevice, 0));
  CK(cudaStreamSynchronize_ptsz(0));
  CHECK(fc.call_count("cuMemcpyHtoDAsync_v2") == plain + 1);
  CHECK(fc.call_count("cuMemcpyHtoDAsync_v2_ptsz") == ptsz + 1);
  unsigned long sync_ptds = fc.call_count("cuMemcpyDtoH_v2_ptds");
  CK(cudaMemcpy_ptds(pin, d, 4096, cudaMemcpyDeviceToHost));
  CHECK(fc.call_count("cuMemcpyDtoH_v2_ptds") == sync_ptds + 1);

  /* the legacy 32-bit entry point exists, is counted, and rejects
   * 64-bit device addresses */
  struct fakecuda_stats before = stats();
  typedef CUresult (*legacy_htod_t)(unsigned int dst, const void *src, unsigned int n);
  legacy_htod_t legacy = (legacy_htod_t)sym("cuMemcpyHtoD");
  CHECK(legacy((unsigned int)(uintptr_t)d, pin, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(stats().legacy_calls == before.legacy_calls + 1);
  CK(cudaFree(d));
  CK(cudaFreeHost(pin));
}

static atomic_int g_order[8];
static atomic_int g_order_n;
static double g_cb_time[4];
static cudaError_t g_cb_err;

static void cb_mark(void *arg) {
  int id = (int)(intptr_t)arg;
  g_cb_time[id] = now_ms();
  g_order[atomic_fetch_add(&g_order_n, 1)] = id;
  if (id == 0) g_cb_err = cudaStreamQuery(0); /* CUDA calls are forbidden here */
}

static void test_ordering(void) {
  cudaStream_t s, nb;
  CK(cudaStreamCreate(&s));
  CK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  atomic_store(&g_order_n, 0);

  double t0 = now_ms();
  spin(s, 30 * 1000000ull);
  CK(cudaLaunchHostFunc(s, cb_mark, (void *)(intptr_t)0));
  CK(cudaLaunchHostFunc(s, cb_mark, (void *)(intptr_t)1));
  /* legacy stream: implicitly after the blocking stream's spin */
  CK(cudaLaunchHostFunc(0, cb_mark, (void *)(intptr_t)2));
  CK(cudaStreamSynchronize(0));
  CK(cudaStreamSynchronize(s));
  CHECK(atomic_load(&g_order_n) == 3);
  CHECK(g_order[0] == 0 && g_order[1] == 1 && g_order[2] == 2);
  CHECK(g_cb_time[0] - t0 >= 29.0);
  CHECK(g_cb_time[2] >= g_cb_time[1]);
  CHECK(g_cb_err == cudaErrorNotPermitted);
  CHECK(cudaGetLastError() == cudaSuccess); /* the callback's error stays on its thread */

  /* a non-blocking stream does not wait for the legacy stream */
  spin(0, 200 * 1000000ull);
  t0 = now_ms();
  CK(cudaLaunchHostFunc(nb, cb_mark, (void *)(intptr_t)3));
  CK(cudaStreamSynchronize(nb));
  CHECK(now_ms() - t0 < 100.0);
  CHECK(cudaStreamQuery(0) == cudaErrorNotReady);
  CK(cudaDeviceSynchronize());
  CK(cudaStreamQuery(0));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(nb));
}

static void test_events(void) {
  cudaStream_t s, s2;
  cudaEvent_t a, b, never, untimed;
  CK(cudaStreamCreate(&s));
  CK(cudaStreamCreate(&s2));
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventCreate(&never));
  CK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));

  CK(cudaEventQuery(never)); /* never recorded: complete */
  CK(cudaEventRecord(a, s));
  spin(s, 20 * 1000000ull);
  CK(cudaEventRecord(b, s));
  CHECK(cudaEventQuery(b) == cudaErrorNotReady);
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b) == cudaErrorNotReady);
  cudaGetLastError();
  /* s2 waits for b; a wait on a never-recorded event is a no-op */
  CK(cudaStreamWaitEvent(s2, never, 0));
  double t0 = now_ms();
  CK(cudaStreamWaitEvent(s2, b, 0));
  CK(cudaLaunchHostFunc(s2, cb_mark, (void *)(intptr_t)3));
  CK(cudaStreamSynchronize(s2));
  CHECK(g_cb_time[3] - t0 >= 15.0);
  CK(cudaEventSynchronize(b));
  CK(cudaEventQuery(b));
  CK(cudaEventElapsedTime(&ms, a, b));
  CHECK(ms >= 19.0f && ms < 1000.0f);
  CK(cudaEventRecord(untimed, s));
  CK(cudaEventSynchronize(untimed));
  CHECK(cudaEventElapsedTime(&ms, a, untimed) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaEventDestroy(never));
  CK(cudaEventDestroy(untimed));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
}

/* An event belongs to the context it was created in: CUDA refuses to
 * record it on a stream of another context (counted in the stats) and
 * lets a stream of another context wait on it. */
static void test_event_contexts(void) {
  CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice) = sym("cuCtxCreate_v2");
  CUresult (*ctx_pop)(CUcontext *) = sym("cuCtxPopCurrent_v2");
  CUresult (*ctx_destroy)(CUcontext) = sym("cuCtxDestroy_v2");
  CUresult (*ev_create)(CUevent *, unsigned) = sym("cuEventCreate");
  CUresult (*ev_record)(CUevent, CUstream) = sym("cuEventRecord");
  CUresult (*ev_destroy)(CUevent) = sym("cuEventDestroy_v2");
  CUresult (*wait)(CUstream, CUevent, unsigned) = sym("cuStreamWaitEvent");
  if (!ctx_create || !ctx_pop || !ctx_destroy || !ev_create || !ev_record || !ev_destroy || !wait) {
    CHECK(0);
    return;
  }
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CUcontext other = NULL, popped = NULL;
  CUevent e = NULL, mine = NULL;
  CU(ctx_create(&other, 0, 0)); /* current until popped */
  CU(ev_create(&e, 0));
  CU(ctx_pop(&popped));
  CHECK(popped == other);
  CU(ev_create(&mine, 0));
  unsigned long long before = stats().event_ctx_mismatches;
  CHECK(ev_record(e, (CUstream)s) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(ev_record(e, NULL) == CUDA_ERROR_INVALID_HANDLE); /* the current context's */
  CHECK(stats().event_ctx_mismatches == before + 2);
  CU(ev_record(mine, (CUstream)s));
  CU(wait((CUstream)s, e, 0)); /* never recorded: a no-op, and allowed */
  CHECK(stats().event_ctx_mismatches == before + 2);
  CK(cudaStreamSynchronize(s));
  CU(ev_destroy(mine));
  CU(ev_destroy(e));
  CU(ctx_destroy(other));
  CK(cudaStreamDestroy(s));
}

static atomic_int g_graph_hostfn;

static void cb_count(void *arg) {
  (void)arg;
  atomic_fetch_add(&g_graph_hostfn, 1);
}

static void test_graphs(void) {
  const size_t n = 1 << 16;
  cudaStream_t s;
  unsigned char *pin_a, *pin_b, *page = malloc(n);
  void *d;
  CK(cudaStreamCreate(&s));
  CK(cudaMallocHost((void **)&pin_a, n));
  CK(cudaMallocHost((void **)&pin_b, n));
  CK(cudaMalloc(&d, n));
  fill(pin_a, n, 5);
  memset(pin_b, 0, n);
  atomic_store(&g_graph_hostfn, 0);
  fc.reset_stats();

  enum cudaStreamCaptureStatus cs;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaStreamIsCapturing(s, &cs));
  CHECK(cs == cudaStreamCaptureStatusActive);
  CK(cudaMemcpyAsync(d, pin_a, n, cudaMemcpyHostToDevice, s));
  CK(cudaMemsetAsync((char *)d + n / 2, 0, 16, s));
  CK(cudaLaunchHostFunc(s, cb_count, NULL));
  void *args[] = {&(uint64_t){1000}};
  CU(p_launch(g_noop, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
  CK(cudaMemcpyAsync(pin_b, d, n, cudaMemcpyDeviceToHost, s));
  CK(cudaMemcpyAsync(page, d, n, cudaMemcpyDeviceToHost, s)); /* pageable: captured too */
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaStreamIsCapturing(s, &cs));
  CHECK(cs == cudaStreamCaptureStatusNone);

  size_t nn = 0;
  CU(p_graph_nodes(g, NULL, &nn));
  CHECK(nn == 6);
  CUgraphNode nodes[6];
  CUgraphNodeType types[6];
  CU(p_graph_nodes(g, nodes, &nn));
  for (size_t i = 0; i < 6; i++) CU(p_node_type(nodes[i], &types[i]));
  CHECK(types[0] == CU_GRAPH_NODE_TYPE_MEMCPY && types[1] == CU_GRAPH_NODE_TYPE_MEMSET &&
        types[2] == CU_GRAPH_NODE_TYPE_HOST && types[3] == CU_GRAPH_NODE_TYPE_KERNEL &&
        types[4] == CU_GRAPH_NODE_TYPE_MEMCPY && types[5] == CU_GRAPH_NODE_TYPE_MEMCPY);

  struct fakecuda_stats st = stats();
  CHECK(st.copies_pinned == 0 && st.copies_pageable == 0 && st.kernels_launched == 0);
  CHECK(atomic_load(&g_graph_hostfn) == 0);
  CHECK(pin_b[0] == 0 && pin_b[n - 1] == 0); /* nothing ran during capture */

  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  fill(pin_a, n, 6); /* the second replay sees the new source bytes */
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  memset(pin_a + n / 2, 0, 16);
  CHECK(memcmp(pin_a, pin_b, n) == 0);
  CHECK(memcmp(pin_a, page, n) == 0);
  CHECK(atomic_load(&g_graph_hostfn) == 2);
  st = stats();
  CHECK(st.graph_launches == 2 && st.kernels_launched == 2);
  CHECK(st.copies_pinned == 4 && st.copies_pageable == 2);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));

  /* synchronous work on a capturing stream breaks the capture; so does
   * legacy-stream work while a blocking stream captures */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpy(pin_b, d, 16, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureImplicit);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal) ==
        cudaErrorStreamCaptureUnsupported);
  /* freeing pinned memory synchronises: refused under a global capture,
   * allowed under a relaxed one */
  unsigned char *tmp;
  CK(cudaMallocHost((void **)&tmp, 64));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaFreeHost(tmp) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaFreeHost(tmp));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphDestroy(g));
  cudaGetLastError();

  CK(cudaFree(d));
  CK(cudaFreeHost(pin_a));
  CK(cudaFreeHost(pin_b));
  CK(cudaStreamDestroy(s));
  free(page);
}

static void test_faults(void) {
  unsigned char *pin;
  void *d;
  CK(cudaMallocHost((void **)&pin, 4096));
  CK(cudaMalloc(&d, 4096));
  CHECK(fc.fail("cuMemcpyHtoDAsync_v2", 2, CUDA_ERROR_ILLEGAL_ADDRESS) == 0);
  CHECK(fc.fail("no_such_symbol", 1, 1) == -1);
  CK(cudaMemcpyAsync(d, pin, 16, cudaMemcpyHostToDevice, 0));
  CK(cudaMemcpyAsync_ptsz(d, pin, 16, cudaMemcpyHostToDevice, 0)); /* a different symbol */
  CHECK(cudaMemcpyAsync(d, pin, 16, cudaMemcpyHostToDevice, 0) == cudaErrorIllegalAddress);
  CK(cudaMemcpyAsync(d, pin, 16, cudaMemcpyHostToDevice, 0));
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaSuccess);

  CHECK(fc.fail("cuMemHostRegister_v2", 0, CUDA_ERROR_OUT_OF_MEMORY) == 0);
  void *page = malloc(8192);
  CHECK(cudaHostRegister(page, 8192, 0) == cudaErrorMemoryAllocation);
  CHECK(cudaHostRegister(page, 8192, 0) == cudaErrorMemoryAllocation);
  CHECK(fc.fail("cuMemHostRegister_v2", 0, 0) == 0);
  CK(cudaHostRegister(page, 8192, 0));
  CK(cudaHostUnregister(page));
  fc.clear_faults();
  cudaGetLastError();
  free(page);
  CK(cudaFree(d));
  CK(cudaFreeHost(pin));
}

static void test_registration(void) {
  const size_t n = 1 << 20;
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, n) != 0) abort();
  void *d, *m;
  CK(cudaMalloc(&d, 4096));
  CK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
  struct cudaPointerAttributes pa;

  CK(cudaPointerGetAttributes(&pa, buf));
  CHECK(pa.type == cudaMemoryTypeUnregistered && pa.device == -2 && pa.hostPointer == buf);
  unsigned int mt = 99;
  CHECK(p_ptr_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)buf) ==
        CUDA_ERROR_INVALID_VALUE);

  fc.reset_stats();
  CK(cudaHostRegister(buf, n, cudaHostRegisterDefault));
  CHECK(fc.is_registered(buf, n) && fc.is_registered((char *)buf + 100, 100));
  CHECK(!fc.is_registered((char *)buf + n - 10, 20));
  CK(cudaPointerGetAttributes(&pa, (char *)buf + 10));
  CHECK(pa.type == cudaMemoryTypeHost && pa.device == 0 && pa.devicePointer == (char *)buf + 10);
  CU(p_ptr_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)buf));
  CHECK(mt == CU_MEMORYTYPE_HOST);
  CUdeviceptr start = 0;
  CU(p_ptr_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)(uintptr_t)buf + 64));
  CHECK(start == (CUdeviceptr)(uintptr_t)buf);
  /* overlapping (same pages) registration is refused */
  CHECK(cudaHostRegister((char *)buf + 100, 100, 0) == cudaErrorHostMemoryAlreadyRegistered);
  struct fakecuda_stats st = stats();
  CHECK(st.registered_ranges_live == 1 && st.registered_bytes_live == n);
  CHECK(st.host_register_calls == 2);
  CK(cudaHostUnregister(buf));
  CHECK(cudaHostUnregister(buf) == cudaErrorHostMemoryNotRegistered);
  CHECK(!fc.is_registered(buf, 1));
  st = stats();
  CHECK(st.registered_ranges_live == 0 && st.registered_bytes_high_water == n);
  CHECK(st.host_unregister_calls == 2);

  CK(cudaPointerGetAttributes(&pa, d));
  CHECK(pa.type == cudaMemoryTypeDevice && pa.device == 0 && pa.hostPointer == NULL);
  CK(cudaPointerGetAttributes(&pa, m));
  CHECK(pa.type == cudaMemoryTypeManaged);
  unsigned int managed = 0;
  CU(p_ptr_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)(uintptr_t)m));
  CU(p_ptr_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)m));
  CHECK(managed == 1 && mt == CU_MEMORYTYPE_DEVICE);
  cudaGetLastError();
  CK(cudaFree(d));
  CK(cudaFree(m));
  free(buf);
}

/* The hazard a shim that page-locks pageable memory creates: from
 * registered memory an Async copy returns at once and the DMA touches the
 * host buffer later, when the stream reaches it.  Slowed down, the window
 * is certain: an upload's source overwritten right after the call is what
 * the device gets, a download's destination read right after the call
 * still holds the old bytes. */
static void test_hazard(void) {
  const size_t n = 1u << 16;
  unsigned char *buf = NULL, *back = malloc(n);
  if (posix_memalign((void **)&buf, 4096, n) != 0 || back == NULL) abort();
  void *d;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaMalloc(&d, n));
  CK(cudaHostRegister(buf, n, cudaHostRegisterDefault));
  fc.set_bandwidth(0.002, 6); /* 64 KiB pinned: 33 ms */
  memset(buf, 0x11, n);
  double t0 = now_ms();
  CK(cudaMemcpyAsync(d, buf, n, cudaMemcpyHostToDevice, s));
  CHECK(now_ms() - t0 < 16); /* returned before the transfer */
  memset(buf, 0x22, n);      /* legal for pageable memory, not for this */
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
  CHECK(back[0] == 0x22 && back[n - 1] == 0x22);

  CK(cudaMemset(d, 0x33, n));
  CK(cudaMemcpyAsync(buf, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(buf[0] == 0x22 && buf[n - 1] == 0x22); /* not landed yet */
  CK(cudaStreamSynchronize(s));
  CHECK(buf[0] == 0x33 && buf[n - 1] == 0x33);

  /* A pageable source: the call returns once the bytes were taken. */
  memset(back, 0x44, n);
  CK(cudaMemcpyAsync(d, back, n, cudaMemcpyHostToDevice, s));
  memset(back, 0x55, n);
  CK(cudaMemcpy(buf, d, n, cudaMemcpyDeviceToHost));
  CHECK(buf[0] == 0x44 && buf[n - 1] == 0x44);
  fc.set_bandwidth(24, 6);
  CK(cudaHostUnregister(buf));
  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  free(buf);
  free(back);
}

/* What the driver answers for pageable memory, and its registration rules,
 * exactly where a shim that registers behind the program's back must hide:
 * queries, conflicts by page, unregistering anything but a base. */
static void test_register_rules(void) {
  const size_t pg = 4096, n = 16 * pg;
  unsigned char *buf = NULL;
  if (posix_memalign((void **)&buf, pg, n) != 0) abort();
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)buf;

  /* pageable: strict queries fail, the batch query answers defaults */
  unsigned int flags = 77, mt = 77;
  CHECK(p_host_flags(&flags, buf) == CUDA_ERROR_INVALID_VALUE && flags == 77);
  CUdeviceptr dp = 1;
  CHECK(p_host_dptr(&dp, buf, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(p_ptr_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_ERROR_INVALID_VALUE);
  CUcontext ctx = (CUcontext)1;
  CHECK(p_ptr_attr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p) == CUDA_ERROR_INVALID_VALUE);
  int ord = 5;
  void *hp = (void *)1;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_HOST_POINTER};
  void *data[] = {&mt, &ctx, &ord, &hp};
  CU(p_ptr_attrs(4, which, data, p));
  CHECK(mt == 0 && ctx == NULL && ord == -2 && hp == NULL);
  unsigned int rflags = 0;
  CHECK(cudaHostGetFlags(&rflags, buf) == cudaErrorInvalidValue);
  void *rdev = NULL;
  CHECK(cudaHostGetDevicePointer(&rdev, buf, 0) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(fc.registered_bytes_in(buf, n, NULL, NULL) == 0);

  /* the interior pages [2, 10) registered */
  CU(p_register(buf + 2 * pg, 8 * pg, CU_MEMHOSTREGISTER_PORTABLE));
  const void *first = NULL;
  size_t first_len = 0;
  CHECK(fc.registered_bytes_in(buf, n, &first, &first_len) == 8 * pg);
  CHECK(first == buf + 2 * pg && first_len == 8 * pg);
  CHECK(fc.registered_bytes_in(buf + 9 * pg + 100, 1, NULL, NULL) == 1);
  CHECK(fc.registered_bytes_in(buf, 2 * pg, NULL, NULL) == 0);
  CHECK(fc.registered_bytes_in(buf + 10 * pg, 6 * pg, NULL, NULL) == 0);
  CU(p_host_flags(&flags, buf + 3 * pg));
  CHECK(flags == CU_MEMHOSTREGISTER_PORTABLE);
  CU(p_host_dptr(&dp, buf + 3 * pg, 0));
  CHECK(dp == p + 3 * pg);
  /* pages outside it are still pageable */
  CHECK(p_host_flags(&flags, buf + pg) == CUDA_ERROR_INVALID_VALUE);
  CHECK(p_ptr_attr(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 10 * pg) == CUDA_ERROR_INVALID_VALUE);

  /* any byte already registered, or a page shared with a registration */
  CHECK(p_register(buf, 3 * pg, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(p_register(buf + 9 * pg, 4 * pg, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(p_register(buf + 4 * pg, pg, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(p_register(buf + 10 * pg - 1, 2, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(p_register(buf, n, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  /* beside it, not sharing a page: fine */
  CU(p_register(buf + 10 * pg, pg, 0));
  CHECK(fc.registered_bytes_in(buf, n, &first, NULL) == 9 * pg && first == buf + 2 * pg);
  CU(p_unregister(buf + 10 * pg));

  /* only a registration's base unregisters it */
  unsigned long calls = fc.call_count("cuMemHostUnregister");
  CHECK(p_unregister(buf + 3 * pg) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(p_unregister(buf + 2 * pg + 1) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(p_unregister(buf) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(fc.registered_bytes_in(buf, n, NULL, NULL) == 8 * pg);
  CU(p_unregister(buf + 2 * pg));
  CHECK(fc.call_count("cuMemHostUnregister") == calls + 4);
  CHECK(fc.registered_bytes_in(buf, n, NULL, NULL) == 0);
  CHECK(p_host_flags(&flags, buf + 3 * pg) == CUDA_ERROR_INVALID_VALUE);

  /* an injected failure registers nothing */
  CHECK(fc.fail("cuMemHostRegister_v2", 1, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) == 0);
  CHECK(p_register(buf, n, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(fc.registered_bytes_in(buf, n, NULL, NULL) == 0);
  CU(p_register(buf, n, 0));
  CU(p_unregister(buf));
  fc.clear_faults();
  free(buf);
}

struct unreg_arg {
  void *p;
  int relaxed;
  CUresult r;
};

static void *unregister_on_thread(void *arg) {
  struct unreg_arg *a = arg;
  CU(cudaSetDevice(0) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN); /* a current context */
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (a->relaxed) CU(p_xmode(&m));
  a->r = p_unregister(a->p);
  if (a->relaxed) {
    CU(p_xmode(&m));
    CHECK(m == CU_STREAM_CAPTURE_MODE_RELAXED);
  }
  return NULL;
}

static CUresult unregister_from_thread(void *p, int relaxed) {
  struct unreg_arg a = {p, relaxed, CUDA_ERROR_UNKNOWN};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, unregister_on_thread, &a) == 0);
  pthread_join(t, NULL);
  return a.r;
}

/* cuMemHostUnregister is potentially unsafe: while a thread captures in
 * global mode, another thread's call is refused and the capture is
 * invalidated, unless that thread set its own mode to relaxed
 * (cuThreadExchangeStreamCaptureMode); a thread-local capture elsewhere
 * forbids nothing. */
static void test_capture_modes(void) {
  const size_t n = 16 * 4096;
  unsigned char *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, n) != 0) abort();
  void *d;
  cudaStream_t s;
  cudaGraph_t g = NULL;
  CK(cudaMalloc(&d, n));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(p_register(buf, 4096, 0));
  CU(p_register(buf + 4096, 4096, 0));
  CU(p_register(buf + 2 * 4096, 4096, 0));

  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(d, 1, 16, s));
  CHECK(unregister_from_thread(buf, 0) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && g == NULL);
  cudaGetLastError();
  CHECK(fc.registered_bytes_in(buf, 4096, NULL, NULL) == 4096);

  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(d, 1, 16, s));
  CU(unregister_from_thread(buf, 1));
  CK(cudaStreamEndCapture(s, &g));
  CHECK(g != NULL);
  if (g) CK(cudaGraphDestroy(g));

  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CU(unregister_from_thread(buf + 4096, 0));
  CK(cudaStreamEndCapture(s, &g));
  if (g) CK(cudaGraphDestroy(g));

  /* the same thread: its own global capture forbids it, relaxed or not for
   * another thread's sake */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(p_unregister(buf + 2 * 4096) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  CU(p_unregister(buf + 2 * 4096));

  CUstreamCaptureMode bad = (CUstreamCaptureMode)7;
  CHECK(p_xmode(&bad) == CUDA_ERROR_INVALID_VALUE);
  CHECK(p_xmode(NULL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(fc.registered_bytes_in(buf, n, NULL, NULL) == 0);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  free(buf);
}

/* A thread with no CUDA context: driver calls that need one fail, the
 * runtime makes the primary context current by itself. */
static void *thread_no_ctx(void *arg) {
  (void)arg;
  PFN_cuMemAlloc_v3020 alloc = (PFN_cuMemAlloc_v3020)proc("cuMemAlloc", 3020, 0);
  CUdeviceptr p;
  CHECK(alloc(&p, 16) == CUDA_ERROR_INVALID_CONTEXT);
  void *d;
  CK(cudaMalloc(&d, 16));
  CK(cudaMemsetAsync_ptsz(d, 1, 16, 0));
  CK(cudaStreamSynchronize_ptsz(0));
  CK(cudaFree(d));
  return NULL;
}

/* With the default bandwidths (24 GB/s pinned, 6 pageable), a pinned
 * upload is faster than a pageable one however slow this machine's
 * memcpy: a transfer here is a memcpy, which the model's time must cover
 * (fc_copy.c).  Medians of 5; 64 MiB, so the memcpy dominates. */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static void test_speed_order(void) {
  const size_t n = 64u << 20;
  unsigned char *pin, *page = malloc(n);
  void *d;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaMallocHost((void **)&pin, n));
  CK(cudaMalloc(&d, n));
  memset(pin, 1, n);
  memset(page, 2, n);
  double tp[5], tg[5];
  for (int r = 0; r < 5; r++) {
    double t0 = now_ms();
    CK(cudaMemcpyAsync(d, pin, n, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    tp[r] = now_ms() - t0;
    t0 = now_ms();
    CK(cudaMemcpyAsync(d, page, n, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    tg[r] = now_ms() - t0;
  }
  qsort(tp, 5, sizeof tp[0], cmp_double);
  qsort(tg, 5, sizeof tg[0], cmp_double);
  printf("speed order: 64 MiB pinned %.2f ms, pageable %.2f ms (medians of 5)\n", tp[2], tg[2]);
  CHECK(tg[2] >= 2 * tp[2]);
  CK(cudaFree(d));
  CK(cudaFreeHost(pin));
  CK(cudaStreamDestroy(s));
  free(page);
}

static void test_threads(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, thread_no_ctx, NULL) == 0);
  pthread_join(t, NULL);
}

int main(void) {
  double t0 = now_ms();
  test_init();
  test_procaddr();
  test_copies();
  test_speed_order();
  test_per_thread();
  test_ordering();
  test_events();
  test_event_contexts();
  test_graphs();
  test_faults();
  test_registration();
  test_hazard();
  test_register_rules();
  test_capture_modes();
  test_threads();
  /* Leave work queued: exit must neither hang nor crash. */
  spin(0, 10ull * 1000000000ull);
  printf("selftest took %.0f ms\n", now_ms() - t0);
  printf("%d passed, %d failed\n", atomic_load(&g_pass), atomic_load(&g_fail));
  fflush(stdout);
  return atomic_load(&g_fail) ? 1 : 0;
}
