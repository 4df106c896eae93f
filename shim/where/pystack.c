/* pystack.c - the calling thread's Python frames, for call and allocation
 * sites.
 *
 * A Python program reaches a copy through the interpreter, so its native
 * stack names libtorch or ctypes, never the script line to change.  When
 * the process runs CPython 3.10-3.13 with the GIL, each captured stack
 * (stack.c) also carries Python frames as (code, line) pairs:
 *  - the innermost frames of the user's own code: code neither installed
 *    (under site-packages/ or dist-packages/) nor the standard library's;
 *  - before them, when the call was made below the user's code, the
 *    library line that made it: the innermost frame of an installed
 *    package other than the frameworks (accelerate's hook, Lightning's
 *    move_data_to_device), else the innermost frame (torch's, the
 *    standard library's);
 *  - where no frame is the user's (a thread whose target is the foreign
 *    function), the innermost frames as they are.
 * The trace gets a PYCODE record per code object (file, qualified name)
 * and a PYSTACK record per stack (docs/trace-format.md).
 *
 * The walk runs inside the copy and allocation hooks, on any thread, with
 * or without the GIL (PyTorch drops it inside tensor.to(), ctypes around
 * every foreign call), at any depth (a Lightning step is 40-80 Python
 * frames deep, and the user's line lies below all of them).  So it:
 *  - reads only the calling thread's own frames, found through the
 *    thread's gilstate (PyGILState_GetThisThreadState: a
 *    pthread_getspecific, valid with the GIL released, unlike the
 *    "current" thread state, which is NULL then, and while the interpreter
 *    finalizes, when objects' __del__ still copy).  3.10 and 3.11 leave
 *    the gilstate on the main interpreter's thread state while a thread
 *    runs a subinterpreter: there, while several interpreters exist, the
 *    thread state is the current one when this thread holds the GIL, else
 *    the one of this thread's whose evaluation loop runs deepest on the C
 *    stack (pl_py_thread_state).  No other thread pushes or pops these
 *    frames, and every code object on them is kept alive by its frame;
 *  - takes no lock and allocates nothing: the code table, the line memo
 *    and the page cache below are fixed static tables updated with atomics;
 *  - checks every address before reading it: it must lie on a page known
 *    readable (below), and what it points to must have the type it should
 *    (a code object's ob_type is &PyCode_Type, a name's
 *    &PyUnicode_Type...).  A frame that fails stops the walk; a frame
 *    being pushed while the hook runs (a signal handler) shows up as such
 *    a failure or as a cycle, never as a fault;
 *  - stops after PL_PY_WALK frames and detects cycles (Brent);
 *  - resolves a code object (file, name, first line, whose it is) once,
 *    into a slot keyed by its address and re-validated on every use by
 *    its co_filename, co_name, co_linetable pointers and co_firstlineno,
 *    so a code object freed and another allocated at its address gets a
 *    slot of its own instead of the old one's names.  Names are copied
 *    into the slot: the trace's PYCODE record is written later, when the
 *    code object may be gone.  Lines are memoised per (code, offset).
 *
 * Pages known readable: a cache of pages probed once each, each forgotten
 * when the program unmaps it (below).  The probe is a system call that
 * reads 8 bytes of the page inside the kernel, where an unreadable page
 * fails (EFAULT) instead of faulting: rt_sigprocmask with an invalid
 * `how`, which copies the new mask in before it looks at `how`, then
 * changes nothing (EINVAL).  Not process_vm_readv, which could do the
 * same: seccomp profiles refuse it (Docker's default, without
 * CAP_SYS_PTRACE) or kill the process on it, while no libc program runs
 * without rt_sigprocmask.  Reading directly under a fault handler would
 * take the program's SIGSEGV; a write(2) from the page, a descriptor of
 * the shim's in the program's table.  The probe proves itself once at
 * start (a PROT_NONE page must fail, a stack page pass: an emulator that
 * checks `how` first fails that); any other answer later (a seccomp
 * filter's errno) turns the walk off.
 *
 * Cost: tests/bench/bench_pystack.c (docs/bench/2026-11-25-python-sites.md).
 * PAGELOCK_PYTHON=0, free-threaded builds, other versions and a probe
 * that does not work turn the walk off; the trace then says why in one
 * NOTE. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_internal.h"
#include "pystack.h"
#include "pystack_layout.h"
#include "trace.h"

enum { PL_PY_OFF = 0, PL_PY_ON, PL_PY_UNSUPPORTED };

static int pl_py_state;
static pl_py_layout pl_py_L;
static char pl_py_why[240]; /* the NOTE when not PL_PY_ON */
static uint32_t pl_py_why_kind = PAGELOCK_NOTE_WARNING;
static void *(*pl_py_tstate)(void);
static uintptr_t pl_py_code_type, pl_py_str_type, pl_py_bytes_type, pl_py_frame_type;
static uintptr_t pl_py_runtime; /* &_PyRuntime, read on 3.10-3.11 only */

#define PL_PY_WALK 1024 /* frames looked at, user or not */
#define PL_PY_ADDR_MAX (1ull << 56)

/* ---- pages known readable ------------------------------------------------- */

/* Key: the page number (page 0 is never asked: 0 is an empty entry).  An
 * unmap forgets the entries of the pages it unmaps: page by page when it
 * is small, else by one pass over the table.  Never all of them: a CUDA
 * program unmaps large ranges all the time (the driver, CUPTI's buffers,
 * a framework's host tensors), and a walk after each asked the kernel
 * about each of its pages again, hundreds of system calls a copy.  Nor
 * on every unmap of pymalloc's arenas, for the same reason: under
 * accelerate's offload a walk and its native unwind cost a forward 1.5x
 * its pinned time (H200, docs/bench/). */
#define PL_PY_PAGES 4096
static _Atomic uint64_t pl_py_pages[PL_PY_PAGES];
/* What the walks cost the program's threads (the trace's COST record). */
static atomic_uint_fast64_t pl_py_walks, pl_py_walk_ns, pl_py_probes;

static size_t pl_py_slot(uint64_t page) { return (size_t)((page * 0x9E3779B97F4A7C15ull) >> 54); }

static void pl_py_forget(_Atomic uint64_t *e, uint64_t first, uint64_t last) {
  uint64_t k = atomic_load_explicit(e, memory_order_relaxed);
  if (k >= first && k <= last) atomic_compare_exchange_strong(e, &k, 0);
}

void pl_py_unmapped(uintptr_t p, size_t n) {
  if (n == 0) return;
  uint64_t first = p >> 12, last = (p + n < p ? UINTPTR_MAX : p + n - 1) >> 12;
  if (last - first < PL_PY_PAGES / 4) {
    for (uint64_t page = first; page <= last; page++)
      for (size_t h = pl_py_slot(page), i = 0; i < 4; i++)
        pl_py_forget(&pl_py_pages[(h + i) & (PL_PY_PAGES - 1)], page, page);
    return;
  }
  for (size_t i = 0; i < PL_PY_PAGES; i++) pl_py_forget(&pl_py_pages[i], first, last);
}

enum { PL_PROBE_READABLE, PL_PROBE_FAULT, PL_PROBE_REFUSED };

/* Whether the 8 bytes at p can be read, asked of the kernel (see the top
 * of the file); *err: the errno of a refusal. */
static int pl_py_probe(uintptr_t p, int *err) {
  int saved = errno;
  long r = syscall(SYS_rt_sigprocmask, -1L, (void *)p, (void *)0, (long)sizeof(uint64_t));
  int e = errno;
  errno = saved;
  *err = e;
  if (r == -1 && e == EINVAL) return PL_PROBE_READABLE;
  if (r == -1 && e == EFAULT) return PL_PROBE_FAULT;
  return PL_PROBE_REFUSED;
}

/* The walk cannot go on (a refused probe): off for good, said in the
 * trace (pl_py_note) and once on stderr. */
static void pl_py_refused(int err) {
  /* The first thread refused says it; the text is written before the
   * state that makes pl_py_note read it. */
  static atomic_bool once;
  if (atomic_exchange(&once, true)) return;
  /* Not strerror: it may translate, and allocate, inside a hook. */
  snprintf(pl_py_why, sizeof pl_py_why,
           "Python frames are not recorded: the kernel refused the page probe (rt_sigprocmask: "
           "%s%d); call and allocation sites show native frames only",
           err == EPERM    ? "EPERM, errno "
           : err == ENOSYS ? "ENOSYS, errno "
                           : "errno ",
           err);
  __atomic_store_n(&pl_py_state, PL_PY_UNSUPPORTED, __ATOMIC_RELEASE);
  pl_log(PL_LOG_WARN, PL_LK_PY_REFUSED, "%s", pl_py_why);
}

static bool pl_py_page_ok(uint64_t page) {
  size_t h = pl_py_slot(page);
  for (size_t i = 0; i < 4; i++)
    if (atomic_load_explicit(&pl_py_pages[(h + i) & (PL_PY_PAGES - 1)], memory_order_relaxed) ==
        page)
      return true;
  int err;
  int r = pl_py_probe((uintptr_t)(page << 12), &err);
  atomic_fetch_add_explicit(&pl_py_probes, 1, memory_order_relaxed);
  if (r != PL_PROBE_READABLE) {
    if (r == PL_PROBE_REFUSED) pl_py_refused(err);
    return false;
  }
  atomic_store_explicit(&pl_py_pages[(h + (page & 3)) & (PL_PY_PAGES - 1)], page,
                        memory_order_relaxed);
  return true;
}

bool pl_py_page_ok_for_test(uintptr_t p) { return pl_py_page_ok(p >> 12); }

bool pl_py_page_known_for_test(uintptr_t p) {
  uint64_t page = p >> 12;
  size_t h = pl_py_slot(page);
  for (size_t i = 0; i < 4; i++)
    if (atomic_load(&pl_py_pages[(h + i) & (PL_PY_PAGES - 1)]) == page) return true;
  return false;
}

static bool pl_py_readable(uintptr_t p, size_t n) {
  if (p < 4096 || n == 0 || p >= PL_PY_ADDR_MAX - n) return false;
  for (uint64_t pg = p >> 12, last = (p + n - 1) >> 12; pg <= last; pg++)
    if (!pl_py_page_ok(pg)) return false;
  return true;
}

static inline uintptr_t pl_rdp(uintptr_t p) {
  uintptr_t v;
  memcpy(&v, (const void *)p, sizeof v);
  return v;
}
static inline int32_t pl_rd32(uintptr_t p) {
  int32_t v;
  memcpy(&v, (const void *)p, sizeof v);
  return v;
}
static inline int64_t pl_rd64(uintptr_t p) {
  int64_t v;
  memcpy(&v, (const void *)p, sizeof v);
  return v;
}

/* o is readable for n bytes and an object of type `type`. */
static bool pl_py_is(uintptr_t o, uintptr_t type, size_t n) {
  if (o & 7) return false;
  if (n < PL_PY_OB_TYPE + 8) n = PL_PY_OB_TYPE + 8;
  return pl_py_readable(o, n) && pl_rdp(o + PL_PY_OB_TYPE) == type;
}

/* ---- code objects ------------------------------------------------------- */

/* A code object's ids are the slots of a dense table, handed out in
 * order, so memory grows with the code objects seen (~400 bytes each),
 * and found through an index by address (twice as many entries, so
 * probes stay short).  Id 0 is none. */
#define PL_PY_CODES 16384
#define PL_PY_INDEX (2 * PL_PY_CODES)

/* Whose a code object is: the user's own, an installed package's, or a
 * framework's or the standard library's (looked past even as the line
 * that made a call, when an installed package's frame is nearer the
 * user's). */
enum { PL_PYK_USER = 0, PL_PYK_LIBRARY, PL_PYK_FRAMEWORK };

typedef struct pl_py_code {
  int32_t firstlineno;
  uint8_t kind;
  bool emitted; /* its PYCODE record is in the trace (under the stack lock) */
  uintptr_t addr, filename, name, linetable; /* the key, re-validated */
  char file[232];
  char func[120];
} pl_py_code;

static pl_py_code pl_py_codes[PL_PY_CODES];
static _Atomic uint16_t pl_py_index[PL_PY_INDEX];
static atomic_uint pl_py_ncodes = 1; /* the next id (0 is none) */

/* A compact str's characters as UTF-8 into out (cut to fit, at a
 * character boundary); "?" for anything else. */
static void pl_py_str(uintptr_t s, char *out, size_t cap) {
  snprintf(out, cap, "?");
  if (!pl_py_is(s, pl_py_str_type, PL_PY_STR_STATE + 4)) return;
  int64_t len = pl_rd64(s + PL_PY_STR_LENGTH);
  uint32_t state = (uint32_t)pl_rd32(s + PL_PY_STR_STATE);
  unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || len < 0 || len > 4096 || (kind != 1 && kind != 2 && kind != 4)) return;
  uintptr_t data = s + (ascii ? pl_py_L.str_ascii_size : pl_py_L.str_compact_size);
  if (ascii) kind = 1;
  if (len && !pl_py_readable(data, (size_t)len * kind)) return;
  size_t o = 0;
  for (int64_t i = 0; i < len; i++) {
    uint32_t c = kind == 1   ? *(const uint8_t *)(data + (size_t)i)
                 : kind == 2 ? *(const uint16_t *)(data + 2 * (size_t)i)
                             : *(const uint32_t *)(data + 4 * (size_t)i);
    unsigned char u[4];
    size_t k;
    if (c < 0x80)
      u[0] = (unsigned char)c, k = 1;
    else if (c < 0x800)
      u[0] = (unsigned char)(0xc0 | c >> 6), u[1] = (unsigned char)(0x80 | (c & 0x3f)), k = 2;
    else if (c < 0x10000)
      u[0] = (unsigned char)(0xe0 | c >> 12), u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f)),
      u[2] = (unsigned char)(0x80 | (c & 0x3f)), k = 3;
    else
      u[0] = (unsigned char)(0xf0 | c >> 18), u[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f)),
      u[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f)), u[3] = (unsigned char)(0x80 | (c & 0x3f)),
      k = 4;
    if (o + k + 1 > cap) break;
    memcpy(out + o, u, k);
    o += k;
  }
  out[o] = 0;
}

/* Whose file f is (PL_PYK_*).  Installed: under site-packages/ or
 * dist-packages/; the standard library: under lib/python3.N/ otherwise,
 * or frozen. */
static int pl_py_kind(const char *f) {
  if (strncmp(f, "<frozen ", 8) == 0) return PL_PYK_FRAMEWORK;
  const char *sp = strstr(f, "/site-packages/");
  if (sp == NULL) sp = strstr(f, "/dist-packages/");
  if (sp != NULL) {
    /* numba_cuda: Numba's CUDA target as a package of its own (numba-cuda
     * 0.x); cuda: NVIDIA's cuda-python bindings, which it calls. */
    static const char *const pkgs[] = {"torch/", "numpy/",      "cupy/", "cupyx/", "cupy_backends/",
                                       "numba/", "numba_cuda/", "cuda/", "jax/",   "jaxlib/"};
    const char *pkg = sp + strlen("/site-packages/");
    for (size_t i = 0; i < sizeof pkgs / sizeof pkgs[0]; i++)
      if (strncmp(pkg, pkgs[i], strlen(pkgs[i])) == 0) return PL_PYK_FRAMEWORK;
    return PL_PYK_LIBRARY;
  }
  return strstr(f, "/lib/python3") != NULL ? PL_PYK_FRAMEWORK : PL_PYK_USER;
}

/* The id of code object co (validated as one), resolving it on first
 * sight; 0 when its names cannot be read or the table is full (logged
 * once): the frame is then kept as an unresolved one of the user's, not
 * dropped, so the report never names the caller's line for the
 * callee's. */
static uint32_t pl_py_code_id(uintptr_t co) {
  const pl_py_layout *L = &pl_py_L;
  uintptr_t fn = pl_rdp(co + L->co_filename), nm = pl_rdp(co + L->co_name);
  uintptr_t lt = pl_rdp(co + L->co_linetable);
  int32_t first = pl_rd32(co + L->co_firstlineno);
  uint64_t h = (co >> 4) * 0x9E3779B97F4A7C15ull;
  uint32_t mine = 0; /* the slot this call filled, not yet indexed */
  for (uint32_t i = 0; i < 64; i++) {
    _Atomic uint16_t *e = &pl_py_index[(uint32_t)((h >> 40) + i) & (PL_PY_INDEX - 1)];
    uint16_t id = atomic_load_explicit(e, memory_order_acquire);
    if (id == 0) {
      if (mine == 0) {
        if (!pl_py_is(fn, pl_py_str_type, 8) || !pl_py_is(nm, pl_py_str_type, 8) ||
            !pl_py_is(lt, pl_py_bytes_type, PL_PY_BYTES_SVAL))
          return 0;
        /* Checked first, so the count stops near the bound. */
        if (atomic_load_explicit(&pl_py_ncodes, memory_order_relaxed) >= PL_PY_CODES ||
            (mine = atomic_fetch_add_explicit(&pl_py_ncodes, 1, memory_order_relaxed)) >=
                PL_PY_CODES) {
          pl_log(PL_LOG_WARN, PL_LK_PY_CODES,
                 "too many distinct Python code objects; frames of later ones are shown "
                 "unresolved");
          return 0;
        }
        pl_py_code *c = &pl_py_codes[mine];
        c->addr = co, c->filename = fn, c->name = nm, c->linetable = lt, c->firstlineno = first;
        pl_py_str(fn, c->file, sizeof c->file);
        pl_py_str(nm, c->func, sizeof c->func);
        c->kind = (uint8_t)pl_py_kind(c->file);
        c->emitted = false;
      }
      uint16_t expect = 0;
      if (atomic_compare_exchange_strong_explicit(e, &expect, (uint16_t)mine, memory_order_acq_rel,
                                                  memory_order_acquire))
        return mine;
      id = expect; /* another thread's, just indexed */
    }
    const pl_py_code *c = &pl_py_codes[id];
    if (c->addr == co && c->filename == fn && c->name == nm && c->linetable == lt &&
        c->firstlineno == first)
      return id; /* a slot this call filled meanwhile stays unused */
  }
  /* No free index entry near: the slot still names the frame. */
  return mine;
}

/* ---- lines -------------------------------------------------------------- */

/* (code id, byte offset) -> line, one word per entry so a reader never
 * sees half an update: id 14 bits | offset 24 bits | line 26 bits. */
#define PL_PY_LINES 16384
_Static_assert(PL_PY_CODES <= (1 << 14), "a code id is 14 bits of a line memo entry");
static _Atomic uint64_t pl_py_lines[PL_PY_LINES];

static unsigned pl_py_varint(const uint8_t **p, const uint8_t *end) {
  unsigned v = 0, shift = 0, b;
  do {
    if (*p >= end || shift > 24) return v;
    b = *(*p)++;
    v |= (b & 63u) << shift;
    shift += 6;
  } while (b & 64);
  return v;
}

/* PyCode_Addr2Line: the line of the instruction at byte offset addrq,
 * from the code's line table (3.10: Objects/lnotab_notes.txt; 3.11+:
 * Objects/locations.md); first when addrq < 0 or the table is
 * exhausted. */
static int32_t pl_py_addr2line(const uint8_t *t, size_t n, int32_t first, int64_t addrq) {
  if (addrq < 0) return first;
  const uint8_t *end = t + n;
  int64_t start = 0, stop = 0;
  int32_t line = first, cur = -1;
  if (pl_py_L.minor == 10) {
    while (t + 2 <= end) {
      int sdelta = t[0], ldelta = (int8_t)t[1];
      t += 2;
      start = stop;
      stop += sdelta;
      if (ldelta == -128)
        cur = -1;
      else
        line += ldelta, cur = line;
      if (start != stop && addrq >= start && addrq < stop) return cur > 0 ? cur : first;
    }
    return first;
  }
  while (t < end) {
    uint8_t b = *t;
    unsigned code = (b >> 3) & 15;
    const uint8_t *q = t + 1;
    int delta = 0;
    if (code == 14 || code == 13) {
      unsigned u = pl_py_varint(&q, end);
      delta = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
    } else if (code >= 10 && code <= 12) {
      delta = (int)code - 10;
    }
    line += delta;
    cur = code == 15 ? -1 : line;
    start = stop;
    stop += 2 * ((b & 7) + 1);
    if (addrq >= start && addrq < stop) return cur > 0 ? cur : first;
    /* The next entry starts at the next byte with its top bit set. */
    do t++;
    while (t < end && (*t & 128) == 0);
  }
  return first;
}

static int32_t pl_py_line(uint32_t id, int64_t addrq) {
  const pl_py_code *c = &pl_py_codes[id];
  bool memo = addrq >= 0 && addrq < (1 << 24);
  uint64_t key = ((uint64_t)id << 50) | ((uint64_t)(memo ? addrq : 0) << 26);
  size_t slot =
      (size_t)(((uint64_t)id * 0x9E3779B97F4A7C15ull ^ (uint64_t)addrq * 0xBF58476D1CE4E5B9ull) >>
               50);
  if (memo) {
    uint64_t e = atomic_load_explicit(&pl_py_lines[slot], memory_order_relaxed);
    if ((e & ~((1ull << 26) - 1)) == key) return (int32_t)(e & ((1ull << 26) - 1));
  }
  uintptr_t lt = c->linetable;
  int64_t n = pl_rd64(lt + PL_PY_OB_SIZE); /* the bytes object was validated with the code */
  int32_t line = c->firstlineno;
  if (n > 0 && n < (1 << 24) && pl_py_readable(lt + PL_PY_BYTES_SVAL, (size_t)n))
    line =
        pl_py_addr2line((const uint8_t *)(lt + PL_PY_BYTES_SVAL), (size_t)n, c->firstlineno, addrq);
  if (memo && line >= 0 && line < (1 << 26))
    atomic_store_explicit(&pl_py_lines[slot], key | (uint64_t)line, memory_order_relaxed);
  return line;
}

/* ---- the walk ----------------------------------------------------------- */

bool pl_py_walking(void) { return __atomic_load_n(&pl_py_state, __ATOMIC_ACQUIRE) == PL_PY_ON; }

/* 3.10-3.11, while several interpreters exist: the thread state this
 * thread's innermost Python code runs in (see the top of the file); ts,
 * its gilstate's, otherwise. */
static uintptr_t pl_py_thread_state(uintptr_t ts) {
  const pl_py_layout *L = &pl_py_L;
  uintptr_t rt = pl_py_runtime;
  if (rt == 0 || !pl_py_readable(rt + L->rt_interp_head, 8)) return ts;
  uintptr_t head = pl_rdp(rt + L->rt_interp_head);
  if (head == 0 || (head & 7) || !pl_py_readable(head + L->is_next, 8) ||
      pl_rdp(head + L->is_next) == 0)
    return ts; /* one interpreter: the gilstate's is the one */
  uintptr_t self = (uintptr_t)pthread_self();
  size_t span = (size_t)(L->ts_thread_id > L->ts_cframe ? L->ts_thread_id : L->ts_cframe) + 8;
  if (L->ts_next + 8u > span) span = (size_t)L->ts_next + 8;
  /* Holding the GIL, this thread's is the current one. */
  if (pl_py_readable(rt + L->rt_tstate_current, 8)) {
    uintptr_t cur = pl_rdp(rt + L->rt_tstate_current);
    if (cur != 0 && !(cur & 7) && pl_py_readable(cur, span) &&
        pl_rdp(cur + L->ts_thread_id) == self)
      return cur;
  }
  /* Released: of this thread's thread states, the one whose evaluation
   * loop's _PyCFrame lies nearest above this frame on the C stack.  One
   * that runs no loop points into itself (its root_cframe). */
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0), best = ts, best_cf = UINTPTR_MAX;
  unsigned budget = 4096; /* thread states looked at, in case a list is torn */
  for (uintptr_t is = head; is != 0 && budget; budget--) {
    if ((is & 7) ||
        !pl_py_readable(is, (size_t)(L->is_threads > L->is_next ? L->is_threads : L->is_next) + 8))
      break;
    for (uintptr_t t = pl_rdp(is + L->is_threads); t != 0 && budget; budget--) {
      if ((t & 7) || !pl_py_readable(t, span)) break;
      uintptr_t cf = pl_rdp(t + L->ts_cframe);
      if (pl_rdp(t + L->ts_thread_id) == self && !(cf >= t && cf - t < 4096) && cf > sp &&
          cf - sp < (1ull << 30) && cf < best_cf)
        best = t, best_cf = cf;
      t = pl_rdp(t + L->ts_next);
    }
    is = pl_rdp(is + L->is_next);
  }
  return best;
}

/* One frame met by the walk: its code's id and byte offset. */
typedef struct pl_py_at {
  uint32_t id;
  int64_t addrq;
} pl_py_at;

static pagelock_py_frame pl_py_frame_of(pl_py_at a) {
  pagelock_py_frame f = {a.id, a.id ? (uint32_t)pl_py_line(a.id, a.addrq) : 0};
  return f;
}

void pl_py_cost(uint64_t *walks, uint64_t *ns, uint64_t *probes) {
  *walks = atomic_load_explicit(&pl_py_walks, memory_order_relaxed);
  *ns = atomic_load_explicit(&pl_py_walk_ns, memory_order_relaxed);
  *probes = atomic_load_explicit(&pl_py_probes, memory_order_relaxed);
}

static bool pl_py_walk(pl_pystack *out);

bool pl_py_capture(pl_pystack *out) {
  out->depth = 0;
  out->flags = 0;
  if (__atomic_load_n(&pl_py_state, __ATOMIC_ACQUIRE) != PL_PY_ON) return false;
  uint64_t t0 = pl_span_now();
  bool r = pl_py_walk(out);
  atomic_fetch_add_explicit(&pl_py_walks, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&pl_py_walk_ns, pl_span_now() - t0, memory_order_relaxed);
  return r;
}

static bool pl_py_walk(pl_pystack *out) {
  const pl_py_layout *L = &pl_py_L;
  /* NULL before the interpreter starts and once it is gone; valid while
   * it finalizes. */
  uintptr_t ts = (uintptr_t)pl_py_tstate();
  if (ts == 0) return false;
  if (L->rt_interp_head != PL_PY_NONE) ts = pl_py_thread_state(ts);
  if (!pl_py_readable(ts + L->ts_frame, 8)) return false;
  uintptr_t fr = pl_rdp(ts + L->ts_frame);
  if (L->ts_cframe_frame != PL_PY_NONE) {
    if (fr == 0 || !pl_py_readable(fr + L->ts_cframe_frame, 8)) return false;
    fr = pl_rdp(fr + L->ts_cframe_frame);
  }
  /* The user's frames; the others' met before the first of them (the
   * innermost first), and of those the innermost installed package's. */
  pl_py_at user[PL_PY_FRAMES], lib[PL_PY_FRAMES], caller = {0, -1};
  unsigned nuser = 0, nlib = 0;
  bool have_caller = false, more = false;
  uintptr_t tortoise = fr;
  unsigned power = 1, lam = 1;
  size_t code_span =
      (size_t)(L->co_linetable > L->co_filename ? L->co_linetable : L->co_filename) + 8;
  for (int steps = 0; fr != 0 && steps < PL_PY_WALK; steps++) {
    if (fr & 7) break;
    uintptr_t prev, co;
    int64_t addrq = -1;
    if (L->minor == 10) {
      if (!pl_py_is(fr, pl_py_frame_type, (size_t)L->fr_instr + 4)) break;
      prev = pl_rdp(fr + L->fr_previous);
      co = pl_rdp(fr + L->fr_code);
      int32_t lasti = pl_rd32(fr + L->fr_instr);
      addrq = lasti < 0 ? -1 : (int64_t)lasti * 2;
    } else {
      if (!pl_py_readable(fr, (size_t)L->fr_owner + 1)) break;
      prev = pl_rdp(fr + L->fr_previous);
      co = pl_rdp(fr + L->fr_code);
      uint8_t owner = *(const uint8_t *)(fr + L->fr_owner);
      if (owner > L->owner_max) break;
      if (owner == L->owner_cstack) co = 0; /* an entry frame: no code of its own */
    }
    /* A code object that cannot be read stops the walk: passing its frame
     * by would name the caller's line for this one's. */
    if (co != 0 && ((co & 7) || !pl_py_readable(co, code_span))) break;
    if (co != 0 && pl_rdp(co + PL_PY_OB_TYPE) != pl_py_code_type) co = 0; /* not code */
    if (L->minor != 10) {
      if (co != 0 && pl_py_readable(co + L->co_code_adaptive, 1)) {
        /* The instruction being executed (3.13 instr_ptr) or last started
         * (3.11-3.12 prev_instr), as a byte offset into the code. */
        uintptr_t ip = pl_rdp(fr + L->fr_instr), base = co + L->co_code_adaptive;
        int64_t units = pl_rd64(co + PL_PY_OB_SIZE);
        if (ip >= base && ip < base + 2 * (uint64_t)(units > 0 ? units : 0))
          addrq = (int64_t)(ip - base);
      }
    }
    if (co != 0) {
      uint32_t id = pl_py_code_id(co);
      /* Code 0: a frame whose code could not be resolved, counted as the
       * user's. */
      int kind = id ? pl_py_codes[id].kind : PL_PYK_USER;
      pl_py_at a = {id, addrq};
      if (kind == PL_PYK_USER) {
        if (nuser == PL_PY_FRAMES) {
          more = true;
          break;
        }
        user[nuser++] = a;
      } else if (nuser == 0) {
        if (nlib < PL_PY_FRAMES) lib[nlib++] = a;
        if (!have_caller && kind == PL_PYK_LIBRARY) caller = a, have_caller = true;
      }
    }
    fr = prev;
    if (fr == tortoise) break; /* a cycle: only a bad read makes one */
    if (power == lam) {
      tortoise = fr;
      power *= 2;
      lam = 0;
    }
    lam++;
  }
  /* A probe refused during this walk: nothing read is to be trusted. */
  if (__atomic_load_n(&pl_py_state, __ATOMIC_ACQUIRE) != PL_PY_ON) return false;
  unsigned d = 0;
  if (nuser) {
    /* The line that made the call, when it is not the user's: no
     * installed package's frame met, the innermost (a framework's). */
    if (!have_caller && nlib) caller = lib[0], have_caller = true;
    if (have_caller) {
      out->f[d++] = pl_py_frame_of(caller);
      out->flags |= PAGELOCK_PY_CALLER;
    }
    for (unsigned i = 0; i < nuser && d < PL_PY_FRAMES; i++) out->f[d++] = pl_py_frame_of(user[i]);
    if (more || d - (have_caller ? 1u : 0u) < nuser) out->flags |= PAGELOCK_PY_TRUNCATED;
  } else {
    for (unsigned i = 0; i < nlib; i++) out->f[d++] = pl_py_frame_of(lib[i]);
    if (d) out->flags |= PAGELOCK_PY_LIBRARY;
  }
  out->depth = (uint16_t)d;
  return d > 0;
}

uint64_t pl_py_hash(const pl_pystack *s) {
  if (s->depth == 0) return 0;
  uint64_t h = 0x84222325cbf29ce4ull ^ s->flags;
  for (unsigned i = 0; i < s->depth; i++) {
    h ^= ((uint64_t)s->f[i].code << 32) | s->f[i].line;
    h *= 0x100000001b3ull;
    h ^= h >> 31;
  }
  return h | 1; /* never 0: 0 is "no Python frames" */
}

/* ---- the trace ---------------------------------------------------------- */

static bool pl_py_note_written; /* under the stack lock */

void pl_py_note(void) {
  if (pl_py_note_written || __atomic_load_n(&pl_py_state, __ATOMIC_ACQUIRE) != PL_PY_UNSUPPORTED)
    return;
  pl_trace_note(pl_py_why_kind, pl_py_why);
  pl_py_note_written = true;
}

void pl_py_emit(uint32_t stack_id, const pl_pystack *s) {
  for (unsigned i = 0; i < s->depth; i++) {
    uint32_t id = s->f[i].code;
    if (id == 0 || id >= PL_PY_CODES) continue;
    pl_py_code *c = &pl_py_codes[id];
    if (c->emitted) continue;
    struct {
      pagelock_rec_pycode r;
      char s[sizeof c->file + sizeof c->func + 8];
    } rec;
    memset(&rec, 0, sizeof rec);
    size_t nf = strlen(c->file) + 1, nn = strlen(c->func) + 1;
    memcpy(rec.s, c->file, nf);
    memcpy(rec.s + nf, c->func, nn);
    rec.r.h.type = PAGELOCK_REC_PYCODE;
    rec.r.h.size = (uint32_t)((sizeof rec.r + nf + nn + 7) & ~(size_t)7);
    rec.r.id = id;
    rec.r.firstlineno = c->firstlineno > 0 ? (uint32_t)c->firstlineno : 0;
    rec.r.flags = c->kind != PL_PYK_USER ? PAGELOCK_PYCODE_LIBRARY : 0;
    pl_trace_write(&rec, rec.r.h.size);
    c->emitted = true;
  }
  struct {
    pagelock_rec_pystack r;
    pagelock_py_frame f[PL_PY_FRAMES];
  } rec;
  memset(&rec, 0, sizeof rec);
  rec.r.h.type = PAGELOCK_REC_PYSTACK;
  rec.r.h.size = (uint32_t)(sizeof rec.r + s->depth * sizeof rec.f[0]);
  rec.r.stack_id = stack_id;
  rec.r.depth = s->depth;
  rec.r.flags = s->flags;
  memcpy(rec.f, s->f, s->depth * sizeof rec.f[0]);
  pl_trace_write(&rec, rec.r.h.size);
}

void pl_py_reset(void) {
  pl_py_note_written = false;
  atomic_store(&pl_py_walks, 0);
  atomic_store(&pl_py_walk_ns, 0);
  atomic_store(&pl_py_probes, 0);
  /* Only the slots handed out: the rest of the table stays untouched. */
  unsigned n = atomic_load(&pl_py_ncodes);
  for (unsigned i = 1; i < n && i < PL_PY_CODES; i++) pl_py_codes[i].emitted = false;
}

/* ---- finding the interpreter -------------------------------------------- */

static void pl_py_unsupported(const char *fmt, unsigned minor, const char *extra) {
  snprintf(pl_py_why, sizeof pl_py_why, fmt, minor, extra);
  pl_py_state = PL_PY_UNSUPPORTED;
}

/* Whether pl_py_probe tells a readable page from an unreadable one here;
 * its errno in *err when it was refused. */
static bool pl_py_probe_works(int *err) {
  uint64_t local = 0;
  *err = 0;
  /* Raw system calls: the shim's own mmap hook has no business here. */
  long m =
      syscall(SYS_mmap, NULL, 4096L, (long)PROT_NONE, (long)(MAP_PRIVATE | MAP_ANONYMOUS), -1L, 0L);
  if (m == -1) return false;
  int a = pl_py_probe((uintptr_t)&local, err);
  int e = 0;
  int b = a == PL_PROBE_READABLE ? pl_py_probe((uintptr_t)m, &e) : PL_PROBE_REFUSED;
  syscall(SYS_munmap, m, 4096L);
  if (a == PL_PROBE_REFUSED) return false;
  if (b == PL_PROBE_REFUSED && e != EINVAL) *err = e;
  return a == PL_PROBE_READABLE && b == PL_PROBE_FAULT;
}

void pl_py_init(void) {
  pl_py_tstate = (void *(*)(void))pl_real_dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
  if (pl_py_tstate == NULL) return; /* no Python in this process (yet) */
  if (pl_opt_long(PL_OPT_PYTHON) % 2 == 0) {
    snprintf(pl_py_why, sizeof pl_py_why,
             "Python frames are not recorded: PAGELOCK_PYTHON is off; call and allocation sites "
             "show native frames only");
    pl_py_why_kind = PAGELOCK_NOTE_INFO;
    pl_py_state = PL_PY_UNSUPPORTED;
    return;
  }
  void *is_init = pl_real_dlsym(RTLD_DEFAULT, "Py_IsInitialized");
  pl_py_code_type = (uintptr_t)pl_real_dlsym(RTLD_DEFAULT, "PyCode_Type");
  pl_py_str_type = (uintptr_t)pl_real_dlsym(RTLD_DEFAULT, "PyUnicode_Type");
  pl_py_bytes_type = (uintptr_t)pl_real_dlsym(RTLD_DEFAULT, "PyBytes_Type");
  pl_py_frame_type = (uintptr_t)pl_real_dlsym(RTLD_DEFAULT, "PyFrame_Type");
  unsigned major = 0, minor = 0;
  const unsigned long *hex = pl_real_dlsym(RTLD_DEFAULT, "Py_Version"); /* 3.11+ */
  if (hex != NULL) {
    major = (unsigned)(*hex >> 24) & 0xff;
    minor = (unsigned)(*hex >> 16) & 0xff;
  } else {
    const char *(*getver)(void) =
        (const char *(*)(void))pl_real_dlsym(RTLD_DEFAULT, "Py_GetVersion");
    if (getver == NULL || sscanf(getver(), "%u.%u", &major, &minor) != 2) major = minor = 0;
  }
  const char *fmt_new =
      "Python frames are not recorded: Python 3.%u%s is not one pagelock reads "
      "(CPython 3.10-3.13 with the GIL); call and allocation sites show native frames only";
  if (major != 3 || is_init == NULL || pl_py_code_type == 0 || pl_py_str_type == 0 ||
      pl_py_bytes_type == 0 || (minor == 10 && pl_py_frame_type == 0)) {
    pl_py_unsupported(
        fmt_new, minor,
        major == 3 ? " (some interpreter symbols are missing)" : " (or not CPython 3)");
    return;
  }
  if (minor >= 13) {
    const pl_py_debug_offsets_313 *d = pl_real_dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (d != NULL && memcmp(d->cookie, "xdebugpy", 8) == 0 && d->free_threaded) {
      pl_py_unsupported(fmt_new, minor, " (free-threaded)");
      return;
    }
    if (minor > 13) {
      pl_py_unsupported(fmt_new, minor, "");
      return;
    }
    if (d == NULL || memcmp(d->cookie, "xdebugpy", 8) != 0 ||
        ((d->version >> 16) & 0xffff) != 0x030d) {
      pl_py_unsupported(fmt_new, minor, " (its _Py_DebugOffsets are missing)");
      return;
    }
    pl_py_layout l = pl_py_layouts[3];
    l.ts_frame = (uint16_t)d->thread_state.current_frame;
    l.fr_previous = (uint16_t)d->interpreter_frame.previous;
    l.fr_code = (uint16_t)d->interpreter_frame.executable;
    l.fr_instr = (uint16_t)d->interpreter_frame.instr_ptr;
    l.fr_owner = (uint16_t)d->interpreter_frame.owner;
    l.co_filename = (uint16_t)d->code_object.filename;
    l.co_name = (uint16_t)d->code_object.qualname;
    l.co_firstlineno = (uint16_t)d->code_object.firstlineno;
    l.co_linetable = (uint16_t)d->code_object.linetable;
    l.co_code_adaptive = (uint16_t)d->code_object.co_code_adaptive;
    l.str_ascii_size = (uint16_t)d->unicode_object.asciiobject_size;
    pl_py_L = l;
  } else if (minor >= 10) {
    pl_py_L = pl_py_layouts[minor - 10];
    pl_py_runtime = (uintptr_t)pl_real_dlsym(RTLD_DEFAULT, "_PyRuntime");
  } else {
    pl_py_unsupported(fmt_new, minor, "");
    return;
  }
  int err;
  if (!pl_py_probe_works(&err)) {
    if (err != 0 && err != EINVAL && err != EFAULT) {
      pl_py_refused(err);
    } else {
      snprintf(pl_py_why, sizeof pl_py_why,
               "Python frames are not recorded: this kernel's rt_sigprocmask does not tell "
               "readable memory from unreadable (an emulator?); call and allocation sites show "
               "native frames only");
      pl_py_state = PL_PY_UNSUPPORTED;
    }
    return;
  }
  pl_py_state = PL_PY_ON;
}
