/* hook_exit.c - _exit and _Exit, which end the process without running
 * destructors: the one chance to finish the trace (init.c says when it
 * may).  exit() reaches glibc's own _exit, not this one, after the
 * destructor has finished the trace. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_internal.h"
#include "hooks.h"

static void (*pl_exit_finish)(void);
static void (*pl_next_exit)(int);

void pl_exit_hook_arm(void (*finish)(void)) {
  *(void **)&pl_next_exit = pl_real_dlsym(RTLD_NEXT, "_exit");
  pl_exit_finish = finish;
}

PL_EXPORT void _exit(int status) {
  if (pl_exit_finish != NULL) pl_exit_finish();
  if (pl_next_exit != NULL) pl_next_exit(status);
  for (;;) syscall(SYS_exit_group, status);
}
PL_EXPORT void _Exit(int status) __attribute__((alias("_exit")));
