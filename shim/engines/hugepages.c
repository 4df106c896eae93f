/* hugepages.c - transparent huge pages for blocks that may be registered
 * (PAGELOCK_MODE register and auto).
 *
 * Why advise huge pages at all: registering memory costs the driver a walk
 * and a mapping per page, 12.6 ms for 256 MiB of 4 KiB pages against 7.7
 * ms for the same 256 MiB in 2 MiB pages (H200 host,
 * tests/gpu/probe_register.c), and while one registration call runs the
 * driver holds back every other copy submission of the process.  Most
 * distributions, the GPU hosts among them, run transparent huge pages in
 * `madvise` mode, where a malloc'd block never gets them unless asked.
 *
 * When: as the block is made, before the program's first touch faults
 * its pages in (memory already touched keeps its small pages).  What: only
 * the 2 MiB-aligned interior, the only part that can hold a huge page, so
 * no neighbour's memory is touched; and only a block that is a mapping of
 * its own (the caller's word: glibc's mmap'd chunks), so the advice ends
 * with the block: glibc heap memory keeps a VMA flag after the block is
 * freed, and the small blocks made there later would fault in 2 MiB at a
 * time.  glibc's own tunable glibc.malloc.hugetlb=1 gives the same advice
 * (to its heap as well).  A program's own
 * anonymous mmap is left alone: such mappings are often reservations or
 * arenas touched sparsely, where every touch would cost 2 MiB.  Only in
 * `madvise` mode: under `always` the block gets huge pages anyway, and the
 * advice would only add the kernel's direct compaction to its faults.
 * The cost: one system call per large allocation (beside the mmap that
 * made it), and a block the program touches only sparsely takes up to
 * 2 MiB per touched page: hence a knob, PAGELOCK_HUGEPAGES. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_internal.h"
#include "hugepages.h"

#define PL_HUGE ((uintptr_t)2 << 20)

static size_t pl_huge_min; /* 0: never advise */

/* Whether the kernel runs transparent huge pages in `madvise` mode: the
 * bracketed word of /sys/kernel/mm/transparent_hugepage/enabled. */
static bool pl_thp_madvise(void) {
  char buf[128];
  return pl_read_small_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) > 0 &&
         strstr(buf, "[madvise]") != NULL;
}

void pl_huge_init(void) {
  long mode = pl_opt_long(PL_OPT_MODE);
  size_t min = (size_t)pl_opt_long(PL_OPT_HUGEPAGES);
  bool on = (mode == PAGELOCK_MODE_REGISTER || mode == PAGELOCK_MODE_AUTO) && min > 0;
  pl_huge_min = on && pl_thp_madvise() ? min : 0;
}

void pl_huge_advise(void *p, size_t n) {
  if (PL_LIKELY(pl_huge_min == 0) || n < pl_huge_min) return;
  uintptr_t lo = ((uintptr_t)p + PL_HUGE - 1) & ~(PL_HUGE - 1);
  uintptr_t hi = ((uintptr_t)p + n) & ~(PL_HUGE - 1);
  if (hi <= lo) return;
  /* The system call itself, not the shim's madvise hook; the program's
   * errno is kept. */
  int saved = errno;
  syscall(SYS_madvise, (void *)lo, hi - lo, MADV_HUGEPAGE);
  errno = saved;
}
