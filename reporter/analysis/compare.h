/* compare.h - the numbers of `pagelock compare`: each side (one run: one
 * or more traces) is summed into a plr_compare_side, then both are written
 * side by side with after/before ratios. */
#ifndef PLR_COMPARE_H
#define PLR_COMPARE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace_model.h"

/* One side of `pagelock compare`: the numbers of one or more traces (the
 * processes of one run) summed.  Filled by plr_compare_add per trace. */
typedef struct plr_compare_side {
  size_t traces;
  int have_window;
  uint64_t rt_start, rt_end; /* CLOCK_REALTIME extent of the traces */
  uint64_t copies, copy_bytes, host_blocked_ns;
  uint64_t pageable_copies, pageable_bytes, pageable_host_ns;
  uint64_t staged_copies, staged_bytes;
  uint64_t route_copies[PLR_NROUTE], route_bytes[PLR_NROUTE];
  uint64_t gpu_traces; /* traces with GPU timing on and records */
  /* Traces whose GPU timing was sampled (GPU_SAMPLE): their GPU numbers
   * cover the tracing windows only. */
  uint64_t sampled_traces;
  /* Traces recorded over the fake CUDA (PAGELOCK_FILE_SIMULATED). */
  uint64_t simulated_traces;
  uint64_t copy_busy_ns, copy_hidden_ns, copy_exposed_ns, kernel_busy_ns;
  /* GB/s of each GPU copy, by [0 H2D, 1 D2H][0 pageable, 1 pinned]: the
   * medians need every sample (4 bytes per GPU copy). */
  float *bw[2][2];
  size_t nbw[2][2], capbw[2][2];
  int oom;
} plr_compare_side;

struct plr_trace;
struct plr_gpu_report;
struct plr_source;

/* Adds one loaded trace (with its GPU report, NULL when none, and where
 * it can be read again for the per-copy bandwidths) to side. */
void plr_compare_add(plr_compare_side *side, const struct plr_trace *t,
                     const struct plr_gpu_report *g, const struct plr_source *src);

/* One comparable number of a side; have = 0 means "not measured". */
typedef struct plr_cmp_val {
  int have;
  double v;
} plr_cmp_val;

typedef enum plr_cmp_unit {
  PLR_UNIT_COUNT,
  PLR_UNIT_MS,
  PLR_UNIT_BYTES,
  PLR_UNIT_PCT,
  PLR_UNIT_GBPS,
} plr_cmp_unit;

typedef struct plr_cmp_row {
  char label[48]; /* text */
  char key[48];   /* json */
  plr_cmp_unit unit;
  plr_cmp_val b, a;
} plr_cmp_row;

#define PLR_CMP_MAX_ROWS 24

/* The rows both writers print, in order, each with its value on both
 * sides (rows has room for PLR_CMP_MAX_ROWS).  Sorts the sides' bandwidth
 * samples.  Returns the number of rows. */
size_t plr_compare_rows(const plr_compare_side *before, const plr_compare_side *after,
                        plr_cmp_row *rows);

void plr_compare_side_free(plr_compare_side *side);

#endif
