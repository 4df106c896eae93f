/* pl_cupti.h - GPU timestamps through CUPTI (cupti.c); pl_ because CUDA
 * has a cupti.h of its own. */
#ifndef PL_CUPTI_H
#define PL_CUPTI_H

#include "pl_internal.h"

/* Start CUPTI once (hook_cupti.c's cuInit, InitializeInjection); safe to call
 * again and from CUPTI's own reentry. */
void pl_cupti_ensure(void);
/* True while CUPTI records are being collected. */
bool pl_cupti_active(void);
/* True while CUPTI traces the program's calls (between sampled windows it
 * is active but not tracing). */
bool pl_cupti_tracing(void);
/* Around the app's own driver call: the call's CUPTI correlationId (0 when
 * none was seen) is what pl_cupti_corr_end returns. */
void pl_cupti_corr_begin(void);
uint32_t pl_cupti_corr_end(void);
/* Around the staging engine's work for the app call `seq`: every GPU op it
 * queues gets a LINK record to that call. */
void pl_cupti_link_begin(uint64_t seq);
void pl_cupti_link_end(void);
/* A forked child: CUPTI is not usable there. */
void pl_cupti_atfork_child(void);
/* At exit (atexit, or _exit's hook in init.c): take every record CUPTI
 * still holds, once. */
void pl_cupti_finish(void);
/* The real cuInit succeeded: write one DEVICE record per device, once. */
void pl_cupti_driver_ready(void);
/* The program subscribes to CUPTI itself, or registers activity buffers
 * of its own: hand CUPTI over to it (unless the call is the shim's own). */
void pl_cupti_program_subscribes(void);
/* libcupti's cuptiSubscribe and cuptiActivityRegisterCallbacks as the
 * shim loaded them, or NULL. */
void *pl_cupti_own_subscribe(void);
void *pl_cupti_own_register(void);

#endif
