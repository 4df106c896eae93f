/* hook_sync.c - the program's waits for the GPU: cuCtxSynchronize and the
 * _v2 that CUDA 13's cudaDeviceSynchronize (torch.cuda.synchronize())
 * asks for, cuStreamSynchronize and its per-thread twin,
 * cuEventSynchronize.
 *
 * Only timed, never changed.  Why: the tail of a registered upload is
 * sized by how soon the thread comes back with its next copy (autopin.c),
 * and a program that waits for the stream after each upload would
 * otherwise come back later the longer the tail's own DMA runs, and the
 * tail would grow to its cap on a wait it caused.  The time the thread
 * spends waiting is left out of that measure.  Two clock reads per call
 * (~40 ns on the GPU hosts), and only while an upload's tail may run. */
#define _GNU_SOURCE
#include "pl_internal.h"
#include "pinreg.h"

typedef CUresult (*pl_ctxsync_t)(void);
typedef CUresult (*pl_ctxsync2_t)(CUcontext);
typedef CUresult (*pl_streamsync_t)(CUstream);
typedef CUresult (*pl_eventsync_t)(CUevent);

PL_EXPORT CUresult cuCtxSynchronize(void) {
  pl_ctxsync_t f = (pl_ctxsync_t)pl_hook_real(PL_HOOK_cuCtxSynchronize);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  uint64_t t0 = pl_autopin_wait_begin();
  CUresult r = f();
  pl_autopin_wait_end(t0);
  return r;
}

PL_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  pl_ctxsync2_t f = (pl_ctxsync2_t)pl_hook_real(PL_HOOK_cuCtxSynchronize_v2);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  uint64_t t0 = pl_autopin_wait_begin();
  CUresult r = f(ctx);
  pl_autopin_wait_end(t0);
  return r;
}

PL_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  pl_streamsync_t f = (pl_streamsync_t)pl_hook_real(PL_HOOK_cuStreamSynchronize);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  uint64_t t0 = pl_autopin_wait_begin();
  CUresult r = f(s);
  pl_autopin_wait_end(t0);
  return r;
}

PL_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
  pl_streamsync_t f = (pl_streamsync_t)pl_hook_real(PL_HOOK_cuStreamSynchronize_ptsz);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  uint64_t t0 = pl_autopin_wait_begin();
  CUresult r = f(s);
  pl_autopin_wait_end(t0);
  return r;
}

PL_EXPORT CUresult cuEventSynchronize(CUevent e) {
  pl_eventsync_t f = (pl_eventsync_t)pl_hook_real(PL_HOOK_cuEventSynchronize);
  if (f == NULL) return CUDA_ERROR_NOT_FOUND;
  uint64_t t0 = pl_autopin_wait_begin();
  CUresult r = f(e);
  pl_autopin_wait_end(t0);
  return r;
}
