/* repeat.c - the repeat fast path: an exact repeat of a copy that took
 * the whole way (copy.c) only adds to that copy's run (run.h): the native
 * call, timed one time in PL_RUN_TIME_EVERY, and a count.  The run is
 * written as one COPY record when it ends, fills, or a drainer takes it. */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"
#include "repeat.h"
#include "autopin.h"
#include "clock.h"
#include "hostmem.h"
#include "pinreg.h"
#include "pl_cupti.h"
#include "pystack.h"
#include "trace.h"

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
 * (callgrind over fakecuda, docs/bench/2026-11-27-first-upload-and-spare-memory.md). */
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
pl_run *pl_repeat_find(const pl_copy *c) {
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
   * registration it could run over (route.c), and the same Python
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
CUresult pl_repeat_copy(pl_copy *c, pl_run *r) {
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
pl_run *pl_repeat_slot(void) {
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

void pl_repeat_open(pl_run *slot, const pl_copy *c, const pl_repeat_basis *b,
                    pagelock_rec_copy *proto) {
  proto->flags &= ~(uint32_t)PAGELOCK_COPY_FIRST_USE; /* its repeats are not */
  pl_run_key k = {.callsite = (uintptr_t)c->callsite,
                  .sp = (uintptr_t)c,
                  .src = c->src,
                  .dst = c->dst,
                  .stream = (uintptr_t)c->stream,
                  .ctx = pl_copy_device_ctx(c->stream),
                  .bytes = c->bytes,
                  .hm_stamp = b->hm_stamp,
                  .py_on = pl_py_walking(),
                  .autopin = b->autopin,
                  .api = (uint32_t)c->api,
                  .flags = b->flags,
                  .dev_gen = b->dev_gen,
                  .check = b->check};
  if (k.py_on) k.py = pl_run_py();
  pl_run_open(slot, &k, proto);
}
