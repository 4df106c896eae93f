/* stage.c - the staging engine: pageable 1D copies through pinned chunks.
 *
 * A pageable copy is slow because the driver bounces it through a small
 * pinned buffer on the calling thread, one piece at a time.  Here the
 * bounce goes through the shim's own pool of big pinned chunks (pool.c),
 * the host side is copied by many threads (workers.c), and the DMA of one
 * chunk overlaps the memcpy of the next.
 *
 *   host to device    memcpy chunk i (parallel) | DMA chunk i-1 on the
 *                     caller's stream | event after each DMA frees its chunk.
 *                     Returns once the source is consumed; the sync entry
 *                     points also wait for the last DMA.
 *   device to host    DMA up to PL_D2H_INFLIGHT chunks ahead, wait for the
 *   (sync, default)   oldest, copy it out (parallel); returns with the bytes
 *                     in the user's buffer, as CUDA's pageable copy does.
 *   device to host    DMA then a host function on the stream that copies the
 *   (async, opt-in)   chunk out and frees it: any later synchronisation
 *                     covers the copy-out; returns at once.
 *
 * Whatever goes wrong, the contract holds (docs/design.md): with nothing
 * enqueued yet the engine declines and the caller runs the native call;
 * with part of the copy enqueued, the native call (same entry point, same
 * stream, so in stream order) runs for the rest and its result is the
 * program's result.  A wait for a free chunk is bounded by
 * PAGELOCK_WAIT_US, since the program may hold its stream back until after
 * this call returns. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stage.h"
#include "autopin.h"
#include "cpuload.h"
#include "pinreg.h"
#include "pl_cupti.h"
#include "trace.h"

/* DMAs queued ahead of the copy-out, so the copy engine never idles while
 * a chunk is being copied out. */
#define PL_D2H_INFLIGHT 4

/* How chunks are filled.  Streaming stores bypass the cache: the copy
 * runs fastest (no read-for-ownership), but every byte then crosses host
 * memory three times (source read, chunk write, DMA read), and the copy
 * threads take memory bandwidth from the DMA.  Plain stores into chunks
 * that stay in the last-level cache let the DMA engine read them from
 * there, at the price of a slower copy.  A copy that fits the pool is
 * bound by the copy (the pool lets it run ahead of the DMA): streaming
 * stores.  A copy larger than the pool recycles its chunks and is bound by
 * the DMA: plain stores.  On the H200 host (docs/benchmarks.md, five
 * alternating rounds) streaming gave 16 / 64 / 256 MiB uploads 0.71-0.80 /
 * 0.78-0.83 / 0.65-0.86 of pinned and plain stores 0.46-0.57 / 0.70-0.80
 * / 0.89-0.93.  Tried and dropped: switching within a copy (worse than
 * either: streaming stores evict the lines plain stores want cached), and
 * plain stores whenever the device was still busy with earlier chunks
 * (copies back to back: no better than streaming).  The fixed policies are
 * for comparison builds (tests/bench/diag_h2d.sh). */
#if defined(PL_NO_STREAM_STORES)
#define PL_NT(recycles) ((void)(recycles), false)
#elif defined(PL_ALWAYS_STREAM_STORES)
#define PL_NT(recycles) ((void)(recycles), true)
#else
#define PL_NT(recycles) (!(recycles))
#endif

/* Copy threads, besides the caller, that an upload filling its chunks
 * with streaming stores may use when, as it starts, the device is still
 * busy with earlier chunks (unless PAGELOCK_COPY_THREADS says how many).
 * Such an upload is bound by the DMA, which the copy threads only have to
 * keep ahead of: one thread streams ~11 GB/s, so four and the caller
 * outrun a ~55 GB/s DMA, and more take memory bandwidth from it while they
 * run.  An upload that finds the device idle is what the program waits
 * for: every thread helps.  Measured on the H200 host (docs/benchmarks.md,
 * 2026-11-23): with 5 threads in all instead of 8 for every upload, the
 * overlap benchmark (copies back to back) went from 2.99-3.09 to
 * 2.76-2.94 ms against 2.70 pinned, but single 64 MiB uploads spread wider
 * (0.64-0.88 of pinned against 0.80-0.86); limiting uploads only once they
 * found no chunk free cut those to 0.59-0.63.  This rule, side by side with
 * 8 threads for every upload: overlap 2.83-2.95 against 2.95-3.19 ms on
 * the H200 host and 3.07 against 3.15 ms (medians) on the H100 host, the
 * single uploads unchanged. */
#ifndef PL_NT_HELPERS
#define PL_NT_HELPERS 4u
#endif

/* Staged copies from this size on ask whether the copy threads will find
 * idle CPUs (cpuload.c): at 4 MiB a copy takes 80 us or more, and one
 * read of the kernel's load every 10 ms costs a few. */
#define PL_CROWD_MIN ((uint64_t)4 << 20)

unsigned pl_stage_threads(bool wide, unsigned idle) {
  unsigned base = pl_workers_base(), most = pl_workers_parallelism();
  if (!wide || idle == UINT_MAX || idle <= base) return base;
  return idle < most ? idle : most;
}

/* ---- state and counters -------------------------------------------------- */

static atomic_bool pl_stage_off;  /* forked child: CUDA is unusable there */
static atomic_bool pl_stage_used; /* write COUNTERS only if we ever ran */
static atomic_uint_fast64_t pl_n_copies, pl_n_plain, pl_n_throttled, pl_n_staged, pl_n_pass,
    pl_n_fallbacks, pl_n_waits, pl_n_wait_ns, pl_n_sized, pl_n_sized_bytes, pl_n_crowded,
    pl_n_crowded_bytes;
static atomic_uint_fast64_t pl_crowd_seen; /* the most other runnable threads seen << 32 | CPUs */
static atomic_uint pl_crowd_threads;       /* copy threads those copies had */
static atomic_uint_fast64_t pl_n_wide;     /* copies given more than the base copy threads */
static atomic_uint pl_widest;              /* the most copy threads a copy was given */

#define PL_ADD(ctr, v) atomic_fetch_add_explicit(&(ctr), (v), memory_order_relaxed)

/* One staged copy in progress: what every step needs. */
typedef struct pl_staging {
  const pl_drv *d;
  pl_copy *c;
  pl_pool *pool;
  CUstream stream; /* the stream the chunks go on: c->stream, or 0 for sync calls */
  int pt;          /* 1: _ptsz twins, so stream 0 stays the per-thread stream */
  uint64_t wait_ns;
  size_t staged;    /* bytes moved through chunks so far */
  unsigned threads; /* copy threads, the caller included (pl_stage_threads) */
  bool wide;        /* may take more threads than the base count */
  bool busy;        /* the last chunk acquired found earlier work still running */
} pl_staging;

/* Get a chunk for staged copy x, counting the wait; grow: see pl_pool_acquire. */
static pl_acq pl_staging_acquire(pl_staging *x, unsigned grow, uint64_t wait_ns, pl_chunk **out,
                                 CUresult *err) {
  uint64_t waited;
  pl_acq a = pl_pool_acquire(x->pool, grow, wait_ns, out, &waited, &x->busy, err);
  if (waited) {
    PL_ADD(pl_n_waits, 1);
    PL_ADD(pl_n_wait_ns, waited);
  }
  if (a == PL_ACQ_ERROR)
    pl_log(PL_LOG_WARN, PL_LK_STAGE_ERROR,
           "staging chunk unavailable (error %d); copy passes through", (int)*err);
  return a;
}

/* How soon a wide copy with fewer threads than it may use asks again
 * whether CPUs have become idle.  A program's parallel CPU operation
 * leaves its threads spinning for ~0.5 ms after it (libgomp with
 * GOMP_SPINCOUNT=10000, what pagelock run gives PyTorch), then they sleep;
 * an upload that starts right after it finds every CPU taken, and a
 * 256 MiB one still has 5 ms or more to go. */
#define PL_WIDEN_EVERY_NS 1000000ull

/* One more copy thread per CPU that has become idle since staged copy x started,
 * asked at most once per PL_WIDEN_EVERY_NS (cpuload.c), once per chunk.
 * True when x->threads grew. */
static bool pl_staging_widen(pl_staging *x) {
  if (!x->wide || x->threads >= pl_workers_parallelism()) return false;
  unsigned t =
      pl_stage_threads(true, pl_cpuload_idle(pl_workers_awake() + 1, PL_WIDEN_EVERY_NS, NULL));
  if (t <= x->threads) return false;
  x->threads = t;
  return true;
}

/* Run the native call for bytes [off, end) of the copy, in stream order
 * after whatever chunks were enqueued.  Its result is the program's.
 * Through pl_pinreg_native: in register and auto modes the shim's thread
 * may have just registered the allocation's interior, and the rest of a
 * copy that starts inside it and runs past its end is refused by the
 * driver (autopin.c); cut at the interior's edges it is not.  With no
 * registration made or under way, the plain native call. */
static CUresult pl_staging_fallback(pl_staging *x, size_t off, bool timed_out) {
  pl_copy rest = *x->c;
  rest.dst += off;
  rest.src += off;
  rest.bytes -= off;
  x->c->flags |= PAGELOCK_COPY_FALLBACK;
  PL_ADD(pl_n_fallbacks, 1);
  PL_ADD(pl_n_pass, rest.bytes);
  if (timed_out)
    pl_log(
        PL_LOG_INFO, PL_LK_STAGE_FALLBACK,
        "no staging chunk freed within PAGELOCK_WAIT_US=%ld us; the rest of the copy passes through (raise PAGELOCK_POOL_SIZE if this repeats)",
        pl_opt_long(PL_OPT_WAIT_US));
  return pl_pinreg_any() ? pl_pinreg_native(&rest) : x->c->native(&rest);
}

/* Log a driver call of the engine failing mid-copy (the copy itself is
 * finished by the native call). */
static void pl_stage_error(const char *what, CUresult r) {
  pl_log(PL_LOG_WARN, PL_LK_STAGE_ERROR,
         "%s failed inside the staging engine (error %d); the rest of the copy passes through",
         what, (int)r);
}

/* ---- host to device ------------------------------------------------------ */

/* Smallest piece of the ramp: the first DMA starts once this much is
 * copied, often by the calling thread alone while the copy threads wake
 * up (tens of microseconds in a VM).  One work piece of workers.c. */
#ifndef PL_RAMP_MIN
#define PL_RAMP_MIN ((size_t)256 << 10)
#endif

/* How much of the source the next chunk takes.  Neither the first memcpy
 * nor the last DMA overlaps anything, so the pieces ramp up from
 * PL_RAMP_MIN (the DMA starts sooner) and, once the rest fits one chunk,
 * halve down to PL_RAMP_MIN (the last DMA is short).  *ramp carries the
 * current piece size between calls (0 at first). */
static size_t pl_h2d_piece(size_t left, size_t chunk, size_t *ramp) {
  if (*ramp == 0) *ramp = PL_RAMP_MIN;
  size_t len = *ramp < chunk ? *ramp : chunk;
  if (*ramp < chunk) *ramp *= 2;
  if (left > len) return len;
  return left >= 2 * PL_RAMP_MIN ? left / 2 : left;
}

/* A chunk an upload holds.  Segments are slices of chunks: the ramp's
 * small pieces share one chunk instead of taking one each, so a 16 MiB
 * copy holds 3 chunks, not 7, and copies back to back find chunks free. */
typedef struct pl_held {
  pl_chunk *ch;      /* NULL once given back */
  size_t used;       /* bytes of the chunk taken by slices */
  unsigned pub, iss; /* slices published, and enqueued */
  bool closed;       /* takes no more slices */
} pl_held;
#define PL_HELD (PL_JOB_SLOTS + 1) /* every unenqueued slice's chunk, and the current one */

/* The upload in progress, for the helpers below. */
typedef struct pl_up {
  pl_staging *x;
  bool sync;
  pl_held held[PL_HELD]; /* live entries [h0, h1), by absolute number % PL_HELD */
  unsigned h0, h1;
  pl_chunk *last; /* sync: the final chunk, kept until its DMA is done */
} pl_up;

/* Give back held chunk h, all of whose slices are enqueued: it is free
 * once an event after its last DMA completes.  False when the event could
 * not be recorded (the chunk is retired; the copy must stop). */
static bool pl_up_finish(pl_up *u, pl_held *h, bool final) {
  pl_staging *x = u->x;
  CUresult e = x->d->EventRecord[x->pt](h->ch->ev, x->stream);
  if (e != CUDA_SUCCESS) {
    pl_pool_quarantine(h->ch);
    pl_stage_error("cuEventRecord", e);
  } else if (final && u->sync) {
    u->last = h->ch;
  } else {
    pl_pool_release(h->ch, true);
  }
  h->ch = NULL;
  while (u->h0 < u->h1 && u->held[u->h0 % PL_HELD].ch == NULL) u->h0++;
  return e == CUDA_SUCCESS;
}

/* The chunk that takes no more slices: given back now if nothing of it
 * waits to be enqueued. */
static bool pl_up_close(pl_up *u, pl_held *h) {
  h->closed = true;
  return h->iss < h->pub || pl_up_finish(u, h, false);
}

/* Returns false when nothing was enqueued and the caller must run the
 * native call; otherwise *r is the program's result.
 *
 * Segments (slices of chunks) are published to the copy threads as far
 * ahead as free chunks allow, and each one's DMA is enqueued, in order,
 * the moment its last byte is copied: the threads never wait for the DMA
 * calls, the DMA engine never waits for a barrier. */
static bool pl_h2d(pl_staging *x, CUresult *r) {
  const pl_drv *d = x->d;
  pl_copy *c = x->c;
  const char *src = (const char *)(uintptr_t)c->src;
  size_t off = 0; /* bytes whose DMA is enqueued */
  size_t pub = 0; /* bytes handed to the copy threads */
  unsigned npub = 0, niss = 0;
  unsigned seg_h[PL_JOB_SLOTS]; /* segment k: its held chunk (absolute number) */
  size_t ramp = 0;
  bool timed_out = false, stop = false, declined = false;
  bool nt = PL_NT(c->bytes > (uint64_t)pl_opt_long(PL_OPT_POOL_SIZE));
  pl_up u = {.x = x, .sync = !(c->flags & PAGELOCK_COPY_ASYNC)};
  bool throttle = nt && !pl_workers_explicit();
  pl_job job;
  pl_job_open(&job, x->threads);

  while (off < c->bytes && !stop) {
    /* Publish ahead.  Only an empty pipeline waits for a chunk: with
     * segments in flight, enqueueing them frees chunks sooner. */
    while (pub < c->bytes && npub - niss < PL_JOB_SLOTS) {
      pl_held *h = u.h1 > u.h0 && !u.held[(u.h1 - 1) % PL_HELD].closed
                       ? &u.held[(u.h1 - 1) % PL_HELD]
                       : NULL;
      size_t next_ramp = ramp, len = h ? pl_h2d_piece(c->bytes - pub, h->ch->size, &next_ramp) : 0;
      if (h == NULL || h->used + len > h->ch->size) {
        if (h && !pl_up_close(&u, h)) {
          stop = true;
          break;
        }
        bool empty = npub == niss;
        pl_chunk *ch;
        CUresult e;
        pl_acq a = pl_staging_acquire(x, 1, empty ? x->wait_ns : 0, &ch, &e);
        if (a == PL_ACQ_TIMEOUT && !empty) break;
        if (a != PL_ACQ_OK) {
          if (a == PL_ACQ_ERROR && off == 0) declined = true;
          timed_out = a == PL_ACQ_TIMEOUT;
          stop = true;
          break;
        }
        if (throttle && u.h1 == 0 && x->busy) {
          /* The device is still busy with earlier copies: this one is
           * bound by the DMA from its first byte. */
          if (x->threads > PL_NT_HELPERS + 1) pl_job_limit(&job, PL_NT_HELPERS);
          PL_ADD(pl_n_throttled, 1);
        } else if (pl_staging_widen(x)) {
          pl_job_limit(&job, x->threads - 1);
        }
        h = &u.held[u.h1++ % PL_HELD];
        *h = (pl_held){.ch = ch};
        next_ramp = ramp;
        len = pl_h2d_piece(c->bytes - pub, ch->size, &next_ramp);
      }
      ramp = next_ramp;
      seg_h[npub % PL_JOB_SLOTS] = u.h1 - 1;
      pl_job_add(&job, (char *)h->ch->host + h->used, src + pub, len, nt);
      h->used += len;
      h->pub++;
      npub++;
      pub += len;
      if (pub == c->bytes && !pl_up_close(&u, h)) stop = true;
    }
    if (stop || npub == niss) break;

    /* The oldest segment: wait for its bytes, enqueue its DMA. */
    unsigned k = niss % PL_JOB_SLOTS;
    pl_held *h = &u.held[seg_h[k] % PL_HELD];
    const void *slice = job.seg[k].dst; /* the slice's place in its chunk */
    size_t len = job.seg[k].len;
    pl_job_wait(&job, niss);
    niss++;
    CUresult e = d->MemcpyHtoDAsync[x->pt](c->dst + off, slice, len, x->stream);
    if (e != CUDA_SUCCESS) {
      if (off == 0)
        declined = true; /* the native call reports it */
      else
        pl_stage_error("cuMemcpyHtoDAsync", e);
      break;
    }
    off += len;
    x->staged += len;
    h->iss++;
    if (h->closed && h->iss == h->pub && !pl_up_finish(&u, h, off == c->bytes)) break;
  }

  if (!nt && x->staged) PL_ADD(pl_n_plain, 1);
  /* Chunks still held after a stop: those with DMAs enqueued are free once
   * an event after them completes; the others were only written by us. */
  pl_job_close(&job);
  for (unsigned i = u.h0; i < u.h1; i++) {
    pl_held *h = &u.held[i % PL_HELD];
    if (h->ch == NULL) continue;
    if (h->iss > 0)
      pl_up_finish(&u, h, false);
    else
      pl_pool_release(h->ch, false);
    h->ch = NULL;
  }
  if (declined) return false;

  if (off < c->bytes) {
    /* A sync native call syncs the stream before it copies, so it also
     * covers our chunks. */
    *r = pl_staging_fallback(x, off, timed_out);
    return true;
  }
  *r = CUDA_SUCCESS;
  if (u.last) {
    /* Stricter than CUDA (a pageable sync copy may return before its last
     * DMA ends), and so always safe. */
    CUresult e = d->EventSynchronize(u.last->ev);
    pl_pool_release(u.last, e != CUDA_SUCCESS);
    *r = e;
  }
  return true;
}

/* ---- the copy-out's store policy ------------------------------------------ */

static atomic_size_t pl_out_min; /* 0 until derived */

bool pl_stage_out_stream(size_t n) {
  size_t min = atomic_load_explicit(&pl_out_min, memory_order_relaxed);
  if (PL_UNLIKELY(min == 0)) {
    /* Once per process (cpuid may trap to a hypervisor): every thread
     * derives the same value. */
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    min = llc > 0 ? (size_t)llc / 4 : (size_t)32 << 20;
    if (min < ((size_t)4 << 20)) min = (size_t)4 << 20;
    atomic_store_explicit(&pl_out_min, min, memory_order_relaxed);
  }
  return n >= min;
}

void pl_stage_set_out_stream_min_for_test(size_t n) { atomic_store(&pl_out_min, n); }

/* ---- device to host, synchronous ------------------------------------------ */

/* Returns with the bytes in the user's buffer (or the native call's
 * result), false when nothing was enqueued and the caller must run the
 * native call.  Blocks on our own events only: the native call would block
 * on the same stream just as long. */
static bool pl_d2h_sync(pl_staging *x, CUresult *r) {
  const pl_drv *d = x->d;
  pl_copy *c = x->c;
  char *dst = (char *)(uintptr_t)c->dst;
  pl_chunk *fl[PL_D2H_INFLIGHT]; /* in flight, oldest at fl[head] */
  size_t fl_off[PL_D2H_INFLIGHT], fl_len[PL_D2H_INFLIGHT];
  unsigned head = 0, count = 0;
  size_t issued = 0, done = 0;
  bool stop = false, enqueued = false, timed_out = false, errored = false;
  bool nt = pl_stage_out_stream(c->bytes);

  for (;;) {
    while (!stop && issued < c->bytes && count < PL_D2H_INFLIGHT) {
      pl_chunk *ch;
      CUresult e;
      /* With DMAs of our own in flight, draining them beats waiting on
       * someone else's chunk. */
      pl_acq a = pl_staging_acquire(x, 1, count ? 0 : x->wait_ns, &ch, &e);
      if (a == PL_ACQ_TIMEOUT && count) break;
      if (a != PL_ACQ_OK) {
        stop = true;
        timed_out = a == PL_ACQ_TIMEOUT;
        errored = !timed_out;
        break;
      }
      pl_staging_widen(x);
      size_t len = c->bytes - issued < ch->size ? c->bytes - issued : ch->size;
      e = d->MemcpyDtoHAsync[x->pt](ch->host, c->src + issued, len, x->stream);
      if (e != CUDA_SUCCESS) {
        pl_pool_release(ch, false);
        stop = errored = true;
        if (enqueued) pl_stage_error("cuMemcpyDtoHAsync", e);
        break;
      }
      enqueued = true;
      e = d->EventRecord[x->pt](ch->ev, x->stream);
      if (e != CUDA_SUCCESS) {
        /* Its bytes cannot be known to have landed: the native call
         * redoes this range. */
        pl_pool_quarantine(ch);
        pl_stage_error("cuEventRecord", e);
        stop = errored = true;
        break;
      }
      unsigned slot = (head + count) % PL_D2H_INFLIGHT;
      fl[slot] = ch;
      fl_off[slot] = issued;
      fl_len[slot] = len;
      count++;
      issued += len;
    }
    if (count == 0) break;
    pl_chunk *ch = fl[head];
    size_t o = fl_off[head], len = fl_len[head];
    head = (head + 1) % PL_D2H_INFLIGHT;
    count--;
    CUresult e = d->EventSynchronize(ch->ev);
    if (e != CUDA_SUCCESS) {
      /* A sticky error from earlier work: the native call for the rest
       * reports it.  Chunks still in flight are freed by their events. */
      pl_pool_release(ch, true);
      while (count) {
        pl_pool_release(fl[head], true);
        head = (head + 1) % PL_D2H_INFLIGHT;
        count--;
      }
      pl_stage_error("cuEventSynchronize", e);
      errored = true;
      break;
    }
    pl_workers_memcpy(dst + o, ch->host, len, false, nt, x->threads);
    pl_pool_release(ch, false);
    done = o + len;
    x->staged += len;
  }

  if (done == c->bytes) {
    *r = CUDA_SUCCESS;
    return true;
  }
  if (!enqueued && errored) return false;
  *r = pl_staging_fallback(x, done, timed_out);
  return true;
}

/* ---- device to host, asynchronous ----------------------------------------- */

/* Most chunks one asynchronous copy holds; a copy needing more reuses
 * them (see pl_d2h_async). */
#define PL_D2H_HELD 64u

/* One copy-out of a host function: a chunk's bytes into the program's
 * buffer; a nonzero ticket marks the chunk's last use, after which the
 * host function frees it (pl_pool_land). */
typedef struct pl_out {
  pl_chunk *ch;
  char *dst;
  size_t n;
  uint64_t ticket;
} pl_out;

/* The argument of one host function: its copy-outs, in stream order. */
typedef struct pl_outs {
  struct pl_outs *prev, *next; /* on pl_outs_live until the host function runs */
  bool nt;                     /* streaming stores (pl_stage_out_stream) */
  unsigned threads;            /* copy threads (pl_staging) */
  unsigned n;
  pl_out e[];
} pl_outs;

/* Every descriptor whose host function has not run yet.  A program may
 * exit with copies still queued; the engine owns their descriptors till
 * then, and keeping them reachable says so to a leak checker (LeakSanitizer
 * at exit) instead of reporting a leak the program did not make. */
static pthread_mutex_t pl_outs_lock = PTHREAD_MUTEX_INITIALIZER;
static pl_outs *pl_outs_live;

/* A descriptor for n copy-outs, on the live list; NULL when out of memory. */
static pl_outs *pl_outs_new(size_t n) {
  pl_outs *o = malloc(sizeof *o + n * sizeof o->e[0]);
  if (o == NULL) return NULL;
  o->n = 0;
  o->prev = NULL;
  pthread_mutex_lock(&pl_outs_lock);
  o->next = pl_outs_live;
  if (o->next) o->next->prev = o;
  pl_outs_live = o;
  pthread_mutex_unlock(&pl_outs_lock);
  return o;
}

static void pl_outs_free(pl_outs *o) {
  pthread_mutex_lock(&pl_outs_lock);
  if (o->prev)
    o->prev->next = o->next;
  else
    pl_outs_live = o->next;
  if (o->next) o->next->prev = o->prev;
  pthread_mutex_unlock(&pl_outs_lock);
  free(o);
}

/* Host function: the DMAs queued before it are complete.  Copies each
 * chunk out and frees those whose last use this was.  Must not call CUDA,
 * nor wait for anything but the copy threads: a host function that waits
 * for GPU work blocks the hardware queue that work may need
 * (docs/bench/2026-11-22-deferring-async-d2h.md, the pump).  Takes only the pool lock. */
static void CUDA_CB pl_copyout(void *arg) {
  pl_outs *o = arg;
  pl_shim_enter();
  for (unsigned i = 0; i < o->n;) {
    /* Chunks back to back in one slab, bound for bytes back to back: one
     * memcpy, so the copy threads split it once. */
    unsigned k = i + 1;
    size_t len = o->e[i].n;
    while (k < o->n && o->e[k - 1].n == o->e[k - 1].ch->size &&
           pl_chunk_adjacent(o->e[k - 1].ch, o->e[k].ch) &&
           o->e[k - 1].dst + o->e[k - 1].n == o->e[k].dst)
      len += o->e[k++].n;
    pl_workers_memcpy(o->e[i].dst, o->e[i].ch->host, len, true, o->nt, o->threads);
    for (; i < k; i++)
      if (o->e[i].ticket) pl_pool_land(o->e[i].ch, o->e[i].ticket);
  }
  pl_outs_free(o);
  pl_shim_leave();
}

/* The chunks one asynchronous copy holds.  used[j]: work queued on the
 * stream may still touch held[j] (our DMA, or the copy-out of the copy we
 * took it over from); theirs[j]: a queued host function frees it. */
typedef struct pl_ring {
  unsigned n;
  pl_chunk *ch[PL_D2H_HELD];
  bool used[PL_D2H_HELD], theirs[PL_D2H_HELD];
} pl_ring;

/* Give back the held chunks no queued host function will free: those
 * with queued work once an event after it completes, the others at once. */
static void pl_d2h_abandon(pl_staging *x, pl_ring *h) {
  for (unsigned j = 0; j < h->n; j++) {
    if (h->theirs[j]) continue;
    if (!h->used[j])
      pl_pool_release(h->ch[j], false);
    else if (x->d->EventRecord[x->pt](h->ch[j]->ev, x->stream) == CUDA_SUCCESS)
      pl_pool_release(h->ch[j], true);
    else
      pl_pool_quarantine(h->ch[j]);
  }
}

/* The share of the pool one asynchronous copy may hold: 1/PL_D2H_RING_DIV.
 * The ring is held until the stream gets to it, and copies beside it (an
 * upload beside a download is the common pipeline, on one stream or two)
 * must still find chunks meanwhile.  A process whose only staged copies of
 * late were asynchronous downloads on one stream (pl_alone) has nothing
 * beside them: its ring may hold the whole pool, which halves the rounds,
 * and so the driver calls, of a copy larger than the pool (a DMA and a host
 * function each, 2-10 us apiece depending on the process:
 * docs/bench/2026-11-23-one-compare-per-allocation.md). */
#ifndef PL_D2H_RING_DIV
#define PL_D2H_RING_DIV 2
#endif

/* How long a mix of staged copies keeps rings at their share.  A training
 * loop mixes uploads and downloads every step, well within it; a program
 * that changes what it copies pays once: a copy of the new kind that finds
 * the whole pool in a ring waits (bounded) and passes through. */
#define PL_ALONE_NS 1000000000ull

/* The kind of the latest staged copy: its stream, and whether it was an
 * asynchronous download (bit 0); bit 2 tells "none yet" from the legacy
 * stream.  And when a staged copy last differed from the one before it. */
static _Atomic uintptr_t pl_last_kind;
static atomic_uint_fast64_t pl_mixed_at; /* 0: never */

/* Note a staged copy of kind `key`.  The common case, the same kind as
 * before, only reads: copies on many threads do not bounce the line. */
static void pl_note_kind(uintptr_t key) {
  uintptr_t prev = atomic_load_explicit(&pl_last_kind, memory_order_relaxed);
  if (PL_LIKELY(prev == key)) return;
  atomic_store_explicit(&pl_last_kind, key, memory_order_relaxed);
  if (prev != 0) atomic_store_explicit(&pl_mixed_at, pl_now_ns(), memory_order_relaxed);
}

/* Whether the staged copies of the last PL_ALONE_NS were all of one kind. */
static bool pl_alone(void) {
  uint64_t m = atomic_load_explicit(&pl_mixed_at, memory_order_relaxed);
  return m == 0 || pl_now_ns() - m > PL_ALONE_NS;
}

/* Ring order: by slab, then address, so that chunks back to back in
 * memory come one after the other and a round's DMAs merge. */
static void pl_ring_sort(pl_ring *h) {
  for (unsigned i = 1; i < h->n; i++) {
    pl_chunk *c = h->ch[i];
    bool u = h->used[i];
    unsigned j = i;
    for (; j > 0 &&
           ((uintptr_t)h->ch[j - 1]->slab > (uintptr_t)c->slab ||
            (h->ch[j - 1]->slab == c->slab && (uintptr_t)h->ch[j - 1]->host > (uintptr_t)c->host));
         j--) {
      h->ch[j] = h->ch[j - 1];
      h->used[j] = h->used[j - 1];
    }
    h->ch[j] = c;
    h->used[j] = u;
  }
}

/* Take the chunks an asynchronous copy of `pieces` chunks needs, at most
 * its share of the pool: first those flying on its own stream, then free
 * ones, growing the pool by a slab for the rest; only when it has none may
 * it wait (bounded).  Returns false on a driver error with none held (the
 * native call must run); *timed_out when the wait ran out. */
static bool pl_d2h_take(pl_staging *x, unsigned long long sid, size_t size, size_t pieces,
                        pl_ring *h, bool *timed_out) {
  size_t share = (size_t)pl_opt_long(PL_OPT_POOL_SIZE) / size / (pl_alone() ? 1 : PL_D2H_RING_DIV);
  size_t want = pieces < PL_D2H_HELD ? pieces : PL_D2H_HELD;
  if (share >= 1 && want > share) want = share;
  h->n = pl_pool_take_flight(x->pool, sid, h->ch, (unsigned)want);
  for (unsigned j = 0; j < h->n; j++) h->used[j] = true;
  while (h->n < want) {
    pl_chunk *ch;
    CUresult e;
    pl_acq a = pl_staging_acquire(x, (unsigned)(want - h->n), h->n == 0 ? x->wait_ns : 0, &ch, &e);
    if (a != PL_ACQ_OK) {
      if (h->n > 0) break;
      if (a == PL_ACQ_ERROR) return false;
      *timed_out = true;
      break;
    }
    h->ch[h->n++] = ch;
  }
  pl_ring_sort(h);
  return true;
}

/* Returns once every DMA and copy-out is queued on the stream; false when
 * nothing was enqueued and the caller must run the native call.
 *
 * Everything is queued before the call returns, a round at a time: a DMA
 * into each held chunk, then one host function copying the round out,
 * then the next round into the same chunks.  Reusing a chunk needs no
 * wait on the host, because the stream runs the next round's DMAs only
 * after the host function that emptied it.  So a copy larger than the pool
 * returns as fast as one that fits, and one queued behind a long kernel
 * returns at once with nothing landing early.  The ring is held until the
 * stream gets there: copies on other streams use the rest of the pool (or
 * wait, bounded, and pass through); the next copy on the same stream takes
 * the ring over. */
static bool pl_d2h_async(pl_staging *x, CUresult *r) {
  const pl_drv *d = x->d;
  pl_copy *c = x->c;
  char *dst = (char *)(uintptr_t)c->dst;
  size_t size = pl_pool_chunk_size();
  if (size == 0) return false;
  size_t pieces = (c->bytes + size - 1) / size;
  if (pieces == 0) return false;

  bool nt = pl_stage_out_stream(c->bytes);
  unsigned long long sid = 0;
  if (d->StreamGetId[x->pt] == NULL || d->StreamGetId[x->pt](x->stream, &sid) != CUDA_SUCCESS)
    sid = 0;
  pl_ring h = {0};
  bool timed_out = false;
  if (!pl_d2h_take(x, sid, size, pieces, &h, &timed_out)) return false;

  /* Piece i of the copy is [i * size, ...), in chunk i % h.n; a copy
   * longer than the ring reuses its chunks round after round.  A round
   * starts at chunk 0, so its runs of adjacent chunks never wrap. */
  size_t off = 0; /* bytes whose DMA and copy-out are queued */
  bool queued = false;
  for (size_t first = 0; h.n > 0 && first < pieces;) {
    size_t round = pieces - first < h.n ? pieces - first : h.n;
    pl_outs *o = pl_outs_new(round);
    if (o == NULL) break;
    o->nt = nt;
    o->threads = x->threads;
    /* One DMA per run of chunks back to back in memory: enqueuing costs
     * the caller ~2 us per call whatever its size (docs/benchmarks.md). */
    for (size_t i = first, k; i < first + round; i = k) {
      for (k = i + 1; k < first + round && pl_chunk_adjacent(h.ch[(k - 1) % h.n], h.ch[k % h.n]);
           k++) {}
      size_t at = i * size, end = k * size < c->bytes ? k * size : c->bytes;
      CUresult e = d->MemcpyDtoHAsync[x->pt](h.ch[i % h.n]->host, c->src + at, end - at, x->stream);
      if (e != CUDA_SUCCESS) {
        if (queued) pl_stage_error("cuMemcpyDtoHAsync", e);
        break;
      }
      queued = true;
      for (size_t m = i; m < k; m++) {
        size_t a = m * size, len = c->bytes - a < size ? c->bytes - a : size;
        h.used[m % h.n] = true;
        o->e[o->n++] = (pl_out){.ch = h.ch[m % h.n], .dst = dst + a, .n = len};
      }
    }
    bool whole = o->n == round; /* else a DMA failed: the copy ends here */
    if (o->n == 0) {
      pl_outs_free(o);
      break;
    }
    for (unsigned k = 0; k < o->n; k++)
      if (!whole || first + k + h.n >= pieces) o->e[k].ticket = pl_pool_ticket(o->e[k].ch);
    /* o is the host function's once launched: keep what we need of it. */
    unsigned n = o->n;
    pl_out last[PL_D2H_HELD];
    memcpy(last, o->e, n * sizeof o->e[0]);
    CUresult e = d->LaunchHostFunc[x->pt](x->stream, pl_copyout, o);
    if (e != CUDA_SUCCESS) {
      /* This round's bytes go to the native call. */
      for (unsigned k = 0; k < n; k++)
        if (last[k].ticket) pl_pool_unticket(last[k].ch);
      pl_outs_free(o);
      pl_stage_error("cuLaunchHostFunc", e);
      break;
    }
    for (unsigned k = 0; k < n; k++)
      if (last[k].ticket) {
        h.theirs[(first + k) % h.n] = true;
        pl_pool_fly(last[k].ch, last[k].ticket, sid);
      }
    size_t end = (first + n) * size < c->bytes ? (first + n) * size : c->bytes;
    x->staged += end - off;
    off = end;
    first += n;
    if (!whole) break;
  }
  pl_d2h_abandon(x, &h);
  if (!queued && !timed_out) return false; /* the native call does it all */
  *r = off < c->bytes ? pl_staging_fallback(x, off, timed_out) : CUDA_SUCCESS;
  return true;
}

/* ---- the entry point ------------------------------------------------------- */

/* Checks that must pass before anything is enqueued, then the pipeline.
 * Caller: inside the re-entry guard.  Returns as pl_stage_copy does. */
static bool pl_stage_run(pl_copy *c, CUresult *r) {
  const pl_drv *d = pl_drv_engines();
  if (d == NULL) return false;
  pl_staging x = {.d = d, .c = c, .pt = (c->flags & PAGELOCK_COPY_PTDS) ? 1 : 0};
  x.stream = (c->flags & PAGELOCK_COPY_ASYNC) ? c->stream : NULL;

  CUcontext ctx = NULL;
  if (d->CtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) return false;
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d->StreamIsCapturing[x.pt](x.stream, &cap) != CUDA_SUCCESS) return false;
  if (cap != CU_STREAM_CAPTURE_STATUS_NONE) {
    c->flags |= PAGELOCK_COPY_CAPTURE;
    return false;
  }
  /* Our chunks' events are the current context's: a stream of another
   * context is the native call's business. */
  if (x.stream != NULL && x.stream != CU_STREAM_LEGACY && x.stream != CU_STREAM_PER_THREAD &&
      d->StreamGetCtx != NULL) {
    CUcontext sctx = NULL;
    if (d->StreamGetCtx(x.stream, &sctx) != CUDA_SUCCESS || sctx != ctx) return false;
  }
  /* A bad device range must fail exactly as the native call fails it, with
   * no chunk of ours having been written anywhere. */
  CUdeviceptr dev = c->dir == PAGELOCK_DIR_H2D ? c->dst : c->src, base = 0;
  size_t size = 0;
  if (d->MemGetAddressRange(&base, &size, dev) != CUDA_SUCCESS) return false;
  if (dev < base || dev - base > size || c->bytes > size - (dev - base)) return false;

  x.pool = pl_pool_get(ctx);
  if (x.pool == NULL || !pl_pool_usable(x.pool)) return false;
  x.wait_ns = (uint64_t)pl_opt_long(PL_OPT_WAIT_US) * 1000u;

  bool async_d2h = c->dir == PAGELOCK_DIR_D2H && (c->flags & PAGELOCK_COPY_ASYNC) &&
                   pl_opt_long(PL_OPT_D2H) == PL_D2H_ASYNC;
  pl_note_kind(((uintptr_t)x.stream << 3) | 4u | ((uintptr_t)x.pt << 1) | (uintptr_t)async_d2h);
  /* Asked before the copy threads wake, so that only the program's load
   * and the shim's threads already awake count. */
  pl_cpuload load = {0, 0};
  bool sized = c->bytes >= PL_CROWD_MIN;
  unsigned idle =
      sized ? pl_cpuload_idle(pl_workers_awake() + 1, PL_CPULOAD_EVERY_NS, &load) : UINT_MAX;
  x.wide = sized && c->bytes > (uint64_t)pl_opt_long(PL_OPT_POOL_SIZE);
  x.threads = pl_stage_threads(x.wide, idle);
  bool crowded = sized && idle < x.threads;
  bool done;
  if (c->dir == PAGELOCK_DIR_H2D)
    done = pl_h2d(&x, r);
  else if (async_d2h)
    done = pl_d2h_async(&x, r);
  else
    done = pl_d2h_sync(&x, r);
  if (x.staged) {
    c->flags |= PAGELOCK_COPY_STAGED;
    PL_ADD(pl_n_copies, 1);
    PL_ADD(pl_n_staged, x.staged);
    if (sized) {
      PL_ADD(pl_n_sized, 1);
      PL_ADD(pl_n_sized_bytes, x.staged);
    }
    if (x.threads > pl_workers_base()) PL_ADD(pl_n_wide, 1);
    unsigned w = atomic_load_explicit(&pl_widest, memory_order_relaxed);
    while (x.threads > w && !atomic_compare_exchange_weak(&pl_widest, &w, x.threads)) {}
    if (crowded) {
      atomic_store_explicit(&pl_crowd_threads, x.threads, memory_order_relaxed);
      PL_ADD(pl_n_crowded, 1);
      PL_ADD(pl_n_crowded_bytes, x.staged);
      uint64_t seen = (uint64_t)load.others << 32 | load.cpus,
               old = atomic_load_explicit(&pl_crowd_seen, memory_order_relaxed);
      while (seen > old && !atomic_compare_exchange_weak(&pl_crowd_seen, &old, seen)) {}
    }
  }
  return done;
}

bool pl_stage_usable(void) { return !atomic_load_explicit(&pl_stage_off, memory_order_relaxed); }

bool pl_stage_ran(void) { return atomic_load(&pl_stage_used); }

bool pl_stage_copy(pl_copy *c, CUresult *r) {
  if (atomic_load_explicit(&pl_stage_off, memory_order_relaxed)) return false;
  if (PL_UNLIKELY(!atomic_load_explicit(&pl_stage_used, memory_order_relaxed)))
    atomic_store(&pl_stage_used, true);
  bool done = false;
  if (c->bytes > 0 && (c->dir == PAGELOCK_DIR_H2D || c->dir == PAGELOCK_DIR_D2H)) {
    pl_shim_enter();
    /* Our chunks are CUPTI ops of their own: link them to the app's call. */
    pl_cupti_link_begin(c->seq);
    done = pl_stage_run(c, r);
    pl_cupti_link_end();
    pl_shim_leave();
  }
  if (!done) PL_ADD(pl_n_pass, c->bytes);
  return done;
}

void pl_stage_get_stats(pl_stage_stats *s) {
  s->copies_staged = atomic_load(&pl_n_copies);
  s->copies_plain = atomic_load(&pl_n_plain);
  s->copies_throttled = atomic_load(&pl_n_throttled);
  s->bytes_staged = atomic_load(&pl_n_staged);
  s->bytes_passthrough = atomic_load(&pl_n_pass);
  s->fallbacks = atomic_load(&pl_n_fallbacks);
  s->waits = atomic_load(&pl_n_waits);
  s->wait_ns = atomic_load(&pl_n_wait_ns);
  s->copies_sized = atomic_load(&pl_n_sized);
  s->bytes_sized = atomic_load(&pl_n_sized_bytes);
  s->copies_crowded = atomic_load(&pl_n_crowded);
  s->bytes_crowded = atomic_load(&pl_n_crowded_bytes);
  uint64_t seen = atomic_load(&pl_crowd_seen);
  s->crowded_others = (unsigned)(seen >> 32);
  s->crowded_cpus = (unsigned)seen;
  s->crowded_threads = atomic_load(&pl_crowd_threads);
  s->copies_wide = atomic_load(&pl_n_wide);
  s->widest = atomic_load(&pl_widest);
  pl_pool_get_stats(&s->pool);
}

void pl_stage_reset_for_test(void) {
  pl_pool_reset_for_test();
  atomic_store(&pl_n_copies, 0);
  atomic_store(&pl_n_throttled, 0);
  atomic_store(&pl_n_plain, 0);
  atomic_store(&pl_n_staged, 0);
  atomic_store(&pl_n_pass, 0);
  atomic_store(&pl_n_fallbacks, 0);
  atomic_store(&pl_n_waits, 0);
  atomic_store(&pl_n_wait_ns, 0);
  atomic_store(&pl_n_sized, 0);
  atomic_store(&pl_n_sized_bytes, 0);
  atomic_store(&pl_n_crowded, 0);
  atomic_store(&pl_n_crowded_bytes, 0);
  atomic_store(&pl_crowd_seen, 0);
  atomic_store(&pl_crowd_threads, 0);
  atomic_store(&pl_n_wide, 0);
  atomic_store(&pl_widest, 0);
  atomic_store(&pl_stage_off, false);
  atomic_store(&pl_last_kind, 0);
  atomic_store(&pl_mixed_at, 0);
}

void pl_stage_mixed_for_test(void) { atomic_store(&pl_mixed_at, pl_now_ns()); }

/* The report's note on staged copies that found fewer idle CPUs than copy
 * threads (cpuload.c says why that matters and what causes it). */
void pl_stage_note_crowded(const pl_stage_stats *s) {
  char text[640];
  snprintf(
      text, sizeof text,
      "%" PRIu64 " of %" PRIu64
      " staged copies of 4 MiB or more (%.1f of %.1f MiB) started with fewer "
      "idle CPUs than their %u copy threads: up to %u runnable threads of others on the %u CPUs this "
      "process may use, so the copy threads shared cores and staged more slowly. Threads that spin while "
      "idle are the usual cause, OpenMP's (PyTorch's) after each parallel operation: a short "
      "GOMP_SPINCOUNT (pagelock run gives 10000 in the modes that stage, unless the program set it or "
      "OMP_WAIT_POLICY, or PAGELOCK_OMP_SPIN=keep) or OMP_WAIT_POLICY=passive frees them",
      s->copies_crowded, s->copies_sized, (double)s->bytes_crowded / (1 << 20),
      (double)s->bytes_sized / (1 << 20), s->crowded_threads, s->crowded_others, s->crowded_cpus);
  pl_trace_note(PAGELOCK_NOTE_WARNING, text);
}

void pl_stage_counters(const pl_stage_stats *s, pagelock_rec_counters *rec) {
  rec->bytes_staged = s->bytes_staged;
  rec->bytes_passthrough = s->bytes_passthrough;
  rec->fallbacks = s->fallbacks;
  rec->waits = s->waits;
  rec->wait_ns = s->wait_ns;
  rec->pool_high_water = s->pool.high_water;
  rec->pool_bytes = s->pool.bound;
}

void pl_stage_atfork_child(void) { atomic_store(&pl_stage_off, true); }
