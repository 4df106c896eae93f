/* fake_driver.c - the fake driver's entry points and controls, looked up
 * around the shim (fake_driver.h). */
#define _GNU_SOURCE
#include "fake_driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "pl_internal.h" /* pl_real_dlsym: the dlsym the shim does not wrap */

#define FAKE_DRIVER_DEFINE(name, ...) CUresult (*f_##name)(__VA_ARGS__);
FAKE_DRIVER_CALLS(FAKE_DRIVER_DEFINE)
#undef FAKE_DRIVER_DEFINE

int (*f_fail)(const char *, int, int);
void (*f_clear_faults)(void);
void (*f_get_stats)(struct fakecuda_stats *);
void (*f_reset_stats)(void);
int (*f_is_registered)(const void *, size_t);
size_t (*f_reg_bytes_in)(const void *, size_t, const void **, size_t *);
unsigned long (*f_call_count)(const char *);
void (*f_reset_call_counts)(void);
void (*f_set_bandwidth)(double, double);
void (*f_set_register_bandwidth)(double);

void *g_cuda;
CUcontext g_ctx;

static void *sym(const char *name) {
  void *p = pl_real_dlsym(g_cuda, name);
  if (p == NULL) {
    fprintf(stderr, "fake libcuda lacks %s\n", name);
    abort();
  }
  return p;
}

#define LOAD(name, ...) *(void **)&f_##name = sym(#name);

int load_driver(void) {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (g_cuda == NULL) {
    fprintf(stderr, "fake libcuda not found (LD_LIBRARY_PATH?): %s\n", dlerror());
    return -1;
  }
  FAKE_DRIVER_CALLS(LOAD)
  *(void **)&f_fail = sym("fakecuda_fail");
  *(void **)&f_clear_faults = sym("fakecuda_clear_faults");
  *(void **)&f_get_stats = sym("fakecuda_get_stats");
  *(void **)&f_reset_stats = sym("fakecuda_reset_stats");
  *(void **)&f_is_registered = sym("fakecuda_is_registered");
  *(void **)&f_reg_bytes_in = sym("fakecuda_registered_bytes_in");
  *(void **)&f_call_count = sym("fakecuda_call_count");
  *(void **)&f_reset_call_counts = sym("fakecuda_reset_call_counts");
  *(void **)&f_set_bandwidth = sym("fakecuda_set_bandwidth");
  *(void **)&f_set_register_bandwidth = sym("fakecuda_set_register_bandwidth");
  if (f_cuInit(0) != CUDA_SUCCESS || f_cuDevicePrimaryCtxRetain(&g_ctx, 0) != CUDA_SUCCESS ||
      f_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
    return -1;
  return 0;
}

uint8_t pat(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 9) ^ (seed * 0x9Du) ^ (seed >> 5));
}
void fill(void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = pat(i, seed);
}
size_t check_pat(const void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != pat(i, seed)) return i;
  return n;
}
