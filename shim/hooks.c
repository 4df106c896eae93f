/* hooks.c - the table of wrapped driver symbols: name, real function, wrapper.
 *
 * dlsym, cuGetProcAddress and the PLT all end up here to swap a real driver
 * function for our wrapper of the same exact symbol.  The real pointers are
 * resolved from the program's own libcuda, never from the global scope
 * (where our wrappers would shadow them). */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"

const char *const pl_hook_names[PL_HOOK_COUNT] = {
#define PL_NAME(n) #n,
    PAGELOCK_API_LIST(PL_NAME) PL_HOSTALLOC_LIST(PL_NAME)
#undef PL_NAME
};


static void *_Atomic pl_real[PL_HOOK_COUNT];
static atomic_bool pl_real_all;

void *pl_hook_real(int id) {
  void *f = atomic_load_explicit(&pl_real[id], memory_order_acquire);
  if (PL_LIKELY(f != NULL)) return f;
  f = pl_driver_sym(pl_hook_names[id]);
  if (f) atomic_store_explicit(&pl_real[id], f, memory_order_release);
  return f;
}

void *pl_hook_wrapper(int id) {
  return id < PAGELOCK_API_COUNT ? pl_copy_wrappers[id] : pl_hostalloc_wrappers[id - PAGELOCK_API_COUNT];
}

/* Resolve every real pointer once, so answers of cuGetProcAddress can be
 * mapped back to their exact symbol. */
static void pl_hook_resolve_all(void) {
  if (atomic_load(&pl_real_all)) return;
  if (pl_driver_get() == NULL) return;
  for (int i = 0; i < PL_HOOK_COUNT; i++) (void)pl_hook_real(i);
  atomic_store(&pl_real_all, true);
}

int pl_hook_find_real(void *fn) {
  if (fn == NULL) return -1;
  pl_hook_resolve_all();
  for (int i = 0; i < PL_HOOK_COUNT; i++)
    if (atomic_load_explicit(&pl_real[i], memory_order_relaxed) == fn) return i;
  return -1;
}

int pl_hook_find_name(const char *name) {
  for (int i = 0; i < PL_HOOK_COUNT; i++)
    if (strcmp(pl_hook_names[i], name) == 0) return i;
  return -1;
}
