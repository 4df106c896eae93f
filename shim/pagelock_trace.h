/* pagelock_trace.h - the on-disk trace format, shared by the shim (writer)
 * and the reporter (reader).  Documented in docs/trace-format.md; any change
 * here bumps PAGELOCK_TRACE_VERSION and that document.
 *
 * A trace is a 64-byte file header followed by a stream of records.  Every
 * record starts with pagelock_rec_hdr and its total size is a multiple of 8,
 * so a reader can skip record types it does not know and stop cleanly at the
 * last complete record when the writer died mid-run.  All integers are
 * little-endian (the shim only runs on x86-64 and aarch64 Linux). */
#ifndef PAGELOCK_TRACE_H
#define PAGELOCK_TRACE_H

#include <stdint.h>

#define PAGELOCK_TRACE_MAGIC "PGLKTRC1"  /* 8 bytes, no NUL terminator used */
#define PAGELOCK_TRACE_VERSION 1u
#define PAGELOCK_TRACE_MAX_RECORD (1u << 20) /* larger sizes mean corruption */
#define PAGELOCK_MAX_FRAMES 16

typedef struct pagelock_file_header {
  char magic[8];          /* PAGELOCK_TRACE_MAGIC */
  uint32_t version;       /* PAGELOCK_TRACE_VERSION */
  uint32_t header_size;   /* sizeof(pagelock_file_header) == 64 */
  uint64_t pid;
  uint64_t start_realtime_ns; /* CLOCK_REALTIME when the trace was opened */
  uint64_t start_mono_ns;     /* CLOCK_MONOTONIC at the same instant */
  uint32_t flags;             /* PAGELOCK_FILE_* */
  uint32_t reserved0;
  uint64_t reserved[2];
} pagelock_file_header;

enum { PAGELOCK_FILE_SIMULATED = 1u << 0 }; /* fake CUDA: timings simulated */

typedef struct pagelock_rec_hdr {
  uint32_t type;  /* PAGELOCK_REC_* */
  uint32_t size;  /* whole record including this header, multiple of 8 */
} pagelock_rec_hdr;

enum pagelock_rec_type {
  PAGELOCK_REC_PROCESS = 1, /* once, first record */
  PAGELOCK_REC_COPY = 2,    /* one host<->device copy call */
  PAGELOCK_REC_STACK = 3,   /* interned call stack, before first use */
  PAGELOCK_REC_MODULE = 4,  /* a loaded object, written at exit */
  PAGELOCK_REC_SYMBOL = 5,  /* dladdr() name of one address, at exit */
  PAGELOCK_REC_COUNTERS = 6,/* engine counters, at exit */
  PAGELOCK_REC_NOTE = 7,    /* a problem or fact the report must show */
  PAGELOCK_REC_END = 8,     /* clean end of trace */
};

/* Strings follow fixed parts as NUL-terminated bytes, padded to 8. */
typedef struct pagelock_rec_process {
  pagelock_rec_hdr h;
  uint64_t ppid;
  uint32_t mode;          /* pagelock_mode */
  int32_t rank;           /* -1 when not an MPI/torchrun job */
  uint64_t reserved[2];
  /* char exe[] NUL, char host[] NUL */
} pagelock_rec_process;

enum pagelock_mode {
  PAGELOCK_MODE_OBSERVE = 0,
  PAGELOCK_MODE_STAGE = 1,
  PAGELOCK_MODE_REGISTER = 2,
  PAGELOCK_MODE_AUTO = 3,
  PAGELOCK_MODE_OFF = 4,
};

enum pagelock_dir {
  PAGELOCK_DIR_UNKNOWN = 0,
  PAGELOCK_DIR_H2D = 1,
  PAGELOCK_DIR_D2H = 2,
  PAGELOCK_DIR_D2D = 3,
  PAGELOCK_DIR_H2H = 4,
};

/* What the host side of a copy is, from the pointer-attribute query. */
enum pagelock_mem {
  PAGELOCK_MEM_UNKNOWN = 0,
  PAGELOCK_MEM_PAGEABLE = 1,
  PAGELOCK_MEM_PINNED = 2,     /* cuMemHostAlloc / cudaHostAlloc */
  PAGELOCK_MEM_REGISTERED = 3, /* cuMemHostRegister */
  PAGELOCK_MEM_MANAGED = 4,
  PAGELOCK_MEM_DEVICE = 5,
  PAGELOCK_MEM_ARRAY = 6,      /* CUDA array (2D/3D copies) */
};

enum pagelock_copy_flags {
  PAGELOCK_COPY_ASYNC = 1u << 0,    /* an *Async entry point */
  PAGELOCK_COPY_PTDS = 1u << 1,     /* per-thread default stream twin */
  PAGELOCK_COPY_STAGED = 1u << 2,   /* moved by the staging engine */
  PAGELOCK_COPY_CAPTURE = 1u << 3,  /* stream was capturing: untouched */
  PAGELOCK_COPY_BATCH = 1u << 4,    /* one entry of a batch call */
  PAGELOCK_COPY_FALLBACK = 1u << 5, /* staging gave up, native call used */
  PAGELOCK_COPY_REGISTERED = 1u << 6, /* host range page-locked by the shim */
  PAGELOCK_COPY_GRAPH_NODE = 1u << 7, /* a graph memcpy node was defined (or its
                                         parameters set): nothing was copied
                                         by this call, and the graph is left
                                         as the program built it */
};

typedef struct pagelock_rec_copy {
  pagelock_rec_hdr h;
  uint64_t start_ns;     /* CLOCK_MONOTONIC at entry of the call */
  uint64_t host_ns;      /* time the caller spent inside the call */
  uint64_t bytes;
  uint64_t stream;       /* CUstream handle value, 0 = legacy default */
  uint64_t host_ptr;     /* host side address (0 for D2D) */
  uint64_t callsite;     /* return address of the hooked call */
  uint64_t correlation;  /* shim-wide sequence number of the call */
  uint32_t tid;          /* kernel thread id */
  uint32_t stack_id;     /* PAGELOCK_REC_STACK id of the call stack, 0 none */
  uint32_t alloc_stack_id; /* stack of the host buffer's allocation, 0 none */
  uint32_t flags;        /* pagelock_copy_flags */
  int32_t result;        /* CUresult the app saw */
  int32_t device;        /* device ordinal, -1 unknown */
  uint16_t api;          /* pagelock_api_id: the exact driver symbol */
  uint8_t dir;           /* pagelock_dir */
  uint8_t host_mem;      /* pagelock_mem of the host side */
  uint8_t src_mem;       /* pagelock_mem of source */
  uint8_t dst_mem;       /* pagelock_mem of destination */
  uint8_t pad[2];
} pagelock_rec_copy;

typedef struct pagelock_rec_stack {
  pagelock_rec_hdr h;
  uint32_t id;
  uint32_t depth;                 /* frames used, <= PAGELOCK_MAX_FRAMES */
  /* uint64_t frames[depth], innermost first */
} pagelock_rec_stack;

typedef struct pagelock_rec_module {
  pagelock_rec_hdr h;
  uint64_t base;   /* load bias (dlpi_addr) */
  uint64_t start;  /* lowest executable address */
  uint64_t end;    /* one past the highest executable address */
  /* char path[] NUL ("" = main program; the reporter uses the exe path) */
} pagelock_rec_module;

typedef struct pagelock_rec_symbol {
  pagelock_rec_hdr h;
  uint64_t addr;
  uint64_t sym_addr; /* start of the symbol, 0 if none */
  /* char name[] NUL (may be empty) */
} pagelock_rec_symbol;

typedef struct pagelock_rec_counters {
  pagelock_rec_hdr h;
  uint64_t bytes_staged;
  uint64_t bytes_passthrough;
  uint64_t fallbacks;
  uint64_t waits;
  uint64_t wait_ns;
  uint64_t pool_high_water;   /* bytes */
  uint64_t pool_bytes;        /* configured bound */
  uint64_t registered_bytes_high_water;
  uint64_t dropped_records;
  uint64_t reserved[7];
} pagelock_rec_counters;

typedef struct pagelock_rec_note {
  pagelock_rec_hdr h;
  uint32_t kind;   /* pagelock_note_kind */
  uint32_t reserved;
  /* char text[] NUL */
} pagelock_rec_note;

enum pagelock_note_kind {
  PAGELOCK_NOTE_INFO = 0,
  PAGELOCK_NOTE_WARNING = 1,
  PAGELOCK_NOTE_NO_GPU_TIMING = 2,
};

typedef struct pagelock_rec_end {
  pagelock_rec_hdr h;
  uint64_t end_mono_ns;
  uint64_t records;  /* records written before this one */
  uint64_t dropped;
} pagelock_rec_end;

/* Exact driver entry points the shim wraps.  The trace stores the id; the
 * names (pagelock_api_names in the reporter and shim) must stay in this
 * order: append only. */
#define PAGELOCK_API_LIST(X)                         \
  X(cuMemcpyHtoD_v2)                                 \
  X(cuMemcpyHtoD_v2_ptds)                            \
  X(cuMemcpyDtoH_v2)                                 \
  X(cuMemcpyDtoH_v2_ptds)                            \
  X(cuMemcpyHtoDAsync_v2)                            \
  X(cuMemcpyHtoDAsync_v2_ptsz)                       \
  X(cuMemcpyDtoHAsync_v2)                            \
  X(cuMemcpyDtoHAsync_v2_ptsz)                       \
  X(cuMemcpy)                                        \
  X(cuMemcpy_ptds)                                   \
  X(cuMemcpyAsync)                                   \
  X(cuMemcpyAsync_ptsz)                              \
  X(cuMemcpy2D_v2)                                   \
  X(cuMemcpy2D_v2_ptds)                              \
  X(cuMemcpy2DUnaligned_v2)                          \
  X(cuMemcpy2DUnaligned_v2_ptds)                     \
  X(cuMemcpy2DAsync_v2)                              \
  X(cuMemcpy2DAsync_v2_ptsz)                         \
  X(cuMemcpy3D_v2)                                   \
  X(cuMemcpy3D_v2_ptds)                              \
  X(cuMemcpy3DAsync_v2)                              \
  X(cuMemcpy3DAsync_v2_ptsz)                         \
  X(cuMemcpyBatchAsync)                              \
  X(cuMemcpyBatchAsync_ptsz)                         \
  X(cuMemcpyBatchAsync_v2)                           \
  X(cuMemcpyBatchAsync_v2_ptsz)                       \
  X(cuGraphAddMemcpyNode)                            \
  X(cuGraphMemcpyNodeSetParams)                      \
  X(cuGraphExecMemcpyNodeSetParams)                  \
  X(cuGraphAddNode)                                  \
  X(cuGraphAddNode_v2)                               \
  X(cuGraphNodeSetParams)                            \
  X(cuGraphExecNodeSetParams)

enum pagelock_api_id {
#define PAGELOCK_API_ENUM(name) PAGELOCK_API_##name,
  PAGELOCK_API_LIST(PAGELOCK_API_ENUM)
#undef PAGELOCK_API_ENUM
  PAGELOCK_API_COUNT
};

#endif
