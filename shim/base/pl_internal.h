/* pl_internal.h - the base of the shim, what every module above it reads:
 * its state and the re-entry guard (state.h), one line to stderr
 * (logline.h), the option table (config.h), the log (log.h), the clock
 * (clock.h) and the real driver (driver.h).  The base's own files include
 * only the headers they use, never this one. */
#ifndef PL_INTERNAL_H
#define PL_INTERNAL_H

#include "driver.h" /* first: it includes cuda.h its own way */
#include "pl_defs.h"
#include "clock.h"
#include "config.h"
#include "log.h"
#include "logline.h"
#include "state.h"

#endif
