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
#include "autopin.h"
#include "pinreg.h"

/* One timed wrapper: the real call, its time handed to autopin.c. */
#define PL_WRAP_WAIT(name, params, args)                                    \
  PL_EXPORT CUresult name params {                                          \
    CUresult(*f) params = (CUresult(*) params)pl_hook_real(PL_HOOK_##name); \
    if (f == NULL) return CUDA_ERROR_NOT_FOUND;                             \
    uint64_t t0 = pl_autopin_wait_begin();                                  \
    CUresult r = f args;                                                    \
    pl_autopin_wait_end(t0);                                                \
    return r;                                                               \
  }

PL_WRAP_WAIT(cuCtxSynchronize, (void), ())
PL_WRAP_WAIT(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
PL_WRAP_WAIT(cuStreamSynchronize, (CUstream s), (s))
PL_WRAP_WAIT(cuStreamSynchronize_ptsz, (CUstream s), (s))
PL_WRAP_WAIT(cuEventSynchronize, (CUevent e), (e))
