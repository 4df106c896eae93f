/* init.c - load, fork and exit.
 *
 * The order of start and exit, and nothing else: every module is called
 * from here, and nothing calls in (the state they share is state.c's).
 * The constructor only parses the configuration and arms the fork handlers:
 * it must not touch CUDA (the program may never use it) nor allocate more
 * than libc already does.  Everything else starts lazily on the first hook. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_internal.h"
#include "init.h"
#include "engines.h"
#include "hooks.h"
#include "hostmem.h"
#include "pl_cupti.h"
#include "pystack.h"
#include "stack.h"
#include "trace.h"

/* Every shim lock is held across fork, in the one order the shim takes
 * them (stack -> trace; registry alone; registrations alone), so the child
 * never inherits a lock some vanished thread held. */
static void pl_atfork_prepare(void) {
  pl_engines_atfork_prepare();
  pl_stack_atfork_prepare();
  pl_trace_atfork_prepare();
  pl_hostmem_atfork_prepare();
}

static void pl_atfork_parent(void) {
  pl_hostmem_atfork_parent();
  pl_trace_atfork_parent();
  pl_stack_atfork_parent();
  pl_engines_atfork_parent();
}

/* The process whose memory this is: a vfork or posix_spawn child shares
 * its parent's and must leave the parent's trace alone. */
static pid_t pl_owner;
/* The trace was finished (by the destructor or by _exit's hook). */
static atomic_bool pl_finished;

static void pl_atfork_child(void) {
  pl_owner = (pid_t)syscall(SYS_getpid);
  atomic_store(&pl_finished, false);
  pl_state_atfork_child();
  pl_hostmem_atfork_child();
  pl_stack_reset();
  pl_engines_atfork_child();
  pl_cupti_atfork_child();
  pl_trace_atfork_child();
}

void pl_exit_trace(void) {
  /* The trace writer calls nothing above it: what the engines and the
   * stack table know goes in between its first and last records. */
  if (!pl_trace_finish_begin()) return;
  pl_stack_write_symbols();
  pl_stack_write_cost();
  pl_engines_write_counters();
  pl_trace_finish_end();
}

/* _exit or _Exit (hook_exit.c): the process ends without destructors
 * (Python's os._exit, in multiprocessing's children and in scripts that
 * skip their teardown; a handler of SIGTERM), and the trace would lose its
 * tail, its symbols and its END.  Finished as the destructor would, where
 * that is safe: in the process whose memory this is, not inside the shim
 * (a signal handler that interrupted it may hold the trace's lock), not
 * on a host function's thread (CUPTI's flush calls the driver).
 * Elsewhere the trace reads as cut short.  Registrations and threads end
 * with the process. */
#ifndef PL_UNIT_TEST
static void pl_finish_early(void) {
  if (!pl_active() || (pid_t)syscall(SYS_getpid) != pl_owner || !pl_engines_may_wait() ||
      atomic_exchange(&pl_finished, true))
    return;
  pl_shim_enter();
  /* CUPTI's flush may wait on what an interrupted driver call holds: not
   * from a handler, where the last GPU records are lost instead (at most
   * PAGELOCK_CUPTI_FLUSH_MS of them).  The rest allocates nothing. */
  if (!pl_stack_in_handler()) pl_cupti_finish();
  pl_exit_trace();
  pl_shim_leave();
}
#endif

__attribute__((constructor)) static void pl_init(void) {
#ifndef PL_UNIT_TEST
  /* First, and whatever the mode: the mmap hooks pass calls on in every
   * mode, with raw system calls until this has run. */
  pl_alloc_init();
#endif
  pl_config_init();
  pl_stack_init();
  pl_clock_init();
  pl_trace_init_clock();
  /* A setuid/setgid program runs with privileges the caller does not have:
   * writing files where the environment says would hand those privileges
   * out.  Pass everything through and write nothing. */
  if (getauxval(AT_SECURE)) {
    pl_log(PL_LOG_INFO, PL_LK_SETUID, "setuid/setgid program: passing calls through, no trace");
    return;
  }
  if (pl_opt_long(PL_OPT_MODE) == PAGELOCK_MODE_OFF) return;
  pl_owner = (pid_t)syscall(SYS_getpid);
  pthread_atfork(pl_atfork_prepare, pl_atfork_parent, pl_atfork_child);
  pl_py_init();
  pl_state_enable();
#ifndef PL_UNIT_TEST
  pl_alloc_enable();
  pl_exit_hook_arm(pl_finish_early);
#endif
}

__attribute__((destructor)) static void pl_fini(void) {
  if (!pl_active() || atomic_exchange(&pl_finished, true)) return;
  pl_shim_enter();
  /* Registrations stay: the process is ending, and an undo may wait on
   * GPU work. */
  pl_engines_stop();
  pl_exit_trace();
  pl_shim_leave();
}
