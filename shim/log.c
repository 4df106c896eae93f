/* log.c - the shim's only voice: stderr, "pagelock: " prefix, once per kind.
 *
 * The host program owns stdout, so nothing ever goes there.  Formatting uses
 * a stack buffer and write(2) so logging is safe inside malloc hooks and
 * after stdio is torn down at exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "pl_internal.h"

static atomic_uint pl_logged_kinds;

void pl_log(int level, pl_log_kind kind, const char *fmt, ...) {
  int saved = errno;
  if (level > pl_opt_long(PL_OPT_LOG)) goto out;
  if (kind != PL_LK_CONFIG) {
    unsigned bit = 1u << kind;
    if (atomic_fetch_or(&pl_logged_kinds, bit) & bit) goto out;
  }
  char buf[512];
  int n = snprintf(buf, sizeof buf, "pagelock: ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) goto out;
  size_t len = (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
  buf[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, len);
  (void)w;
out:
  errno = saved;
}

void pl_log_reset_for_test(void) { atomic_store(&pl_logged_kinds, 0); }
