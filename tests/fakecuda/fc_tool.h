/*
 * fc_tool.h: how the fake libcuda.so.1 reports to a tracing tool, i.e. how
 * the fake libcupti.so.13 sees driver API calls and GPU work.
 *
 * The real CUPTI is wired into the real driver by private interfaces; this
 * is the fake's equivalent, shared by both fakes and by nothing else.  The
 * tool finds the driver with dlopen("libcuda.so.1") and calls
 * fakecuda_tool_attach() (exported by the fake driver only, so the fake
 * libcupti refuses to start over a real driver).  While no tool is attached
 * the driver pays one relaxed atomic load per API call and per queued op,
 * and behaves exactly as before.
 *
 * What the driver reports:
 *  - every exported entry point, at entry and at exit (api_enter/api_exit),
 *    with a call frame that lives on the calling thread's stack for the
 *    duration of the call;
 *  - every copy, memset and kernel when it is queued on a stream (not when
 *    it is captured into a graph: a graph launch queues it), on the thread
 *    and inside the API call that queues it (op_queued), then when the
 *    stream worker has run it, with the interval the worker really spent on
 *    it (op_done, timestamps from the tool's own clock), and once when the
 *    driver frees it, run or not (op_release).
 */
#ifndef FC_TOOL_H
#define FC_TOOL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* Bumped on any incompatible change of the structures below. */
#define FC_TOOL_ABI 1

/* The numbering is CUPTI's (CUpti_ActivityMemoryKind,
 * CUpti_ActivityMemcpyKind, CUpti_ActivitySynchronizationType), so the tool
 * copies values through; the fake libcupti checks that at compile time. */
enum fc_tool_mem {
  FC_TM_UNKNOWN = 0,
  FC_TM_PAGEABLE = 1,
  FC_TM_PINNED = 2,
  FC_TM_DEVICE = 3,
  FC_TM_MANAGED = 5,
};
enum fc_tool_copy_kind {
  FC_TC_HTOD = 1,
  FC_TC_DTOH = 2,
  FC_TC_DTOD = 8,
  FC_TC_HTOH = 9,
};
enum fc_tool_sync {
  FC_TS_NONE = 0,
  FC_TS_EVENT_SYNCHRONIZE = 1,
  FC_TS_STREAM_WAIT_EVENT = 2,
  FC_TS_STREAM_SYNCHRONIZE = 3,
  FC_TS_CONTEXT_SYNCHRONIZE = 4,
};

/* One driver API call.  Lives on the calling thread's stack from api_enter
 * to api_exit; nested calls (made from inside a tool callback) get frames
 * of their own. */
struct fc_tool_call {
  /* --- the driver's, set before api_enter --- */
  uint32_t cbid;      /* CUPTI_DRIVER_TRACE_CBID_<exact exported name> */
  const char *name;   /* exact exported name; static storage */
  const void *params; /* <name>_params of generated_cuda_meta.h, or NULL */
  const char *symbol; /* kernel name for launches, else NULL */
  CUcontext ctx;      /* current on the calling thread at entry, or NULL */
  uint32_t ctx_id;    /* its process-unique id (1, 2, ...), 0 if none */
  /* --- the driver's, set during the call, read by api_exit --- */
  CUresult result;
  int sync; /* enum fc_tool_sync: the call waited for the GPU */
  uint32_t sync_ctx_id, sync_stream_id, sync_event_id;
  /* --- the tool's: the driver never reads or writes these --- */
  uint32_t corr; /* correlation id */
  uint32_t tool_flags;
  uint64_t t_enter;
  uint64_t corr_data; /* CUpti_CallbackData::correlationData */
  /* --- the driver's private link to the enclosing call --- */
  const struct fc_tool_ops *ops;
  struct fc_tool_call *prev;
};

/* One host<->device (or D2D, H2H) transfer of a queued copy op. */
struct fc_tool_copy {
  uint64_t bytes;
  uint32_t device;            /* the device whose copy engine moves it */
  uint8_t copy_kind;          /* enum fc_tool_copy_kind */
  uint8_t src_kind, dst_kind; /* enum fc_tool_mem */
};

enum fc_tool_op_kind { FC_TOP_COPY = 1, FC_TOP_MEMSET, FC_TOP_KERNEL };

/* A GPU op at the moment it is queued. */
struct fc_tool_op {
  int kind;  /* enum fc_tool_op_kind */
  int async; /* queued by an asynchronous entry point */
  uint32_t device, ctx_id, stream_id;
  /* FC_TOP_COPY: one element per transfer; op_done's idx indexes it */
  const struct fc_tool_copy *copies;
  size_t ncopies;
  /* FC_TOP_MEMSET */
  uint64_t bytes;
  uint32_t value;
  uint8_t mem_kind; /* enum fc_tool_mem */
  /* FC_TOP_KERNEL */
  const char *kname; /* valid only during op_queued: copy it */
  uint32_t grid[3], block[3];
  uint32_t shmem;
};

struct fc_tool_ops {
  uint32_t abi; /* FC_TOOL_ABI */
  /* The tool's clock (ns); stream workers call it for op_done. */
  uint64_t (*now)(void);
  void (*api_enter)(struct fc_tool_call *c);
  void (*api_exit)(struct fc_tool_call *c);
  /* c: the innermost call of this thread, NULL when it began before the
   * tool attached.  Returns a handle for op_done/op_release, or NULL.
   * Called with driver locks held (the context's ordering lock): it must
   * not call back into the driver. */
  void *(*op_queued)(struct fc_tool_call *c, const struct fc_tool_op *op);
  /* Transfer idx (0 for memsets and kernels) ran from start to end. */
  void (*op_done)(void *handle, size_t idx, uint64_t start, uint64_t end);
  /* Exactly once per handle, when the driver frees the op. */
  void (*op_release)(void *handle);
};

struct fc_tool_driver_info {
  int driver_version; /* what cuDriverGetVersion reports */
  int ndevices;
};

/*
 * Exported by the fake libcuda.so.1 (and looked up with dlsym: it is not
 * part of fakecuda.h's test-control interface).  ops == NULL detaches.
 * Returns 0; -1 if ops->abi is not FC_TOOL_ABI.  The ops table must stay
 * valid for the life of the process: ops queued while it was attached keep
 * using it.
 */
int fakecuda_tool_attach(const struct fc_tool_ops *ops, struct fc_tool_driver_info *info);

#endif /* FC_TOOL_H */
