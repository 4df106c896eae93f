/*
 * fc_events.c: events.
 *
 * A record is an op in its stream: the event completes when that stream's
 * worker reaches it.  Query and synchronize look at the newest record
 * (generation counters); a stream wait becomes a dependency on the stream
 * position of the newest record at the time of the wait, so re-recording
 * the event later does not release the waiter early.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fc_internal.h"

#define FC_EVENT_DEAD 0x44414544u
/* An event whose context was destroyed or reset: the real driver freed it
 * with the context, and a later call on it reads freed memory (a crash on
 * the H200 host, docs/bench/2026-11-27-a-context-that-ends.md); here it aborts, naming the call. */
#define FC_EVENT_GONE 0x454e4f47u

static pthread_mutex_t fc_events_mu = PTHREAD_MUTEX_INITIALIZER;
static fc_event *fc_events_all;
static atomic_uint fc_event_last_id;

static void fc_event_free(fc_event *e) {
  pthread_mutex_lock(&fc_events_mu);
  if (e->all_prev)
    e->all_prev->all_next = e->all_next;
  else if (fc_events_all == e)
    fc_events_all = e->all_next;
  if (e->all_next) e->all_next->all_prev = e->all_prev;
  pthread_mutex_unlock(&fc_events_mu);
  /* During exit teardown the streams may already be gone. */
  if (e->rec_stream && !atomic_load(&fc_shutdown)) fc_stream_unref(e->rec_stream);
  e->magic = 0;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

void fc_event_ref(fc_event *e) { atomic_fetch_add(&e->refs, 1); }

void fc_event_unref(fc_event *e) {
  if (e && atomic_fetch_sub(&e->refs, 1) == 1) fc_event_free(e);
}

CUresult fc_event_lookup(CUevent h, fc_event **out) {
  fc_event *e = (fc_event *)h;
  if (e != NULL && e->magic == FC_EVENT_GONE) {
    fprintf(stderr,
            "fakecuda: an event of a destroyed context was used: the driver freed it with "
            "the context\n");
    abort();
  }
  if (e == NULL || e->magic != FC_EVENT_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  *out = e;
  return CUDA_SUCCESS;
}

uint64_t fc_event_arm(fc_event *e) {
  pthread_mutex_lock(&e->mu);
  uint64_t g = ++e->rec_gen;
  pthread_mutex_unlock(&e->mu);
  return g;
}

void fc_event_set_pos(fc_event *e, uint64_t gen, fc_stream *s, uint64_t seq) {
  fc_stream *old = NULL;
  pthread_mutex_lock(&e->mu);
  if (gen == e->rec_gen) { /* a newer record may already have landed */
    old = e->rec_stream;
    atomic_fetch_add(&s->refs, 1);
    e->rec_stream = s;
    e->rec_seq = seq;
  }
  pthread_mutex_unlock(&e->mu);
  fc_stream_unref(old);
}

int fc_event_last_record(fc_event *e, fc_stream **s, uint64_t *seq) {
  pthread_mutex_lock(&e->mu);
  int have = e->rec_stream != NULL;
  if (have) {
    atomic_fetch_add(&e->rec_stream->refs, 1);
    *s = e->rec_stream;
    *seq = e->rec_seq;
  }
  pthread_mutex_unlock(&e->mu);
  return have;
}

void fc_event_complete(fc_event *e, uint64_t gen) {
  pthread_mutex_lock(&e->mu);
  if (gen > e->done_gen) {
    e->done_gen = gen;
    e->t_ns = fc_now_ns();
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

void fc_events_wake_all(void) {
  pthread_mutex_lock(&fc_events_mu);
  for (fc_event *e = fc_events_all; e; e = e->all_next) {
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
  }
  pthread_mutex_unlock(&fc_events_mu);
}

void fc_events_fini(void) {
  pthread_mutex_lock(&fc_events_mu);
  fc_event *e = fc_events_all;
  fc_events_all = NULL;
  pthread_mutex_unlock(&fc_events_mu);
  while (e) {
    fc_event *n = e->all_next;
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    e = n;
  }
}

/* ------------------------------------------------------------------ */
/* entry points                                                       */

FC_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  FC_ENTER(cuEventCreate);
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == NULL || (Flags & ~known) ||
      ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
    FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  fc_event *e = calloc(1, sizeof *e);
  if (e == NULL) FC_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
  e->magic = FC_EVENT_MAGIC;
  e->id = atomic_fetch_add(&fc_event_last_id, 1) + 1;
  atomic_init(&e->refs, 1);
  e->flags = Flags;
  e->ctx = c;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  pthread_mutex_lock(&fc_events_mu);
  e->all_next = fc_events_all;
  if (fc_events_all) fc_events_all->all_prev = e;
  fc_events_all = e;
  pthread_mutex_unlock(&fc_events_mu);
  *phEvent = (CUevent)e;
  FC_RETURN(CUDA_SUCCESS);
}

static CUresult fc_event_record(CUevent h, CUstream hs, unsigned flags, int pt) {
  if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  fc_event *e;
  fc_stream *s;
  CUresult r = fc_event_lookup(h, &e);
  if (r == CUDA_SUCCESS) r = fc_stream_resolve(hs, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  /* "hEvent and hStream must be from the same context otherwise
   * CUDA_ERROR_INVALID_HANDLE is returned" (cuEventRecord).  Counted too,
   * so that a test can assert a program (the shim) never tried. */
  if (e->ctx != s->ctx) {
    FC_STAT_ADD(event_ctx_mismatches, 1);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  fc_op *op = fc_op_new(FC_OP_EVENT_RECORD);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_event_ref(e);
  op->u.event.ev = e;
  return fc_submit(s, op, 0, 0);
}

FC_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  FC_ENTER(cuEventRecord);
  FC_RETURN(fc_event_record(hEvent, hStream, 0, 0));
}

FC_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  FC_ENTER(cuEventRecord_ptsz);
  FC_RETURN(fc_event_record(hEvent, hStream, 0, 1));
}

FC_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  FC_ENTER(cuEventRecordWithFlags);
  FC_RETURN(fc_event_record(hEvent, hStream, flags, 0));
}

FC_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                               unsigned int flags) {
  FC_ENTER(cuEventRecordWithFlags_ptsz);
  FC_RETURN(fc_event_record(hEvent, hStream, flags, 1));
}

FC_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  FC_ENTER(cuEventQuery);
  fc_event *e;
  CUresult r = fc_event_lookup(hEvent, &e);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  pthread_mutex_lock(&e->mu);
  r = e->done_gen >= e->rec_gen ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  pthread_mutex_unlock(&e->mu);
  FC_RETURN(r);
}

FC_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  cuEventSynchronize_params p = {hEvent};
  FC_ENTER_P(cuEventSynchronize, &p);
  fc_event *e;
  CUresult r = fc_event_lookup(hEvent, &e);
  if (r != CUDA_SUCCESS) FC_RETURN(r);
  fc_tool_sync(FC_TS_EVENT_SYNCHRONIZE, e->ctx, NULL, e);
  pthread_mutex_lock(&e->mu);
  uint64_t want = e->rec_gen;
  while (e->done_gen < want && !atomic_load(&fc_shutdown)) pthread_cond_wait(&e->cv, &e->mu);
  r = e->done_gen >= want ? CUDA_SUCCESS : CUDA_ERROR_DEINITIALIZED;
  pthread_mutex_unlock(&e->mu);
  FC_RETURN(r);
}

static CUresult fc_elapsed(float *ms, CUevent hs, CUevent he) {
  fc_event *a, *b;
  if (ms == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (fc_event_lookup(hs, &a) != CUDA_SUCCESS || fc_event_lookup(he, &b) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t ta = 0, tb = 0;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&a->mu);
  if (a->rec_gen == 0)
    r = CUDA_ERROR_INVALID_HANDLE;
  else if (a->done_gen < a->rec_gen)
    r = CUDA_ERROR_NOT_READY;
  ta = a->t_ns;
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_lock(&b->mu);
  if (b->rec_gen == 0)
    r = CUDA_ERROR_INVALID_HANDLE;
  else if (r == CUDA_SUCCESS && b->done_gen < b->rec_gen)
    r = CUDA_ERROR_NOT_READY;
  tb = b->t_ns;
  pthread_mutex_unlock(&b->mu);
  if (r == CUDA_SUCCESS) *ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
  return r;
}

FC_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  FC_ENTER(cuEventElapsedTime);
  FC_RETURN(fc_elapsed(pMilliseconds, hStart, hEnd));
}

FC_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  FC_ENTER(cuEventElapsedTime_v2);
  FC_RETURN(fc_elapsed(pMilliseconds, hStart, hEnd));
}

void fc_events_ctx_gone(fc_ctx *c) {
  pthread_mutex_lock(&fc_events_mu);
  for (fc_event *e = fc_events_all; e; e = e->all_next)
    if (e->ctx == c && e->magic == FC_EVENT_MAGIC) e->magic = FC_EVENT_GONE;
  pthread_mutex_unlock(&fc_events_mu);
}

static CUresult fc_event_destroy(CUevent h) {
  fc_event *e;
  CUresult r = fc_event_lookup(h, &e);
  if (r != CUDA_SUCCESS) return r;
  /* A pending record still completes; the memory goes with the last ref. */
  e->magic = FC_EVENT_DEAD;
  fc_event_unref(e);
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuEventDestroy(CUevent hEvent) {
  FC_ENTER(cuEventDestroy);
  FC_RETURN(fc_event_destroy(hEvent));
}

FC_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
  FC_ENTER(cuEventDestroy_v2);
  FC_RETURN(fc_event_destroy(hEvent));
}
