/* trace.c - the per-process trace file.
 *
 * Records are appended to a static buffer under one lock, in one order for
 * the whole process (a STACK record precedes every record naming it).  A
 * full buffer, or one a second old, is handed to a writer thread, which
 * writes it with write(2) while the program's threads fill the other one:
 * the write was a fifth of what a small copy paid for its record, and grew
 * as the page cache filled (docs/bench/2026-11-24-copy-record-rings.md).  A program thread waits
 * only when both buffers are full.  Where no thread can be started, the
 * filling thread writes, as before.  So a long run streams its trace and a
 * crash loses at most a second.
 *
 * COPY records, one per copy of the program, take a shorter way: each
 * thread writes them into a ring of its own (pl_ring below) that reaches the
 * shared buffer in bulk.  The file is created
 * on the first record: a process that never copies (the shell in
 * `pagelock run -- sh -c ...`, or any non-CUDA program) leaves no file.
 * Creation is careful because the path comes from the environment: never
 * through a symlink, never over an existing file, mode from the umask.
 *
 * Each buffer goes to the file as one block closed by a CHECK record (its
 * CRC32C), so a reader can say where damage starts; a write that fails or
 * comes up short leaves the file at its last whole record, with the reason
 * in the header's flags.  The descriptor is the shim's alone: see "the
 * file" below. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "pl_internal.h"
#include "trace.h"
#include "run.h"

/* The trace's own descriptors close with the system call: close(3) in the
 * shim is its own wrapper (hook_fd.c), a layer above the trace writer. */
static void pl_own_close(int fd) { (void)syscall(SYS_close, fd); }

#define PL_TRACE_BUF (256u << 10)
#define PL_FLUSH_NS 1000000000ull

static pthread_mutex_t pl_trace_lock = PTHREAD_MUTEX_INITIALIZER;
/* Every record's size is a multiple of 8, so records reserved in place
 * (pl_trace_reserve) are aligned for their fields.  pl_buf is the one being
 * filled; the other holds pl_pend_len bytes handed to the writer (0: free,
 * and only then may the two swap). */
static _Alignas(64) char pl_bufs[2][PL_TRACE_BUF];
static char *pl_buf = pl_bufs[0];
static size_t pl_buf_len, pl_pend_len;
static bool pl_writer_on, pl_writer_quit;
static pthread_cond_t pl_work_cv, pl_free_cv; /* writer: work to do; fillers: a buffer free */

/* Per-thread rings of COPY records.  Into the shared buffer a record cost a
 * lock round and a store miss on a line the writer thread had read last:
 * about 55 ns on the GPU host, a third of what the shim adds to a small
 * copy (docs/bench/2026-11-24-copy-record-rings.md).  A ring has one producer, its thread, which
 * takes no lock and writes lines that stay in its own cache; its records
 * are moved to the shared buffer under the trace lock by whoever drains it:
 * its thread when it is full or when the thread exits, the writer thread
 * once a second, the exit path.  So records of different threads interleave
 * by batches, not one by one.  The reader joins by correlation and never
 * relied on the file's order of COPY records; what it does rely on holds:
 * a STACK record goes straight to the shared buffer, before the COPY that
 * names it is even written.  A thread that finds every ring taken writes
 * through the shared buffer as before. */
#define PL_RING_RECS 64 /* 6.5 KiB: one drain per 64 copies */
#define PL_RINGS 256
typedef struct pl_ring {
  _Alignas(64) _Atomic uint64_t head; /* records written: the owner's */
  _Alignas(64) _Atomic uint64_t tail; /* records drained: under the trace lock */
  bool owned;                         /* under the trace lock */
  _Alignas(64) pagelock_rec_copy rec[PL_RING_RECS];
  /* The thread's runs of repeated copies (run.h): drained with the ring. */
  _Alignas(64) pl_run runs[PL_RUN_SLOTS];
} pl_ring;
static pl_ring pl_rings[PL_RINGS];
static unsigned pl_rings_max = PL_RINGS; /* lowered by tests */
static unsigned pl_rings_used;           /* slots ever handed out (trace lock) */
/* A forked child empties every ring and bumps the epoch, which makes each
 * thread's ring pointer stale: the forking thread takes a ring anew. */
static _Atomic unsigned pl_ring_epoch = 1;
static PL_TLS pl_ring *pl_my_ring;
PL_TLS pl_run *pl_my_runs;
static PL_TLS unsigned pl_my_epoch; /* a ring was sought in this epoch (NULL: none free) */
static PL_TLS uint64_t pl_my_head;
static PL_TLS bool pl_my_shared; /* this record went to the shared buffer */
static pthread_key_t pl_ring_key;
static pthread_once_t pl_ring_once = PTHREAD_ONCE_INIT;
static bool pl_opened; /* the file was created (trace lock) */
static bool pl_failed; /* creation failed: stop trying */
static char pl_path[PATH_MAX];
static uint64_t pl_records, pl_dropped;
static uint64_t pl_last_flush;
static uint64_t pl_start_mono, pl_start_real;

const char *pl_trace_path(void) { return pl_path; }

uint64_t pl_trace_start_ns(void) { return pl_start_mono; }

/* The job rank from the usual launchers, or -1: torchrun's and mpirun's
 * own processes have none (they set these for the ranks they start), nor
 * does LOCAL_RANK count, which repeats on every node. */
static int pl_rank(void) {
  static const char *const vars[] = {"RANK",     "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                     "PMI_RANK", "MV2_COMM_WORLD_RANK",  "SLURM_PROCID",
                                     NULL};
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (*end == '\0' && r >= 0 && r < INT_MAX) return (int)r;
    }
  }
  return -1;
}

bool pl_trace_expand(const char *pattern, char *out, size_t outsz) {
  size_t o = 0;
  char tmp[HOST_NAME_MAX + 32];
  for (const char *p = pattern; *p; p++) {
    const char *add = tmp;
    if (*p != '%') {
      tmp[0] = *p;
      tmp[1] = 0;
    } else {
      switch (p[1]) {
        case 'p':
          snprintf(tmp, sizeof tmp, "%d", (int)getpid());
          p++;
          break;
        case 'h':
          if (gethostname(tmp, sizeof tmp - 1) != 0) strcpy(tmp, "host");
          tmp[sizeof tmp - 1] = 0;
          p++;
          break;
        case 'r': {
          /* Without a rank, a word no rank can be: "0" made a launcher's
           * trace take rank 0's name, and rank 0's trace a suffixed one. */
          int r = pl_rank();
          if (r >= 0)
            snprintf(tmp, sizeof tmp, "%d", r);
          else
            strcpy(tmp, "norank");
          p++;
          break;
        }
        case '%':
          strcpy(tmp, "%");
          p++;
          break;
        default: strcpy(tmp, "%"); break; /* a lone % stays literal */
      }
    }
    size_t l = strlen(add);
    if (o + l + 1 > outsz) return false;
    memcpy(out + o, add, l);
    o += l;
  }
  out[o] = 0;
  return true;
}

/* Tell `pagelock run` which file this process wrote.  One short write to an
 * O_APPEND file is atomic, so many processes can share the manifest.  Only
 * a regular file will do: opening a FIFO for writing waits for a reader
 * (the program hung), a device may act on being opened.  So the path is
 * first opened as O_PATH, which opens nothing, and looked at; the file is
 * then opened without blocking and must be the one looked at. */
static void pl_manifest_add(const char *path) {
  const char *m = pl_opt_str(PL_OPT_MANIFEST);
  if (m == NULL) return;
  struct stat st, st2;
  int pfd = open(m, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (pfd < 0) {
    pl_log(PL_LOG_WARN, PL_LK_MANIFEST,
           "cannot open the manifest (%s); this trace is not listed: PAGELOCK_MANIFEST='%s'",
           strerror(errno), m);
    return;
  }
  int ok = fstat(pfd, &st);
  pl_own_close(pfd);
  if (ok != 0 || !S_ISREG(st.st_mode)) {
    const char *what = ok != 0                                      ? "unknown"
                       : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                       : S_ISLNK(st.st_mode)                        ? "a symbolic link"
                       : S_ISDIR(st.st_mode)                        ? "a directory"
                       : S_ISSOCK(st.st_mode)                       ? "a socket"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "not a regular file";
    pl_log(
        PL_LOG_WARN, PL_LK_MANIFEST,
        "the manifest is %s, not a regular file (as `pagelock run` makes); this trace is not listed: PAGELOCK_MANIFEST='%s'",
        what, m);
    return;
  }
  int fd = open(m, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    pl_log(PL_LOG_WARN, PL_LK_MANIFEST,
           "cannot open the manifest (%s); this trace is not listed: PAGELOCK_MANIFEST='%s'",
           strerror(errno), m);
    return;
  }
  if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino) {
    pl_log(
        PL_LOG_WARN, PL_LK_MANIFEST,
        "the manifest was replaced while being opened; this trace is not listed: PAGELOCK_MANIFEST='%s'",
        m);
    pl_own_close(fd);
    return;
  }
  char line[PATH_MAX + 2];
  int n = snprintf(line, sizeof line, "%s\n", path);
  if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n)
    pl_log(PL_LOG_WARN, PL_LK_MANIFEST,
           "cannot write the manifest (%s); this trace is not listed: PAGELOCK_MANIFEST='%s'",
           strerror(errno), m);
  pl_own_close(fd);
}

/* ---- the file --------------------------------------------------------
 *
 * The shim writes only to a descriptor it owns.  A daemon closes every
 * descriptor above 2 (close_range, closefrom, a loop) and opens its own
 * files, which get the lowest free numbers: the trace's old one among
 * them.  Writing on to that number put 34 KB of records into a program's
 * 40-byte data file.  So:
 *  - The descriptor lives at a high number: F_DUPFD_CLOEXEC from 768 (3/4
 *    of RLIMIT_NOFILE when that is lower), which open() hands out only to
 *    a program with 768 files open at once.
 *  - Its file's st_dev/st_ino are kept, and checked with fstat before
 *    every block (one system call per 256 KiB): a close the shim never saw
 *    (a raw close_range system call) leaves there either nothing or the
 *    program's file, and the block does not go there.
 *  - hook_fd.c wraps close, close_range, closefrom, dup2 and dup3: closing
 *    the number is a no-op that fails with EBADF, as closing a number that
 *    is not open does (LTTng-UST's fd tracker does the same for its own);
 *    dup2/dup3 over it first move the trace to another number, so the
 *    program gets the number it named.
 *  - A descriptor lost all the same is replaced by opening the file again
 *    by path: O_NOFOLLOW, never created, and only if it is still the same
 *    inode holding at least the shim's bytes.  Otherwise the trace stops,
 *    said once, with PAGELOCK_FILE_STOP_FD_LOST in the header when the file
 *    can still be reached.
 * What no check in user space can close: a raw close of the number and a
 * raw open or dup2 that lands on that same number, both between the fstat
 * and the write (microseconds, and a number open() reaches only past 768
 * files).  Giving the writer thread a descriptor table of its own
 * (unshare(CLONE_FILES)) would close it, but container seccomp profiles
 * refuse unshare, and the copy would keep every file the program had open
 * at that moment open a while longer (a pipe's reader waiting for EOF).
 *
 * Every write holds pl_fd_lock, taken after the trace lock when both are
 * held; the wrappers take it alone, only for calls that name or cover the
 * trace's number.  A program thread holds it with its signals blocked, so
 * a signal handler that closes or dup2s the number cannot deadlock on it
 * (the writer thread blocks every signal anyway). */
#define PL_FD_FLOOR 768
static pthread_mutex_t pl_fd_lock = PTHREAD_MUTEX_INITIALIZER;
static int pl_fd = -1;                        /* the descriptor (pl_fd_lock) */
_Atomic int pl_trace_fd = -1;                 /* the same number, for the wrappers */
static _Atomic uint64_t pl_fd_dev, pl_fd_ino; /* its file */
static _Atomic int pl_fd_pid;                 /* the process whose table holds it */
/* Bytes in the file, every one of them part of a whole record (the
 * header, then blocks).  The next block starts here. */
static uint64_t pl_file_off;
static uint32_t pl_hdr_flags;   /* the header's flags word as written */
static _Atomic bool pl_stopped; /* the writer stopped for good */

static bool pl_fd_is_file(int fd) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == atomic_load(&pl_fd_dev) &&
         (uint64_t)st.st_ino == atomic_load(&pl_fd_ino);
}

/* Move fd to a number from the floor up (closing the old one); fd itself
 * when no such number is free. */
static int pl_fd_up(int fd) {
  int floor = PL_FD_FLOOR;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur <= (rlim_t)floor)
    floor = (int)(rl.rlim_cur / 4 * 3);
  if (fd >= floor) return fd;
  int hi = fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (hi < 0) return fd;
  pl_own_close(fd);
  return hi;
}

/* Make fd, a descriptor of the trace file with stat st, the trace's
 * (fd lock held; the previous number, if any, already given up). */
static void pl_fd_install(int fd, const struct stat *st) {
  fd = pl_fd_up(fd);
  pl_fd = fd;
  atomic_store(&pl_fd_dev, (uint64_t)st->st_dev);
  atomic_store(&pl_fd_ino, (uint64_t)st->st_ino);
  atomic_store(&pl_fd_pid, (int)getpid());
  atomic_store_explicit(&pl_trace_fd, fd, memory_order_release);
}

/* Forget the number without closing it: it may be the program's now. */
static void pl_fd_forget(void) {
  atomic_store(&pl_trace_fd, -1);
  pl_fd = -1;
}

/* Take pl_fd_lock; a program thread blocks its signals first. */
static PL_TLS bool pl_on_writer; /* this thread is the writer */
static void pl_fd_lock_take(sigset_t *saved) {
  if (!pl_on_writer) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, saved);
  }
  pthread_mutex_lock(&pl_fd_lock);
}

static void pl_fd_lock_drop(const sigset_t *saved) {
  pthread_mutex_unlock(&pl_fd_lock);
  if (!pl_on_writer) pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* Stop writing for good (fd lock held), with why in the header's flags
 * when the file can still be reached (fd >= 0, a descriptor of it): a
 * pwrite of one word of the header's first block, which needs no new disk
 * block, so it succeeds on a full disk.  The file keeps its whole records;
 * the trace's own descriptor is closed. */
static void pl_stop_locked(int fd, uint32_t flag) {
  atomic_store(&pl_stopped, true);
  if (fd >= 0 && flag != 0) {
    uint32_t f = pl_hdr_flags | flag;
    ssize_t w = pwrite(fd, &f, sizeof f, offsetof(pagelock_file_header, flags));
    (void)w; /* nothing more can be done: the report then guesses */
  }
  if (pl_fd >= 0) {
    int old = pl_fd;
    pl_fd_forget();
    if (pl_fd_is_file(old)) pl_own_close(old);
  }
}

static bool pl_disk_full(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

/* Cut the file to len bytes.  Should that fail too, the file keeps a cut
 * record at its end, where a reader stops. */
static void pl_cut(int fd, uint64_t len) {
  int r = ftruncate(fd, (off_t)len);
  (void)r;
}

/* The file was taken from the shim (fd lock held): open it again, or stop.
 * Returns true with pl_fd at the file's end, ready for the next block. */
static bool pl_fd_recover_locked(void) {
  pl_fd_forget();
  const char *why;
  int err = 0;
  int fd = open(pl_path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    err = errno;
    why = "cannot be opened again";
  } else if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != atomic_load(&pl_fd_dev) ||
             (uint64_t)st.st_ino != atomic_load(&pl_fd_ino)) {
    pl_own_close(fd);
    fd = -1;
    why = "is another file now";
  } else if ((uint64_t)st.st_size < pl_file_off) {
    why = "was cut short";
    if (st.st_size < (off_t)sizeof(pagelock_file_header)) {
      pl_own_close(fd); /* no header left to flag */
      fd = -1;
    }
  } else if ((st.st_size > (off_t)pl_file_off && ftruncate(fd, (off_t)pl_file_off) != 0) ||
             lseek(fd, (off_t)pl_file_off, SEEK_SET) < 0) {
    /* Longer: the part of a block written before the number was lost. */
    err = errno;
    why = "cannot be written again";
  } else {
    pl_fd_install(fd, &st);
    return true;
  }
  char reason[128];
  snprintf(reason, sizeof reason, "%s%s%s", why, err ? ": " : "", err ? strerror(err) : "");
  pl_log(
      PL_LOG_ERROR, PL_LK_TRACE_FD,
      "the program closed the trace's descriptor and the trace file %s; the trace stops at byte %llu: '%s'",
      reason, (unsigned long long)pl_file_off, pl_path);
  pl_stop_locked(fd, PAGELOCK_FILE_STOP_FD_LOST);
  if (fd >= 0) pl_own_close(fd);
  return false;
}

/* The whole records at the start of the n bytes at b: their length. */
static size_t pl_whole_records(const char *b, size_t n) {
  size_t off = 0;
  while (off + sizeof(pagelock_rec_hdr) <= n) {
    pagelock_rec_hdr h;
    memcpy(&h, b + off, sizeof h);
    if (h.size < sizeof h || h.size > n - off) break;
    off += h.size;
  }
  return off;
}

/* Bytes the file may still grow by under RLIMIT_FSIZE.  A write past it
 * fails with EFBIG and also raises SIGXFSZ, which kills a program that
 * does not ignore it; so the shim stops short of the limit itself. */
static uint64_t pl_fsize_room(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return rl.rlim_cur > pl_file_off ? rl.rlim_cur - pl_file_off : 0;
}

/* Why the writer stopped, reason first (fd lock held). */
static void pl_log_stop(int err) {
  const char *what = err == EFBIG    ? "the file size limit (RLIMIT_FSIZE) is reached"
                     : err == EDQUOT ? "the disk quota is exceeded"
                     : err == ENOSPC ? "the disk is full"
                                     : "cannot write the trace";
  pl_log(PL_LOG_ERROR, PL_LK_TRACE_WRITE,
         "%s (%s): the trace stops at its last whole record, byte %llu: '%s'", what, strerror(err),
         (unsigned long long)pl_file_off, pl_path);
}

/* Write the header (fd lock held, the file just created): false, the file
 * emptied and the trace stopped, when it does not fit. */
static bool pl_write_header_locked(const pagelock_file_header *h) {
  size_t done = 0;
  int err = 0;
  if (pl_fsize_room() < sizeof *h) err = EFBIG;
  while (err == 0 && done < sizeof *h) {
    ssize_t w = write(pl_fd, (const char *)h + done, sizeof *h - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      err = w < 0 ? errno : ENOSPC;
    else
      done += (size_t)w;
  }
  if (err == 0) {
    pl_file_off = sizeof *h;
    return true;
  }
  if (done > 0) pl_cut(pl_fd, 0); /* a cut header reads as a damaged file */
  pl_log_stop(err);
  pl_stop_locked(-1, 0);
  return false;
}

/* Write one block, b[0, n) (whole records), and the CHECK record that
 * closes it, in one writev (fd lock held).  A short or failed write cuts
 * the file back to its last whole record and stops the trace, with why in
 * the header.  The CRC is computed here, on the writer thread: the
 * program's threads never pay for it. */
static void pl_block_write_locked(const char *b, size_t n) {
  for (int tries = 0; !atomic_load(&pl_stopped); tries++) {
    if (!pl_fd_is_file(pl_fd)) {
      /* A number lost and recovered more than a few times within one
       * block: the program keeps closing it; give up rather than spin. */
      if (tries >= 4) {
        pl_fd_forget();
        pl_log(
            PL_LOG_ERROR, PL_LK_TRACE_FD,
            "the program keeps closing the trace's descriptor; the trace stops at byte %llu: '%s'",
            (unsigned long long)pl_file_off, pl_path);
        pl_stop_locked(-1, 0);
        return;
      }
      if (!pl_fd_recover_locked()) return;
    }
    pagelock_rec_check ck;
    memset(&ck, 0, sizeof ck);
    ck.h.type = PAGELOCK_REC_CHECK;
    ck.h.size = sizeof ck;
    ck.start = pl_file_off;
    size_t len = n;
    int err = 0;
    uint64_t room = pl_fsize_room();
    if (room < n + sizeof ck) {
      len = pl_whole_records(b, room > sizeof ck ? (size_t)(room - sizeof ck) : 0);
      err = EFBIG;
    }
    ck.crc32c = pagelock_crc32c(0, b, len);
    struct iovec iov[2] = {{(void *)b, len}, {&ck, len ? sizeof ck : 0}};
    size_t total = iov[0].iov_len + iov[1].iov_len, done = 0;
    int werr = 0;
    while (done < total) {
      struct iovec v[2];
      int nv = 0;
      size_t skip = done;
      for (int i = 0; i < 2; i++) {
        if (skip >= iov[i].iov_len) {
          skip -= iov[i].iov_len;
          continue;
        }
        v[nv].iov_base = (char *)iov[i].iov_base + skip;
        v[nv].iov_len = iov[i].iov_len - skip;
        skip = 0;
        nv++;
      }
      ssize_t w = writev(pl_fd, v, nv);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        werr = w < 0 ? errno : ENOSPC;
        break;
      }
      done += (size_t)w;
    }
    if (werr == EBADF) continue; /* closed after the check: recover, write again */
    if (werr == 0) {
      pl_file_off += done;
      if (err == 0) return;
    } else {
      err = werr;
      pl_file_off += pl_whole_records(b, done < len ? done : len);
      pl_cut(pl_fd, pl_file_off);
    }
    pl_log_stop(err);
    pl_stop_locked(
        pl_fd, pl_disk_full(err) ? PAGELOCK_FILE_STOP_DISK_FULL : PAGELOCK_FILE_STOP_WRITE_ERROR);
    return;
  }
}

static void pl_write_buf(const char *b, size_t n) {
  sigset_t saved;
  pl_fd_lock_take(&saved);
  pl_block_write_locked(b, n);
  pl_fd_lock_drop(&saved);
}

bool pl_trace_fd_owned(int fd) {
  return fd >= 0 && fd == atomic_load_explicit(&pl_trace_fd, memory_order_acquire) &&
         pl_fd_is_file(fd);
}

int pl_trace_fd_lock(sigset_t *saved) {
  if (atomic_load(&pl_trace_fd) < 0 || atomic_load(&pl_fd_pid) != (int)getpid()) return -1;
  pl_fd_lock_take(saved);
  if (pl_fd >= 0 && pl_fd_is_file(pl_fd)) return pl_fd;
  /* The number holds something else now: the writer opens the file again
   * before its next block. */
  pl_fd_forget();
  pl_fd_lock_drop(saved);
  return -1;
}

void pl_trace_fd_unlock(const sigset_t *saved) { pl_fd_lock_drop(saved); }

void pl_trace_fd_move(void) {
  int hi = fcntl(pl_fd, F_DUPFD_CLOEXEC, pl_fd < PL_FD_FLOOR ? PL_FD_FLOOR : pl_fd + 1);
  if (hi < 0) hi = fcntl(pl_fd, F_DUPFD_CLOEXEC, 3);
  if (hi < 0) {
    pl_log(
        PL_LOG_ERROR, PL_LK_TRACE_FD,
        "the program took the trace's descriptor and no other is free (%s); the trace stops at byte %llu: '%s'",
        strerror(errno), (unsigned long long)pl_file_off, pl_path);
    /* The flag still goes through the old number, which the caller's
     * dup2 replaces next. */
    int old = pl_fd;
    pl_fd_forget();
    pl_stop_locked(old, PAGELOCK_FILE_STOP_FD_LOST);
    return;
  }
  pl_fd = hi;
  atomic_store_explicit(&pl_trace_fd, hi, memory_order_release);
}

/* Write the PROCESS record straight into the buffer (lock held). */
static void pl_buf_put(const void *p, size_t n);
static void pl_writer_start(void);
static void pl_rings_drain_locked(void);
static void pl_put_process(void) {
  char exe[PATH_MAX] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  char host[HOST_NAME_MAX + 1] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  size_t el = strlen(exe) + 1, hl = strlen(host) + 1;
  size_t size = (sizeof(pagelock_rec_process) + el + hl + 7) & ~(size_t)7;
  char rec[sizeof(pagelock_rec_process) + PATH_MAX + HOST_NAME_MAX + 16];
  memset(rec, 0, size);
  pagelock_rec_process *pr = (pagelock_rec_process *)rec;
  pr->h.type = PAGELOCK_REC_PROCESS;
  pr->h.size = (uint32_t)size;
  pr->ppid = (uint64_t)getppid();
  pr->mode = (uint32_t)pl_opt_long(PL_OPT_MODE);
  pr->rank = pl_rank();
  memcpy(rec + sizeof *pr, exe, el);
  memcpy(rec + sizeof *pr + el, host, hl);
  pl_buf_put(rec, size);
}

/* What is already at the output path, when it is not a place for a file
 * of our own.  A character device (/dev/null, /dev/full, a terminal, and
 * /dev/stdout or /dev/stderr when they lead to one) means "discard": no
 * trace, no file.  A FIFO, socket or block device, or a link into /proc
 * (/dev/stdout, /dev/stderr: the program's own descriptors, which the shim
 * never writes) is refused.  Either way no suffixed file is made beside
 * it: the suffix is for an earlier trace (or a link planted where one
 * goes), and /dev/null.1 would be a new regular file in /dev.  Anything
 * else (nothing there, a regular file, a directory, another link) takes
 * the usual way.  *what says what was found when it is refused. */
enum { PL_OUT_FILE, PL_OUT_DISCARD, PL_OUT_REFUSE };
static int pl_output_kind(const char *path, const char **what) {
  struct stat lst, st;
  if (lstat(path, &lst) != 0 || S_ISREG(lst.st_mode)) return PL_OUT_FILE;
  bool link = S_ISLNK(lst.st_mode);
  if (!link)
    st = lst;
  else if (stat(path, &st) != 0)
    return PL_OUT_FILE; /* dangling: O_EXCL steps past it */
  if (S_ISCHR(st.st_mode)) return PL_OUT_DISCARD;
  if (link) {
    char t[8];
    ssize_t n = readlink(path, t, sizeof t);
    if (n >= 6 && memcmp(t, "/proc/", 6) == 0) {
      *what = "a link to one of the program's own descriptors";
      return PL_OUT_REFUSE;
    }
  }
  *what = S_ISFIFO(st.st_mode)   ? "a FIFO"
          : S_ISSOCK(st.st_mode) ? "a socket"
          : S_ISBLK(st.st_mode)  ? "a block device"
                                 : NULL;
  return *what ? PL_OUT_REFUSE : PL_OUT_FILE;
}

/* The i-th name for a trace at base (i > 0: base is taken).  The number
 * goes before a ".trace" extension, so that x.0.trace taken gives
 * x.0.1.trace, which `pagelock report x.*.trace` and a directory read
 * still find; other names get it at the end. */
static void pl_trace_suffixed(const char *base, int i, char *out, size_t outsz) {
  size_t bl = strlen(base);
  const char *slash = strrchr(base, '/');
  size_t nl = slash ? bl - (size_t)(slash + 1 - base) : bl;
  if (i == 0)
    snprintf(out, outsz, "%s", base);
  else if (nl > 6 && strcmp(base + bl - 6, ".trace") == 0)
    snprintf(out, outsz, "%.*s.%d.trace", (int)(bl - 6), base, i);
  else
    snprintf(out, outsz, "%s.%d", base, i);
}

/* Create the trace file and write its header (lock held).  Returns false,
 * logging once, when no file can be made or the trace stopped; tracing
 * then stops. */
static bool pl_open_locked(void) {
  if (pl_opened) return !atomic_load_explicit(&pl_stopped, memory_order_relaxed);
  if (pl_failed) return false;
  const char *pattern = pl_opt_str(PL_OPT_OUTPUT);
  if (pattern == NULL) pattern = "pagelock.%p.trace";
  char base[PATH_MAX - 16];
  if (!pl_trace_expand(pattern, base, sizeof base)) {
    pl_log(
        PL_LOG_ERROR, PL_LK_TRACE_OPEN,
        "PAGELOCK_OUTPUT is too long (valid: a path of at most %zu bytes once %%p, %%h and %%r are expanded); "
        "no trace written: PAGELOCK_OUTPUT='%s'",
        sizeof base - 1, pattern);
    pl_failed = true;
    return false;
  }
  const char *what = NULL;
  int kind = pl_output_kind(base, &what);
  if (kind != PL_OUT_FILE) {
    if (kind == PL_OUT_DISCARD)
      pl_log(PL_LOG_INFO, PL_LK_TRACE_OPEN,
             "the trace goes to a character device, which discards it: nothing is written: '%s'",
             base);
    else
      pl_log(PL_LOG_ERROR, PL_LK_TRACE_OPEN,
             "cannot write the trace to '%s': it is %s, and a trace is a regular file of its own "
             "(none is made beside it); tracing is off",
             base, what);
    pl_failed = true;
    pl_path[0] = 0;
    return false;
  }
  int fd = -1;
  for (int i = 0; i < 1000 && fd < 0; i++) {
    pl_trace_suffixed(base, i, pl_path, sizeof pl_path);
    fd = open(pl_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) != 0) {
    int e = errno;
    pl_own_close(fd);
    fd = -1;
    errno = e;
  }
  if (fd < 0) {
    pl_log(PL_LOG_ERROR, PL_LK_TRACE_OPEN, "cannot create trace file '%s': %s; tracing is off",
           pl_path, strerror(errno));
    pl_failed = true;
    pl_path[0] = 0;
    return false;
  }
  if (pl_path[0] != '/') {
    /* The manifest, the report and a reopening need a path valid from any
     * directory. */
    char cwd[PATH_MAX], rel[PATH_MAX];
    size_t rl = strlen(pl_path);
    memcpy(rel, pl_path, rl + 1);
    if (getcwd(cwd, sizeof cwd)) {
      size_t cl = strlen(cwd);
      if (cl + rl + 2 <= sizeof pl_path) {
        memcpy(pl_path, cwd, cl);
        pl_path[cl] = '/';
        memcpy(pl_path + cl + 1, rel, rl + 1);
      }
    }
  }
  pagelock_file_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, PAGELOCK_TRACE_MAGIC, 8);
  h.version = PAGELOCK_TRACE_VERSION;
  h.header_size = sizeof h;
  h.pid = (uint64_t)getpid();
  h.start_realtime_ns = pl_start_real;
  h.start_mono_ns = pl_start_mono;
  h.flags = pl_trace_flags() | PAGELOCK_FILE_CHECKSUMS;
  /* The header goes first, ahead of anything buffered. */
  sigset_t saved;
  pl_fd_lock_take(&saved);
  pl_fd_install(fd, &st);
  pl_file_off = 0;
  pl_hdr_flags = h.flags;
  atomic_store(&pl_stopped, false);
  bool ok = pl_write_header_locked(&h);
  pl_fd_lock_drop(&saved);
  pl_opened = true;
  if (!ok) return false;
  pl_writer_start();
  pl_manifest_add(pl_path);
  pl_put_process();
  return true;
}

/* Pass what is buffered on to the file (lock held): swap buffers and wake
 * the writer, waiting only while it still writes the previous buffer; with
 * no writer, write it here. */
static void pl_flush_locked(void) {
  if (pl_writer_on) {
    if (pl_on_writer && pl_pend_len != 0) {
      /* The writer fills buffers too (draining every ring at once can
       * take more than one): waiting for the writer would wait for
       * itself, so it writes the handed-over buffer here. */
      pl_write_buf(pl_buf == pl_bufs[0] ? pl_bufs[1] : pl_bufs[0], pl_pend_len);
      pl_pend_len = 0;
      pthread_cond_broadcast(&pl_free_cv);
    }
    while (pl_pend_len != 0) pthread_cond_wait(&pl_free_cv, &pl_trace_lock);
    if (pl_buf_len == 0 || !pl_opened) return;
    pl_pend_len = pl_buf_len;
    pl_buf = pl_buf == pl_bufs[0] ? pl_bufs[1] : pl_bufs[0];
    pl_buf_len = 0;
    pthread_cond_signal(&pl_work_cv);
    return;
  }
  if (pl_buf_len == 0 || !pl_opened) return;
  pl_write_buf(pl_buf, pl_buf_len);
  pl_buf_len = 0;
  pl_last_flush = pl_now_ns();
}

/* Log lines withheld from a stderr the program replaced (logline.c): said
 * once, as a NOTE, so the report tells why the log went quiet (lock held,
 * file open).  The writer looks once a second, the exit path last. */
static void pl_withheld_note_locked(void) {
  if (!pl_opened || atomic_load(&pl_stopped)) return;
  char text[640];
  if (!pl_log_withheld_take(text, sizeof text)) return;
  char rec[sizeof(pagelock_rec_note) + sizeof text + 8];
  size_t tl = strlen(text);
  size_t size = (sizeof(pagelock_rec_note) + tl + 1 + 7) & ~(size_t)7;
  memset(rec, 0, size);
  pagelock_rec_note *n = (pagelock_rec_note *)rec;
  n->h.type = PAGELOCK_REC_NOTE;
  n->h.size = (uint32_t)size;
  n->kind = PAGELOCK_NOTE_WARNING;
  memcpy(rec + sizeof *n, text, tl);
  pl_buf_put(rec, size);
}

/* The writer thread: writes each handed-over buffer with the lock
 * released, and hands over the filling buffer itself once it is a second
 * old, so a program that stops copying still streams its trace. */
static void *pl_writer_main(void *arg) {
  (void)arg;
  pl_shim_own_thread();
  pl_on_writer = true;
  pthread_mutex_lock(&pl_trace_lock);
  for (;;) {
    if (pl_writer_quit && pl_pend_len == 0) break;
    if (pl_pend_len == 0) {
      struct timespec dl;
      clock_gettime(CLOCK_MONOTONIC, &dl);
      dl.tv_sec += 1;
      pthread_cond_timedwait(&pl_work_cv, &pl_trace_lock, &dl);
      pl_withheld_note_locked();
      if (pl_pend_len == 0 && pl_now_ns() - pl_last_flush >= PL_FLUSH_NS) {
        pl_rings_drain_locked();
        if (pl_buf_len > 0)
          pl_flush_locked();
        else
          pl_last_flush = pl_now_ns();
      }
      if (pl_pend_len == 0) continue;
    }
    const char *b = pl_buf == pl_bufs[0] ? pl_bufs[1] : pl_bufs[0];
    size_t n = pl_pend_len;
    pthread_mutex_unlock(&pl_trace_lock);
    pl_write_buf(b, n);
    pthread_mutex_lock(&pl_trace_lock);
    pl_pend_len = 0;
    pl_last_flush = pl_now_ns();
    pthread_cond_broadcast(&pl_free_cv);
  }
  pl_writer_on = false;
  pthread_cond_broadcast(&pl_free_cv);
  pthread_mutex_unlock(&pl_trace_lock);
  return NULL;
}

/* Start the writer (lock held, trace file just opened).  Its signals are
 * blocked, so the program's signals still go to the program's threads;
 * the shim's hooks pass its start-up allocations through.  On failure the
 * filling threads write, as they did before there was a writer. */
static void pl_writer_start(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&pl_work_cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&pl_free_cv, NULL);
  sigset_t all, old;
  sigfillset(&all);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 64u << 10);
  pl_shim_enter();
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&t, &a, pl_writer_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0) pthread_setname_np(t, "pagelock-trace"); /* what top and gdb show */
  pl_shim_leave();
  pthread_attr_destroy(&a);
  pl_writer_on = rc == 0;
}

static void pl_buf_put(const void *p, size_t n) {
  if (pl_buf_len + n > PL_TRACE_BUF) pl_flush_locked();
  if (n > PL_TRACE_BUF) {
    pl_dropped++;
    return;
  }
  memcpy(pl_buf + pl_buf_len, p, n);
  pl_buf_len += n;
  pl_records++;
}

/* Move ring r's records to the shared buffer (lock held).  The owner may
 * be writing meanwhile: only records it has published are taken.  They go
 * in runs, as many as reach the ring's end or fill the buffer, one copy
 * each: the ring's owner drains it when full, on the copy path, where
 * draining a record at a time cost 0.008 of a 256-byte pageable copy's
 * time on an H200 host (docs/bench/2026-11-27-small-copy-path-trimmed.md); runs take half the
 * instructions. */
static void pl_ring_drain_locked(pl_ring *r) {
  const size_t rec = sizeof r->rec[0];
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
  if (t == h) return;
  if (!pl_open_locked()) {
    pl_dropped += h - t;
  } else {
    while (t < h) {
      if (pl_buf_len + rec > PL_TRACE_BUF) pl_flush_locked();
      uint64_t room = (PL_TRACE_BUF - pl_buf_len) / rec, wrap = PL_RING_RECS - t % PL_RING_RECS;
      uint64_t k = h - t < wrap ? h - t : wrap;
      if (k > room) k = room;
      if (k == 0) { /* no buffer came free: what is left is lost, and counted */
        pl_dropped += h - t;
        break;
      }
      memcpy(pl_buf + pl_buf_len, &r->rec[t % PL_RING_RECS], k * rec);
      pl_buf_len += k * rec;
      pl_records += k;
      t += k;
    }
  }
  atomic_store_explicit(&r->tail, h, memory_order_release);
}

/* What ring r's runs gathered that no record holds yet (lock held): an
 * idle thread's run reaches the file within a second, as its ring does. */
static void pl_runs_take_locked(pl_ring *r) {
  uint64_t now = 0;
  for (int i = 0; i < PL_RUN_SLOTS; i++) {
    pagelock_rec_copy rec;
    if (!(atomic_load_explicit(&r->runs[i].state, memory_order_relaxed) & PL_RUN_OPEN)) continue;
    if (now == 0) now = pl_now_ns();
    if (!pl_run_take(&r->runs[i], now, &rec)) continue;
    if (pl_open_locked())
      pl_buf_put(&rec, sizeof rec);
    else
      pl_dropped++; /* as the ring's records are, once the trace stopped */
  }
}

static void pl_rings_drain_locked(void) {
  for (unsigned i = 0; i < pl_rings_used; i++) {
    pl_ring_drain_locked(&pl_rings[i]);
    pl_runs_take_locked(&pl_rings[i]);
  }
}

/* A thread ends: its ring's records go on, and the ring is free again.
 * (A pointer from before a fork is stale: the child emptied every ring.) */
static void pl_ring_release(void *arg) {
  pl_ring *r = arg;
  if (r != pl_my_ring || pl_my_epoch != atomic_load(&pl_ring_epoch)) return;
  pl_shim_enter();
  /* The runs are closed under the lock: the exit path drains under it
   * too, and a run closed before it but written after would be lost to a
   * process ending meanwhile.  (No drainer holds a run while we hold the
   * lock, so closing never waits.) */
  pthread_mutex_lock(&pl_trace_lock);
  pl_ring_drain_locked(r);
  for (int i = 0; i < PL_RUN_SLOTS; i++) {
    pagelock_rec_copy rec;
    if (!pl_run_close(&r->runs[i], &rec)) continue;
    if (pl_open_locked())
      pl_buf_put(&rec, sizeof rec);
    else
      pl_dropped++;
  }
  pl_my_runs = NULL;
  r->owned = false;
  pthread_mutex_unlock(&pl_trace_lock);
  pl_my_ring = NULL;
  pl_shim_leave();
}

static void pl_ring_key_init(void) {
  if (pthread_key_create(&pl_ring_key, pl_ring_release) != 0) pl_rings_max = 0;
}

/* Give this thread a ring, or mark it as writing to the shared buffer when
 * none is free.  Once per thread (and after a fork).  The file is opened
 * here, as the first record of any kind opens it, so the writer runs from
 * the first copy on; without a writer nothing would drain a ring while its
 * thread lives, so then no thread gets one. */
static void pl_ring_acquire(void) {
  pthread_once(&pl_ring_once, pl_ring_key_init);
  unsigned epoch = atomic_load(&pl_ring_epoch);
  pl_ring *r = NULL;
  pthread_mutex_lock(&pl_trace_lock);
  unsigned max = pl_open_locked() && pl_writer_on ? pl_rings_max : 0;
  for (unsigned i = 0; i < max && r == NULL; i++) {
    if (pl_rings[i].owned) continue;
    r = &pl_rings[i];
    pl_ring_drain_locked(r); /* empty already, unless its thread died unseen */
    pl_runs_take_locked(r);
    for (int k = 0; k < PL_RUN_SLOTS; k++) pl_run_forget(&r->runs[k]);
    r->owned = true;
    if (i >= pl_rings_used) pl_rings_used = i + 1;
  }
  pthread_mutex_unlock(&pl_trace_lock);
  pl_my_ring = r;
  /* Runs only where the option merges repeats: the copy path then asks
   * nothing else. */
  pl_my_runs = r && pl_opt_long(PL_OPT_REPEATS) == 0 ? r->runs : NULL;
  pl_my_epoch = epoch; /* tried in this epoch: with no ring, no retry */
  if (r) {
    pl_my_head = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* A failed setspecific only means the ring is drained at exit rather
     * than when the thread ends. */
    pthread_setspecific(pl_ring_key, r);
  }
}

pagelock_rec_copy *pl_trace_copy_begin(void) {
  if (!pl_active()) return NULL;
  if (PL_UNLIKELY(pl_my_epoch != atomic_load_explicit(&pl_ring_epoch, memory_order_relaxed)))
    pl_ring_acquire();
  pl_ring *r = pl_my_ring;
  if (PL_UNLIKELY(r == NULL)) {
    pl_my_shared = true;
    return pl_trace_reserve(sizeof(pagelock_rec_copy));
  }
  pl_my_shared = false;
  uint64_t h = pl_my_head;
  if (PL_UNLIKELY(h - atomic_load_explicit(&r->tail, memory_order_acquire) >= PL_RING_RECS)) {
    pthread_mutex_lock(&pl_trace_lock);
    pl_ring_drain_locked(r);
    pthread_mutex_unlock(&pl_trace_lock);
  }
  return &r->rec[h % PL_RING_RECS];
}

void pl_trace_copy_end(void) {
  if (pl_my_shared) {
    pl_trace_commit();
    return;
  }
  atomic_store_explicit(&pl_my_ring->head, ++pl_my_head, memory_order_release);
}

void pl_trace_copy_put(const pagelock_rec_copy *rec) {
  pagelock_rec_copy *slot = pl_trace_copy_begin();
  if (slot == NULL) return;
  *slot = *rec;
  pl_trace_copy_end();
}

void *pl_trace_reserve(size_t size) {
  if (!pl_active()) return NULL;
  pthread_mutex_lock(&pl_trace_lock);
  if (!pl_open_locked() || size > PL_TRACE_BUF) {
    if (pl_opened) pl_dropped++;
    pthread_mutex_unlock(&pl_trace_lock);
    return NULL;
  }
  if (pl_buf_len + size > PL_TRACE_BUF) pl_flush_locked();
  void *p = pl_buf + pl_buf_len;
  pl_buf_len += size;
  pl_records++;
  return p;
}

void pl_trace_commit(void) {
  /* The writer flushes by the clock.  Without one, the clock is read every
   * 64 records: a periodic flush needs no finer grain. */
  if (!pl_writer_on && (pl_records & 63) == 0 && pl_now_ns() - pl_last_flush > PL_FLUSH_NS)
    pl_flush_locked();
  pthread_mutex_unlock(&pl_trace_lock);
}

void pl_trace_write(const void *rec, size_t size) {
  void *p = pl_trace_reserve(size);
  if (p == NULL) return;
  memcpy(p, rec, size);
  pl_trace_commit();
}

void pl_trace_write_many(const void *recs, size_t size) {
  if (!pl_active()) return;
  const char *p = recs;
  pthread_mutex_lock(&pl_trace_lock);
  if (pl_open_locked()) {
    /* Record by record, so the count stays exact and a full buffer is
     * flushed on a record boundary. */
    for (size_t off = 0; off + sizeof(pagelock_rec_hdr) <= size;) {
      const pagelock_rec_hdr *h = (const pagelock_rec_hdr *)(p + off);
      if (h->size < sizeof *h || h->size > size - off) break;
      pl_buf_put(p + off, h->size);
      off += h->size;
    }
    if (!pl_writer_on && pl_now_ns() - pl_last_flush > PL_FLUSH_NS) pl_flush_locked();
  }
  pthread_mutex_unlock(&pl_trace_lock);
}

void pl_trace_write_str(const void *fixed, size_t fixed_size, uint32_t type, const char *str) {
  char rec[4096];
  size_t sl = strnlen(str, sizeof rec - fixed_size - 8);
  size_t size = (fixed_size + sl + 1 + 7) & ~(size_t)7;
  memset(rec, 0, size);
  memcpy(rec, fixed, fixed_size);
  memcpy(rec + fixed_size, str, sl);
  pagelock_rec_hdr *h = (pagelock_rec_hdr *)rec;
  h->type = type;
  h->size = (uint32_t)size;
  pl_trace_write(rec, size);
}

void pl_trace_note(uint32_t kind, const char *text) {
  pagelock_rec_note n;
  memset(&n, 0, sizeof n);
  n.kind = kind;
  pl_trace_write_str(&n, sizeof n, PAGELOCK_REC_NOTE, text);
}

/* One MODULE record per loaded object, with its executable extent, so the
 * reporter can turn addresses into module + offset after the process is
 * gone. */
static int pl_module_cb(struct dl_phdr_info *info, size_t sz, void *arg) {
  (void)sz;
  (void)arg;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uint64_t s = info->dlpi_addr + ph->p_vaddr;
    if (s < lo) lo = s;
    if (s + ph->p_memsz > hi) hi = s + ph->p_memsz;
  }
  if (hi == 0) return 0;
  pagelock_rec_module m;
  memset(&m, 0, sizeof m);
  m.base = info->dlpi_addr;
  m.start = lo;
  m.end = hi;
  pl_trace_write_str(&m, sizeof m, PAGELOCK_REC_MODULE, info->dlpi_name ? info->dlpi_name : "");
  return 0;
}

bool pl_trace_finish_begin(void) {
  pthread_mutex_lock(&pl_trace_lock);
  pl_rings_drain_locked(); /* (this opens the file when they hold records) */
  bool open = pl_opened && !atomic_load(&pl_stopped);
  pthread_mutex_unlock(&pl_trace_lock);
  if (!open) return false; /* nothing was traced (no file), or the trace stopped */
  dl_iterate_phdr(pl_module_cb, NULL);
  return true;
}

void pl_trace_finish_end(void) {
  pthread_mutex_lock(&pl_trace_lock);
  pl_rings_drain_locked(); /* what was copied meanwhile */
  pl_withheld_note_locked();
  pagelock_rec_end e;
  memset(&e, 0, sizeof e);
  e.h.type = PAGELOCK_REC_END;
  e.h.size = sizeof e;
  e.end_mono_ns = pl_now_ns();
  e.records = pl_records;
  e.dropped = pl_dropped;
  pl_buf_put(&e, sizeof e);
  pl_flush_locked();
  /* Everything is in the file when the process goes on to exit. */
  while (pl_pend_len != 0) pthread_cond_wait(&pl_free_cv, &pl_trace_lock);
  pthread_mutex_unlock(&pl_trace_lock);
}

/* The descriptor's lock too, so that a child never sees the trace halfway
 * through moving to another number. */
void pl_trace_atfork_prepare(void) {
  pthread_mutex_lock(&pl_trace_lock);
  pthread_mutex_lock(&pl_fd_lock);
}
void pl_trace_atfork_parent(void) {
  pthread_mutex_unlock(&pl_fd_lock);
  pthread_mutex_unlock(&pl_trace_lock);
}

void pl_trace_atfork_child(void) {
  /* The parent's buffered records are the parent's to write; the child
   * starts its own file (with its own pid) on its first record.  Its copy
   * of the parent's descriptor goes (the number first, so that the
   * program's close finds nothing of the trace's), unless the number holds
   * something else. */
  pthread_mutex_init(&pl_trace_lock, NULL);
  pthread_mutex_init(&pl_fd_lock, NULL);
  int fd = pl_fd;
  pl_fd_forget();
  if (fd >= 0 && pl_fd_is_file(fd)) pl_own_close(fd);
  pl_opened = false;
  pl_file_off = 0;
  atomic_store(&pl_stopped, false);
  pl_failed = false;
  /* The writer thread is the parent's: the child starts its own with its
   * file, and whatever the parent had handed over is the parent's. */
  pl_writer_on = false;
  pl_buf = pl_bufs[0];
  pl_buf_len = pl_pend_len = 0;
  /* The rings hold the parent's records, and all but this thread's belong
   * to threads the child does not have. */
  for (unsigned i = 0; i < pl_rings_used; i++) {
    atomic_store(&pl_rings[i].head, 0);
    atomic_store(&pl_rings[i].tail, 0);
    for (int k = 0; k < PL_RUN_SLOTS; k++) pl_run_forget(&pl_rings[i].runs[k]);
    pl_rings[i].owned = false;
  }
  pl_my_runs = NULL;
  pl_rings_used = 0;
  atomic_fetch_add(&pl_ring_epoch, 1);
  pl_records = pl_dropped = 0;
  pl_path[0] = 0;
  pl_start_mono = pl_now_ns();
}

void pl_trace_reset_for_test(void) {
  pthread_mutex_lock(&pl_trace_lock);
  if (pl_writer_on) {
    pl_writer_quit = true;
    pthread_cond_signal(&pl_work_cv);
    while (pl_writer_on) pthread_cond_wait(&pl_free_cv, &pl_trace_lock);
    pl_writer_quit = false;
  }
  pthread_mutex_unlock(&pl_trace_lock);
  pl_trace_atfork_child();
}

void pl_trace_drain_for_test(void) {
  pthread_mutex_lock(&pl_trace_lock);
  pl_rings_drain_locked();
  pthread_mutex_unlock(&pl_trace_lock);
}

void pl_trace_rings_for_test(unsigned n) {
  pthread_mutex_lock(&pl_trace_lock);
  pl_rings_max = n < PL_RINGS ? n : PL_RINGS;
  pthread_mutex_unlock(&pl_trace_lock);
}

bool pl_trace_writer_running(void) {
  pthread_mutex_lock(&pl_trace_lock);
  bool on = pl_writer_on;
  pthread_mutex_unlock(&pl_trace_lock);
  return on;
}

void pl_trace_init_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  pl_start_real = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  pl_start_mono = pl_last_flush = pl_now_ns();
}
