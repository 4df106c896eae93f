/*
 * cupti_internal.h: shared by the two files of the fake libcupti.so.13
 * (cupti.c: the API, callbacks and records; cupti_buffers.c: the activity
 * buffers, their delivery and the record walker).
 */
#ifndef CUPTI_INTERNAL_H
#define CUPTI_INTERNAL_H

#include <cupti.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fc_tool.h"

/* Exported: the CUPTI API is this library's interface (cupti.map names
 * every export and gives it the real library's symbol version). */
#define CPT_API __attribute__((visibility("default")))

/* ---- cupti.c ----------------------------------------------------------- */

/* The CUPTI clock: the client's timestamp callback, else CLOCK_REALTIME. */
uint64_t cpt_now(void);
/* Activity kind enabled (any thread, lock-free). */
int cpt_kind_on(CUpti_ActivityKind k);
/* FAKECUPTI_BUFFER_RECORDS: at most this many records per buffer (0: no cap). */
extern size_t cpt_buffer_records;
/* Nesting depth of buffer callbacks on this thread: driver calls made from
 * inside bufferRequested/bufferCompleted are not traced at all (they would
 * otherwise need the buffer they are being asked for). */
extern __thread int cpt_tls_in_buf_cb;

/* ---- cupti_buffers.c ---------------------------------------------------- */

struct cpt_buf;

/* Where a GPU record waits for its timestamps: start and end (and, for
 * kernels, completed) are written when the op has run. */
struct cpt_slot {
  struct cpt_buf *buf; /* NULL: the record was dropped */
  size_t off;
  uint16_t start_off, end_off, completed_off; /* completed_off 0: none */
  uint8_t done;
};

/*
 * Append a record to the current buffer, asking the client for a new one
 * when it is full.  slot != NULL: the record is incomplete until
 * cpt_slot_complete/cpt_slot_abandon.  Returns 0, or -1 when the record was
 * dropped (and counted).
 */
int cpt_emit(const void *rec, size_t size, struct cpt_slot *slot);
void cpt_slot_complete(struct cpt_slot *s, uint64_t start, uint64_t end);
/* The op will never run (freed by the driver): its record keeps zero
 * timestamps, the buffer stops waiting for it. */
void cpt_slot_abandon(struct cpt_slot *s);

void cpt_set_buffer_callbacks(CUpti_BuffersCallbackRequestFunc req,
                              CUpti_BuffersCallbackCompleteFunc done);
int cpt_have_buffer_callbacks(void);
void cpt_set_flush_period(uint32_t ms);
CUptiResult cpt_flush_all(uint32_t flag);
size_t cpt_take_dropped(void);
void cpt_add_dropped(size_t n);
/* The CUPTI worker thread that delivers full buffers. */
void cpt_worker_start(void);
void cpt_worker_stop(void);
/* After fork, in the child: no worker, fresh locks. */
void cpt_buffers_atfork_child(void);

#endif /* CUPTI_INTERNAL_H */
