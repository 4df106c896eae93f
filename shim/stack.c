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
#include <execinfo.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pl_internal.h"

#define PL_STACK_SLOTS 4096 /* power of two */

/* A slot is claimed by one thread (EMPTY -> BUSY), filled, then published
 * (READY, release).  A prober that meets a BUSY slot passes it by instead
 * of waiting: at worst the same stack gets two ids, which the report merges
 * (it keys its rows by the frame it shows).  DEAD: claimed when the table
 * had no id left. */
enum { PL_SLOT_EMPTY = 0, PL_SLOT_BUSY, PL_SLOT_READY, PL_SLOT_DEAD };

typedef struct pl_stack_slot {
  _Atomic uint32_t state;
  uint32_t id, depth;
  uint64_t hash;
  bool emitted; /* its STACK record is in the trace (under pl_emit_lock) */
  void *frames[PAGELOCK_MAX_FRAMES];
  pl_pystack py; /* the Python frames of the call, depth 0 none */
} pl_stack_slot;

static pl_stack_slot pl_stacks[PL_STACK_SLOTS];
static pl_stack_slot *pl_stack_by_id[PL_STACK_SLOTS]; /* id -> slot */
static atomic_uint pl_stack_count;
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
 * a repeat of the same call path without unwinding.  Distinct paths through
 * one return address almost always sit at different depths; a collision
 * would only attribute a call to a sibling path of the same caller. */
#define PL_MEMO 16
typedef struct pl_stack_memo {
  uintptr_t ra, sp;
  uint64_t py; /* pl_py_hash of the Python frames: one call site, many lines */
  uint32_t id;
} pl_stack_memo;
static PL_TLS pl_stack_memo pl_memo[PL_MEMO];

static pl_stack_memo *pl_memo_slot(uintptr_t r, uintptr_t p) {
  return &pl_memo[((r >> 4) ^ (p >> 4) ^ (p >> 12)) & (PL_MEMO - 1)];
}

static bool pl_py_same(const pl_pystack *a, const pl_pystack *b) {
  return a->depth == b->depth && a->flags == b->flags &&
         memcmp(a->f, b->f, a->depth * sizeof a->f[0]) == 0;
}

/* The id of stack f[0..n) with Python frames py, interning it when new; 0
 * when the table is full.  Loads, stores and compare-and-swaps only. */
static uint32_t pl_stack_intern(void *const *f, int n, const pl_pystack *py) {
  uint64_t h = pl_hash_frames(f, n) ^ pl_py_hash(py);
  for (uint32_t i = 0; i < PL_STACK_SLOTS; i++) {
    pl_stack_slot *s = &pl_stacks[(h + i) & (PL_STACK_SLOTS - 1)];
    uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st == PL_SLOT_EMPTY) {
      /* Keep a quarter free so probes stay short. */
      if (atomic_load_explicit(&pl_stack_count, memory_order_relaxed) >= PL_STACK_SLOTS * 3 / 4)
        break;
      if (!atomic_compare_exchange_strong(&s->state, &st, PL_SLOT_BUSY)) {
        if (st != PL_SLOT_READY) continue; /* another thread's, not ready yet */
      } else {
        uint32_t id = atomic_fetch_add(&pl_stack_count, 1) + 1;
        if (id > PL_STACK_SLOTS * 3 / 4) {
          atomic_store_explicit(&s->state, PL_SLOT_DEAD, memory_order_release);
          break;
        }
        s->hash = h;
        s->depth = (uint32_t)n;
        memcpy(s->frames, f, sizeof(void *) * (size_t)n);
        s->py = *py;
        s->id = id;
        s->emitted = false;
        atomic_store_explicit(&s->state, PL_SLOT_READY, memory_order_release);
        __atomic_store_n(&pl_stack_by_id[id], s, __ATOMIC_RELEASE);
        return id;
      }
    }
    if (st != PL_SLOT_READY) continue;
    if (s->hash == h && s->depth == (uint32_t)n &&
        memcmp(s->frames, f, sizeof(void *) * (size_t)n) == 0 && pl_py_same(&s->py, py))
      return s->id;
  }
  pl_log(PL_LOG_INFO, PL_LK_STACK_TABLE_FULL,
         "too many distinct call stacks; later ones are not recorded");
  return 0;
}

/* In a Python program the same native path (ctypes, libtorch) serves
 * every line of the script, at the same stack depth: the memo key holds
 * the Python frames' hash too, so the walk (pystack.c) runs on every call
 * and the unwind only once per (native path, Python frames). */
uint32_t pl_stack_capture_at(int skip, const void *ra, const void *sp) {
  if (pl_opt_long(PL_OPT_BACKTRACE_DEPTH) <= 0) return 0;
  pl_pystack py;
  pl_py_capture(&py);
  uint64_t ph = pl_py_hash(&py);
  uintptr_t r = (uintptr_t)ra, p = (uintptr_t)sp;
  pl_stack_memo *m = pl_memo_slot(r, p ^ ph);
  if (m->id != 0 && m->ra == r && m->sp == p && m->py == ph) return m->id;
  uint32_t id = pl_stack_capture(skip + 1);
  if (id != 0) {
    m->ra = r;
    m->sp = p;
    m->py = ph;
    m->id = id;
  }
  return id;
}

uint32_t pl_stack_capture(int skip) {
  int depth = (int)pl_opt_long(PL_OPT_BACKTRACE_DEPTH);
  if (depth <= 0) return 0;
  void *buf[PAGELOCK_MAX_FRAMES + 8];
  if (skip > 8) skip = 8;
  int n = backtrace(buf, depth + skip) - skip;
  if (n <= 0) return 0;
  pl_pystack py;
  pl_py_capture(&py);
  return pl_stack_intern(buf + skip, n, &py);
}

uint32_t pl_stack_capture_ra(const void *ra) {
  if (ra == NULL || pl_opt_long(PL_OPT_BACKTRACE_DEPTH) <= 0) return 0;
  /* sp 1 is never a stack address: no full stack shares these entries. */
  uintptr_t r = (uintptr_t)ra;
  pl_stack_memo *m = pl_memo_slot(r, 1);
  if (m->id != 0 && m->ra == r && m->sp == 1) return m->id;
  void *f = (void *)ra;
  /* No Python frames: the mmap family may be entered by an allocator in
   * the middle of its own bookkeeping (pymalloc's arenas among them). */
  static const pl_pystack none;
  uint32_t id = pl_stack_intern(&f, 1, &none);
  if (id != 0) {
    m->ra = r;
    m->sp = 1;
    m->py = 0;
    m->id = id;
  }
  return id;
}

void pl_stack_warm(void) {
  if (pl_opt_long(PL_OPT_BACKTRACE_DEPTH) <= 0) return;
  void *f[4];
  (void)backtrace(f, 4);
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
  pl_stack_slot *s = __atomic_load_n(&pl_stack_by_id[id], __ATOMIC_ACQUIRE);
  if (s == NULL || __atomic_load_n(&s->emitted, __ATOMIC_ACQUIRE)) return;
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

static int pl_cmp_addr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

void pl_stack_write_symbols(void) {
  static uintptr_t addrs[PL_STACK_SLOTS * PAGELOCK_MAX_FRAMES];
  size_t n = 0;
  pthread_mutex_lock(&pl_emit_lock);
  for (uint32_t i = 0; i < PL_STACK_SLOTS; i++) {
    pl_stack_slot *s = &pl_stacks[i];
    if (atomic_load_explicit(&s->state, memory_order_acquire) != PL_SLOT_READY || !s->emitted)
      continue;
    for (uint32_t k = 0; k < s->depth; k++) addrs[n++] = (uintptr_t)s->frames[k];
  }
  pthread_mutex_unlock(&pl_emit_lock);
  qsort(addrs, n, sizeof addrs[0], pl_cmp_addr);
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

void pl_stack_reset(void) {
  /* The child keeps the interned stacks (its allocations were made by the
   * same code) but writes a new trace, so every record is due again. */
  pthread_mutex_init(&pl_emit_lock, NULL);
  pl_note_written = false;
  for (uint32_t i = 0; i < PL_STACK_SLOTS; i++) pl_stacks[i].emitted = false;
  pl_py_reset();
}

void pl_stack_atfork_prepare(void) { pthread_mutex_lock(&pl_emit_lock); }
void pl_stack_atfork_parent(void) { pthread_mutex_unlock(&pl_emit_lock); }
