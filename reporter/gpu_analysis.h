/* gpu_analysis.h - what the GPU's own timestamps (CUPTI records in the
 * trace) say about one process: busy and overlap times per device, effective
 * bandwidth, per-call joins and the verdicts the report leads with.
 *
 * This header is the contract between the analysis (gpu_analysis.c, which
 * fills plr_gpu_report from a loaded plr_trace) and the writers that read it
 * (report_text.c, report_json.c, report_html.c, cmd_compare.c).  All times
 * are CLOCK_MONOTONIC nanoseconds (GPU times already converted through the
 * trace's CLOCK records). */
#ifndef PLR_GPU_ANALYSIS_H
#define PLR_GPU_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "pagelock/trace_format.h"

struct plr_trace;

/* A half-open interval [start, end). */
typedef struct plr_span {
  uint64_t start, end;
} plr_span;

/* Interval-set arithmetic.  Inputs need not be sorted or disjoint;
 * plr_spans_normalize sorts in place and merges overlapping/touching spans,
 * returning the new count.  The measures take normalized sets. */
size_t plr_spans_normalize(plr_span *v, size_t n);
uint64_t plr_spans_total(const plr_span *v, size_t n);
uint64_t plr_spans_intersect_total(const plr_span *a, size_t na,
                                   const plr_span *b, size_t nb);
/* plr_spans_normalize also drops empty spans (start >= end):
 * they cover nothing, and keeping them would split idle gaps.
 * plr_spans_union writes the union of two normalized sets, normalized, to
 * out (room for na + nb) and returns its count. */
size_t plr_spans_union(const plr_span *a, size_t na, const plr_span *b,
                       size_t nb, plr_span *out);
/* Idle gaps: the parts of window that the normalized set u does
 * not cover, of length >= threshold.  Keeps the max longest in top
 * (longest first, earlier first among equals) and returns how many were
 * kept; *count and *total get the number and summed length of all of
 * them. */
size_t plr_spans_gaps(const plr_span *u, size_t n, plr_span window,
                      uint64_t threshold, plr_span *top, size_t max,
                      uint64_t *count, uint64_t *total);

/* Copy directions the analysis separates. */
enum plr_cdir { PLR_CDIR_H2D = 0, PLR_CDIR_D2H = 1, PLR_CDIR_OTHER = 2,
                PLR_NCDIR = 3 };
const char *plr_cdir_name(unsigned cdir); /* "H2D", "D2H", "other" */

#define PLR_NSIZE_BUCKETS 6 /* <64K, <1M, <16M, <64M, <256M, >=256M */
const char *plr_size_bucket_name(unsigned b);
unsigned plr_size_bucket(uint64_t bytes);

/* Percentiles of an ascending array, 0 when n is 0.  Median: the
 * middle value, or the mean of the two middle values when n is even.  p10:
 * nearest rank, the value at index ceil(n / 10) - 1. */
double plr_median_sorted(const double *v, size_t n);
double plr_p10_sorted(const double *v, size_t n);
/* The same two values of an array in any order, in linear time
 * (quickselect); v is reordered. */
double plr_median_select(double *v, size_t n);
double plr_p10_select(double *v, size_t n);

/* Effective bandwidth of GPU copies sharing (direction, source kind,
 * destination kind, size bucket): bytes / GPU duration, per copy. */
typedef struct plr_bw_row {
  uint8_t copy_kind;    /* pagelock_gpu_copy */
  uint8_t src_kind;     /* pagelock_gpu_mem */
  uint8_t dst_kind;     /* pagelock_gpu_mem */
  uint8_t bucket;       /* plr_size_bucket */
  uint64_t count;
  uint64_t bytes;
  uint64_t gpu_ns;      /* summed durations */
  double median_gbps;   /* 1e9 bytes per second */
  double p10_gbps;      /* 10th percentile: the slow tail */
} plr_bw_row;

#define PLR_MAX_GAPS 8 /* longest idle gaps kept per device */

typedef struct plr_device_report {
  uint32_t device;
  char name[64];          /* from the DEVICE record, "" unknown */
  uint32_t copy_engines;  /* 0 unknown */
  plr_span window;        /* first GPU start .. last GPU end on this device */
  uint64_t kernels, copies, memsets; /* record counts */
  uint64_t kernel_busy_ns;           /* |union of kernels| */
  uint64_t copy_busy_ns[PLR_NCDIR];  /* |union of copies| per direction */
  uint64_t copy_busy_all_ns;         /* |union of all copies| */
  uint64_t copy_hidden_ns;     /* |C and K|: copy time under kernels */
  uint64_t copy_exposed_ns;    /* |C| - |C and K| */
  uint64_t kernel_hidden_ns;   /* |K and C|: compute time under copies */
  uint64_t h2d_d2h_together_ns;/* |H2D and D2H| */
  uint64_t idle_ns;            /* window minus |K or C or memsets| */
  uint64_t gap_threshold_ns;   /* gaps shorter than this are not listed */
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
  uint64_t pinned_async_copies, pinned_async_ns; /* async H2D/D2H copies
                                                    with a pinned host side */
  uint64_t same_stream_copies, same_stream_ns;   /* ... of them on a stream
                                                    that also ran kernels */
  uint32_t same_stream_id;    /* the stream with the most such copy time */
} plr_device_report;

/* Per host copy call joined with its GPU op(s). */
typedef struct plr_call_join {
  uint64_t calls;        /* COPY records with a GPU op joined */
  uint64_t unjoined;     /* COPY records (not graph nodes) with no GPU op */
  uint64_t pageable;     /* by CUPTI's srcKind/dstKind */
  uint64_t made_sync;    /* async entry, pageable, host blocked >= half of GPU time */
  uint64_t made_sync_host_ns; /* host time those calls were blocked */
  uint64_t gpu_ns;       /* GPU time of joined ops */
  uint64_t pinned;       /* joined calls whose GPU op(s) used pinned host memory */
  uint64_t linked;       /* joined through LINK records (staged chunks) */
  uint64_t made_sync_bytes, made_sync_gpu_ns;
  uint64_t made_sync_dir_host_ns[PLR_NCDIR], made_sync_dir_bytes[PLR_NCDIR];
  uint64_t pageable_sync; /* sync entry points whose GPU copy was pageable */
  uint64_t pageable_sync_host_ns, pageable_sync_bytes, pageable_sync_gpu_ns;
  uint64_t pageable_sync_dir_host_ns[PLR_NCDIR];
  uint64_t pageable_sync_dir_bytes[PLR_NCDIR];
  uint64_t mem_mismatch;  /* the shim's pointer query said pageable and CUPTI
                             not, or the other way round */
  uint64_t gpu_ops;       /* GPU copy ops (MEMCPY, P2P) with valid times */
  uint64_t gpu_ops_unjoined; /* ... that matched no copy call */
} plr_call_join;

enum plr_verdict_kind {
  PLR_VERDICT_MADE_SYNC = 1,     /* pageable copies made async calls synchronous */
  PLR_VERDICT_SAME_STREAM = 2,   /* pinned, but not overlapped: copies and kernels share a stream */
  PLR_VERDICT_ONE_ENGINE = 3,    /* one copy engine: uploads and downloads serialise */
  PLR_VERDICT_PAGEABLE_SYNC = 4, /* pageable copies on sync entry points: slow bandwidth */
  PLR_VERDICT_NO_GPU_TIMING = 5, /* the trace has no CUPTI records: why */
  PLR_VERDICT_IDLE = 6,          /* the GPU idled for long gaps */
  PLR_VERDICT_GOOD = 7,          /* copies overlapped compute */
};

#define PLR_MAX_VERDICTS 8

typedef struct plr_verdict {
  uint32_t kind;      /* plr_verdict_kind */
  uint64_t ns;        /* the time at stake (blocked, exposed, would save) */
  char text[320];     /* one plain sentence: what happened, in numbers */
  char advice[320];   /* what to do; "" when nothing */
  int32_t device;     /* the device it is about, -1 the process */
} plr_verdict;

typedef struct plr_gpu_report {
  uint32_t status;       /* pagelock_gpu_status from the last GPU_STATUS, or
                            PAGELOCK_GPU_TIMING_ERROR with reason "no
                            GPU_STATUS record" for version-1 traces */
  char reason[256];      /* why not on; "" when on */
  uint64_t records, dropped; /* GPU records read; dropped as the shim reported */
  plr_device_report *dev;
  size_t ndev;
  plr_call_join join;
  plr_verdict verdicts[PLR_MAX_VERDICTS]; /* worst (largest ns) first */
  size_t nverdicts;
  int have_status;        /* a GPU_STATUS record was read */
  uint32_t cupti_version; /* from GPU_STATUS, 0 unknown */
  uint64_t buffers;       /* CUPTI buffers completed, from GPU_STATUS */
  uint64_t bad_times;     /* GPU records ignored: start 0 or end < start */
  uint64_t syncs, sync_ns;         /* CUPTI SYNCHRONIZATION: host waits */
  uint64_t overheads, overhead_ns; /* CUPTI OVERHEAD: profiler cost */
  double pinned_gbps[PLR_NCDIR];   /* as per device, over all devices */
  uint64_t total_copy_busy_ns;     /* sums over devices */
  uint64_t total_copy_hidden_ns;
  uint64_t total_copy_exposed_ns;
  uint64_t total_kernel_busy_ns;
} plr_gpu_report;

/* Builds the GPU report of a loaded trace.  gap_threshold_ns 0 means the
 * default (1 ms).  Returns -1 when out of memory; r must be
 * plr_gpu_report_free'd either way. */
int plr_gpu_analyze(const struct plr_trace *t, uint64_t gap_threshold_ns,
                    plr_gpu_report *r);

void plr_gpu_report_free(plr_gpu_report *r);

const char *plr_gpu_status_name(uint32_t status);
const char *plr_gpu_copy_name(unsigned copy_kind); /* "HtoD", ... */
const char *plr_gpu_mem_name(unsigned mem);        /* "pageable", ... */
/* JSON name of a verdict kind: "made-sync", "same-stream",
 * "one-engine", "pageable-sync", "no-gpu-timing", "idle", "good". */
const char *plr_verdict_kind_name(uint32_t kind);
/* 1 when the report has GPU timing to show (status on and at
 * least one GPU record). */
int plr_gpu_report_timed(const plr_gpu_report *r);
/* The hidden share of copy time, |C and K| / |C| over all
 * devices, in percent; -1 when no copy time was measured. */
double plr_gpu_hidden_pct(const plr_gpu_report *r);

#endif
