/* gpu_analysis.h - what the GPU's own timestamps (CUPTI records in the
 * trace) say about one process: busy and overlap times per device, effective
 * bandwidth, per-call joins and the verdicts the report leads with.
 *
 * This header is the contract between the analysis (gpu_analysis.c, which
 * fills plr_gpu_report from a loaded plr_trace) and the writers that read it
 * (report/ and analysis/compare.c).  All times are CLOCK_MONOTONIC
 * nanoseconds (GPU times already converted through the trace's CLOCK
 * records). */
#ifndef PLR_GPU_ANALYSIS_H
#define PLR_GPU_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "names.h"
#include "pagelock/trace_format.h"
#include "spans.h"
#include "stats.h"
#include "trace_model.h"

struct plr_trace;

/* Effective bandwidth of GPU copies sharing (direction, source kind,
 * destination kind, size bucket): bytes / GPU duration, per copy. */
typedef struct plr_bw_row {
  uint8_t copy_kind;  /* pagelock_gpu_copy */
  uint8_t src_kind;   /* pagelock_gpu_mem */
  uint8_t dst_kind;   /* pagelock_gpu_mem */
  uint8_t bucket;     /* plr_size_bucket */
  uint8_t staged;     /* 1: the shim's staged chunks, not program copies */
  uint8_t registered; /* 1: the shim's copies of buffers it registered */
  uint64_t count;
  uint64_t bytes;
  uint64_t gpu_ns;    /* summed durations */
  double median_gbps; /* 1e9 bytes per second */
  double p10_gbps;    /* 10th percentile: the slow tail */
} plr_bw_row;

#define PLR_MAX_GAPS 8 /* longest idle gaps kept per device */

typedef struct plr_device_report {
  uint32_t device;
  char name[64];                     /* from the DEVICE record, "" unknown */
  uint32_t copy_engines;             /* 0 unknown */
  plr_span window;                   /* first GPU start .. last GPU end on this device */
  uint64_t kernels, copies, memsets; /* record counts */
  uint64_t kernel_busy_ns;           /* |union of kernels| */
  uint64_t copy_busy_ns[PLR_NCDIR];  /* |union of copies| per direction */
  uint64_t copy_busy_all_ns;         /* |union of all copies| */
  uint64_t copy_hidden_ns;           /* |C and K|: copy time under kernels */
  uint64_t copy_exposed_ns;          /* |C| - |C and K| */
  uint64_t kernel_hidden_ns;         /* |K and C|: compute time under copies */
  uint64_t h2d_d2h_together_ns;      /* |H2D and D2H| */
  uint64_t idle_ns;                  /* window minus |K or C or memsets or
                                        paused|: a pause is not idle */
  uint64_t gap_threshold_ns;         /* gaps shorter than this are not listed */
  size_t ngaps;
  plr_span gaps[PLR_MAX_GAPS]; /* longest first */
  plr_bw_row *bw;              /* sorted by copy_kind, src, dst, bucket */
  size_t nbw;
  /* Pinned H2D/D2H bandwidth measured on this device (median of pinned
   * copies >= 1 MiB), 0 when there were none: the basis of "would save". */
  double pinned_gbps[PLR_NCDIR];
  uint64_t gaps_total;        /* idle gaps >= gap_threshold_ns, all of them */
  uint64_t gaps_ns;           /* their summed length */
  uint32_t sm_count, pci_gen; /* from the DEVICE record, 0 unknown */
  uint64_t kernel_streams;    /* streams that ran kernels */
  /* The program's async H2D/D2H copies with a pinned host side (the
   * shim's staged chunks are not the program's: they are in
   * staged_chunks). */
  uint64_t pinned_async_copies, pinned_async_ns;
  uint64_t same_stream_copies, same_stream_ns; /* ... of them on a stream
                                                  that also ran kernels */
  uint32_t same_stream_id;                     /* the stream with the most such copy time */
  /* |S|, |S and K| and |S| - |S and K| for S the union of those same-stream
   * copies: the time the same-stream verdict cites is theirs alone. */
  uint64_t same_stream_busy_ns, same_stream_hidden_ns, same_stream_exposed_ns;
  /* The same for P, the GPU copies with a pageable side (CUPTI): the
   * made-synchronous verdict's share of exposed copy time. */
  uint64_t pageable_busy_ns, pageable_exposed_ns;
  uint64_t staged_chunks; /* GPU copies the staging engine issued */
  /* Sampled GPU timing: |window and paused|, time in which the GPU's work
   * was not traced.  Idle time, gaps and the verdicts' shares of the
   * window leave it out. */
  uint64_t paused_ns;
} plr_device_report;

#define PLR_MAX_VERDICTS 8

typedef struct plr_verdict {
  uint32_t kind;    /* plr_verdict_kind */
  uint64_t ns;      /* the time at stake (blocked, exposed, would save) */
  char text[320];   /* one plain sentence: what happened, in numbers */
  char advice[512]; /* what to do; "" when nothing */
  int32_t device;   /* the device it is about, -1 the process */
} plr_verdict;

typedef struct plr_gpu_report {
  uint32_t status;           /* pagelock_gpu_status from the last GPU_STATUS, or
                                PAGELOCK_GPU_TIMING_ERROR with reason "no
                                GPU_STATUS record" for version-1 traces */
  char reason[256];          /* why not on; "" when on */
  uint64_t records, dropped; /* GPU records read; dropped as the shim reported */
  plr_device_report *dev;
  size_t ndev;
  plr_call_join join;
  plr_verdict verdicts[PLR_MAX_VERDICTS]; /* worst (largest ns) first */
  size_t nverdicts;
  /* The pageable-copy verdicts (PLR_VERDICT_MADE_SYNC, _PAGEABLE_SYNC),
   * worst first: their counts and host times are the COPY records', every
   * copy's, so they stand with GPU timing off, sampled or on; what the GPU
   * measured only adds to their sentences, marked when sampled. */
  plr_verdict pageable[2];
  size_t npageable;
  int have_status;                 /* a GPU_STATUS record was read */
  uint32_t cupti_version;          /* from GPU_STATUS, 0 unknown */
  uint64_t buffers;                /* CUPTI buffers completed, from GPU_STATUS */
  uint64_t bad_times;              /* GPU records ignored: start 0 or end < start */
  uint64_t syncs, sync_ns;         /* CUPTI SYNCHRONIZATION: host waits */
  uint64_t overheads, overhead_ns; /* CUPTI OVERHEAD: profiler cost */
  double pinned_gbps[PLR_NCDIR];   /* as per device, over all devices */
  uint64_t total_copy_busy_ns;     /* sums over devices */
  uint64_t total_copy_hidden_ns;
  uint64_t total_copy_exposed_ns;
  uint64_t total_kernel_busy_ns;
  uint64_t total_pageable_exposed_ns; /* pageable_exposed_ns over devices */
  /* Sampled GPU timing (GPU_SAMPLE records): above PAGELOCK_CUPTI_MAX_RATE
   * GPU operations a second the shim traces in short windows, so every GPU
   * measure above covers the windows only. */
  int sampled;              /* the shim paused tracing at least once */
  uint64_t pauses, windows; /* pauses; resumes that ended one */
  uint64_t span_ns;         /* the trace's span: first_ns .. last_ns */
  uint64_t paused_ns;       /* paused time inside the span */
  uint64_t traced_ns;       /* span_ns - paused_ns; 0 when not sampled */
  uint32_t max_ops_per_s;   /* the highest rate that made the shim pause */
  uint64_t samples_ignored; /* GPU_SAMPLE records out of turn or order */
} plr_gpu_report;

/* Builds the GPU report of a loaded trace.  gap_threshold_ns 0 means the
 * default (1 ms).  Returns -1 when out of memory; r must be
 * plr_gpu_report_free'd either way. */
int plr_gpu_analyze(const struct plr_trace *t, uint64_t gap_threshold_ns, plr_gpu_report *r);

void plr_gpu_report_free(plr_gpu_report *r);

/* 1 when the report has GPU timing to show (status on and at
 * least one GPU record). */
int plr_gpu_report_timed(const plr_gpu_report *r);
/* The sentence the text and HTML reports give a sampled trace: "GPU timing
 * sampled: 31 windows, 4.1% of the run traced (...)."; "" when r is not
 * sampled. */
void plr_gpu_sampling_sentence(const plr_gpu_report *r, char *buf, size_t len);
/* The hidden share of copy time, |C and K| / |C| over all
 * devices, in percent; -1 when no copy time was measured. */
double plr_gpu_hidden_pct(const plr_gpu_report *r);

#endif
