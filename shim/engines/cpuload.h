/* cpuload.h - whether the CPUs this process may run on are all taken
 * (cpuload.c), for the staging engine (stage.c). */
#ifndef PL_CPULOAD_H
#define PL_CPULOAD_H

#include "pl_internal.h"

/* What the kernel said last: threads runnable on the whole machine
 * besides the shim's own, and the CPUs of this process's affinity mask. */
typedef struct pl_cpuload {
  unsigned others;
  unsigned cpus;
} pl_cpuload;

/* Staged copies ask at most this often as they start: large staged
 * copies take a millisecond or more, and a program's threads stay busy or
 * idle for longer than that. */
#define PL_CPULOAD_EVERY_NS 10000000ull

/* How many CPUs of this process's mask had no runnable thread a moment
 * ago, not counting `ours`, the shim's own threads runnable now (the
 * caller among them).  Asks the kernel when the last answer is older than
 * max_age_ns and answers from that in between; *seen (may be NULL) gets
 * the figures.  Allocates nothing and takes no lock: open, read and close
 * of /proc/loadavg.  UINT_MAX when the kernel cannot be asked. */
unsigned pl_cpuload_idle(unsigned ours, uint64_t max_age_ns, pl_cpuload *seen);

/* Tests: read path instead of /proc/loadavg and take cpus as the
 * affinity mask's size (0: the real mask), and forget the last answer. */
void pl_cpuload_set_for_test(const char *path, unsigned cpus);

#endif
