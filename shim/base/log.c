/* log.c - the shim's only voice: stderr, "pagelock: " prefix, once per kind.
 *
 * The host program owns stdout, so nothing ever goes there.  This file
 * decides whether a line is said (the level of PAGELOCK_LOG, once per
 * kind); logline.c says it, whole, without allocating. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>

#include "log.h"
#include "config.h"
#include "logline.h"

static atomic_uint pl_logged_kinds;

void pl_log(int level, pl_log_kind kind, const char *fmt, ...) {
  int saved = errno;
  if (level > pl_opt_long(PL_OPT_LOG)) goto out;
  if (kind != PL_LK_CONFIG && kind != PL_LK_EVENT) {
    unsigned bit = 1u << kind;
    if (atomic_fetch_or(&pl_logged_kinds, bit) & bit) goto out;
  }
  va_list ap;
  va_start(ap, fmt);
  pl_logline(fmt, &ap);
  va_end(ap);
out:
  errno = saved;
}

void pl_log_reset_for_test(void) { atomic_store(&pl_logged_kinds, 0); }
