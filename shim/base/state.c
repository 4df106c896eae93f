/* state.c - the little state every layer of the shim reads: whether it is
 * active, the reentrancy guard, thread ids, the page size, correlation ids, the flags
 * the trace's header will carry, and the kernel's small files.
 *
 * It calls nothing: the bottom of the shim, so that the trace writer, the
 * driver and the hooks can all read it without reaching up (init.c sets it
 * at load). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"

PL_TLS int pl_in_shim;
static bool pl_enabled;
static atomic_uint_fast64_t pl_correlation;

bool pl_active(void) { return pl_enabled; }

void pl_state_enable(void) { pl_enabled = true; }

static PL_TLS uint32_t pl_tid;

uint32_t pl_gettid(void) {
  if (PL_UNLIKELY(pl_tid == 0)) pl_tid = (uint32_t)syscall(SYS_gettid);
  return pl_tid;
}

/* The forking thread's id, kept, would name the parent in every record
 * the child writes. */
void pl_state_atfork_child(void) { pl_tid = 0; }

size_t pl_page_size(void) {
  static size_t pg;
  size_t p = __atomic_load_n(&pg, __ATOMIC_RELAXED);
  if (PL_UNLIKELY(p == 0)) {
    long v = sysconf(_SC_PAGESIZE);
    p = v > 0 ? (size_t)v : 4096;
    __atomic_store_n(&pg, p, __ATOMIC_RELAXED);
  }
  return p;
}

/* Handed out in blocks, one atomic add per PL_CORR_BLOCK copies of a
 * thread instead of one per copy: an atomic add on a line every copying
 * thread writes costs ~10 ns on the GPU host.  Ids stay unique in the
 * process (0 is never one); across threads they are not in call
 * order, which nothing relies on (the reader joins on equality). */
#define PL_CORR_BLOCK 1024
uint64_t pl_next_correlation(void) {
  static PL_TLS uint64_t next, end;
  if (PL_UNLIKELY(next == end)) {
    next = atomic_fetch_add(&pl_correlation, PL_CORR_BLOCK) + 1;
    end = next + PL_CORR_BLOCK;
  }
  return next++;
}

/* Learnt before the trace file exists (the driver is the fake one), and
 * written into its header when it is created (trace.c). */
static uint32_t pl_file_flags;

void pl_trace_set_flag(uint32_t flag) { __atomic_fetch_or(&pl_file_flags, flag, __ATOMIC_RELAXED); }

uint32_t pl_trace_flags(void) { return __atomic_load_n(&pl_file_flags, __ATOMIC_RELAXED); }

long pl_read_small_file(const char *path, char *buf, size_t cap) {
  if (cap == 0) return -1;
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = -1;
  if (fd >= 0) {
    n = read(fd, buf, cap - 1);
    (void)syscall(SYS_close, fd);
  }
  errno = saved;
  if (n < 0) return -1;
  buf[n] = 0;
  return (long)n;
}
