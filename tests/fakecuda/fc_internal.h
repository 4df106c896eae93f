/*
 * fc_internal.h: shared declarations of the fake CUDA driver.
 *
 * The fake is built from the real cuda.h.  __CUDA_API_VERSION_INTERNAL is
 * what NVIDIA's own driver sources define: it stops cuda.h from renaming
 * cuMemcpyHtoD to cuMemcpyHtoD_v2 (and friends) and declares every
 * versioned, legacy and per-thread name, so each exported function below
 * can be defined under its exact ABI name and checked against the real
 * prototype by the compiler.
 */
#ifndef FC_INTERNAL_H
#define FC_INTERNAL_H

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
/* The <name>_params structures CUPTI hands its callbacks. */
#include <generated_cuda_meta.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fakecuda.h"
#include "fc_tool.h"

#define FC_EXPORT __attribute__((visibility("default")))
#define FC_MAX_DEVICES 8

/* ------------------------------------------------------------------ */
/* symbols, call counting, fault injection (fc_fault.c)               */

enum fc_sym_id {
#define FC_SYM(base, ver, sym) FC_SYM_##sym,
#define FC_SYM_PT(base, ver, sym, twin) FC_SYM_##sym, FC_SYM_##twin,
#define FC_LOOKUP(base, ver, sym)
#include "fc_procs.def"
#undef FC_SYM
#undef FC_SYM_PT
#undef FC_LOOKUP
  FC_SYM__COUNT
};

extern const char *const fc_sym_names[FC_SYM__COUNT];
int fc_sym_lookup(const char *name); /* -1 if unknown */

/* Returns the injected error, if a rule fires for this call, else 0. */
CUresult fc_fault_check(enum fc_sym_id id);
void fc_fault_parse_env(const char *spec);
/* Name (CUDA_ERROR_...) or number -> CUresult; -1 if neither. */
long fc_error_from_string(const char *s);

/*
 * Every exported entry point starts with FC_ENTER and leaves through
 * FC_RETURN: the pair counts the call, applies fault rules and the
 * initialised/shut-down/inside-a-host-callback checks, tracks how many
 * threads are inside the API so the exit-time teardown knows whether it may
 * free shared state, and reports the call to an attached tracing tool
 * (fc_tool.h).  The call frame the tool sees lives in the function's own
 * stack frame, so a function using FC_ENTER must leave through FC_RETURN.
 * FC_ENTER_P also hands the tool the call's parameters, laid out as the
 * <name>_params structure of generated_cuda_meta.h (what CUPTI passes as
 * CUpti_CallbackData::functionParams); FC_ENTER_X adds the kernel name.
 */
CUresult fc_enter(enum fc_sym_id id, struct fc_tool_call *frame, struct fc_tool_call **call,
                  const void *params, const char *symbol);
void fc_leave(struct fc_tool_call *call, CUresult r);
int fc_api_threads_inside(void);
#define FC_ENTER_X(sym, params, symbol)                                                 \
  struct fc_tool_call fc__frame;                                                        \
  struct fc_tool_call *fc__call = NULL;                                                 \
  do {                                                                                  \
    CUresult fc__e = fc_enter(FC_SYM_##sym, &fc__frame, &fc__call, (params), (symbol)); \
    if (fc__e != CUDA_SUCCESS) return fc__e;                                            \
  } while (0)
#define FC_ENTER(sym) FC_ENTER_X(sym, NULL, NULL)
#define FC_ENTER_P(sym, params) FC_ENTER_X(sym, params, NULL)
#define FC_RETURN(expr)        \
  do {                         \
    CUresult fc__r = (expr);   \
    fc_leave(fc__call, fc__r); \
    return fc__r;              \
  } while (0)

/* ------------------------------------------------------------------ */
/* global state and configuration (fc_core.c)                         */

extern atomic_int fc_initialized;
extern atomic_int fc_shutdown;
extern atomic_int fc_forked_child;
extern int fc_ndevices;
extern size_t fc_device_mem_bytes;
extern int fc_driver_version;
extern _Atomic uint64_t fc_pinned_bps; /* bytes per second */
extern _Atomic uint64_t fc_pageable_bps;
extern uint64_t fc_register_bps;        /* 0: registration is free */
extern uint64_t fc_hostalloc_bps;       /* 0: pinned allocation is free */
extern __thread int fc_tls_in_callback; /* worker is running user code */
/* This thread's capture-interaction mode (cuThreadExchangeStreamCaptureMode);
 * 0 is CU_STREAM_CAPTURE_MODE_GLOBAL, every thread's default. */
extern __thread int fc_tls_capture_mode;

/* Serialises pageable copies process-wide, like the driver's staging buffer. */
extern pthread_mutex_t fc_bounce_mu;

struct fc_stats_atomic {
  _Atomic unsigned long long copies_pageable, copies_pinned, copies_d2d;
  _Atomic unsigned long long bytes_h2d, bytes_d2h, bytes_pageable, bytes_pinned;
  _Atomic unsigned long long memsets;
  _Atomic unsigned long long host_allocs_live, host_alloc_bytes_live;
  _Atomic unsigned long long registered_ranges_live, registered_bytes_live;
  _Atomic unsigned long long registered_bytes_high_water;
  _Atomic unsigned long long device_allocs_live, device_bytes_live;
  _Atomic unsigned long long kernels_launched, graph_launches, host_funcs_run;
  _Atomic unsigned long long host_register_calls, host_unregister_calls;
  _Atomic unsigned long long legacy_calls;
  _Atomic unsigned long long event_ctx_mismatches;
  _Atomic unsigned long long host_register_nonresident_pages;
};
extern struct fc_stats_atomic fc_stats;
#define FC_STAT_ADD(field, n) \
  atomic_fetch_add_explicit(&fc_stats.field, (unsigned long long)(n), memory_order_relaxed)
#define FC_STAT_SUB(field, n) \
  atomic_fetch_sub_explicit(&fc_stats.field, (unsigned long long)(n), memory_order_relaxed)
void fc_stat_registered_add(size_t bytes);

uint64_t fc_now_ns(void);
/* Sleep until fc_now_ns() >= deadline or shutdown; returns 0, -1 on shutdown. */
int fc_sleep_until(uint64_t deadline_ns);
void fc_sleep_wake_all(void);
/* Sleep the rest of bytes/bps that has not elapsed since start_ns. */
void fc_model_time(uint64_t start_ns, uint64_t bytes, uint64_t bps);

/* One-time driver bring-up (VA reservations, keys); cuInit calls it. */
CUresult fc_driver_init(void);

/* ------------------------------------------------------------------ */
/* devices and contexts (fc_device.c)                                 */

typedef struct fc_ctx fc_ctx;
typedef struct fc_stream fc_stream;
typedef struct fc_event fc_event;
typedef struct fc_op fc_op;
typedef struct fc_graph fc_graph;

struct fc_device {
  /* One copy engine per direction: uploads serialise with uploads only. */
  pthread_mutex_t h2d_engine;
  pthread_mutex_t d2h_engine;
  uintptr_t va_base; /* reserved PROT_NONE window device memory is carved from */
  size_t va_size;
  fc_ctx *primary;
};
extern struct fc_device fc_devices[FC_MAX_DEVICES];

#define FC_CTX_MAGIC 0x43545846u /* "FXTC" */
struct fc_ctx {
  uint32_t magic;
  uint32_t uid; /* process-unique, from 1: CUPTI's contextId / contextUid */
  int device;
  int is_primary;
  int retain; /* primary retain count, under fc_ctx_mu */
  int active; /* 0 once destroyed / primary fully released */
  unsigned flags;
  pthread_mutex_t mu;       /* streams list and legacy pointer */
  pthread_mutex_t order_mu; /* makes legacy-stream implicit sync atomic */
  fc_stream *streams;       /* every stream with a live worker */
  fc_stream *legacy;
  fc_ctx *all_next;
};
extern pthread_mutex_t fc_ctx_mu;

fc_ctx *fc_ctx_current(void);
CUresult fc_ctx_require(fc_ctx **out); /* current context or INVALID_CONTEXT */
int fc_ctx_usable(fc_ctx *c);
/* Wait for all work queued so far on every stream of c. */
CUresult fc_ctx_synchronize(fc_ctx *c);
/* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and invalidate) if a capture on c
 * forbids a device-synchronising call from this thread. */
CUresult fc_ctx_capture_check(fc_ctx *c);
/* The same over every context: for cuMemFree, cuMemFreeHost, cuMemHostUnregister. */
CUresult fc_capture_guard(void);
/* Same over every context of the process (cuMemFree and friends). */
CUresult fc_sync_all(void);
void fc_ctx_fini(void);

/* ------------------------------------------------------------------ */
/* address ranges (fc_ranges.c)                                       */

enum fc_rkind { FC_R_DEVICE = 1, FC_R_MANAGED, FC_R_HOSTALLOC, FC_R_REGISTERED };

typedef struct fc_range {
  uintptr_t start;
  size_t size;     /* as requested */
  size_t map_size; /* page-rounded mapping (device/host allocations) */
  int kind;
  int device;
  fc_ctx *ctx;
  unsigned flags;
  unsigned long long id;
  int dying; /* being unmapped: occupies its space, invisible to lookups */
} fc_range;

/* Range containing p; 1 found (copied to *out), 0 not. */
int fc_range_find(uintptr_t p, fc_range *out);
/* [p, p+n) inside a single range. n == 0 behaves as 1. */
int fc_range_covers(uintptr_t p, size_t n, fc_range *out);
int fc_range_is_pinned_host(uintptr_t p, size_t n);

CUresult fc_dev_alloc(int device, fc_ctx *ctx, size_t size, int kind, uintptr_t *out);
CUresult fc_dev_free(uintptr_t p);
CUresult fc_host_alloc(fc_ctx *ctx, size_t size, unsigned flags, void **out);
CUresult fc_host_free(void *p);
CUresult fc_host_register(fc_ctx *ctx, void *p, size_t size, unsigned flags);
CUresult fc_host_unregister(void *p);
/* Drop every range owned by ctx (context destroy / primary reset). */
void fc_ranges_release_ctx(fc_ctx *ctx);
CUresult fc_reserve_device_va(int device, size_t size);
void fc_ranges_fini(void);

/* ------------------------------------------------------------------ */
/* streams and queued work (fc_streams.c)                             */

enum fc_op_kind {
  FC_OP_NOP = 0,
  FC_OP_COPY,
  FC_OP_MEMSET,
  FC_OP_HOSTFN,
  FC_OP_CALLBACK,
  FC_OP_KERNEL,
  FC_OP_EVENT_RECORD,
  FC_OP_EVENT_WAIT,
};

enum fc_dir { FC_H2D = 1, FC_D2H, FC_D2D, FC_H2H };

/* One strided copy: depth slices of height rows of width bytes. */
typedef struct fc_copy_job {
  uintptr_t dst, src;
  size_t width, height, depth;
  size_t dpitch, spitch; /* row pitch */
  size_t dslice, sslice; /* slice pitch */
  int dir;
  int pageable; /* decided when issued: host side not pinned */
  int device;   /* whose copy engine moves it */
} fc_copy_job;

struct fc_dep {
  fc_stream *s;
  uint64_t seq;
};

struct fc_op {
  fc_op *next;
  int kind;
  uint64_t seq;
  struct fc_dep *deps;
  int ndeps;
  /* Set when a tracing tool took note of the op as it was queued
   * (fc_tool_queue); never copied by fc_op_clone. */
  void *trace;
  const struct fc_tool_ops *tool;
  union {
    struct {
      fc_copy_job *jobs;
      size_t njobs;
    } copy;
    struct {
      uintptr_t dst;
      unsigned value;
      int elsize;
      size_t width; /* elements per row */
      size_t height;
      size_t pitch; /* bytes */
    } memset;
    struct {
      CUhostFn fn;
      void *data;
    } host;
    struct {
      CUstreamCallback fn;
      CUstream handle;
      void *data;
    } cb;
    struct {
      uint64_t spin_ns;
      const char *name; /* the function's name; kept until exit (fc_module.c) */
      uint32_t grid[3], block[3];
      uint32_t shmem;
    } kernel;
    struct {
      fc_event *ev;
      uint64_t gen;
    } event;
  } u;
};

enum fc_stream_kind { FC_SK_USER = 0, FC_SK_LEGACY, FC_SK_PER_THREAD };

#define FC_STREAM_MAGIC 0x52545346u /* "FSTR" */
struct fc_stream {
  uint32_t magic;
  uint32_t id; /* process-unique, from 1: CUPTI's streamId */
  atomic_int refs;
  fc_ctx *ctx;
  int kind;
  unsigned flags;
  int priority;
  pthread_mutex_t mu;
  pthread_cond_t cv_work;
  pthread_cond_t cv_done;
  fc_op *head, *tail;
  uint64_t enq_seq;  /* last sequence number handed out */
  uint64_t done_seq; /* last sequence number completed, in order */
  int stopping;      /* destroyed: drain the queue, then exit */
  atomic_int exited; /* written under mu; read lock-free by the reaper */
  pthread_t thread;
  /* capture state, under mu */
  int capturing;
  int cap_invalid;
  int cap_mode;
  unsigned long long cap_id;
  pthread_t cap_thread;
  fc_graph *cap_graph;
  /* ctx->streams list, under ctx->mu */
  fc_stream *ctx_next, *ctx_prev;
  fc_stream *zombie_next;
};

fc_op *fc_op_new(int kind);
void fc_op_free(fc_op *op);
fc_op *fc_op_clone(const fc_op *op);

/*
 * Resolve an API stream handle.  per_thread selects what handle 0 means
 * (the _ptds/_ptsz entry points pass 1).  Needs a current context.
 */
CUresult fc_stream_resolve(CUstream h, int per_thread, fc_stream **out);
void fc_stream_unref(fc_stream *s);
int fc_stream_is_blocking(const fc_stream *s);

/*
 * Queue op on s (taking ownership) in stream order.  wait: return only when
 * it has run.  sync_api: the caller is a synchronous entry point, which
 * must fail rather than be captured.  On a capturing stream the op becomes
 * a graph node instead.
 */
CUresult fc_submit(fc_stream *s, fc_op *op, int wait, int sync_api);
CUresult fc_stream_sync(fc_stream *s);
CUresult fc_stream_query(fc_stream *s);
/* Invalidate the capture on s (under s->mu). */
void fc_capture_invalidate_locked(fc_stream *s);
int fc_stream_capturing(fc_stream *s); /* racy snapshot, for statistics and fast paths */
void fc_streams_stop_ctx(fc_ctx *c, int include_defaults);
void fc_streams_shutdown(void); /* exit: stop and join every worker */
int fc_streams_all_joined(void);
void fc_streams_fini(void);

/* Executes one op on a worker (fc_copy.c owns copies/memsets). */
void fc_exec_copy(fc_op *op);
void fc_exec_memset(fc_op *op);

/* ------------------------------------------------------------------ */
/* copies (fc_copy.c)                                                 */

/* Classify host sides of a copy op and count it in the stats. */
int fc_copy_classify(fc_op *op); /* returns 1 if any job is pageable */

/* ------------------------------------------------------------------ */
/* events (fc_events.c)                                               */

#define FC_EVENT_MAGIC 0x54564546u /* "FEVT" */
struct fc_event {
  uint32_t magic;
  uint32_t id; /* process-unique, from 1: CUPTI's cudaEventId */
  atomic_int refs;
  unsigned flags;
  fc_ctx *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t rec_gen;  /* bumped by each (non-captured) record */
  uint64_t done_gen; /* newest record generation that has completed */
  uint64_t t_ns;     /* when done_gen completed */
  /* Where the newest record sits in its stream: waits become a
   * dependency on (rec_stream, rec_seq), taken at wait time. */
  fc_stream *rec_stream; /* holds a ref */
  uint64_t rec_seq;
  fc_event *all_next, *all_prev;
};

CUresult fc_event_lookup(CUevent h, fc_event **out);
/* Every event of c dies with it (context destroy, primary reset or last
 * release): a later call on one aborts. */
void fc_events_ctx_gone(fc_ctx *c);
void fc_event_ref(fc_event *e);
void fc_event_unref(fc_event *e);
uint64_t fc_event_arm(fc_event *e); /* new record generation */
void fc_event_set_pos(fc_event *e, uint64_t gen, fc_stream *s, uint64_t seq);
/* Stream (ref'd) and seq of the newest record; 0 if never recorded. */
int fc_event_last_record(fc_event *e, fc_stream **s, uint64_t *seq);
void fc_event_complete(fc_event *e, uint64_t gen);
void fc_events_wake_all(void);
void fc_events_fini(void);

/* ------------------------------------------------------------------ */
/* capture and graphs (fc_graph.c)                                    */

/* Append op to the capture of s (s->mu held).  On failure the caller
 * still owns op and frees it after dropping s->mu. */
CUresult fc_capture_add_locked(fc_stream *s, fc_op *op);
/* The op of an explicit graph memcpy node (fc_copy.c). */
CUresult fc_copy_node_op(const CUDA_MEMCPY3D *p, int device, fc_op **out);
void fc_graph_free(fc_graph *g);
void fc_graph_fini(void);

/* ------------------------------------------------------------------ */
/* modules (fc_module.c)                                              */

void fc_module_fini(void);

/* ------------------------------------------------------------------ */
/* the tracing tool (fc_tool.c; interface in fc_tool.h)               */

/* The attached tool, NULL almost always: every hook tests it first. */
extern _Atomic(const struct fc_tool_ops *) fc_tool;
static inline int fc_tool_on(void) {
  return atomic_load_explicit(&fc_tool, memory_order_relaxed) != NULL;
}
/* Fill in the frame, make it the thread's innermost call and tell the
 * tool; NULL when the tool is not to hear of this call. */
struct fc_tool_call *fc_tool_enter(const struct fc_tool_ops *t, struct fc_tool_call *c,
                                   enum fc_sym_id id, const void *params, const char *symbol);
void fc_tool_leave(struct fc_tool_call *c, CUresult r);
/* The current call waits for the GPU (enum fc_tool_sync): a SYNCHRONIZATION record. */
void fc_tool_sync(int kind, fc_ctx *ctx, fc_stream *s, fc_event *e);
/* op is about to be queued on s (not captured): let the tool reserve its
 * records.  async: queued by an asynchronous entry point. */
void fc_tool_queue(fc_stream *s, fc_op *op, int async);
/* op->trace is set: the op is being freed. */
void fc_tool_release(fc_op *op);
/* Timestamps for op_done, on the tool's clock. */
static inline uint64_t fc_tool_now(const fc_op *op) { return op->trace ? op->tool->now() : 0; }
static inline void fc_tool_done(const fc_op *op, size_t idx, uint64_t start) {
  if (op->trace && !atomic_load(&fc_shutdown))
    op->tool->op_done(op->trace, idx, start, op->tool->now());
}

/* ------------------------------------------------------------------ */
/* error strings (fc_errors.c)                                        */

const char *fc_error_name(CUresult e);   /* NULL if unknown */
const char *fc_error_string(CUresult e); /* NULL if unknown */

#endif /* FC_INTERNAL_H */
