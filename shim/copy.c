/* copy.c - where every host<->device copy is decided.
 *
 * All wrappers (runtime-level calls arrive here through the driver symbols
 * cudart resolved) funnel into pl_copy_exec().  Today it observes: classify
 * the host side, run the exact original call, record what happened.  The
 * staging and registration engines plug in at the marked decision point,
 * so a reader finds every policy for a copy in this one file. */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"

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
  if (src_mem == PAGELOCK_MEM_UNKNOWN || dst_mem == PAGELOCK_MEM_UNKNOWN) return PAGELOCK_DIR_UNKNOWN;
  return PAGELOCK_DIR_D2D;
}

/* Fill in the sides the wrapper could not know, then the direction; and
 * the allocation site of the host side when the registry knows it. */
static void pl_classify(pl_copy *c) {
  uint32_t ss = 0, ds = 0;
  if (c->src_mem == PAGELOCK_MEM_UNKNOWN && c->src) c->src_mem = (uint8_t)pl_hostmem_classify_site(c->src, &ss);
  if (c->dst_mem == PAGELOCK_MEM_UNKNOWN && c->dst) c->dst_mem = (uint8_t)pl_hostmem_classify_site(c->dst, &ds);
  if (c->dir == PAGELOCK_DIR_UNKNOWN) c->dir = pl_direction(c->src_mem, c->dst_mem);
  c->alloc_stack = c->dir == PAGELOCK_DIR_D2H ? ds : ss;
}

/* Write one COPY record, built in place in the trace buffer: this runs
 * once per copy of the program, pinned ones included, and a copy through
 * a stack buffer cost as much as the rest (docs/benchmarks.md). */
static void pl_record(const pl_copy *c, uint64_t t0, uint64_t host_ns, CUresult r,
                      uint32_t stack_id, uint64_t corr, uint32_t gpu_corr) {
  /* Stacks first: their records must precede any record naming them, and
   * they take the stack lock, which must not nest inside the trace lock. */
  pl_stack_emit(stack_id);
  pl_stack_emit(c->alloc_stack);
  uint32_t tid = pl_gettid();
  pagelock_rec_copy *rec = pl_trace_copy_begin();
  if (rec == NULL) return;
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
  rec->host_ptr = c->dir == PAGELOCK_DIR_D2H ? c->dst : c->dir == PAGELOCK_DIR_H2D || c->dir == PAGELOCK_DIR_H2H ? c->src : 0;
  rec->callsite = (uint64_t)(uintptr_t)c->callsite;
  rec->correlation = corr;
  rec->tid = tid;
  rec->stack_id = stack_id;
  rec->alloc_stack_id = c->alloc_stack;
  rec->flags = c->flags;
  rec->result = (int32_t)r;
  rec->device = -1;
  rec->api = (uint16_t)c->api;
  rec->gpu_correlation = gpu_corr;
  pl_trace_copy_end();
}

/* A batch call: classify and record each entry, sharing the call's time. */
static CUresult pl_copy_exec_batch(pl_copy *c) {
  size_t n = pl_batch_count(c);
  bool pageable = false;
  pl_in_shim++;
  for (size_t i = 0; i < n && !pageable; i++) {
    CUdeviceptr d, s;
    size_t sz;
    pl_batch_entry(c, i, &d, &s, &sz);
    pageable = pl_hostmem_classify(s) == PAGELOCK_MEM_PAGEABLE ||
               pl_hostmem_classify(d) == PAGELOCK_MEM_PAGEABLE;
  }
  uint32_t stack = pageable ? pl_stack_capture_at(2, c->callsite, c) : 0;
  pl_in_shim--;
  pl_cupti_corr_begin();
  pl_stamp st;
  pl_stamp_start(&st);
  CUresult r = c->native(c);
  uint64_t dt = pl_stamp_elapsed(&st), t0 = st.ns;
  uint32_t gpu_corr = pl_cupti_corr_end();
  pl_in_shim++;
  uint64_t corr = pl_next_correlation();
  for (size_t i = 0; i < n; i++) {
    pl_copy e = *c;
    pl_batch_entry(c, i, &e.dst, &e.src, &e.bytes);
    e.src_mem = e.dst_mem = PAGELOCK_MEM_UNKNOWN;
    e.dir = PAGELOCK_DIR_UNKNOWN;
    pl_classify(&e);
    pl_record(&e, t0, dt / n, r, stack, corr, gpu_corr);
  }
  pl_in_shim--;
  return r;
}

CUresult pl_copy_exec(pl_copy *c) {
  /* Our own driver calls, and everything while disabled, go straight
   * through: the program must see exactly the native behaviour. */
  if (PL_UNLIKELY(pl_in_shim || !pl_active())) return c->native(c);
  if (c->flags & PAGELOCK_COPY_BATCH) return pl_copy_exec_batch(c);

  pl_in_shim++;
  pl_classify(c);
  uint8_t host = pl_host_side(c->dir, c->src_mem, c->dst_mem);
  /* Only pageable copies need a stack (they are what the report lists). */
  /* The wrapper's pl_copy lives in its frame: its address stands for the
   * caller's stack depth in the memo key. */
  uint32_t stack = host == PAGELOCK_MEM_PAGEABLE ? pl_stack_capture_at(2, c->callsite, c) : 0;
  c->seq = pl_next_correlation();
  pl_in_shim--;

  /* The decision point.  observe: run the original call.  stage: a
   * pageable 1D copy big enough to be worth it goes through the pinned pool
   * (2D/3D and batch copies pass through).  The engine may still decline
   * (capturing stream, no context), and then the original call runs. */
  pl_cupti_corr_begin();
  pl_stamp st;
  pl_stamp_start(&st);
  CUresult r;
  bool done = false;
  if (host == PAGELOCK_MEM_PAGEABLE && pl_opt_long(PL_OPT_MODE) == PAGELOCK_MODE_STAGE &&
      (c->dir == PAGELOCK_DIR_H2D || c->dir == PAGELOCK_DIR_D2H) && c->args == NULL &&
      c->bytes >= (uint64_t)pl_opt_long(PL_OPT_STAGE_MIN))
    done = pl_stage_copy(c, &r);
  if (!done) r = c->native(c);
  uint64_t dt = pl_stamp_elapsed(&st);
  uint32_t gpu_corr = pl_cupti_corr_end();

  pl_in_shim++;
  pl_record(c, st.ns, dt, r, stack, c->seq, gpu_corr);
  pl_in_shim--;
  return r;
}

void pl_copy_note_graph(int api, const CUDA_MEMCPY3D *p, CUresult r, void *callsite) {
  if (p == NULL || pl_in_shim || !pl_active()) return;
  pl_in_shim++;
  pl_copy c = {.api = api, .flags = PAGELOCK_COPY_GRAPH_NODE, .callsite = callsite};
  pl_fill_3d(&c, p);
  pl_classify(&c);
  uint8_t host = pl_host_side(c.dir, c.src_mem, c.dst_mem);
  /* The node's definition site is where the report points, as for a copy. */
  uint32_t stack = host == PAGELOCK_MEM_PAGEABLE ? pl_stack_capture(2) : 0;
  pl_record(&c, pl_now_ns(), 0, r, stack, pl_next_correlation(), 0);
  pl_in_shim--;
}
