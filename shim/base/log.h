/* log.h - the shim's log (log.c): its level, and once per kind. */
#ifndef PL_LOG_H
#define PL_LOG_H

#include "config.h" /* the levels */

/* Each kind of problem is logged at most once per process. */
typedef enum pl_log_kind {
  PL_LK_CONFIG = 0, /* config messages are per option, never deduplicated */
  PL_LK_NO_DRIVER,
  PL_LK_TRACE_OPEN,
  PL_LK_TRACE_WRITE,
  PL_LK_STACK_TABLE_FULL,
  PL_LK_MANIFEST,
  PL_LK_SETUID,
  PL_LK_ATTR_QUERY,
  PL_LK_STAGE_POOL,     /* pinned pool could not be allocated */
  PL_LK_STAGE_GROW,     /* pinned pool could not grow past its chunks */
  PL_LK_STAGE_ERROR,    /* a driver call inside the engine failed */
  PL_LK_STAGE_WORKERS,  /* copy threads could not be started */
  PL_LK_STAGE_FALLBACK, /* a wait for a chunk timed out */
  PL_LK_CUPTI,          /* GPU timing unavailable, and why */
  PL_LK_TRACE_FD,       /* the program took the trace's descriptor */
  PL_LK_REGISTER,       /* the driver refused a shim registration */
  PL_LK_UNREGISTER,     /* the driver refused to undo one */
  PL_LK_PIN_THREAD,     /* the registration thread could not be started */
  PL_LK_PY_CODES,       /* the Python code table is full */
  PL_LK_PY_REFUSED,     /* the kernel refused the Python walk's page probe */
  PL_LK_EVENT,          /* PAGELOCK_LOG=debug: engine events, every one */
  PL_LK_CUPTI_SAMPLE,   /* GPU timing went to sampling, or could not resume */
  PL_LK_REENTRY,        /* debug builds: the re-entry guard left more than entered */
  PL_LK_COUNT
} pl_log_kind;

/* Log one line to stderr with the "pagelock: " prefix, never cut: the
 * format's pieces and every %s go out as they are in one writev, so put
 * the reason first and a long value (a path, an environment value) last.
 * Never allocates, never touches stdout, keeps errno.  Kinds other than
 * PL_LK_CONFIG and PL_LK_EVENT log only once. */
void pl_log(int level, pl_log_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void pl_log_reset_for_test(void);

#endif
