/* hook_hostfn.c - the program's host functions: cuLaunchHostFunc,
 * cuStreamAddCallback and their per-thread twins.
 *
 * Why: a host function runs on a thread of the driver's where the driver
 * refuses every call (CUDA_ERROR_NOT_PERMITTED, or a hang: cuda.h does not
 * promise the error).  When one releases memory the shim registered
 * (munmap, madvise), the release hook must not undo the registration
 * there, nor wait for the shim's thread to undo it: pinreg.c hands the
 * release over instead, once it knows the thread is such a one.  So, in
 * the modes that register (register, auto), each host function is run
 * through a trampoline that says so first.  On a capturing stream the call
 * passes through untouched: the graph would call the trampoline at every
 * launch, long after its record was given back; a graph's host node that
 * releases registered memory is caught by the driver's refusal instead.
 * With no record free (more than PL_HOSTFNS queued at once) the call also
 * passes through. */
#define _GNU_SOURCE
#include "pl_internal.h"
#include "pinreg.h"

/* Host functions queued and not yet run, at most; beyond, untouched. */
#define PL_HOSTFNS 1024u

typedef struct pl_hostfn {
  _Atomic(void *) fn; /* the program's function; NULL: free */
  void *arg;
} pl_hostfn;
static pl_hostfn pl_hostfns[PL_HOSTFNS];
static atomic_uint pl_hostfn_next;

static pl_hostfn *pl_hostfn_take(void *fn, void *arg) {
  unsigned at = atomic_fetch_add_explicit(&pl_hostfn_next, 1, memory_order_relaxed);
  for (unsigned i = 0; i < 64; i++) {
    pl_hostfn *h = &pl_hostfns[(at + i) % PL_HOSTFNS];
    void *free_one = NULL;
    if (atomic_compare_exchange_strong(&h->fn, &free_one, fn)) {
      h->arg = arg;
      return h;
    }
  }
  return NULL;
}

/* The record's function and argument; the record is free again. */
static void *pl_hostfn_open(pl_hostfn *h, void **arg) {
  void *fn = atomic_load_explicit(&h->fn, memory_order_acquire);
  *arg = h->arg;
  atomic_store_explicit(&h->fn, NULL, memory_order_release);
  pl_pinreg_note_hostfn();
  return fn;
}

static void CUDA_CB pl_hostfn_run(void *p) {
  void *arg;
  CUhostFn fn = (CUhostFn)pl_hostfn_open(p, &arg);
  fn(arg);
}

static void CUDA_CB pl_callback_run(CUstream s, CUresult status, void *p) {
  void *arg;
  CUstreamCallback fn = (CUstreamCallback)pl_hostfn_open(p, &arg);
  fn(s, status, arg);
}

/* A record for fn when it should run through a trampoline, else NULL. */
static pl_hostfn *pl_hostfn_for(CUstream s, int pt, void *fn, void *arg) {
  long mode = pl_opt_long(PL_OPT_MODE);
  if (fn == NULL || pl_shim_inside() ||
      (mode != PAGELOCK_MODE_REGISTER && mode != PAGELOCK_MODE_AUTO))
    return NULL;
  const pl_drv *d = pl_drv_engines();
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d == NULL || d->StreamIsCapturing[pt](s, &cap) != CUDA_SUCCESS ||
      cap != CU_STREAM_CAPTURE_STATUS_NONE)
    return NULL;
  return pl_hostfn_take(fn, arg);
}

typedef CUresult (*pl_launch_t)(CUstream, CUhostFn, void *);
typedef CUresult (*pl_addcb_t)(CUstream, CUstreamCallback, void *, unsigned);

static CUresult pl_launch(int id, int pt, CUstream s, CUhostFn fn, void *arg) {
  pl_launch_t f = (pl_launch_t)pl_hook_real(id);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  pl_hostfn *h = pl_hostfn_for(s, pt, (void *)fn, arg);
  if (h == NULL) return f(s, fn, arg);
  CUresult r = f(s, pl_hostfn_run, h);
  if (r != CUDA_SUCCESS) atomic_store(&h->fn, NULL);
  return r;
}

static CUresult pl_addcb(int id, int pt, CUstream s, CUstreamCallback fn, void *arg, unsigned fl) {
  pl_addcb_t f = (pl_addcb_t)pl_hook_real(id);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  pl_hostfn *h = pl_hostfn_for(s, pt, (void *)fn, arg);
  if (h == NULL) return f(s, fn, arg, fl);
  CUresult r = f(s, pl_callback_run, h, fl);
  if (r != CUDA_SUCCESS) atomic_store(&h->fn, NULL);
  return r;
}

PL_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg) {
  return pl_launch(PL_HOOK_cuLaunchHostFunc, 0, s, fn, arg);
}
PL_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *arg) {
  return pl_launch(PL_HOOK_cuLaunchHostFunc_ptsz, 1, s, fn, arg);
}
PL_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback fn, void *arg, unsigned fl) {
  return pl_addcb(PL_HOOK_cuStreamAddCallback, 0, s, fn, arg, fl);
}
PL_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback fn, void *arg,
                                            unsigned fl) {
  return pl_addcb(PL_HOOK_cuStreamAddCallback_ptsz, 1, s, fn, arg, fl);
}
