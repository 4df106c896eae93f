/* pl_internal.h - declarations shared by the shim's modules.
 *
 * Naming: pagelock_* is public (exported or in the trace format), pl_* is
 * internal to libpagelock.so.  Everything here has hidden visibility; the
 * only exported symbols are the interposed libc/driver entry points, marked
 * PL_EXPORT where they are defined, in shim/hook_*.c only (the lint_exports
 * test checks). */
#ifndef PL_INTERNAL_H
#define PL_INTERNAL_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "pagelock/trace_format.h"

#define PL_EXPORT __attribute__((visibility("default")))
#define PL_LIKELY(x) __builtin_expect(!!(x), 1)
#define PL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Initial-exec TLS: the cheapest access, and it never calls malloc (a
 * general-dynamic TLS access can, which is fatal inside a malloc hook). */
#define PL_TLS __thread __attribute__((tls_model("initial-exec")))

/* A spin-wait hint to the core (frees the sibling hyperthread). */
static inline void pl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- state.c: what every layer reads ------------------------------------ */

/* True when the shim should do anything at all: not setuid, mode not off. */
bool pl_active(void);
/* The constructor found the shim should act (init.c). */
void pl_state_enable(void);
/* Shim-wide reentrancy guard: nonzero while the shim itself is running on
 * this thread, so calls it makes never come back into its own hooks.
 * Touched only through pl_shim_enter/leave/inside/own_thread (below). */
extern PL_TLS int pl_in_shim;
/* The calling thread's kernel id, kept per thread. */
uint32_t pl_gettid(void);
/* A forked child: its one thread has an id of its own. */
void pl_state_atfork_child(void);
/* The page size (sysconf, read once). */
size_t pl_page_size(void);
/* Up to cap-1 bytes of a small kernel file (/proc, /sys) into buf, NUL
 * terminated; the bytes read, or -1.  Allocates nothing, keeps the
 * program's errno (it is read inside copy and allocation hooks), and
 * closes with the system call: close(3) in the shim is its own wrapper
 * (hook_fd.c), a layer above every caller. */
long pl_read_small_file(const char *path, char *buf, size_t cap);
/* A correlation id for one copy call (unique in the process, never 0). */
uint64_t pl_next_correlation(void);
/* Set a file-header flag before the file is created; the flags so far. */
void pl_trace_set_flag(uint32_t flag);
uint32_t pl_trace_flags(void);

/* ---- logline.c: one line to stderr, whole -------------------------------- */

/* "pagelock: ", fmt formatted, "\n", in one writev.  Never allocates,
 * never touches stdout.  Callers decide whether to say it (log.c, and
 * config.c for its own messages). */
void pl_logline(const char *fmt, va_list *ap);
/* Records which file descriptor 2 is at load (hook_fd.c's constructor):
 * from then on a line goes out only while 2 is still that file.  Unit
 * tests, which never call it, log to whatever 2 is. */
void pl_log_stderr_record(void);
/* Once, when lines were withheld because 2 is not the program's starting
 * stderr any more (or was closed at start): true, with why and the first
 * withheld line in text, for the trace to say (trace.c). */
bool pl_log_withheld_take(char *text, size_t len);

/* ---- config.c: the PAGELOCK_* option table ---------------------------- */

/* PL_OPT_MODE ... in the order of include/pagelock/options.def. */
typedef enum pl_option_id {
#define PAGELOCK_OPTION(id, type, def, min, max, values, shown, help) PL_OPT_##id,
#include "pagelock/options.def"
#undef PAGELOCK_OPTION
  PL_OPT_COUNT
} pl_option_id;

enum pl_d2h_mode { PL_D2H_SYNC = 0, PL_D2H_ASYNC = 1 };
enum pl_h2d_mode { PL_H2D_SYNC = 0, PL_H2D_ASYNC = 1 };
enum pl_log_level { PL_LOG_QUIET = 0, PL_LOG_ERROR, PL_LOG_WARN, PL_LOG_INFO, PL_LOG_DEBUG };

/* Parse every option from the environment once.  Bad values are reported
 * (one line each) and replaced by the default; unknown PAGELOCK_* names are
 * warned about.  Safe to call more than once: later calls are no-ops. */
void pl_config_init(void);
/* The numeric value of an option (enum index for choice options). */
long pl_opt_long(pl_option_id id);
/* The string value of a string option, or NULL when unset. */
const char *pl_opt_str(pl_option_id id);
/* Re-read the table, for unit tests that change the environment. */
void pl_config_reset_for_test(void);

/* Parse "64K", "16M", "2G", "4096": returns false on junk or overflow. */
bool pl_parse_size(const char *s, uint64_t *out);

/* ---- log.c -------------------------------------------------------------- */

/* Each kind of problem is logged at most once per process. */
typedef enum pl_log_kind {
  PL_LK_CONFIG = 0, /* config messages are per option, never deduplicated */
  PL_LK_NO_DRIVER,
  PL_LK_TRACE_OPEN,
  PL_LK_TRACE_WRITE,
  PL_LK_STACK_TABLE_FULL,
  PL_LK_MANIFEST,
  PL_LK_SETUID,
  PL_LK_ATTR_QUERY,
  PL_LK_STAGE_POOL,     /* pinned pool could not be allocated */
  PL_LK_STAGE_GROW,     /* pinned pool could not grow past its chunks */
  PL_LK_STAGE_ERROR,    /* a driver call inside the engine failed */
  PL_LK_STAGE_WORKERS,  /* copy threads could not be started */
  PL_LK_STAGE_FALLBACK, /* a wait for a chunk timed out */
  PL_LK_CUPTI,          /* GPU timing unavailable, and why */
  PL_LK_TRACE_FD,       /* the program took the trace's descriptor */
  PL_LK_REGISTER,       /* the driver refused a shim registration */
  PL_LK_UNREGISTER,     /* the driver refused to undo one */
  PL_LK_PIN_THREAD,     /* the registration thread could not be started */
  PL_LK_PY_CODES,       /* the Python code table is full */
  PL_LK_PY_REFUSED,     /* the kernel refused the Python walk's page probe */
  PL_LK_EVENT,          /* PAGELOCK_LOG=debug: engine events, every one */
  PL_LK_CUPTI_SAMPLE,   /* GPU timing went to sampling, or could not resume */
  PL_LK_REENTRY,        /* debug builds: the re-entry guard left more than entered */
  PL_LK_COUNT
} pl_log_kind;

/* Log one line to stderr with the "pagelock: " prefix, never cut: the
 * format's pieces and every %s go out as they are in one writev, so put
 * the reason first and a long value (a path, an environment value) last.
 * Never allocates, never touches stdout, keeps errno.  Kinds other than
 * PL_LK_CONFIG and PL_LK_EVENT log only once. */
void pl_log(int level, pl_log_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void pl_log_reset_for_test(void);

/* ---- the re-entry guard (state.c's pl_in_shim) -------------------------- */

/* Around anything the shim does on a program's thread that may reach a
 * hook of its own (a driver call, an allocation): the hook then passes
 * the call through.  Every enter has its leave on every path out, early
 * returns included: a leave missed turns the shim off on that thread for
 * good, silently.  Debug builds check the balance where it can be seen,
 * a leave with nothing entered, and say so once (never abort, never
 * allocate: async-signal-safe); tests read the depth after each path. */
static inline void pl_shim_enter(void) { pl_in_shim++; }
static inline void pl_shim_leave(void) {
#ifndef NDEBUG
  if (PL_UNLIKELY(pl_in_shim <= 0)) {
    pl_log(PL_LOG_ERROR, PL_LK_REENTRY, "re-entry guard left more often than entered (a bug)");
    return;
  }
#endif
  pl_in_shim--;
}
/* The shim is running on this thread (its own call reached a hook). */
static inline bool pl_shim_inside(void) { return pl_in_shim != 0; }
/* A thread of the shim's own (the writer, copy threads, the pin thread,
 * CUPTI's flusher): nothing it ever does is the program's.  First thing
 * in the thread's body; never left. */
static inline void pl_shim_own_thread(void) { pl_in_shim = 1; }
/* How deep this thread is inside the shim (tests: 0 after every path). */
static inline int pl_shim_depth(void) { return pl_in_shim; }

/* ---- driver.c: the real driver, loaded at run time ---------------------- */

/* Raw driver names: the shim defines the exact decorated symbols itself
 * (cuMemcpyHtoD_v2, cuMemcpyHtoDAsync_v2_ptsz, legacy cuGetProcAddress),
 * so the header must not rename them. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

/* The real address of an exact driver symbol, or NULL. */
void *pl_driver_sym(const char *name);
/* Tell the driver module which handle the program got for libcuda. */
void pl_driver_note_handle(void *handle);
/* The real dlsym, found with dlvsym so that our own dlsym is skipped. */
void *pl_real_dlsym(void *handle, const char *name);

/* The other driver entry points the shim wraps, after the copy ids of
 * PAGELOCK_API_LIST: the host-allocation calls the program itself makes, so
 * the shim's picture of pinned memory stays exact, and its pointer queries,
 * so the shim's own registrations stay invisible to it (hook_hostalloc.c);
 * cuInit, so CUPTI starts before the first context and the staging pool
 * prepares its memory (hook_cupti.c); and
 * cuMemAlloc_v2, whose first call in a context starts the staging pool
 * (pool.c); the program's waits for the GPU, only timed
 * (hook_sync.c); and its teardown of streams and contexts, only noted
 * (hook_ctx.c).  Each
 * exact symbol a lookup can hand out: cudart asks for cuMemHostRegister at
 * 6050 and cuMemHostGetDevicePointer at 3020 (the _v2s), a program looking
 * up the bare names gets the originals. */
#define PL_HOSTALLOC_LIST(X)      \
  X(cuMemHostAlloc)               \
  X(cuMemAllocHost_v2)            \
  X(cuMemFreeHost)                \
  X(cuMemHostRegister_v2)         \
  X(cuMemHostUnregister)          \
  X(cuInit)                       \
  X(cuMemHostRegister)            \
  X(cuMemHostGetFlags)            \
  X(cuMemHostGetDevicePointer_v2) \
  X(cuMemHostGetDevicePointer)    \
  X(cuPointerGetAttribute)        \
  X(cuPointerGetAttributes)       \
  X(cuMemAlloc_v2)                \
  X(cuCtxSynchronize)             \
  X(cuCtxSynchronize_v2)          \
  X(cuStreamSynchronize)          \
  X(cuStreamSynchronize_ptsz)     \
  X(cuEventSynchronize)           \
  X(cuStreamDestroy)              \
  X(cuStreamDestroy_v2)           \
  X(cuCtxDestroy)                 \
  X(cuCtxDestroy_v2)              \
  X(cuDevicePrimaryCtxRelease)    \
  X(cuDevicePrimaryCtxRelease_v2) \
  X(cuDevicePrimaryCtxReset)      \
  X(cuDevicePrimaryCtxReset_v2)   \
  X(cuGreenCtxDestroy)            \
  X(cuLaunchHostFunc)             \
  X(cuLaunchHostFunc_ptsz)        \
  X(cuStreamAddCallback)          \
  X(cuStreamAddCallback_ptsz)

/* cuda.h declares the per-thread twins only for its own macro names. */
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
                                  unsigned int flags);

enum pl_hook_id {
  PL_HOOK_HOSTALLOC_FIRST = PAGELOCK_API_COUNT - 1,
#define PL_HOOK_ENUM(name) PL_HOOK_##name,
  PL_HOSTALLOC_LIST(PL_HOOK_ENUM)
#undef PL_HOOK_ENUM
      PL_HOOK_COUNT
};

/* The real driver, one table: what the shim's own code calls, resolved
 * all at once the first time it is asked for with libcuda loaded, and the
 * real function behind every wrapped symbol, resolved one by one on first
 * use.  Every pointer comes from pl_driver_sym with the exact decorated
 * name, so no caller ever re-enters the shim's wrappers.  The fields drop
 * the cu prefix, as cupti.c's table drops cupti's: a name the shim
 * defines itself (hook_*.c) is a wrapper, never one of these. */
typedef struct pl_drv {
  /* Behind hook id i: pl_hook_real(i). */
  void *_Atomic real[PL_HOOK_COUNT];
  bool simulated; /* the loaded libcuda is tests/fakecuda */
  bool engines;   /* every entry point the engines require is there */
  /* Queries; any may be NULL. */
  CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t);
  CUresult (*GetProcAddress_v2)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
  /* The devices, for the trace's DEVICE records (cupti.c). */
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  /* The engines' (stage.c, pool.c, pinreg.c, autopin.c), and the device
   * memo's below.  Optional, may be NULL on older or simulated drivers:
   * CtxGetId, ThreadExchangeStreamCaptureMode, StreamGetCtx, StreamGetId,
   * and the primary and green contexts' getters used at teardown; every
   * other one is required for `engines`. */
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxGetId)(CUcontext, unsigned long long *);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
  CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*StreamGetCtx)(CUstream, CUcontext *);
  CUresult (*StreamGetId[2])(CUstream, unsigned long long *);
  CUresult (*MemHostRegister)(void *, size_t, unsigned);
  CUresult (*MemHostUnregister)(void *);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventSynchronize)(CUevent);
  /* [0] legacy default stream semantics, [1] the _ptsz per-thread twin */
  CUresult (*StreamIsCapturing[2])(CUstream, CUstreamCaptureStatus *);
  CUresult (*MemcpyHtoDAsync[2])(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync[2])(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*EventRecord[2])(CUevent, CUstream);
  CUresult (*LaunchHostFunc[2])(CUstream, CUhostFn, void *);
  CUresult (*StreamSynchronize[2])(CUstream);
  /* teardowns (hook_ctx.c) */
  CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxFromGreenCtx)(CUcontext *, CUgreenCtx);
} pl_drv;

/* The table, resolved from the libcuda the program itself loaded (the
 * shim never loads it into a program that does not use CUDA); NULL while
 * libcuda is not loaded.  Safe from any thread. */
const pl_drv *pl_drv_get(void);
/* The same for the engines: NULL also when the driver lacks an entry
 * point they require (said once in the log). */
static inline const pl_drv *pl_drv_engines(void) {
  const pl_drv *d = pl_drv_get();
  return PL_LIKELY(d != NULL && d->engines) ? d : NULL;
}
/* The real driver function behind hook id `id`, NULL if this driver lacks
 * it.  Inline: every copy asks it, and the call cost 13 of a repeated
 * copy's instructions. */
extern pl_drv pl_drv_table;
void *pl_hook_resolve(int id);
static inline void *pl_hook_real(int id) {
  void *f = atomic_load_explicit(&pl_drv_table.real[id], memory_order_acquire);
  return PL_LIKELY(f != NULL) ? f : pl_hook_resolve(id);
}
/* Hook id whose real driver function is `fn`, or -1. */
int pl_hook_find_real(void *fn);
extern const char *const pl_hook_names[PL_HOOK_COUNT];

/* The ordinal of the device a copy on `stream` runs on: that of the
 * stream's context, or of the current one for the legacy and per-thread
 * default streams; -1 unknown.  Remembered per thread by stream and by
 * context until pl_copy_device_forget, so a copy on a stream the thread
 * used before asks the driver nothing.  Call it outside the CUPTI
 * correlation window of the program's call. */
int pl_copy_device(CUstream stream);
/* A stream or a context was destroyed: its handle may come back naming
 * another one, so every thread asks again (hook_ctx.c). */
void pl_copy_device_forget(void);
/* What pl_copy_device's answer for `stream` rests on: the generation
 * pl_copy_device_forget moves, and for a default stream the current
 * context (0 for any other stream).  Equal marks, equal answers. */
unsigned pl_copy_device_gen(void);
uintptr_t pl_copy_device_ctx(CUstream stream);

/* ---- hooks.c: the wrapper of every wrapped driver symbol ---------------- */

/* Our wrapper for hook id `id`. */
void *pl_hook_wrapper(int id);
/* Hook id of an exact driver symbol name, or -1. */
int pl_hook_find_name(const char *name);
/* The wrappers, defined next to them (hook_copy.c, hook_hostalloc.c). */
extern void *const pl_copy_wrappers[PAGELOCK_API_COUNT];
extern void *const pl_hostalloc_wrappers[PL_HOOK_COUNT - PAGELOCK_API_COUNT];

/* ---- copy.c: the one decision point ------------------------------------- */

/* Everything one copy call needs, filled by its wrapper.  The native thunk
 * reissues the exact original call from the saved arguments. */
typedef struct pl_copy pl_copy;
typedef CUresult (*pl_native_fn)(const pl_copy *c);

struct pl_copy {
  int api;
  uint32_t flags;       /* PAGELOCK_COPY_* known from the entry point */
  uint64_t seq;         /* the COPY record's correlation (set by pl_copy_exec) */
  int dir;              /* pagelock_dir, UNKNOWN until classified */
  CUdeviceptr dst, src; /* as passed; host pointers cast */
  size_t bytes;
  CUstream stream;
  void *callsite;
  const void *args; /* entry-point specific (2D/3D/batch params) */
  pl_native_fn native;
  /* filled by classification */
  uint8_t src_mem, dst_mem;
  uint8_t why;          /* pagelock_why: why a pageable copy was not registered */
  uint32_t alloc_stack; /* allocation site of the host side, 0 unknown */
};

/* Every wrapper ends here: classify, decide (observe/stage/...), run, record.
 * Returns exactly what the program must see. */
CUresult pl_copy_exec(pl_copy *c);
/* Fill a pl_copy's sides and bytes from a 2D or 3D descriptor; a NULL
 * descriptor is left for the driver to refuse. */
void pl_fill_2d(pl_copy *c, const CUDA_MEMCPY2D *p);
void pl_fill_3d(pl_copy *c, const CUDA_MEMCPY3D *p);
/* A graph memcpy node was defined or changed (call already made, result r):
 * record it, flagged PAGELOCK_COPY_GRAPH_NODE.  Never touches the graph. */
void pl_copy_note_graph(int api, const CUDA_MEMCPY3D *p, CUresult r, void *callsite);
/* A batch call's arguments, as its wrapper saw them (c->args). */
typedef struct pl_batch_args {
  CUdeviceptr *dsts, *srcs;
  size_t *sizes, count;
  CUmemcpyAttributes *attrs;
  size_t *attrs_idxs, num_attrs, *fail_idx;
} pl_batch_args;
/* Number of entries of a batch call, and entry i of it. */
size_t pl_batch_count(const pl_copy *c);
void pl_batch_entry(const pl_copy *c, size_t i, CUdeviceptr *dst, CUdeviceptr *src, size_t *n);

/* ---- stage.c: the staging engine (pool.c, workers.c) ------------------- */

/* Move copy `c` (pageable host side, H2D or D2H, 1D) through the shim's
 * pinned pool, keeping the contract (docs/design.md).  Returns true when it
 * handled the copy: *r is what the program must see and c->flags gained
 * PAGELOCK_COPY_STAGED and/or PAGELOCK_COPY_FALLBACK.  Returns false, having
 * enqueued nothing, when the caller must run the native call itself
 * (capturing stream, no context, engine disabled...); it may set
 * PAGELOCK_COPY_CAPTURE in c->flags. */
bool pl_stage_copy(pl_copy *c, CUresult *r);
/* The driver is initialized (cuInit succeeded): in the modes that stage,
 * the pool's first memory is prepared (pool.c). */
void pl_stage_note_driver_init(void);
/* The program allocated device memory in the current context: in the
 * modes that stage, the context's pool starts building (pool.c). */
void pl_stage_note_device_alloc(void);
/* A teardown is about to end `ctx` (hook_ctx.c): the shim's thread
 * finishes what it does there first.  Then, once it has ended, what the
 * engines made in it is forgotten without a driver call: the pools'
 * chunks, cached events, registrations (pool.c, autopin.c, pinreg.c). */
void pl_stage_note_ctx_ending(CUcontext ctx);
void pl_stage_note_ctx_gone(CUcontext ctx);
/* Write the engine's COUNTERS record (at exit, before END). */
void pl_stage_write_counters(void);
/* A forked child: CUDA is unusable there; the engine turns itself off. */
void pl_stage_atfork_child(void);

/* ---- hostmem.c: what kind of memory a pointer is ------------------------ */

/* Classify one pointer: the program's own pinned ranges first, then the
 * cached driver answer of the tracked allocation containing it, else the
 * driver's attribute query.  Never holds the registry lock across a
 * driver call. */
int pl_hostmem_classify(CUdeviceptr p);
/* The same, also giving the allocation site (stack id, 0 unknown) and
 * whether this is the first time the tracked allocation holding p was
 * classified: the first copy of a buffer the program allocated anew. */
int pl_hostmem_classify_site(CUdeviceptr p, uint32_t *alloc_stack, bool *fresh);
/* Moves whenever an answer of pl_hostmem_classify_site may change: the
 * program pins or unpins, maps or unmaps, or an allocation is tracked.
 * The same stamp, the same answer for any pointer asked before (but for
 * a registration the hooks never saw: see pl_hostmem_spend). */
uint64_t pl_hostmem_stamp(void);
/* n more answers for p's page taken from this thread's memo of untracked
 * pageable pages without asking it (a run's copies, copy.c): the memo's
 * bound on how long a registration the hooks never saw goes unnoticed
 * holds for them too. */
void pl_hostmem_spend(CUdeviceptr p, uint32_t n);
/* Size the tracked-range table for allocations of at least track_min
 * bytes; returns the smallest size that can be tracked (0: none). */
size_t pl_hostmem_init(size_t track_min);
/* Tracked allocations (heap/mmap) from hook_alloc.c.  Lock-free. */
void pl_hostmem_track(void *p, size_t n, uint32_t stack_id);
/* Where a tracked allocation came from (the low bits of its kind), which
 * decides whether the shim may page-lock it (autopin.c). */
enum pl_origin {
  PL_ORIGIN_HEAP = 0,    /* the malloc family */
  PL_ORIGIN_MMAP = 1,    /* anonymous private writable mmap */
  PL_ORIGIN_SHARED = 2,  /* MAP_SHARED or file-backed: never registered */
  PL_ORIGIN_MAPONLY = 3, /* a mapping while another allocator than glibc
                            serves malloc (its arenas reach mmap too, and it
                            releases them under its own lock): never */
  PL_ORIGIN_MASK = 3,
  PL_ALLOC_REG_FAILED = 4, /* the driver refused to register it: staged */
  PL_ALLOC_OWN_PAGES = 8,  /* a mapping of its own (a glibc mmapped chunk, an
                              anonymous mmap): no other allocation shares
                              the pages its bytes lie in */
};
/* The same, with its origin and PL_ALLOC_OWN_PAGES when it applies. */
void pl_hostmem_track_as(void *p, size_t n, uint32_t stack_id, int origin);
/* The tracked allocation containing p: its base, size and kind (origin
 * and PL_ALLOC_* flags).  Lock-free. */
bool pl_hostmem_lookup(uintptr_t p, uintptr_t *base, size_t *size, int *kind);
/* Set PL_ALLOC_* flags on the tracked allocation [base, base+size), if it
 * is still tracked (a new allocation starts with none). */
void pl_hostmem_mark(uintptr_t base, size_t size, int flags);
/* The shim page-locks [p, p+n) itself (from before the driver call until
 * after the undo): such memory classifies as pageable.  add: false when
 * it cannot be recorded (then it must not be registered). */
bool pl_hostmem_shim_add(uintptr_t p, size_t n);
void pl_hostmem_shim_remove(uintptr_t p);
bool pl_hostmem_shim_has(uintptr_t p);
/* Forget the allocation starting at p; false if it was not tracked. */
bool pl_hostmem_untrack(void *p);
/* Forget every tracked allocation overlapping [p, p+n) (munmap). */
void pl_hostmem_untrack_range(void *p, size_t n);
/* The program page-locked [p, p+n) (kind PINNED or REGISTERED), or undid
 * it; any change invalidates every cached classification. */
void pl_hostmem_pinned_add(void *p, size_t n, int kind);
void pl_hostmem_pinned_remove(void *p);
/* Something may have changed what kind of memory some page is (an mmap,
 * munmap or mremap): drop every cached classification.  [gone, gone+n):
 * pages that may be unmapped or replaced (n 0: none). */
void pl_hostmem_invalidate(const void *gone, size_t n);
/* Registry invariants hold; counts of tracked and pinned ranges. */
bool pl_hostmem_check(size_t *tracked, size_t *pinned);
void pl_hostmem_atfork_prepare(void);
void pl_hostmem_atfork_parent(void);
void pl_hostmem_atfork_child(void);

/* ---- stack.c ------------------------------------------------------------ */

/* Capture the caller's stack (skipping `skip` shim frames) and intern it.
 * Returns its id (>0), or 0 when stacks are off or the table is full.
 * Writes nothing: see pl_stack_emit. */
uint32_t pl_stack_capture(int skip);
/* How a run tells its call path again without unwinding: where the frames
 * above the hook keep their return addresses, in this thread's own stack,
 * and what they held (stack.c).  Made by pl_stack_check_empty or
 * pl_stack_capture_at, never zeroed: f[0] is always read. */
#define PL_CHECK_FRAMES (PAGELOCK_MAX_FRAMES - 1)
#define PL_CHECK_NONE UINT32_MAX /* a stack was taken that cannot be told again */
typedef struct pl_stack_check {
  uint32_t n;
  struct {
    const uintptr_t *at;
    uintptr_t val;
  } f[PL_CHECK_FRAMES];
} pl_stack_check;
/* A check of no frames (a copy with no stack): its first entry reads a
 * word that holds what it expects, so the nearest frame's read below
 * needs no test of n. */
extern const uintptr_t pl_check_pad;
static inline void pl_stack_check_empty(pl_stack_check *k) {
  k->n = 0;
  k->f[0].at = &pl_check_pad;
  k->f[0].val = pl_check_pad;
}
/* Whether the call path is still the one check k was made from (k->n is
 * not PL_CHECK_NONE), in two parts: the nearest frame, where two paths of
 * one run key part most often (two lines of main: the run looked at first
 * may be the other line's), and the rest.  On every repeat of a run, so
 * the rest is unrolled: four instructions a frame (a loop spent seven). */
static inline bool pl_stack_check_near(const pl_stack_check *k) {
  return *k->f[0].at == k->f[0].val;
}
static inline bool pl_stack_check_far(const pl_stack_check *k) {
#define PL_FRAME_DIFF(i) (*k->f[i].at ^ k->f[i].val)
  _Static_assert(PL_CHECK_FRAMES == 15, "one case per frame below");
  uintptr_t d = 0;
  switch (k->n) {
    case 15: d |= PL_FRAME_DIFF(14); /* fall through */
    case 14: d |= PL_FRAME_DIFF(13); /* fall through */
    case 13: d |= PL_FRAME_DIFF(12); /* fall through */
    case 12: d |= PL_FRAME_DIFF(11); /* fall through */
    case 11: d |= PL_FRAME_DIFF(10); /* fall through */
    case 10: d |= PL_FRAME_DIFF(9);  /* fall through */
    case 9: d |= PL_FRAME_DIFF(8);   /* fall through */
    case 8: d |= PL_FRAME_DIFF(7);   /* fall through */
    case 7: d |= PL_FRAME_DIFF(6);   /* fall through */
    case 6: d |= PL_FRAME_DIFF(5);   /* fall through */
    case 5: d |= PL_FRAME_DIFF(4);   /* fall through */
    case 4: d |= PL_FRAME_DIFF(3);   /* fall through */
    case 3: d |= PL_FRAME_DIFF(2);   /* fall through */
    case 2: d |= PL_FRAME_DIFF(1);   /* fall through */
    case 1:                          /* fall through */
    case 0: break;
    /* A run's check has at most PL_CHECK_FRAMES (never PL_CHECK_NONE: no
     * run opens then), so the jump needs no test of its bounds. */
    default: __builtin_unreachable();
  }
#undef PL_FRAME_DIFF
  return d == 0;
}
/* The same, memoised per thread on (return address ra of the hooked call,
 * caller's stack pointer sp, and the frames above, read again): a repeat
 * of the same call path costs a few nanoseconds instead of an unwind.
 * *check (when not NULL) gets what tells this call path again: n 0 when
 * there is no stack, PL_CHECK_NONE when it cannot be told (not yet known,
 * or not on the thread's own stack: a coroutine's, a signal stack). */
uint32_t pl_stack_capture_at(int skip, const void *ra, const void *sp, pl_stack_check *check);
/* A one-frame stack: just ra, with the calling thread's Python frames.
 * For the mmap family, which may be entered by an allocator holding its
 * own mutex: no unwinding, no lock, no allocation (interning is
 * lock-free).  0 when stacks are off. */
uint32_t pl_stack_capture_ra(const void *ra);
/* At load: what finding the main thread's stack needs (its thread, the
 * stack limit). */
void pl_stack_init(void);
/* Unwind once, at load, so that the unwinder's first look at the loaded
 * objects (which may allocate) happens before any hook unwinds. */
void pl_stack_warm(void);
/* A NOTE for the trace, written just before its first STACK record (each
 * trace: a forked child's too): about allocation sites, so it goes exactly
 * into the traces that could show one, and opens no file by itself. */
void pl_stack_note(uint32_t kind, const char *text);
/* Make sure stack `id`'s STACK record is in the trace (before a record
 * that refers to it).  id 0 is ignored. */
void pl_stack_emit(uint32_t id);
void pl_stack_atfork_prepare(void);
void pl_stack_atfork_parent(void);
/* Write SYMBOL records for every interned frame (at exit). */
void pl_stack_write_symbols(void);
/* Forget all stacks (a forked child starts a new trace). */
void pl_stack_reset(void);

/* ---- pystack.c: the calling thread's Python frames ---------------------- */

#define PL_PY_FRAMES PAGELOCK_MAX_PY_FRAMES
/* A stack's Python part: innermost user frames first (PAGELOCK_PY_*). */
typedef struct pl_pystack {
  uint16_t depth, flags;
  pagelock_py_frame f[PL_PY_FRAMES];
} pl_pystack;
/* Find the interpreter, if the process has one (at load: dlsym). */
void pl_py_init(void);
/* The calling thread's Python frames into *out (depth 0: none, or no
 * Python pagelock reads).  No lock, no allocation, every read checked:
 * safe inside the copy and allocation hooks, GIL held or not. */
bool pl_py_capture(pl_pystack *out);
/* pl_py_capture may find frames (Python is in the process and read). */
bool pl_py_walking(void);
/* A hash of *s for the stack table and memo; 0 when depth is 0. */
uint64_t pl_py_hash(const pl_pystack *s);
/* Under stack.c's emit lock: the PYCODE records s needs, then its
 * PYSTACK record for stack_id. */
void pl_py_emit(uint32_t stack_id, const pl_pystack *s);
/* Under the same lock, before each trace's first STACK record: the NOTE
 * saying why Python frames are missing, when a Python was found that the
 * walk cannot read (free-threaded, another version). */
void pl_py_note(void);
/* The program unmaps, moves or replaces [p, p+n): the pages there that
 * were checked readable may be gone. */
void pl_py_unmapped(uintptr_t p, size_t n);
/* Tests: whether the page of p is readable (asking the kernel unless it
 * is known), and whether it is known readable without asking. */
bool pl_py_page_ok_for_test(uintptr_t p);
bool pl_py_page_known_for_test(uintptr_t p);
/* A forked child writes a new trace: every PYCODE record is due again. */
void pl_py_reset(void);

/* ---- trace.c ------------------------------------------------------------ */

/* Append one record; the file is created on first use.  Never blocks on
 * anything but the trace lock and write(2). */
void pl_trace_write(const void *rec, size_t size);
/* The per-copy path's variant: a slot of `size` bytes (a multiple of 8)
 * in the buffer, with the trace lock held, for the caller to fill in
 * place, every byte, and hand back with pl_trace_commit(); NULL, lock not
 * held, when nothing is being traced.  Fill it without taking any other
 * lock. */
void *pl_trace_reserve(size_t size);
void pl_trace_commit(void);
/* The COPY record's own way (once per copy of the program): a slot in the
 * calling thread's ring, to fill in place, every byte, and hand back with
 * pl_trace_copy_end(); NULL when nothing is being traced.  Takes no lock
 * (except once per thread and once per ring-full); the record reaches the
 * file in a batch, within a second. */
pagelock_rec_copy *pl_trace_copy_begin(void);
void pl_trace_copy_end(void);
/* A whole COPY record, made elsewhere (a run's, run.h), the same way. */
void pl_trace_copy_put(const pagelock_rec_copy *rec);
/* Append several whole records at once (one lock round). */
void pl_trace_write_many(const void *recs, size_t size);
/* Append a record made of a fixed part and a NUL-terminated string. */
void pl_trace_write_str(const void *fixed, size_t fixed_size, uint32_t type, const char *str);
/* At exit: begin writes the MODULE records and returns true when the trace
 * is open; the caller then writes what the modules above know (symbols,
 * counters: init.c's pl_exit_trace), and end writes END and flushes. */
bool pl_trace_finish_begin(void);
void pl_trace_finish_end(void);
/* fork: hold the trace lock across fork; the child drops the parent's file
 * and buffer and starts afresh. */
void pl_trace_atfork_prepare(void);
void pl_trace_atfork_parent(void);
void pl_trace_atfork_child(void);
/* Tests: stop the writer thread once it has written what it was handed,
 * then forget the file, as a forked child does. */
void pl_trace_reset_for_test(void);
/* Tests: let at most n threads have a ring (the rest write through the
 * shared buffer). */
void pl_trace_rings_for_test(unsigned n);
/* Tests: drain every ring and run now, as the writer does once a second. */
void pl_trace_drain_for_test(void);
/* A writer thread writes the trace (false: the filling threads do). */
bool pl_trace_writer_running(void);
/* Take the start timestamps (at load). */
void pl_trace_init_clock(void);
/* Expand %p %h %r %% in pattern into out; false if it does not fit. */
bool pl_trace_expand(const char *pattern, char *out, size_t outsz);
/* CLOCK_MONOTONIC when the shim was loaded (or the fork child started). */
uint64_t pl_trace_start_ns(void);
/* The path of the open trace file ("" if none yet). */
const char *pl_trace_path(void);
/* A note for the report (once per text). */
void pl_trace_note(uint32_t kind, const char *text);

/* The trace's descriptor, for the close/dup wrappers of hook_fd.c.  The
 * number is published so that every close(2) of the program pays one
 * relaxed load and one compare; -1 while there is none (no file yet, a
 * forked child, a stopped trace). */
extern _Atomic int pl_trace_fd;
/* fd is the trace's number and still holds the trace's file (fstat): the
 * program never opened it, and closing it is for the program as closing a
 * number that is not open. */
bool pl_trace_fd_owned(int fd);
/* The wrappers' slow path, for a call that names or covers the trace's
 * number: returns that number with the descriptor locked (the writer
 * waits) and this thread's signals blocked into *saved, or -1, holding
 * nothing, when this process has no trace descriptor (a vfork child shares
 * our memory but not our descriptor table). */
int pl_trace_fd_lock(sigset_t *saved);
void pl_trace_fd_unlock(const sigset_t *saved);
/* Locked: the program is about to put its own file at the trace's number
 * (dup2/dup3): the trace moves to another number.  The old number still
 * holds the trace's file until the program's call replaces it; if that
 * call fails, the caller closes it, as it would not have been open. */
void pl_trace_fd_move(void);

/* ---- cupti.c: GPU timestamps ------------------------------------------- */

/* Start CUPTI once (hook_cupti.c's cuInit, InitializeInjection); safe to call
 * again and from CUPTI's own reentry. */
void pl_cupti_ensure(void);
/* True while CUPTI records are being collected. */
bool pl_cupti_active(void);
/* True while CUPTI traces the program's calls (between sampled windows it
 * is active but not tracing). */
bool pl_cupti_tracing(void);
/* Around the app's own driver call: the call's CUPTI correlationId (0 when
 * none was seen) is what pl_cupti_corr_end returns. */
void pl_cupti_corr_begin(void);
uint32_t pl_cupti_corr_end(void);
/* Around the staging engine's work for the app call `seq`: every GPU op it
 * queues gets a LINK record to that call. */
void pl_cupti_link_begin(uint64_t seq);
void pl_cupti_link_end(void);
/* A forked child: CUPTI is not usable there. */
void pl_cupti_atfork_child(void);
/* The real cuInit succeeded: write one DEVICE record per device, once. */
void pl_cupti_driver_ready(void);
/* The program subscribes to CUPTI itself, or registers activity buffers
 * of its own: hand CUPTI over to it (unless the call is the shim's own). */
void pl_cupti_program_subscribes(void);
/* libcupti's cuptiSubscribe and cuptiActivityRegisterCallbacks as the
 * shim loaded them, or NULL. */
void *pl_cupti_own_subscribe(void);
void *pl_cupti_own_register(void);

/* ---- hook_cupti.c: the CUPTI entry points -------------------------------- */

/* What dlsym hands out for a real cuptiSubscribe: our wrapper, which gives
 * CUPTI over to the program (remembering `real` to forward to). */
void *pl_cupti_subscribe_wrapper(void *real);
/* The same for cuptiActivityRegisterCallbacks. */
void *pl_cupti_register_wrapper(void *real);

/* ---- hook_alloc.c ------------------------------------------------------- */

/* Resolve the next mmap, munmap and mremap, and the malloc family, first
 * thing in the constructor; the mmap hooks use the raw system calls until
 * then (they must never call dlsym: an allocator may call them holding a
 * mutex that dlsym's own allocations need). */
void pl_alloc_init(void);
/* Start tracking allocations (from the constructor, after the config). */
void pl_alloc_enable(void);

/* ---- clock.c ------------------------------------------------------------ */

/* Decide once, at load, how pl_now_ns reads the clock. */
void pl_clock_init(void);
/* CLOCK_MONOTONIC in nanoseconds, from the TSC when the kernel's own clock
 * is (a few ns per read instead of a clock_gettime).  Never steps back on
 * one thread; across threads, reads agree to within a few tens of ns. */
uint64_t pl_now_ns(void);
/* Timing one call from the TSC: clock.h. */

/* ---- init.c: start and exit --------------------------------------------- */

/* The trace's last records (modules, symbols, counters, END), at exit;
 * tests call it to close a trace as the process would. */
void pl_exit_trace(void);

#endif
