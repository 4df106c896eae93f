/* cupti.c - GPU timestamps from CUPTI: what the GPU itself saw of every copy
 * and kernel, so the report can say whether copies overlapped compute.
 *
 * CUPTI is loaded with dlopen when the program initialises CUDA (never into
 * a program that does not), started once whichever way we get there first:
 * our cuInit wrapper (plain LD_PRELOAD) or the driver's own tool hook,
 * InitializeInjection (CUDA_INJECTION64_PATH, which `pagelock run` sets).
 * Both end in one pthread_once, before the real cuInit creates a context.
 *
 * Joining a GPU op to the host call that queued it: a CUPTI callback on the
 * copy entry points hands us the call's correlationId on the calling thread
 * (pl_cupti_corr_begin/end around the app's call); the staging engine's own
 * chunks are tied back to the app's call by LINK records (and an external
 * correlation id pushed around the staged call).
 *
 * Records are compacted from CUPTI's buffers on CUPTI's thread into the
 * trace; the app thread never waits for that beyond the trace lock.  Every
 * failure leaves interception working and says in the trace why GPU timing
 * is missing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

/* pl_internal.h first: it includes cuda.h without the _v2 renames, which
 * cupti.h would otherwise apply. */
#include "pl_internal.h"
#include "pl_cupti.h"
#include "trace.h"

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti_version.h>

/* Buffers handed to CUPTI: a few, allocated on demand and reused, so a
 * stalled writer costs dropped records (counted), never unbounded memory. */
#define PL_CUPTI_NBUF 8
#define PL_CUPTI_BUFSZ (2u << 20)
#define PL_CUPTI_MAX_NAMES 4096

typedef struct pl_cupti_api {
  CUptiResult (*GetVersion)(uint32_t *);
  CUptiResult (*GetResultString)(CUptiResult, const char **);
  CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
  CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                CUpti_CallbackId);
  CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                           CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
  CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
  CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
  CUptiResult (*ActivityFlushAll)(uint32_t);
  CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
  CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
  CUptiResult (*ActivityPushExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t);
  CUptiResult (*ActivityPopExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t *);
  CUptiResult (*GetTimestamp)(uint64_t *);
  CUptiResult (*Finalize)(void);
} pl_cupti_api;

static pl_cupti_api pl_cu;
static CUpti_SubscriberHandle pl_sub;
/* Never CUPTI_ACTIVITY_KIND_KERNEL: it serialises kernels.  The first four
 * are the point; the rest is a bonus.  Nor SYNCHRONIZATION: it made every
 * stream or event synchronize of the program slower, and a loop of small
 * copies and syncs ran 1.3-1.9x its time without pagelock under observe;
 * without that kind, 0.96x (H100, docs/bench/2026-11-25-real-patterns.md, run G).  The report
 * never needed it: only JSON's gpu.syncs counted its records. */
static const CUpti_ActivityKind pl_kinds[] = {
    CUPTI_ACTIVITY_KIND_MEMCPY,   CUPTI_ACTIVITY_KIND_MEMCPY2,
    CUPTI_ACTIVITY_KIND_MEMSET,   CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
static pthread_once_t pl_cupti_once = PTHREAD_ONCE_INIT;
static pthread_once_t pl_devices_once = PTHREAD_ONCE_INIT;
static atomic_bool pl_cupti_on;    /* CUPTI is ours and set up */
static atomic_bool pl_tracing;     /* ... and its kinds and callbacks are on
                                      (off while the sampler pauses them) */
static atomic_bool pl_cupti_child; /* a forked child: CUDA is unusable */
/* CUPTI is attached (ours, subscribed): false while the sampler has
 * detached it (pl_sample_detach).  Then no CUPTI call may be made at all:
 * any call attaches CUPTI again, lazily, behind our back. */
static atomic_bool pl_attached;
/* Added to every correlation id CUPTI gives, callbacks' and records':
 * CUPTI numbers them again from 1 after it is attached again (H200,
 * driver 580, tests/gpu/probe_cupti_duty.cu abphase), so each attach
 * starts above the highest id written before (pl_corr_top). */
static atomic_uint pl_corr_base, pl_corr_top;
/* Link scopes that pushed an external correlation id and have not popped
 * it: a detach waits for none, as a pop after it would attach CUPTI. */
static atomic_uint pl_links_open;
/* The program is a CUPTI client of its own (pl_cupti_program_subscribes):
 * one that began before CUDA did keeps CUPTI, ours never starts (it would
 * take the program's buffer callbacks). */
static atomic_bool pl_program_client;
static uint32_t pl_cupti_status = PAGELOCK_GPU_TIMING_NO_CUDA;
static uint32_t pl_cupti_version;
static char pl_cupti_reason[200];
static atomic_uint_fast64_t pl_n_records, pl_n_dropped, pl_n_buffers;

/* The correlationId of the last enabled driver call this thread entered. */
static PL_TLS uint32_t pl_tls_corr;
/* Non-zero while the staging engine works for the app call with this seq
 * (an external correlation id is pushed). */
static PL_TLS uint64_t pl_tls_link_seq;
/* Set while this thread runs the start routine: CUPTI may come back into
 * cuInit or InitializeInjection, which must not re-enter the once. */
static PL_TLS int pl_tls_starting;

static void *pl_bufs[PL_CUPTI_NBUF];
static atomic_uint pl_buf_busy; /* bit i: pl_bufs[i] is with CUPTI */
static pthread_mutex_t pl_compact_lock = PTHREAD_MUTEX_INITIALIZER;

/* Kernel names by CUPTI's pointer (stable for the process), in an
 * open-addressed table twice the size of the most names we keep: a
 * PyTorch run has hundreds of kernels and millions of kernel records. */
#define PL_NAME_SLOTS (2 * PL_CUPTI_MAX_NAMES)
static struct {
  const char *ptr;
  uint32_t id;
} pl_names[PL_NAME_SLOTS];
static uint32_t pl_nnames;

/* ---- the copy path's side ---------------------------------------------- */

void pl_cupti_corr_begin(void) { pl_tls_corr = 0; }

uint32_t pl_cupti_corr_end(void) {
  uint32_t c = pl_tls_corr;
  pl_tls_corr = 0;
  return c;
}

/* The external correlation id (CUSTOM0 = the app call's seq) marks the
 * engine's calls for any CUPTI consumer that records DRIVER activity; our
 * own join goes through LINK records written by the callback. */
/* Scopes nest (a registered upload stages its tail, autopin.c): only the
 * outermost pushes and pops, so CUPTI's per-thread stack is left as it
 * was found, whatever the depth, and the program's own later calls never
 * carry one of our ids. */
static PL_TLS unsigned pl_tls_link_depth;

void pl_cupti_link_begin(uint64_t seq) {
  if (!atomic_load_explicit(&pl_tracing, memory_order_relaxed)) return;
  if (pl_tls_link_depth++ > 0) return;
  /* Counted before tracing is read again, as the sampler turns tracing off
   * before it counts the scopes open: one of the two sees the other. */
  atomic_fetch_add(&pl_links_open, 1);
  if (!atomic_load(&pl_tracing)) {
    atomic_fetch_sub(&pl_links_open, 1);
    return;
  }
  pl_tls_link_seq = seq;
  if (pl_cu.ActivityPushExternalCorrelationId)
    pl_cu.ActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, seq);
}

void pl_cupti_link_end(void) {
  if (pl_tls_link_depth == 0 || --pl_tls_link_depth > 0) return;
  if (pl_tls_link_seq == 0) return;
  if (pl_cu.ActivityPopExternalCorrelationId) {
    uint64_t id;
    pl_cu.ActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
  }
  pl_tls_link_seq = 0;
  atomic_fetch_sub(&pl_links_open, 1);
}

static void pl_write_link(uint32_t corr, uint64_t seq) {
  pagelock_rec_link l;
  memset(&l, 0, sizeof l);
  l.h.type = PAGELOCK_REC_LINK;
  l.h.size = sizeof l;
  l.correlation = corr;
  l.copy_seq = seq;
  pl_trace_write(&l, sizeof l);
}

/* Runs inside the driver call, on the calling thread, for the copy entry
 * points only: remember the call's id for the COPY record, or, when the
 * staging engine is the caller on behalf of an app call, link the id to
 * that call.  (CUPTI emits EXTERNAL_CORRELATION records only with DRIVER
 * activity records on, one per driver call of the program: too dear, so
 * the link is ours.)  The driver may call back again for calls it makes
 * inside this one, with the same id: one LINK is enough. */
/* The program's copy calls seen while tracing: the sampler's fast measure
 * of how many GPU operations a second the program issues. */
static atomic_uint_fast64_t pl_n_calls;

/* pl_corr_top is at least id. */
static void pl_corr_seen(uint32_t id) {
  uint32_t t = atomic_load_explicit(&pl_corr_top, memory_order_relaxed);
  while (id > t && !atomic_compare_exchange_weak_explicit(
                       &pl_corr_top, &t, id, memory_order_relaxed, memory_order_relaxed)) {}
}

static void CUPTIAPI pl_cupti_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                       const void *data) {
  static PL_TLS uint32_t last_linked;
  (void)ud;
  (void)cbid;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || data == NULL) return;
  const CUpti_CallbackData *d = data;
  if (d->callbackSite != CUPTI_API_ENTER) return;
  /* Paused: the callbacks stay on (pl_trace_switch), the calls carry no
   * correlation. */
  if (!atomic_load_explicit(&pl_tracing, memory_order_relaxed)) return;
  uint32_t id = d->correlationId + atomic_load_explicit(&pl_corr_base, memory_order_relaxed);
  pl_corr_seen(id);
  if (pl_tls_link_seq == 0) {
    pl_tls_corr = id;
    atomic_fetch_add_explicit(&pl_n_calls, 1, memory_order_relaxed);
  } else if (id != last_linked) {
    last_linked = id;
    pl_shim_enter();
    pl_write_link(id, pl_tls_link_seq);
    pl_shim_leave();
  }
}

/* ---- status ------------------------------------------------------------ */

static void pl_write_status(void) {
  pagelock_rec_gpu_status s;
  memset(&s, 0, sizeof s);
  s.status = pl_cupti_status;
  s.cupti_version = pl_cupti_version;
  s.records = atomic_load(&pl_n_records);
  s.dropped = atomic_load(&pl_n_dropped);
  s.buffers = atomic_load(&pl_n_buffers);
  pl_trace_write_str(&s, sizeof s, PAGELOCK_REC_GPU_STATUS, pl_cupti_reason);
}

/* GPU timing is unavailable: say why, once, in the log and the trace. */
static void pl_cupti_fail(uint32_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void pl_cupti_fail(uint32_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pl_cupti_reason, sizeof pl_cupti_reason, fmt, ap);
  va_end(ap);
  pl_cupti_status = status;
  atomic_store(&pl_cupti_on, false);
  atomic_store(&pl_tracing, false);
  int level = status == PAGELOCK_GPU_TIMING_DISABLED ? PL_LOG_INFO : PL_LOG_WARN;
  pl_log(level, PL_LK_CUPTI, "no GPU timing: %s", pl_cupti_reason);
  pl_write_status();
}

static const char *pl_cupti_err(CUptiResult r) {
  const char *s = NULL;
  if (pl_cu.GetResultString == NULL || pl_cu.GetResultString(r, &s) != CUPTI_SUCCESS || s == NULL)
    return "unknown CUPTI error";
  return s;
}

/* ---- finding libcupti -------------------------------------------------- */

static void *pl_try_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }

/* A loaded libcudart's directory: PyTorch and CuPy wheels keep libcupti in
 * a sibling package of their cudart. */
static int pl_cudart_dir_cb(struct dl_phdr_info *info, size_t sz, void *arg) {
  (void)sz;
  const char *n = info->dlpi_name;
  const char *slash = n ? strrchr(n, '/') : NULL;
  if (slash == NULL || strncmp(slash + 1, "libcudart.so", 12) != 0) return 0;
  size_t l = (size_t)(slash - n);
  if (l >= PATH_MAX) return 0;
  memcpy(arg, n, l);
  ((char *)arg)[l] = 0;
  return 1;
}

/* dlopen libcupti: PAGELOCK_CUPTI_LIB, then the loader's search path, then
 * where the CUDA toolkit and Python wheels put it.  Returns NULL and fills
 * `tried` with the last dlerror. */
static void *pl_cupti_open(char *err, size_t errsz) {
  const char *lib = pl_opt_str(PL_OPT_CUPTI_LIB);
  if (lib) {
    void *h = pl_try_open(lib);
    if (h == NULL)
      snprintf(err, errsz, "PAGELOCK_CUPTI_LIB='%s' cannot be loaded: %s", lib, dlerror());
    return h;
  }
  static const char *const names[] = {"libcupti.so.13", "libcupti.so", NULL};
  for (int i = 0; names[i]; i++) {
    void *h = pl_try_open(names[i]);
    if (h) return h;
  }
  char dirs[6][PATH_MAX];
  int nd = 0;
  const char *home = getenv("CUDA_HOME");
  if (home == NULL) home = getenv("CUDA_PATH");
  if (home) {
    snprintf(dirs[nd++], PATH_MAX, "%.4000s/extras/CUPTI/lib64", home);
    snprintf(dirs[nd++], PATH_MAX, "%.4000s/lib64", home);
  }
  snprintf(dirs[nd++], PATH_MAX, "/usr/local/cuda/extras/CUPTI/lib64");
  snprintf(dirs[nd++], PATH_MAX, "/usr/local/cuda/lib64");
  char cudart[PATH_MAX] = "";
  if (dl_iterate_phdr(pl_cudart_dir_cb, cudart) && cudart[0]) {
    snprintf(dirs[nd++], PATH_MAX, "%.4000s", cudart);
    snprintf(dirs[nd++], PATH_MAX, "%.4000s/../../cuda_cupti/lib", cudart);
  }
  for (int i = 0; i < nd; i++) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%.4000s/libcupti.so.13", dirs[i]);
    void *h = pl_try_open(p);
    if (h) return h;
  }
  snprintf(err, errsz, "libcupti.so.13 not found (set PAGELOCK_CUPTI_LIB to its path)");
  return NULL;
}

/* ---- buffers ----------------------------------------------------------- */

static void CUPTIAPI pl_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = NULL;
  *size = 0;
  *max_records = 0;
  for (int i = 0; i < PL_CUPTI_NBUF; i++) {
    unsigned bit = 1u << i;
    unsigned old = atomic_fetch_or(&pl_buf_busy, bit);
    if (old & bit) continue;
    if (pl_bufs[i] == NULL) {
      /* A system call, not malloc or mmap: the buffer is the shim's, and
       * must never reach the allocation hooks as the program's memory
       * (CUPTI wants 8-byte alignment; pages have it). */
      void *p = (void *)syscall(SYS_mmap, NULL, PL_CUPTI_BUFSZ, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        atomic_fetch_and(&pl_buf_busy, ~bit);
        return;
      }
      pl_bufs[i] = p;
    }
    *buffer = pl_bufs[i];
    *size = PL_CUPTI_BUFSZ;
    return;
  }
  /* All buffers are with CUPTI or being compacted: CUPTI drops records and
   * counts them; we report the count. */
}

static void pl_buffer_release(uint8_t *buffer) {
  for (int i = 0; i < PL_CUPTI_NBUF; i++)
    if (pl_bufs[i] == buffer) atomic_fetch_and(&pl_buf_busy, ~(1u << i));
}

/* Compaction: a batch of our records, written to the trace in one go. */
typedef struct pl_batch {
  char buf[64 << 10];
  size_t len;
} pl_batch;

static void pl_batch_flush(pl_batch *b) {
  if (b->len) pl_trace_write_many(b->buf, b->len);
  b->len = 0;
}

static void pl_batch_put(pl_batch *b, const void *rec, size_t n) {
  if (b->len + n > sizeof b->buf) pl_batch_flush(b);
  memcpy(b->buf + b->len, rec, n);
  b->len += n;
}

/* The NAME id of a kernel name pointer, writing its record first.  Lock:
 * pl_compact_lock. */
static uint32_t pl_name_id(pl_batch *b, const char *name) {
  if (name == NULL) return 0;
  size_t h = ((uintptr_t)name >> 3) * 0x9E3779B97F4A7C15ull >> 51; /* 13 bits */
  for (size_t i = h % PL_NAME_SLOTS;; i = (i + 1) % PL_NAME_SLOTS) {
    if (pl_names[i].ptr == name) return pl_names[i].id;
    if (pl_names[i].ptr == NULL) {
      if (pl_nnames == PL_CUPTI_MAX_NAMES) return 0; /* half full at most */
      pl_names[i].ptr = name;
      pl_names[i].id = ++pl_nnames;
      break;
    }
  }
  char rec[1024];
  size_t sl = strnlen(name, sizeof rec - sizeof(pagelock_rec_name) - 8);
  size_t size = (sizeof(pagelock_rec_name) + sl + 1 + 7) & ~(size_t)7;
  memset(rec, 0, size);
  pagelock_rec_name *nr = (pagelock_rec_name *)rec;
  nr->h.type = PAGELOCK_REC_NAME;
  nr->h.size = (uint32_t)size;
  nr->id = pl_nnames;
  memcpy(rec + sizeof *nr, name, sl);
  pl_batch_put(b, rec, size);
  return pl_nnames;
}

/* MEMCPY and MEMCPY2 records name their common fields alike. */
#define PL_COPY_FIELDS(m)                                                                \
  do {                                                                                   \
    g->copy_kind = (m)->copyKind;                                                        \
    g->src_kind = (m)->srcKind;                                                          \
    g->dst_kind = (m)->dstKind;                                                          \
    g->flags = ((m)->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) ? PAGELOCK_GPU_ASYNC : 0; \
    g->bytes = (m)->bytes;                                                               \
    g->start_ns = (m)->start;                                                            \
    g->end_ns = (m)->end;                                                                \
    g->device = (m)->deviceId;                                                           \
    g->context = (m)->contextId;                                                         \
    g->stream = (m)->streamId;                                                           \
    g->correlation = (m)->correlationId;                                                 \
  } while (0)

/* One CUPTI record into our format; false for kinds we do not keep. */
static bool pl_convert(pl_batch *b, const CUpti_Activity *a, pagelock_rec_gpu *g) {
  memset(g, 0, sizeof *g);
  g->h.type = PAGELOCK_REC_GPU;
  g->h.size = sizeof *g;
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      g->kind = PAGELOCK_GPU_MEMCPY;
      PL_COPY_FIELDS((const CUpti_ActivityMemcpy6 *)(const void *)a);
      return true;
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      g->kind = PAGELOCK_GPU_MEMCPY_P2P;
      PL_COPY_FIELDS((const CUpti_ActivityMemcpyPtoP4 *)(const void *)a);
      return true;
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const void *)a;
      g->kind = PAGELOCK_GPU_MEMSET;
      g->src_kind = (uint8_t)m->memoryKind;
      g->bytes = m->bytes;
      g->start_ns = m->start;
      g->end_ns = m->end;
      g->device = m->deviceId;
      g->context = m->contextId;
      g->stream = m->streamId;
      g->correlation = m->correlationId;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const void *)a;
      g->kind = PAGELOCK_GPU_KERNEL;
      g->start_ns = k->start;
      g->end_ns = k->end;
      g->device = k->deviceId;
      g->context = k->contextId;
      g->stream = k->streamId;
      g->correlation = k->correlationId;
      g->name_id = pl_name_id(b, k->name);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const CUpti_ActivitySynchronization2 *s = (const void *)a;
      g->kind = PAGELOCK_GPU_SYNC;
      g->name_id = (uint32_t)s->type;
      g->start_ns = s->start;
      g->end_ns = s->end;
      g->context = s->contextId;
      g->stream = s->streamId;
      g->correlation = s->correlationId;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
      const CUpti_ActivityOverhead3 *o = (const void *)a;
      g->kind = PAGELOCK_GPU_OVERHEAD;
      g->name_id = (uint32_t)o->overheadKind;
      g->start_ns = o->start;
      g->end_ns = o->end;
      if (o->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS ||
          o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD)
        g->thread = o->objectId.pt.threadId;
      g->correlation = o->correlationId;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const CUpti_ActivityExternalCorrelation *e = (const void *)a;
      /* Only with DRIVER activity on (not ours, but a build that enables
       * it gets links for free); CUPTI repeats the pair per record of the
       * call: keep one. */
      static uint32_t last_corr;
      static uint64_t last_ext;
      if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 && e->externalId &&
          (e->correlationId != last_corr || e->externalId != last_ext)) {
        last_corr = e->correlationId;
        last_ext = e->externalId;
        pagelock_rec_link l;
        memset(&l, 0, sizeof l);
        l.h.type = PAGELOCK_REC_LINK;
        l.h.size = sizeof l;
        l.correlation = e->correlationId + atomic_load(&pl_corr_base);
        l.copy_seq = e->externalId;
        pl_batch_put(b, &l, sizeof l);
      }
      return false;
    }
    default: return false;
  }
}

static void CUPTIAPI pl_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                         size_t size, size_t valid) {
  (void)size;
  pl_shim_enter();
  if (!atomic_load(&pl_cupti_child) && buffer && valid) {
    /* Static: 64 KiB is too much for CUPTI's thread stack to spare, and the
     * lock serialises its users anyway. */
    static pl_batch b;
    pthread_mutex_lock(&pl_compact_lock);
    CUpti_Activity *a = NULL;
    uint64_t n = 0;
    while (pl_cu.ActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
      pagelock_rec_gpu g;
      if (pl_convert(&b, a, &g)) {
        /* This attach's records only: a detach takes every one first. */
        if (g.correlation) {
          g.correlation += atomic_load(&pl_corr_base);
          pl_corr_seen(g.correlation);
        }
        pl_batch_put(&b, &g, sizeof g);
        n++;
      }
    }
    pl_batch_flush(&b);
    pthread_mutex_unlock(&pl_compact_lock);
    atomic_fetch_add(&pl_n_records, n);
  }
  size_t dropped = 0;
  if (pl_cu.ActivityGetNumDroppedRecords &&
      pl_cu.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    atomic_fetch_add(&pl_n_dropped, dropped);
  atomic_fetch_add(&pl_n_buffers, 1);
  pl_buffer_release(buffer);
  pl_shim_leave();
}

/* ---- start and stop ---------------------------------------------------- */

/* The copy entry points whose calls we correlate: every wrapped copy API
 * (the graph-node calls queue nothing). */
static const CUpti_CallbackId pl_copy_cbids[] = {
#define PL_CBID(name) CUPTI_DRIVER_TRACE_CBID_##name,
    // clang-format off
    PL_CBID(cuMemcpyHtoD_v2) PL_CBID(cuMemcpyHtoD_v2_ptds)
    PL_CBID(cuMemcpyDtoH_v2) PL_CBID(cuMemcpyDtoH_v2_ptds)
    PL_CBID(cuMemcpyHtoDAsync_v2) PL_CBID(cuMemcpyHtoDAsync_v2_ptsz)
    PL_CBID(cuMemcpyDtoHAsync_v2) PL_CBID(cuMemcpyDtoHAsync_v2_ptsz)
    PL_CBID(cuMemcpy) PL_CBID(cuMemcpy_ptds)
    PL_CBID(cuMemcpyAsync) PL_CBID(cuMemcpyAsync_ptsz)
    PL_CBID(cuMemcpy2D_v2) PL_CBID(cuMemcpy2D_v2_ptds)
    PL_CBID(cuMemcpy2DUnaligned_v2) PL_CBID(cuMemcpy2DUnaligned_v2_ptds)
    PL_CBID(cuMemcpy2DAsync_v2) PL_CBID(cuMemcpy2DAsync_v2_ptsz)
    PL_CBID(cuMemcpy3D_v2) PL_CBID(cuMemcpy3D_v2_ptds)
    PL_CBID(cuMemcpy3DAsync_v2) PL_CBID(cuMemcpy3DAsync_v2_ptsz)
    PL_CBID(cuMemcpyBatchAsync) PL_CBID(cuMemcpyBatchAsync_ptsz)
    PL_CBID(cuMemcpyBatchAsync_v2) PL_CBID(cuMemcpyBatchAsync_v2_ptsz)
    PL_CBID(cuMemcpyDtoD_v2) PL_CBID(cuMemcpyDtoD_v2_ptds)
    PL_CBID(cuMemcpyDtoDAsync_v2) PL_CBID(cuMemcpyDtoDAsync_v2_ptsz)
    PL_CBID(cuMemcpyPeer) PL_CBID(cuMemcpyPeer_ptds)
    PL_CBID(cuMemcpyPeerAsync) PL_CBID(cuMemcpyPeerAsync_ptsz)
// clang-format on
#undef PL_CBID
};

static void pl_write_clock(void) {
  uint64_t ts = 0;
  if (!atomic_load(&pl_attached) || pl_cu.GetTimestamp == NULL ||
      pl_cu.GetTimestamp(&ts) != CUPTI_SUCCESS)
    return;
  pagelock_rec_clock c;
  memset(&c, 0, sizeof c);
  c.h.type = PAGELOCK_REC_CLOCK;
  c.h.size = sizeof c;
  c.cupti_ns = ts;
  c.mono_ns = pl_now_ns();
  pl_trace_write(&c, sizeof c);
}

/* Held around every flush and every change of what CUPTI traces: the exit
 * handler and the hand-over to a program's own client take it, so no call
 * of the CUPTI thread's is still inside libcupti when they go on.
 * bufferCompleted never takes it. */
static pthread_mutex_t pl_flush_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- sampling ------------------------------------------------------------ */

/* Tracing costs the program per GPU operation: CUPTI times every kernel and
 * copy on the GPU, and our callback runs on every copy call.  A loop of
 * 4 KiB copies, one tiny kernel and a synchronize ran 1.33x its time in C
 * and 1.68x in PyTorch with everything on, and 1.02-1.06x with the kinds
 * and callbacks off but the subscription kept; programs of large copies
 * and long kernels do not notice (1.02-1.04x).  So above
 * PAGELOCK_CUPTI_MAX_RATE operations a second the kinds and callbacks go
 * off, and come back for one window of PAGELOCK_CUPTI_WINDOW_MS every
 * PL_SAMPLE_PERIOD windows; each window measures the rate again, and
 * tracing stays on once it has dropped.  Turning a kind on or off takes
 * 1-20 us, yet windows of 5 ms every 100 still cost that loop 1.12x, and
 * windows of 20-50 ms every 1-2 s 1.02-1.06x (H100,
 * tests/gpu/probe_cupti_duty.cu): hence long windows and a 1/40 duty. */
#define PL_SAMPLE_PERIOD 40
/* Paused, CUPTI still costs while it is attached: subscribed with every
 * kind and callback off, the same C loop ran 1.075x its time with CUPTI
 * detached (quartiles 1.055-1.089 over 40 pairs of 0.5 s phases taking
 * turns in one process, H200), and windows of 25 ms every 1 or 4 s added
 * nothing measurable to that (probe_cupti_duty abphase).  So a pause
 * detaches CUPTI (cuptiFinalize) once the GPU work the stretch before it
 * traced is long done, PL_DETACH_AFTER windows later, and a window attaches
 * it again first.  Attaching took 9-13 ms and detaching 2-3 ms, so while
 * detached one window opens every PL_DETACHED_PERIOD windows (4 s at
 * 25 ms): about 0.5% of the time in all. */
#define PL_DETACH_AFTER 4
#define PL_DETACHED_PERIOD 160
/* CUPTI's records are judged over this many windows while tracing. */
#define PL_RECORD_SPAN 4
/* Fewer operations than this in a span say nothing about a rate: a burst
 * of a test's 40 copies inside one window must not look like 2000 a
 * second. */
#define PL_SAMPLE_MIN_OPS 16

enum { PL_SAMPLE_TRACING, PL_SAMPLE_PAUSED, PL_SAMPLE_DETACHED, PL_SAMPLE_WINDOW, PL_SAMPLE_STUCK };

static void pl_write_sample(uint64_t t, bool on, uint64_t ops_per_s) {
  pagelock_rec_gpu_sample r;
  memset(&r, 0, sizeof r);
  r.h.type = PAGELOCK_REC_GPU_SAMPLE;
  r.h.size = sizeof r;
  r.mono_ns = t;
  r.on = on;
  r.ops_per_s = ops_per_s > UINT32_MAX ? UINT32_MAX : (uint32_t)ops_per_s;
  pl_trace_write(&r, sizeof r);
}

/* Every activity kind on or off.  Returns false when a kind the report
 * needs could not be turned back on: every kind is off again then.
 *
 * Never the copy callbacks: they stay on while CUPTI is attached.  Turned
 * off from this thread while another is inside a copy call, CUPTI never
 * sees that call end, and counts every later call of that thread as
 * nested in it: one correlation id for all of them, in our records and in
 * those of any client after us, until cuptiFinalize (H200, driver 580:
 * 400 of 400 records on one id; the activity kinds alone turned off and
 * on, or an unsubscribe with the callbacks on, left none;
 * tests/gpu/probe_cupti_duty.cu ids). */
static bool pl_trace_switch(bool on) {
  for (size_t i = 0; i < sizeof pl_kinds / sizeof pl_kinds[0]; i++) {
    if (!on) {
      pl_cu.ActivityDisable(pl_kinds[i]);
    } else if (pl_cu.ActivityEnable(pl_kinds[i]) != CUPTI_SUCCESS && i < 4) {
      pl_trace_switch(false);
      return false;
    }
  }
  atomic_store(&pl_tracing, on);
  return true;
}

/* The sampler's state, the CUPTI thread's alone.  Two measures of the
 * program's rate: its copy calls, counted by our callback as they happen,
 * judged every window; and CUPTI's records (kernels, copies, memsets),
 * which arrive in bursts (a buffer full, a flush), judged over what one
 * flush delivered. */
typedef struct pl_sampler {
  int state;
  bool detach; /* pauses detach CUPTI (PAGELOCK_CUPTI_DETACH, and a libcupti that can) */
  long max_rate;
  uint64_t window_ns;
  uint64_t since, calls;       /* the span of copy calls: start, count then */
  uint64_t rec_since, records; /* the span of records: start, count then */
} pl_sampler;

static void pl_sample_restart(pl_sampler *s, uint64_t now) {
  s->since = s->rec_since = now;
  s->calls = atomic_load(&pl_n_calls);
  s->records = atomic_load(&pl_n_records);
}

static uint64_t pl_per_s(uint64_t n, uint64_t from, uint64_t now) {
  return (uint64_t)((double)n * 1e9 / (double)(now > from ? now - from : 1));
}

/* Pauses tracing when `ops` in a span make `rate`, above the limit. */
static bool pl_sample_pause(pl_sampler *s, uint64_t now, uint64_t ops, uint64_t rate) {
  if (ops < PL_SAMPLE_MIN_OPS || rate <= (uint64_t)s->max_rate) return false;
  pl_trace_switch(false);
  /* Stamped once everything is off: a copy call after this time carries
   * no correlation (tests/preload trace_check --gpu-sampled). */
  pl_write_sample(pl_now_ns(), false, rate);
  /* What the last stretch traced, now, so that the next window's flush
   * delivers the window's records only. */
  pl_cu.ActivityFlushAll(0);
  if (s->state == PL_SAMPLE_TRACING)
    pl_log(PL_LOG_INFO, PL_LK_CUPTI_SAMPLE,
           "GPU timing sampled: about %llu GPU operations a second, above "
           "PAGELOCK_CUPTI_MAX_RATE=%ld; one window of %llu ms every %llu ms%s",
           (unsigned long long)rate, s->max_rate, (unsigned long long)(s->window_ns / 1000000),
           (unsigned long long)(s->window_ns * (s->detach ? PL_DETACHED_PERIOD : PL_SAMPLE_PERIOD) /
                                1000000),
           s->detach ? ", CUPTI detached in between" : "");
  pl_log(PL_LOG_DEBUG, PL_LK_EVENT, "GPU timing paused at %llu GPU operations a second at %.6f s",
         (unsigned long long)rate, (double)(now - pl_trace_start_ns()) / 1e9);
  s->state = PL_SAMPLE_PAUSED;
  pl_sample_restart(s, now);
  return true;
}

/* The CUPTI thread has just flushed: judge the records that came since
 * the span of records began. */
static void pl_sample_flushed(pl_sampler *s, uint64_t now) {
  if (s->state != PL_SAMPLE_TRACING) return;
  uint64_t recs = atomic_load(&pl_n_records) - s->records;
  if (!pl_sample_pause(s, now, recs, pl_per_s(recs, s->rec_since, now))) {
    s->rec_since = now;
    s->records += recs;
  }
}

/* Opens a window at now: every kind and callback on. */
static void pl_sample_window(pl_sampler *s, uint64_t now) {
  if (!pl_trace_switch(true)) {
    pl_log(PL_LOG_WARN, PL_LK_CUPTI_SAMPLE,
           "GPU timing could not be turned back on after a pause; it stays off from %.3f s",
           (double)(now - pl_trace_start_ns()) / 1e9);
    s->state = PL_SAMPLE_STUCK;
    return;
  }
  /* Stamped before anything was on (`now` is this tick's start). */
  pl_write_sample(now, true, 0);
  pl_log(PL_LOG_DEBUG, PL_LK_EVENT, "GPU timing resumed at %.6f s",
         (double)(now - pl_trace_start_ns()) / 1e9);
  s->state = PL_SAMPLE_WINDOW;
  pl_sample_restart(s, now);
}

/* Detaches CUPTI in a pause: everything it holds is taken first, and no
 * CUPTI call is made until pl_sample_attach.  Not while a link scope still
 * has an id pushed (its pop would attach CUPTI again): the next tick
 * tries again.  A libcupti that refuses to detach is left attached, and
 * pauses stay as they were. */
static bool pl_sample_detach(pl_sampler *s, uint64_t now) {
  if (atomic_load(&pl_links_open) != 0) return false;
  pl_cu.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pl_write_clock();
  atomic_store(&pl_attached, false);
  CUptiResult r = pl_cu.Finalize();
  if (r != CUPTI_SUCCESS) {
    atomic_store(&pl_attached, true);
    s->detach = false;
    pl_log(PL_LOG_INFO, PL_LK_CUPTI_SAMPLE,
           "cuptiFinalize: %s; CUPTI stays attached while GPU timing is paused", pl_cupti_err(r));
    return false;
  }
  pl_log(PL_LOG_DEBUG, PL_LK_EVENT, "GPU timing detached at %.6f s",
         (double)(now - pl_trace_start_ns()) / 1e9);
  s->state = PL_SAMPLE_DETACHED;
  return true;
}

/* Attaches CUPTI again for a window: the copy callbacks on, every kind
 * still off.  Its correlation ids start again at 1: from here on they are
 * counted above every id written so far. */
static bool pl_sample_attach(void) {
  if (pl_cu.Subscribe(&pl_sub, pl_cupti_callback, NULL) != CUPTI_SUCCESS) return false;
  atomic_store(&pl_corr_base, atomic_load(&pl_corr_top));
  atomic_store(&pl_attached, true);
  for (size_t i = 0; i < sizeof pl_copy_cbids / sizeof pl_copy_cbids[0]; i++)
    pl_cu.EnableCallback(1, pl_sub, CUPTI_CB_DOMAIN_DRIVER_API, pl_copy_cbids[i]);
  if (pl_cu.ActivityRegisterCallbacks(pl_buffer_requested, pl_buffer_completed) != CUPTI_SUCCESS) {
    atomic_store(&pl_attached, false);
    pl_cu.Finalize();
    return false;
  }
  pl_write_clock();
  return true;
}

/* One tick of the CUPTI thread, under pl_flush_lock with CUPTI ours. */
static void pl_sample_step(pl_sampler *s, uint64_t now) {
  if (s->state == PL_SAMPLE_TRACING || s->state == PL_SAMPLE_WINDOW) {
    if (now - s->since < s->window_ns) return;
    uint64_t calls = atomic_load(&pl_n_calls) - s->calls;
    if (s->state == PL_SAMPLE_WINDOW) {
      /* A window judges everything it traced. */
      pl_cu.ActivityFlushAll(0);
      uint64_t recs = atomic_load(&pl_n_records) - s->records;
      uint64_t ops = recs > calls ? recs : calls;
      if (pl_sample_pause(s, now, ops, pl_per_s(ops, s->since, now))) return;
      s->state = PL_SAMPLE_TRACING;
      pl_sample_restart(s, now);
      return;
    }
    /* Tracing: the copy calls every window, and CUPTI's records (kernels
     * among them) every PL_RECORD_SPAN windows, flushed for it: they
     * arrive late and in bursts, which one window would take for a rate.
     * Judged only at the flush period, they left a program's first second
     * traced in full whatever its rate: every forward of a short
     * accelerate offload run (docs/bench/2026-11-28-real-programs.md,
     * PAGELOCK_CUPTI=0). */
    if (pl_sample_pause(s, now, calls, pl_per_s(calls, s->since, now))) return;
    s->since = now;
    s->calls += calls;
    if (now - s->rec_since >= s->window_ns * PL_RECORD_SPAN) {
      pl_cu.ActivityFlushAll(0);
      uint64_t recs = atomic_load(&pl_n_records) - s->records;
      if (pl_sample_pause(s, now, recs, pl_per_s(recs, s->rec_since, now))) return;
      s->rec_since = now;
      s->records += recs;
    }
  } else if (s->state == PL_SAMPLE_PAUSED) {
    if (s->detach && now - s->since >= s->window_ns * PL_DETACH_AFTER && pl_sample_detach(s, now))
      return;
    if (now - s->since < s->window_ns * (PL_SAMPLE_PERIOD - 1)) return;
    pl_sample_window(s, now);
  } else if (s->state == PL_SAMPLE_DETACHED) {
    if (now - s->since < s->window_ns * (PL_DETACHED_PERIOD - 1)) return;
    if (!pl_sample_attach()) {
      pl_log(PL_LOG_WARN, PL_LK_CUPTI_SAMPLE,
             "GPU timing could not be attached again after a pause; it stays off from %.3f s",
             (double)(now - pl_trace_start_ns()) / 1e9);
      s->state = PL_SAMPLE_STUCK;
      return;
    }
    /* The window starts once CUPTI is back (attaching takes milliseconds). */
    pl_sample_window(s, pl_now_ns());
  }
}

/* ---- the CUPTI thread ---------------------------------------------------- */

/* CUPTI hands back only full buffers on its own (a flush period delivers
 * nothing until a buffer fills, as seen on the H200): a small thread asks
 * for whatever is complete every PAGELOCK_CUPTI_FLUSH_MS, so a long run
 * streams its GPU records, and runs the sampler every window.  It holds no
 * lock while CUPTI delivers: delivery runs on CUPTI's thread and takes the
 * compaction lock. */
static void *pl_cupti_thread(void *arg) {
  (void)arg;
  pl_shim_own_thread();
  uint64_t flush_ns = (uint64_t)pl_opt_long(PL_OPT_CUPTI_FLUSH_MS) * 1000000u;
  pl_sampler s = {.state = PL_SAMPLE_TRACING,
                  .detach = pl_cu.Finalize != NULL && pl_opt_long(PL_OPT_CUPTI_DETACH) % 2 == 1,
                  /* Without cuptiActivityDisable there is no pausing. */
                  .max_rate = pl_cu.ActivityDisable ? pl_opt_long(PL_OPT_CUPTI_MAX_RATE) : 0,
                  .window_ns = (uint64_t)pl_opt_long(PL_OPT_CUPTI_WINDOW_MS) * 1000000u};
  uint64_t tick = s.max_rate > 0 ? s.window_ns : flush_ns;
  if (flush_ns && flush_ns < tick) tick = flush_ns;
  /* Ticks of a fifth of a window: a window ends within 20% of its length. */
  if (s.max_rate > 0 && tick / 5 >= 1000000u) tick /= 5;
  struct timespec ts = {(time_t)(tick / 1000000000u), (long)(tick % 1000000000u)};
  uint64_t last_flush = pl_now_ns();
  pl_sample_restart(&s, last_flush);
  while (atomic_load(&pl_cupti_on) && !atomic_load(&pl_cupti_child)) {
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&pl_flush_lock);
    uint64_t now = pl_now_ns();
    if (atomic_load(&pl_cupti_on) && atomic_load(&pl_attached) && flush_ns &&
        now - last_flush >= flush_ns) {
      /* CUPTI's clock is CLOCK_REALTIME, which NTP may slew or step: a
       * fresh pair each round keeps the conversion of the records that
       * follow exact. */
      pl_write_clock();
      pl_cu.ActivityFlushAll(0);
      last_flush = now;
      if (s.max_rate > 0) pl_sample_flushed(&s, now);
    }
    if (atomic_load(&pl_cupti_on) && s.max_rate > 0) pl_sample_step(&s, now);
    pthread_mutex_unlock(&pl_flush_lock);
  }
  return NULL;
}

static void pl_start_thread(void) {
  if (pl_opt_long(PL_OPT_CUPTI_FLUSH_MS) <= 0 && pl_opt_long(PL_OPT_CUPTI_MAX_RATE) <= 0) return;
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 64 << 10);
  /* Every signal blocked, as in the shim's other threads: a process signal
   * goes to any thread that does not block it, and a program's SIGALRM
   * handler ran here, on 64 KiB, beside the program's only thread.  A
   * thread CUPTI starts from this thread's calls inherits the mask. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&t, &a, pl_cupti_thread, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0)
    pthread_setname_np(t, "pagelock-cupti");
  else
    pl_log(PL_LOG_WARN, PL_LK_CUPTI,
           "cannot start the GPU record thread: records arrive when buffers fill and at exit, "
           "and GPU timing is never sampled");
  pthread_attr_destroy(&a);
}

/* At exit, before libcupti and the driver tear themselves down (this
 * handler is registered after libcupti was loaded, so it runs first): take
 * every record CUPTI still holds.  (Once: it turns pl_cupti_on off.) */
void pl_cupti_finish(void) {
  if (!atomic_load(&pl_cupti_on) || atomic_load(&pl_cupti_child)) return;
  pl_shim_enter();
  pthread_mutex_lock(&pl_flush_lock);
  if (atomic_load(&pl_attached)) pl_cu.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  atomic_store(&pl_cupti_on, false);
  atomic_store(&pl_tracing, false);
  pthread_mutex_unlock(&pl_flush_lock);
  pl_write_clock();
  pl_write_status();
  pl_shim_leave();
}

#define PL_CUPTI_SYM(field, name)                                             \
  do {                                                                        \
    *(void **)&pl_cu.field = pl_real_dlsym(h, name);                          \
    if (pl_cu.field == NULL && required) {                                    \
      pl_cupti_fail(PAGELOCK_GPU_TIMING_VERSION, "libcupti has no %s", name); \
      return;                                                                 \
    }                                                                         \
  } while (0)

/* A start that failed after subscribing: leave CUPTI as we found it (the
 * first `enabled` kinds off, no subscription), so a profiler the program
 * starts later is not refused because of a session of ours that never ran. */
static void pl_cupti_undo(size_t enabled) {
  for (size_t i = 0; i < enabled; i++)
    if (pl_cu.ActivityDisable) pl_cu.ActivityDisable(pl_kinds[i]);
  if (enabled) pl_cu.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (pl_cu.Unsubscribe) pl_cu.Unsubscribe(pl_sub);
}

/* The once routine.  Every exit path leaves a GPU_STATUS record saying
 * whether GPU timing is on and, if not, why. */
static void pl_cupti_start(void) {
  bool required = true;
  if (atomic_load(&pl_cupti_child)) return;
  if (pl_opt_long(PL_OPT_CUPTI) % 2 == 0) {
    pl_cupti_fail(PAGELOCK_GPU_TIMING_DISABLED, "PAGELOCK_CUPTI=%s turned it off",
                  getenv("PAGELOCK_CUPTI") ? getenv("PAGELOCK_CUPTI") : "0");
    return;
  }
  char err[512] = "";
  void *h = pl_cupti_open(err, sizeof err);
  if (h == NULL) {
    pl_cupti_fail(PAGELOCK_GPU_TIMING_NO_CUPTI, "%s", err);
    return;
  }
  PL_CUPTI_SYM(GetResultString, "cuptiGetResultString");
  PL_CUPTI_SYM(GetVersion, "cuptiGetVersion");
  PL_CUPTI_SYM(Subscribe, "cuptiSubscribe");
  PL_CUPTI_SYM(EnableCallback, "cuptiEnableCallback");
  PL_CUPTI_SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks");
  PL_CUPTI_SYM(ActivityEnable, "cuptiActivityEnable");
  PL_CUPTI_SYM(ActivityFlushAll, "cuptiActivityFlushAll");
  PL_CUPTI_SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord");
  required = false;
  PL_CUPTI_SYM(Unsubscribe, "cuptiUnsubscribe");
  PL_CUPTI_SYM(ActivityDisable, "cuptiActivityDisable");
  PL_CUPTI_SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
  PL_CUPTI_SYM(ActivityPushExternalCorrelationId, "cuptiActivityPushExternalCorrelationId");
  PL_CUPTI_SYM(ActivityPopExternalCorrelationId, "cuptiActivityPopExternalCorrelationId");
  PL_CUPTI_SYM(GetTimestamp, "cuptiGetTimestamp");
  PL_CUPTI_SYM(Finalize, "cuptiFinalize");

  /* Record layouts change between CUPTI major versions; we read the CUDA 13
   * ones. */
  if (pl_cu.GetVersion(&pl_cupti_version) != CUPTI_SUCCESS ||
      pl_cupti_version / 10000 != CUPTI_API_VERSION / 10000) {
    pl_cupti_fail(PAGELOCK_GPU_TIMING_VERSION,
                  "libcupti API version %u; this pagelock reads CUDA %d CUPTI (%d)",
                  pl_cupti_version, CUPTI_API_VERSION / 10000, CUPTI_API_VERSION);
    return;
  }
  if (atomic_load(&pl_program_client)) {
    pl_cupti_fail(PAGELOCK_GPU_TIMING_BUSY,
                  "the program started its own CUPTI client (a profiler) before CUDA; copies are "
                  "still intercepted");
    return;
  }
  CUptiResult r = pl_cu.Subscribe(&pl_sub, pl_cupti_callback, NULL);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    pl_cupti_fail(
        PAGELOCK_GPU_TIMING_BUSY,
        "another CUPTI client (nsys, ncu or a profiler) is attached; copies are still intercepted");
    return;
  }
  if (r == CUPTI_ERROR_NOT_COMPATIBLE || r == CUPTI_ERROR_INVALID_DEVICE ||
      r == CUPTI_ERROR_NOT_SUPPORTED) {
    pl_cupti_fail(PAGELOCK_GPU_TIMING_VERSION, "libcupti does not work with this driver: %s",
                  pl_cupti_err(r));
    return;
  }
  if (r != CUPTI_SUCCESS) {
    pl_cupti_fail(PAGELOCK_GPU_TIMING_ERROR, "cuptiSubscribe: %s", pl_cupti_err(r));
    return;
  }
#ifdef PL_DIAG_CUPTI
  /* Diagnostic builds only (tests/gpu/cupti_cost.sh): PL_DIAG_CUPTI_OFF
   * lists positions in pl_kinds not to enable, and "cb" for no callbacks,
   * to find what CUPTI's tracing costs a program. */
  const char *diag_off = getenv("PL_DIAG_CUPTI_OFF");
  diag_off = diag_off ? diag_off : "";
  if (strstr(diag_off, "cb") == NULL)
#endif
    for (size_t i = 0; i < sizeof pl_copy_cbids / sizeof pl_copy_cbids[0]; i++)
      pl_cu.EnableCallback(1, pl_sub, CUPTI_CB_DOMAIN_DRIVER_API, pl_copy_cbids[i]);
  /* CUPTI keeps its own clock (CLOCK_REALTIME on Linux): a timestamp
   * callback of ours could not be taken back when the program starts a
   * profiler of its own (see cuptiSubscribe below), and would hand it our
   * clock.  CLOCK records map CUPTI's clock to ours instead. */
  r = pl_cu.ActivityRegisterCallbacks(pl_buffer_requested, pl_buffer_completed);
  if (r != CUPTI_SUCCESS) {
    pl_cupti_undo(0);
    pl_cupti_fail(PAGELOCK_GPU_TIMING_ERROR, "cuptiActivityRegisterCallbacks: %s", pl_cupti_err(r));
    return;
  }
  for (size_t i = 0; i < sizeof pl_kinds / sizeof pl_kinds[0]; i++) {
#ifdef PL_DIAG_CUPTI
    char pos[2] = {(char)('0' + i), 0};
    if (strstr(diag_off, pos) != NULL) continue;
#endif
    r = pl_cu.ActivityEnable(pl_kinds[i]);
    if (r != CUPTI_SUCCESS && i < 4) {
      uint32_t st = r == CUPTI_ERROR_NOT_COMPATIBLE || r == CUPTI_ERROR_INVALID_DEVICE
                        ? PAGELOCK_GPU_TIMING_VERSION
                    : r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                        ? PAGELOCK_GPU_TIMING_BUSY
                        : PAGELOCK_GPU_TIMING_ERROR;
      pl_cupti_undo(i);
      pl_cupti_fail(st, "cuptiActivityEnable(%d): %s", (int)pl_kinds[i], pl_cupti_err(r));
      return;
    }
  }
  pl_cupti_status = PAGELOCK_GPU_TIMING_ON;
  pl_cupti_reason[0] = 0;
  atomic_store(&pl_tracing, true);
  atomic_store(&pl_attached, true);
  atomic_store(&pl_cupti_on, true);
  pl_write_clock();
  pl_write_status();
  atexit(pl_cupti_finish);
  pl_start_thread();
  pl_log(PL_LOG_INFO, PL_LK_CUPTI, "GPU timing from CUPTI %u", pl_cupti_version);
}

/* The start with every signal blocked on the program's thread that makes
 * it: CUPTI starts threads of its own from these calls (libcupti's worker,
 * fakecupti's), which inherit the mask, and they are there because of the
 * shim.  Signals sent meanwhile wait the start out; it runs once. */
static void pl_cupti_start_blocked(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pl_cupti_start();
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void pl_cupti_ensure(void) {
  if (!pl_active() || pl_tls_starting || atomic_load(&pl_cupti_child)) return;
  pl_tls_starting = 1;
  pl_shim_enter();
  /* Learn which driver this is before the first record creates the file
   * (its header says whether timings are simulated). */
  (void)pl_drv_get();
  pthread_once(&pl_cupti_once, pl_cupti_start_blocked);
  pl_shim_leave();
  pl_tls_starting = 0;
}

bool pl_cupti_active(void) { return atomic_load_explicit(&pl_cupti_on, memory_order_relaxed); }

bool pl_cupti_tracing(void) { return atomic_load_explicit(&pl_tracing, memory_order_relaxed); }

void pl_cupti_atfork_child(void) {
  atomic_store(&pl_cupti_child, true);
  atomic_store(&pl_cupti_on, false);
  atomic_store(&pl_tracing, false);
}

/* One DEVICE record per device, once the driver is initialised: the copy
 * engine count decides whether uploads and downloads can overlap. */
static void pl_write_devices(void) {
  const pl_drv *drv = pl_drv_get();
  if (drv == NULL) return;
  CUresult (*count)(int *) = drv->DeviceGetCount;
  CUresult (*get)(CUdevice *, int) = drv->DeviceGet;
  CUresult (*attr)(int *, CUdevice_attribute, CUdevice) = drv->DeviceGetAttribute;
  CUresult (*name)(char *, int, CUdevice) = drv->DeviceGetName;
  int n = 0;
  if (count == NULL || get == NULL || count(&n) != CUDA_SUCCESS) return;
  for (int i = 0; i < n && i < 64; i++) {
    CUdevice dev;
    if (get(&dev, i) != CUDA_SUCCESS) continue;
    pagelock_rec_device d;
    memset(&d, 0, sizeof d);
    d.device = (uint32_t)i;
    int v = 0;
    if (attr && attr(&v, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, dev) == CUDA_SUCCESS)
      d.copy_engines = (uint32_t)v;
    if (attr && attr(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS)
      d.sm_count = (uint32_t)v;
    char nm[128] = "";
    if (name == NULL || name(nm, sizeof nm, dev) != CUDA_SUCCESS) nm[0] = 0;
    nm[sizeof nm - 1] = 0;
    pl_trace_write_str(&d, sizeof d, PAGELOCK_REC_DEVICE, nm);
  }
}

/* ---- sharing CUPTI with the program -------------------------------------- */

/* CUPTI takes one subscriber per process.  When the program starts its own
 * client (the PyTorch profiler, a tool injected by nsys) after ours, it
 * must get what it would get without pagelock: we hand CUPTI over, having
 * taken every record of ours (our kinds off first, so its buffers never see
 * our records; a forced flush, so none of our buffers is left for its
 * callbacks), and the trace says from when GPU timing is missing. */
static void pl_cupti_yield(void) {
  pl_shim_enter();
  pthread_mutex_lock(&pl_flush_lock);
  if (atomic_load(&pl_cupti_on)) {
    /* Off under the lock: the sampler must not turn our kinds back on
     * inside the program's session. */
    atomic_store(&pl_cupti_on, false);
    atomic_store(&pl_tracing, false);
    /* Detached by the sampler: nothing of ours is left in CUPTI. */
    if (atomic_load(&pl_attached)) {
      for (size_t i = 0; i < sizeof pl_kinds / sizeof pl_kinds[0]; i++)
        if (pl_cu.ActivityDisable) pl_cu.ActivityDisable(pl_kinds[i]);
      pl_cu.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      if (pl_cu.Unsubscribe) pl_cu.Unsubscribe(pl_sub);
      pl_write_clock();
    }
    pthread_mutex_unlock(&pl_flush_lock);
    pl_cupti_fail(
        PAGELOCK_GPU_TIMING_BUSY,
        "the program started its own CUPTI client (a profiler) %.3f s into the trace; GPU timing "
        "stops there, copies are still intercepted",
        (double)(pl_now_ns() - pl_trace_start_ns()) / 1e9);
  } else {
    pthread_mutex_unlock(&pl_flush_lock);
  }
  pl_shim_leave();
}

void pl_cupti_program_subscribes(void) {
  if (pl_tls_starting || pl_shim_inside()) return;
  atomic_store(&pl_program_client, true);
  pl_cupti_yield();
}

void *pl_cupti_own_subscribe(void) { return (void *)pl_cu.Subscribe; }

void *pl_cupti_own_register(void) { return (void *)pl_cu.ActivityRegisterCallbacks; }

void pl_cupti_driver_ready(void) {
  if (pl_active() && !pl_shim_inside() && !atomic_load(&pl_cupti_child)) {
    pl_shim_enter();
    pthread_once(&pl_devices_once, pl_write_devices);
    pl_shim_leave();
  }
}
