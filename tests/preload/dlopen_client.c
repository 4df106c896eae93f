/* dlopen_client.c - a ctypes-style client: no link to CUDA at all.
 *
 * dlopen("libcuda.so.1") and dlsym the exact decorated names, as Python
 * libraries built on ctypes do.  The shim must hand back its wrappers. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*init_t)(unsigned);
typedef int (*get_t)(int *, int);
typedef int (*retain_t)(void **, int);
typedef int (*setcur_t)(void *);
typedef int (*alloc_t)(uint64_t *, size_t);
typedef int (*htod_t)(uint64_t, const void *, size_t);
typedef int (*dtoh_t)(void *, uint64_t, size_t);

int main(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen_client: %s\n", dlerror());
    return 2;
  }
  init_t init = (init_t)dlsym(h, "cuInit");
  get_t get = (get_t)dlsym(h, "cuDeviceGet");
  retain_t retain = (retain_t)dlsym(h, "cuDevicePrimaryCtxRetain");
  setcur_t setcur = (setcur_t)dlsym(h, "cuCtxSetCurrent");
  alloc_t alloc = (alloc_t)dlsym(h, "cuMemAlloc_v2");
  htod_t htod = (htod_t)dlsym(h, "cuMemcpyHtoD_v2");
  dtoh_t dtoh = (dtoh_t)dlsym(h, "cuMemcpyDtoH_v2");
  if (!init || !get || !retain || !setcur || !alloc || !htod || !dtoh) {
    fprintf(stderr, "dlopen_client: missing symbol\n");
    return 2;
  }
  int dev;
  void *ctx;
  uint64_t d;
  if (init(0) || get(&dev, 0) || retain(&ctx, dev) || setcur(ctx) || alloc(&d, 1 << 20)) return 2;
  size_t n = 300000;
  unsigned char *a = malloc(n), *b = calloc(1, n);
  for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i ^ 0x5a);
  int bad = 0;
  for (int k = 0; k < 3; k++) {
    if (htod(d, a, n) || dtoh(b, d, n)) {
      fprintf(stderr, "dlopen_client: copy failed\n");
      return 2;
    }
    bad |= memcmp(a, b, n) != 0;
  }
  printf("pageable=%d pageable_bytes=%zu\n", 6, 6 * n);
  return bad;
}
