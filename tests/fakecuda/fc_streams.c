/*
 * fc_streams.c: streams as worker threads running a FIFO of queued work.
 *
 * Every stream, including each context's legacy NULL stream and each
 * thread's per-thread default stream, owns one worker that sleeps on a
 * condition variable when idle and runs its ops strictly in order.  The
 * legacy stream's implicit synchronisation is modelled with dependencies:
 * an op queued on the legacy stream first waits for everything already
 * queued on the context's blocking streams, and an op queued on a blocking
 * stream first waits for everything already queued on the legacy stream.
 *
 * Lock order: ctx->order_mu, then ctx->mu, then a stream's mu.  Workers
 * only ever hold one stream mutex at a time.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fc_internal.h"

#define FC_STREAM_DEAD 0x44414544u /* "DEAD": destroyed handle */

/* Every stream structure not yet freed, for exit-time teardown. */
static pthread_mutex_t fc_streams_mu = PTHREAD_MUTEX_INITIALIZER;
struct fc_stream_node {
  fc_stream *s;
  int joined;
  struct fc_stream_node *next;
};
static struct fc_stream_node *fc_streams_all;
static int fc_streams_unjoined_at_exit;
static atomic_uint fc_stream_last_id;

static pthread_once_t fc_pt_once = PTHREAD_ONCE_INIT;
static pthread_key_t fc_pt_key;
static int fc_pt_key_ok; /* set once, inside pthread_once */

#define FC_PT_MAX 16
struct fc_pt_tls {
  int n;
  struct {
    fc_ctx *ctx;
    fc_stream *s;
  } e[FC_PT_MAX];
};

/* ------------------------------------------------------------------ */
/* ops                                                                */

fc_op *fc_op_new(int kind) {
  fc_op *op = calloc(1, sizeof *op);
  if (op) op->kind = kind;
  return op;
}

void fc_op_free(fc_op *op) {
  if (op == NULL) return;
  if (op->trace) fc_tool_release(op);
  for (int i = 0; i < op->ndeps; i++) fc_stream_unref(op->deps[i].s);
  free(op->deps);
  if (op->kind == FC_OP_COPY) free(op->u.copy.jobs);
  if ((op->kind == FC_OP_EVENT_RECORD || op->kind == FC_OP_EVENT_WAIT) && op->u.event.ev)
    fc_event_unref(op->u.event.ev);
  free(op);
}

fc_op *fc_op_clone(const fc_op *op) {
  fc_op *c = fc_op_new(op->kind);
  if (c == NULL) return NULL;
  c->u = op->u;
  if (op->kind == FC_OP_COPY) {
    c->u.copy.jobs = malloc((op->u.copy.njobs ? op->u.copy.njobs : 1) * sizeof *c->u.copy.jobs);
    if (c->u.copy.jobs == NULL) {
      free(c);
      return NULL;
    }
    memcpy(c->u.copy.jobs, op->u.copy.jobs, op->u.copy.njobs * sizeof *c->u.copy.jobs);
  }
  if ((op->kind == FC_OP_EVENT_RECORD || op->kind == FC_OP_EVENT_WAIT) && op->u.event.ev)
    fc_event_ref(op->u.event.ev);
  return c;
}

static int fc_op_add_dep(fc_op *op, fc_stream *t, uint64_t seq) {
  struct fc_dep *d = realloc(op->deps, (size_t)(op->ndeps + 1) * sizeof *d);
  if (d == NULL) return -1;
  op->deps = d;
  atomic_fetch_add(&t->refs, 1);
  d[op->ndeps].s = t;
  d[op->ndeps].seq = seq;
  op->ndeps++;
  return 0;
}

/* ------------------------------------------------------------------ */
/* stream lifetime                                                    */

static void fc_registry_remove(fc_stream *s) {
  struct fc_stream_node *gone = NULL;
  pthread_mutex_lock(&fc_streams_mu);
  for (struct fc_stream_node **pp = &fc_streams_all; *pp; pp = &(*pp)->next) {
    if ((*pp)->s == s) {
      gone = *pp;
      *pp = gone->next;
      break;
    }
  }
  pthread_mutex_unlock(&fc_streams_mu);
  free(gone);
}

static void fc_ctx_list_remove(fc_stream *s) {
  fc_ctx *c = s->ctx;
  pthread_mutex_lock(&c->mu);
  if (s->ctx_prev)
    s->ctx_prev->ctx_next = s->ctx_next;
  else if (c->streams == s)
    c->streams = s->ctx_next;
  if (s->ctx_next) s->ctx_next->ctx_prev = s->ctx_prev;
  s->ctx_next = s->ctx_prev = NULL;
  pthread_mutex_unlock(&c->mu);
}

static void fc_stream_free(fc_stream *s) {
  fc_registry_remove(s);
  for (fc_op *op = s->head; op;) {
    fc_op *n = op->next;
    fc_op_free(op);
    op = n;
  }
  if (s->cap_graph) fc_graph_free(s->cap_graph);
  s->magic = 0;
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_done);
  free(s);
}

void fc_stream_unref(fc_stream *s) {
  if (s && atomic_fetch_sub(&s->refs, 1) == 1) fc_stream_free(s);
}

int fc_stream_is_blocking(const fc_stream *s) {
  return s->kind == FC_SK_PER_THREAD ||
         (s->kind == FC_SK_USER && !(s->flags & CU_STREAM_NON_BLOCKING));
}

static void fc_wait_deps(fc_op *op) {
  for (int i = 0; i < op->ndeps; i++) {
    fc_stream *t = op->deps[i].s;
    pthread_mutex_lock(&t->mu);
    while (t->done_seq < op->deps[i].seq && !t->exited && !atomic_load(&fc_shutdown))
      pthread_cond_wait(&t->cv_done, &t->mu);
    pthread_mutex_unlock(&t->mu);
  }
}

static void fc_exec(fc_op *op) {
  switch (op->kind) {
    case FC_OP_COPY: fc_exec_copy(op); break;
    case FC_OP_MEMSET: {
      uint64_t t0 = fc_tool_now(op);
      fc_exec_memset(op);
      fc_tool_done(op, 0, t0);
      break;
    }
    case FC_OP_HOSTFN:
      fc_tls_in_callback = 1;
      op->u.host.fn(op->u.host.data);
      fc_tls_in_callback = 0;
      FC_STAT_ADD(host_funcs_run, 1);
      break;
    case FC_OP_CALLBACK:
      fc_tls_in_callback = 1;
      op->u.cb.fn(op->u.cb.handle, CUDA_SUCCESS, op->u.cb.data);
      fc_tls_in_callback = 0;
      FC_STAT_ADD(host_funcs_run, 1);
      break;
    case FC_OP_KERNEL: {
      uint64_t t0 = fc_tool_now(op);
      if (op->u.kernel.spin_ns) fc_sleep_until(fc_now_ns() + op->u.kernel.spin_ns);
      fc_tool_done(op, 0, t0);
      break;
    }
    case FC_OP_EVENT_RECORD: fc_event_complete(op->u.event.ev, op->u.event.gen); break;
    case FC_OP_EVENT_WAIT:
      /* the wait itself is the op's dependency on the recording stream */
      break;
    default: break;
  }
}

static void *fc_worker_main(void *arg) {
  fc_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (s->head == NULL && !s->stopping && !atomic_load(&fc_shutdown))
      pthread_cond_wait(&s->cv_work, &s->mu);
    if (atomic_load(&fc_shutdown) || (s->head == NULL && s->stopping)) {
      pthread_mutex_unlock(&s->mu);
      break;
    }
    fc_op *op = s->head;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);

    fc_wait_deps(op);
    if (!atomic_load(&fc_shutdown)) fc_exec(op);

    pthread_mutex_lock(&s->mu);
    s->done_seq = op->seq;
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
    fc_op_free(op);
  }
  pthread_mutex_lock(&s->mu);
  atomic_store(&s->exited, 1);
  pthread_cond_broadcast(&s->cv_done);
  pthread_mutex_unlock(&s->mu);
  fc_ctx_list_remove(s);
  return NULL;
}

/* Join workers that have finished (destroyed streams); drops their ref. */
static void fc_reap(void) {
  fc_stream *done[32];
  int n = 0;
  pthread_mutex_lock(&fc_streams_mu);
  for (struct fc_stream_node *x = fc_streams_all; x && n < 32; x = x->next) {
    if (x->joined) continue;
    /* No stream lock here: fc_streams_mu nests outside none of them. */
    if (atomic_load(&x->s->exited)) {
      x->joined = 1;
      done[n++] = x->s;
    }
  }
  pthread_mutex_unlock(&fc_streams_mu);
  for (int i = 0; i < n; i++) {
    pthread_join(done[i]->thread, NULL);
    fc_stream_unref(done[i]);
  }
}

static CUresult fc_stream_create(fc_ctx *c, int kind, unsigned flags, int prio, fc_stream **out) {
  fc_reap();
  fc_stream *s = calloc(1, sizeof *s);
  struct fc_stream_node *node = calloc(1, sizeof *node);
  if (s == NULL || node == NULL) {
    free(s);
    free(node);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s->magic = FC_STREAM_MAGIC;
  s->id = atomic_fetch_add(&fc_stream_last_id, 1) + 1;
  atomic_init(&s->refs, 2); /* the worker's and the caller's */
  s->ctx = c;
  s->kind = kind;
  s->flags = flags;
  s->priority = prio;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_done, NULL);

  pthread_mutex_lock(&c->mu);
  s->ctx_next = c->streams;
  if (c->streams) c->streams->ctx_prev = s;
  c->streams = s;
  pthread_mutex_unlock(&c->mu);

  node->s = s;
  pthread_mutex_lock(&fc_streams_mu);
  node->next = fc_streams_all;
  fc_streams_all = node;
  pthread_mutex_unlock(&fc_streams_mu);

  /* Workers must not take the application's signals. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&s->thread, NULL, fc_worker_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    /* No worker ever ran: unlink and free directly. */
    fc_ctx_list_remove(s);
    atomic_store(&s->refs, 1);
    fc_stream_unref(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = s;
  return CUDA_SUCCESS;
}

/* Ask the worker to finish what is queued and exit. */
static void fc_stream_stop(fc_stream *s, int kill_handle) {
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  if (kill_handle) s->magic = FC_STREAM_DEAD;
  fc_graph *abandoned = s->cap_graph;
  s->capturing = 0;
  s->cap_graph = NULL;
  pthread_cond_broadcast(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  /* Freed unlocked: dropping its ops' refs may free other streams. */
  fc_graph_free(abandoned);
}

static void fc_pt_destructor(void *p) {
  struct fc_pt_tls *t = p;
  for (int i = 0; i < t->n; i++) {
    fc_stream_stop(t->e[i].s, 0);
    fc_stream_unref(t->e[i].s);
  }
  free(t);
}

static void fc_pt_init(void) {
  fc_pt_key_ok = pthread_key_create(&fc_pt_key, fc_pt_destructor) == 0;
}

static CUresult fc_per_thread_of(fc_ctx *c, fc_stream **out) {
  pthread_once(&fc_pt_once, fc_pt_init);
  if (!fc_pt_key_ok) return CUDA_ERROR_OUT_OF_MEMORY;
  struct fc_pt_tls *t = pthread_getspecific(fc_pt_key);
  if (t == NULL) {
    t = calloc(1, sizeof *t);
    if (t == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_setspecific(fc_pt_key, t);
  }
  int slot = -1;
  for (int i = 0; i < t->n; i++) {
    if (t->e[i].ctx == c) {
      fc_stream *s = t->e[i].s;
      pthread_mutex_lock(&s->mu);
      int live = !s->stopping;
      pthread_mutex_unlock(&s->mu);
      if (live) {
        *out = s;
        return CUDA_SUCCESS;
      }
      slot = i; /* its context was torn down: replace */
      break;
    }
  }
  if (slot < 0 && t->n == FC_PT_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_stream *s;
  CUresult r = fc_stream_create(c, FC_SK_PER_THREAD, 0, 0, &s);
  if (r != CUDA_SUCCESS) return r;
  if (slot >= 0) {
    fc_stream_unref(t->e[slot].s);
  } else {
    slot = t->n++;
    t->e[slot].ctx = c;
  }
  t->e[slot].s = s;
  *out = s;
  return CUDA_SUCCESS;
}

static CUresult fc_legacy_of(fc_ctx *c, fc_stream **out) {
  pthread_mutex_lock(&c->mu);
  fc_stream *l = c->legacy;
  pthread_mutex_unlock(&c->mu);
  if (l == NULL) {
    fc_stream *n;
    CUresult r = fc_stream_create(c, FC_SK_LEGACY, 0, 0, &n);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&c->mu);
    if (c->legacy == NULL) {
      c->legacy = n;
      n = NULL;
    }
    l = c->legacy;
    pthread_mutex_unlock(&c->mu);
    if (n) {
      fc_stream_stop(n, 0);
      fc_stream_unref(n);
    }
  }
  *out = l;
  return CUDA_SUCCESS;
}

CUresult fc_stream_resolve(CUstream h, int per_thread, fc_stream **out) {
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) return r;
  if (h == NULL) h = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY) return fc_legacy_of(c, out);
  if (h == CU_STREAM_PER_THREAD) return fc_per_thread_of(c, out);
  fc_stream *s = (fc_stream *)h;
  if (s->magic != FC_STREAM_MAGIC || s->kind != FC_SK_USER) return CUDA_ERROR_INVALID_HANDLE;
  *out = s;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* queueing and waiting                                               */

void fc_capture_invalidate_locked(fc_stream *s) {
  if (s->capturing) s->cap_invalid = 1;
}

static CUresult fc_wait_seq(fc_stream *s, uint64_t seq) {
  pthread_mutex_lock(&s->mu);
  while (s->done_seq < seq && !s->exited && !atomic_load(&fc_shutdown))
    pthread_cond_wait(&s->cv_done, &s->mu);
  CUresult r = s->done_seq >= seq ? CUDA_SUCCESS : CUDA_ERROR_DEINITIALIZED;
  pthread_mutex_unlock(&s->mu);
  return r;
}

CUresult fc_submit(fc_stream *s, fc_op *op, int wait, int sync_api) {
  pthread_mutex_lock(&s->mu);
  if (s->capturing) {
    if (sync_api || wait) {
      /* Synchronous work cannot be captured; it breaks the capture. */
      fc_capture_invalidate_locked(s);
      pthread_mutex_unlock(&s->mu);
      fc_op_free(op);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    CUresult cr = fc_capture_add_locked(s, op);
    pthread_mutex_unlock(&s->mu);
    if (cr != CUDA_SUCCESS) fc_op_free(op);
    return cr;
  }
  int stopping = s->stopping;
  pthread_mutex_unlock(&s->mu);
  if (stopping) {
    fc_op_free(op);
    return CUDA_ERROR_INVALID_HANDLE;
  }

  if (op->kind == FC_OP_EVENT_WAIT) {
    fc_stream *rs;
    uint64_t rseq;
    /* Waiting on an event that was never recorded is a no-op. */
    if (!fc_event_last_record(op->u.event.ev, &rs, &rseq)) {
      fc_op_free(op);
      return CUDA_SUCCESS;
    }
    int bad = fc_op_add_dep(op, rs, rseq);
    fc_stream_unref(rs);
    if (bad) {
      fc_op_free(op);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }

  fc_ctx *c = s->ctx;
  int legacy = s->kind == FC_SK_LEGACY;
  int ordered = legacy || fc_stream_is_blocking(s);
  CUresult r = CUDA_SUCCESS;
  if (ordered) {
    pthread_mutex_lock(&c->order_mu);
    pthread_mutex_lock(&c->mu);
  }
  if (legacy) {
    for (fc_stream *t = c->streams; t; t = t->ctx_next) {
      if (t == s || !fc_stream_is_blocking(t)) continue;
      pthread_mutex_lock(&t->mu);
      if (t->capturing) {
        /* The legacy stream would have to wait on a capture. */
        fc_capture_invalidate_locked(t);
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      } else if (t->enq_seq > t->done_seq && fc_op_add_dep(op, t, t->enq_seq) != 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
      }
      pthread_mutex_unlock(&t->mu);
    }
  } else if (ordered && c->legacy) {
    fc_stream *l = c->legacy;
    pthread_mutex_lock(&l->mu);
    if (l->enq_seq > l->done_seq && fc_op_add_dep(op, l, l->enq_seq) != 0)
      r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&l->mu);
  }
  if (ordered) pthread_mutex_unlock(&c->mu);

  fc_event *rec = NULL;
  uint64_t gen = 0;
  if (r == CUDA_SUCCESS && op->kind == FC_OP_EVENT_RECORD) {
    rec = op->u.event.ev;
    gen = op->u.event.gen = fc_event_arm(rec);
    fc_event_ref(rec); /* the op may run and be freed before set_pos */
  }
  if (r != CUDA_SUCCESS) {
    if (ordered) pthread_mutex_unlock(&c->order_mu);
    fc_op_free(op);
    return r;
  }

  /* Past the last failure: the op will be queued, so a tool may reserve
   * its records now, in API order, as CUPTI does at launch. */
  if (fc_tool_on()) fc_tool_queue(s, op, !sync_api);
  pthread_mutex_lock(&s->mu);
  uint64_t seq = op->seq = ++s->enq_seq;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  if (rec) {
    fc_event_set_pos(rec, gen, s, seq);
    fc_event_unref(rec);
  }
  if (ordered) pthread_mutex_unlock(&c->order_mu);
  return wait ? fc_wait_seq(s, seq) : CUDA_SUCCESS;
}

CUresult fc_stream_sync(fc_stream *s) {
  pthread_mutex_lock(&s->mu);
  if (s->capturing) {
    fc_capture_invalidate_locked(s);
    pthread_mutex_unlock(&s->mu);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  uint64_t seq = s->enq_seq;
  pthread_mutex_unlock(&s->mu);
  if (s->kind == FC_SK_LEGACY) {
    /* A marker inherits the legacy stream's implicit dependencies, so
     * syncing it also covers earlier work on blocking streams. */
    fc_op *op = fc_op_new(FC_OP_NOP);
    if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    return fc_submit(s, op, 1, 1);
  }
  return fc_wait_seq(s, seq);
}

static int fc_idle(fc_stream *s) {
  pthread_mutex_lock(&s->mu);
  int idle = s->done_seq == s->enq_seq;
  pthread_mutex_unlock(&s->mu);
  return idle;
}

CUresult fc_stream_query(fc_stream *s) {
  if (fc_stream_capturing(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!fc_idle(s)) return CUDA_ERROR_NOT_READY;
  if (s->kind == FC_SK_LEGACY) {
    int busy = 0;
    fc_ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    for (fc_stream *t = c->streams; t && !busy; t = t->ctx_next)
      if (t != s && fc_stream_is_blocking(t)) busy = !fc_idle(t);
    pthread_mutex_unlock(&c->mu);
    if (busy) return CUDA_ERROR_NOT_READY;
  }
  return CUDA_SUCCESS;
}

int fc_stream_capturing(fc_stream *s) {
  pthread_mutex_lock(&s->mu);
  int cap = s->capturing;
  pthread_mutex_unlock(&s->mu);
  return cap;
}

/* Take a ref on every stream of c (for waiting outside c->mu). */
static int fc_ctx_streams(fc_ctx *c, fc_stream ***out) {
  pthread_mutex_lock(&c->mu);
  int n = 0;
  for (fc_stream *t = c->streams; t; t = t->ctx_next) n++;
  fc_stream **v = n ? malloc((size_t)n * sizeof *v) : NULL;
  if (v == NULL) n = 0;
  int i = 0;
  for (fc_stream *t = c->streams; t && i < n; t = t->ctx_next) {
    atomic_fetch_add(&t->refs, 1);
    v[i++] = t;
  }
  pthread_mutex_unlock(&c->mu);
  *out = v;
  return n;
}

CUresult fc_ctx_synchronize(fc_ctx *c) {
  fc_stream **v;
  int n = fc_ctx_streams(c, &v);
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&v[i]->mu);
    uint64_t seq = v[i]->enq_seq;
    pthread_mutex_unlock(&v[i]->mu);
    CUresult e = fc_wait_seq(v[i], seq);
    if (r == CUDA_SUCCESS) r = e;
    fc_stream_unref(v[i]);
  }
  free(v);
  return r;
}

/*
 * A "potentially unsafe" call (one that synchronises the device) is refused
 * while a capture forbids it, as cuda.h describes the modes: a capture this
 * thread began (unless begun relaxed), or a global-mode capture on another
 * thread while this thread's own mode (cuThreadExchangeStreamCaptureMode)
 * is global, the default.  A thread in relaxed mode is never refused.  Like
 * CUDA, the refusal also invalidates that capture.
 */
CUresult fc_ctx_capture_check(fc_ctx *c) {
  CUresult r = CUDA_SUCCESS;
  pthread_t self = pthread_self();
  int mine = fc_tls_capture_mode;
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  pthread_mutex_lock(&c->mu);
  for (fc_stream *t = c->streams; t; t = t->ctx_next) {
    pthread_mutex_lock(&t->mu);
    int own = t->capturing && pthread_equal(t->cap_thread, self);
    if (t->capturing && ((own && t->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                         (!own && t->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                          mine == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
      fc_capture_invalidate_locked(t);
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    pthread_mutex_unlock(&t->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return r;
}

void fc_streams_stop_ctx(fc_ctx *c, int include_defaults) {
  fc_stream **v;
  int n = fc_ctx_streams(c, &v);
  for (int i = 0; i < n; i++) {
    fc_stream *s = v[i];
    if (s->kind == FC_SK_USER) {
      pthread_mutex_lock(&s->mu);
      int live = s->magic == FC_STREAM_MAGIC;
      pthread_mutex_unlock(&s->mu);
      fc_stream_stop(s, 1);
      if (live) fc_stream_unref(s); /* the handle's ref: the handle is dead now */
    } else if (include_defaults) {
      /* Per-thread streams stay referenced by their thread until it
       * exits; a stopped one is replaced on next use. */
      fc_stream_stop(s, 0);
    }
    fc_stream_unref(s);
  }
  free(v);
  if (include_defaults) {
    pthread_mutex_lock(&c->mu);
    fc_stream *l = c->legacy;
    c->legacy = NULL;
    pthread_mutex_unlock(&c->mu);
    fc_stream_unref(l);
  }
  fc_reap();
}

/* ------------------------------------------------------------------ */
/* exit                                                               */

void fc_streams_shutdown(void) {
  pthread_mutex_lock(&fc_streams_mu);
  for (struct fc_stream_node *x = fc_streams_all; x; x = x->next) {
    pthread_mutex_lock(&x->s->mu);
    pthread_cond_broadcast(&x->s->cv_work);
    pthread_cond_broadcast(&x->s->cv_done);
    pthread_mutex_unlock(&x->s->mu);
  }
  /* Join with a deadline: a worker stuck in a user host function must
   * not hang the exit. */
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 2;
  pthread_t self = pthread_self();
  for (struct fc_stream_node *x = fc_streams_all; x; x = x->next) {
    if (x->joined) continue;
    if (pthread_equal(x->s->thread, self) || pthread_timedjoin_np(x->s->thread, NULL, &dl) != 0) {
      fc_streams_unjoined_at_exit++;
      continue;
    }
    x->joined = 1;
  }
  pthread_mutex_unlock(&fc_streams_mu);
}

int fc_streams_all_joined(void) { return fc_streams_unjoined_at_exit == 0; }

void fc_streams_fini(void) {
  pthread_mutex_lock(&fc_streams_mu);
  struct fc_stream_node *list = fc_streams_all;
  fc_streams_all = NULL;
  pthread_mutex_unlock(&fc_streams_mu);
  while (list) {
    struct fc_stream_node *n = list->next;
    fc_stream *s = list->s;
    for (fc_op *op = s->head; op;) {
      fc_op *next = op->next;
      /* deps point at streams freed in this same loop, and an event
       * freed now would unref its stream: drop both, don't unref */
      op->ndeps = 0;
      if (op->kind == FC_OP_EVENT_RECORD || op->kind == FC_OP_EVENT_WAIT) op->u.event.ev = NULL;
      fc_op_free(op);
      op = next;
    }
    s->head = NULL;
    if (s->cap_graph) fc_graph_free(s->cap_graph);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    free(s);
    free(list);
    list = n;
  }
  /* Only the exiting thread's table can be reached; other threads'
   * go with their thread (key destructor) or the process. */
  pthread_once(&fc_pt_once, fc_pt_init);
  struct fc_pt_tls *t = fc_pt_key_ok ? pthread_getspecific(fc_pt_key) : NULL;
  if (t) {
    pthread_setspecific(fc_pt_key, NULL);
    free(t);
  }
}

/* ------------------------------------------------------------------ */
/* entry points                                                       */

static CUresult fc_stream_create_api(CUstream *ph, unsigned flags, int prio) {
  if (ph == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) return r;
  fc_stream *s;
  r = fc_stream_create(c, FC_SK_USER, flags, prio, &s);
  if (r == CUDA_SUCCESS) *ph = (CUstream)s;
  return r;
}

FC_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  FC_ENTER(cuStreamCreate);
  FC_RETURN(fc_stream_create_api(phStream, Flags, 0));
}

FC_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                              int priority) {
  FC_ENTER(cuStreamCreateWithPriority);
  /* Priorities clamp to the device's range [-5, 0] like the driver's. */
  if (priority > 0) priority = 0;
  if (priority < -5) priority = -5;
  FC_RETURN(fc_stream_create_api(phStream, flags, priority));
}

static CUresult fc_stream_destroy(CUstream h) {
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_HANDLE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, 0, &s);
  if (r != CUDA_SUCCESS) return r;
  /* Returns at once; queued work still runs (as in CUDA). */
  fc_stream_stop(s, 1);
  fc_stream_unref(s);
  fc_reap();
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuStreamDestroy(CUstream hStream) {
  FC_ENTER(cuStreamDestroy);
  FC_RETURN(fc_stream_destroy(hStream));
}

FC_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
  FC_ENTER(cuStreamDestroy_v2);
  FC_RETURN(fc_stream_destroy(hStream));
}

static CUresult fc_stream_sync_api(CUstream h, int pt) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  fc_tool_sync(FC_TS_STREAM_SYNCHRONIZE, s->ctx, s, NULL);
  return fc_stream_sync(s);
}

FC_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  cuStreamSynchronize_params p = {hStream};
  FC_ENTER_P(cuStreamSynchronize, &p);
  FC_RETURN(fc_stream_sync_api(hStream, 0));
}

FC_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  cuStreamSynchronize_ptsz_params p = {hStream};
  FC_ENTER_P(cuStreamSynchronize_ptsz, &p);
  FC_RETURN(fc_stream_sync_api(hStream, 1));
}

static CUresult fc_stream_query_api(CUstream h, int pt) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  return r != CUDA_SUCCESS ? r : fc_stream_query(s);
}

FC_EXPORT CUresult cuStreamQuery(CUstream hStream) {
  FC_ENTER(cuStreamQuery);
  FC_RETURN(fc_stream_query_api(hStream, 0));
}

FC_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) {
  FC_ENTER(cuStreamQuery_ptsz);
  FC_RETURN(fc_stream_query_api(hStream, 1));
}

static CUresult fc_stream_wait_event(CUstream h, CUevent he, unsigned flags, int pt) {
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  fc_event *e;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r == CUDA_SUCCESS) r = fc_event_lookup(he, &e);
  if (r != CUDA_SUCCESS) return r;
  fc_tool_sync(FC_TS_STREAM_WAIT_EVENT, s->ctx, s, e);
  fc_op *op = fc_op_new(FC_OP_EVENT_WAIT);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_event_ref(e);
  op->u.event.ev = e;
  return fc_submit(s, op, 0, 0);
}

FC_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  cuStreamWaitEvent_params p = {hStream, hEvent, Flags};
  FC_ENTER_P(cuStreamWaitEvent, &p);
  FC_RETURN(fc_stream_wait_event(hStream, hEvent, Flags, 0));
}

FC_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  cuStreamWaitEvent_ptsz_params p = {hStream, hEvent, Flags};
  FC_ENTER_P(cuStreamWaitEvent_ptsz, &p);
  FC_RETURN(fc_stream_wait_event(hStream, hEvent, Flags, 1));
}

static CUresult fc_launch_host_func(CUstream h, CUhostFn fn, void *data, int pt) {
  if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  fc_op *op = fc_op_new(FC_OP_HOSTFN);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.host.fn = fn;
  op->u.host.data = data;
  return fc_submit(s, op, 0, 0);
}

FC_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  FC_ENTER(cuLaunchHostFunc);
  FC_RETURN(fc_launch_host_func(hStream, fn, userData, 0));
}

FC_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) {
  FC_ENTER(cuLaunchHostFunc_ptsz);
  FC_RETURN(fc_launch_host_func(hStream, fn, userData, 1));
}

static CUresult fc_add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned flags,
                                int pt) {
  if (cb == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  fc_op *op = fc_op_new(FC_OP_CALLBACK);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.cb.fn = cb;
  op->u.cb.handle = h;
  op->u.cb.data = data;
  /* Stream callbacks cannot be captured (cuLaunchHostFunc can). */
  return fc_submit(s, op, 0, 1);
}

FC_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                       unsigned int flags) {
  FC_ENTER(cuStreamAddCallback);
  FC_RETURN(fc_add_callback(hStream, callback, userData, flags, 0));
}

FC_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                            void *userData, unsigned int flags) {
  FC_ENTER(cuStreamAddCallback_ptsz);
  FC_RETURN(fc_add_callback(hStream, callback, userData, flags, 1));
}

static CUresult fc_stream_get(CUstream h, int pt, fc_stream **s, void *out) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  return fc_stream_resolve(h, pt, s);
}

#define FC_STREAM_GETTER(name, pt, type, expr)           \
  FC_EXPORT CUresult name(CUstream hStream, type *out) { \
    FC_ENTER(name);                                      \
    fc_stream *s;                                        \
    CUresult r = fc_stream_get(hStream, pt, &s, out);    \
    if (r == CUDA_SUCCESS) *out = (expr);                \
    FC_RETURN(r);                                        \
  }

FC_STREAM_GETTER(cuStreamGetCtx, 0, CUcontext, (CUcontext)s->ctx)
FC_STREAM_GETTER(cuStreamGetCtx_ptsz, 1, CUcontext, (CUcontext)s->ctx)
FC_STREAM_GETTER(cuStreamGetFlags, 0, unsigned int, s->flags)
FC_STREAM_GETTER(cuStreamGetFlags_ptsz, 1, unsigned int, s->flags)
FC_STREAM_GETTER(cuStreamGetPriority, 0, int, s->priority)
FC_STREAM_GETTER(cuStreamGetPriority_ptsz, 1, int, s->priority)
/* Process-unique and never reused, as the real driver's are. */
FC_STREAM_GETTER(cuStreamGetId, 0, unsigned long long, s->id)
FC_STREAM_GETTER(cuStreamGetId_ptsz, 1, unsigned long long, s->id)
