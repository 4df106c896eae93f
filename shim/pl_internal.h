/* pl_internal.h - the base of the shim, what every module reads: its state
 * and the re-entry guard (state.c), one line to stderr (logline.c), the
 * option table (config.c), the log (log.c), the clock (clock.c; timing one
 * call: clock.h) and the real driver (driver.c).  Every other module has a
 * header of its own.
 *
 * Naming: pagelock_* is public (exported or in the trace format), pl_* is
 * internal to libpagelock.so.  Everything here has hidden visibility; the
 * only exported symbols are the interposed libc/driver entry points, marked
 * PL_EXPORT where they are defined, in shim/hook_*.c only (the lint_exports
 * test checks). */
#ifndef PL_INTERNAL_H
#define PL_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "pagelock/trace_format.h"

#define PL_EXPORT __attribute__((visibility("default")))
#define PL_LIKELY(x) __builtin_expect(!!(x), 1)
#define PL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* For the few helpers of the per-copy path whose cost was measured
 * inlined: the compiler's own choice moves with the code around them. */
#define PL_ALWAYS_INLINE inline __attribute__((always_inline))
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

/* ---- clock.c ------------------------------------------------------------ */

/* Decide once, at load, how pl_now_ns reads the clock. */
void pl_clock_init(void);
/* CLOCK_MONOTONIC in nanoseconds, from the TSC when the kernel's own clock
 * is (a few ns per read instead of a clock_gettime).  Never steps back on
 * one thread; across threads, reads agree to within a few tens of ns. */
uint64_t pl_now_ns(void);
/* Timing one call from the TSC: clock.h. */

#endif
