/* cpuload.c - are the CPUs this process may use all taken?
 *
 * A staged copy is as fast as its copy threads (workers.c): 8 threads
 * fill pinned chunks at ~80 GB/s, one at ~11.  When the program's own
 * threads hold every core, the copy threads only get a share of each.
 * PyTorch's OpenMP threads do exactly that after every parallel CPU
 * operation: libgomp spins 300,000 rounds before sleeping.  On the H200
 * host a staged 256 MiB upload right after a parallel torch.equal ran at
 * 23 GB/s with them spinning, 47 with GOMP_SPINCOUNT=10000 and 46 with
 * OMP_WAIT_POLICY=passive (docs/bench/2026-11-27-copy-threads-against-openmp.md);
 * 16 copy threads instead of 8 did not help reliably (26-40 GB/s).
 * pagelock run therefore gives the program the short spin count; this
 * file finds out when the cores are taken all the same, so that the
 * report can say so.
 *
 * The kernel's count of runnable threads (/proc/loadavg, fourth field) is
 * one read, a few microseconds, and says whether an idle core exists: at
 * rest it is 1, the caller itself; with PyTorch's threads spinning on 16
 * CPUs it was 16-18.  It counts the whole machine, so on a host shared
 * beyond this process's mask it can overstate the load; the mask's size
 * is the number of cores the copy threads could find. */
#define _GNU_SOURCE
#include "cpuload.h"

#include <limits.h>
#include <sched.h>
#include <unistd.h>

#include "clock.h"

static const char *pl_cl_path = "/proc/loadavg";
static unsigned pl_cl_cpus_forced;
static _Atomic uint64_t pl_cl_at;   /* when last asked, 0 never */
static _Atomic uint64_t pl_cl_last; /* others << 32 | cpus, 0 unknown */

static unsigned pl_cl_mask_cpus(void) {
  if (pl_cl_cpus_forced) return pl_cl_cpus_forced;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return (unsigned)CPU_COUNT(&set);
}

/* "0.52 0.58 0.59 3/1012 4711": the number before the slash, 0 when
 * there is none. */
static unsigned pl_cl_read_runnable(void) {
  char buf[128];
  if (pl_read_small_file(pl_cl_path, buf, sizeof buf) <= 0) return 0;
  const char *p = buf;
  for (int field = 0; field < 3 && *p; p++)
    if (*p == ' ') field++;
  unsigned v = 0;
  bool any = false;
  for (; *p >= '0' && *p <= '9' && v < 100000000u; p++, any = true)
    v = v * 10 + (unsigned)(*p - '0');
  return any && *p == '/' ? v : 0;
}

unsigned pl_cpuload_idle(unsigned ours, uint64_t max_age_ns, pl_cpuload *seen) {
  uint64_t now = pl_now_ns();
  uint64_t at = atomic_load_explicit(&pl_cl_at, memory_order_relaxed);
  uint64_t last;
  if ((at != 0 && now - at < max_age_ns) ||
      !atomic_compare_exchange_strong(&pl_cl_at, &at, now ? now : 1)) {
    /* Asked lately, or another thread is asking: its last figures. */
    last = atomic_load_explicit(&pl_cl_last, memory_order_relaxed);
  } else {
    unsigned runnable = pl_cl_read_runnable(), cpus = pl_cl_mask_cpus();
    last = runnable && cpus ? (uint64_t)(runnable > ours ? runnable - ours : 0) << 32 | cpus : 0;
    atomic_store_explicit(&pl_cl_last, last, memory_order_relaxed);
  }
  pl_cpuload l = {(unsigned)(last >> 32), (unsigned)last};
  if (seen) *seen = l;
  if (last == 0) return UINT_MAX;
  return l.others < l.cpus ? l.cpus - l.others : 0;
}

void pl_cpuload_set_for_test(const char *path, unsigned cpus) {
  pl_cl_path = path ? path : "/proc/loadavg";
  pl_cl_cpus_forced = cpus;
  atomic_store(&pl_cl_at, 0);
  atomic_store(&pl_cl_last, 0);
}
