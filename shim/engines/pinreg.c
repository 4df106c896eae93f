/* pinreg.c - the shim's own registrations, and the thread that makes them.
 *
 * A table of at most PL_PIN_SLOTS registrations in static memory (no
 * malloc: the release hooks consult it from inside free, munmap and
 * madvise), one lock, and one thread, `pagelock-pin`, that makes every
 * cuMemHostRegister and most cuMemHostUnregister calls, so that the
 * program's threads never wait for one: registering 1 GiB costs ~65 ms on
 * the H100 host, undoing it ~21 ms (issue 18).
 *
 * A slot goes
 *
 *   REQUESTED -> REGISTERING -> LIVE -> UNDO -> UNDOING -> free
 *        \             \                           ^
 *         `-> free      `-> free (refused)         |
 *                                  release hook ---'
 *
 * REQUESTED: queued for the thread; counts against the budget.  LIVE: the
 * copies may hold it (pl_pinreg_hold).  UNDO: queued for the thread to
 * undo (an eviction, or a free() handed over whole, pl_pinreg_defer_free),
 * which waits until no copy holds it.  UNDOING: a cuMemHostUnregister is
 * under way.  A release hook (munmap, mremap, madvise, brk) does its own
 * undo, synchronously, before the memory goes: a hook cannot wait for the
 * thread, which may be busy registering something else for tens of ms.
 * Where the releasing thread may not wait at all (a signal handler that
 * interrupted the shim, a host function's thread: pl_may_wait) the hook
 * reads the slots' view published without the lock, makes the release
 * safe for the program without undoing anything (an unmapped range stays
 * mapped, inaccessible), and hands the rest to the thread through a
 * lock-free table (pl_defer_put), waking it with a futex.
 *
 * Rules that keep this safe:
 *  - the lock is never held across a driver call, an allocation or the
 *    next allocator's free, so the release hooks may take it anywhere
 *    (inside an allocator's own lock: the lock's holders never need it);
 *  - a registration's bytes count against PAGELOCK_REGISTER_BUDGET from
 *    its request until the driver has undone it, and the thread registers
 *    only what fits beside what the driver still holds, so the driver
 *    never holds more than the budget, evictions still under way included;
 *  - the driver calls name the slot's context (pushed): registrations are
 *    PORTABLE, but a call needs some context current, and the releasing
 *    thread may have none;
 *  - registered ranges never overlap: one allocation's pages each
 *    (pl_reg_span, autopin.c), and a request overlapping any slot is
 *    refused. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pinreg.h"
#include "hostmem.h"

/* Registrations at most, live and in flight.  Each is at least one
 * PAGELOCK_TRACK_MIN allocation (64 KiB): 4096 of them cover 256 MiB at
 * that size, and the budget binds long before with the large buffers this
 * is for.  A request finding no free slot is staged (why=BUDGET). */
#define PL_PIN_SLOTS 4096u

/* A registration copied within this long is not evicted: two hot sets
 * larger than the budget together would otherwise evict each other at
 * every step, paying ~86 ms per GiB registered and undone each time
 * (issue 18, H100 host), against ~18 ms per GiB saved per staged upload. */
#ifndef PL_PIN_IDLE_NS
#define PL_PIN_IDLE_NS 1000000000ull
#endif

/* How long a range the program page-locks itself stays closed to the
 * shim: from just before its cuMemHostRegister (pl_pinreg_yield) until
 * the registry records the program's registration, after which such
 * memory never classifies as pageable again.  Its call may itself take
 * tens of ms per GiB. */
#define PL_FENCE_NS 10000000000ull
#define PL_FENCES 8u

enum pl_pin_state {
  PL_PS_FREE = 0,
  PL_PS_REQUESTED,
  PL_PS_REGISTERING,
  PL_PS_LIVE,
  PL_PS_UNDO,
  PL_PS_UNDOING,
};

typedef struct pl_pin {
  uintptr_t base, end; /* what is registered (pl_reg_span) */
  uintptr_t done;      /* [base, done) is registered: whole pieces */
  uintptr_t abase;     /* the allocation */
  size_t alen;
  CUcontext ctx;    /* the requesting copy's context */
  uint64_t used_ns; /* last held (eviction order) */
  void *free_ptr;   /* a free() handed over: next_free(free_ptr) after the undo */
  void (*free_fn)(void *);
  uint32_t holds;
  uint8_t state;
  bool dying; /* released while REGISTERING: undo once registered */
  bool graph; /* a graph refers to it: never evicted */
  bool evict; /* this undo is an eviction */
  bool gone;  /* its context ended: the driver undid it (pl_pinreg_ctx_gone) */
} pl_pin;

typedef struct pl_fence {
  uintptr_t base, end;
  uint64_t until_ns;
} pl_fence;

static pthread_mutex_t pl_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pl_pin_done = PTHREAD_COND_INITIALIZER; /* waiters: a slot changed state */

/* Under pl_pin_lock: */
static pl_pin pl_pins[PL_PIN_SLOTS];  /* [0] unused: slot 0 means "none" */
static uint32_t pl_idx[PL_PIN_SLOTS]; /* slots not free, by base */
static uint32_t pl_nidx;
static uint32_t pl_spare[PL_PIN_SLOTS]; /* free slot numbers */
static uint32_t pl_nspare;
static bool pl_slots_ready;
static uint64_t pl_committed; /* REQUESTED, REGISTERING, LIVE (not dying) */
static uint64_t pl_kicks;     /* bumped whenever the thread may have work */
/* Calls other engines hand to the thread (pl_pinreg_post), oldest first. */
#define PL_POSTS 8
static struct {
  void (*fn)(void *);
  void *arg;
} pl_posts[PL_POSTS];
static unsigned pl_nposts, pl_posts_running;
static pl_fence pl_fences[PL_FENCES];

/* Read without the lock: */
static atomic_uint pl_pin_count; /* slots not free: pl_pinreg_any */
static atomic_uint_fast64_t pl_drv_bytes,
    pl_drv_high; /* held by the driver (or being registered) */
static atomic_uint_fast64_t pl_n_reg, pl_n_unreg, pl_n_evict, pl_n_fail, pl_reg_ns;
static atomic_int pl_thread_state;     /* 0 none, 1 starting, 2 running, -1 cannot */
static atomic_bool pl_pin_off;         /* forked child, or exiting */
static atomic_bool pl_pin_used;        /* something was requested: COUNTERS carry it */
static atomic_uint_fast64_t pl_budget; /* 0 until first needed */
static PL_TLS bool pl_on_pin_thread;
static atomic_uint_fast64_t pl_idle_ns = PL_PIN_IDLE_NS;

#define PL_ADD(ctr, v) atomic_fetch_add_explicit(&(ctr), (v), memory_order_relaxed)

/* How many of pl_pin_lock this thread holds, is about to take or waits on
 * (a condition wait): a release hook running meanwhile on the same thread
 * (a signal handler's munmap) must not take it.  Raised before the lock is
 * taken and lowered after it is given back, so no instant is missed. */
static PL_TLS unsigned pl_tls_locked;
/* The driver refuses calls on this thread: it runs the program's host
 * functions (pl_pinreg_note_hostfn, or a refusal seen). */
static PL_TLS bool pl_tls_nodriver;

static void pl_lock(void) {
  pl_tls_locked++;
  atomic_signal_fence(memory_order_seq_cst);
  pthread_mutex_lock(&pl_pin_lock);
}
static void pl_unlock(void) {
  pthread_mutex_unlock(&pl_pin_lock);
  atomic_signal_fence(memory_order_seq_cst);
  pl_tls_locked--;
}

/* ---- budget ---------------------------------------------------------------- */

static uint64_t pl_pin_budget(void) {
  uint64_t b = atomic_load_explicit(&pl_budget, memory_order_relaxed);
  if (PL_LIKELY(b != 0)) return b;
  b = (uint64_t)pl_opt_long(PL_OPT_REGISTER_BUDGET);
  if (b == 0) {
    /* A quarter of physical memory: page-locked memory cannot be swapped
     * or reclaimed, and the rest stays the program's and the kernel's.
     * The 1 GiB offload pattern of issue 18 fits on any host with more
     * than 4 GiB; a 16 GiB CI machine gets 4 GiB. */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    b = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : (uint64_t)1 << 30;
  }
  atomic_store_explicit(&pl_budget, b, memory_order_relaxed);
  return b;
}

/* ---- the view without the lock ----------------------------------------------- */

/* Every slot's range and allocation base, written under the lock as the
 * slot is taken and given back, read without it by the release hooks of
 * a thread that may not take the lock (pl_may_wait).  A registration's
 * values stand still from its request until after its undo, so a reader
 * can only misread a slot in the middle of being taken or given back,
 * which nothing is registered in. */
static _Atomic uintptr_t pl_vbase[PL_PIN_SLOTS], pl_vend[PL_PIN_SLOTS], pl_vabase[PL_PIN_SLOTS];
static atomic_uint pl_vtop; /* slots [1, pl_vtop) were ever taken */

static void pl_view_publish(uint32_t s, uintptr_t base, uintptr_t end, uintptr_t abase) {
  if (end == 0) atomic_store_explicit(&pl_vend[s], 0, memory_order_release);
  atomic_store_explicit(&pl_vbase[s], base, memory_order_relaxed);
  atomic_store_explicit(&pl_vabase[s], abase, memory_order_relaxed);
  if (end != 0) atomic_store_explicit(&pl_vend[s], end, memory_order_release);
  if (s >= atomic_load_explicit(&pl_vtop, memory_order_relaxed))
    atomic_store_explicit(&pl_vtop, s + 1, memory_order_release);
}

/* The lowest part [*sb, *se) of [from, end) that a slot covers: no lock,
 * no system call, async-signal-safe.  A slot read changing under us is
 * skipped: it is being taken or given back. */
static bool pl_view_next(uintptr_t from, uintptr_t end, uintptr_t *sb, uintptr_t *se) {
  unsigned top = atomic_load_explicit(&pl_vtop, memory_order_acquire);
  uintptr_t lo = end, hi = end;
  for (unsigned s = 1; s < top; s++) {
    uintptr_t e = atomic_load_explicit(&pl_vend[s], memory_order_acquire);
    if (e <= from) continue;
    uintptr_t b = atomic_load_explicit(&pl_vbase[s], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&pl_vend[s], memory_order_relaxed) != e || b >= end || b >= e)
      continue;
    if (b < from) b = from;
    if (b < lo) {
      lo = b;
      hi = e < end ? e : end;
    }
  }
  *sb = lo;
  *se = hi;
  return lo < end;
}

/* The slot whose allocation starts at a, without the lock (0: none). */
static uint32_t pl_view_alloc(uintptr_t a) {
  unsigned top = atomic_load_explicit(&pl_vtop, memory_order_acquire);
  for (unsigned s = 1; s < top; s++)
    if (atomic_load_explicit(&pl_vend[s], memory_order_acquire) != 0 &&
        atomic_load_explicit(&pl_vabase[s], memory_order_relaxed) == a)
      return s;
  return 0;
}

/* ---- releases handed to the thread ---------------------------------------------- */

/* What the thread does with a release handed over: undo, then unmap the
 * quarantine; undo only; take a free() (undo, then the next free). */
enum { PL_DF_UNMAP = 1, PL_DF_UNDO, PL_DF_FREE };
/* Entry states: free, being filled, ready, claimed by the thread for its
 * munmap, cancelled (the program mapped over it: pl_pinreg_map_fixed). */
enum { PL_DS_FREE = 0, PL_DS_FILLING, PL_DS_READY, PL_DS_UNMAPPING, PL_DS_CANCELLED };
#define PL_DEFERS 256u
typedef struct pl_defer {
  atomic_int state;
  /* Atomic only so that pl_pinreg_map_fixed may look at an entry being
   * filled: it trusts them only once it has the state. */
  _Atomic int op;
  _Atomic uintptr_t base;
  _Atomic size_t len;
  void *ptr;
  void (*fn)(void *);
} pl_defer;
static pl_defer pl_defers[PL_DEFERS];
static atomic_uint pl_ndefers;             /* entries not free */
static atomic_uint_fast64_t pl_n_stranded; /* releases the full table could not take */

static void pl_defers_run(void);

/* ---- the slot table (pl_pin_lock held) ------------------------------------ */

static void pl_slots_init(void) {
  if (pl_slots_ready) return;
  pl_nspare = 0;
  for (uint32_t i = PL_PIN_SLOTS - 1; i >= 1; i--) pl_spare[pl_nspare++] = i;
  pl_slots_ready = true;
}

/* Position in pl_idx of the first slot whose end lies above p (slots do
 * not overlap, so ends ascend with bases). */
static uint32_t pl_idx_after(uintptr_t p) {
  uint32_t lo = 0, hi = pl_nidx;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (pl_pins[pl_idx[mid]].end <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The slot overlapping [p, p+n), the lowest one; 0 when none. */
static uint32_t pl_slot_overlap(uintptr_t p, size_t n) {
  uint32_t k = pl_idx_after(p);
  if (k < pl_nidx && pl_pins[pl_idx[k]].base < p + n) return pl_idx[k];
  return 0;
}

static uint32_t pl_slot_take(uintptr_t base, uintptr_t end, uintptr_t abase) {
  pl_slots_init();
  if (pl_nspare == 0) return 0;
  uint32_t s = pl_spare[--pl_nspare];
  pl_pins[s] = (pl_pin){.base = base, .end = end, .done = base, .abase = abase};
  pl_view_publish(s, base, end, abase);
  uint32_t k = pl_idx_after(base);
  memmove(&pl_idx[k + 1], &pl_idx[k], (pl_nidx - k) * sizeof pl_idx[0]);
  pl_idx[k] = s;
  pl_nidx++;
  atomic_fetch_add_explicit(&pl_pin_count, 1, memory_order_release);
  return s;
}

static void pl_slot_put(uint32_t s) {
  uint32_t k = pl_idx_after(pl_pins[s].base);
  while (k < pl_nidx && pl_idx[k] != s) k++;
  if (k < pl_nidx) {
    memmove(&pl_idx[k], &pl_idx[k + 1], (pl_nidx - k - 1) * sizeof pl_idx[0]);
    pl_nidx--;
  }
  pl_pins[s].state = PL_PS_FREE;
  pl_view_publish(s, 0, 0, 0);
  pl_spare[pl_nspare++] = s;
  atomic_fetch_sub_explicit(&pl_pin_count, 1, memory_order_release);
}

/* The word the thread sleeps on (a futex, so that a release hook may wake
 * it from anywhere, a signal handler included), bumped whenever the
 * thread may have work. */
static atomic_uint pl_wake_word;

static void pl_wake(void) {
  atomic_fetch_add(&pl_wake_word, 1);
  syscall(SYS_futex, &pl_wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void pl_kick(void) {
  pl_kicks++;
  pl_wake();
}

static bool pl_fenced(uintptr_t base, uintptr_t end, uint64_t now) {
  for (unsigned i = 0; i < PL_FENCES; i++)
    if (pl_fences[i].until_ns > now && pl_fences[i].base < end && base < pl_fences[i].end)
      return true;
  return false;
}

/* A request not started leaves the budget and its slot. */
static void pl_slot_drop(uint32_t s) {
  pl_committed -= pl_pins[s].end - pl_pins[s].base;
  pl_slot_put(s);
}

/* A LIVE slot leaves the budget: it is queued for undoing. */
static void pl_slot_undo(uint32_t s) {
  pl_pin *e = &pl_pins[s];
  if (e->state == PL_PS_LIVE) pl_committed -= e->end - e->base;
  e->state = PL_PS_UNDO;
  pl_kick();
}

/* ---- the driver calls (no lock held) ---------------------------------------- */

/* Let this thread make registrations while another captures in global
 * mode: registering is an "unsafe" call there, which would invalidate
 * that capture (CUDA's cuThreadExchangeStreamCaptureMode). */
static bool pl_relax(const pl_drv *d, CUstreamCaptureMode *old) {
  if (d->ThreadExchangeStreamCaptureMode == NULL) return false;
  *old = CU_STREAM_CAPTURE_MODE_RELAXED;
  return d->ThreadExchangeStreamCaptureMode(old) == CUDA_SUCCESS;
}

/* Undo the pieces registered in [base, done); the first error is the
 * answer, and the other pieces are still undone. */
static CUresult pl_drv_unregister(uintptr_t base, uintptr_t done, CUcontext ctx) {
  const pl_drv *d = pl_drv_engines(); /* resolved: pl_drv_resolve */
  CUstreamCaptureMode m;
  bool relaxed = pl_relax(d, &m);
  CUresult r = d->CtxPushCurrent(ctx);
  if (r == CUDA_SUCCESS) {
    for (uintptr_t at = base; at < done; at = pl_pin_piece_end(base, at)) {
      CUresult e = d->MemHostUnregister((void *)at);
      if (r == CUDA_SUCCESS) r = e;
    }
    CUcontext dummy;
    d->CtxPopCurrent(&dummy);
  }
  if (relaxed) d->ThreadExchangeStreamCaptureMode(&m);
  return r;
}

/* Undo slot s, which this thread set UNDOING (lock not held); then free
 * it and hand back a free() it carried.  Returns with the lock not held;
 * false when the driver refused this thread (a host function's, error
 * 800): the slot is the shim's thread's to undo again, nothing was
 * undone, and the thread calls the driver no more. */
static bool pl_undo_now(uint32_t s) {
  pl_pin *e = &pl_pins[s];
  uintptr_t base = e->base;
  uint64_t t0 = pl_now_ns();
  /* Not in a context that has ended: its handle may be freed, and the
   * registration went with it. */
  CUresult r = e->gone ? CUDA_SUCCESS : pl_drv_unregister(base, e->done, e->ctx);
  if (r == CUDA_ERROR_NOT_PERMITTED && !pl_on_pin_thread) {
    pl_tls_nodriver = true;
    pl_lock();
    e->state = PL_PS_UNDO;
    pl_kick();
    pl_unlock();
    return false;
  }
  pl_log(PL_LOG_DEBUG, PL_LK_EVENT, "unregistered %zu KiB in %.2f ms (error %d) at %.6f s",
         (size_t)(e->end - base) >> 10, (double)(pl_now_ns() - t0) / 1e6, (int)r, (double)t0 / 1e9);
  pl_hostmem_shim_remove(base);
  /* A driver shut down already undid everything with its contexts. */
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED && !atomic_load(&pl_pin_off))
    pl_log(PL_LOG_WARN, PL_LK_UNREGISTER,
           "could not undo a registration of its own (error %d); continuing", (int)r);
  pl_lock();
  atomic_fetch_sub(&pl_drv_bytes, e->end - e->base);
  PL_ADD(pl_n_unreg, 1);
  if (e->evict) PL_ADD(pl_n_evict, 1);
  void *fp = e->free_ptr;
  void (*ff)(void *) = e->free_fn;
  pl_slot_put(s);
  pl_kick();
  pthread_cond_broadcast(&pl_pin_done);
  pl_unlock();
  if (ff) ff(fp);
  return true;
}

/* The driver refused to register an allocation: its copies are staged
 * from now on. */
static void pl_register_failed(uintptr_t abase, size_t alen, size_t len, CUresult r) {
  if (atomic_load(&pl_pin_off)) return;
  PL_ADD(pl_n_fail, 1);
  pl_hostmem_mark(abase, alen, PL_ALLOC_REG_FAILED);
  pl_log(PL_LOG_WARN, PL_LK_REGISTER,
         "could not page-lock a %zu-byte buffer (error %d): its copies are staged instead "
         "where staging works (from PAGELOCK_STAGE_MIN up), else pass through; "
         "this is logged once (RLIMIT_MEMLOCK or the driver's limits?)",
         len, (int)r);
}

/* The pause between two pieces of a registration (PL_PIN_PIECE): long
 * enough for the program's threads waiting in the driver to get in first
 * (with none, an upload beside 8 MiB pieces still waited for all 32 of
 * them, probe_register.c), and 16 pauses add 0.8 ms to a 256 MiB
 * registration that takes 12-19 ms. */
#define PL_PIECE_PAUSE_NS 50000L

/* Register slot s's pieces in order, which this thread set REGISTERING
 * (lock not held); the copies may use each piece as soon as it is made
 * (pl_pinreg_hold).  Stops early when the memory is released meanwhile. */
static CUresult pl_register_pieces(pl_pin *e) {
  const pl_drv *d = pl_drv_engines(); /* resolved: pl_drv_resolve */
  CUresult r = d->CtxPushCurrent(e->ctx);
  if (r != CUDA_SUCCESS) return r;
  for (uintptr_t at = e->base; at < e->end;) {
    uintptr_t next = pl_pin_piece_end(e->base, at);
    if (next > e->end) next = e->end;
    r = d->MemHostRegister((void *)at, next - at, CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS) break;
    pl_lock();
    e->done = next;
    bool stop = e->dying;
    pthread_cond_broadcast(&pl_pin_done); /* copies following the pieces */
    pl_unlock();
    if (stop) break;
    at = next;
    if (at < e->end) {
      struct timespec ts = {0, PL_PIECE_PAUSE_NS};
      nanosleep(&ts, NULL);
    }
  }
  CUcontext dummy;
  d->CtxPopCurrent(&dummy);
  return r;
}

/* Register slot s, which this thread set REGISTERING (lock not held). */
static void pl_register_now(uint32_t s) {
  pl_pin *e = &pl_pins[s];
  uintptr_t base = e->base, abase = e->abase;
  size_t len = e->end - e->base, alen = e->alen;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  uintptr_t tb;
  size_t tn;
  int kind;
  /* Still the allocation it was asked for: a copy racing the program's
   * own free of it must not leave a registration on reused memory. */
  bool tracked = pl_hostmem_lookup(abase, &tb, &tn, &kind) && tb == abase && tn == alen;
  bool noted = tracked && pl_hostmem_shim_add(base, len);
  uint64_t t0 = pl_now_ns(), dt = 0;
  if (noted) {
    r = pl_register_pieces(e);
    dt = pl_now_ns() - t0;
    pl_log(PL_LOG_DEBUG, PL_LK_EVENT, "registered %zu of %zu KiB in %.2f ms (error %d) at %.6f s",
           (size_t)(e->done - base) >> 10, len >> 10, (double)dt / 1e6, (int)r, (double)t0 / 1e9);
  }
  pl_lock();
  if (r == CUDA_SUCCESS || e->done > base) {
    /* Refused after its first pieces: what was made is undone as a
     * release would, and the allocation is staged from now on. */
    bool failed = r != CUDA_SUCCESS;
    if (failed && !e->dying) pl_committed -= len;
    if (!failed) {
      PL_ADD(pl_n_reg, 1);
      PL_ADD(pl_reg_ns, dt);
    }
    e->used_ns = pl_now_ns();
    /* Released meanwhile: its bytes already left the budget. */
    e->state = e->dying || failed ? PL_PS_UNDO : PL_PS_LIVE;
    if (e->state == PL_PS_UNDO) pl_kick();
    pthread_cond_broadcast(&pl_pin_done);
    pl_unlock();
    if (failed) pl_register_failed(abase, alen, len, r);
    return;
  }
  atomic_fetch_sub(&pl_drv_bytes, len);
  if (!e->dying) pl_committed -= len;
  void *fp = e->free_ptr;
  void (*ff)(void *) = e->free_fn;
  pl_slot_put(s);
  pthread_cond_broadcast(&pl_pin_done);
  pl_unlock();
  if (noted) pl_hostmem_shim_remove(base);
  if (tracked) pl_register_failed(abase, alen, len, r);
  if (ff) ff(fp);
}

/* ---- the thread ------------------------------------------------------------ */

static atomic_bool pl_pin_stop;

/* The next job, lock held: an undo first (it frees room and memory), else
 * a registration that fits beside what the driver still holds.  Sets its
 * state; 0 when none. */
static uint32_t pl_next_job(bool *undo) {
  uint64_t now = pl_now_ns(), budget = pl_pin_budget();
  uint32_t reg = 0;
  for (uint32_t k = 0; k < pl_nidx; k++) {
    uint32_t s = pl_idx[k];
    pl_pin *e = &pl_pins[s];
    if (e->state == PL_PS_UNDO && e->holds == 0) {
      e->state = PL_PS_UNDOING;
      *undo = true;
      return s;
    }
    if (e->state == PL_PS_REQUESTED && reg == 0) {
      if (pl_fenced(e->base, e->end, now)) {
        /* The program page-locks this memory itself: drop the request. */
        pl_slot_drop(s);
        pthread_cond_broadcast(&pl_pin_done);
        k--;
        continue;
      }
      if (atomic_load(&pl_drv_bytes) + (e->end - e->base) <= budget) reg = s;
    }
  }
  if (reg) {
    pl_pin *e = &pl_pins[reg];
    e->state = PL_PS_REGISTERING;
    uint64_t b = atomic_fetch_add(&pl_drv_bytes, e->end - e->base) + (e->end - e->base);
    uint64_t hw = atomic_load(&pl_drv_high);
    while (b > hw && !atomic_compare_exchange_weak(&pl_drv_high, &hw, b)) {}
    *undo = false;
  }
  return reg;
}

static void *pl_pin_main(void *arg) {
  (void)arg;
  pl_shim_own_thread();
  pl_on_pin_thread = true;
  CUstreamCaptureMode m;
  pl_relax(pl_drv_engines(), &m); /* for the life of the thread */
  pl_lock();
  uint64_t seen = pl_kicks - 1;
  while (!atomic_load(&pl_pin_stop)) {
    if (seen == pl_kicks && atomic_load(&pl_ndefers) == 0) {
      /* The word first, then the checks: work handed over after them
       * changes the word, and the wait returns at once. */
      unsigned w = atomic_load(&pl_wake_word);
      if (seen == pl_kicks && atomic_load(&pl_ndefers) == 0 && !atomic_load(&pl_pin_stop)) {
        pl_unlock();
        syscall(SYS_futex, &pl_wake_word, FUTEX_WAIT_PRIVATE, w, NULL, NULL, 0);
        pl_lock();
      }
      continue;
    }
    seen = pl_kicks;
    if (atomic_load(&pl_ndefers) != 0) {
      pl_unlock();
      pl_defers_run();
      pl_lock();
    }
    /* Registrations and undos first: a copy or a free of the program's
     * waits on them; a posted call (a pool's prewarm) is speculative. */
    bool undo;
    uint32_t s;
    while ((s = pl_next_job(&undo)) != 0 && !atomic_load(&pl_pin_stop)) {
      pl_unlock();
      if (undo)
        pl_undo_now(s);
      else
        pl_register_now(s);
      pl_lock();
      seen = pl_kicks;
    }
    /* Then one posted call, and back to the jobs that came meanwhile. */
    if (pl_nposts > 0 && !atomic_load(&pl_pin_stop)) {
      void (*fn)(void *) = pl_posts[0].fn;
      void *arg = pl_posts[0].arg;
      memmove(&pl_posts[0], &pl_posts[1], (--pl_nposts) * sizeof pl_posts[0]);
      pl_posts_running++;
      pl_unlock();
      fn(arg);
      pl_lock();
      pl_posts_running--;
      pthread_cond_broadcast(&pl_pin_done);
      seen = pl_kicks - 1;
    }
  }
  pl_unlock();
  return NULL;
}

/* The driver's table, resolved by the copy path before the first
 * registration, so that no later call of the table's getter (a release
 * hook's undo among them) ever looks a symbol up. */
static bool pl_drv_resolve(void) { return pl_drv_engines() != NULL; }

/* Start the thread on the first request (the copy path: it may allocate). */
static bool pl_pin_start(void) {
  int st = atomic_load_explicit(&pl_thread_state, memory_order_acquire);
  if (PL_LIKELY(st == 2)) return true;
  if (st < 0) return false;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&pl_thread_state, &expected, 1)) {
    while ((st = atomic_load(&pl_thread_state)) == 1) sched_yield();
    return st == 2;
  }
  int rc = -1;
  if (pl_drv_resolve()) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_t t;
    pl_shim_enter();
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&t, &a, pl_pin_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) pthread_setname_np(t, "pagelock-pin");
    pl_shim_leave();
    pthread_attr_destroy(&a);
  }
  if (rc != 0)
    pl_log(PL_LOG_WARN, PL_LK_PIN_THREAD,
           "cannot start the registration thread: copies are staged instead where staging works "
           "(from PAGELOCK_STAGE_MIN up), else pass through");
  atomic_store_explicit(&pl_thread_state, rc == 0 ? 2 : -1, memory_order_release);
  return rc == 0;
}

/* ---- a context's end ------------------------------------------------------------ */

/* How long a teardown waits for the thread at most: one registration of
 * 1 GiB takes ~65 ms on the H100 host; a thread that never answers (it
 * stopped at exit with calls still posted) must not hang the program. */
#define PL_ENDING_WAIT_S 2

void pl_pinreg_ctx_ending(CUcontext ctx) {
  if (atomic_load_explicit(&pl_thread_state, memory_order_acquire) != 2 || atomic_load(&pl_pin_off))
    return;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += PL_ENDING_WAIT_S;
  pl_lock();
  for (;;) {
    bool busy = pl_nposts > 0 || pl_posts_running > 0;
    for (uint32_t k = 0; k < pl_nidx; k++) {
      pl_pin *e = &pl_pins[pl_idx[k]];
      if (e->ctx != ctx) continue;
      if (e->state == PL_PS_REQUESTED) {
        /* Not started: dropped, so that it does not start now. */
        pl_slot_drop(pl_idx[k]);
        k--;
      } else if (e->state == PL_PS_REGISTERING || e->state == PL_PS_UNDOING) {
        busy = true;
      }
    }
    if (!busy || atomic_load(&pl_pin_stop) ||
        pthread_cond_timedwait(&pl_pin_done, &pl_pin_lock, &until) != 0)
      break;
  }
  pthread_cond_broadcast(&pl_pin_done);
  pl_unlock();
}

/* One slot of ctx to forget, claimed UNDOING for the caller; 0 when none
 * is left.  Lock held.  Slots a copy holds, or the thread works on, are
 * marked and left to the thread. */
static uint32_t pl_gone_next(CUcontext ctx) {
  for (uint32_t k = 0; k < pl_nidx; k++) {
    uint32_t s = pl_idx[k];
    pl_pin *e = &pl_pins[s];
    if (e->ctx != ctx || e->gone) continue;
    e->gone = true;
    if (e->state == PL_PS_REQUESTED) {
      pl_slot_drop(s);
      k--;
    } else if ((e->state == PL_PS_LIVE || e->state == PL_PS_UNDO) && e->holds == 0) {
      if (e->state == PL_PS_LIVE) pl_committed -= e->end - e->base;
      e->state = PL_PS_UNDOING;
      return s;
    } else if (e->state == PL_PS_LIVE) {
      pl_slot_undo(s);
    } else if (e->state == PL_PS_REGISTERING && !e->dying) {
      e->dying = true; /* a program's race with its own teardown */
      pl_committed -= e->end - e->base;
    }
  }
  return 0;
}

void pl_pinreg_ctx_gone(CUcontext ctx) {
  if (!pl_pinreg_any()) return;
  /* Here rather than on the thread: the program may exit right after its
   * reset, before the thread came to them (8 MiB were left counted as
   * registered at exit on the H200 host). */
  for (;;) {
    pl_lock();
    uint32_t s = pl_gone_next(ctx);
    pthread_cond_broadcast(&pl_pin_done);
    pl_unlock();
    if (s == 0) return;
    pl_undo_now(s); /* no driver call: the slot is gone */
  }
}

/* ---- the interface ------------------------------------------------------------ */

bool pl_pinreg_any(void) { return atomic_load_explicit(&pl_pin_count, memory_order_acquire) != 0; }

/* Hold slot s for a copy starting at p, lock held: true when it may be
 * used now.  Being made, its first pieces serve a copy that starts in
 * them (or before them); the rest follows them. */
static bool pl_hold_locked(uint32_t s, uintptr_t p, pl_pin_use *use) {
  pl_pin *e = &pl_pins[s];
  bool ok = s != 0 && (e->state == PL_PS_LIVE || (e->state == PL_PS_REGISTERING && !e->dying &&
                                                  e->done > e->base && p < e->done));
  if (ok) {
    e->holds++;
    e->used_ns = pl_now_ns();
    *use = (pl_pin_use){.base = e->base,
                        .end = e->state == PL_PS_LIVE ? e->end : e->done,
                        .iend = e->end,
                        .slot = s};
  }
  return ok;
}

bool pl_pinreg_hold(uintptr_t p, size_t n, pl_pin_use *use) {
  use->slot = 0;
  if (!pl_pinreg_any()) return false;
  pl_lock();
  bool ok = pl_hold_locked(pl_slot_overlap(p, n ? n : 1), p, use);
  pl_unlock();
  return ok;
}

/* A condition wait's deadline, wait_ns from now (pl_pin_done waits on
 * the realtime clock). */
static struct timespec pl_deadline(uint64_t wait_ns) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += (time_t)(wait_ns / 1000000000u);
  t.tv_nsec += (long)(wait_ns % 1000000000u);
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

bool pl_pinreg_hold_wait(uintptr_t p, size_t n, pl_pin_use *use, uint64_t wait_ns) {
  use->slot = 0;
  if (!pl_pinreg_any()) return false;
  struct timespec until = pl_deadline(wait_ns);
  pl_lock();
  bool ok = false;
  for (;;) {
    uint32_t s = pl_slot_overlap(p, n ? n : 1);
    if ((ok = pl_hold_locked(s, p, use))) break;
    pl_pin *e = &pl_pins[s];
    if (s == 0 || e->dying || (e->state != PL_PS_REQUESTED && e->state != PL_PS_REGISTERING) ||
        pthread_cond_timedwait(&pl_pin_done, &pl_pin_lock, &until) != 0)
      break;
  }
  pl_unlock();
  return ok;
}

bool pl_pinreg_follow(pl_pin_use *use, uint64_t wait_ns) {
  if (use->slot == 0) return false;
  struct timespec until = pl_deadline(wait_ns);
  pl_lock();
  pl_pin *e = &pl_pins[use->slot];
  bool grew = false;
  for (;;) {
    uintptr_t end = e->state == PL_PS_LIVE                       ? e->end
                    : e->state == PL_PS_REGISTERING && !e->dying ? e->done
                                                                 : use->end;
    if ((grew = end > use->end)) {
      use->end = end;
      break;
    }
    if (e->state != PL_PS_REGISTERING || e->dying ||
        pthread_cond_timedwait(&pl_pin_done, &pl_pin_lock, &until) != 0)
      break;
  }
  pl_unlock();
  return grew;
}

void pl_pinreg_unhold(pl_pin_use *use) {
  if (use->slot == 0) return;
  pl_lock();
  pl_pin *e = &pl_pins[use->slot];
  if (--e->holds == 0 && e->state != PL_PS_LIVE) {
    pl_kick();
    pthread_cond_broadcast(&pl_pin_done);
  }
  pl_unlock();
  use->slot = 0;
}

bool pl_pinreg_find(uintptr_t p, uintptr_t *base, size_t *len) {
  if (!pl_pinreg_any()) return false;
  pl_lock();
  uint32_t s = pl_slot_overlap(p, 1);
  if (s) {
    *base = pl_pins[s].base;
    *len = pl_pins[s].end - pl_pins[s].base;
  }
  pl_unlock();
  return s != 0;
}

bool pl_pinreg_busy(uintptr_t p, size_t n) {
  if (!pl_pinreg_any()) return false;
  pl_lock();
  uint32_t s = pl_slot_overlap(p, n ? n : 1);
  bool busy = s != 0 && pl_pins[s].state != PL_PS_LIVE;
  pl_unlock();
  return busy;
}

bool pl_pinreg_touches(uintptr_t p, size_t n) {
  if (!pl_pinreg_any()) return false;
  pl_lock();
  bool t = pl_slot_overlap(p, n ? n : 1) != 0;
  pl_unlock();
  return t;
}

bool pl_pinreg_post(void (*fn)(void *), void *arg) {
  if (atomic_load(&pl_pin_off) || !pl_pin_start()) return false;
  pl_lock();
  bool room = pl_nposts < PL_POSTS;
  if (room) {
    pl_posts[pl_nposts].fn = fn;
    pl_posts[pl_nposts].arg = arg;
    pl_nposts++;
    pl_kick();
  }
  pl_unlock();
  return room;
}

bool pl_pinreg_request(uintptr_t base, size_t len, uintptr_t abase, size_t alen, CUcontext ctx) {
  if (len == 0 || atomic_load(&pl_pin_off)) return false;
  atomic_store_explicit(&pl_pin_used, true, memory_order_relaxed);
  if (!pl_pin_start()) return false;
  uint64_t budget = pl_pin_budget();
  pl_lock();
  bool ok = false;
  if (!pl_fenced(base, base + len, pl_now_ns()) && pl_slot_overlap(base, len) == 0 &&
      pl_committed + len <= budget) {
    uint32_t s = pl_slot_take(base, base + len, abase);
    if (s) {
      pl_pin *e = &pl_pins[s];
      e->alen = alen;
      e->ctx = ctx;
      e->state = PL_PS_REQUESTED;
      pl_committed += len;
      pl_kick();
      ok = true;
    }
  }
  pl_unlock();
  return ok;
}

bool pl_pinreg_make_room(size_t need) {
  uint64_t budget = pl_pin_budget();
  if (need > budget) return false;
  pl_lock();
  uint64_t now = pl_now_ns(), idle = atomic_load_explicit(&pl_idle_ns, memory_order_relaxed);
  bool ok = true;
  while (pl_committed + need > budget) {
    uint32_t victim = 0;
    for (uint32_t k = 0; k < pl_nidx; k++) {
      pl_pin *e = &pl_pins[pl_idx[k]];
      if (e->state != PL_PS_LIVE || e->holds || e->graph || now - e->used_ns < idle) continue;
      if (victim == 0 || e->used_ns < pl_pins[victim].used_ns) victim = pl_idx[k];
    }
    if (victim == 0) {
      ok = false;
      break;
    }
    pl_pins[victim].evict = true;
    pl_slot_undo(victim);
  }
  pl_unlock();
  return ok;
}

/* Undo every registration overlapping [p, p+n) before returning; lock
 * not held on return.  False when the driver refused this thread: the
 * rest is the shim's thread's (pl_undo_now). */
static bool pl_release_range(uintptr_t p, size_t n) {
  pl_lock();
  for (;;) {
    uint32_t s = pl_slot_overlap(p, n);
    if (s == 0) break;
    pl_pin *e = &pl_pins[s];
    switch (e->state) {
      case PL_PS_REQUESTED:
        pl_slot_drop(s);
        pthread_cond_broadcast(&pl_pin_done);
        continue;
      case PL_PS_REGISTERING:
        if (!e->dying) pl_committed -= e->end - e->base;
        e->dying = true;
        break; /* wait for the thread's driver call */
      case PL_PS_LIVE:
      case PL_PS_UNDO:
        if (e->state == PL_PS_LIVE) pl_slot_undo(s);
        if (e->holds == 0) {
          /* Ours to undo, now: the thread may be busy for a while. */
          e->state = PL_PS_UNDOING;
          pl_unlock();
          if (!pl_undo_now(s)) return false;
          pl_lock();
          continue;
        }
        break;        /* a copy in flight holds it: wait for its end */
      default: break; /* UNDOING elsewhere: wait */
    }
    pthread_cond_wait(&pl_pin_done, &pl_pin_lock);
  }
  pl_unlock();
  return true;
}

/* free(p) of a registered block, lock held: true when the slot takes the
 * block (next_free(p) after its undo). */
static bool pl_take_free(uintptr_t a, void *p, void (*next_free)(void *)) {
  uint32_t s = pl_slot_overlap(a, 1);
  /* The interior starts within a page of the block. */
  if (s == 0) {
    uint32_t k = pl_idx_after(a);
    if (k < pl_nidx && pl_pins[pl_idx[k]].abase == a) s = pl_idx[k];
  }
  if (s == 0 || pl_pins[s].abase != a) return false;
  pl_pin *e = &pl_pins[s];
  switch (e->state) {
    case PL_PS_REQUESTED: /* nothing at the driver yet: the caller frees */
      pl_slot_drop(s);
      pthread_cond_broadcast(&pl_pin_done);
      return false;
    case PL_PS_REGISTERING:
      if (!e->dying) pl_committed -= e->end - e->base;
      e->dying = true;
      /* fall through */
    default:
      if (e->state == PL_PS_LIVE) pl_slot_undo(s);
      e->free_ptr = p;
      e->free_fn = next_free;
      return true;
  }
}

/* ---- releases where the program's thread may not wait ------------------------ */

/* A release hook may wait for the lock and call the driver: not inside the
 * shim (a signal handler that interrupted a copy, which may hold a
 * registration or be inside the driver), not while this thread holds the
 * lock (a handler that interrupted it), not on a thread where the driver
 * refuses calls (a host function's).  Otherwise the release is handed to
 * the shim's thread without a lock, a wait or a driver call, and what the
 * program sees is the same: unmapped memory is gone (kept, inaccessible,
 * until the shim's thread has undone its registration and unmaps it, so
 * that no new mapping can take its addresses meanwhile), discarded memory
 * reads as zeros. */
static bool pl_may_wait(void) {
  return pl_tls_locked == 0 && !pl_shim_inside() && !pl_tls_nodriver;
}

void pl_pinreg_note_hostfn(void) { pl_tls_nodriver = true; }

bool pl_pinreg_may_wait(void) { return pl_may_wait(); }

/* Hand a release to the shim's thread: lock-free, async-signal-safe. */
static bool pl_defer_put(int op, uintptr_t base, size_t len, void *ptr, void (*fn)(void *)) {
  for (unsigned i = 0; i < PL_DEFERS; i++) {
    pl_defer *d = &pl_defers[i];
    int z = PL_DS_FREE;
    if (!atomic_compare_exchange_strong(&d->state, &z, PL_DS_FILLING)) continue;
    d->op = op;
    d->base = base;
    d->len = len;
    d->ptr = ptr;
    d->fn = fn;
    atomic_fetch_add(&pl_ndefers, 1);
    atomic_store_explicit(&d->state, PL_DS_READY, memory_order_release);
    pl_wake();
    return true;
  }
  PL_ADD(pl_n_stranded, 1);
  return false;
}

/* The shim's thread, lock not held: the releases handed over. */
static void pl_defers_run(void) {
  for (unsigned i = 0; i < PL_DEFERS; i++) {
    pl_defer *d = &pl_defers[i];
    int st = atomic_load_explicit(&d->state, memory_order_acquire);
    if (st != PL_DS_READY && st != PL_DS_CANCELLED) continue;
    if (d->op == PL_DF_FREE) {
      pl_lock();
      bool taken = pl_take_free((uintptr_t)d->ptr, d->ptr, d->fn);
      pl_unlock();
      if (!taken) d->fn(d->ptr);
    } else {
      pl_release_range(d->base, d->len);
      st = PL_DS_READY;
      if (d->op == PL_DF_UNMAP && atomic_compare_exchange_strong(&d->state, &st, PL_DS_UNMAPPING))
        syscall(SYS_munmap, d->base, d->len);
    }
    atomic_store_explicit(&d->state, PL_DS_FREE, memory_order_release);
    atomic_fetch_sub(&pl_ndefers, 1);
  }
  static bool told;
  if (!told && atomic_load(&pl_n_stranded) != 0) {
    told = true;
    pl_log(PL_LOG_WARN, PL_LK_UNREGISTER,
           "more than %u releases of registered memory came at once where the program's thread "
           "could not wait (signal handlers, host functions); the rest stays mapped, inaccessible",
           PL_DEFERS);
  }
}

/* Registered [b, b+len), which the program unmaps: inaccessible now,
 * unmapped by the shim's thread once its registration is undone. */
static void pl_quarantine(uintptr_t b, size_t len) {
  syscall(SYS_mprotect, b, len, PROT_NONE);
  pl_defer_put(PL_DF_UNMAP, b, len, NULL, NULL);
}

/* [p, end) rounded to pages as the kernel rounds an munmap's length;
 * false for an unaligned start (the real call's EINVAL). */
static bool pl_page_span(uintptr_t p, size_t n, uintptr_t *end) {
  uintptr_t pg = pl_page_size();
  if (p & (pg - 1) || n == 0) return false;
  *end = p + n < p ? ~(pg - 1) : (p + n + pg - 1) & ~(pg - 1);
  return *end > p;
}

/* munmap [p, end) without waiting: registered parts quarantined, the rest
 * unmapped now.  The first failure is the result (errno set). */
static int pl_unmap_nowait(uintptr_t p, uintptr_t end) {
  int rc = 0, err = errno;
  uintptr_t sb, se;
  for (uintptr_t at = p; at < end; at = se) {
    if (!pl_view_next(at, end, &sb, &se)) sb = se = end;
    if (sb > at && syscall(SYS_munmap, at, sb - at) != 0 && rc == 0) {
      rc = -1;
      err = errno;
    }
    if (se > sb) pl_quarantine(sb, se - sb);
  }
  errno = err;
  return rc;
}

bool pl_pinreg_unmap(uintptr_t p, size_t n, int *rc) {
  uintptr_t end, sb, se;
  if (PL_LIKELY(!pl_pinreg_any()) || pl_on_pin_thread || !pl_page_span(p, n, &end)) return false;
  if (pl_may_wait() && pl_release_range(p, end - p)) return false;
  if (!pl_view_next(p, end, &sb, &se)) return false;
  *rc = pl_unmap_nowait(p, end);
  return true;
}

/* Zero the writable pages of [b, e): a page the program made read-only
 * (or PROT_NONE) would fault the memset, so each is asked first with a
 * system call that writes 16 bytes there or fails with EFAULT.  Such a
 * page keeps its bytes: wrong for a discard, but neither a crash nor a
 * stale registration. */
static void pl_zero_writable(uintptr_t b, uintptr_t e) {
  uintptr_t pg = pl_page_size();
  for (uintptr_t at = b; at < e; at += pg)
    if (syscall(SYS_clock_gettime, CLOCK_MONOTONIC, (void *)at) == 0) memset((void *)at, 0, pg);
}

/* madvise [p, end) discarding without waiting: registered parts zeroed
 * (what a discarded private anonymous page reads as; the pages stay, so
 * the registration still names them), the rest advised now.  MADV_FREE
 * may keep the old bytes, so it leaves registered parts alone. */
static int pl_discard_nowait(uintptr_t p, uintptr_t end, int advice) {
  int rc = 0, err = errno;
  uintptr_t sb, se;
  for (uintptr_t at = p; at < end; at = se) {
    if (!pl_view_next(at, end, &sb, &se)) sb = se = end;
    if (sb > at && syscall(SYS_madvise, at, sb - at, advice) != 0 && rc == 0) {
      rc = -1;
      err = errno;
    }
    if (se > sb && advice != MADV_FREE) pl_zero_writable(sb, se);
  }
  errno = err;
  return rc;
}

bool pl_pinreg_discard(uintptr_t p, size_t n, int advice, int *rc) {
  uintptr_t end, sb, se;
  if (PL_LIKELY(!pl_pinreg_any()) || pl_on_pin_thread || !pl_page_span(p, n, &end)) return false;
  if (pl_may_wait() && pl_release_range(p, end - p)) return false;
  /* Refused by the kernel for the private memory registrations are made in. */
  if (advice == MADV_REMOVE || !pl_view_next(p, end, &sb, &se)) return false;
  *rc = pl_discard_nowait(p, end, advice);
  return true;
}

/* Whether every page of [b, e) can be read, asked with a system call that
 * reads 8 bytes of each or fails with EFAULT (rt_sigprocmask with an
 * invalid `how`: pystack.c says why this one).  A refusal of the call
 * itself (a seccomp filter) counts as readable. */
static bool pl_pages_read(uintptr_t b, uintptr_t e) {
  uintptr_t pg = pl_page_size();
  int saved = errno;
  bool ok = true;
  for (uintptr_t at = b; at < e && ok; at += pg)
    ok = !(syscall(SYS_rt_sigprocmask, -1L, (void *)at, (void *)0, 8L) == -1 && errno == EFAULT);
  errno = saved;
  return ok;
}

bool pl_pinreg_remap(uintptr_t old, size_t old_len, size_t new_len, int flags, void *new_addr,
                     void **out) {
  uintptr_t end, sb, se, pg = pl_page_size();
  if (PL_LIKELY(!pl_pinreg_any()) || pl_on_pin_thread || !pl_page_span(old, old_len, &end))
    return false;
  if (pl_may_wait() && pl_release_range(old, end - old)) return false;
  if (!pl_view_next(old, end, &sb, &se) || new_len == 0 ||
      ((flags & MREMAP_FIXED) && !(flags & MREMAP_MAYMOVE)))
    return false; /* nothing registered, or the real call's EINVAL */
  uintptr_t keep = (new_len + pg - 1) & ~(pg - 1);
  bool move = flags & (MREMAP_FIXED | MREMAP_DONTUNMAP);
  if (!move && keep <= end - old) {
    /* Shrinking in place: the end goes as an munmap would take it. */
    *out = (void *)old;
    if (keep < end - old && pl_unmap_nowait(old + keep, end) != 0) *out = MAP_FAILED;
    return true;
  }
  if (!move) {
    /* Growing in place releases nothing.  Only ENOMEM (no room there)
     * lets it move: anything else (EFAULT: the range is not one mapping,
     * part of it unmapped or of another protection) the move gets too. */
    void *p = (void *)syscall(SYS_mremap, old, old_len, new_len, 0, NULL);
    if (p != MAP_FAILED || !(flags & MREMAP_MAYMOVE) || errno != ENOMEM) {
      *out = p;
      return true;
    }
  }
  /* Moving: the bytes to new memory, and the old range released as
   * munmap (or, kept mapped and empty, as a discard) would.  A page that
   * cannot be read (PROT_NONE, or released already and kept inaccessible
   * until its registration is undone) would fault the copy: EFAULT, as the
   * kernel says of a range that is not one readable mapping. */
  if (!pl_pages_read(old, end)) {
    *out = MAP_FAILED;
    errno = EFAULT;
    return true;
  }
  int fixed = (flags & MREMAP_FIXED) ? MAP_FIXED : 0;
  void *p = (void *)syscall(SYS_mmap, fixed ? new_addr : NULL, new_len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
  *out = p;
  if (p == MAP_FAILED) return true;
  memcpy(p, (void *)old, new_len < old_len ? new_len : old_len);
  int err = errno;
  if (flags & MREMAP_DONTUNMAP)
    pl_discard_nowait(old, end, MADV_DONTNEED);
  else
    pl_unmap_nowait(old, end);
  errno = err;
  return true;
}

void pl_pinreg_map_fixed(uintptr_t p, size_t n) {
  if (PL_LIKELY(!pl_pinreg_any()) || n == 0 || pl_on_pin_thread) return;
  uintptr_t end = p + n < p ? UINTPTR_MAX : p + n;
  /* A quarantine there is the program's memory again: the thread must not
   * unmap it. */
  if (atomic_load(&pl_ndefers) != 0)
    for (unsigned i = 0; i < PL_DEFERS; i++) {
      pl_defer *d = &pl_defers[i];
      if (d->op != PL_DF_UNMAP || d->base >= end || p >= d->base + d->len) continue;
      int st = PL_DS_READY;
      if (!atomic_compare_exchange_strong(&d->state, &st, PL_DS_CANCELLED))
        while (atomic_load(&d->state) == PL_DS_UNMAPPING) sched_yield();
    }
  pl_pinreg_release(p, n);
}

void pl_pinreg_release(uintptr_t p, size_t n) {
  uintptr_t sb, se;
  if (PL_LIKELY(!pl_pinreg_any()) || n == 0 || pl_on_pin_thread) return;
  if (p + n < p) n = UINTPTR_MAX - p;
  if (pl_may_wait() && pl_release_range(p, n)) return;
  /* Where nothing can be waited for, the shim's thread undoes it soon:
   * only MAP_FIXED over live memory and brk below it come here, and
   * neither is how a program releases a buffer it copies from. */
  for (uintptr_t at = p; at < p + n && pl_view_next(at, p + n, &sb, &se); at = se)
    pl_defer_put(PL_DF_UNDO, sb, se - sb, NULL, NULL);
}

bool pl_pinreg_defer_free(void *p, size_t n, void (*next_free)(void *)) {
  (void)n;
  if (PL_LIKELY(!pl_pinreg_any()) || p == NULL || pl_on_pin_thread) return false;
  uintptr_t a = (uintptr_t)p, sb, se;
  if (pl_tls_locked != 0) {
    /* A handler that interrupted this thread inside the lock. */
    if (pl_view_alloc(a) == 0 && !pl_view_next(a, a + 1, &sb, &se)) return false;
    pl_defer_put(PL_DF_FREE, a, 0, p, next_free); /* full: leaked, never stale */
    return true;
  }
  pl_lock();
  bool taken = pl_take_free(a, p, next_free);
  pl_unlock();
  return taken;
}

void pl_pinreg_yield(uintptr_t p, size_t n) {
  if (n == 0 || pl_on_pin_thread) return;
  if (p + n < p) n = UINTPTR_MAX - p;
  pl_lock();
  /* Close the range first, so that no request made meanwhile gets in. */
  unsigned oldest = 0;
  for (unsigned i = 1; i < PL_FENCES; i++)
    if (pl_fences[i].until_ns < pl_fences[oldest].until_ns) oldest = i;
  pl_fences[oldest] = (pl_fence){.base = p, .end = p + n, .until_ns = pl_now_ns() + PL_FENCE_NS};
  pl_unlock();
  if (pl_pinreg_any()) pl_release_range(p, n);
}

void pl_pinreg_pin_for_graph(uintptr_t p, size_t n) {
  if (!pl_pinreg_any() || n == 0) return;
  pl_lock();
  for (uint32_t k = pl_idx_after(p); k < pl_nidx && pl_pins[pl_idx[k]].base < p + n; k++)
    pl_pins[pl_idx[k]].graph = true;
  pl_unlock();
}

uint64_t pl_pinreg_bytes(void) { return atomic_load(&pl_drv_bytes); }

bool pl_pinreg_used(void) { return atomic_load_explicit(&pl_pin_used, memory_order_relaxed); }

void pl_pinreg_counters(pagelock_rec_counters *c) {
  c->register_budget = pl_pin_budget();
  c->registrations = atomic_load(&pl_n_reg);
  c->unregistrations = atomic_load(&pl_n_unreg);
  c->evictions = atomic_load(&pl_n_evict);
  c->register_failures = atomic_load(&pl_n_fail);
  c->register_ns = atomic_load(&pl_reg_ns);
  c->registered_bytes = atomic_load(&pl_drv_bytes);
  c->registered_bytes_high_water = atomic_load(&pl_drv_high);
}

void pl_pinreg_stop(void) {
  atomic_store(&pl_pin_off, true);
  atomic_store(&pl_pin_stop, true);
  pl_wake();
}

/* ---- the native call, cut at the registrations' edges --------------------- */

/* The native call for bytes [off, off+len) of c, in stream order. */
static CUresult pl_pin_native_part(const pl_copy *c, size_t off, size_t len) {
  pl_copy part = *c;
  part.dst += off;
  part.src += off;
  part.bytes = len;
  return c->native(&part);
}

/* What a registration of the tracked allocation around host bytes [h, h+n)
 * would cover, [*lo, *hi) (pl_reg_span); false when no edge can fall
 * inside them: empty, inside one page (every edge is a page boundary:
 * spans and pieces are page aligned, and the small copies that pass
 * through skip the allocation lookup), or untracked. */
static bool pl_pin_interior(uintptr_t h, size_t n, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t abase, pg = pl_page_size();
  size_t alen;
  int kind;
  if (n == 0 || (h & ~(pg - 1)) == ((h + n - 1) & ~(pg - 1))) return false;
  if (!pl_hostmem_lookup(h, &abase, &alen, &kind)) return false;
  pl_reg_span(abase, alen, kind, lo, hi);
  return true;
}

/* The next edge above p: the span's start, a piece's end within it, or
 * its end. */
static uintptr_t pl_pin_edge(uintptr_t p, uintptr_t lo, uintptr_t hi) {
  uintptr_t edge = p < lo ? lo : p < hi ? pl_pin_piece_end(lo, p) : UINTPTR_MAX;
  return edge > hi && p >= lo && p < hi ? hi : edge;
}

/* Why cut: the driver validates a copy's host range when the call starts.
 * A range that starts inside a registered range and runs past its end is
 * refused with CUDA_ERROR_INVALID_VALUE (driver 580, tests/gpu/probe_straddle.c),
 * so a pass-through copy that crosses the edge of what a registration of
 * its allocation covers, or of one piece of it (pinreg.h, PL_PIN_PIECE),
 * would fail whenever the shim's thread had just registered that part,
 * an error the program would never have seen.  Every registration of an
 * allocation is exactly that span, made in
 * those pieces, so parts cut at those edges each lie wholly inside or
 * wholly outside one piece, live, being made or being undone.  Only copies
 * that cross an edge are cut: a pageable copy of 256 MiB (~36 ms) becomes
 * 17 driver calls (~50 us more), in register and auto modes only. */
CUresult pl_pinreg_native(pl_copy *c) {
  uintptr_t h = (uintptr_t)(c->dir == PAGELOCK_DIR_H2D ? c->src : c->dst), lo, hi;
  size_t n = c->bytes;
  if (!pl_pin_interior(h, n, &lo, &hi)) return c->native(c);
  size_t at = 0;
  while (at < n) {
    uintptr_t p = h + at, edge = pl_pin_edge(p, lo, hi);
    if (edge >= h + n || edge <= p) break;
    CUresult r = pl_pin_native_part(c, at, edge - p);
    if (r != CUDA_SUCCESS) return r;
    at = edge - h;
  }
  return at == 0 ? c->native(c) : pl_pin_native_part(c, at, n - at);
}

bool pl_pinreg_whole(uintptr_t h, size_t n) {
  uintptr_t lo, hi, edge;
  return !pl_pin_interior(h, n, &lo, &hi) || (edge = pl_pin_edge(h, lo, hi)) >= h + n || edge <= h;
}

/* ---- fork ------------------------------------------------------------------ */

void pl_pinreg_atfork_prepare(void) { pl_lock(); }
void pl_pinreg_atfork_parent(void) { pl_unlock(); }

void pl_pinreg_atfork_child(void) {
  /* No driver call: CUDA is unusable here, and the registrations are the
   * parent's (the child's copy of the memory was never registered).  A
   * free() the parent's thread had not yet done stays undone here: that
   * block is leaked in the child, never freed twice. */
  pthread_mutex_init(&pl_pin_lock, NULL);
  pl_tls_locked = 0;
  memset(pl_defers, 0, sizeof pl_defers);
  atomic_store(&pl_ndefers, 0);
  pthread_cond_init(&pl_pin_done, NULL);
  memset(pl_pins, 0, sizeof pl_pins);
  pl_nposts = pl_posts_running = 0;
  pl_nidx = 0;
  pl_slots_ready = false;
  pl_committed = 0;
  memset(pl_fences, 0, sizeof pl_fences);
  atomic_store(&pl_pin_count, 0);
  atomic_store(&pl_drv_bytes, 0);
  atomic_store(&pl_drv_high, 0);
  atomic_store(&pl_n_reg, 0);
  atomic_store(&pl_n_unreg, 0);
  atomic_store(&pl_n_evict, 0);
  atomic_store(&pl_n_fail, 0);
  atomic_store(&pl_reg_ns, 0);
  atomic_store(&pl_pin_used, false);
  atomic_store(&pl_pin_off, true);
  if (atomic_load(&pl_thread_state) == 2) atomic_store(&pl_thread_state, 0);
}

/* ---- tests ------------------------------------------------------------------- */

void pl_pinreg_quiesce_for_test(void) {
  struct timespec ts = {0, 1000000};
  for (int i = 0; i < 20000; i++) {
    pl_lock();
    bool busy = pl_nposts > 0 || pl_posts_running > 0;
    uint64_t budget = pl_pin_budget();
    for (uint32_t k = 0; k < pl_nidx && !busy; k++) {
      pl_pin *e = &pl_pins[pl_idx[k]];
      /* A request that does not fit yet waits for room, not for the thread. */
      busy = e->state == PL_PS_REGISTERING || e->state == PL_PS_UNDOING ||
             (e->state == PL_PS_UNDO && e->holds == 0) ||
             (e->state == PL_PS_REQUESTED &&
              atomic_load(&pl_drv_bytes) + (e->end - e->base) <= budget);
    }
    pl_unlock();
    if (!busy) return;
    nanosleep(&ts, NULL);
  }
}

void pl_pinreg_reset_for_test(void) {
  pl_pinreg_quiesce_for_test();
  pl_release_range(0, UINTPTR_MAX);
  pl_lock();
  memset(pl_fences, 0, sizeof pl_fences);
  pl_unlock();
  atomic_store(&pl_drv_high, atomic_load(&pl_drv_bytes));
  atomic_store(&pl_n_reg, 0);
  atomic_store(&pl_n_unreg, 0);
  atomic_store(&pl_n_evict, 0);
  atomic_store(&pl_n_fail, 0);
  atomic_store(&pl_reg_ns, 0);
  atomic_store(&pl_budget, 0);
  atomic_store(&pl_pin_off, false);
}

void pl_pinreg_set_idle_for_test(uint64_t ns) {
  atomic_store(&pl_idle_ns, ns ? ns : PL_PIN_IDLE_NS);
}
