/* stack.c - call stacks of interesting copies and allocations, interned.
 *
 * Capturing only interns; a stack is written (once, as a STACK record) when
 * a record first refers to it, so allocation sites captured in a program
 * that never copies leave no trace file.  Then it is referred to by id, so
 * a loop of a million copies costs a million small records, not a million
 * stacks.  The table is fixed-size static memory: no allocation on the copy
 * path, and a full table degrades to "no stack" (logged once).
 *
 * Interning takes no lock.  It runs inside the malloc and mmap hooks, and
 * an mmap hook may be entered by an allocator (jemalloc, tcmalloc,
 * mimalloc) that holds its own mutex: a lock here that is ever held across
 * anything that can allocate (writing the trace, for one) would close a
 * cycle through that mutex.  Only writing STACK records takes a lock, and
 * that never happens inside an allocation hook. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

#include "pl_internal.h"
#include "stack.h"
#include "pystack.h"
#include "trace.h"

/* A stack's id is its slot in a dense table, handed out in order and
 * filled before it is published (ready, release), so memory grows with
 * the stacks seen (~260 bytes each), not with the table: a Python program
 * has a stack per line that allocates, thousands before its first copy.
 * An index by hash (twice as many entries, so probes stay short) finds
 * them.  Two threads interning one new stack at once may each fill a
 * slot; one is indexed, the other id still names the stack (the report
 * merges the two: it keys its rows by the frame it shows). */
#define PL_STACK_SLOTS 32768 /* ids 1..PL_STACK_SLOTS-1 */
#define PL_STACK_INDEX (2 * PL_STACK_SLOTS)

typedef struct pl_stack_slot {
  _Atomic uint32_t ready;
  uint32_t id, depth;
  uint64_t hash;
  bool emitted; /* its STACK record is in the trace (under pl_emit_lock) */
  void *frames[PAGELOCK_MAX_FRAMES];
  /* Where frame i's return address lay when the stack was first seen, in
   * words above the hook's stack pointer (0: not known): what the memo
   * reads again (pl_frames_hold).  Frame 0's is never read. */
  uint16_t at[PAGELOCK_MAX_FRAMES];
  pl_pystack py; /* the Python frames of the call, depth 0 none */
} pl_stack_slot;

static pl_stack_slot pl_stacks[PL_STACK_SLOTS];         /* by id */
static _Atomic uint32_t pl_stack_index[PL_STACK_INDEX]; /* ids, 0 empty */
static atomic_uint pl_stack_count = 1;                  /* the next id */
static atomic_ulong pl_stack_lost;                      /* captures the full table turned away */
/* Orders STACK records (and the note below) before any record naming
 * them; held across pl_trace_write, so never taken inside an allocation
 * hook (pl_stack_emit runs on the copy path and at exit only). */
static pthread_mutex_t pl_emit_lock = PTHREAD_MUTEX_INITIALIZER;

/* A NOTE written just before the first STACK record of each trace. */
static char pl_note_text[512];
static uint32_t pl_note_kind;
static atomic_bool pl_note_set;
static bool pl_note_written; /* under pl_emit_lock */

static uint64_t pl_hash_frames(void *const *f, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) {
    h ^= (uint64_t)(uintptr_t)f[i];
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return h;
}

/* Per-thread memo of recent stacks, keyed by the hooked call's return
 * address and the caller's stack pointer.  Unwinding costs ~250 ns a frame;
 * a loop that copies or allocates from one place reaches the hook with the
 * same return address at the same stack depth every time, so the key tells
 * a repeat without unwinding.  Not the call path, though: cudaMemcpy from
 * two lines of main, or one helper called from two functions at one depth,
 * reaches the hook with the same return address and stack pointer on both
 * paths.  So a hit also reads the frames above again, where the unwinder
 * found their return addresses (the stack's `at`), and compares them with
 * the stack's frames: a few loads instead of an unwind.  Two ways: the two
 * paths of such a pair each keep their entry.
 *
 * Those reads must never fault, so an entry is made only where every one
 * of them lies in this thread's own stack (pl_own_lo..pl_own_hi below),
 * which stays mapped as long as the thread runs.  A stack that is not the
 * thread's own (a coroutine's, a signal stack) may be unmapped and another
 * placed at the same address, smaller: the same stack pointer would then
 * send the reads past its end.  Copies there are unwound every time. */
#define PL_MEMO 16
typedef struct pl_stack_memo {
  uintptr_t ra, sp;
  uint64_t py; /* a one-frame site's (sp 1): pl_py_hash of its Python frames */
  const pl_stack_slot *s;
} pl_stack_memo;
static PL_TLS pl_stack_memo pl_memo[PL_MEMO];

/* What the captures cost the program's threads (the COST record). */
static atomic_uint_fast64_t pl_n_captures, pl_capture_ns, pl_n_unwinds, pl_unwind_ns;

/* Spans in pl_span_now's unit (TSC ticks, mostly), turned into ns when
 * the record is written: two rdtsc a capture. */
static inline void pl_cost_add(atomic_uint_fast64_t *n, atomic_uint_fast64_t *span, uint64_t t0) {
  atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(span, pl_span_now() - t0, memory_order_relaxed);
}

static unsigned pl_memo_index(uintptr_t r, uintptr_t p) {
  return (unsigned)(((r >> 4) ^ (p >> 4) ^ (p >> 12)) & (PL_MEMO - 1));
}

/* ---- this thread's own stack -------------------------------------------- */

/* [pl_own_lo, pl_own_hi): where this thread's own stack lies, found once
 * per thread, on its second unwind (a thread that copies once pays
 * nothing).  Until then, or where it is not found, pl_own_hi is one of
 * the values below, and no stack pointer lies under it: no memo, no run
 * (every copy is unwound and takes the whole way: correct, slower).  A
 * forked child's thread runs on the stack its parent's did: the bounds
 * hold there too. */
enum { PL_OWN_UNSEEN = 0, PL_OWN_NONE = 1, PL_OWN_ONCE = 2 /* one unwind so far */ };
static PL_TLS uintptr_t pl_own_lo, pl_own_hi;

/* The main thread's stack: below __libc_stack_end (ld.so's, the stack
 * pointer at entry), as far as the stack limit goes, and never more than
 * 128 MiB.  The kernel places the base of mmap at least RLIMIT_STACK (as
 * it was at exec) below the stack's top, and never less than 128 MiB (its
 * mmap_base(): the limit plus the guard gap and the stack's random pad,
 * clamped), so no mapping but the stack's own (and MAP_FIXED ones) lies
 * there, even where the program raised the limit after exec and the shim
 * came later (dlopened); with no limit mmap grows up from a third of the
 * address space instead.  The stack's mapping reaches from its lowest page
 * ever touched to its top, so everything between a stack pointer there and
 * __libc_stack_end is mapped. */
extern void *__libc_stack_end;
#define PL_MAIN_STACK_UNLIMITED (8u << 20)
#define PL_MAIN_STACK_MAX (UINT64_C(128) << 20)
static uintptr_t pl_main_span; /* 0 until pl_stack_init: no memo on the main thread */
static uintptr_t pl_main_tp;   /* the main thread's pthread_self(), 0 unknown */

void pl_stack_init(void) {
  /* The constructor runs on the main thread when the shim is preloaded,
   * and may not when it is dlopened (CUDA_INJECTION64_PATH). */
  if (syscall(SYS_gettid) == getpid()) pl_main_tp = (uintptr_t)pthread_self();
  struct rlimit rl;
  uint64_t span = PL_MAIN_STACK_MAX;
  if (getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    span = PL_MAIN_STACK_UNLIMITED;
  else if (rl.rlim_cur < span)
    span = rl.rlim_cur;
  pl_main_span = (uintptr_t)span;
}

static int pl_hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* The line of /proc/self/maps that holds address a, as [*lo, *hi), and
 * whether the line before it is an inaccessible mapping that ends where it
 * begins (a guard page).  Raw system calls and a buffer on the stack: no
 * allocation, no lock, none of the shim's hooks.  Lines go by address, so
 * the read stops at the first one past a. */
static bool pl_maps_find(uintptr_t a, uintptr_t *lo, uintptr_t *hi, bool *guarded) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  /* Per line: start, end, then the permissions (field 2, "---p" for a
   * guard); the rest of the line is skipped. */
  uintptr_t v[2] = {0, 0}, prev_end = 0;
  bool prev_none = false, none = true, found = false, done = false;
  int field = 0, perm = 0;
  while (!done) {
    ssize_t n = syscall(SYS_read, fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && !done; i++) {
      char c = buf[i];
      if (c == '\n') {
        if (field >= 2) {
          prev_end = v[1];
          prev_none = none;
        }
        v[0] = v[1] = 0;
        field = perm = 0;
        none = true;
        continue;
      }
      if (field < 2) {
        int d = pl_hex(c);
        if (d >= 0) {
          v[field] = v[field] << 4 | (uintptr_t)d;
        } else if (c == '-' && field == 0) {
          field = 1;
        } else if (field == 1) {
          if (v[0] > a) {
            done = true;
          } else if (a < v[1]) {
            *lo = v[0];
            *hi = v[1];
            found = done = true;
            /* The guard is decided below, from the line before. */
          }
          field = 2;
        } else {
          field = 3; /* not a line of maps: skip it */
        }
      } else if (field == 2 && c != ' ') {
        if (perm < 3 && c != '-') none = false;
        if (++perm == 4) field = 3;
      }
    }
  }
  syscall(SYS_close, fd);
  if (found) *guarded = prev_none && prev_end == *lo;
  return found;
}

/* Find this thread's own stack (pl_own_lo, pl_own_hi).  Another thread's
 * stack is the block glibc (or the program, pthread_attr_setstack) gave it,
 * which holds the thread's descriptor at its top (pthread_self()): the
 * mapping that holds the descriptor is the stack, whatever stack the
 * thread runs on when this is asked, and up to the descriptor it is the
 * thread's alone.  Its lower end is the stack's only where a guard page
 * below separates it from the next mapping: the kernel merges adjacent
 * mappings of the same kind, and a coroutine's stack mapped right below a
 * stack with no guard (one the program allocated, a guard size of 0,
 * guard pages kept inside the mapping) would pass for part of it.  No
 * guard below: not found. */
static void pl_own_find(void) {
  /* Inside a hook: a failed open or read must not reach the program's
   * errno (no descriptor left, no /proc). */
  int saved = errno;
  uintptr_t tp = (uintptr_t)pthread_self(), lo = 0, hi = 1;
  bool main = pl_main_tp ? tp == pl_main_tp : pl_gettid() == (uint32_t)getpid();
  if (main) {
    uintptr_t end = (uintptr_t)__libc_stack_end;
    if (pl_main_span != 0 && end > pl_main_span) {
      lo = end - pl_main_span;
      hi = end;
    }
  } else {
    uintptr_t vlo, vhi;
    bool guarded;
    if (pl_maps_find(tp, &vlo, &vhi, &guarded) && guarded) {
      lo = vlo;
      hi = tp;
    }
  }
  pl_own_lo = lo;
  pl_own_hi = hi > lo && hi > PL_OWN_ONCE ? hi : PL_OWN_NONE;
  errno = saved;
}

/* Whether the frames w[1..n) at stack pointer p can be read again from
 * this thread, every one inside its own stack. */
static bool pl_own_holds(const uint16_t *w, int n, uintptr_t p) {
  if (pl_own_hi <= PL_OWN_ONCE || p < pl_own_lo || p >= pl_own_hi) return false;
  uint32_t far = 0;
  for (int i = 1; i < n; i++) {
    if (w[i] == 0) return false;
    if (w[i] > far) far = w[i];
  }
  return p + 8u * far + sizeof(uintptr_t) <= pl_own_hi;
}

/* Whether the frames above the hook at stack pointer p are still those of
 * stack s (an entry's: pl_own_holds was true of them). */
static inline bool pl_frames_hold(const pl_stack_slot *s, uintptr_t p) {
  uintptr_t diff = 0;
  for (uint32_t i = 1; i < s->depth; i++)
    diff |= *(const uintptr_t *)(p + 8u * s->at[i]) ^ (uintptr_t)s->frames[i];
  return diff == 0;
}

/* What tells the call path f[0..n) at stack pointer p again (a run's). */
static void pl_check_fill(pl_stack_check *k, const uint16_t *w, void *const *f, int n,
                          uintptr_t p) {
  pl_stack_check_empty(k);
  for (int i = 1; i < n; i++) {
    k->f[i - 1].at = (const uintptr_t *)(p + 8u * w[i]);
    k->f[i - 1].val = (uintptr_t)f[i];
  }
  k->n = (uint32_t)(n > 1 ? n - 1 : 0);
}

/* ---- unwinding ---------------------------------------------------------- */

/* One unwind: the return addresses of the frames kept, and for each the
 * stack address it was read from (0: unknown). */
typedef struct pl_unwind {
  void **ip;
  uintptr_t *at;
  int max, n;
} pl_unwind;

static _Unwind_Reason_Code pl_unwind_frame(struct _Unwind_Context *ctx, void *arg) {
  pl_unwind *u = arg;
  uintptr_t ip = (uintptr_t)_Unwind_GetIP(ctx), cfa = (uintptr_t)_Unwind_GetCFA(ctx);
  if (ip == 0 || u->n >= u->max) return _URC_END_OF_STACK;
  /* The context's CFA is that of the call that returns to ip, and the
   * call left ip in the word just below it (x86-64): the unwinder read it
   * there.  Where it is not there (a signal frame, another architecture)
   * the frame cannot be read again. */
  uintptr_t at = cfa ? cfa - sizeof(uintptr_t) : 0;
  u->ip[u->n] = (void *)ip;
  u->at[u->n] = at && *(const uintptr_t *)at == ip ? at : 0;
  u->n++;
  return _URC_NO_REASON;
}

/* The frames from the hooked call's return address ra on (else from
 * `skip` frames above this function's caller), at most depth of them,
 * into ip[] and at[]; their count.  Starting at ra does not depend on
 * which of the shim's functions the compiler inlined. */
__attribute__((noinline)) static int pl_unwind_from(const void *ra, int skip, int depth, void **ip,
                                                    uintptr_t *at) {
  void *f[PAGELOCK_MAX_FRAMES + 16];
  uintptr_t a[PAGELOCK_MAX_FRAMES + 16];
  if (skip > 12) skip = 12;
  pl_unwind u = {.ip = f, .at = a, .max = depth + skip + 4};
  _Unwind_Backtrace(pl_unwind_frame, &u);
  int start = skip + 1; /* this function's own frame, then skip */
  for (int i = 0; ra != NULL && i < u.n; i++)
    if (f[i] == ra) {
      start = i;
      break;
    }
  int n = u.n - start;
  if (n > depth) n = depth;
  if (n <= 0) return 0;
  memcpy(ip, f + start, sizeof(void *) * (size_t)n);
  memcpy(at, a + start, sizeof(uintptr_t) * (size_t)n);
  return n;
}

static _Unwind_Reason_Code pl_signal_frame_cb(struct _Unwind_Context *ctx, void *arg) {
  int *left = arg, before = 0;
  if (_Unwind_GetIPInfo(ctx, &before) == 0 || --*left <= 0) return _URC_END_OF_STACK;
  /* The unwinder marks the frame the kernel built for a handler. */
  if (before) {
    *left = -1;
    return _URC_END_OF_STACK;
  }
  return _URC_NO_REASON;
}

bool pl_stack_in_handler(void) {
  int left = 128;
  _Unwind_Backtrace(pl_signal_frame_cb, &left);
  return left < 0;
}

static bool pl_py_same(const pl_pystack *a, const pl_pystack *b) {
  return a->depth == b->depth && a->flags == b->flags &&
         memcmp(a->f, b->f, a->depth * sizeof a->f[0]) == 0;
}

/* The id of stack f[0..n) with Python frames py, interning it when new
 * (its frames found at w[], NULL: not known), and its slot in *slot; 0
 * when the table is full.  Loads, stores and compare-and-swaps only. */
static uint32_t pl_stack_intern(void *const *f, int n, const pl_pystack *py, const uint16_t *w,
                                const pl_stack_slot **slot) {
  uint64_t h = pl_hash_frames(f, n) ^ pl_py_hash(py);
  uint32_t mine = 0; /* the slot this call filled, not yet indexed */
  for (uint32_t i = 0; i < 4096; i++) {
    _Atomic uint32_t *e = &pl_stack_index[(h + i) & (PL_STACK_INDEX - 1)];
    uint32_t id = atomic_load_explicit(e, memory_order_acquire);
    if (id == 0) {
      if (mine == 0) {
        /* Checked first, so the count stops near the bound. */
        if (atomic_load_explicit(&pl_stack_count, memory_order_relaxed) >= PL_STACK_SLOTS ||
            (mine = atomic_fetch_add(&pl_stack_count, 1)) >= PL_STACK_SLOTS)
          break;
        pl_stack_slot *s = &pl_stacks[mine];
        s->hash = h;
        s->depth = (uint32_t)n;
        memcpy(s->frames, f, sizeof(void *) * (size_t)n);
        memset(s->at, 0, sizeof s->at);
        if (w) memcpy(s->at, w, sizeof(uint16_t) * (size_t)n);
        s->py = *py;
        s->id = mine;
        s->emitted = false;
        atomic_store_explicit(&s->ready, 1, memory_order_release);
      }
      uint32_t expect = 0;
      if (atomic_compare_exchange_strong_explicit(e, &expect, mine, memory_order_acq_rel,
                                                  memory_order_acquire)) {
        *slot = &pl_stacks[mine];
        return mine;
      }
      id = expect; /* another thread's, just indexed */
    }
    const pl_stack_slot *s = &pl_stacks[id];
    if (s->hash == h && s->depth == (uint32_t)n &&
        memcmp(s->frames, f, sizeof(void *) * (size_t)n) == 0 && pl_py_same(&s->py, py)) {
      *slot = s;
      return id; /* a slot this call filled meanwhile stays unused */
    }
  }
  if (mine != 0 && mine < PL_STACK_SLOTS) {
    *slot = &pl_stacks[mine]; /* not indexed, still this stack's */
    return mine;
  }
  atomic_fetch_add_explicit(&pl_stack_lost, 1, memory_order_relaxed);
  pl_log(PL_LOG_WARN, PL_LK_STACK_TABLE_FULL,
         "too many distinct call stacks (%u); later copies and allocations have no call site",
         (unsigned)PL_STACK_SLOTS - 1);
  return 0;
}

/* In a Python program the same native path (ctypes, libtorch) serves
 * every line of the script, at the same stack depth: the walk (pystack.c)
 * runs on every call, and the memo, keyed by the native path alone,
 * spares the unwind once that path was seen from any line.  A hit from
 * another line interns the memo's native frames with this call's Python
 * frames (a lookup, or a new stack) and keeps that one.  Keyed by the
 * Python frames too, 20 lines copying in turn through ctypes evicted each
 * other from the 16 entries: 69 of their 100 copies were unwound (preload
 * case site_cost_lines). */
static PL_ALWAYS_INLINE uint32_t pl_capture_at(int depth, int skip, const void *ra, const void *sp,
                                               pl_stack_check *check) {
  pl_pystack py;
  pl_py_capture(&py);
  uintptr_t r = (uintptr_t)ra, p = (uintptr_t)sp;
  unsigned i = pl_memo_index(r, p);
  for (unsigned k = 0; k < 2; k++) {
    pl_stack_memo *m = &pl_memo[i ^ k];
    if (m->ra != r || m->sp != p || m->s == NULL || !pl_frames_hold(m->s, p)) continue;
    const pl_stack_slot *s = m->s;
    if (!pl_py_same(&s->py, &py)) {
      const pl_stack_slot *t = NULL;
      if (pl_stack_intern(s->frames, (int)s->depth, &py, s->at, &t) == 0) return 0;
      /* Where t was first seen is where this call keeps its frames (they
       * hold here): else it is not a stack the memo may answer with. */
      if (memcmp(t->at + 1, s->at + 1, sizeof(uint16_t) * (s->depth - 1)) != 0) {
        if (check) pl_check_fill(check, s->at, s->frames, (int)s->depth, p);
        return t->id;
      }
      m->s = s = t;
    }
    if (check) pl_check_fill(check, s->at, s->frames, (int)s->depth, p);
    return s->id;
  }
  void *f[PAGELOCK_MAX_FRAMES];
  uintptr_t at[PAGELOCK_MAX_FRAMES];
  uint64_t t0 = pl_span_now();
  int n = pl_unwind_from(ra, skip, depth, f, at);
  pl_cost_add(&pl_n_unwinds, &pl_unwind_ns, t0);
  if (n <= 0) return 0;
  /* Where this unwind found the frames, in words above p. */
  uint16_t w[PAGELOCK_MAX_FRAMES];
  for (int k = 0; k < n; k++)
    w[k] = at[k] > p && at[k] - p <= 8u * UINT16_MAX && (at[k] - p) % 8 == 0
               ? (uint16_t)((at[k] - p) / 8)
               : 0;
  const pl_stack_slot *s = NULL;
  uint32_t id = pl_stack_intern(f, n, &py, w, &s);
  if (id == 0) return 0;
  if (PL_UNLIKELY(pl_own_hi <= PL_OWN_ONCE)) {
    if (pl_own_hi == PL_OWN_UNSEEN)
      pl_own_hi = PL_OWN_ONCE;
    else if (pl_own_hi == PL_OWN_ONCE)
      pl_own_find();
  }
  if (!pl_own_holds(w, n, p)) {
    if (check) check->n = PL_CHECK_NONE;
    return id;
  }
  if (check) pl_check_fill(check, w, f, n, p);
  /* The memo reads where the stack was first seen: only where that is
   * where this call keeps its frames too (a variable-length array or
   * another hook at the same return address may move them). */
  if (memcmp(s->at + 1, w + 1, sizeof(uint16_t) * (size_t)(n - 1)) != 0) return id;
  /* The other way's entry when this one holds the other path of a pair. */
  pl_stack_memo *m = &pl_memo[i];
  if (m->ra == r && m->sp == p) m = &pl_memo[i ^ 1];
  m->ra = r;
  m->sp = p;
  m->py = 0;
  m->s = s;
  return id;
}

uint32_t pl_stack_capture_at(int skip, const void *ra, const void *sp, pl_stack_check *check) {
  if (check) pl_stack_check_empty(check);
  int depth = (int)pl_opt_long(PL_OPT_BACKTRACE_DEPTH);
  if (depth <= 0) return 0;
  uint64_t t0 = pl_span_now();
  uint32_t id = pl_capture_at(depth, skip, ra, sp, check);
  pl_cost_add(&pl_n_captures, &pl_capture_ns, t0);
  return id;
}

uint32_t pl_stack_capture(int skip) {
  int depth = (int)pl_opt_long(PL_OPT_BACKTRACE_DEPTH);
  if (depth <= 0) return 0;
  void *f[PAGELOCK_MAX_FRAMES];
  uintptr_t at[PAGELOCK_MAX_FRAMES];
  uint64_t t0 = pl_span_now();
  int n = pl_unwind_from(NULL, skip, depth, f, at);
  pl_cost_add(&pl_n_unwinds, &pl_unwind_ns, t0);
  uint32_t id = 0;
  if (n > 0) {
    pl_pystack py;
    pl_py_capture(&py);
    const pl_stack_slot *s;
    id = pl_stack_intern(f, n, &py, NULL, &s);
  }
  pl_cost_add(&pl_n_captures, &pl_capture_ns, t0);
  return id;
}

static uint32_t pl_capture_ra(const void *ra);

uint32_t pl_stack_capture_ra(const void *ra) {
  if (ra == NULL || pl_opt_long(PL_OPT_BACKTRACE_DEPTH) <= 0) return 0;
  uint64_t t0 = pl_span_now();
  uint32_t id = pl_capture_ra(ra);
  pl_cost_add(&pl_n_captures, &pl_capture_ns, t0);
  return id;
}

static uint32_t pl_capture_ra(const void *ra) {
  /* The Python frames too (a DataLoader batch's shared memory is mapped
   * below the loop's line): the walk only reads, allocates nothing and
   * takes no lock, so an allocator in the middle of its bookkeeping
   * (pymalloc's arenas among them) is no matter to it. */
  pl_pystack py;
  pl_py_capture(&py);
  uint64_t ph = pl_py_hash(&py);
  /* sp 1 is never a stack address: no full stack shares these entries. */
  uintptr_t r = (uintptr_t)ra;
  pl_stack_memo *m = &pl_memo[pl_memo_index(r, 1 ^ ph)];
  if (m->s != NULL && m->ra == r && m->sp == 1 && m->py == ph) return m->s->id;
  void *f = (void *)ra;
  const pl_stack_slot *s = NULL;
  uint32_t id = pl_stack_intern(&f, 1, &py, NULL, &s);
  if (id != 0) {
    m->ra = r;
    m->sp = 1;
    m->py = ph;
    m->s = s;
  }
  return id;
}

void pl_stack_warm(void) {
  if (pl_opt_long(PL_OPT_BACKTRACE_DEPTH) <= 0) return;
  void *f[4];
  uintptr_t at[4];
  (void)pl_unwind_from(NULL, 0, 4, f, at);
}

void pl_stack_note(uint32_t kind, const char *text) {
  pthread_mutex_lock(&pl_emit_lock);
  size_t n = strlen(text);
  if (n > sizeof pl_note_text - 1) n = sizeof pl_note_text - 1;
  memcpy(pl_note_text, text, n);
  pl_note_text[n] = 0;
  pl_note_kind = kind;
  atomic_store(&pl_note_set, true);
  pthread_mutex_unlock(&pl_emit_lock);
}

void pl_stack_emit(uint32_t id) {
  if (id == 0 || id >= PL_STACK_SLOTS) return;
  /* Almost always already written: decide that without the lock. */
  pl_stack_slot *s = &pl_stacks[id];
  if (!atomic_load_explicit(&s->ready, memory_order_acquire) ||
      __atomic_load_n(&s->emitted, __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&pl_emit_lock);
  if (!s->emitted) {
    pl_py_note();
    if (atomic_load(&pl_note_set) && !pl_note_written) {
      pl_trace_note(pl_note_kind, pl_note_text);
      pl_note_written = true;
    }
    /* Written under the lock so no record can refer to the id before its
     * STACK record is in the file.  The slot is READY: its frames no
     * longer change. */
    struct {
      pagelock_rec_stack r;
      uint64_t frames[PAGELOCK_MAX_FRAMES];
    } rec;
    memset(&rec, 0, sizeof rec);
    rec.r.h.type = PAGELOCK_REC_STACK;
    rec.r.h.size = (uint32_t)(sizeof rec.r + sizeof(uint64_t) * s->depth);
    rec.r.id = id;
    rec.r.depth = s->depth;
    for (uint32_t i = 0; i < s->depth; i++) rec.frames[i] = (uint64_t)(uintptr_t)s->frames[i];
    pl_trace_write(&rec, rec.r.h.size);
    if (s->py.depth) pl_py_emit(id, &s->py);
    __atomic_store_n(&s->emitted, true, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&pl_emit_lock);
}

/* Sort a[0..n) in place, allocating nothing: this runs at exit, and from
 * _exit's hook in a signal handler that may have interrupted malloc
 * (glibc's qsort allocates a buffer for anything over 1 KiB, and then
 * waited for the arena's lock its own thread held: preload exit_paths
 * malloc).  Heapsort. */
static void pl_sift(uintptr_t *a, size_t i, size_t n) {
  for (size_t c; (c = 2 * i + 1) < n; i = c) {
    if (c + 1 < n && a[c + 1] > a[c]) c++;
    if (a[i] >= a[c]) return;
    uintptr_t t = a[i];
    a[i] = a[c];
    a[c] = t;
  }
}
static void pl_sort_addrs(uintptr_t *a, size_t n) {
  for (size_t k = n / 2; k-- > 0;) pl_sift(a, k, n);
  for (size_t end = n; end > 1;) {
    end--;
    uintptr_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    pl_sift(a, 0, end);
  }
}

void pl_stack_write_symbols(void) {
  static uintptr_t addrs[PL_STACK_SLOTS * PAGELOCK_MAX_FRAMES];
  size_t n = 0;
  unsigned long lost = atomic_load(&pl_stack_lost);
  if (lost) {
    char text[320];
    snprintf(text, sizeof text,
             "%lu copies and allocations were not given a stack: the table of %u distinct call "
             "stacks (Python lines included) was full; those copies show the hooked call's return "
             "address as their site, and those buffers no allocation site",
             lost, (unsigned)PL_STACK_SLOTS - 1);
    pl_trace_note(PAGELOCK_NOTE_WARNING, text);
  }
  pthread_mutex_lock(&pl_emit_lock);
  uint32_t ids = atomic_load(&pl_stack_count);
  for (uint32_t i = 1; i < ids && i < PL_STACK_SLOTS; i++) {
    pl_stack_slot *s = &pl_stacks[i];
    if (!atomic_load_explicit(&s->ready, memory_order_acquire) || !s->emitted) continue;
    for (uint32_t k = 0; k < s->depth; k++) addrs[n++] = (uintptr_t)s->frames[k];
  }
  pthread_mutex_unlock(&pl_emit_lock);
  pl_sort_addrs(addrs, n);
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && addrs[i] == addrs[i - 1]) continue;
    Dl_info info;
    pagelock_rec_symbol s;
    memset(&s, 0, sizeof s);
    s.addr = addrs[i];
    const char *name = "";
    /* Return addresses point after the call; look up the call itself. */
    if (dladdr((void *)(addrs[i] - 1), &info) && info.dli_sname) {
      name = info.dli_sname;
      s.sym_addr = (uint64_t)(uintptr_t)info.dli_saddr;
    }
    pl_trace_write_str(&s, sizeof s, PAGELOCK_REC_SYMBOL, name);
  }
}

void pl_stack_write_cost(void) {
  pagelock_rec_cost c;
  memset(&c, 0, sizeof c);
  c.h.type = PAGELOCK_REC_COST;
  c.h.size = sizeof c;
  c.captures = atomic_load_explicit(&pl_n_captures, memory_order_relaxed);
  if (c.captures == 0) return;
  c.capture_ns = pl_span_ns(atomic_load_explicit(&pl_capture_ns, memory_order_relaxed));
  c.unwinds = atomic_load_explicit(&pl_n_unwinds, memory_order_relaxed);
  c.unwind_ns = pl_span_ns(atomic_load_explicit(&pl_unwind_ns, memory_order_relaxed));
  pl_py_cost(&c.py_walks, &c.py_walk_ns, &c.py_probes);
  c.py_walk_ns = pl_span_ns(c.py_walk_ns);
  pl_trace_write(&c, sizeof c);
}

void pl_stack_reset(void) {
  /* The child keeps the interned stacks (its allocations were made by the
   * same code) but writes a new trace, so every record is due again, and
   * counts its own cost. */
  atomic_store(&pl_n_captures, 0);
  atomic_store(&pl_capture_ns, 0);
  atomic_store(&pl_n_unwinds, 0);
  atomic_store(&pl_unwind_ns, 0);
  pthread_mutex_init(&pl_emit_lock, NULL);
  pl_note_written = false;
  /* Only the slots handed out: the rest of the table stays untouched. */
  uint32_t ids = atomic_load(&pl_stack_count);
  for (uint32_t i = 1; i < ids && i < PL_STACK_SLOTS; i++) pl_stacks[i].emitted = false;
  pl_py_reset();
}

void pl_stack_atfork_prepare(void) { pthread_mutex_lock(&pl_emit_lock); }
void pl_stack_atfork_parent(void) { pthread_mutex_unlock(&pl_emit_lock); }
