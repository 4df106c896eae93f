/* next_lib.c - two libraries defining the same symbol, for the RTLD_NEXT
 * test: built twice, as libnext_a (PL_NEXT_VALUE 1) and libnext_b (2).
 * libnext_a's pl_next_call asks dlsym(RTLD_NEXT) for the definition after
 * itself, which must be libnext_b's even though the shim owns dlsym. */
#define _GNU_SOURCE
#include <dlfcn.h>

__attribute__((visibility("default"))) int pl_next_probe(void) { return PL_NEXT_VALUE; }

__attribute__((visibility("default"))) int pl_next_call(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "pl_next_probe");
  return next ? next() : -1;
}
