/* callsite.h - which frame of a copy's stack the user should look at, and
 * the per-call-site / per-allocation-site tables built from that choice. */
#ifndef PLR_CALLSITE_H
#define PLR_CALLSITE_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_analysis.h"
#include "pysite.h"
#include "symbolize.h"
#include "trace_model.h"

typedef enum plr_site_kind {
  PLR_SITE_CALL,  /* where the copy was called */
  PLR_SITE_ALLOC, /* where its host buffer was allocated */
} plr_site_kind;

typedef struct plr_row {
  plr_bucket b;
  uint32_t dirs;
  uint64_t addr;          /* chosen frame, 0 = unknown site */
  const plr_frame *frame; /* owned by the symbolizer; NULL if addr == 0 */
  /* The Python frames of the site (of one of its stacks when several
   * merged): rows group by py->f[0], the innermost user line, first; NULL
   * when the stacks had none. */
  const plr_pysite *py;
  /* What the GPU saw of these copies (all 0 without GPU timing). */
  plr_bucket bydir[PLR_NCDIR];     /* b split by plr_cdir */
  plr_bucket routes[PLR_NROUTE];   /* b split by route (plr_site) */
  plr_bucket shared, big, tracked; /* as in plr_site */
  uint64_t fresh;                  /* as in plr_site */
  plr_site_gpu g;                  /* joined calls, GPU time, made-sync */
  int32_t device;                  /* as in plr_site: from the COPY records */
  /* Host time a pinned buffer would have saved: host blocked minus bytes /
   * the pinned bandwidth measured for that direction on that device (or
   * over all devices), per direction; -1 when a bandwidth is unknown.  Set
   * by plr_rows_apply_gpu. */
  int64_t would_save_ns;
} plr_row;

typedef struct plr_rows {
  plr_row *v;
  size_t n;
} plr_rows;

/* Registers every frame the tables of t can need with the symbolizer; call
 * before plr_sym_resolve.  Returns -1 when out of memory. */
int plr_sites_want(const plr_trace *t, plr_symbolizer *sym);

/* Builds the table of one kind: raw sites are mapped to their chosen frame
 * and innermost Python line, merged per (line, frame) and sorted by host
 * time, worst first (ties by bytes, then address, so output is stable),
 * rows of one Python line kept together, ordered by the line's total.
 * Returns -1 when out of memory. */
int plr_sites_build(const plr_trace *t, const plr_symbolizer *sym, plr_site_kind kind,
                    plr_rows *out);

void plr_rows_free(plr_rows *r);

/* A row's device: the ordinal all its copies ran on (from their COPY
 * records, or from their joined GPU ops in traces whose COPY records name
 * none), -2 several, -1 unknown. */
int32_t plr_row_device(const plr_row *r);

/* Fills would_save_ns of every row from the bandwidths of g (rows keep
 * their order: worst host time first). */
void plr_rows_apply_gpu(plr_rows *r, const plr_gpu_report *g);

/* 1 when a frame in a module with this basename is CUDA or pagelock
 * plumbing that the user did not write. */
int plr_skip_module(const char *basename, plr_site_kind kind);

/* 1 when a function of this name is CUDA runtime/driver API or internals
 * (needed because a static cudart lives inside the main program). */
int plr_skip_function(const char *name, plr_site_kind kind);

/* "func+0xoff (module) file.c:12", "func (module+0xoff)", "module+0xoff" or
 * "0xaddr": the most precise form the frame allows. */
void plr_site_format(const plr_frame *f, uint64_t addr, char *buf, size_t len);

/* A row's site on one line: "train.py:42 in main (native: <site>)" with
 * Python frames ("train.py:42 in main (via accelerate/hooks.py:170 in
 * pre_forward; native: <site>)" when a library made the call), else as
 * plr_site_format. */
void plr_row_site_format(const plr_row *r, char *buf, size_t len);

#endif
