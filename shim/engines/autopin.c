/* autopin.c - which copies go through a registration of the shim's own
 * (PAGELOCK_MODE register and auto), and how such a copy keeps the
 * contract.
 *
 * The policy.  Only allocations the shim saw being made and will see being
 * released may be registered (hostmem.c's tracked ranges): the malloc
 * family, and anonymous private mappings while glibc serves malloc.  Never
 * shared or file-backed mappings: registering them costs MMU-notifier
 * work, 2-12x slower model loads in vLLM and SGLang (issue 18).  What is
 * registered is every page of an allocation that owns its pages, else its
 * page-aligned interior, so two allocations sharing a page never overlap
 * (pl_reg_span).  `register` asks for a registration at an
 * allocation's first copy; `auto` once the bytes copied to or from it reach
 * PAGELOCK_REGISTER_HOT percent of its size (default 100: the second full
 * upload of a buffer goes registered): a registration and its undo cost
 * about what four uploads through it save over staging
 * (docs/bench/2026-11-25-hardening-and-registration.md); the registration
 * runs on the shim's thread, and a large copy meanwhile follows its pieces
 * as they are made (pl_pinreg_follow), a small one is staged.
 *
 * The copy.  A registered buffer makes the DMA asynchronous, and a
 * pageable program may overwrite the source as soon as an upload returns
 * and read a download's destination as soon as it returns (contract 3).
 * So the bytes outside the registration (an interior's partial first and
 * last pages) go through the native call, the rest through the
 * registration, all on the caller's stream
 * in order, and then the call waits on an event: an upload returns once
 * the DMA has read the source (still ~7x faster than pageable), a download
 * once the bytes are in the buffer.  PAGELOCK_H2D=async and
 * PAGELOCK_D2H=async skip that wait for the asynchronous entry points.
 *
 * Anything else that may touch a shim registration (a copy passed through
 * or staged while its buffer is being registered, a 2D copy of a registered
 * buffer) is made to wait the same way (pl_autopin_settle): the driver
 * treats that memory as page-locked and would not. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "autopin.h"
#include "hostmem.h"
#include "pinreg.h"
#include "pl_cupti.h"
#include "route.h"
#include "stage.h"

/* ---- heat: bytes copied per allocation --------------------------------------- */

/* Direct-mapped by allocation: a collision restarts the newcomer's count
 * (at worst it is registered a copy later).  A block freed and allocated
 * again at the same place and size keeps its heat: the same buffer in all
 * but name, the pattern of a loop that allocates its batch every step. */
#define PL_HEAT_SLOTS 1024u

typedef struct pl_heat {
  uintptr_t abase;
  size_t alen;
  uint64_t copied;
} pl_heat;

static pl_heat pl_heats[PL_HEAT_SLOTS];
static pthread_mutex_t pl_heat_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t pl_heat_add(uintptr_t abase, size_t alen, uint64_t n) {
  pl_heat *h = &pl_heats[((abase >> 12) * 0x9E3779B97F4A7C15ull >> 40) % PL_HEAT_SLOTS];
  pthread_mutex_lock(&pl_heat_lock);
  if (h->abase != abase || h->alen != alen) *h = (pl_heat){.abase = abase, .alen = alen};
  h->copied += n;
  uint64_t c = h->copied;
  pthread_mutex_unlock(&pl_heat_lock);
  return c;
}

/* ---- the driver ------------------------------------------------------------------ */

/* Events for the waits, kept per context: creating one costs a driver
 * call, a few microseconds. */
#define PL_EV_CACHE 32u
typedef struct pl_ev {
  CUcontext ctx;
  CUevent ev;
} pl_ev;
static pl_ev pl_evs[PL_EV_CACHE];
static unsigned pl_nev;
static pthread_mutex_t pl_ev_lock = PTHREAD_MUTEX_INITIALIZER;

static CUevent pl_ev_get(const pl_drv *d, CUcontext ctx) {
  CUevent ev = NULL;
  pthread_mutex_lock(&pl_ev_lock);
  for (unsigned i = pl_nev; i-- > 0;)
    if (pl_evs[i].ctx == ctx) {
      ev = pl_evs[i].ev;
      pl_evs[i] = pl_evs[--pl_nev];
      break;
    }
  pthread_mutex_unlock(&pl_ev_lock);
  if (ev == NULL && d->EventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) ev = NULL;
  return ev;
}

void pl_autopin_ctx_gone(CUcontext ctx) {
  pthread_mutex_lock(&pl_ev_lock);
  for (unsigned i = pl_nev; i-- > 0;)
    if (pl_evs[i].ctx == ctx) pl_evs[i] = pl_evs[--pl_nev]; /* freed by the driver */
  pthread_mutex_unlock(&pl_ev_lock);
  pl_pinreg_ctx_gone(ctx);
}

static void pl_ev_put(const pl_drv *d, CUcontext ctx, CUevent ev) {
  pthread_mutex_lock(&pl_ev_lock);
  bool kept = pl_nev < PL_EV_CACHE;
  if (kept) pl_evs[pl_nev++] = (pl_ev){.ctx = ctx, .ev = ev};
  pthread_mutex_unlock(&pl_ev_lock);
  if (!kept) d->EventDestroy(ev);
}

/* A mark after everything queued so far on the copy's stream: an event,
 * or NULL when none could be recorded (pl_wait_mark then waits for the
 * whole stream instead). */
static CUevent pl_mark_stream(const pl_drv *d, CUcontext ctx, CUstream s, int pt) {
  CUevent ev = pl_ev_get(d, ctx);
  if (ev != NULL && d->EventRecord[pt](ev, s) != CUDA_SUCCESS) {
    pl_ev_put(d, ctx, ev);
    ev = NULL;
  }
  return ev;
}

/* Return once the stream has passed the mark. */
static CUresult pl_wait_mark(const pl_drv *d, CUcontext ctx, CUstream s, int pt, CUevent ev) {
  if (ev != NULL) {
    CUresult r = d->EventSynchronize(ev);
    pl_ev_put(d, ctx, ev);
    return r;
  }
  return d->StreamSynchronize[pt](s);
}

/* Return once everything queued so far on the copy's stream is done. */
static CUresult pl_wait_stream(const pl_drv *d, CUcontext ctx, CUstream s, int pt) {
  return pl_wait_mark(d, ctx, s, pt, pl_mark_stream(d, ctx, s, pt));
}

/* The stream the copy's work goes on, and which twin of each call. */
static CUstream pl_copy_work_stream(const pl_copy *c) {
  return (c->flags & PAGELOCK_COPY_ASYNC) ? c->stream : NULL;
}
static int pl_copy_pt(const pl_copy *c) { return (c->flags & PAGELOCK_COPY_PTDS) ? 1 : 0; }

static bool pl_capturing(const pl_drv *d, const pl_copy *c) {
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d->StreamIsCapturing[pl_copy_pt(c)](pl_copy_work_stream(c), &cap) != CUDA_SUCCESS)
    return false;
  return cap != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- the route's questions ------------------------------------------------------- */

/* How long a copy waits for the shim's thread to make the next piece of a
 * registration it follows (a 16 MiB piece takes ~0.5 ms; longer, the
 * thread is busy with another buffer, and the rest is staged). */
#define PL_FOLLOW_WAIT_NS 3000000ull
static uint64_t pl_follow_wait_ns = PL_FOLLOW_WAIT_NS;

void pl_autopin_set_follow_wait_for_test(uint64_t ns) {
  pl_follow_wait_ns = ns ? ns : PL_FOLLOW_WAIT_NS;
}

void pl_autopin_probe_begin(pl_autopin_probe *p, uintptr_t h) {
  p->use.slot = 0;
  p->use.ask.len = 0;
  p->h = h;
}

static uint8_t pl_ans(bool yes) { return yes ? PL_ANS_YES : PL_ANS_NO; }

void pl_autopin_answer(pl_route_in *in, int ask, const pl_copy *c, pl_autopin_probe *p) {
  uintptr_t h = p->h;
  size_t n = c->bytes;
  if (ask == PL_ASK_ANY) { /* pl_copy_route answers it itself: one atomic load */
    in->any = pl_ans(pl_pinreg_any());
    return;
  }
  pl_shim_enter();
  switch (ask) {
    case PL_ASK_HOLD: in->hold = pl_ans(pl_pinreg_hold(h, n, &p->use)); break;
    case PL_ASK_SPAN: {
      int kind;
      if (!pl_hostmem_lookup(h, &p->abase, &p->alen, &kind) ||
          (kind & PL_ORIGIN_MASK) == PL_ORIGIN_MAPONLY) {
        in->span = PL_SPAN_UNTRACKED;
      } else if ((kind & PL_ORIGIN_MASK) == PL_ORIGIN_SHARED) {
        in->span = PL_SPAN_SHARED;
      } else if (kind & PL_ALLOC_REG_FAILED) {
        in->span = PL_SPAN_REFUSED;
      } else {
        pl_reg_span(p->abase, p->alen, kind, &p->lo, &p->hi);
        in->span = p->lo >= p->hi || h + n <= p->lo || h >= p->hi ? PL_SPAN_EDGE : PL_SPAN_IN;
      }
      break;
    }
    case PL_ASK_BUSY: in->busy = pl_ans(pl_pinreg_busy(p->lo, p->hi - p->lo)); break;
    case PL_ASK_FOLLOW:
      in->follow = pl_ans(pl_pinreg_hold_wait(h, n, &p->use, pl_follow_wait_ns));
      break;
    case PL_ASK_HOT: {
      uintptr_t a = h > p->abase ? h : p->abase,
                b = h + n < p->abase + p->alen ? h + n : p->abase + p->alen;
      uint64_t heat = pl_heat_add(p->abase, p->alen, b - a);
      in->hot = pl_ans(heat * 100 >= (uint64_t)pl_opt_long(PL_OPT_REGISTER_HOT) * p->alen);
      break;
    }
    case PL_ASK_CTX:
      p->d = pl_drv_engines();
      p->ctx = NULL;
      in->ctx =
          pl_ans(p->d != NULL && p->d->CtxGetCurrent(&p->ctx) == CUDA_SUCCESS && p->ctx != NULL);
      break;
    case PL_ASK_CAPTURE: in->capture = pl_ans(pl_capturing(p->d, c)); break;
    case PL_ASK_ROOM:
      in->room = pl_ans(pl_pinreg_make_room(p->hi - p->lo));
      if (in->room == PL_ANS_YES) {
        p->use.ask.base = p->lo;
        p->use.ask.len = p->hi - p->lo;
        p->use.ask.abase = p->abase;
        p->use.ask.alen = p->alen;
        p->use.ask.ctx = p->ctx;
      }
      break;
  }
  pl_shim_leave();
}

void pl_autopin_after(pl_copy *c, pl_pin_use *use) {
  if (use->ask.len == 0) return;
  pl_shim_enter();
  if (!pl_pinreg_request(use->ask.base, use->ask.len, use->ask.abase, use->ask.alen, use->ask.ctx))
    c->why = PAGELOCK_WHY_BUDGET;
  use->ask.len = 0;
  pl_shim_leave();
}

/* ---- the copy over a registration ---------------------------------------------------- */

/* Bytes [off, off+len) of c as a copy of their own. */
static pl_copy pl_part(const pl_copy *c, size_t off, size_t len) {
  pl_copy part = *c;
  part.dst += off;
  part.src += off;
  part.bytes = len;
  return part;
}

/* Whether the copy must wait for its DMA before returning. */
static bool pl_must_wait(const pl_copy *c) {
  if (!(c->flags & PAGELOCK_COPY_ASYNC)) return true;
  if (c->dir == PAGELOCK_DIR_H2D) return pl_opt_long(PL_OPT_H2D) != PL_H2D_ASYNC;
  return pl_opt_long(PL_OPT_D2H) != PL_D2H_ASYNC;
}

/* The last bytes of a registered upload that go through the staging pool
 * instead.  Why: an upload from the program's registered buffer may return
 * only once the DMA has read it (contract 3), so a program that queues
 * uploads back to back on a copy stream leaves the copy engine idle from
 * the end of each DMA until its next call arrives.  The tail, copied into
 * pinned chunks by the copy threads while the head's DMA runs, is the
 * shim's own: its DMA may still be queued when the call returns, and it
 * keeps the engine busy across that gap.
 *
 * How long the gap is depends on the program, so each thread measures its
 * own: from the return of its last waited upload to its next copy over a
 * registration, less the time it spent waiting for the GPU meanwhile (the
 * turnaround), smoothed over a few calls.  The tail is what the DMA moves
 * in that time at ~50 GB/s: a fixed share of the span covered less than
 * half of a PyTorch prefetch loop's gap, while a copy-kernel-copy loop's
 * kernel only waits longer behind a larger one
 * (docs/bench/2026-11-27-pool-at-cuinit.md).  Bounds: none when the
 * turnaround asks for less than 1 MiB (the staging engine's own start
 * costs about what it would cover), and at most a quarter of the span and
 * 32 MiB, which the copy threads can fill while the other three quarters'
 * DMA runs.  A thread's first upload, before it has a turnaround, takes
 * an eighth. */
#define PL_TAIL_MIN_SPAN (4u << 20)
#define PL_TAIL_MIN ((size_t)1 << 20)
#define PL_TAIL_MAX ((size_t)32 << 20)
#define PL_TAIL_BYTES_PER_NS 50
/* A turnaround longer than this is the program doing something else
 * (a step's end, an evaluation), not its copy loop: counted as this. */
#define PL_TURNAROUND_MAX_NS 2000000u

/* This thread's last waited upload returned then (0: none since its last
 * copy over a registration), the time it has spent since waiting for the
 * GPU (synchronize calls, other copy calls), and its smoothed turnaround
 * (0: none yet). */
static PL_TLS uint64_t pl_tls_returned, pl_tls_waited, pl_tls_turnaround;

/* A copy over a registration starts: the turnaround since the last waited
 * upload, less the waits, smoothed with weight 1/4.  A wait is left out
 * because the tail's own DMA may be what the program waited for: a loop
 * that synchronizes after each upload would come back later the longer
 * the tail, and the tail would grow to its cap on a gap it made itself. */
static void pl_turnaround_note(uint64_t now) {
  if (pl_tls_returned == 0 || now < pl_tls_returned) return;
  uint64_t gap = now - pl_tls_returned;
  gap = gap > pl_tls_waited ? gap - pl_tls_waited : 0;
  if (gap > PL_TURNAROUND_MAX_NS) gap = PL_TURNAROUND_MAX_NS;
  pl_tls_turnaround = pl_tls_turnaround ? (3 * pl_tls_turnaround + gap) / 4 : gap;
  pl_tls_returned = pl_tls_waited = 0;
}

uint64_t pl_autopin_wait_begin(void) { return pl_tls_returned ? pl_now_ns() : 0; }

void pl_autopin_wait_end(uint64_t t0) {
  /* A wait that began before the last return is that upload's own call. */
  if (t0 != 0 && pl_tls_returned != 0 && t0 >= pl_tls_returned) pl_tls_waited += pl_now_ns() - t0;
}

static size_t pl_tail_bytes(size_t span) {
  if (span < PL_TAIL_MIN_SPAN) return 0;
  size_t cap = span / 4 < PL_TAIL_MAX ? span / 4 : PL_TAIL_MAX;
  size_t t = span / 8;
  if (pl_tls_turnaround != 0) {
    t = (size_t)(pl_tls_turnaround * PL_TAIL_BYTES_PER_NS);
    if (t < PL_TAIL_MIN) return 0;
  }
  if (t > cap) t = cap;
  return t & ~(size_t)4095;
}

/* Bytes [from, to) of c, wholly inside the registration that starts at
 * base, queued on the stream: one call per piece of it (pinreg.h,
 * PL_PIN_PIECE), as the driver refuses a host range that runs from one
 * registration into the next.  Returns the offset queued up to: `to`, or
 * where the driver refused a piece (*r says why). */
static size_t pl_reg_part(const pl_drv *d, const pl_copy *c, uintptr_t base, size_t from, size_t to,
                          CUstream s, int pt, CUresult *r) {
  uintptr_t h = (uintptr_t)(c->dir == PAGELOCK_DIR_H2D ? c->src : c->dst);
  *r = CUDA_SUCCESS;
  size_t at = from;
  while (at < to) {
    size_t next = pl_pin_piece_end(base, h + at) - h;
    if (next > to) next = to;
    *r = c->dir == PAGELOCK_DIR_H2D
             ? d->MemcpyHtoDAsync[pt](c->dst + at, (const void *)(h + at), next - at, s)
             : d->MemcpyDtoHAsync[pt]((void *)(h + at), c->src + at, next - at, s);
    if (*r != CUDA_SUCCESS) break;
    at = next;
  }
  return at;
}

/* The native call for bytes [off, off+len) of c, cut at the registrations'
 * edges (pl_pinreg_native). */
static CUresult pl_native_cut_part(const pl_copy *c, size_t off, size_t len) {
  pl_copy part = pl_part(c, off, len);
  return pl_pinreg_native(&part);
}

/* Move the mark after everything queued so far: a later part may have
 * gone to the DMA from the program's memory (a registration's), which the
 * call must wait for as it waits for the head's. */
static void pl_remark(const pl_drv *d, CUevent *mark, CUcontext ctx, CUstream s, int pt) {
  if (*mark != NULL) pl_ev_put(d, ctx, *mark);
  *mark = pl_mark_stream(d, ctx, s, pt);
}

/* Whether bytes [off, off+len) of c, given to the native call, may have
 * been queued as a DMA of the program's memory: some lie in a
 * registration, live or made meanwhile (pieces beyond the held ones). */
static bool pl_native_over_reg(const pl_copy *c, size_t off, size_t len) {
  uintptr_t h = (uintptr_t)(c->dir == PAGELOCK_DIR_H2D ? c->src : c->dst);
  return len > 0 && pl_pinreg_touches(h + off, len);
}

/* Bytes [off, off+len) of the upload c through the staging pool, queued
 * after the head's mark.  Should the engine decline (no pool, capture),
 * they go as the head did, from the registration, and the mark moves
 * after them. */
static CUresult pl_tail_copy(const pl_drv *d, const pl_copy *c, uintptr_t base, size_t off,
                             size_t len, CUevent *mark, CUcontext ctx, CUstream s, int pt) {
  pl_copy part = pl_part(c, off, len);
  CUresult r;
  if (pl_stage_copy(&part, &r)) {
    /* The pool gave up part way (no chunk within PAGELOCK_WAIT_US): the
     * rest went to the native call, which reads the registration
     * asynchronously. */
    if (part.flags & PAGELOCK_COPY_FALLBACK) pl_remark(d, mark, ctx, s, pt);
    return r;
  }
  size_t at = pl_reg_part(d, c, base, off, off + len, s, pt, &r);
  if (at < off + len) r = pl_native_cut_part(c, at, off + len - at);
  pl_remark(d, mark, ctx, s, pt);
  return r;
}

/* Checks that must pass before anything is queued; false: the native call
 * does the whole copy. */
static bool pl_can_run(const pl_drv *d, pl_copy *c, CUcontext *ctx) {
  if (d->CtxGetCurrent(ctx) != CUDA_SUCCESS || *ctx == NULL) return false;
  CUstream s = pl_copy_work_stream(c);
  if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && d->StreamGetCtx != NULL) {
    CUcontext sctx = NULL;
    if (d->StreamGetCtx(s, &sctx) != CUDA_SUCCESS || sctx != *ctx) return false;
  }
  /* A bad device range fails exactly as the native call fails it. */
  CUdeviceptr dev = c->dir == PAGELOCK_DIR_H2D ? c->dst : c->src, base = 0;
  size_t size = 0;
  if (d->MemGetAddressRange(&base, &size, dev) != CUDA_SUCCESS) return false;
  return dev >= base && dev - base <= size && c->bytes <= size - (dev - base);
}

/* Bytes [off, off+len) of c through the staging pool, else the native
 * call cut at the registration's edges (pl_pinreg_native).  *native: some
 * went to the native call. */
static CUresult pl_stage_part(const pl_copy *c, size_t off, size_t len, bool *native) {
  pl_copy part = pl_part(c, off, len);
  CUresult r;
  *native = true;
  if (pl_stage_copy(&part, &r)) {
    *native = (part.flags & PAGELOCK_COPY_FALLBACK) != 0;
    return r;
  }
  return pl_native_cut_part(c, off, len);
}

void pl_autopin_copy(pl_copy *c, pl_pin_use *use, CUresult *r) {
  pl_shim_enter();
  pl_turnaround_note(pl_now_ns());
  pl_cupti_link_begin(c->seq);
  const pl_drv *d = pl_drv_engines();
  CUcontext ctx = NULL;
  uintptr_t h = (uintptr_t)(c->dir == PAGELOCK_DIR_H2D ? c->src : c->dst);
  if (d == NULL || !pl_can_run(d, c, &ctx)) {
    *r = pl_pinreg_native(c);
    pl_autopin_settle(c, h, c->bytes);
  } else if (pl_capturing(d, c)) {
    /* Captured as it is: the driver bakes the registered part into the
     * graph as page-locked memory, so the registration must outlive it. */
    pl_pinreg_pin_for_graph(use->base, use->iend - use->base);
    *r = pl_pinreg_native(c);
    c->flags |= PAGELOCK_COPY_CAPTURE | PAGELOCK_COPY_REGISTERED;
  } else {
    CUstream s = pl_copy_work_stream(c);
    int pt = pl_copy_pt(c);
    bool wait = pl_must_wait(c);
    size_t lo = h < use->base ? use->base - h : 0;
    size_t hi = h + c->bytes > use->end ? use->end - h : c->bytes;
    size_t span = h + c->bytes > use->iend ? use->iend - h : c->bytes;
    /* A registration still being made covers the copy's first bytes
     * only: the rest follows its pieces as the shim's thread makes them,
     * and what it has not made in time is staged (the pool or its
     * fallback). */
    bool following = use->end < use->iend;
    size_t tail = c->dir == PAGELOCK_DIR_H2D && wait && !following ? pl_tail_bytes(hi - lo) : 0;
    size_t mid = hi - tail;
    *r = lo ? pl_native_cut_part(c, 0, lo) : CUDA_SUCCESS;
    bool queued = false, waits = false;
    CUevent mark = NULL;
    if (*r == CUDA_SUCCESS) {
      CUresult e;
      size_t at = pl_reg_part(d, c, use->base, lo, mid, s, pt, &e);
      /* Why follow instead of staging the rest at once: while a piece is
       * being registered the driver holds back every other thread's copy
       * submissions, so a staged copy beside a registration crawled,
       * while each piece's DMA here runs under the next piece's
       * registration (docs/bench/2026-11-28-real-programs.md). */
      while (following && at == mid && mid < span && pl_pinreg_follow(use, pl_follow_wait_ns)) {
        hi = h + c->bytes > use->end ? use->end - h : c->bytes;
        at = pl_reg_part(d, c, use->base, mid, hi, s, pt, &e);
        mid = hi;
      }
      bool rest_staged = following && c->bytes - hi >= (uint64_t)pl_opt_long(PL_OPT_STAGE_MIN);
      queued = at > lo || mid == lo;
      waits = queued && wait;
      if (waits) mark = pl_mark_stream(d, ctx, s, pt);
      /* Refused: the native call does the rest, in stream order, and its
       * result is the program's (as the staging engine does). */
      size_t from = at < mid ? at : hi;
      bool native = from < c->bytes;
      if (at < mid)
        *r = pl_native_cut_part(c, at, c->bytes - at);
      else if (rest_staged)
        *r = pl_stage_part(c, hi, c->bytes - hi, &native);
      else if (hi < c->bytes)
        /* The partial last page, or a short rest of a registration still
         * being made: cut where its next piece may begin meanwhile. */
        *r = pl_native_cut_part(c, hi, c->bytes - hi);
      if (wait && native && pl_native_over_reg(c, from, c->bytes - from)) {
        pl_remark(d, &mark, ctx, s, pt);
        waits = true;
      }
      /* Last: a pageable edge may make the driver wait for the stream, and
       * that must not include the tail's DMA. */
      if (at == mid && tail && *r == CUDA_SUCCESS)
        *r = pl_tail_copy(d, c, use->base, mid, tail, &mark, ctx, s, pt);
    }
    if (queued) c->flags |= PAGELOCK_COPY_REGISTERED;
    if (waits) {
      CUresult e = pl_wait_mark(d, ctx, s, pt, mark);
      if (*r == CUDA_SUCCESS) *r = e;
      if (queued && c->dir == PAGELOCK_DIR_H2D) pl_tls_returned = pl_now_ns();
    }
  }
  pl_pinreg_unhold(use);
  pl_cupti_link_end();
  pl_shim_leave();
}

void pl_autopin_settle(pl_copy *c, uintptr_t host, size_t n) {
  if (PL_LIKELY(!pl_pinreg_any()) || !(c->flags & PAGELOCK_COPY_ASYNC) || n == 0) return;
  if (!pl_pinreg_touches(host, n)) return;
  pl_shim_enter();
  const pl_drv *d = pl_drv_engines();
  CUcontext ctx = NULL;
  if (d != NULL && d->CtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != NULL) {
    if (pl_capturing(d, c)) {
      pl_pinreg_pin_for_graph(host, n);
      c->flags |= PAGELOCK_COPY_CAPTURE;
    } else if (pl_must_wait(c)) {
      /* The program's result is the call's; a failure here is sticky and
       * shows at its next call, as it would have. */
      pl_wait_stream(d, ctx, pl_copy_work_stream(c), pl_copy_pt(c));
    }
  }
  pl_shim_leave();
}

void pl_autopin_reset_for_test(void) {
  pl_tls_returned = pl_tls_waited = pl_tls_turnaround = 0;
  pthread_mutex_lock(&pl_heat_lock);
  memset(pl_heats, 0, sizeof pl_heats);
  pthread_mutex_unlock(&pl_heat_lock);
}
