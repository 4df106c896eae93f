/* pl_defs.h - what every file of the shim uses: the trace format, and
 * macros for visibility, branch hints, inlining, initial-exec TLS and
 * spinning.  It includes no module of the shim.
 *
 * Naming: pagelock_* is public (exported or in the trace format), pl_* is
 * internal to libpagelock.so.  Everything has hidden visibility; the only
 * exported symbols are the interposed libc/driver entry points, marked
 * PL_EXPORT where they are defined, in shim/hook_*.c only (the
 * lint_exports test checks). */
#ifndef PL_DEFS_H
#define PL_DEFS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "pagelock/trace_format.h"

#define PL_EXPORT __attribute__((visibility("default")))
#define PL_LIKELY(x) __builtin_expect(!!(x), 1)
#define PL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* For the few helpers of the per-copy path whose cost was measured
 * inlined: the compiler's own choice moves with the code around them. */
#define PL_ALWAYS_INLINE inline __attribute__((always_inline))
/* Initial-exec TLS: the cheapest access, and it never calls malloc (a
 * general-dynamic TLS access can, which is fatal inside a malloc hook). */
#define PL_TLS __thread __attribute__((tls_model("initial-exec")))

/* A spin-wait hint to the core (frees the sibling hyperthread). */
static inline void pl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
