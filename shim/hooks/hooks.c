/* hooks.c - the table of wrapped driver symbols: name, real function, wrapper.
 *
 * dlsym, cuGetProcAddress and the PLT all end up here to swap a real driver
 * function for our wrapper of the same exact symbol.  The real pointers are
 * resolved from the program's own libcuda, never from the global scope
 * (where our wrappers would shadow them). */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"
#include "hooks.h"

void *pl_hook_wrapper(int id) {
  return id < PAGELOCK_API_COUNT ? pl_copy_wrappers[id]
                                 : pl_hostalloc_wrappers[id - PAGELOCK_API_COUNT];
}

int pl_hook_find_name(const char *name) {
  for (int i = 0; i < PL_HOOK_COUNT; i++)
    if (strcmp(pl_hook_names[i], name) == 0) return i;
  return -1;
}
