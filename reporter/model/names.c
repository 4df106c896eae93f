/* names.c - the name of every enum value the reports show, in one place:
 * a new value gets its name here and nowhere else (names.h). */
#include "names.h"

#include "pagelock/trace_format.h"
#include "stats.h"

const char *plr_mode_name(uint32_t mode) {
  static const char *const names[] = {"observe", "stage", "register", "auto", "off"};
  return mode < sizeof names / sizeof names[0] ? names[mode] : "unknown";
}

const char *plr_dir_name(unsigned dir) {
  static const char *const names[] = {"unknown", "H2D", "D2H", "D2D", "H2H", "peer"};
  return dir < PLR_NDIR ? names[dir] : names[0];
}

const char *plr_mem_name(unsigned mem) {
  static const char *const names[] = {"unknown", "pageable", "pinned", "registered",
                                      "managed", "device",   "array"};
  return mem < PLR_NMEM ? names[mem] : names[0];
}

const char *plr_note_kind_name(uint32_t kind) {
  switch (kind) {
    case PAGELOCK_NOTE_WARNING: return "warning";
    case PAGELOCK_NOTE_NO_GPU_TIMING: return "no-gpu-timing";
    default: return "info";
  }
}

const char *plr_route_name(unsigned route) {
  static const char *const names[] = {"pass", "stage", "register"};
  return route < PLR_NROUTE ? names[route] : "unknown";
}

/* Indexed by pagelock_why; the order of the enum in trace_format.h. */
static const char *const plr_why_names[PAGELOCK_WHY_COUNT] = {
    "unknown", "mode",    "small",  "shape",  "untracked", "shared",
    "cold",    "pending", "budget", "failed", "capture",   "edge"};

static const char *const plr_why_texts[PAGELOCK_WHY_COUNT] = {
    "unknown: the trace gives none (an older pagelock wrote it)",
    "mode: this mode never registers",
    "small: below PAGELOCK_STAGE_MIN, passed through",
    "shape: a 2D, 3D, batch or array copy",
    ("untracked: memory pagelock did not see allocated (stack, static "
     "data, a block below PAGELOCK_TRACK_MIN, an allocator preloaded first)"),
    "shared memory or a file mapping (DataLoader workers' batches): staged",
    "cold: copied less than PAGELOCK_REGISTER_HOT of the buffer",
    "pending: being registered on pagelock's thread, staged meanwhile",
    "budget full (PAGELOCK_REGISTER_BUDGET), nothing idle to evict: staged",
    "failed: the driver refused to register it: staged",
    "capture: the stream was capturing a graph, copy left untouched",
    "edge: only the buffer's partial first or last page",
};

const char *plr_why_name(unsigned why) { return plr_why_names[why < PAGELOCK_WHY_COUNT ? why : 0]; }

const char *plr_why_text(unsigned why) { return plr_why_texts[why < PAGELOCK_WHY_COUNT ? why : 0]; }

const char *plr_cdir_name(unsigned cdir) {
  static const char *const n[] = {"H2D", "D2H", "other"};
  return cdir < PLR_NCDIR ? n[cdir] : "other";
}

const char *plr_size_bucket_name(unsigned b) {
  static const char *const n[] = {"<64K", "64K-1M", "1M-16M", "16M-64M", "64M-256M", ">=256M"};
  return b < PLR_NSIZE_BUCKETS ? n[b] : "?";
}

const char *plr_gpu_status_name(uint32_t status) {
  static const char *const n[] = {"on",      "disabled", "no-cupti", "busy",
                                  "version", "error",    "no-cuda"};
  return status < sizeof n / sizeof n[0] ? n[status] : "unknown";
}

const char *plr_gpu_copy_name(unsigned k) {
  static const char *const n[] = {"unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                  "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return k < sizeof n / sizeof n[0] ? n[k] : n[0];
}

const char *plr_gpu_mem_name(unsigned m) {
  static const char *const n[] = {"unknown", "pageable", "pinned",        "device",
                                  "array",   "managed",  "device-static", "managed-static"};
  return m < sizeof n / sizeof n[0] ? n[m] : n[0];
}

const char *plr_verdict_kind_name(uint32_t kind) {
  switch (kind) {
    case PLR_VERDICT_MADE_SYNC: return "made-sync";
    case PLR_VERDICT_SAME_STREAM: return "same-stream";
    case PLR_VERDICT_ONE_ENGINE: return "one-engine";
    case PLR_VERDICT_PAGEABLE_SYNC: return "pageable-sync";
    case PLR_VERDICT_NO_GPU_TIMING: return "no-gpu-timing";
    case PLR_VERDICT_IDLE: return "idle";
    case PLR_VERDICT_GOOD: return "good";
    default: return "unknown";
  }
}

static const char *const plr_api_symbols[] = {
#define PLR_API_STR(name) #name,
    PAGELOCK_API_LIST(PLR_API_STR)
#undef PLR_API_STR
};

const char *plr_api_symbol(unsigned api) {
  return api < sizeof plr_api_symbols / sizeof plr_api_symbols[0] ? plr_api_symbols[api] : "copy";
}

const char *plr_copy_flag_name(unsigned bit) {
  static const char *const n[] = {"async", "ptds",     "staged",     "capture",
                                  "batch", "fallback", "registered", "graph_node"};
  return bit < sizeof n / sizeof n[0] ? n[bit] : NULL;
}
