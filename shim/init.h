/* init.h - start and exit (init.c). */
#ifndef PL_INIT_H
#define PL_INIT_H

#include "pl_internal.h"

/* The trace's last records (modules, symbols, counters, END), at exit;
 * tests call it to close a trace as the process would. */
void pl_exit_trace(void);

#endif
