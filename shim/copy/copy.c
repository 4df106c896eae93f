/* copy.c - the copy funnel: where every wrapper hands its copy.
 *
 * All wrappers (runtime-level calls arrive here through the driver symbols
 * cudart resolved) funnel into pl_copy_exec(): an exact repeat of a copy
 * the thread made before only adds to its run (repeat.c); any other takes
 * the whole way here: classify the host side, capture the stack of a
 * pageable copy, decide the route (route.h: one pure function, asking the
 * engines what it needs to know), run it (the native call, cut or not;
 * the pinned pool, stage.c; a registration of the shim's own, autopin.c
 * and pinreg.c), record what happened.  The COPY record carries the route
 * (its flags) and why a pageable copy was not registered. */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"
#include "copy.h"
#include "autopin.h"
#include "clock.h"
#include "hostmem.h"
#include "pinreg.h"
#include "pl_cupti.h"
#include "pystack.h"
#include "repeat.h"
#include "route.h"
#include "run.h"
#include "stack.h"
#include "stage.h"
#include "trace.h"

/* ---- descriptors: what a 2D, 3D or batch call copies --------------------- */

/* The memory kind a 2D/3D descriptor names for one side, and the address
 * to classify when the kind must be asked of the driver. */
static uint8_t pl_side(CUmemorytype t, const void *host, CUdeviceptr dev, CUdeviceptr *probe) {
  switch (t) {
    case CU_MEMORYTYPE_HOST: *probe = (CUdeviceptr)(uintptr_t)host; return PAGELOCK_MEM_UNKNOWN;
    case CU_MEMORYTYPE_UNIFIED: *probe = dev; return PAGELOCK_MEM_UNKNOWN;
    case CU_MEMORYTYPE_ARRAY: *probe = 0; return PAGELOCK_MEM_ARRAY;
    default: *probe = 0; return PAGELOCK_MEM_DEVICE;
  }
}

/* Fill a pl_copy from a 2D descriptor; NULL descriptors go to the driver,
 * which reports the error the program expects. */
void pl_fill_2d(pl_copy *c, const CUDA_MEMCPY2D *p) {
  c->args = p;
  if (p == NULL) return;
  c->bytes = p->WidthInBytes * p->Height;
  c->src_mem = pl_side(p->srcMemoryType, p->srcHost, p->srcDevice, &c->src);
  c->dst_mem = pl_side(p->dstMemoryType, p->dstHost, p->dstDevice, &c->dst);
}
void pl_fill_3d(pl_copy *c, const CUDA_MEMCPY3D *p) {
  c->args = p;
  if (p == NULL) return;
  c->bytes = p->WidthInBytes * p->Height * p->Depth;
  c->src_mem = pl_side(p->srcMemoryType, p->srcHost, p->srcDevice, &c->src);
  c->dst_mem = pl_side(p->dstMemoryType, p->dstHost, p->dstDevice, &c->dst);
}

void pl_batch_entry(const pl_copy *c, size_t i, CUdeviceptr *dst, CUdeviceptr *src, size_t *n) {
  const pl_batch_args *a = c->args;
  *dst = a->dsts ? a->dsts[i] : 0;
  *src = a->srcs ? a->srcs[i] : 0;
  *n = a->sizes ? a->sizes[i] : 0;
}
size_t pl_batch_count(const pl_copy *c) {
  const pl_batch_args *a = c->args;
  return a ? a->count : 0;
}

/* ---- the decision --------------------------------------------------------- */

/* The host side's memory kind, given both sides' kinds and the direction. */
static uint8_t pl_host_side(int dir, uint8_t src_mem, uint8_t dst_mem) {
  switch (dir) {
    case PAGELOCK_DIR_H2D: return src_mem;
    case PAGELOCK_DIR_D2H: return dst_mem;
    case PAGELOCK_DIR_H2H: return src_mem == PAGELOCK_MEM_PAGEABLE ? src_mem : dst_mem;
    default: return PAGELOCK_MEM_UNKNOWN;
  }
}

static bool pl_is_host(uint8_t m) {
  return m == PAGELOCK_MEM_PAGEABLE || m == PAGELOCK_MEM_PINNED || m == PAGELOCK_MEM_REGISTERED;
}

/* Direction from the two sides' memory kinds (managed counts as device: the
 * driver migrates it, no host bounce buffer is involved). */
static int pl_direction(uint8_t src_mem, uint8_t dst_mem) {
  bool sh = pl_is_host(src_mem), dh = pl_is_host(dst_mem);
  if (sh && dh) return PAGELOCK_DIR_H2H;
  if (sh) return PAGELOCK_DIR_H2D;
  if (dh) return PAGELOCK_DIR_D2H;
  if (src_mem == PAGELOCK_MEM_UNKNOWN || dst_mem == PAGELOCK_MEM_UNKNOWN)
    return PAGELOCK_DIR_UNKNOWN;
  return PAGELOCK_DIR_D2D;
}

/* Fill in the sides the wrapper could not know, then the direction; and
 * the allocation site of the host side when the registry knows it. */
static void pl_classify(pl_copy *c) {
  uint32_t ss = 0, ds = 0;
  bool sf = false, df = false;
  if (c->src_mem == PAGELOCK_MEM_UNKNOWN && c->src)
    c->src_mem = (uint8_t)pl_hostmem_classify_site(c->src, &ss, &sf);
  if (c->dst_mem == PAGELOCK_MEM_UNKNOWN && c->dst)
    c->dst_mem = (uint8_t)pl_hostmem_classify_site(c->dst, &ds, &df);
  if (c->dir == PAGELOCK_DIR_UNKNOWN) c->dir = pl_direction(c->src_mem, c->dst_mem);
  c->alloc_stack = c->dir == PAGELOCK_DIR_D2H ? ds : ss;
  if (c->dir == PAGELOCK_DIR_D2H ? df : sf) c->flags |= PAGELOCK_COPY_FIRST_USE;
}

/* Write one COPY record, built in place in the trace buffer: this runs
 * once per copy of the program, pinned ones included, and a copy through
 * a stack buffer cost as much as the rest
 * (docs/bench/2026-11-23-fewer-copy-threads.md). */
static bool pl_record(const pl_copy *c, uint64_t t0, uint64_t host_ns, CUresult r,
                      uint32_t stack_id, uint64_t corr, uint32_t gpu_corr,
                      pagelock_rec_copy *keep) {
  /* Stacks first: their records must precede any record naming them, and
   * they take the stack lock, which must not nest inside the trace lock. */
  pl_stack_emit(stack_id);
  pl_stack_emit(c->alloc_stack);
  int device = pl_copy_device(c->stream);
  uint32_t tid = pl_gettid();
  pagelock_rec_copy *rec = pl_trace_copy_begin();
  if (rec == NULL) return false;
  memset(rec, 0, sizeof *rec); /* a constant size: inline stores */
  rec->h.type = PAGELOCK_REC_COPY;
  rec->h.size = sizeof *rec;
  rec->start_ns = t0;
  rec->host_ns = host_ns;
  rec->bytes = c->bytes;
  rec->stream = (uint64_t)(uintptr_t)c->stream;
  rec->dir = (uint8_t)c->dir;
  rec->src_mem = c->src_mem;
  rec->dst_mem = c->dst_mem;
  rec->host_mem = pl_host_side(c->dir, c->src_mem, c->dst_mem);
  rec->host_ptr = c->dir == PAGELOCK_DIR_D2H                                 ? c->dst
                  : c->dir == PAGELOCK_DIR_H2D || c->dir == PAGELOCK_DIR_H2H ? c->src
                                                                             : 0;
  rec->callsite = (uint64_t)(uintptr_t)c->callsite;
  rec->correlation = corr;
  rec->tid = tid;
  rec->stack_id = stack_id;
  rec->alloc_stack_id = c->alloc_stack;
  rec->flags = c->flags;
  rec->result = (int32_t)r;
  rec->device = device;
  rec->api = (uint16_t)c->api;
  rec->gpu_correlation = gpu_corr;
  rec->why = c->why;
  rec->count = rec->timed = 1;
  if (keep) *keep = *rec;
  pl_trace_copy_end();
  return true;
}

static bool pl_registers(long mode) {
  return mode == PAGELOCK_MODE_REGISTER || mode == PAGELOCK_MODE_AUTO;
}

/* The decision's view of copy c (route.h), its host bytes starting at h;
 * nothing asked of the engines yet. */
static PL_ALWAYS_INLINE pl_route_in pl_route_view(const pl_copy *c, long mode, uintptr_t h) {
  /* Observe's decision reads neither the page size nor the staging
   * threshold: not asked for, they cost a copy there nothing. */
  bool observe = mode == PAGELOCK_MODE_OBSERVE;
  return (pl_route_in){.mode = mode,
                       .dir = (uint8_t)c->dir,
                       .host = pl_host_side(c->dir, c->src_mem, c->dst_mem),
                       .shaped = c->args != NULL,
                       .host_ptr = h,
                       .page = observe ? 0 : pl_page_size(),
                       .bytes = c->bytes,
                       .stage_min = observe ? UINT64_MAX : (uint64_t)pl_opt_long(PL_OPT_STAGE_MIN)};
}

/* The route of copy c when it asks the engines more than whether any
 * registration exists (most copies ask nothing, most small ones under auto
 * only that): apart, so that those build no answers in memory.  It
 * decides again from the start, which costs only the checks: the decision
 * is pure. */
static __attribute__((noinline)) pl_route pl_route_asking(pl_copy *c, long mode, uintptr_t h,
                                                          uint8_t any, pl_autopin_probe *p) {
  pl_autopin_probe_begin(p, h);
  pl_route_in in = pl_route_view(c, mode, h);
  in.any = any;
  pl_route v;
  while ((v = pl_route_decide(&in)).ask != PL_ASK_NONE) pl_autopin_answer(&in, v.ask, c, p);
  return v;
}

pl_route pl_copy_route(pl_copy *c, long mode, pl_autopin_probe *p) {
  uintptr_t h = (uintptr_t)(c->dir == PAGELOCK_DIR_D2H ? c->dst : c->src);
  /* The probe (p) is begun only where a question is asked: a route that
   * registers, or asks for a registration, went through the questions. */
  pl_route_in in = pl_route_view(c, mode, h);
  pl_route v = pl_route_decide(&in);
  if (v.ask == PL_ASK_ANY) { /* one atomic load, with no effect */
    in.any = pl_pinreg_any() ? PL_ANS_YES : PL_ANS_NO;
    v = pl_route_decide(&in);
  }
  if (PL_UNLIKELY(v.ask != PL_ASK_NONE)) v = pl_route_asking(c, mode, h, in.any, p);
  c->why = v.why;
  return v;
}

/* Why a copy recorded without taking a route (a batch's entries, a graph
 * node) was not registered. */
static uint8_t pl_why_unrouted(const pl_copy *c, long mode) {
  pl_route_in in = pl_route_view(c, mode, 0);
  in.shaped = true;
  return pl_route_decide(&in).why;
}

/* The host bytes a 2D/3D copy reads or writes lie within [*p, *p+*n). */
static bool pl_host_extent(const pl_copy *c, uintptr_t *p, size_t *n) {
  bool src = c->dir == PAGELOCK_DIR_H2D;
  size_t x, y, z, pitch, height, w, h, depth;
  const void *host;
  switch (c->api) {
    case PAGELOCK_API_cuMemcpy2D_v2:
    case PAGELOCK_API_cuMemcpy2D_v2_ptds:
    case PAGELOCK_API_cuMemcpy2DUnaligned_v2:
    case PAGELOCK_API_cuMemcpy2DUnaligned_v2_ptds:
    case PAGELOCK_API_cuMemcpy2DAsync_v2:
    case PAGELOCK_API_cuMemcpy2DAsync_v2_ptsz: {
      const CUDA_MEMCPY2D *a = c->args;
      host = src ? a->srcHost : a->dstHost;
      x = src ? a->srcXInBytes : a->dstXInBytes;
      y = src ? a->srcY : a->dstY;
      pitch = src ? a->srcPitch : a->dstPitch;
      z = 0, height = 0, w = a->WidthInBytes, h = a->Height, depth = 1;
      break;
    }
    case PAGELOCK_API_cuMemcpy3D_v2:
    case PAGELOCK_API_cuMemcpy3D_v2_ptds:
    case PAGELOCK_API_cuMemcpy3DAsync_v2:
    case PAGELOCK_API_cuMemcpy3DAsync_v2_ptsz: {
      const CUDA_MEMCPY3D *a = c->args;
      host = src ? a->srcHost : a->dstHost;
      x = src ? a->srcXInBytes : a->dstXInBytes;
      y = src ? a->srcY : a->dstY;
      z = src ? a->srcZ : a->dstZ;
      pitch = src ? a->srcPitch : a->dstPitch;
      height = src ? a->srcHeight : a->dstHeight;
      w = a->WidthInBytes, h = a->Height, depth = a->Depth;
      break;
    }
    default: return false;
  }
  if (w == 0 || h == 0 || depth == 0) return false;
  if (pitch < w) pitch = w;
  if (height < h) height = h;
  *p = (uintptr_t)host + x + y * pitch + z * pitch * height;
  *n = (depth - 1) * pitch * height + (h - 1) * pitch + w;
  return true;
}

/* A batch call: classify and record each entry, sharing the call's time. */
static CUresult pl_copy_exec_batch(pl_copy *c) {
  size_t n = pl_batch_count(c);
  bool pageable = false;
  pl_shim_enter();
  for (size_t i = 0; i < n && !pageable; i++) {
    CUdeviceptr d, s;
    size_t sz;
    pl_batch_entry(c, i, &d, &s, &sz);
    pageable = pl_hostmem_classify(s) == PAGELOCK_MEM_PAGEABLE ||
               pl_hostmem_classify(d) == PAGELOCK_MEM_PAGEABLE;
  }
  uint32_t stack = pageable ? pl_stack_capture_at(2, c->callsite, c, NULL) : 0;
  pl_shim_leave();
  pl_cupti_corr_begin();
  pl_stamp st;
  pl_stamp_start(&st);
  CUresult r = c->native(c);
  /* One wait covers every entry: they share the stream. */
  for (size_t i = 0; i < n && pl_pinreg_any() && !(c->flags & PAGELOCK_COPY_CAPTURE); i++) {
    CUdeviceptr d, s;
    size_t sz;
    pl_batch_entry(c, i, &d, &s, &sz);
    pl_autopin_settle(c, (uintptr_t)s, sz);
    pl_autopin_settle(c, (uintptr_t)d, sz);
  }
  uint64_t dt = pl_stamp_elapsed(&st), t0 = st.ns;
  uint32_t gpu_corr = pl_cupti_corr_end();
  pl_shim_enter();
  uint64_t corr = pl_next_correlation();
  long mode = pl_opt_long(PL_OPT_MODE);
  for (size_t i = 0; i < n; i++) {
    pl_copy e = *c;
    pl_batch_entry(c, i, &e.dst, &e.src, &e.bytes);
    e.src_mem = e.dst_mem = PAGELOCK_MEM_UNKNOWN;
    e.dir = PAGELOCK_DIR_UNKNOWN;
    pl_classify(&e);
    e.why = pl_why_unrouted(&e, mode);
    pl_record(&e, t0, dt / n, r, stack, corr, gpu_corr, NULL);
  }
  pl_shim_leave();
  return r;
}

/* The whole way: classify, stack, route, run, record, and open a run for
 * the copy's repeats when it may have some.  Inlined: as a call of its own
 * it cost a copy taking it 21 instructions more, for 3 fewer on a
 * repeat's path (callgrind over fakecuda, bench_copy ab pageable 256 3). */
static PL_ALWAYS_INLINE CUresult pl_copy_whole(pl_copy *c, bool repeats) {
  long mode = pl_opt_long(PL_OPT_MODE);
  /* What the answers below rest on, read before they are asked: a change
   * while they are asked leaves a run opened from them already stale. */
  pl_repeat_basis basis; /* not zeroed: its check alone is 248 bytes */
  basis.hm_stamp = repeats ? pl_hostmem_stamp() : 0;
  basis.dev_gen = repeats ? pl_copy_device_gen() : 0;
  basis.flags = c->flags; /* as the entry point set them */
  basis.autopin = pl_registers(mode);

  pl_shim_enter();
  pl_classify(c);
  uint8_t host = pl_host_side(c->dir, c->src_mem, c->dst_mem);
  /* Only pageable copies need a stack (they are what the report lists). */
  /* The wrapper's pl_copy lives in its frame: its address stands for the
   * caller's stack depth in the memo key.  What tells the call path again
   * is wanted only for a run. */
  pl_stack_check_empty(&basis.check);
  uint32_t stack = host == PAGELOCK_MEM_PAGEABLE
                       ? pl_stack_capture_at(2, c->callsite, c, repeats ? &basis.check : NULL)
                       : 0;
  c->seq = pl_next_correlation();
  pl_shim_leave();

  pl_cupti_corr_begin();
  pl_stamp st;
  pl_stamp_start(&st);
  /* The route's questions (a hold, heat, evictions, a wait for a
   * registration's first pieces) are part of the call's time. */
  pl_autopin_probe q;
  pl_route v = pl_copy_route(c, mode, &q);
  uintptr_t hp = (uintptr_t)(c->dir == PAGELOCK_DIR_D2H ? c->dst : c->src);
  size_t hn = c->bytes;
  /* A 2D or 3D copy over a registration is waited for as a 1D one is. */
  if (v.why == PAGELOCK_WHY_SHAPE && !pl_host_extent(c, &hp, &hn)) hn = 0;
  CUresult r;
  /* A copy that took the plain way, and would again, opens a run: its
   * repeats are counted into one record (run.h).  Not one that staging
   * declined (a capture, a full pool): its repeat may be staged.  Under
   * auto, a small copy across a page boundary that the route let pass (no
   * registration anywhere, so no heat counted) in one native call (no edge
   * inside it) is plain too: PyTorch's CPU tensors are only 64-byte
   * aligned, so its 4 KiB copies otherwise each took the whole way, a
   * Python stack and a record, where observe counted them in runs.  The
   * run ends once any registration exists (pl_repeat_find). */
  bool plain = v.kind == PL_ROUTE_PASS;
  switch (v.kind) {
    case PL_ROUTE_PASS: r = c->native(c); break;
    case PL_ROUTE_PASS_CUT:
      plain = v.why == PAGELOCK_WHY_SMALL && pl_pinreg_whole(hp, hn);
      r = pl_pinreg_native(c);
      break;
    case PL_ROUTE_STAGE:
      if (!pl_stage_copy(c, &r))
        r = v.fallback == PL_ROUTE_PASS_CUT ? pl_pinreg_native(c) : c->native(c);
      break;
    default:
      pl_autopin_copy(c, &q.use, &r);
      hn = 0; /* it keeps the contract itself */
      break;
  }
  if (v.request) pl_autopin_after(c, &q.use);
  if (basis.autopin && hn) pl_autopin_settle(c, hp, hn);
  if (basis.autopin && (c->flags & PAGELOCK_COPY_CAPTURE) && c->why != PAGELOCK_WHY_NONE)
    c->why = PAGELOCK_WHY_CAPTURE;
  uint64_t dt = pl_stamp_elapsed(&st);
  uint32_t gpu_corr = pl_cupti_corr_end();
  /* A copy call between two uploads may wait for the GPU (a loss value's
   * download): not part of the thread's turnaround (autopin.c). */
  if (basis.autopin) pl_autopin_wait_end(st.ns);

  pl_shim_enter();
  /* Nor does a copy whose call path cannot be told again without
   * unwinding (a copy on a coroutine's stack or a signal stack) open a
   * run: its repeats each take the whole way. */
  pl_run *slot = repeats && plain && r == CUDA_SUCCESS && gpu_corr == 0 &&
                         basis.check.n != PL_CHECK_NONE && !(c->flags & PAGELOCK_COPY_CAPTURE) &&
                         !pl_cupti_tracing()
                     ? pl_repeat_slot()
                     : NULL;
  pagelock_rec_copy proto;
  /* No record (the trace stopped, or the shim's own thread copies): no
   * run either, as there is nothing to repeat. */
  if (pl_record(c, st.ns, dt, r, stack, c->seq, gpu_corr, slot ? &proto : NULL) && slot)
    pl_repeat_open(slot, c, &basis, &proto);
  pl_shim_leave();
  return r;
}

CUresult pl_copy_exec(pl_copy *c) {
  /* Our own driver calls, and everything while disabled, go straight
   * through: the program must see exactly the native behaviour. */
  if (PL_UNLIKELY(pl_shim_inside() || !pl_active())) return c->native(c);
  if (c->flags & PAGELOCK_COPY_BATCH) return pl_copy_exec_batch(c);
  bool repeats = pl_repeat_may(c);
  if (repeats) {
    pl_run *run = pl_repeat_find(c);
    if (run) return pl_repeat_copy(c, run);
  }
  return pl_copy_whole(c, repeats);
}

void pl_copy_note_graph(int api, const CUDA_MEMCPY3D *p, CUresult r, void *callsite) {
  if (p == NULL || pl_shim_inside() || !pl_active()) return;
  pl_shim_enter();
  pl_copy c = {.api = api, .flags = PAGELOCK_COPY_GRAPH_NODE, .callsite = callsite};
  pl_fill_3d(&c, p);
  pl_classify(&c);
  uint8_t host = pl_host_side(c.dir, c.src_mem, c.dst_mem);
  long mode = pl_opt_long(PL_OPT_MODE);
  c.why = pl_why_unrouted(&c, mode);
  if (c.why && pl_registers(mode)) {
    /* The node copies from or into a registration of ours as page-locked
     * memory for as long as the graph lives: keep it. */
    uintptr_t hp;
    size_t hn;
    c.api = PAGELOCK_API_cuMemcpy3D_v2; /* the descriptor is a CUDA_MEMCPY3D */
    if (pl_host_extent(&c, &hp, &hn) && pl_pinreg_touches(hp, hn)) {
      pl_pinreg_pin_for_graph(hp, hn);
      c.flags |= PAGELOCK_COPY_REGISTERED;
      c.why = PAGELOCK_WHY_NONE;
    } else {
      c.why = PAGELOCK_WHY_CAPTURE;
    }
    c.api = api;
  }
  /* The node's definition site is where the report points, as for a copy. */
  uint32_t stack = host == PAGELOCK_MEM_PAGEABLE ? pl_stack_capture(2) : 0;
  pl_record(&c, pl_now_ns(), 0, r, stack, pl_next_correlation(), 0, NULL);
  pl_shim_leave();
}
