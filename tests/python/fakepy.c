/* fakepy.c - a program that looks like a CPython pagelock does not read,
 * for tests/python/fallback.sh.  It exports what the shim looks up to find
 * an interpreter (linked with -rdynamic): Py_Version 3.14, or, with
 * FAKEPY_FREE_THREADED, 3.13 whose _Py_DebugOffsets say free-threaded.
 * Then it makes two pageable copies: their sites must stay native and the
 * report must say once why there are no Python frames. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* The project builds with -fvisibility=hidden. */
#define FAKEPY_EXPORT __attribute__((visibility("default")))

#ifdef FAKEPY_FREE_THREADED
FAKEPY_EXPORT const unsigned long Py_Version = 0x030d00f0;
FAKEPY_EXPORT struct {
  char cookie[8];
  unsigned long long version, free_threaded;
} _PyRuntime = {{'x', 'd', 'e', 'b', 'u', 'g', 'p', 'y'}, 0x030d00f0, 1};
#else
FAKEPY_EXPORT const unsigned long Py_Version = 0x030e00f0;
#endif
FAKEPY_EXPORT char PyCode_Type[256], PyUnicode_Type[256], PyBytes_Type[256];

FAKEPY_EXPORT void *PyGILState_GetThisThreadState(void);
void *PyGILState_GetThisThreadState(void) { abort(); /* never called: the walk is off */ }
FAKEPY_EXPORT int Py_IsInitialized(void);
int Py_IsInitialized(void) { return 1; }

int main(void) {
  enum { N = 1 << 20 };
  void *d;
  char *h = malloc(N);
  if (h == NULL || cudaMalloc(&d, N) != cudaSuccess) return 1;
  memset(h, 1, N);
  if (cudaMemcpy(d, h, N, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  if (cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
  free(h);
  return 0;
}
