/*
 * cupti_buffers.c: activity buffers the way CUPTI handles them.
 *
 * Records go into buffers the client hands out from its bufferRequested
 * callback and come back through bufferCompleted:
 *  - a GPU record (memcpy, memset, kernel) is written when its op is
 *    queued, in API order, with zero timestamps, and stays incomplete
 *    until the stream worker has run the op (cpt_slot_complete);
 *  - a buffer is full when its maxNumRecords (or FAKECUPTI_BUFFER_RECORDS)
 *    is reached or fewer bytes remain than the largest record; a full
 *    buffer whose records are all complete goes back on the CUPTI worker
 *    thread;
 *  - cuptiActivityFlushAll(0) hands back every buffer whose records are
 *    complete, the partly filled current one included; with
 *    CUPTI_ACTIVITY_FLAG_FLUSH_FORCED every buffer, incomplete records
 *    (zero timestamps) included.  It returns once they are delivered, but
 *    the worker delivers them: measured on CUPTI 13, bufferCompleted never
 *    runs on the thread that flushes (so a client that flushes while
 *    holding a lock its bufferCompleted takes deadlocks, here as there);
 *  - no buffer (NULL or too small an answer), or no callbacks registered:
 *    the record is dropped and counted for cuptiActivityGetNumDroppedRecords.
 * The flush period only sets how often the worker looks without being
 * woken: as in CUPTI, periodic delivery is of full, complete buffers only.
 *
 * Appending takes one short lock; the client's bufferRequested runs with
 * only the request lock held (one request at a time), bufferCompleted with
 * no lock held.
 */
#define _GNU_SOURCE /* pthread_setname_np, pthread_timedjoin_np */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti_internal.h"

/* The largest record this library writes: less room than that left and
 * the buffer counts as full. */
#define CPT_MAX_RECORD sizeof(CUpti_ActivityKernel10)
#define CPT_ALIGN 8 /* ACTIVITY_RECORD_ALIGNMENT */

struct cpt_buf {
  uint8_t *base;
  size_t size, used;
  size_t nrec, max; /* max 0: no limit */
  int pending;      /* records still waiting for their timestamps */
  int retired;      /* full or flushed: no more appends; in the queue */
  int delivered;    /* taken for bufferCompleted: never written again */
  int returned;     /* bufferCompleted returned: free once pending is 0 */
  int forced;       /* a forced flush wants it, complete or not */
  int flush_wait;   /* a flush waits for its delivery */
  struct cpt_buf *next;
};

static pthread_mutex_t cpt_mu = PTHREAD_MUTEX_INITIALIZER;     /* everything below */
static pthread_mutex_t cpt_req_mu = PTHREAD_MUTEX_INITIALIZER; /* one bufferRequested at a time */
static pthread_cond_t cpt_work_cv = PTHREAD_COND_INITIALIZER;  /* worker: something to deliver */
static pthread_cond_t cpt_idle_cv = PTHREAD_COND_INITIALIZER;  /* worker deliveries finished */
static struct cpt_buf *cpt_cur;
static struct cpt_buf *cpt_q_head, *cpt_q_tail; /* retired, not yet delivered, in order */
static size_t cpt_dropped;
static int cpt_delivering; /* deliveries by the worker in progress */
static uint32_t cpt_period_ms;
static CUpti_BuffersCallbackRequestFunc cpt_req_fn;
static CUpti_BuffersCallbackCompleteFunc cpt_done_fn;

static pthread_t cpt_worker;
static int cpt_worker_running;
static unsigned cpt_worker_gen; /* a worker exits when this moves on */

__thread int cpt_tls_in_buf_cb;

/* ------------------------------------------------------------------ */
/* buffer state (cpt_mu held)                                         */

static void cpt_retire_locked(struct cpt_buf *b) {
  b->retired = 1;
  b->next = NULL;
  if (cpt_q_tail)
    cpt_q_tail->next = b;
  else
    cpt_q_head = b;
  cpt_q_tail = b;
  pthread_cond_signal(&cpt_work_cv);
}

static void cpt_retire_cur_locked(void) {
  if (cpt_cur) {
    cpt_retire_locked(cpt_cur);
    cpt_cur = NULL;
  }
}

static int cpt_fits(const struct cpt_buf *b, size_t size) {
  return b != NULL && !b->retired && size <= b->size - b->used && (b->max == 0 || b->nrec < b->max);
}

static void cpt_put_locked(const void *rec, size_t size, struct cpt_slot *slot) {
  struct cpt_buf *b = cpt_cur;
  memcpy(b->base + b->used, rec, size);
  if (slot) {
    slot->buf = b;
    slot->off = b->used;
    b->pending++;
  }
  b->used += size;
  b->nrec++;
  if ((b->max != 0 && b->nrec >= b->max) || b->size - b->used < CPT_MAX_RECORD)
    cpt_retire_cur_locked();
}

/* The first queued buffer that may go back now. */
static struct cpt_buf *cpt_take_locked(int forced, CUpti_BuffersCallbackCompleteFunc *fn) {
  struct cpt_buf *prev = NULL;
  for (struct cpt_buf *b = cpt_q_head; b; prev = b, b = b->next) {
    if (!forced && !b->forced && b->pending > 0) continue;
    if (prev)
      prev->next = b->next;
    else
      cpt_q_head = b->next;
    if (cpt_q_tail == b) cpt_q_tail = prev;
    b->next = NULL;
    b->delivered = 1;
    *fn = cpt_done_fn;
    return b;
  }
  return NULL;
}

static void cpt_free_if_done_locked(struct cpt_buf *b) {
  if (b->returned && b->pending == 0) free(b);
}

/* Hand b back to the client; no lock held. */
static void cpt_deliver(struct cpt_buf *b, CUpti_BuffersCallbackCompleteFunc fn) {
  if (fn) {
    cpt_tls_in_buf_cb++;
    /* context and streamId: always NULL and 0 since CUDA 6 (global buffers) */
    fn(NULL, 0, b->base, b->size, b->used);
    cpt_tls_in_buf_cb--;
  }
  pthread_mutex_lock(&cpt_mu);
  b->returned = 1;
  cpt_free_if_done_locked(b);
  pthread_mutex_unlock(&cpt_mu);
}

/* ------------------------------------------------------------------ */
/* appending                                                          */

static void cpt_overhead_locked(uint64_t start, uint64_t end) {
  if (!cpt_kind_on(CUPTI_ACTIVITY_KIND_OVERHEAD)) return;
  CUpti_ActivityOverhead3 o;
  memset(&o, 0, sizeof o);
  o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST;
  o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  o.objectId.pt.processId = (uint32_t)getpid();
  o.objectId.pt.threadId = (uint32_t)pthread_self(); /* CUPTI's default thread id type */
  o.start = start;
  o.end = end;
  if (cpt_fits(cpt_cur, sizeof o)) cpt_put_locked(&o, sizeof o, NULL);
}

int cpt_emit(const void *rec, size_t size, struct cpt_slot *slot) {
  if (slot) slot->buf = NULL;
  pthread_mutex_lock(&cpt_mu);
  if (cpt_req_fn == NULL) {
    cpt_dropped++;
    pthread_mutex_unlock(&cpt_mu);
    return -1;
  }
  if (cpt_fits(cpt_cur, size)) {
    cpt_put_locked(rec, size, slot);
    pthread_mutex_unlock(&cpt_mu);
    return 0;
  }
  pthread_mutex_unlock(&cpt_mu);

  /* Needs a buffer.  Only one thread asks the client at a time; the
   * others wait here and then find the new buffer installed. */
  int rc = 0;
  pthread_mutex_lock(&cpt_req_mu);
  pthread_mutex_lock(&cpt_mu);
  if (cpt_fits(cpt_cur, size)) {
    cpt_put_locked(rec, size, slot);
  } else {
    cpt_retire_cur_locked();
    CUpti_BuffersCallbackRequestFunc req = cpt_req_fn;
    pthread_mutex_unlock(&cpt_mu);
    uint8_t *base = NULL;
    size_t bsize = 0, maxr = 0;
    uint64_t t0 = cpt_now();
    if (req) {
      cpt_tls_in_buf_cb++;
      req(&base, &bsize, &maxr);
      cpt_tls_in_buf_cb--;
    }
    uint64_t t1 = cpt_now();
    pthread_mutex_lock(&cpt_mu);
    if (base != NULL && bsize != 0) {
      struct cpt_buf *b = calloc(1, sizeof *b);
      if (b != NULL) {
        b->base = base;
        b->size = bsize;
        b->max = maxr;
        if (cpt_buffer_records && (b->max == 0 || b->max > cpt_buffer_records))
          b->max = cpt_buffer_records;
        if ((uintptr_t)base % CPT_ALIGN != 0) {
          /* CUPTI requires ACTIVITY_RECORD_ALIGNMENT: a client
           * bug.  The buffer goes straight back, empty. */
          static int warned;
          if (!warned++)
            fprintf(stderr,
                    "fakecupti: activity buffer %p is not %d-byte aligned; records dropped\n",
                    (void *)base, CPT_ALIGN);
          cpt_retire_locked(b);
        } else {
          cpt_cur = b;
          /* The request itself, as CUPTI reports it. */
          cpt_overhead_locked(t0, t1);
        }
      }
    }
    if (cpt_fits(cpt_cur, size)) {
      cpt_put_locked(rec, size, slot);
    } else {
      /* No buffer, or one too small for this record: a buffer
       * with nothing in it goes back at the next flush. */
      cpt_retire_cur_locked();
      cpt_dropped++;
      rc = -1;
    }
  }
  pthread_mutex_unlock(&cpt_mu);
  pthread_mutex_unlock(&cpt_req_mu);
  return rc;
}

static void cpt_slot_finish_locked(struct cpt_slot *s) {
  struct cpt_buf *b = s->buf;
  s->done = 1;
  b->pending--;
  if (b->returned)
    cpt_free_if_done_locked(b);
  else if (b->retired && !b->delivered && b->pending == 0)
    pthread_cond_signal(&cpt_work_cv);
}

void cpt_slot_complete(struct cpt_slot *s, uint64_t start, uint64_t end) {
  if (s->buf == NULL || s->done) return;
  pthread_mutex_lock(&cpt_mu);
  struct cpt_buf *b = s->buf;
  /* A forced flush may have handed the buffer back already: the client
   * owns it now and the record stays as it was delivered. */
  if (!b->delivered) {
    memcpy(b->base + s->off + s->start_off, &start, sizeof start);
    memcpy(b->base + s->off + s->end_off, &end, sizeof end);
    if (s->completed_off) memcpy(b->base + s->off + s->completed_off, &end, sizeof end);
  }
  cpt_slot_finish_locked(s);
  pthread_mutex_unlock(&cpt_mu);
}

void cpt_slot_abandon(struct cpt_slot *s) {
  if (s->buf == NULL || s->done) return;
  pthread_mutex_lock(&cpt_mu);
  cpt_slot_finish_locked(s);
  pthread_mutex_unlock(&cpt_mu);
}

/* ------------------------------------------------------------------ */
/* flushing                                                           */

void cpt_set_buffer_callbacks(CUpti_BuffersCallbackRequestFunc req,
                              CUpti_BuffersCallbackCompleteFunc done) {
  pthread_mutex_lock(&cpt_mu);
  cpt_req_fn = req;
  cpt_done_fn = done;
  pthread_mutex_unlock(&cpt_mu);
}

int cpt_have_buffer_callbacks(void) {
  pthread_mutex_lock(&cpt_mu);
  int have = cpt_done_fn != NULL;
  pthread_mutex_unlock(&cpt_mu);
  return have;
}

void cpt_set_flush_period(uint32_t ms) {
  pthread_mutex_lock(&cpt_mu);
  cpt_period_ms = ms;
  pthread_cond_signal(&cpt_work_cv);
  pthread_mutex_unlock(&cpt_mu);
}

CUptiResult cpt_flush_all(uint32_t flag) {
  int forced = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;
  pthread_mutex_lock(&cpt_mu);
  if (cpt_done_fn == NULL) {
    pthread_mutex_unlock(&cpt_mu);
    return CUPTI_ERROR_INVALID_OPERATION;
  }
  /* The current buffer goes too, not full: all of it if forced, else
   * only if every record in it is complete. */
  if (cpt_cur && cpt_cur->nrec > 0 && (forced || cpt_cur->pending == 0)) cpt_retire_cur_locked();
  /* Mark what this flush hands back and let the worker deliver it;
   * blocking, as documented, until it has, and until any delivery the
   * worker had already begun has returned. */
  int marked = 0;
  for (struct cpt_buf *b = cpt_q_head; b; b = b->next) {
    if (forced || b->pending == 0) {
      b->forced |= forced;
      b->flush_wait = 1;
      marked = 1;
    }
  }
  pthread_cond_signal(&cpt_work_cv);
  for (;;) {
    /* No worker (stopped at exit or by cuptiFinalize, or gone with a
     * fork), or called from a buffer callback, maybe the worker's own:
     * deliver here rather than wait for nobody. */
    if (!cpt_worker_running || cpt_tls_in_buf_cb) {
      CUpti_BuffersCallbackCompleteFunc fn;
      struct cpt_buf *b = cpt_take_locked(forced, &fn);
      if (b == NULL) break;
      pthread_mutex_unlock(&cpt_mu);
      cpt_deliver(b, fn);
      pthread_mutex_lock(&cpt_mu);
      continue;
    }
    int waiting = 0;
    for (struct cpt_buf *b = cpt_q_head; b && marked; b = b->next) waiting |= b->flush_wait;
    if (!waiting && cpt_delivering == 0) break;
    pthread_cond_wait(&cpt_idle_cv, &cpt_mu);
  }
  pthread_mutex_unlock(&cpt_mu);
  return CUPTI_SUCCESS;
}

size_t cpt_take_dropped(void) {
  pthread_mutex_lock(&cpt_mu);
  size_t n = cpt_dropped;
  cpt_dropped = 0;
  pthread_mutex_unlock(&cpt_mu);
  return n;
}

void cpt_add_dropped(size_t n) {
  pthread_mutex_lock(&cpt_mu);
  cpt_dropped += n;
  pthread_mutex_unlock(&cpt_mu);
}

/* ------------------------------------------------------------------ */
/* the CUPTI worker thread                                            */

static void *cpt_worker_main(void *arg) {
  unsigned gen = (unsigned)(uintptr_t)arg;
  pthread_setname_np(pthread_self(), "fakecupti");
  pthread_mutex_lock(&cpt_mu);
  while (cpt_worker_gen == gen) {
    CUpti_BuffersCallbackCompleteFunc fn;
    struct cpt_buf *b = cpt_take_locked(0, &fn);
    if (b != NULL) {
      cpt_delivering++;
      pthread_mutex_unlock(&cpt_mu);
      cpt_deliver(b, fn);
      pthread_mutex_lock(&cpt_mu);
      if (--cpt_delivering == 0) pthread_cond_broadcast(&cpt_idle_cv);
      continue;
    }
    if (cpt_period_ms == 0) {
      pthread_cond_wait(&cpt_work_cv, &cpt_mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)cpt_period_ms * 1000000ull;
      ts.tv_sec += (time_t)(ns / 1000000000ull);
      ts.tv_nsec = (long)(ns % 1000000000ull);
      pthread_cond_timedwait(&cpt_work_cv, &cpt_mu, &ts);
    }
  }
  pthread_mutex_unlock(&cpt_mu);
  return NULL;
}

void cpt_worker_start(void) {
  pthread_mutex_lock(&cpt_mu);
  if (!cpt_worker_running) {
    /* The worker must not take the application's signals.  With
     * FAKECUPTI_WORKER_SIGNALS=inherit it keeps its creator's mask, as a
     * CUPTI that blocks nothing itself would: tests of what the shim's
     * own calls hand it. */
    const char *ws = getenv("FAKECUPTI_WORKER_SIGNALS");
    int inherit = ws && strcmp(ws, "inherit") == 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(inherit ? SIG_BLOCK : SIG_SETMASK, inherit ? NULL : &all, &old);
    unsigned gen = ++cpt_worker_gen;
    if (pthread_create(&cpt_worker, NULL, cpt_worker_main, (void *)(uintptr_t)gen) == 0)
      cpt_worker_running = 1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  pthread_mutex_unlock(&cpt_mu);
}

void cpt_worker_stop(void) {
  pthread_mutex_lock(&cpt_mu);
  if (!cpt_worker_running) {
    pthread_mutex_unlock(&cpt_mu);
    return;
  }
  cpt_worker_running = 0;
  cpt_worker_gen++;
  pthread_t t = cpt_worker;
  pthread_cond_broadcast(&cpt_work_cv);
  /* A flush waiting for the worker delivers by itself now. */
  pthread_cond_broadcast(&cpt_idle_cv);
  pthread_mutex_unlock(&cpt_mu);
  if (pthread_equal(t, pthread_self())) {
    /* cuptiFinalize from inside bufferCompleted: the worker leaves
     * its loop when the callback returns. */
    pthread_detach(t);
    return;
  }
  /* Bounded: a worker stuck in the client's bufferCompleted must not
   * hang exit. */
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 2;
  if (pthread_timedjoin_np(t, NULL, &dl) != 0) pthread_detach(t);
}

void cpt_buffers_atfork_child(void) {
  /* Only the forking thread exists in the child; whatever lock another
   * thread held at fork time stays held forever unless re-created. */
  pthread_mutex_init(&cpt_mu, NULL);
  pthread_mutex_init(&cpt_req_mu, NULL);
  pthread_cond_init(&cpt_work_cv, NULL);
  pthread_cond_init(&cpt_idle_cv, NULL);
  cpt_worker_running = 0;
  cpt_delivering = 0;
}

/* ------------------------------------------------------------------ */
/* walking a buffer                                                   */

/* Size of the records of a kind, as this library writes them; 0 for a
 * kind it never writes (cuptiActivityGetNextRecord: INVALID_KIND). */
static size_t cpt_record_size(uint32_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    default: return 0;
  }
}

/*
 * Semantics measured on the real libcupti.so.13 (13.0): NULL buffer or
 * record pointer: INVALID_PARAMETER; next offset at or past validSize, or
 * a record running past it: MAX_LIMIT_REACHED; an unknown kind:
 * INVALID_KIND; *record is left alone on every error.
 */
CPT_API CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                               CUpti_Activity **record) {
  if (buffer == NULL || record == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t off = 0;
  if (*record != NULL) {
    uintptr_t cur = (uintptr_t)*record, base = (uintptr_t)buffer;
    if (cur < base || cur - base >= validBufferSizeBytes) return CUPTI_ERROR_INVALID_PARAMETER;
    uint32_t k;
    memcpy(&k, buffer + (cur - base), sizeof k);
    size_t sz = cpt_record_size(k);
    if (sz == 0) return CUPTI_ERROR_INVALID_KIND;
    off = (size_t)(cur - base) + sz;
  }
  if (off >= validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  if (validBufferSizeBytes - off < sizeof(uint32_t)) return CUPTI_ERROR_INVALID_KIND;
  uint32_t kind;
  memcpy(&kind, buffer + off, sizeof kind);
  size_t sz = cpt_record_size(kind);
  if (sz == 0) return CUPTI_ERROR_INVALID_KIND;
  if (sz > validBufferSizeBytes - off) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = (CUpti_Activity *)(void *)(buffer + off);
  return CUPTI_SUCCESS;
}
