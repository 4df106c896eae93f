/* hook_fd.c - close, close_range, closefrom, dup2 and dup3.
 *
 * Why: a program that closes every descriptor above 2 and opens its own
 * files must neither close the trace's descriptor nor be written into
 * through it (trace.c, "the file", has the whole design).  To the program
 * the trace's number is a number that is not open:
 *  - close(n) fails with EBADF and leaves the trace open;
 *  - close_range and closefrom close everything else in their range;
 *  - dup2/dup3 onto n move the trace to another number first, so the
 *    program gets n, as it would without the shim; from n they fail as
 *    from a number that is not open.
 * Every other call goes straight to the next definition (libc, or another
 * wrapper preloaded after us), and costs one relaxed load and a compare.
 * A raw system call passes these by: the writer's fstat before each block
 * catches that.  Descriptor 2 is the program's to close or replace; the
 * log then stops rather than follow the number (logline.c), which this
 * file's constructor sets up. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_internal.h"
#include "trace.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

typedef int (*pl_close_fn)(int);
typedef int (*pl_close_range_fn)(unsigned, unsigned, int);
typedef void (*pl_closefrom_fn)(int);
typedef int (*pl_dup2_fn)(int, int);
typedef int (*pl_dup3_fn)(int, int, int);

/* The next definitions, looked up in the constructor.  A hook never calls
 * dlsym itself (a close may come from a signal handler, or from code
 * holding a lock dlsym's allocations need): a call before the constructor
 * makes the system call.  So does a libc without close_range or closefrom
 * (before glibc 2.34). */
static _Atomic(pl_close_fn) pl_next_close;
static _Atomic(pl_close_range_fn) pl_next_close_range;
static _Atomic(pl_closefrom_fn) pl_next_closefrom;
static _Atomic(pl_dup2_fn) pl_next_dup2;
static _Atomic(pl_dup3_fn) pl_next_dup3;

static int pl_sys_close(int fd) { return (int)syscall(SYS_close, fd); }
static int pl_sys_close_range(unsigned first, unsigned last, int flags) {
#ifdef SYS_close_range
  return (int)syscall(SYS_close_range, first, last, flags);
#else
  (void)first, (void)last, (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}
static int pl_sys_dup2(int oldfd, int newfd) {
  if (oldfd == newfd) return fcntl(oldfd, F_GETFD) < 0 ? -1 : newfd;
  return (int)syscall(SYS_dup3, oldfd, newfd, 0);
}
static int pl_sys_dup3(int oldfd, int newfd, int flags) {
  return (int)syscall(SYS_dup3, oldfd, newfd, flags);
}
static void pl_fallback_closefrom(int lowfd);

__attribute__((constructor)) static void pl_fd_init(void) {
  /* The same rule for stderr: the log goes only to the file that is at 2
   * now, at load (logline.c). */
  pl_log_stderr_record();
  void *f;
  f = pl_real_dlsym(RTLD_NEXT, "close");
  atomic_store(&pl_next_close, f ? (pl_close_fn)f : pl_sys_close);
  f = pl_real_dlsym(RTLD_NEXT, "close_range");
  atomic_store(&pl_next_close_range, f ? (pl_close_range_fn)f : pl_sys_close_range);
  f = pl_real_dlsym(RTLD_NEXT, "closefrom");
  atomic_store(&pl_next_closefrom, f ? (pl_closefrom_fn)f : pl_fallback_closefrom);
  f = pl_real_dlsym(RTLD_NEXT, "dup2");
  atomic_store(&pl_next_dup2, f ? (pl_dup2_fn)f : pl_sys_dup2);
  f = pl_real_dlsym(RTLD_NEXT, "dup3");
  atomic_store(&pl_next_dup3, f ? (pl_dup3_fn)f : pl_sys_dup3);
}

#define PL_NEXT(name, sys)                                           \
  ({                                                                 \
    __typeof__(atomic_load(&pl_next_##name)) f_ =                    \
        atomic_load_explicit(&pl_next_##name, memory_order_relaxed); \
    PL_LIKELY(f_ != NULL) ? f_ : sys;                                \
  })
#define PL_NEXT_CLOSE PL_NEXT(close, pl_sys_close)
#define PL_NEXT_CLOSE_RANGE PL_NEXT(close_range, pl_sys_close_range)
#define PL_NEXT_CLOSEFROM PL_NEXT(closefrom, pl_fallback_closefrom)
#define PL_NEXT_DUP2 PL_NEXT(dup2, pl_sys_dup2)
#define PL_NEXT_DUP3 PL_NEXT(dup3, pl_sys_dup3)

/* closefrom where libc has none: close_range, else one close per number
 * up to the highest the limit allows. */
static void pl_fallback_closefrom(int lowfd) {
  if (PL_NEXT_CLOSE_RANGE((unsigned)lowfd, ~0u, 0) == 0) return;
  long max = sysconf(_SC_OPEN_MAX);
  pl_close_fn c = PL_NEXT_CLOSE;
  for (long fd = lowfd; fd < max; fd++) c((int)fd);
}

/* Close [first, last] except the trace's number t inside it. */
static int pl_close_around(unsigned first, unsigned last, int flags, unsigned t) {
  pl_close_range_fn cr = PL_NEXT_CLOSE_RANGE;
  int r = 0;
  if (t > first) r = cr(first, t - 1, flags);
  if (r == 0 && t < last) r = cr(t + 1, last, flags);
  return r;
}

PL_EXPORT int close(int fd) {
  int t = atomic_load_explicit(&pl_trace_fd, memory_order_relaxed);
  if (PL_UNLIKELY(fd == t && t >= 0) && pl_trace_fd_owned(fd)) {
    errno = EBADF;
    return -1;
  }
  return PL_NEXT_CLOSE(fd);
}

PL_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  int t = atomic_load_explicit(&pl_trace_fd, memory_order_relaxed);
  /* Only a range that closes the trace's number needs the slow path;
   * CLOSE_RANGE_CLOEXEC closes nothing (and the trace is close-on-exec). */
  if (PL_LIKELY(t < 0 || (unsigned)t < first || (unsigned)t > last ||
                (flags & CLOSE_RANGE_CLOEXEC)))
    return PL_NEXT_CLOSE_RANGE(first, last, flags);
  sigset_t saved;
  t = pl_trace_fd_lock(&saved);
  if (t < 0) return PL_NEXT_CLOSE_RANGE(first, last, flags);
  int r = (unsigned)t < first || (unsigned)t > last
              ? PL_NEXT_CLOSE_RANGE(first, last, flags)
              : pl_close_around(first, last, flags, (unsigned)t);
  int e = errno;
  pl_trace_fd_unlock(&saved);
  errno = e;
  return r;
}

PL_EXPORT void closefrom(int lowfd) {
  int t = atomic_load_explicit(&pl_trace_fd, memory_order_relaxed);
  if (lowfd < 0) lowfd = 0;
  if (PL_LIKELY(t < lowfd)) {
    PL_NEXT_CLOSEFROM(lowfd);
    return;
  }
  sigset_t saved;
  t = pl_trace_fd_lock(&saved);
  if (t < lowfd) {
    if (t >= 0) pl_trace_fd_unlock(&saved);
    PL_NEXT_CLOSEFROM(lowfd);
    return;
  }
  int e = errno;
  if (t > lowfd && PL_NEXT_CLOSE_RANGE((unsigned)lowfd, (unsigned)t - 1, 0) != 0) {
    pl_close_fn c = PL_NEXT_CLOSE;
    for (int fd = lowfd; fd < t; fd++) c(fd);
  }
  PL_NEXT_CLOSEFROM(t + 1);
  pl_trace_fd_unlock(&saved);
  errno = e;
}

/* dup2/dup3 naming the trace's number: from it, the answer for a number
 * that is not open; onto it, the trace moves away first. */
static int pl_dup_slow(int oldfd, int newfd, int flags, bool three) {
  sigset_t saved;
  int t = pl_trace_fd_lock(&saved);
  if (t < 0 || (oldfd != t && newfd != t))
    return three ? PL_NEXT_DUP3(oldfd, newfd, flags) : PL_NEXT_DUP2(oldfd, newfd);
  int r;
  if (oldfd == t) {
    /* Linux checks dup3's flags and oldfd == newfd before oldfd. */
    errno = three && ((flags & ~O_CLOEXEC) != 0 || oldfd == newfd) ? EINVAL : EBADF;
    r = -1;
  } else {
    pl_trace_fd_move();
    r = three ? PL_NEXT_DUP3(oldfd, newfd, flags) : PL_NEXT_DUP2(oldfd, newfd);
    if (r < 0) {
      /* Failed: the number stays as the program would have it, closed. */
      int e = errno;
      PL_NEXT_CLOSE(newfd);
      errno = e;
    }
  }
  int e = errno;
  pl_trace_fd_unlock(&saved);
  errno = e;
  return r;
}

PL_EXPORT int dup2(int oldfd, int newfd) {
  int t = atomic_load_explicit(&pl_trace_fd, memory_order_relaxed);
  if (PL_LIKELY(t < 0 || (oldfd != t && newfd != t))) return PL_NEXT_DUP2(oldfd, newfd);
  return pl_dup_slow(oldfd, newfd, 0, false);
}

PL_EXPORT int dup3(int oldfd, int newfd, int flags) {
  int t = atomic_load_explicit(&pl_trace_fd, memory_order_relaxed);
  if (PL_LIKELY(t < 0 || (oldfd != t && newfd != t))) return PL_NEXT_DUP3(oldfd, newfd, flags);
  return pl_dup_slow(oldfd, newfd, flags, true);
}
