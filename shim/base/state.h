/* state.h - what every layer reads (state.c), and the re-entry guard. */
#ifndef PL_STATE_H
#define PL_STATE_H

#include "pl_defs.h"
#include "log.h" /* the guard's check, in debug builds */

/* True when the shim should do anything at all: not setuid, mode not off. */
bool pl_active(void);
/* The constructor found the shim should act (init.c). */
void pl_state_enable(void);
/* Shim-wide reentrancy guard: nonzero while the shim itself is running on
 * this thread, so calls it makes never come back into its own hooks.
 * Touched only through pl_shim_enter/leave/inside/own_thread (below). */
extern PL_TLS int pl_in_shim;
/* The calling thread's kernel id, kept per thread. */
uint32_t pl_gettid(void);
/* A forked child: its one thread has an id of its own. */
void pl_state_atfork_child(void);
/* The page size (sysconf, read once). */
size_t pl_page_size(void);
/* Up to cap-1 bytes of a small kernel file (/proc, /sys) into buf, NUL
 * terminated; the bytes read, or -1.  Allocates nothing, keeps the
 * program's errno (it is read inside copy and allocation hooks), and
 * closes with the system call: close(3) in the shim is its own wrapper
 * (hook_fd.c), a layer above every caller. */
long pl_read_small_file(const char *path, char *buf, size_t cap);
/* A correlation id for one copy call (unique in the process, never 0). */
uint64_t pl_next_correlation(void);
/* Set a file-header flag before the file is created; the flags so far. */
void pl_trace_set_flag(uint32_t flag);
uint32_t pl_trace_flags(void);

/* ---- the re-entry guard (state.c's pl_in_shim) -------------------------- */

/* Around anything the shim does on a program's thread that may reach a
 * hook of its own (a driver call, an allocation): the hook then passes
 * the call through.  Every enter has its leave on every path out, early
 * returns included: a leave missed turns the shim off on that thread for
 * good, silently.  Debug builds check the balance where it can be seen,
 * a leave with nothing entered, and say so once (never abort, never
 * allocate: async-signal-safe); tests read the depth after each path. */
static inline void pl_shim_enter(void) { pl_in_shim++; }
static inline void pl_shim_leave(void) {
#ifndef NDEBUG
  if (PL_UNLIKELY(pl_in_shim <= 0)) {
    pl_log(PL_LOG_ERROR, PL_LK_REENTRY, "re-entry guard left more often than entered (a bug)");
    return;
  }
#endif
  pl_in_shim--;
}
/* The shim is running on this thread (its own call reached a hook). */
static inline bool pl_shim_inside(void) { return pl_in_shim != 0; }
/* A thread of the shim's own (the writer, copy threads, the pin thread,
 * CUPTI's flusher): nothing it ever does is the program's.  First thing
 * in the thread's body; never left. */
static inline void pl_shim_own_thread(void) { pl_in_shim = 1; }
/* How deep this thread is inside the shim (tests: 0 after every path). */
static inline int pl_shim_depth(void) { return pl_in_shim; }

#endif
