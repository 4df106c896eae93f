/* copy.c - where every host<->device copy is decided.
 *
 * All wrappers (runtime-level calls arrive here through the driver symbols
 * cudart resolved) funnel into pl_copy_exec(): classify the host side,
 * choose the route, run it, record what happened.  Every copy takes one of
 * three routes: pass through (the exact original call), stage (the pinned
 * pool, stage.c) or register (a registration of the shim's own over the
 * program's buffer, autopin.c and pinreg.c).  The route is chosen here and
 * only here, so a reader finds every policy for a copy in this one file;
 * the COPY record carries the route (its flags) and why a pageable copy
 * was not registered. */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"
#include "copy.h"
#include "autopin.h"
#include "clock.h"
#include "cupti.h"
#include "hostmem.h"
#include "pinreg.h"
#include "pystack.h"
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
 * a stack buffer cost as much as the rest (docs/benchmarks.md). */
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

/* Most copies under auto: small, inside one page, and no registration
 * anywhere to run over.  Such a copy passes through as it is: no edge of
 * a registration can fall inside one page (edges are page boundaries, see
 * pl_pinreg_native), and one made while the call runs is caught by
 * pl_autopin_settle after it.  Asking the route and the cutter instead
 * cost 40 of the ~570 instructions the shim adds to a 256-byte copy. */
static bool pl_small_alone(const pl_copy *c, uintptr_t h, long mode) {
  uintptr_t pg = pl_page_size();
  return mode == PAGELOCK_MODE_AUTO && c->bytes != 0 &&
         c->bytes < (uint64_t)pl_opt_long(PL_OPT_STAGE_MIN) &&
         (h & ~(pg - 1)) == ((h + c->bytes - 1) & ~(pg - 1)) && !pl_pinreg_any();
}

/* Why a pageable host<->device copy of a shape the engines do not take
 * (2D, 3D, batch) was not registered; 0 for any other copy. */
static uint8_t pl_why_shape(const pl_copy *c, long mode) {
  uint8_t host = pl_host_side(c->dir, c->src_mem, c->dst_mem);
  if (host != PAGELOCK_MEM_PAGEABLE || (c->dir != PAGELOCK_DIR_H2D && c->dir != PAGELOCK_DIR_D2H))
    return 0;
  return pl_registers(mode) ? PAGELOCK_WHY_SHAPE : PAGELOCK_WHY_MODE;
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
    e.why = pl_why_shape(&e, mode);
    pl_record(&e, t0, dt / n, r, stack, corr, gpu_corr, NULL);
  }
  pl_shim_leave();
  return r;
}

/* ---- repeats: one record for a run of the same copy (run.h) ------------- */

/* Larger copies are each recorded: a 256 KiB pageable copy takes ~35 us
 * on the GPU hosts, of which the whole path's ~0.2 us is 0.6%. */
#define PL_RUN_BYTES (256u << 10)

/* The hash of the calling thread's Python frames (0: none). */
static uint64_t pl_run_py(void) {
  pl_pystack py;
  pl_py_capture(&py);
  return pl_py_hash(&py);
}

/* Write what run r gathered (the owner).  Its copies each relied on the
 * registry's memo of their host page as the first did: they spend its
 * uses, so a registration the hooks never saw is still noticed within
 * PL_NEG_USES copies, run or not (hostmem.c). */
static void pl_run_end(pl_run *r) {
  pagelock_rec_copy rec;
  pl_shim_enter();
  if (r->proto.host_mem == PAGELOCK_MEM_PAGEABLE)
    pl_hostmem_spend((CUdeviceptr)r->proto.host_ptr, pl_run_count(r));
  if (pl_run_close(r, &rec)) pl_trace_copy_put(&rec);
  pl_shim_leave();
}

/* Write full run r and begin it again from the same key and record.  Its
 * copies spent the registry's memo of a pageable host page (pl_run_end),
 * so the page is asked again here, as the whole way would: a page that is
 * no longer pageable, or a registry that moved meanwhile, ends the run
 * and the copy takes the whole way.  Why not let it: the whole way once
 * per PL_RUN_MAX copies (stack, record, classification, a new run) was
 * ~30 of the shim's ~250 instructions per repeated 256-byte copy
 * (callgrind over fakecuda, docs/benchmarks.md). */
static bool pl_run_roll(pl_run *r) {
  pl_run_key k = r->key;
  pagelock_rec_copy proto = r->proto;
  pl_run_end(r);
  if (proto.host_mem == PAGELOCK_MEM_PAGEABLE) {
    pl_shim_enter();
    int now = pl_hostmem_classify((CUdeviceptr)proto.host_ptr);
    pl_shim_leave();
    if (now != PAGELOCK_MEM_PAGEABLE || pl_hostmem_stamp() != k.hm_stamp) return false;
  }
  pl_run_open(r, &k, &proto);
  return true;
}

/* The run copy c repeats, if this thread has one open; a run that c
 * matches but that cannot take it is written and closed, and c takes the
 * whole way.  Every field is compared, the cheapest-to-differ first: a
 * loop's upload and download differ in the return address.  A run whose
 * copy is in the driver is left alone: a copy the driver call itself
 * makes on this thread (a CUPTI subscriber's, another interposer's) is
 * not one of its repeats, and must not close it. */
static pl_run *pl_run_find(const pl_copy *c) {
  pl_run *runs = pl_my_runs;
  if (runs == NULL) return NULL;
  pl_run *r = runs;
  /* Two paths that share all the rest (two lines of main with the same
   * copy) each keep a run: the frames above pick this path's, the nearest
   * before the rest of the key, as it tells the other path's run soonest. */
  for (;; r++) {
    if (r == runs + PL_RUN_SLOTS) return NULL;
    const pl_run_key *k = &r->key;
    if (k->callsite == (uintptr_t)c->callsite && k->sp == (uintptr_t)c &&
        pl_stack_check_near(&k->check) && k->src == c->src && k->dst == c->dst &&
        k->bytes == c->bytes && k->stream == (uintptr_t)c->stream && k->api == (uint32_t)c->api &&
        k->flags == c->flags && !r->busy && pl_stack_check_far(&k->check))
      break;
  }
  /* Still the same answers: no registry change, no teardown, the same
   * current context behind a default stream, no CUPTI tracing (a traced
   * copy needs its own record to join its GPU record to), under auto no
   * registration it could run over (pl_small_alone), and the same Python
   * line (frames read now if and only if they were then). */
  if (r->key.hm_stamp != pl_hostmem_stamp() || r->key.dev_gen != pl_copy_device_gen() ||
      (r->key.ctx != 0 && r->key.ctx != pl_copy_device_ctx(c->stream)) || pl_cupti_tracing() ||
      (r->key.autopin && pl_pinreg_any()) ||
      (r->key.py_on ? pl_run_py() != r->key.py : pl_py_walking())) {
    pl_run_end(r);
    return NULL;
  }
  if (PL_UNLIKELY(pl_run_count(r) >= PL_RUN_MAX) && !pl_run_roll(r)) return NULL;
  return r;
}

/* Copy c as one more of run r: the call, timed when pl_run_times says.
 * A call that fails, or that CUPTI began tracing meanwhile, is no repeat:
 * the run is written and the call gets a record of its own (untimed, it
 * carries the time it ended and no duration). */
static CUresult pl_run_copy(pl_copy *c, pl_run *r) {
  unsigned how = pl_run_times(r);
  bool timed = how != PL_RUN_UNTIMED;
  pl_stamp st = {0};
  uint64_t dt = 0;
  pl_cupti_corr_begin();
  CUresult res;
  r->busy = true;
  if (timed) {
    pl_stamp_start(&st);
    res = c->native(c);
    dt = pl_stamp_elapsed(&st);
  } else {
    res = c->native(c);
  }
  r->busy = false;
  uint32_t gpu_corr = pl_cupti_corr_end();
  if (r->key.autopin && pl_pinreg_any())
    pl_autopin_settle(c, (uintptr_t)(r->proto.dir == PAGELOCK_DIR_D2H ? c->dst : c->src), c->bytes);
  if (PL_LIKELY(res == CUDA_SUCCESS && gpu_corr == 0)) {
    pl_run_add(r, how, st.ns, dt);
    return res;
  }
  pl_shim_enter();
  pagelock_rec_copy rec = r->proto;
  pl_run_end(r);
  rec.start_ns = timed ? st.ns : pl_now_ns();
  rec.host_ns = dt;
  rec.result = (int32_t)res;
  rec.gpu_correlation = gpu_corr;
  rec.correlation = pl_next_correlation();
  rec.count = 1;
  rec.timed = timed;
  pl_trace_copy_put(&rec);
  pl_shim_leave();
  return res;
}

/* A slot for a run of the copy that just took the whole way: a closed
 * one, or the one next in turn, written and closed first. */
static pl_run *pl_run_slot(void) {
  static PL_TLS unsigned next;
  pl_run *runs = pl_my_runs;
  if (runs == NULL) return NULL;
  for (int i = 0; i < PL_RUN_SLOTS; i++)
    if (runs[i].key.callsite == 0) return &runs[i];
  for (int i = 0; i < PL_RUN_SLOTS; i++) {
    pl_run *r = &runs[next++ % PL_RUN_SLOTS];
    if (r->busy) continue;
    pl_run_end(r);
    return r;
  }
  return NULL;
}

CUresult pl_copy_exec(pl_copy *c) {
  /* Our own driver calls, and everything while disabled, go straight
   * through: the program must see exactly the native behaviour. */
  if (PL_UNLIKELY(pl_shim_inside() || !pl_active())) return c->native(c);
  if (c->flags & PAGELOCK_COPY_BATCH) return pl_copy_exec_batch(c);
  uint32_t flags = c->flags; /* as the entry point set them: a run's key */
  /* pl_my_runs is NULL without a ring, and under PAGELOCK_REPEATS=each. */
  bool repeats = pl_my_runs != NULL && c->args == NULL && c->bytes <= PL_RUN_BYTES;
  if (repeats) {
    pl_run *run = pl_run_find(c);
    if (run) return pl_run_copy(c, run);
  }
  long mode = pl_opt_long(PL_OPT_MODE);
  /* What the answers below rest on, read before they are asked: a change
   * while they are asked leaves a run opened from them already stale. */
  uint64_t hm_stamp = repeats ? pl_hostmem_stamp() : 0;
  unsigned dev_gen = repeats ? pl_copy_device_gen() : 0;

  pl_shim_enter();
  pl_classify(c);
  uint8_t host = pl_host_side(c->dir, c->src_mem, c->dst_mem);
  /* Only pageable copies need a stack (they are what the report lists). */
  /* The wrapper's pl_copy lives in its frame: its address stands for the
   * caller's stack depth in the memo key.  What tells the call path again
   * is wanted only for a run. */
  pl_stack_check check;
  pl_stack_check_empty(&check);
  uint32_t stack = host == PAGELOCK_MEM_PAGEABLE
                       ? pl_stack_capture_at(2, c->callsite, c, repeats ? &check : NULL)
                       : 0;
  c->seq = pl_next_correlation();
  pl_shim_leave();

  /* The decision point, for a pageable host<->device copy (anything else
   * passes through).  observe: pass through.  stage: a 1D copy of at least
   * PAGELOCK_STAGE_MIN goes through the pinned pool.  register, auto: a
   * 1D copy over a live registration goes through it; any other is counted
   * towards its buffer's registration (autopin.c) and staged or passed
   * through meanwhile.  2D/3D copies always pass through.  An engine may
   * still decline (capturing stream, no context), and then the original
   * call runs. */
  bool onedim =
      host == PAGELOCK_MEM_PAGEABLE && (c->dir == PAGELOCK_DIR_H2D || c->dir == PAGELOCK_DIR_D2H);
  c->why = pl_why_shape(c, mode);
  pl_cupti_corr_begin();
  pl_stamp st;
  pl_stamp_start(&st);
  CUresult r;
  bool done = false;
  uintptr_t hp = (uintptr_t)(c->dir == PAGELOCK_DIR_D2H ? c->dst : c->src);
  size_t hn = c->bytes;
  /* Under auto, a small copy that the route let pass, in one call: its
   * repeats may go straight to the driver (a run), as they would take the
   * same way; see `plain` below. */
  bool passed = false;
  if (onedim && c->args == NULL) {
    if (mode == PAGELOCK_MODE_STAGE) {
      if (c->bytes >= (uint64_t)pl_opt_long(PL_OPT_STAGE_MIN)) done = pl_stage_copy(c, &r);
    } else if (pl_registers(mode) && pl_small_alone(c, hp, mode)) {
      c->why = PAGELOCK_WHY_SMALL; /* the native call below, then the settle */
    } else if (pl_registers(mode)) {
      pl_pin_use use;
      int route = pl_autopin_route(c, &use);
      if (route == PL_ROUTE_REGISTER) {
        pl_autopin_copy(c, &use, &r);
        done = true;
        hn = 0; /* it keeps the contract itself */
      } else if (route == PL_ROUTE_STAGE) {
        done = pl_stage_copy(c, &r);
      }
      if (!done) {
        passed = route == PL_ROUTE_PASS && c->why == PAGELOCK_WHY_SMALL && pl_pinreg_whole(hp, hn);
        r = pl_pinreg_native(c);
        done = true;
      }
      pl_autopin_after(c, &use);
    }
  } else if (onedim && !pl_host_extent(c, &hp, &hn)) {
    hn = 0;
  }
  if (!done) r = c->native(c);
  if (pl_registers(mode) && hn) pl_autopin_settle(c, hp, hn);
  if (pl_registers(mode) && (c->flags & PAGELOCK_COPY_CAPTURE) && c->why != PAGELOCK_WHY_NONE)
    c->why = PAGELOCK_WHY_CAPTURE;
  uint64_t dt = pl_stamp_elapsed(&st);
  uint32_t gpu_corr = pl_cupti_corr_end();
  /* A copy call between two uploads may wait for the GPU (a loss value's
   * download): not part of the thread's turnaround (autopin.c). */
  if (pl_registers(mode)) pl_autopin_wait_end(st.ns);

  pl_shim_enter();
  /* A copy that took the plain way, and would again, opens a run: its
   * repeats are counted into one record (run.h).  Not one that staging
   * declined (a capture, a full pool): its repeat may be staged.  Nor one
   * whose call path cannot be told again without unwinding (a copy on a
   * coroutine's stack or a signal stack): its repeats each take it.
   * Under auto, a small copy across a page boundary that the route let
   * pass (no registration anywhere, so no heat counted) in one native call
   * (no edge inside it) is plain too: PyTorch's CPU tensors are only
   * 64-byte aligned, so its 4 KiB copies otherwise each took the whole way,
   * a Python stack and a record, where observe counted them in runs.  The
   * run ends once any registration exists (pl_run_find). */
  bool plain = (!done || passed) && !(onedim && mode == PAGELOCK_MODE_STAGE &&
                                      c->bytes >= (uint64_t)pl_opt_long(PL_OPT_STAGE_MIN));
  pl_run *slot = repeats && plain && r == CUDA_SUCCESS && gpu_corr == 0 &&
                         check.n != PL_CHECK_NONE && !(c->flags & PAGELOCK_COPY_CAPTURE) &&
                         !pl_cupti_tracing()
                     ? pl_run_slot()
                     : NULL;
  pagelock_rec_copy proto;
  /* No record (the trace stopped, or the shim's own thread copies): no
   * run either, as there is nothing to repeat. */
  if (pl_record(c, st.ns, dt, r, stack, c->seq, gpu_corr, slot ? &proto : NULL) && slot) {
    proto.flags &= ~(uint32_t)PAGELOCK_COPY_FIRST_USE; /* its repeats are not */
    pl_run_key k = {.callsite = (uintptr_t)c->callsite,
                    .sp = (uintptr_t)c,
                    .src = c->src,
                    .dst = c->dst,
                    .stream = (uintptr_t)c->stream,
                    .ctx = pl_copy_device_ctx(c->stream),
                    .bytes = c->bytes,
                    .hm_stamp = hm_stamp,
                    .py_on = pl_py_walking(),
                    .autopin = pl_registers(mode),
                    .api = (uint32_t)c->api,
                    .flags = flags,
                    .dev_gen = dev_gen,
                    .check = check};
    if (k.py_on) k.py = pl_run_py();
    pl_run_open(slot, &k, &proto);
  }
  pl_shim_leave();
  return r;
}

void pl_copy_note_graph(int api, const CUDA_MEMCPY3D *p, CUresult r, void *callsite) {
  if (p == NULL || pl_shim_inside() || !pl_active()) return;
  pl_shim_enter();
  pl_copy c = {.api = api, .flags = PAGELOCK_COPY_GRAPH_NODE, .callsite = callsite};
  pl_fill_3d(&c, p);
  pl_classify(&c);
  uint8_t host = pl_host_side(c.dir, c.src_mem, c.dst_mem);
  long mode = pl_opt_long(PL_OPT_MODE);
  c.why = pl_why_shape(&c, mode);
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
