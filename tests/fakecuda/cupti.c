/*
 * cupti.c: a fake libcupti.so.13 (CUPTI activity + callback API) over the
 * fake libcuda.so.1, built from the real CUDA 13 CUPTI headers so the
 * types, ids and record layouts are the real ones.
 *
 * Like CUPTI it initialises lazily, on the first call that needs the
 * driver: it dlopens libcuda.so.1 and attaches to it through the fake
 * driver's tool interface (fc_tool.h).  Over any other libcuda (the real
 * one) every such call fails with CUPTI_ERROR_NOT_INITIALIZED, which is
 * also what CUPTI answers when the driver is older than CUPTI.
 *
 * What it models:
 *  - one subscriber per process (a second cuptiSubscribe:
 *    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, as under nsys);
 *  - CUPTI_CB_DOMAIN_DRIVER_API callbacks for every driver entry point of
 *    the fake, on the calling thread, at entry and exit; every driver call
 *    gets a fresh correlation id, carried by the GPU records it queues; a
 *    driver call made from inside a callback is called back too (nested)
 *    and shares the enclosing call's id, as measured on CUPTI 13;
 *  - activity records in the CUDA 13 layouts: MEMCPY (CUpti_ActivityMemcpy6),
 *    MEMSET (CUpti_ActivityMemset4), CONCURRENT_KERNEL and KERNEL
 *    (CUpti_ActivityKernel10), DRIVER (CUpti_ActivityAPI), SYNCHRONIZATION
 *    (CUpti_ActivitySynchronization2), OVERHEAD (CUpti_ActivityOverhead3,
 *    one per buffer request), EXTERNAL_CORRELATION
 *    (CUpti_ActivityExternalCorrelation);
 *  - buffers, flushing and dropped records (cupti_buffers.c).
 * GPU intervals are the fake stream workers' own: a copy's starts when its
 * copy engine is free, so overlap between streams is real in the records.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti_internal.h"

/* The fake hands the driver's numbering straight through (int casts: the
 * two sides are different enum types). */
#define CPT_SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(CPT_SAME(FC_TM_PAGEABLE, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE) &&
                   CPT_SAME(FC_TM_PINNED, CUPTI_ACTIVITY_MEMORY_KIND_PINNED) &&
                   CPT_SAME(FC_TM_DEVICE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) &&
                   CPT_SAME(FC_TM_MANAGED, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED),
               "memory kinds");
_Static_assert(CPT_SAME(FC_TC_HTOD, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD) &&
                   CPT_SAME(FC_TC_DTOH, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH) &&
                   CPT_SAME(FC_TC_DTOD, CUPTI_ACTIVITY_MEMCPY_KIND_DTOD) &&
                   CPT_SAME(FC_TC_HTOH, CUPTI_ACTIVITY_MEMCPY_KIND_HTOH),
               "copy kinds");
_Static_assert(CPT_SAME(FC_TS_EVENT_SYNCHRONIZE,
                        CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE) &&
                   CPT_SAME(FC_TS_STREAM_WAIT_EVENT,
                            CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT) &&
                   CPT_SAME(FC_TS_STREAM_SYNCHRONIZE,
                            CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE) &&
                   CPT_SAME(FC_TS_CONTEXT_SYNCHRONIZE,
                            CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE),
               "synchronization types");

/* CUPTI of CUDA N.x needs a driver of CUDA N.0 or newer. */
#define CPT_MIN_DRIVER (CUPTI_API_VERSION / 10000 * 1000)

/* ------------------------------------------------------------------ */
/* configuration (FAKECUPTI_*)                                        */

enum {
  CPT_FAIL_SUBSCRIBE = 1, /* cuptiSubscribe: MULTIPLE_SUBSCRIBERS (nsys, ncu, a profiler) */
  CPT_FAIL_VERSION = 2,   /* every initialising call: NOT_INITIALIZED (driver too old) */
  CPT_FAIL_DEVICE = 4,    /* cuptiSubscribe, cuptiActivityEnable: INVALID_DEVICE (GPU too new) */
  CPT_FAIL_ENABLE = 8,    /* cuptiActivityEnable: NOT_INITIALIZED */
  CPT_FAIL_NOBUFFER = 16, /* the next cuptiActivityGetNumDroppedRecords adds 7 */
};
static unsigned cpt_fail;
static atomic_int cpt_nobuffer_pending;
static uint32_t cpt_version = CUPTI_API_VERSION;
size_t cpt_buffer_records;

static void cpt_parse_fail(const char *spec) {
  static const struct {
    const char *name;
    unsigned bit;
  } names[] = {
      {"subscribe", CPT_FAIL_SUBSCRIBE}, {"version", CPT_FAIL_VERSION},
      {"device", CPT_FAIL_DEVICE},       {"enable", CPT_FAIL_ENABLE},
      {"nobuffer", CPT_FAIL_NOBUFFER},
  };
  while (spec && *spec) {
    size_t n = strcspn(spec, ",");
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
      if (strlen(names[i].name) == n && strncmp(spec, names[i].name, n) == 0) break;
    if (i < sizeof names / sizeof names[0])
      cpt_fail |= names[i].bit;
    else if (n)
      fprintf(stderr, "fakecupti: FAKECUPTI_FAIL: ignoring '%.*s'\n", (int)n, spec);
    spec += n + (spec[n] == ',');
  }
}

static unsigned long cpt_env_ulong(const char *name, unsigned long def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return def;
  char *end;
  unsigned long x = strtoul(v, &end, 0);
  if (*end != '\0') {
    fprintf(stderr, "fakecupti: ignoring %s=%s\n", name, v);
    return def;
  }
  return x;
}

/* ------------------------------------------------------------------ */
/* state                                                              */

static pthread_mutex_t cpt_init_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int cpt_attached;
static int cpt_attach_log; /* FAKECUPTI_ATTACH_LOG=1 */
static int (*cpt_attach_fn)(const struct fc_tool_ops *, struct fc_tool_driver_info *);

static _Atomic(CUpti_TimestampCallbackFunc) cpt_ts_fn;
static atomic_uchar cpt_kinds[CUPTI_ACTIVITY_KIND_COUNT];
static atomic_uint cpt_last_corr;
static _Atomic int64_t cpt_last_grid;

/* The one subscriber.  CUpti_SubscriberHandle points at it. */
struct CUpti_Subscriber_st {
  CUpti_CallbackFunc fn;
  void *userdata;
};
static pthread_mutex_t cpt_sub_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUpti_Subscriber_st cpt_sub;
static atomic_int cpt_sub_active;
static atomic_uchar cpt_cb_driver[CUPTI_DRIVER_TRACE_CBID_SIZE];

/* Traced driver calls in progress on this thread (more than one only
 * when a callback calls the driver), the correlation id they share, and
 * the id whose external correlation records are written. */
static __thread unsigned cpt_tls_depth;
/* cuptiFinalize forgets every thread's calls in progress: a thread whose
 * generation is older starts again at depth 0. */
static atomic_uint cpt_gen;
static __thread unsigned cpt_tls_gen;
static __thread uint32_t cpt_tls_corr;
static __thread uint32_t cpt_tls_ext_corr;

/* External correlation ids pushed on this thread, per kind. */
#define CPT_EXT_DEPTH 64
static __thread struct {
  int n;
  uint64_t id[CPT_EXT_DEPTH];
} cpt_tls_ext[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

/* Kernel names: CUPTI's pointers stay valid for the process, so copies are
 * kept (and reachable) until exit. */
struct cpt_name {
  struct cpt_name *next;
  char s[];
};
static pthread_mutex_t cpt_names_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cpt_name *cpt_names;

/* fc_tool_call::tool_flags */
enum {
  CPT_CALL_IGNORED = 1, /* made from inside a buffer callback: not traced */
  CPT_CALL_CB = 2,      /* the entry callback ran: the exit one is due */
  CPT_CALL_TIMED = 4,   /* t_enter is set */
};

uint64_t cpt_now(void) {
  CUpti_TimestampCallbackFunc f = atomic_load_explicit(&cpt_ts_fn, memory_order_acquire);
  if (f) return f();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* CUPTI's default clock on Linux */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cpt_kind_on(CUpti_ActivityKind k) {
  return (unsigned)k < CUPTI_ACTIVITY_KIND_COUNT &&
         atomic_load_explicit(&cpt_kinds[k], memory_order_relaxed);
}

static const char *cpt_intern(const char *s) {
  if (s == NULL) return NULL;
  pthread_mutex_lock(&cpt_names_mu);
  struct cpt_name *n;
  for (n = cpt_names; n; n = n->next)
    if (strcmp(n->s, s) == 0) break;
  if (n == NULL) {
    size_t l = strlen(s) + 1;
    n = malloc(sizeof *n + l);
    if (n != NULL) {
      memcpy(n->s, s, l);
      n->next = cpt_names;
      cpt_names = n;
    }
  }
  pthread_mutex_unlock(&cpt_names_mu);
  return n ? n->s : NULL;
}

/* ------------------------------------------------------------------ */
/* what the driver tells us (fc_tool_ops)                             */

/*
 * The external correlation records of call c: one per kind with an id
 * pushed on this thread, written once per correlation id, before the
 * call's first record.  As CUPTI 13 does, only for calls that get an API
 * record (DRIVER enabled; RUNTIME never applies to driver calls): with
 * MEMCPY alone the GPU records come without them.
 */
static void cpt_ext_records(struct fc_tool_call *c) {
  if (!cpt_kind_on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) ||
      !cpt_kind_on(CUPTI_ACTIVITY_KIND_DRIVER) || cpt_tls_ext_corr == c->corr)
    return;
  cpt_tls_ext_corr = c->corr;
  for (int k = CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE;
       k++) {
    if (cpt_tls_ext[k].n == 0) continue;
    CUpti_ActivityExternalCorrelation e;
    memset(&e, 0, sizeof e);
    e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e.externalKind = (CUpti_ExternalCorrelationKind)k;
    e.externalId = cpt_tls_ext[k].id[cpt_tls_ext[k].n - 1];
    e.correlationId = c->corr;
    cpt_emit(&e, sizeof e, NULL);
  }
}

static void cpt_callback(struct fc_tool_call *c, CUpti_ApiCallbackSite site) {
  CUpti_CallbackData d = {
      .callbackSite = site,
      .functionName = c->name,
      .functionParams = c->params,
      .functionReturnValue = &c->result,
      .symbolName = c->symbol,
      .context = c->ctx,
      .contextUid = c->ctx_id,
      .correlationData = &c->corr_data,
      .correlationId = c->corr,
  };
  pthread_mutex_lock(&cpt_sub_mu);
  CUpti_CallbackFunc fn = atomic_load(&cpt_sub_active) ? cpt_sub.fn : NULL;
  void *ud = cpt_sub.userdata;
  pthread_mutex_unlock(&cpt_sub_mu);
  if (fn == NULL) return;
  fn(ud, CUPTI_CB_DOMAIN_DRIVER_API, c->cbid, &d);
}

static void cpt_api_enter(struct fc_tool_call *c) {
  c->tool_flags = 0;
  c->corr = 0;
  c->corr_data = 0;
  c->t_enter = 0;
  if (cpt_tls_in_buf_cb || !atomic_load(&cpt_attached)) {
    c->tool_flags = CPT_CALL_IGNORED;
    return;
  }
  /* A fresh id per call, uint32 like CUPTI's, never 0 ("none" in
   * records); a call made from inside a callback shares the enclosing
   * call's id (measured: CUPTI 13 calls back nested calls too, with the
   * outer id, and their GPU records carry it). */
  unsigned gen = atomic_load_explicit(&cpt_gen, memory_order_relaxed);
  if (cpt_tls_gen != gen) cpt_tls_gen = gen, cpt_tls_depth = 0;
  if (cpt_tls_depth++ == 0) {
    do cpt_tls_corr = atomic_fetch_add(&cpt_last_corr, 1) + 1;
    while (cpt_tls_corr == 0);
  }
  c->corr = cpt_tls_corr;
  if (atomic_load(&cpt_sub_active) && c->cbid < CUPTI_DRIVER_TRACE_CBID_SIZE &&
      atomic_load_explicit(&cpt_cb_driver[c->cbid], memory_order_relaxed)) {
    cpt_callback(c, CUPTI_API_ENTER);
    c->tool_flags |= CPT_CALL_CB;
  }
  /* After the callback, so the client's own time is not the call's. */
  if (cpt_kind_on(CUPTI_ACTIVITY_KIND_DRIVER) || cpt_kind_on(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) {
    c->t_enter = cpt_now();
    c->tool_flags |= CPT_CALL_TIMED;
  }
}

static void cpt_api_exit(struct fc_tool_call *c) {
  if (c->tool_flags & CPT_CALL_IGNORED) return;
  uint64_t t_exit = (c->tool_flags & CPT_CALL_TIMED) ? cpt_now() : 0;
  /* A call whose callback was turned off while it ran is never seen to
   * end: this thread's later calls count as nested in it and share its
   * id until cuptiFinalize, as CUPTI 13 does (H200, driver 580: callbacks
   * turned off and on by another thread left 400 of 400 records on one id;
   * activity kinds alone, or an unsubscribe with the callbacks on, none;
   * tests/gpu/probe_cupti_duty.cu ids). */
  if ((c->tool_flags & CPT_CALL_CB) && c->cbid < CUPTI_DRIVER_TRACE_CBID_SIZE &&
      !atomic_load_explicit(&cpt_cb_driver[c->cbid], memory_order_relaxed))
    return;
  if (c->tool_flags & CPT_CALL_CB) cpt_callback(c, CUPTI_API_EXIT);
  cpt_tls_depth--;
  if (!(c->tool_flags & CPT_CALL_TIMED)) return;
  /* By default CUPTI keeps synchronization records of successful calls
   * only (cuptiActivityEnableAllSyncRecords changes that). */
  if (c->sync != FC_TS_NONE && c->result == CUDA_SUCCESS &&
      cpt_kind_on(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) {
    cpt_ext_records(c);
    CUpti_ActivitySynchronization2 s;
    memset(&s, 0, sizeof s);
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = (CUpti_ActivitySynchronizationType)c->sync;
    s.start = c->t_enter;
    s.end = t_exit;
    s.correlationId = c->corr;
    s.contextId = c->sync_ctx_id;
    s.streamId = c->sync_stream_id ? c->sync_stream_id : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    s.cudaEventId = c->sync_event_id ? c->sync_event_id : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    s.returnValue = (uint32_t)c->result;
    cpt_emit(&s, sizeof s, NULL);
  }
  if (cpt_kind_on(CUPTI_ACTIVITY_KIND_DRIVER)) {
    cpt_ext_records(c);
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    a.cbid = c->cbid;
    a.start = c->t_enter;
    a.end = t_exit;
    a.processId = (uint32_t)getpid();
    a.threadId = (uint32_t)pthread_self(); /* CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT */
    a.correlationId = c->corr;
    a.returnValue = (uint32_t)c->result;
    cpt_emit(&a, sizeof a, NULL);
  }
}

/* The records of one queued op, waiting for their timestamps. */
struct cpt_op {
  size_t n;
  struct cpt_slot slot[];
};

#define CPT_SLOT(type, completed)                                       \
  (struct cpt_slot) {                                                   \
    .start_off = offsetof(type, start), .end_off = offsetof(type, end), \
    .completed_off = (completed)                                        \
  }

static void *cpt_op_queued(struct fc_tool_call *c, const struct fc_tool_op *op) {
  if (cpt_tls_in_buf_cb || (c && (c->tool_flags & CPT_CALL_IGNORED)) || !atomic_load(&cpt_attached))
    return NULL;
  CUpti_ActivityKind kind;
  switch (op->kind) {
    case FC_TOP_COPY: kind = CUPTI_ACTIVITY_KIND_MEMCPY; break;
    case FC_TOP_MEMSET: kind = CUPTI_ACTIVITY_KIND_MEMSET; break;
    case FC_TOP_KERNEL:
      /* KERNEL is accepted too, but the fake does not serialise kernels
       * under it as CUPTI does: only the record kind differs. */
      kind = cpt_kind_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                 ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                 : CUPTI_ACTIVITY_KIND_KERNEL;
      break;
    default: return NULL;
  }
  if (!cpt_kind_on(kind)) return NULL;
  size_t n = op->kind == FC_TOP_COPY ? op->ncopies : 1;
  struct cpt_op *h = calloc(1, sizeof *h + n * sizeof h->slot[0]);
  if (h == NULL) {
    cpt_add_dropped(n);
    return NULL;
  }
  h->n = n;
  uint32_t corr = c ? c->corr : 0;
  if (c) cpt_ext_records(c);
  if (op->kind == FC_TOP_COPY) {
    for (size_t i = 0; i < n; i++) {
      const struct fc_tool_copy *tc = &op->copies[i];
      CUpti_ActivityMemcpy6 m;
      memset(&m, 0, sizeof m);
      m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      m.copyKind = tc->copy_kind;
      m.srcKind = tc->src_kind;
      m.dstKind = tc->dst_kind;
      m.flags = op->async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
      m.bytes = tc->bytes;
      m.deviceId = tc->device;
      m.contextId = op->ctx_id;
      m.streamId = op->stream_id;
      m.correlationId = corr;
      m.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
      m.copyCount = 1;
      h->slot[i] = CPT_SLOT(CUpti_ActivityMemcpy6, 0);
      cpt_emit(&m, sizeof m, &h->slot[i]);
    }
  } else if (op->kind == FC_TOP_MEMSET) {
    CUpti_ActivityMemset4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.value = op->value;
    m.bytes = op->bytes;
    m.deviceId = op->device;
    m.contextId = op->ctx_id;
    m.streamId = op->stream_id;
    m.correlationId = corr;
    m.flags = op->async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
    m.memoryKind = op->mem_kind;
    m.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
    h->slot[0] = CPT_SLOT(CUpti_ActivityMemset4, 0);
    cpt_emit(&m, sizeof m, &h->slot[0]);
  } else {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.deviceId = op->device;
    k.contextId = op->ctx_id;
    k.streamId = op->stream_id;
    k.gridX = (int32_t)op->grid[0];
    k.gridY = (int32_t)op->grid[1];
    k.gridZ = (int32_t)op->grid[2];
    k.blockX = (int32_t)op->block[0];
    k.blockY = (int32_t)op->block[1];
    k.blockZ = (int32_t)op->block[2];
    k.dynamicSharedMemory = (int32_t)op->shmem;
    k.correlationId = corr;
    k.gridId = atomic_fetch_add(&cpt_last_grid, 1) + 1;
    k.name = cpt_intern(op->kname);
    k.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    k.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
    /* queued/submitted: CUPTI_TIMESTAMP_UNKNOWN unless latency
     * timestamps are enabled, which the fake does not offer */
    h->slot[0] = CPT_SLOT(CUpti_ActivityKernel10, offsetof(CUpti_ActivityKernel10, completed));
    cpt_emit(&k, sizeof k, &h->slot[0]);
  }
  return h;
}

static void cpt_op_done(void *handle, size_t idx, uint64_t start, uint64_t end) {
  struct cpt_op *h = handle;
  if (idx < h->n) cpt_slot_complete(&h->slot[idx], start, end);
}

static void cpt_op_release(void *handle) {
  struct cpt_op *h = handle;
  for (size_t i = 0; i < h->n; i++) cpt_slot_abandon(&h->slot[i]);
  free(h);
}

static const struct fc_tool_ops cpt_ops = {
    .abi = FC_TOOL_ABI,
    .now = cpt_now,
    .api_enter = cpt_api_enter,
    .api_exit = cpt_api_exit,
    .op_queued = cpt_op_queued,
    .op_done = cpt_op_done,
    .op_release = cpt_op_release,
};

/* ------------------------------------------------------------------ */
/* initialisation                                                     */

static CUptiResult cpt_attach(void) {
  /* Kept for the life of the process: the driver holds our ops table. */
  static void *libcuda;
  if (libcuda == NULL) libcuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (libcuda == NULL) return CUPTI_ERROR_NOT_INITIALIZED;
  if (cpt_attach_fn == NULL) {
    *(void **)&cpt_attach_fn = dlsym(libcuda, "fakecuda_tool_attach");
    if (cpt_attach_fn == NULL) {
      fprintf(stderr,
              "fakecupti: libcuda.so.1 is not the fake driver; CUPTI stays uninitialised\n");
      return CUPTI_ERROR_NOT_INITIALIZED;
    }
  }
  struct fc_tool_driver_info info;
  if (cpt_attach_fn(&cpt_ops, &info) != 0) return CUPTI_ERROR_NOT_INITIALIZED;
  if (info.driver_version < CPT_MIN_DRIVER) {
    /* CUPTI newer than the driver: documented NOT_INITIALIZED. */
    cpt_attach_fn(NULL, NULL);
    return CUPTI_ERROR_NOT_INITIALIZED;
  }
  return CUPTI_SUCCESS;
}

/* Every call that needs the driver starts here. */
static CUptiResult cpt_init(void) {
  if (cpt_fail & CPT_FAIL_VERSION) return CUPTI_ERROR_NOT_INITIALIZED;
  if (atomic_load_explicit(&cpt_attached, memory_order_acquire)) return CUPTI_SUCCESS;
  pthread_mutex_lock(&cpt_init_mu);
  CUptiResult r = CUPTI_SUCCESS;
  if (!atomic_load(&cpt_attached)) {
    r = cpt_attach();
    if (r == CUPTI_SUCCESS) {
      cpt_worker_start();
      atomic_store(&cpt_attached, 1);
      /* For tests of a client that detaches: every attach, including one
       * a stray call made lazily, leaves a line. */
      if (cpt_attach_log) fprintf(stderr, "fakecupti: attached\n");
    }
  }
  pthread_mutex_unlock(&cpt_init_mu);
  return r;
}

static void cpt_atfork_child(void) {
  pthread_mutex_init(&cpt_init_mu, NULL);
  pthread_mutex_init(&cpt_sub_mu, NULL);
  pthread_mutex_init(&cpt_names_mu, NULL);
  cpt_buffers_atfork_child();
}

__attribute__((constructor)) static void cpt_load(void) {
  cpt_parse_fail(getenv("FAKECUPTI_FAIL"));
  if (cpt_fail & CPT_FAIL_NOBUFFER) atomic_store(&cpt_nobuffer_pending, 1);
  cpt_buffer_records = (size_t)cpt_env_ulong("FAKECUPTI_BUFFER_RECORDS", 0);
  cpt_version = (uint32_t)cpt_env_ulong("FAKECUPTI_VERSION", CUPTI_API_VERSION);
  cpt_attach_log = cpt_env_ulong("FAKECUPTI_ATTACH_LOG", 0) != 0;
  pthread_atfork(NULL, NULL, cpt_atfork_child);
}

/*
 * Only the worker thread goes.  Everything else stays usable: the
 * driver's exit-time teardown still releases ops (their records), and an
 * atexit handler may still flush.
 */
__attribute__((destructor)) static void cpt_unload(void) { cpt_worker_stop(); }

/* ------------------------------------------------------------------ */
/* version, results, time                                             */

CPT_API CUptiResult cuptiGetVersion(uint32_t *version) {
  if (version == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = cpt_version;
  return CUPTI_SUCCESS;
}

CPT_API CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
#define R(x) [x] = #x
  static const char *const names[] = {
      R(CUPTI_SUCCESS),
      R(CUPTI_ERROR_INVALID_PARAMETER),
      R(CUPTI_ERROR_INVALID_DEVICE),
      R(CUPTI_ERROR_INVALID_CONTEXT),
      R(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID),
      R(CUPTI_ERROR_INVALID_EVENT_ID),
      R(CUPTI_ERROR_INVALID_EVENT_NAME),
      R(CUPTI_ERROR_INVALID_OPERATION),
      R(CUPTI_ERROR_OUT_OF_MEMORY),
      R(CUPTI_ERROR_HARDWARE),
      R(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT),
      R(CUPTI_ERROR_API_NOT_IMPLEMENTED),
      R(CUPTI_ERROR_MAX_LIMIT_REACHED),
      R(CUPTI_ERROR_NOT_READY),
      R(CUPTI_ERROR_NOT_COMPATIBLE),
      R(CUPTI_ERROR_NOT_INITIALIZED),
      R(CUPTI_ERROR_INVALID_METRIC_ID),
      R(CUPTI_ERROR_INVALID_METRIC_NAME),
      R(CUPTI_ERROR_QUEUE_EMPTY),
      R(CUPTI_ERROR_INVALID_HANDLE),
      R(CUPTI_ERROR_INVALID_STREAM),
      R(CUPTI_ERROR_INVALID_KIND),
      R(CUPTI_ERROR_INVALID_EVENT_VALUE),
      R(CUPTI_ERROR_DISABLED),
      R(CUPTI_ERROR_INVALID_MODULE),
      R(CUPTI_ERROR_INVALID_METRIC_VALUE),
      R(CUPTI_ERROR_HARDWARE_BUSY),
      R(CUPTI_ERROR_NOT_SUPPORTED),
      R(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED),
      R(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE),
      R(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES),
      R(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS),
      R(CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED),
      R(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED),
      R(CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE),
      R(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES),
      /* 36 and 37 (old profiler, OpenACC) have no string in CUPTI 13.0 */
      R(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED),
      R(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED),
      R(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES),
      R(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED),
      R(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED),
      R(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED),
      R(CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED),
      R(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED),
      R(CUPTI_ERROR_INVALID_CHIP_NAME),
  };
#undef R
  if (str == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  const char *s = NULL;
  if ((unsigned)result < sizeof names / sizeof names[0])
    s = names[result];
  else if (result == CUPTI_ERROR_UNKNOWN)
    s = "CUPTI_ERROR_UNKNOWN";
  /* The real library answers "<unknown>" along with the error. */
  *str = s ? s : "<unknown>";
  return s ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CPT_API CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
  if (timestamp == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = cpt_now();
  return CUPTI_SUCCESS;
}

CPT_API CUptiResult
cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp) {
  if (funcTimestamp == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  atomic_store_explicit(&cpt_ts_fn, funcTimestamp, memory_order_release);
  return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* callback API                                                       */

CPT_API CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                   void *userdata) {
  if (subscriber == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  if (cpt_fail & CPT_FAIL_SUBSCRIBE) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  if (cpt_fail & CPT_FAIL_DEVICE) return CUPTI_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&cpt_sub_mu);
  if (atomic_load(&cpt_sub_active)) {
    pthread_mutex_unlock(&cpt_sub_mu);
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  for (size_t i = 0; i < CUPTI_DRIVER_TRACE_CBID_SIZE; i++)
    atomic_store_explicit(&cpt_cb_driver[i], 0, memory_order_relaxed);
  cpt_sub.fn = callback;
  cpt_sub.userdata = userdata;
  atomic_store(&cpt_sub_active, 1);
  pthread_mutex_unlock(&cpt_sub_mu);
  *subscriber = &cpt_sub;
  return CUPTI_SUCCESS;
}

static int cpt_sub_valid(CUpti_SubscriberHandle s) {
  return s == &cpt_sub && atomic_load(&cpt_sub_active);
}

CPT_API CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  pthread_mutex_lock(&cpt_sub_mu);
  if (!cpt_sub_valid(subscriber)) {
    pthread_mutex_unlock(&cpt_sub_mu);
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  atomic_store(&cpt_sub_active, 0);
  cpt_sub.fn = NULL;
  cpt_sub.userdata = NULL;
  pthread_mutex_unlock(&cpt_sub_mu);
  return CUPTI_SUCCESS;
}

/* Number of callback ids of a domain; 0 for an invalid domain. */
static uint32_t cpt_domain_size(CUpti_CallbackDomain d) {
  switch (d) {
    case CUPTI_CB_DOMAIN_DRIVER_API: return CUPTI_DRIVER_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RUNTIME_API: return CUPTI_RUNTIME_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RESOURCE: return CUPTI_CBID_RESOURCE_SIZE;
    case CUPTI_CB_DOMAIN_SYNCHRONIZE: return CUPTI_CBID_SYNCHRONIZE_SIZE;
    case CUPTI_CB_DOMAIN_NVTX: return CUPTI_CBID_NVTX_SIZE;
    case CUPTI_CB_DOMAIN_STATE: return CUPTI_CBID_STATE_SIZE;
    default: return 0;
  }
}

/*
 * Every domain can be enabled, but only the driver API domain ever calls
 * back: the fake runtime does not report to CUPTI, and resource,
 * synchronize, NVTX and state callbacks are not modelled.
 */
CPT_API CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                        CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  uint32_t n = cpt_domain_size(domain);
  if (!cpt_sub_valid(subscriber) || n == 0 || cbid == 0 || cbid >= n)
    return CUPTI_ERROR_INVALID_PARAMETER;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) atomic_store(&cpt_cb_driver[cbid], enable != 0);
  return CUPTI_SUCCESS;
}

CPT_API CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                      CUpti_CallbackDomain domain) {
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  if (!cpt_sub_valid(subscriber) || cpt_domain_size(domain) == 0)
    return CUPTI_ERROR_INVALID_PARAMETER;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    for (uint32_t i = 1; i < CUPTI_DRIVER_TRACE_CBID_SIZE; i++)
      atomic_store(&cpt_cb_driver[i], enable != 0);
  return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* activity API                                                       */

/* Kinds CUDA 13 removed with the legacy profiler (cupti_activity.h). */
static int cpt_kind_legacy(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_EVENT:
    case CUPTI_ACTIVITY_KIND_METRIC:
    case CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR:
    case CUPTI_ACTIVITY_KIND_GLOBAL_ACCESS:
    case CUPTI_ACTIVITY_KIND_BRANCH:
    case CUPTI_ACTIVITY_KIND_EVENT_INSTANCE:
    case CUPTI_ACTIVITY_KIND_METRIC_INSTANCE:
    case CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION:
    case CUPTI_ACTIVITY_KIND_SHARED_ACCESS:
    case CUPTI_ACTIVITY_KIND_PC_SAMPLING:
    case CUPTI_ACTIVITY_KIND_PC_SAMPLING_RECORD_INFO:
    case CUPTI_ACTIVITY_KIND_INSTRUCTION_CORRELATION:
    case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT:
    case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT_INSTANCE:
    case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC:
    case CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC_INSTANCE: return 1;
    default: return 0;
  }
}

/*
 * Records are produced for MEMCPY, MEMSET, CONCURRENT_KERNEL, KERNEL,
 * DRIVER, SYNCHRONIZATION, OVERHEAD and EXTERNAL_CORRELATION.  Every other
 * current kind is accepted, as CUPTI would, and never produces a record
 * (MEMCPY2: the fake has no peer copies; RUNTIME: the fake runtime does not
 * report to CUPTI; DEVICE, CONTEXT, ...: not modelled).
 */
CPT_API CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  if (cpt_fail & CPT_FAIL_DEVICE) return CUPTI_ERROR_INVALID_DEVICE;
  if (cpt_fail & CPT_FAIL_ENABLE) return CUPTI_ERROR_NOT_INITIALIZED;
  /* Measured: CUPTI 13 answers NOT_COMPATIBLE for a kind it does not know. */
  if ((int)kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT)
    return CUPTI_ERROR_NOT_COMPATIBLE;
  if (cpt_kind_legacy(kind)) return CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED;
  atomic_store(&cpt_kinds[kind], 1);
  return CUPTI_SUCCESS;
}

CPT_API CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  if ((int)kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT)
    return CUPTI_ERROR_NOT_COMPATIBLE;
  atomic_store(&cpt_kinds[kind], 0);
  return CUPTI_SUCCESS;
}

/* Works before initialisation, as the real library's does. */
CPT_API CUptiResult
cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                               CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  if (funcBufferRequested == NULL || funcBufferCompleted == NULL)
    return CUPTI_ERROR_INVALID_PARAMETER;
  cpt_set_buffer_callbacks(funcBufferRequested, funcBufferCompleted);
  return CUPTI_SUCCESS;
}

CPT_API CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  CUptiResult r = cpt_init();
  return r != CUPTI_SUCCESS ? r : cpt_flush_all(flag);
}

CPT_API CUptiResult cuptiActivityFlushPeriod(uint32_t time) {
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  cpt_set_flush_period(time);
  return CUPTI_SUCCESS;
}

/* Global count: since CUDA 6 every buffer is global, whatever the context
 * and stream arguments say.  Works before initialisation, as the real
 * library's does. */
CPT_API CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                      size_t *dropped) {
  (void)context;
  (void)streamId;
  if (dropped == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t n = cpt_take_dropped();
  if (atomic_exchange(&cpt_nobuffer_pending, 0)) n += 7;
  *dropped = n;
  return CUPTI_SUCCESS;
}

static int cpt_ext_kind_ok(CUpti_ExternalCorrelationKind k) {
  return (int)k > CUPTI_EXTERNAL_CORRELATION_KIND_INVALID &&
         k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE;
}

CPT_API CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                           uint64_t id) {
  if (!cpt_ext_kind_ok(kind)) return CUPTI_ERROR_INVALID_PARAMETER;
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  if (cpt_tls_ext[kind].n == CPT_EXT_DEPTH)
    return CUPTI_ERROR_OUT_OF_MEMORY; /* the fake's limit; CUPTI's is memory */
  cpt_tls_ext[kind].id[cpt_tls_ext[kind].n++] = id;
  return CUPTI_SUCCESS;
}

CPT_API CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                          uint64_t *lastId) {
  if (!cpt_ext_kind_ok(kind)) return CUPTI_ERROR_INVALID_PARAMETER;
  CUptiResult r = cpt_init();
  if (r != CUPTI_SUCCESS) return r;
  if (cpt_tls_ext[kind].n == 0) return CUPTI_ERROR_QUEUE_EMPTY;
  uint64_t id = cpt_tls_ext[kind].id[--cpt_tls_ext[kind].n];
  if (lastId) *lastId = id;
  return CUPTI_SUCCESS;
}

/*
 * Detach: every buffer goes back to the client first (a forced flush, so
 * it gets its memory back), then the subscriber, the enabled kinds, the
 * callbacks and the worker go, and the driver forgets the tool.  The next
 * initialising call attaches afresh, correlation ids from 1.
 */
CPT_API CUptiResult cuptiFinalize(void) {
  pthread_mutex_lock(&cpt_init_mu);
  if (!atomic_load(&cpt_attached)) {
    pthread_mutex_unlock(&cpt_init_mu);
    return CUPTI_SUCCESS;
  }
  if (cpt_have_buffer_callbacks()) cpt_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  /* While still attached: a bufferCompleted in progress on the worker
   * may call back into CUPTI, whose calls must not wait for this lock. */
  cpt_worker_stop();
  cpt_attach_fn(NULL, NULL);
  atomic_store(&cpt_attached, 0);
  pthread_mutex_lock(&cpt_sub_mu);
  atomic_store(&cpt_sub_active, 0);
  cpt_sub.fn = NULL;
  cpt_sub.userdata = NULL;
  pthread_mutex_unlock(&cpt_sub_mu);
  for (size_t k = 0; k < CUPTI_ACTIVITY_KIND_COUNT; k++) atomic_store(&cpt_kinds[k], 0);
  /* Attached again, CUPTI numbers calls from 1 again (measured on the
   * H200, driver 580). */
  atomic_store(&cpt_last_corr, 0);
  atomic_fetch_add(&cpt_gen, 1);
  atomic_store(&cpt_ts_fn, NULL);
  cpt_set_buffer_callbacks(NULL, NULL);
  cpt_set_flush_period(0);
  pthread_mutex_unlock(&cpt_init_mu);
  return CUPTI_SUCCESS;
}
