/* engines.c - the engines' one face to the hooks and to start-up
 * (engines.h): the driver's context events, the COUNTERS record, shutdown
 * and fork, each handed to the engines it concerns, in one order. */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"
#include "engines.h"
#include "autopin.h"
#include "pinreg.h"
#include "pool.h"
#include "stage.h"
#include "trace.h"

void pl_engines_driver_init(void) {
  if (pl_opt_long(PL_OPT_MODE) == PAGELOCK_MODE_OBSERVE || !pl_stage_usable()) return;
  pl_shim_enter();
  pl_pool_premap();
  pl_shim_leave();
}

void pl_engines_device_alloc(void) {
  long mode = pl_opt_long(PL_OPT_MODE);
  if (mode == PAGELOCK_MODE_OBSERVE || !pl_stage_usable()) return;
  const pl_drv *d = pl_drv_engines();
  CUcontext ctx = NULL;
  if (d == NULL || d->CtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) return;
  pl_shim_enter();
  pl_pool_prewarm(ctx);
  pl_shim_leave();
}

void pl_engines_ctx_ending(CUcontext ctx) {
  if (pl_opt_long(PL_OPT_MODE) == PAGELOCK_MODE_OBSERVE) return;
  pl_shim_enter();
  pl_pinreg_ctx_ending(ctx);
  pl_shim_leave();
}

void pl_engines_ctx_gone(CUcontext ctx) {
  if (pl_opt_long(PL_OPT_MODE) == PAGELOCK_MODE_OBSERVE) return;
  pl_shim_enter();
  pl_pool_ctx_gone(ctx);
  pl_autopin_ctx_gone(ctx);
  pl_shim_leave();
}

void pl_engines_write_counters(void) {
  if (!pl_stage_ran() && !pl_pinreg_used()) return;
  pl_stage_stats s;
  pl_stage_get_stats(&s);
  pagelock_rec_counters rec;
  memset(&rec, 0, sizeof rec);
  rec.h.type = PAGELOCK_REC_COUNTERS;
  rec.h.size = sizeof rec;
  pl_stage_counters(&s, &rec);
  /* The registration engine's, in the same record. */
  if (pl_pinreg_used()) pl_pinreg_counters(&rec);
  pl_trace_write(&rec, sizeof rec);
  if (s.copies_crowded) pl_stage_note_crowded(&s);
}

void pl_engines_stop(void) { pl_pinreg_stop(); }

bool pl_engines_may_wait(void) { return pl_pinreg_may_wait(); }

void pl_engines_atfork_prepare(void) { pl_pinreg_atfork_prepare(); }

void pl_engines_atfork_parent(void) { pl_pinreg_atfork_parent(); }

void pl_engines_atfork_child(void) {
  pl_stage_atfork_child();
  pl_pinreg_atfork_child();
}
