/* trace_data.h - what a loaded trace holds (plr_trace), and the
 * arithmetic on it that loading and the analyses share.
 *
 * Copy records are folded into fixed totals and into one accumulator per
 * distinct (stack, call site) and per allocation stack, so memory grows with
 * the number of distinct stacks, modules and symbols, never with the number
 * of copies.
 *
 * GPU records (version 2) are folded per device into compact interval sets
 * (merged as they grow, so their size follows the number of disjoint busy
 * periods), one bandwidth sample (a double) per GPU copy, and per-stream
 * sums; copy calls are joined to their GPU ops while streaming
 * (gpu_model.c). */
#ifndef PLR_TRACE_DATA_H
#define PLR_TRACE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <uthash.h>

#include "names.h"
#include "pagelock/trace_format.h"
#include "spans.h"
#include "stats.h"
#include "trace_read.h"

#define PLR_MAX_NOTES 64
/* The shim's default PAGELOCK_STAGE_MIN (shim/base/config.c): the smallest copy
 * --mode=stage and --mode=auto move; smaller ones pass through. */
#define PLR_STAGE_MIN_DEFAULT (1ull << 20)

typedef struct plr_bucket {
  uint64_t count;   /* copies: a COPY record of a run counts as its count */
  uint64_t bytes;   /* their bytes */
  uint64_t host_ns; /* their host time (a run's host_ns is already its total) */
  /* Copies of runs whose host time is partly an estimate (COPY timed below
   * count), and how many of those copies were timed; both 0 when every
   * copy was timed, as in every trace before version 4. */
  uint64_t est_count, est_timed;
} plr_bucket;

/* The bucket of one COPY record (count and timed as the reader fixed
 * them): count copies of bytes each, the product saturating so that a
 * damaged size cannot wrap to a small one. */
plr_bucket plr_copy_bucket(const pagelock_rec_copy *c);

typedef struct plr_totals {
  plr_bucket all;
  plr_bucket by[PLR_NDIR][PLR_NMEM]; /* [dir][host_mem] */
  plr_bucket pageable;               /* host side pageable */
  plr_bucket pageable_async;         /* async + pageable, neither staged
                                        nor registered */
  plr_bucket pageable_sync;          /* sync entry point + pageable, neither
                                        staged nor registered */
  /* Those two by plr_cdir: what pinned memory would have saved. */
  plr_bucket pageable_async_dir[PLR_NCDIR], pageable_sync_dir[PLR_NCDIR];
  plr_bucket staged;             /* moved by the staging engine */
  uint64_t failed;               /* result != CUDA_SUCCESS */
  uint64_t fallbacks;            /* PAGELOCK_COPY_FALLBACK */
  uint64_t captured;             /* PAGELOCK_COPY_CAPTURE */
  uint64_t registered;           /* PAGELOCK_COPY_REGISTERED */
  uint64_t graph_nodes;          /* PAGELOCK_COPY_GRAPH_NODE: defined, not copies */
  uint64_t graph_nodes_pageable; /* ... of them with a pageable host side */
  /* The program's copies (each COPY record's count; the shim's own chunk
   * copies have none) with a pageable or page-locked host side, by
   * plr_route. */
  plr_bucket routes[PLR_NROUTE];
  /* Pageable copies the shim did not register, by pagelock_why; [0] holds
   * those whose trace gives no reason (version 1-2, or an out-of-range
   * value).  Their sum is pageable minus registered. */
  plr_bucket not_registered[PAGELOCK_WHY_COUNT];
} plr_totals;

/* Accumulator of pageable copies sharing one raw key. */
typedef struct plr_site_key {
  uint64_t callsite; /* 0 for allocation sites */
  uint32_t stack_id;
  uint32_t zero; /* padding kept 0: the key is hashed as bytes */
} plr_site_key;

/* What the GPU saw of a site's copies: filled as each copy call of the
 * site is joined with its GPU op(s). */
typedef struct plr_site_gpu {
  uint64_t calls;             /* copy calls joined with a GPU op */
  uint64_t gpu_ns;            /* summed GPU durations of their ops */
  uint64_t made_sync;         /* async calls a pageable copy made synchronous */
  uint64_t made_sync_host_ns; /* host time those calls were blocked */
  int32_t device;             /* GPU ordinal of the ops, -1 none, -2 several */
  /* The shim's own chunk copies that moved these calls' bytes (joined
   * through LINK records): part of gpu_ns, never counted as calls. */
  uint64_t chunks, chunk_bytes, chunk_gpu_ns;
  /* The same for calls it copied through a registration of their buffer
   * (their DMA from the program's memory, its edges and tail included):
   * not staged chunks. */
  uint64_t reg_ops, reg_bytes, reg_gpu_ns;
} plr_site_gpu;

typedef struct plr_site {
  plr_site_key key;
  plr_bucket b;
  uint32_t dirs;                 /* bit (1 << pagelock_dir) for each direction seen */
  plr_bucket bydir[PLR_NCDIR];   /* b split by plr_cdir: basis of "would save" */
  plr_bucket routes[PLR_NROUTE]; /* b split by the route the copies took */
  plr_bucket shared;             /* copies of shared or file-backed memory (why) */
  plr_bucket tracked;            /* copies of an allocation the shim tracked (one
                                    with an allocation stack): registrable */
  plr_bucket big;                /* copies of at least PLR_STAGE_MIN_DEFAULT bytes */
  uint64_t fresh;                /* copies that were their allocation's first
                                    (PAGELOCK_COPY_FIRST_USE): buffers made anew */
  plr_site_gpu g;
  /* The device its COPY records name (shim since issue 23; GPU timing not
   * needed): the ordinal, -1 none named, -2 several. */
  int32_t device;
  UT_hash_handle hh;
} plr_site;

/* Folds the device d of one more copy (-1 unknown: ignored) into *acc, a
 * device as in plr_site (-1 none yet, -2 several). */
static inline void plr_device_fold(int32_t *acc, int32_t d) {
  if (d == -1 || *acc == -2) return;
  *acc = *acc == -1 || *acc == d ? d : -2;
}

typedef struct plr_stack {
  uint32_t id;
  uint32_t depth;
  uint64_t frames[PAGELOCK_MAX_FRAMES];
  UT_hash_handle hh;
} plr_stack;

typedef struct plr_module {
  uint64_t base, start, end;
  char *path; /* "" = main program */
} plr_module;

typedef struct plr_symbol {
  uint64_t addr;
  uint64_t sym_addr;
  char *name;
  UT_hash_handle hh;
} plr_symbol;

typedef struct plr_note {
  uint32_t kind;
  uint64_t hash; /* of text, to find repeats fast */
  char *text;
} plr_note;

/* Bandwidth samples of one (copy kind, src, dst, size bucket, chunk). */
#define PLR_BW_CHUNK (1u << 31) /* key bit: the shim's staged chunks */
#define PLR_BW_REG                                        \
  (1u << 30) /* key bit: the shim's copies of a buffer it \
                registered (the program's own bytes) */
#define PLR_BW_BUCKET(key) (((key) >> 24) & 0x3f)
typedef struct plr_bw_acc {
  uint32_t key; /* copy_kind | src << 8 | dst << 16 | bucket << 24, and
                   PLR_BW_CHUNK */
  uint64_t count, bytes, gpu_ns;
  /* bytes / ns of each copy with a duration, while loading; at load end
   * their median and p10 are kept and the samples freed. */
  double *gbps;
  size_t n, cap;
  double median, p10;
  UT_hash_handle hh;
} plr_bw_acc;

/* What ran on one CUPTI stream of a device. */
typedef struct plr_stream_acc {
  uint32_t stream;
  uint64_t kernels, kernel_ns;
  /* The program's own pinned async H2D/D2H copies (never the shim's
   * staged chunks: those are counted in chunks) and their GPU intervals. */
  uint64_t pinned_async, pinned_async_ns;
  plr_spanvec pinned_spans;
  uint64_t chunks;
  UT_hash_handle hh;
} plr_stream_acc;

/* Everything kept of one device's GPU records. */
typedef struct plr_gpu_dev {
  uint32_t device;
  int have_props; /* a DEVICE record was read */
  char name[64];
  uint32_t copy_engines, sm_count, pci_gen;
  int have_window;
  uint64_t first_ns, last_ns;
  uint64_t kernels, copies, memsets;
  plr_spanvec kern, copy[PLR_NCDIR], mset; /* normalized at load end */
  plr_spanvec pageable;                    /* copies with a pageable side per CUPTI */
  plr_bw_acc *bw;
  plr_stream_acc *streams;
  double pinned_gbps[PLR_NCDIR]; /* median of pinned >= 1 MiB copies, load end */
} plr_gpu_dev;

#define PLR_MAX_GPU_DEVICES 256 /* more distinct ordinals means corruption */

typedef struct plr_kname {
  uint32_t id;
  char *name;
  UT_hash_handle hh;
} plr_kname;

/* Per host copy call joined with its GPU op(s).  Calls are copies: a
 * COPY record of a run counts as its count. */
typedef struct plr_call_join {
  uint64_t calls;             /* copies of COPY records with a GPU op joined */
  uint64_t unjoined;          /* copies (not graph nodes) with no GPU op */
  uint64_t pageable;          /* by CUPTI's srcKind/dstKind */
  uint64_t made_sync;         /* async entry, pageable, host blocked >= half of GPU time */
  uint64_t made_sync_host_ns; /* host time those calls were blocked */
  uint64_t gpu_ns;            /* GPU time of joined ops */
  uint64_t pinned;            /* joined calls whose GPU op(s) used pinned host memory */
  uint64_t linked;            /* staged calls joined through LINK records */
  uint64_t made_sync_bytes, made_sync_gpu_ns;
  uint64_t made_sync_dir_host_ns[PLR_NCDIR], made_sync_dir_bytes[PLR_NCDIR];
  uint64_t pageable_sync; /* sync entry points whose GPU copy was pageable */
  uint64_t pageable_sync_host_ns, pageable_sync_bytes, pageable_sync_gpu_ns;
  uint64_t pageable_sync_dir_host_ns[PLR_NCDIR];
  uint64_t pageable_sync_dir_bytes[PLR_NCDIR];
  uint64_t mem_mismatch;     /* the shim's pointer query said pageable and CUPTI
                                not, or the other way round */
  uint64_t gpu_ops;          /* GPU copy ops (MEMCPY, P2P) with valid times */
  uint64_t gpu_ops_unjoined; /* ... that matched no copy call */
  /* GPU copies the staging engine issued for the program's calls (joined
   * through LINK records), their bytes and GPU time: part of gpu_ops and
   * gpu_ns, never of calls. */
  uint64_t chunks, chunk_bytes, chunk_gpu_ns;
  /* Calls copied through a registration of their buffer (route register)
   * joined with the GPU copies the shim issued for them, and those copies:
   * neither counted in linked nor in chunks. */
  uint64_t registered, reg_ops, reg_bytes, reg_gpu_ns;
  /* Copies (not graph nodes nor captures) without a GPU correlation that
   * started while the shim had paused CUPTI's tracing (GPU_SAMPLE): they
   * have no GPU op by design, so they are not in unjoined. */
  uint64_t untimed_paused;
} plr_call_join;

/* One stretch in which the shim had paused CUPTI's tracing (GPU_SAMPLE):
 * [start, end), CLOCK_MONOTONIC; end is the resume, or the end of the
 * trace when none came. */
typedef struct plr_gpu_pause {
  uint64_t start, end;
  uint32_t ops_per_s; /* the rate that made the shim pause */
} plr_gpu_pause;

/* The GPU side of a trace. */
typedef struct plr_gpu_data {
  int have_status; /* a GPU_STATUS record was read (the last wins) */
  uint32_t status; /* pagelock_gpu_status */
  uint32_t cupti_version;
  uint64_t status_records, status_dropped, status_buffers;
  char reason[256];
  uint64_t records;                /* GPU records read */
  uint64_t bad_times;              /* GPU records with start 0 or end < start: ignored */
  uint64_t unknown_kind;           /* GPU records of a kind we do not know: ignored */
  uint64_t dev_overflow;           /* records of devices past PLR_MAX_GPU_DEVICES */
  uint64_t links, clocks;          /* LINK and CLOCK records read */
  uint64_t syncs, sync_ns;         /* SYNCHRONIZATION records: host waits */
  uint64_t overheads, overhead_ns; /* OVERHEAD records: profiler cost */
  plr_clock clock;                 /* the current CUPTI -> monotonic pair */
  plr_gpu_dev *dev;                /* sorted by device at load end */
  size_t ndev, cap_dev;
  /* While loading: the ordinals of dev[] in ascending order and where each
   * is, so that a record finds its device in 8 steps, not 256. */
  uint32_t dev_ord[PLR_MAX_GPU_DEVICES];
  uint16_t dev_at[PLR_MAX_GPU_DEVICES];
  plr_kname *names;              /* NAME records: kernel names by id */
  plr_call_join join;            /* per-call join results */
  double pinned_gbps[PLR_NCDIR]; /* as per device, over all devices */
  struct plr_join *pending;      /* gpu_model.c's join; NULL after load */
  /* Sampled GPU timing: the paused stretches in time order, disjoint
   * (GPU_SAMPLE records come in time order; one that does not is
   * ignored).  While loading, the last one's end is UINT64_MAX when no
   * resume followed yet; at load end such a pause lasts to the trace's
   * last time (last_ns: its END record, or its last copy). */
  plr_gpu_pause *pauses;
  size_t npauses, cap_pauses;
  int paused;                  /* loading: the last pause is still open */
  uint64_t sample_ns;          /* loading: time of the last GPU_SAMPLE taken */
  uint64_t windows;            /* resumes that ended a pause */
  uint64_t samples_ignored;    /* a resume with no pause open, a pause while
                                  paused, a time before the previous one */
  uint32_t max_ops_per_s;      /* largest ops_per_s of a pause */
  struct plr_untimed *untimed; /* loading: copies waiting for the samples
                                  that say whether they fell in a pause */
} plr_gpu_data;

typedef struct plr_trace {
  char *path;
  pagelock_file_header hdr;

  int have_process;
  uint64_t ppid;
  uint32_t mode;
  int32_t rank;
  char *exe; /* never NULL after load: "" when no PROCESS record */
  char *host;

  uint64_t first_ns, last_ns; /* CLOCK_MONOTONIC span seen in the trace */
  plr_totals tot;
  plr_site *sites;       /* pageable copies by (stack_id, callsite) */
  plr_site *alloc_sites; /* pageable copies by alloc_stack_id */

  plr_stack *stacks;
  struct plr_pytab *py; /* Python frames of stacks (pysite.c), NULL none */
  plr_module *modules;
  size_t nmodules, cap_modules;
  plr_symbol *symbols;
  plr_note notes[PLR_MAX_NOTES];
  size_t nnotes;
  uint64_t notes_dropped;

  int have_counters;
  pagelock_rec_counters counters;
  int have_cost; /* what finding call sites cost the program (COST) */
  pagelock_rec_cost cost;
  int have_end;
  pagelock_rec_end end;

  plr_gpu_data gpu; /* version 2: what CUPTI saw */

  /* How reading ended, copied from the reader. */
  plr_stop stop;
  uint64_t complete_records;
  uint64_t malformed_records;
  uint64_t unknown_records;
  uint64_t duplicate_stacks;
  uint32_t bad_size;
  int io_errnum;
  plr_damage damage; /* stop == PLR_STOP_DAMAGED */
  uint64_t blocks;   /* checksummed blocks verified */
  int unverified;    /* records after the last CHECK were used */
} plr_trace;

/* Adds b into acc. */
void plr_bucket_add(plr_bucket *acc, const plr_bucket *b);

/* The copies of one pagelock_dir, whatever their host side (device to
 * device and peer copies have none: they are never pageable). */
plr_bucket plr_totals_dir(const plr_totals *t, unsigned dir);
/* Sums the totals of one trace into acc. */
void plr_totals_add(plr_totals *acc, const plr_totals *t);

/* The memory kind of the host side of a GPU copy as CUPTI saw it
 * (pagelock_gpu_mem), or PAGELOCK_GPU_MEM_DEVICE for device<->device. */
unsigned plr_gpu_host_kind(const pagelock_rec_gpu *g);

/* 1 when a GPU record's kind is a copy (MEMCPY or MEMCPY_P2P). */
int plr_gpu_is_copy(const pagelock_rec_gpu *g);

/* plr_cdir of a COPY record's pagelock_dir. */
unsigned plr_cdir_of_dir(unsigned dir);

/* plr_cdir of a GPU record's pagelock_gpu_copy. */
unsigned plr_cdir_of_copy_kind(unsigned copy_kind);

#endif
