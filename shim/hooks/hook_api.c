/* hook_api.c - pagelock's own exported functions, for tests and debugging
 * (the other exports are the libc and driver names the shim interposes). */
#include "pl_internal.h"
#include "hostmem.h"

/* 1 when the registry's invariants hold.  Counts of tracked allocations
 * and program-pinned ranges go to the pointers when they are not NULL. */
PL_EXPORT int pagelock_registry_check(size_t *tracked, size_t *pinned) {
  return pl_hostmem_check(tracked, pinned) ? 1 : 0;
}
