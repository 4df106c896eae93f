/* logline.h - one line to stderr, whole (logline.c). */
#ifndef PL_LOGLINE_H
#define PL_LOGLINE_H

#include "pl_defs.h"

/* "pagelock: ", fmt formatted, "\n", in one writev.  Never allocates,
 * never touches stdout.  Callers decide whether to say it (log.c, and
 * config.c for its own messages). */
void pl_logline(const char *fmt, va_list *ap);
/* Records which file descriptor 2 is at load (hook_fd.c's constructor):
 * from then on a line goes out only while 2 is still that file.  Unit
 * tests, which never call it, log to whatever 2 is. */
void pl_log_stderr_record(void);
/* Once, when lines were withheld because 2 is not the program's starting
 * stderr any more (or was closed at start): true, with why and the first
 * withheld line in text, for the trace to say (trace.c). */
bool pl_log_withheld_take(char *text, size_t len);

#endif
