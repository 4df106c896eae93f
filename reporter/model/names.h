/* names.h - the name of every enum value a report shows, and the
 * reporter's own enums that have names (copy routes, copy directions of the
 * analysis, verdict kinds).  Every such name is in names.c, and only
 * there. */
#ifndef PLR_NAMES_H
#define PLR_NAMES_H

#include <stdint.h>

#define PLR_NDIR 6 /* pagelock_dir values; out-of-range -> UNKNOWN */
#define PLR_NMEM 7 /* pagelock_mem values; out-of-range -> UNKNOWN */

/* The route a copy took (pagelock_rec_copy.flags): registered in place by
 * the shim, staged through its pinned chunks, or passed to the driver as
 * the program made it. */
enum plr_route { PLR_ROUTE_PASS = 0, PLR_ROUTE_STAGE, PLR_ROUTE_REGISTER, PLR_NROUTE };

/* Copy directions the analysis separates. */
enum plr_cdir { PLR_CDIR_H2D = 0, PLR_CDIR_D2H = 1, PLR_CDIR_OTHER = 2, PLR_NCDIR = 3 };
const char *plr_cdir_name(unsigned cdir); /* "H2D", "D2H", "other" */

/* A plr_size_bucket (stats.h): "<64K", "64K-1M", ... */
const char *plr_size_bucket_name(unsigned b);

enum plr_verdict_kind {
  PLR_VERDICT_MADE_SYNC = 1,     /* pageable copies made async calls synchronous */
  PLR_VERDICT_SAME_STREAM = 2,   /* pinned, but not overlapped: copies and kernels share a stream */
  PLR_VERDICT_ONE_ENGINE = 3,    /* one copy engine: uploads and downloads serialise */
  PLR_VERDICT_PAGEABLE_SYNC = 4, /* pageable copies on sync entry points: slow bandwidth */
  PLR_VERDICT_NO_GPU_TIMING = 5, /* the trace has no CUPTI records: why */
  PLR_VERDICT_IDLE = 6,          /* the GPU idled for long gaps */
  PLR_VERDICT_GOOD = 7,          /* copies overlapped compute */
};

/* JSON name of a verdict kind: "made-sync", "same-stream",
 * "one-engine", "pageable-sync", "no-gpu-timing", "idle", "good". */
const char *plr_verdict_kind_name(uint32_t kind);

const char *plr_gpu_status_name(uint32_t status);
const char *plr_gpu_copy_name(unsigned copy_kind); /* "HtoD", ... */
const char *plr_gpu_mem_name(unsigned mem);        /* "pageable", ... */

const char *plr_mode_name(uint32_t mode);
const char *plr_dir_name(unsigned dir);
const char *plr_mem_name(unsigned mem);
const char *plr_note_kind_name(uint32_t kind);

/* "pass", "stage", "register": a plr_route in JSON and compare. */
const char *plr_route_name(unsigned route);

/* One word per pagelock_why for JSON ("cold", "shared", "budget", ...);
 * "unknown" for 0 and out-of-range values. */
const char *plr_why_name(unsigned why);

/* What a pagelock_why means to a user, for the text and HTML reports
 * ("cold: copied less than PAGELOCK_REGISTER_HOT of the buffer"). */
const char *plr_why_text(unsigned why);

/* The exact driver symbol of a COPY record's api id ("cuMemcpyHtoDAsync_v2"),
 * or "copy" for an id this pagelock does not know. */
const char *plr_api_symbol(unsigned api);

/* The name of bit `bit` of pagelock_copy_flags ("async", "staged", ...),
 * NULL past the last known bit. */
const char *plr_copy_flag_name(unsigned bit);

#endif
