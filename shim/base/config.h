/* config.h - the PAGELOCK_* option table (config.c). */
#ifndef PL_CONFIG_H
#define PL_CONFIG_H

#include "pl_defs.h"

/* PL_OPT_MODE ... in the order of include/pagelock/options.def. */
typedef enum pl_option_id {
#define PAGELOCK_OPTION(id, type, def, min, max, values, shown, help) PL_OPT_##id,
#include "pagelock/options.def"
#undef PAGELOCK_OPTION
  PL_OPT_COUNT
} pl_option_id;

enum pl_d2h_mode { PL_D2H_SYNC = 0, PL_D2H_ASYNC = 1 };
enum pl_h2d_mode { PL_H2D_SYNC = 0, PL_H2D_ASYNC = 1 };
enum pl_log_level { PL_LOG_QUIET = 0, PL_LOG_ERROR, PL_LOG_WARN, PL_LOG_INFO, PL_LOG_DEBUG };

/* Parse every option from the environment once.  Bad values are reported
 * (one line each) and replaced by the default; unknown PAGELOCK_* names are
 * warned about.  Safe to call more than once: later calls are no-ops. */
void pl_config_init(void);
/* The numeric value of an option (enum index for choice options). */
long pl_opt_long(pl_option_id id);
/* The string value of a string option, or NULL when unset. */
const char *pl_opt_str(pl_option_id id);
/* Re-read the table, for unit tests that change the environment. */
void pl_config_reset_for_test(void);

/* Parse "64K", "16M", "2G", "4096": returns false on junk or overflow. */
bool pl_parse_size(const char *s, uint64_t *out);

#endif
