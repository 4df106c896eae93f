/* trace_format.h - the on-disk trace format, shared by the shim (writer)
 * and the reporter (reader).  Documented in docs/trace-format.md; any change
 * here bumps PAGELOCK_TRACE_VERSION and that document.
 *
 * A trace is a 64-byte file header followed by a stream of records.  Every
 * record starts with pagelock_rec_hdr and its total size is a multiple of 8,
 * so a reader can skip record types it does not know and stop cleanly at the
 * last complete record when the writer died mid-run.  All integers are
 * little-endian (the shim only runs on x86-64 and aarch64 Linux). */
#ifndef PAGELOCK_TRACE_FORMAT_H
#define PAGELOCK_TRACE_FORMAT_H

#include <stdint.h>

#define PAGELOCK_TRACE_MAGIC "PGLKTRC1" /* 8 bytes, no NUL terminator used */
/* 2: CUPTI records, COPY.gpu_correlation.  3: CHECK records, the header's
 * stop flags (PAGELOCK_FILE_STOP_*).  PYCODE and PYSTACK records came
 * later within version 3: they only add to what a STACK says, and a reader
 * that predates them skips them as unknown types and shows native sites.
 * 4: COPY.count and COPY.timed (one record for a run of repeated copies). */
#define PAGELOCK_TRACE_VERSION 4u
#define PAGELOCK_TRACE_MAX_RECORD (1u << 20) /* larger sizes mean corruption */
#define PAGELOCK_MAX_FRAMES 16

typedef struct pagelock_file_header {
  char magic[8];        /* PAGELOCK_TRACE_MAGIC */
  uint32_t version;     /* PAGELOCK_TRACE_VERSION */
  uint32_t header_size; /* sizeof(pagelock_file_header) == 64 */
  uint64_t pid;
  uint64_t start_realtime_ns; /* CLOCK_REALTIME when the trace was opened */
  uint64_t start_mono_ns;     /* CLOCK_MONOTONIC at the same instant */
  uint32_t flags;             /* PAGELOCK_FILE_* */
  uint32_t reserved0;
  uint64_t reserved[2];
} pagelock_file_header;

enum pagelock_file_flags {
  PAGELOCK_FILE_SIMULATED = 1u << 0, /* fake CUDA: timings simulated */
  /* Version 3.  Set in place (pwrite of the flags word, which needs no new
   * disk block) when the writer stops early, so the report can say why the
   * trace ends where it does instead of guessing that the program died. */
  PAGELOCK_FILE_STOP_DISK_FULL = 1u << 1,   /* ENOSPC, EDQUOT or EFBIG */
  PAGELOCK_FILE_STOP_WRITE_ERROR = 1u << 2, /* any other write error */
  PAGELOCK_FILE_STOP_FD_LOST = 1u << 3,     /* the program took the shim's
                                               descriptor, and the file could
                                               not be opened again */
  PAGELOCK_FILE_CHECKSUMS = 1u << 4,        /* blocks end in CHECK records */
};

typedef struct pagelock_rec_hdr {
  uint32_t type; /* PAGELOCK_REC_* */
  uint32_t size; /* whole record including this header, multiple of 8 */
} pagelock_rec_hdr;

enum pagelock_rec_type {
  PAGELOCK_REC_PROCESS = 1,  /* once, first record */
  PAGELOCK_REC_COPY = 2,     /* one copy call of the program */
  PAGELOCK_REC_STACK = 3,    /* interned call stack, before first use */
  PAGELOCK_REC_MODULE = 4,   /* a loaded object, written at exit */
  PAGELOCK_REC_SYMBOL = 5,   /* dladdr() name of one address, at exit */
  PAGELOCK_REC_COUNTERS = 6, /* engine counters, at exit */
  PAGELOCK_REC_NOTE = 7,     /* a problem or fact the report must show */
  PAGELOCK_REC_END = 8,      /* clean end of trace */
  /* Version 2: what CUPTI saw.  Written from CUPTI's buffer-completion
   * thread in batches, so they arrive later than the COPY records they join
   * and in no global time order. */
  PAGELOCK_REC_GPU = 9,         /* one GPU activity: copy, memset, kernel, sync */
  PAGELOCK_REC_NAME = 10,       /* interned kernel name, before first use */
  PAGELOCK_REC_LINK = 11,       /* a shim-issued GPU op belongs to an app call */
  PAGELOCK_REC_CLOCK = 12,      /* CUPTI timestamp <-> CLOCK_MONOTONIC pair */
  PAGELOCK_REC_DEVICE = 13,     /* one device's properties */
  PAGELOCK_REC_GPU_STATUS = 14, /* whether GPU timing is on, and why not */
  /* Version 3. */
  PAGELOCK_REC_CHECK = 15, /* CRC32C of the bytes since the previous CHECK */
  /* Python call and allocation sites (optional: see the version above). */
  PAGELOCK_REC_PYSTACK = 16, /* the Python frames of one STACK, after it */
  PAGELOCK_REC_PYCODE = 17,  /* one Python code object, before first use */
  /* GPU timing sampled (optional, like PYSTACK: a reader that predates it
   * skips it). */
  PAGELOCK_REC_GPU_SAMPLE = 18, /* CUPTI's tracing paused or resumed */
  /* What finding call sites cost the program (optional, like GPU_SAMPLE). */
  PAGELOCK_REC_COST = 19, /* at exit, before END */
};

/* Strings follow fixed parts as NUL-terminated bytes, padded to 8. */
typedef struct pagelock_rec_process {
  pagelock_rec_hdr h;
  uint64_t ppid;
  uint32_t mode; /* pagelock_mode */
  int32_t rank;  /* -1 when not an MPI/torchrun job */
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
  /* cuMemcpyPeer*: between two contexts' memory.  Came within version 3: a
   * reader that predates it counts such copies under unknown. */
  PAGELOCK_DIR_PEER = 5,
};

/* What the host side of a copy is, from the pointer-attribute query. */
enum pagelock_mem {
  PAGELOCK_MEM_UNKNOWN = 0,
  PAGELOCK_MEM_PAGEABLE = 1,
  PAGELOCK_MEM_PINNED = 2,     /* cuMemHostAlloc / cudaHostAlloc */
  PAGELOCK_MEM_REGISTERED = 3, /* cuMemHostRegister */
  PAGELOCK_MEM_MANAGED = 4,
  PAGELOCK_MEM_DEVICE = 5,
  PAGELOCK_MEM_ARRAY = 6, /* CUDA array (2D/3D copies) */
};

enum pagelock_copy_flags {
  PAGELOCK_COPY_ASYNC = 1u << 0,      /* an *Async entry point */
  PAGELOCK_COPY_PTDS = 1u << 1,       /* per-thread default stream twin */
  PAGELOCK_COPY_STAGED = 1u << 2,     /* moved by the staging engine */
  PAGELOCK_COPY_CAPTURE = 1u << 3,    /* stream was capturing: untouched */
  PAGELOCK_COPY_BATCH = 1u << 4,      /* one entry of a batch call */
  PAGELOCK_COPY_FALLBACK = 1u << 5,   /* staging gave up, native call used */
  PAGELOCK_COPY_REGISTERED = 1u << 6, /* host range page-locked by the shim */
  PAGELOCK_COPY_GRAPH_NODE = 1u << 7, /* a graph memcpy node was defined (or its
                                         parameters set): nothing was copied
                                         by this call, and the graph is left
                                         as the program built it */
  PAGELOCK_COPY_FIRST_USE = 1u << 8,  /* the first copy of its host side's
                                         tracked allocation: a buffer the
                                         program allocated anew (the report
                                         tells a buffer allocated per step
                                         from one copied again and again) */
};

typedef struct pagelock_rec_copy {
  pagelock_rec_hdr h;
  uint64_t start_ns; /* CLOCK_MONOTONIC at entry of the call */
  uint64_t host_ns;  /* time the caller spent inside the call */
  uint64_t bytes;
  uint64_t stream;         /* CUstream handle value, 0 = legacy default */
  uint64_t host_ptr;       /* host side address (0 for D2D) */
  uint64_t callsite;       /* return address of the hooked call */
  uint64_t correlation;    /* shim-wide sequence number of the call */
  uint32_t tid;            /* kernel thread id */
  uint32_t stack_id;       /* PAGELOCK_REC_STACK id of the call stack, 0 none */
  uint32_t alloc_stack_id; /* stack of the host buffer's allocation, 0 none */
  uint32_t flags;          /* pagelock_copy_flags */
  int32_t result;          /* CUresult the app saw */
  int32_t device;          /* device ordinal, -1 unknown */
  uint16_t api;            /* pagelock_api_id: the exact driver symbol */
  uint8_t dir;             /* pagelock_dir */
  uint8_t host_mem;        /* pagelock_mem of the host side */
  uint8_t src_mem;         /* pagelock_mem of source */
  uint8_t dst_mem;         /* pagelock_mem of destination */
  uint8_t pad[2];
  /* Version 2.  CUPTI correlationId of the driver call, from the CUPTI
   * callback on that call; the GPU record(s) of the copy carry the same id.
   * 0 when GPU timing is off or the call queued no GPU work.  Staged copies
   * issue their chunks as shim calls: those join through LINK records. */
  uint32_t gpu_correlation;
  /* Version 3.  The route the copy took is in flags (PAGELOCK_COPY_STAGED,
   * PAGELOCK_COPY_REGISTERED, neither: passed through); why a pageable
   * copy was not registered (pagelock_why), 0 otherwise. */
  uint8_t why;
  uint8_t reserved2[3];
  /* Version 4.  Back-to-back repeats of one small copy on one thread (the
   * same entry point, call stack, host and device addresses, size and
   * stream, with nothing the shim tracks changed in between) share one
   * record: count is how many copies it stands for, timed how many of
   * them were timed.  start_ns is then the first one's start and host_ns
   * the estimate for all of them (their timed mean times count); every
   * other field holds for each.  Older traces end before count: a reader
   * takes count = timed = 1. */
  uint32_t count;
  uint32_t timed;
} pagelock_rec_copy;

/* Why a pageable copy did not go through a shim registration. */
enum pagelock_why {
  PAGELOCK_WHY_NONE = 0,      /* registered, or not a pageable 1D copy */
  PAGELOCK_WHY_MODE = 1,      /* the mode never registers (observe, stage) */
  PAGELOCK_WHY_SMALL = 2,     /* below PAGELOCK_STAGE_MIN: passed through */
  PAGELOCK_WHY_SHAPE = 3,     /* 2D, 3D, batch or array copy */
  PAGELOCK_WHY_UNTRACKED = 4, /* no allocation the shim saw made and will
                                 see released (stack, static data, a small
                                 block, an allocator preloaded first) */
  PAGELOCK_WHY_SHARED = 5,    /* shared or file-backed mapping (DataLoader
                                 workers' batches): staged, never registered */
  PAGELOCK_WHY_COLD = 6,      /* not copied enough yet to pay for registering */
  PAGELOCK_WHY_PENDING = 7,   /* registration under way on the shim's thread */
  PAGELOCK_WHY_BUDGET = 8,    /* PAGELOCK_REGISTER_BUDGET full, nothing to evict */
  PAGELOCK_WHY_FAILED = 9,    /* the driver refused to register it */
  PAGELOCK_WHY_CAPTURE = 10,  /* stream capture: the copy is left untouched */
  PAGELOCK_WHY_EDGE = 11,     /* the bytes lie in the allocation's partial
                                 first or last page only */
  PAGELOCK_WHY_COUNT
};

/* Version 1 COPY records end before gpu_correlation; a reader zero-fills. */
#define PAGELOCK_REC_COPY_V1_SIZE 96u

typedef struct pagelock_rec_stack {
  pagelock_rec_hdr h;
  uint32_t id;
  uint32_t depth; /* frames used, <= PAGELOCK_MAX_FRAMES */
  /* uint64_t frames[depth], innermost first */
} pagelock_rec_stack;

/* One Python frame: a PYCODE id and the line being executed in it. */
typedef struct pagelock_py_frame {
  uint32_t code;
  uint32_t line;
} pagelock_py_frame;

enum pagelock_py_flags {
  PAGELOCK_PY_LIBRARY = 1u << 0,   /* no frame of the user's own code: these
                                      are the libraries' */
  PAGELOCK_PY_TRUNCATED = 1u << 1, /* more user frames than depth */
  PAGELOCK_PY_CALLER = 1u << 2,    /* frames[0] is a library's line that made
                                      the call, the user's frames follow */
};

/* The Python frames of the thread that made STACK `stack_id`'s call (a
 * copy or an allocation): the innermost frames of the user's own code
 * (not installed under site-packages or dist-packages, not the standard
 * library), innermost first, after the library line that made the call
 * when that was not the user's (PAGELOCK_PY_CALLER).  Follows that STACK
 * record; a stack without one had no Python frames (or the process runs
 * no Python pagelock reads). */
typedef struct pagelock_rec_pystack {
  pagelock_rec_hdr h;
  uint32_t stack_id;
  uint16_t depth; /* frames used, 1..PAGELOCK_MAX_PY_FRAMES */
  uint16_t flags; /* pagelock_py_flags */
  /* pagelock_py_frame frames[depth] */
} pagelock_rec_pystack;
#define PAGELOCK_MAX_PY_FRAMES 8

enum pagelock_pycode_flags {
  PAGELOCK_PYCODE_LIBRARY = 1u << 0, /* installed (site-packages, dist-packages) or
                                        the standard library's */
};

/* One Python code object (a function, a module body, a generator...). */
typedef struct pagelock_rec_pycode {
  pagelock_rec_hdr h;
  uint32_t id;          /* >= 1, referred to by pagelock_py_frame.code */
  uint32_t firstlineno; /* co_firstlineno */
  uint32_t flags;       /* pagelock_pycode_flags */
  uint32_t reserved;
  /* char filename[] NUL (co_filename), char name[] NUL (co_qualname; 3.10:
   * co_name), UTF-8, either cut to fit */
} pagelock_rec_pycode;

typedef struct pagelock_rec_module {
  pagelock_rec_hdr h;
  uint64_t base;  /* load bias (dlpi_addr) */
  uint64_t start; /* lowest executable address */
  uint64_t end;   /* one past the highest executable address */
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
  uint64_t pool_high_water; /* bytes */
  uint64_t pool_bytes;      /* configured bound */
  uint64_t registered_bytes_high_water;
  uint64_t dropped_records;
  /* Version 3: the registration engine (PAGELOCK_MODE register, auto). */
  uint64_t register_budget;   /* PAGELOCK_REGISTER_BUDGET, bytes */
  uint64_t registrations;     /* ranges the shim page-locked */
  uint64_t unregistrations;   /* ranges it undid (release, eviction, exit) */
  uint64_t evictions;         /* undone to make room in the budget */
  uint64_t register_failures; /* refused by the driver (then staged) */
  uint64_t register_ns;       /* time the shim's thread spent registering */
  uint64_t registered_bytes;  /* still registered when the record was written */
} pagelock_rec_counters;

typedef struct pagelock_rec_note {
  pagelock_rec_hdr h;
  uint32_t kind; /* pagelock_note_kind */
  uint32_t reserved;
  /* char text[] NUL */
} pagelock_rec_note;

enum pagelock_note_kind {
  PAGELOCK_NOTE_INFO = 0,
  PAGELOCK_NOTE_WARNING = 1,
  PAGELOCK_NOTE_NO_GPU_TIMING = 2,
};

/* Closes one block of the file: every byte from `start` (the end of the
 * previous CHECK record, or header_size for the first) up to this record's
 * own offset.  The writer appends one to each buffer it writes, so a block
 * is at most the writer's buffer (256 KiB) plus one record.  A reader that
 * finds a mismatch knows the file is corrupt from byte `start` on. */
typedef struct pagelock_rec_check {
  pagelock_rec_hdr h;
  uint64_t start;  /* file offset of the block's first byte */
  uint32_t crc32c; /* pagelock_crc32c(0, block, its length) */
  uint32_t reserved;
} pagelock_rec_check;

typedef struct pagelock_rec_end {
  pagelock_rec_hdr h;
  uint64_t end_mono_ns;
  uint64_t records; /* records written before this one */
  uint64_t dropped;
} pagelock_rec_end;

/* What a GPU record is. */
enum pagelock_gpu_kind {
  PAGELOCK_GPU_MEMCPY = 1,     /* CUPTI MEMCPY (host<->device, device<->device) */
  PAGELOCK_GPU_MEMCPY_P2P = 2, /* CUPTI MEMCPY2 (peer copies) */
  PAGELOCK_GPU_MEMSET = 3,
  PAGELOCK_GPU_KERNEL = 4,   /* CUPTI CONCURRENT_KERNEL */
  PAGELOCK_GPU_SYNC = 5,     /* CUPTI SYNCHRONIZATION: a host wait (host time) */
  PAGELOCK_GPU_OVERHEAD = 6, /* CUPTI OVERHEAD: profiler time (host time) */
};

/* Memory kinds as CUPTI reports them (CUpti_ActivityMemoryKind values, kept
 * numerically so the shim copies them through). */
enum pagelock_gpu_mem {
  PAGELOCK_GPU_MEM_UNKNOWN = 0,
  PAGELOCK_GPU_MEM_PAGEABLE = 1,
  PAGELOCK_GPU_MEM_PINNED = 2,
  PAGELOCK_GPU_MEM_DEVICE = 3,
  PAGELOCK_GPU_MEM_ARRAY = 4,
  PAGELOCK_GPU_MEM_MANAGED = 5,
  PAGELOCK_GPU_MEM_DEVICE_STATIC = 6,
  PAGELOCK_GPU_MEM_MANAGED_STATIC = 7,
};

/* Copy directions as CUPTI reports them (CUpti_ActivityMemcpyKind values). */
enum pagelock_gpu_copy {
  PAGELOCK_GPU_COPY_UNKNOWN = 0,
  PAGELOCK_GPU_COPY_HTOD = 1,
  PAGELOCK_GPU_COPY_DTOH = 2,
  PAGELOCK_GPU_COPY_HTOA = 3,
  PAGELOCK_GPU_COPY_ATOH = 4,
  PAGELOCK_GPU_COPY_ATOA = 5,
  PAGELOCK_GPU_COPY_ATOD = 6,
  PAGELOCK_GPU_COPY_DTOA = 7,
  PAGELOCK_GPU_COPY_DTOD = 8,
  PAGELOCK_GPU_COPY_HTOH = 9,
  PAGELOCK_GPU_COPY_PTOP = 10,
};

enum pagelock_gpu_flags {
  PAGELOCK_GPU_ASYNC = 1u << 0, /* CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC */
};

/* One GPU activity.  start/end are in CUPTI's clock (CLOCK_REALTIME on
 * Linux); CLOCK records say how it maps to CLOCK_MONOTONIC.  For SYNC and OVERHEAD the interval is
 * host time on the thread that waited / paid. */
typedef struct pagelock_rec_gpu {
  pagelock_rec_hdr h;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t bytes;       /* MEMCPY/MEMSET bytes, 0 otherwise */
  uint32_t correlation; /* CUPTI correlationId of the API call that queued it */
  uint32_t stream;      /* CUPTI streamId (not the CUstream handle) */
  uint32_t device;
  uint32_t context;
  uint32_t name_id;  /* KERNEL: NAME id, 0 none; SYNC: CUpti_ActivitySynchronizationType;
                        OVERHEAD: CUpti_ActivityOverheadKind */
  uint32_t flags;    /* pagelock_gpu_flags */
  uint8_t kind;      /* pagelock_gpu_kind */
  uint8_t copy_kind; /* pagelock_gpu_copy (MEMCPY) */
  uint8_t src_kind;  /* pagelock_gpu_mem (MEMCPY), memory kind (MEMSET) */
  uint8_t dst_kind;  /* pagelock_gpu_mem (MEMCPY) */
  uint32_t thread;   /* SYNC/OVERHEAD: CUPTI thread id of the host side, else 0 */
} pagelock_rec_gpu;  /* 64 bytes */

typedef struct pagelock_rec_name {
  pagelock_rec_hdr h;
  uint32_t id; /* >= 1 */
  uint32_t reserved;
  /* char name[] NUL (kernel name as CUPTI gives it, mangled) */
} pagelock_rec_name;

/* The shim's own GPU op with CUPTI correlationId `correlation` (a staged
 * chunk) was issued for the app's call whose COPY record has `copy_seq` as
 * its correlation field. */
typedef struct pagelock_rec_link {
  pagelock_rec_hdr h;
  uint32_t correlation;
  uint32_t reserved;
  uint64_t copy_seq;
} pagelock_rec_link;

/* The same instant read from both clocks: GPU record times convert to
 * CLOCK_MONOTONIC as t - cupti_ns + mono_ns (the last CLOCK record before the
 * GPU record wins; none means they are already CLOCK_MONOTONIC). */
typedef struct pagelock_rec_clock {
  pagelock_rec_hdr h;
  uint64_t cupti_ns;
  uint64_t mono_ns;
} pagelock_rec_clock;

typedef struct pagelock_rec_device {
  pagelock_rec_hdr h;
  uint32_t device;       /* ordinal, as in GPU records */
  uint32_t copy_engines; /* CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT */
  uint32_t sm_count;
  uint32_t pci_gen; /* 0 unknown */
  uint64_t reserved;
  /* char name[] NUL */
} pagelock_rec_device;

enum pagelock_gpu_status {
  PAGELOCK_GPU_TIMING_ON = 0,       /* CUPTI records are in this trace */
  PAGELOCK_GPU_TIMING_DISABLED = 1, /* PAGELOCK_CUPTI=0 */
  PAGELOCK_GPU_TIMING_NO_CUPTI = 2, /* libcupti could not be loaded */
  PAGELOCK_GPU_TIMING_BUSY = 3,     /* another CUPTI subscriber (nsys, ncu, a profiler) */
  PAGELOCK_GPU_TIMING_VERSION = 4,  /* libcupti too old/new for the driver or for us */
  PAGELOCK_GPU_TIMING_ERROR = 5,    /* a CUPTI call failed: see reason */
  PAGELOCK_GPU_TIMING_NO_CUDA = 6,  /* the program never initialised CUDA */
};

/* Written once when CUPTI setup ends (status and reason) and again at exit
 * with the counts; the last one wins. */
typedef struct pagelock_rec_gpu_status {
  pagelock_rec_hdr h;
  uint32_t status;        /* pagelock_gpu_status */
  uint32_t cupti_version; /* cuptiGetVersion, 0 unknown */
  uint64_t records;       /* GPU records written so far */
  uint64_t dropped;       /* records CUPTI dropped (no buffer, full) */
  uint64_t buffers;       /* buffers CUPTI completed */
  /* char reason[] NUL ("" when on) */
} pagelock_rec_gpu_status;

/* The shim pauses CUPTI's tracing while the program issues more GPU
 * operations a second than PAGELOCK_CUPTI_MAX_RATE, and opens one short
 * window a period to sample them (shim/record/cupti.c).  Between a pause and the
 * next resume, or the end of the trace, GPU records and COPY correlations
 * are missing by design: the report judges overlap inside the windows and
 * never counts a paused stretch as idle GPU time. */
typedef struct pagelock_rec_gpu_sample {
  pagelock_rec_hdr h;
  uint64_t mono_ns;   /* CLOCK_MONOTONIC when tracing stopped or started again */
  uint32_t on;        /* 0 paused, 1 resumed */
  uint32_t ops_per_s; /* pause: the rate that made it pause; resume: 0 */
} pagelock_rec_gpu_sample;

/* What finding call sites cost the program's own threads, all told: the
 * shim's share of its time that observing adds, the unwinds and Python
 * walks it took, and the pages those walks asked the kernel about. */
typedef struct pagelock_rec_cost {
  pagelock_rec_hdr h;
  uint64_t captures;   /* call stacks asked for, of copies and allocations */
  uint64_t capture_ns; /* their time, the two below included */
  uint64_t unwinds;    /* native unwinds: captures the per-thread memo did not answer */
  uint64_t unwind_ns;
  uint64_t py_walks; /* Python walks (0: no Python, or its frames are off) */
  uint64_t py_walk_ns;
  uint64_t py_probes; /* pages the walks asked the kernel about (a system call each) */
  uint64_t reserved;
} pagelock_rec_cost;

/* Exact driver entry points the shim wraps.  The trace stores the id; the
 * names (pagelock_api_names in the reporter and shim) must stay in this
 * order: append only. */
#define PAGELOCK_API_LIST(X)        \
  X(cuMemcpyHtoD_v2)                \
  X(cuMemcpyHtoD_v2_ptds)           \
  X(cuMemcpyDtoH_v2)                \
  X(cuMemcpyDtoH_v2_ptds)           \
  X(cuMemcpyHtoDAsync_v2)           \
  X(cuMemcpyHtoDAsync_v2_ptsz)      \
  X(cuMemcpyDtoHAsync_v2)           \
  X(cuMemcpyDtoHAsync_v2_ptsz)      \
  X(cuMemcpy)                       \
  X(cuMemcpy_ptds)                  \
  X(cuMemcpyAsync)                  \
  X(cuMemcpyAsync_ptsz)             \
  X(cuMemcpy2D_v2)                  \
  X(cuMemcpy2D_v2_ptds)             \
  X(cuMemcpy2DUnaligned_v2)         \
  X(cuMemcpy2DUnaligned_v2_ptds)    \
  X(cuMemcpy2DAsync_v2)             \
  X(cuMemcpy2DAsync_v2_ptsz)        \
  X(cuMemcpy3D_v2)                  \
  X(cuMemcpy3D_v2_ptds)             \
  X(cuMemcpy3DAsync_v2)             \
  X(cuMemcpy3DAsync_v2_ptsz)        \
  X(cuMemcpyBatchAsync)             \
  X(cuMemcpyBatchAsync_ptsz)        \
  X(cuMemcpyBatchAsync_v2)          \
  X(cuMemcpyBatchAsync_v2_ptsz)     \
  X(cuGraphAddMemcpyNode)           \
  X(cuGraphMemcpyNodeSetParams)     \
  X(cuGraphExecMemcpyNodeSetParams) \
  X(cuGraphAddNode)                 \
  X(cuGraphAddNode_v2)              \
  X(cuGraphNodeSetParams)           \
  X(cuGraphExecNodeSetParams)       \
  X(cuMemcpyDtoD_v2)                \
  X(cuMemcpyDtoD_v2_ptds)           \
  X(cuMemcpyDtoDAsync_v2)           \
  X(cuMemcpyDtoDAsync_v2_ptsz)      \
  X(cuMemcpyPeer)                   \
  X(cuMemcpyPeer_ptds)              \
  X(cuMemcpyPeerAsync)              \
  X(cuMemcpyPeerAsync_ptsz)

enum pagelock_api_id {
#define PAGELOCK_API_ENUM(name) PAGELOCK_API_##name,
  PAGELOCK_API_LIST(PAGELOCK_API_ENUM)
#undef PAGELOCK_API_ENUM
      PAGELOCK_API_COUNT
};

/* CRC32C (Castagnoli, reflected, as iSCSI and ext4 use it): crc is the
 * value so far (0 to start), the result feeds the next call.  The SSE4.2
 * instruction does 8 bytes a cycle or so (0.10-0.15 ns a byte measured,
 * docs/trace-format.md); other CPUs (aarch64 among them) take the table
 * below, 2.2 ns a byte on the CI machine: 0.6 ms of the writer thread's
 * time per 256 KiB block.  Both sides of the format use this one
 * definition. */
#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static inline uint32_t pagelock_crc32c_hw_(uint32_t crc,
                                                                             const unsigned char *p,
                                                                             uint64_t n) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n > 0; n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

/* A byte at a time from a 256-entry table (the standard one for the
 * Castagnoli polynomial 0x82F63B78, reflected). */
static inline uint32_t pagelock_crc32c_sw_(uint32_t crc, const unsigned char *p, uint64_t n) {
  static const uint32_t t[256] = {
      0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu, 0x26a1e7e8u,
      0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu, 0x4d43cfd0u, 0xbf284cd3u,
      0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu, 0xf165b798u, 0x030e349bu, 0xd7c45070u,
      0x25afd373u, 0x36ff2087u, 0xc494a384u, 0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u,
      0x5d1d08bfu, 0xaf768bbcu, 0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u,
      0x33ed7d2au, 0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
      0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau, 0x30e349b1u,
      0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu, 0x1642ae59u, 0xe4292d5au,
      0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au, 0x7da08661u, 0x8fcb0562u, 0x9c9bf696u,
      0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu, 0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u,
      0x67dafa54u, 0x95b17957u, 0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu,
      0xfe53516fu, 0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
      0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu, 0x3ac7f2ebu,
      0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u, 0x61c69362u, 0x93ad1061u,
      0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu, 0x4767748au, 0xb50cf789u, 0xeb1fcbadu,
      0x197448aeu, 0x0a24bb5au, 0xf84f3859u, 0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u,
      0x7198540du, 0x83f3d70eu, 0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u,
      0xa55230e6u, 0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
      0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu, 0x456cac67u,
      0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u, 0xe9141340u, 0x1b7f9043u,
      0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu, 0x92a8fc17u, 0x60c37f14u, 0x73938ce0u,
      0x81f80fe3u, 0x55326b08u, 0xa759e80bu, 0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu,
      0xf94ad42fu, 0x0b21572cu, 0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u,
      0x502036a5u, 0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
      0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u, 0x0e330a81u,
      0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du, 0x758fe5d6u, 0x87e466d5u,
      0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u, 0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u,
      0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu, 0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u,
      0x0417b1dbu, 0xf67c32d8u, 0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu,
      0x5a048dffu, 0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
      0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u, 0x590ab964u,
      0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u, 0x7fab5e8cu, 0x8dc0dd8fu,
      0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu, 0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u,
      0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u, 0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u,
      0x4f48173du, 0xbd23943eu, 0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au,
      0xc69f7b69u, 0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
      0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
  };
  uint32_t c = ~crc;
  while (n--) c = (c >> 8) ^ t[(c ^ *p++) & 0xffu];
  return ~c;
}

static inline uint32_t pagelock_crc32c(uint32_t crc, const void *data, uint64_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2"))
    return pagelock_crc32c_hw_(crc, (const unsigned char *)data, n);
#endif
  return pagelock_crc32c_sw_(crc, (const unsigned char *)data, n);
}

#endif
