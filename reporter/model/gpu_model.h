/* gpu_model.h - the GPU half of loading a trace (gpu_model.c): its
 * version-2 (CUPTI) records folded into plr_gpu_data, and copy calls
 * joined to their GPU ops.  Only the loader (trace_model.c) calls these:
 * begin before the first record, fold every GPU-era record and every COPY
 * (after its totals are folded), end once the stream stopped (finishes the
 * join, sorts and normalizes).  Each returns -1 when out of memory. */
#ifndef PLR_GPU_MODEL_H
#define PLR_GPU_MODEL_H

#include "trace_data.h"

int plr_gpu_load_begin(plr_trace *t);
int plr_gpu_fold(plr_trace *t, const plr_record *rec);
int plr_gpu_fold_copy(plr_trace *t, const pagelock_rec_copy *c);
int plr_gpu_load_end(plr_trace *t);
void plr_gpu_data_free(plr_gpu_data *g);

#endif
