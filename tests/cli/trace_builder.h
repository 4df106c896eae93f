/* trace_builder.h - builds pagelock trace bytes in memory, record by record,
 * for the reader unit tests and the mktrace test tool.  Header-only: both
 * users are single-file programs.  Deliberately allows invalid records
 * (tb_raw) so tests can write every kind of corruption. */
#ifndef PL_TRACE_BUILDER_H
#define PL_TRACE_BUILDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagelock/trace_format.h"

typedef struct tb {
  unsigned char *p;
  size_t len, cap;
  size_t nrec;     /* records appended */
  size_t *offsets; /* start offset of each record, for precise cuts */
  size_t cap_off;
} tb;

static inline void tb_put(tb *b, const void *d, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + n) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
  }
  memcpy(b->p + b->len, d, n);
  b->len += n;
}

static inline void tb_mark(tb *b) {
  if (b->nrec == b->cap_off) {
    b->cap_off = b->cap_off ? b->cap_off * 2 : 64;
    b->offsets = realloc(b->offsets, b->cap_off * sizeof *b->offsets);
    if (!b->offsets) abort();
  }
  b->offsets[b->nrec++] = b->len;
}

static inline void tb_free(tb *b) {
  free(b->p);
  free(b->offsets);
  memset(b, 0, sizeof *b);
}

static inline void tb_header_v(tb *b, uint32_t version, uint32_t header_size, uint64_t pid,
                               uint32_t flags) {
  pagelock_file_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, PAGELOCK_TRACE_MAGIC, 8);
  h.version = version;
  h.header_size = header_size;
  h.pid = pid;
  h.start_realtime_ns = 1700000000000000000ull;
  h.start_mono_ns = 1000000000ull;
  h.flags = flags;
  tb_put(b, &h, sizeof h);
  /* A longer (future) header: zero-filled extension. */
  static const unsigned char zero[64];
  for (uint32_t left = header_size > sizeof h ? header_size - sizeof h : 0; left;) {
    uint32_t k = left < sizeof zero ? left : sizeof zero;
    tb_put(b, zero, k);
    left -= k;
  }
}

static inline void tb_header(tb *b, uint64_t pid, uint32_t flags) {
  tb_header_v(b, PAGELOCK_TRACE_VERSION, sizeof(pagelock_file_header), pid, flags);
}

/* Appends fixed (whose first 8 bytes are the record header, filled here)
 * followed by NUL-terminated strings, padded to 8. */
static inline void tb_rec(tb *b, uint32_t type, void *fixed, size_t fixed_size, const char *s1,
                          const char *s2) {
  size_t l1 = s1 ? strlen(s1) + 1 : 0, l2 = s2 ? strlen(s2) + 1 : 0;
  size_t size = (fixed_size + l1 + l2 + 7) & ~(size_t)7;
  pagelock_rec_hdr *h = fixed;
  h->type = type;
  h->size = (uint32_t)size;
  tb_mark(b);
  tb_put(b, fixed, fixed_size);
  if (s1) tb_put(b, s1, l1);
  if (s2) tb_put(b, s2, l2);
  static const unsigned char zero[8];
  tb_put(b, zero, size - fixed_size - l1 - l2);
}

/* A record with arbitrary header values and body: for corruption. */
static inline void tb_raw(tb *b, uint32_t type, uint32_t size, const void *body, size_t body_len) {
  pagelock_rec_hdr h = {type, size};
  tb_mark(b);
  tb_put(b, &h, sizeof h);
  if (body_len) tb_put(b, body, body_len);
}

static inline void tb_process(tb *b, const char *exe, const char *host, uint32_t mode,
                              int32_t rank) {
  pagelock_rec_process r;
  memset(&r, 0, sizeof r);
  r.ppid = 1;
  r.mode = mode;
  r.rank = rank;
  tb_rec(b, PAGELOCK_REC_PROCESS, &r, sizeof r, exe, host);
}

typedef struct tb_copy_args {
  uint64_t start_ns, host_ns, bytes, callsite, host_ptr, stream;
  uint32_t stack_id, alloc_stack_id, flags;
  int32_t result;
  uint8_t dir, host_mem;
  uint16_t api;
  /* Version 2.  seq: the COPY's correlation (0: the record index, as
   * before); gpu_correlation: the CUPTI id its GPU op carries. */
  uint64_t seq;
  uint32_t gpu_correlation;
  int v1;         /* write a 96-byte version-1 record */
  uint8_t why;    /* version 3: pagelock_why */
  int32_t device; /* the COPY's device (0, the one device, unless set) */
  /* Version 4: a run of count copies, timed of them timed (count 0: one
   * copy, timed, as every record of older versions).  host_ns is then the
   * run's total, bytes each copy's. */
  uint32_t count, timed;
  int v3; /* write a 104-byte record of versions 2 and 3, without count */
} tb_copy_args;

/* Bytes of a COPY record of versions 2 and 3: it ends before count. */
#define TB_COPY_V3_SIZE offsetof(pagelock_rec_copy, count)

static inline void tb_copy(tb *b, const tb_copy_args *a) {
  pagelock_rec_copy r;
  memset(&r, 0, sizeof r);
  r.start_ns = a->start_ns;
  r.host_ns = a->host_ns;
  r.bytes = a->bytes;
  r.stream = a->stream;
  r.host_ptr = a->host_ptr;
  r.callsite = a->callsite;
  r.correlation = b->nrec;
  r.tid = 42;
  r.stack_id = a->stack_id;
  r.alloc_stack_id = a->alloc_stack_id;
  r.flags = a->flags;
  r.result = a->result;
  r.device = a->device;
  r.api = a->api;
  r.dir = a->dir;
  r.host_mem = a->host_mem;
  r.src_mem = a->dir == PAGELOCK_DIR_H2D ? a->host_mem : PAGELOCK_MEM_DEVICE;
  r.dst_mem = a->dir == PAGELOCK_DIR_D2H ? a->host_mem : PAGELOCK_MEM_DEVICE;
  if (a->seq) r.correlation = a->seq;
  r.gpu_correlation = a->gpu_correlation;
  r.why = a->why;
  r.count = a->count ? a->count : 1;
  r.timed = a->count ? a->timed : 1;
  size_t size = a->v1 ? PAGELOCK_REC_COPY_V1_SIZE : a->v3 ? TB_COPY_V3_SIZE : sizeof r;
  tb_rec(b, PAGELOCK_REC_COPY, &r, size, NULL, NULL);
}

/* One GPU record (times in CUPTI's clock). */
typedef struct tb_gpu_args {
  uint64_t start_ns, end_ns, bytes;
  uint32_t correlation, stream, device, context, name_id, flags, thread;
  uint8_t kind, copy_kind, src_kind, dst_kind;
} tb_gpu_args;

static inline void tb_gpu(tb *b, const tb_gpu_args *a) {
  pagelock_rec_gpu r;
  memset(&r, 0, sizeof r);
  r.start_ns = a->start_ns;
  r.end_ns = a->end_ns;
  r.bytes = a->bytes;
  r.correlation = a->correlation;
  r.stream = a->stream;
  r.device = a->device;
  r.context = a->context;
  r.name_id = a->name_id;
  r.flags = a->flags;
  r.kind = a->kind;
  r.copy_kind = a->copy_kind;
  r.src_kind = a->src_kind;
  r.dst_kind = a->dst_kind;
  r.thread = a->thread;
  tb_rec(b, PAGELOCK_REC_GPU, &r, sizeof r, NULL, NULL);
}

/* A kernel on (device, stream). */
static inline void tb_kernel(tb *b, uint32_t device, uint32_t stream, uint64_t start, uint64_t end,
                             uint32_t name_id) {
  tb_gpu_args g = {0};
  g.kind = PAGELOCK_GPU_KERNEL;
  g.device = device;
  g.stream = stream;
  g.start_ns = start;
  g.end_ns = end;
  g.name_id = name_id;
  tb_gpu(b, &g);
}

/* A GPU memcpy: H2D from host memory kind hmem, or D2H into it. */
static inline void tb_gpu_copy(tb *b, uint32_t device, uint32_t stream, int h2d, uint8_t hmem,
                               uint64_t bytes, uint64_t start, uint64_t end, uint32_t corr,
                               int async) {
  tb_gpu_args g = {0};
  g.kind = PAGELOCK_GPU_MEMCPY;
  g.device = device;
  g.stream = stream;
  g.copy_kind = h2d ? PAGELOCK_GPU_COPY_HTOD : PAGELOCK_GPU_COPY_DTOH;
  g.src_kind = h2d ? hmem : PAGELOCK_GPU_MEM_DEVICE;
  g.dst_kind = h2d ? PAGELOCK_GPU_MEM_DEVICE : hmem;
  g.bytes = bytes;
  g.start_ns = start;
  g.end_ns = end;
  g.correlation = corr;
  g.flags = async ? PAGELOCK_GPU_ASYNC : 0;
  tb_gpu(b, &g);
}

static inline void tb_name(tb *b, uint32_t id, const char *name) {
  pagelock_rec_name r;
  memset(&r, 0, sizeof r);
  r.id = id;
  tb_rec(b, PAGELOCK_REC_NAME, &r, sizeof r, name, NULL);
}

static inline void tb_link(tb *b, uint32_t correlation, uint64_t copy_seq) {
  pagelock_rec_link r;
  memset(&r, 0, sizeof r);
  r.correlation = correlation;
  r.copy_seq = copy_seq;
  tb_rec(b, PAGELOCK_REC_LINK, &r, sizeof r, NULL, NULL);
}

static inline void tb_clock(tb *b, uint64_t cupti_ns, uint64_t mono_ns) {
  pagelock_rec_clock r;
  memset(&r, 0, sizeof r);
  r.cupti_ns = cupti_ns;
  r.mono_ns = mono_ns;
  tb_rec(b, PAGELOCK_REC_CLOCK, &r, sizeof r, NULL, NULL);
}

static inline void tb_device(tb *b, uint32_t device, uint32_t copy_engines, uint32_t sm_count,
                             const char *name) {
  pagelock_rec_device r;
  memset(&r, 0, sizeof r);
  r.device = device;
  r.copy_engines = copy_engines;
  r.sm_count = sm_count;
  tb_rec(b, PAGELOCK_REC_DEVICE, &r, sizeof r, name, NULL);
}

static inline void tb_gpu_status(tb *b, uint32_t status, uint64_t records, uint64_t dropped,
                                 const char *reason) {
  pagelock_rec_gpu_status r;
  memset(&r, 0, sizeof r);
  r.status = status;
  r.cupti_version = 130001;
  r.records = records;
  r.dropped = dropped;
  r.buffers = records ? 1 : 0;
  tb_rec(b, PAGELOCK_REC_GPU_STATUS, &r, sizeof r, reason ? reason : "", NULL);
}

/* A GPU_SAMPLE: the shim paused (on 0, at ops_per_s operations a second)
 * or resumed (on 1) CUPTI's tracing at mono_ns. */
static inline void tb_gpu_sample(tb *b, uint64_t mono_ns, uint32_t on, uint32_t ops_per_s) {
  pagelock_rec_gpu_sample r;
  memset(&r, 0, sizeof r);
  r.mono_ns = mono_ns;
  r.on = on;
  r.ops_per_s = ops_per_s;
  tb_rec(b, PAGELOCK_REC_GPU_SAMPLE, &r, sizeof r, NULL, NULL);
}

static inline void tb_stack(tb *b, uint32_t id, const uint64_t *frames, uint32_t depth) {
  struct {
    pagelock_rec_stack r;
    uint64_t f[PAGELOCK_MAX_FRAMES];
  } s;
  memset(&s, 0, sizeof s);
  s.r.id = id;
  s.r.depth = depth;
  memcpy(s.f, frames, (depth <= PAGELOCK_MAX_FRAMES ? depth : 0) * 8);
  tb_rec(b, PAGELOCK_REC_STACK, &s, sizeof s.r + 8 * (depth <= PAGELOCK_MAX_FRAMES ? depth : 0),
         NULL, NULL);
}

static inline void tb_module(tb *b, uint64_t base, uint64_t start, uint64_t end, const char *path) {
  pagelock_rec_module m;
  memset(&m, 0, sizeof m);
  m.base = base;
  m.start = start;
  m.end = end;
  tb_rec(b, PAGELOCK_REC_MODULE, &m, sizeof m, path, NULL);
}

static inline void tb_symbol(tb *b, uint64_t addr, uint64_t sym_addr, const char *name) {
  pagelock_rec_symbol s;
  memset(&s, 0, sizeof s);
  s.addr = addr;
  s.sym_addr = sym_addr;
  tb_rec(b, PAGELOCK_REC_SYMBOL, &s, sizeof s, name, NULL);
}

static inline void tb_note(tb *b, uint32_t kind, const char *text) {
  pagelock_rec_note n;
  memset(&n, 0, sizeof n);
  n.kind = kind;
  tb_rec(b, PAGELOCK_REC_NOTE, &n, sizeof n, text, NULL);
}

static inline void tb_counters(tb *b, const pagelock_rec_counters *c) {
  pagelock_rec_counters r = *c;
  tb_rec(b, PAGELOCK_REC_COUNTERS, &r, sizeof r, NULL, NULL);
}

/* A COST record of `size` bytes (sizeof: a whole one; less: malformed). */
static inline void tb_cost(tb *b, const pagelock_rec_cost *c, size_t size) {
  pagelock_rec_cost r = *c;
  tb_rec(b, PAGELOCK_REC_COST, &r, size < sizeof r ? size : sizeof r, NULL, NULL);
}

static inline void tb_end(tb *b, uint64_t end_mono_ns) {
  pagelock_rec_end e;
  memset(&e, 0, sizeof e);
  e.end_mono_ns = end_mono_ns;
  e.records = b->nrec;
  tb_rec(b, PAGELOCK_REC_END, &e, sizeof e, NULL, NULL);
}

/* Closes the block that started at file offset *start (header_size for the
 * first) with a CHECK record over the bytes since, as a writer of a
 * PAGELOCK_FILE_CHECKSUMS trace does after each buffer, and moves *start
 * past it.  base is the file offset of b->p[0] (0 unless the builder's
 * bytes were flushed to a file). */
static inline void tb_check_at(tb *b, uint64_t base, uint64_t *start) {
  pagelock_rec_check c;
  memset(&c, 0, sizeof c);
  c.start = *start;
  c.crc32c = pagelock_crc32c(0, b->p + (*start - base), b->len - (size_t)(*start - base));
  tb_rec(b, PAGELOCK_REC_CHECK, &c, sizeof c, NULL, NULL);
  *start = base + b->len;
}

static inline void tb_check(tb *b, uint64_t *start) { tb_check_at(b, 0, start); }

/* dst = src (a version-3 trace) as a checksummed trace: the CHECKSUMS
 * flag set and a CHECK record after every `every` records of src and after
 * its last.  starts[] (when not NULL) gets the file offset of each block,
 * *nblocks (when not NULL) their number; src->offsets must be complete
 * (nothing flushed). */
static inline void tb_checksum(const tb *src, size_t every, tb *dst, uint64_t *starts,
                               size_t *nblocks) {
  memset(dst, 0, sizeof *dst);
  pagelock_file_header h;
  memcpy(&h, src->p, sizeof h);
  h.flags |= PAGELOCK_FILE_CHECKSUMS;
  tb_put(dst, &h, sizeof h);
  uint64_t start = dst->len;
  size_t nb = 0;
  if (every == 0) every = 1;
  for (size_t i = 0; i < src->nrec; i++) {
    size_t end = i + 1 < src->nrec ? src->offsets[i + 1] : src->len;
    if (i % every == 0) {
      if (starts) starts[nb] = start;
      nb++;
    }
    tb_mark(dst);
    tb_put(dst, src->p + src->offsets[i], end - src->offsets[i]);
    if ((i + 1) % every == 0 || i + 1 == src->nrec) tb_check(dst, &start);
  }
  if (nblocks) *nblocks = nb;
}

/* Writes the first len bytes of b to path; returns 0 on success. */
static inline int tb_write(const tb *b, size_t len, const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = len ? fwrite(b->p, 1, len, f) : 0;
  return (fclose(f) == 0 && w == len) ? 0 : -1;
}

#endif
