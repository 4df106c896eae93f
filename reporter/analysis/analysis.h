/* analysis.h - one trace made ready for the report writers: loaded, its
 * frames symbolized and its call-site tables built. */
#ifndef PLR_ANALYSIS_H
#define PLR_ANALYSIS_H

#include <stddef.h>
#include <stdio.h>

#include "callsite.h"
#include "gpu_analysis.h"
#include "symbolize.h"
#include "trace_model.h"

typedef struct plr_process {
  plr_trace t;
  plr_symbolizer sym;
  plr_rows calls;            /* pageable copies by call site */
  plr_rows allocs;           /* pageable copies by allocation site */
  plr_gpu_report gpu;        /* what the GPU's own timestamps say */
  uint64_t gap_threshold_ns; /* set before analysing; 0 = default (1 ms) */
} plr_process;

/* Symbolizes p->t (module files and tools only when use_tools), builds the
 * tables and the GPU report (site rows get their "would save"; the first
 * pageable-copy verdict's advice names every allocation site that
 * matters, the worst first).  p->t must be loaded.
 * Returns -1 when out of memory; p must be plr_process_free'd either
 * way. */
int plr_process_analyze(plr_process *p, int use_tools);

/* The framework whose code allocated (or copied) a site row's buffer,
 * from its chosen native frame: module (libtorch*, libc10, cupy, numba),
 * module path or function name. */
enum plr_framework { PLR_FW_NONE = 0, PLR_FW_TORCH, PLR_FW_CUPY, PLR_FW_NUMBA };
int plr_row_framework(const plr_row *r);
/* How to pin this process's worst pageable buffers, in the words of the
 * framework that allocated them: "allocate these buffers with
 * cudaHostAlloc/cudaMallocHost", "pin them with PyTorch (...)", ... */
const char *plr_process_pin_words(const plr_process *p);

/* A site (plr_row_site_format) made short enough for a sentence: without
 * its native frame when it has a Python line, else cut between words. */
void plr_site_shorten(char *site);

/* What to do about one site, in its framework's words (PyTorch:
 * DataLoader pin_memory=True for shared-memory batches, else
 * tensor.pin_memory(); CuPy: cupyx.empty_pinned; Numba:
 * numba.cuda.pinned_array; else cudaHostAlloc / cudaHostRegister), then
 * what --mode=auto does or would do with it and the time at stake.  alloc
 * is the allocation-site row (may be NULL or unknown), call the call-site
 * row used when the allocation is unknown. */
void plr_site_advice(const plr_process *p, const plr_row *alloc, const plr_row *call, char *buf,
                     size_t len);

/* Frees the analysis and the trace. */
void plr_process_free(plr_process *p);

/* Whether reports should run addr2line/c++filt: yes unless the environment
 * says PAGELOCK_NO_ADDR2LINE=1 (deterministic output for tests). */
int plr_use_tools_from_env(void);

#endif
