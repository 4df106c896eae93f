/* trace_read.c - framing and validation of the pagelock trace stream. */
#include "trace_read.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Reads exactly n bytes unless the stream ends first; returns bytes read so
 * callers can tell a clean end (0) from a truncation (0 < got < n). */
static size_t plr_read_full(FILE *f, void *dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t k = fread((char *)dst + got, 1, n - got, f);
    if (k == 0) break;
    got += k;
  }
  return got;
}

/* Discards n bytes (the unknown tail of a longer future header).  Returns 0
 * when all were skipped. */
static int plr_skip(FILE *f, size_t n) {
  char tmp[256];
  while (n > 0) {
    size_t k = n < sizeof tmp ? n : sizeof tmp;
    if (plr_read_full(f, tmp, k) != k) return -1;
    n -= k;
  }
  return 0;
}

plr_open_status plr_open(plr_reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  FILE *f = fopen(path, "rb");
  if (!f) {
    r->errnum = errno;
    return PLR_OPEN_ERRNO;
  }
  return plr_open_stream(r, f);
}

plr_open_status plr_open_stream(plr_reader *r, FILE *f) {
  memset(r, 0, sizeof *r);
  plr_open_status st = PLR_OPEN_OK;
  /* Traces of long runs are hundreds of MB; a big stdio buffer keeps the
   * per-record cost at a memcpy. */
  setvbuf(f, NULL, _IOFBF, 1u << 20);
  errno = 0;
  size_t got = plr_read_full(f, &r->hdr, sizeof r->hdr);
  if (got < sizeof r->hdr) {
    if (ferror(f)) {
      r->errnum = errno ? errno : EIO;
      st = PLR_OPEN_ERRNO;
    } else if (got == 0) {
      st = PLR_OPEN_EMPTY;
    } else if (got >= sizeof r->hdr.magic &&
               memcmp(r->hdr.magic, PAGELOCK_TRACE_MAGIC, 8) != 0) {
      st = PLR_OPEN_BAD_MAGIC;
    } else if (got < sizeof r->hdr.magic &&
               memcmp(r->hdr.magic, PAGELOCK_TRACE_MAGIC, got) != 0) {
      st = PLR_OPEN_BAD_MAGIC;
    } else {
      st = PLR_OPEN_SHORT_HEADER;
    }
    goto fail;
  }
  if (memcmp(r->hdr.magic, PAGELOCK_TRACE_MAGIC, 8) != 0) {
    st = PLR_OPEN_BAD_MAGIC;
    goto fail;
  }
  if (r->hdr.version == 0) {
    st = PLR_OPEN_BAD_VERSION;
    goto fail;
  }
  if (r->hdr.version > PAGELOCK_TRACE_VERSION) {
    st = PLR_OPEN_NEW_VERSION;
    goto fail;
  }
  if (r->hdr.header_size < sizeof r->hdr ||
      r->hdr.header_size > PLR_MAX_HEADER_SIZE ||
      r->hdr.header_size % 8 != 0) {
    st = PLR_OPEN_BAD_HEADER_SIZE;
    goto fail;
  }
  if (plr_skip(f, r->hdr.header_size - sizeof r->hdr) != 0) {
    st = PLR_OPEN_SHORT_HEADER;
    goto fail;
  }
  /* +8 so a string that runs to the very end of a record still gets a NUL
   * the validator can find (it is then rejected, never over-read), and so a
   * version-1 COPY record can be zero-extended to today's size in place. */
  r->buf = malloc((size_t)PAGELOCK_TRACE_MAX_RECORD +
                  sizeof(pagelock_rec_copy));
  if (!r->buf) {
    r->errnum = ENOMEM;
    st = PLR_OPEN_ERRNO;
    goto fail;
  }
  r->f = f;
  r->offset = r->hdr.header_size;
  return PLR_OPEN_OK;
fail:
  fclose(f);
  return st;
}

void plr_close(plr_reader *r) {
  if (r->f) fclose(r->f);
  free(r->buf);
  r->f = NULL;
  r->buf = NULL;
}

/* Finds the NUL-terminated string starting at off inside a record of size
 * bytes; returns NULL when it is not terminated before the record ends. */
static const char *plr_str_at(const unsigned char *rec, size_t off,
                              size_t size) {
  if (off >= size) return NULL;
  const void *nul = memchr(rec + off, 0, size - off);
  return nul ? (const char *)(rec + off) : NULL;
}

/* Clamps an enum byte to 0 ("unknown") when it is above max, so every
 * consumer can index tables with it. */
static uint8_t plr_clamp8(uint8_t v, uint8_t max) { return v <= max ? v : 0; }

/* Checks the GPU record body in place: enums out of range become unknown
 * (the record is still used: its times are good even when a newer CUPTI
 * added a memory kind we do not know). */
static void plr_fix_gpu(pagelock_rec_gpu *g) {
  g->kind = plr_clamp8(g->kind, PAGELOCK_GPU_OVERHEAD);
  g->copy_kind = plr_clamp8(g->copy_kind, PAGELOCK_GPU_COPY_PTOP);
  g->src_kind = plr_clamp8(g->src_kind, PAGELOCK_GPU_MEM_MANAGED_STATIC);
  g->dst_kind = plr_clamp8(g->dst_kind, PAGELOCK_GPU_MEM_MANAGED_STATIC);
}

/* Checks the type-specific body of a framed record and fills rec.  Returns
 * 1 for a usable record of a known type, 0 for an unknown type, -1 for a
 * known type whose body is malformed.  b is the reader's buffer, which has
 * room for sizeof of any record after size bytes: short version-1 COPY
 * records are zero-extended there, and enums are clamped in place. */
static int plr_decode(unsigned char *b, uint32_t type, uint32_t size,
                      plr_record *rec) {
  memset(rec, 0, sizeof *rec);
  rec->type = type;
  rec->size = size;
  rec->u.hdr = (const pagelock_rec_hdr *)b;
  switch (type) {
  case PAGELOCK_REC_PROCESS: {
    if (size < sizeof(pagelock_rec_process)) return -1;
    size_t off = sizeof(pagelock_rec_process);
    rec->str1 = plr_str_at(b, off, size);
    if (!rec->str1) return -1;
    off += strlen(rec->str1) + 1;
    /* host is optional: an old writer may have omitted it. */
    rec->str2 = off < size ? plr_str_at(b, off, size) : "";
    if (!rec->str2) return -1;
    return 1;
  }
  case PAGELOCK_REC_COPY:
    if (size < PAGELOCK_REC_COPY_V1_SIZE) return -1;
    /* Version 1 ends before gpu_correlation: those fields read as 0. */
    if (size < sizeof(pagelock_rec_copy))
      memset(b + size, 0, sizeof(pagelock_rec_copy) - size);
    return 1;
  case PAGELOCK_REC_STACK: {
    if (size < sizeof(pagelock_rec_stack)) return -1;
    const pagelock_rec_stack *s = rec->u.stack;
    if (s->id == 0 || s->depth > PAGELOCK_MAX_FRAMES) return -1;
    if ((size - sizeof *s) / 8 < s->depth) return -1;
    rec->frames = (const uint64_t *)(b + sizeof *s);
    return 1;
  }
  case PAGELOCK_REC_MODULE:
    if (size < sizeof(pagelock_rec_module)) return -1;
    rec->str1 = plr_str_at(b, sizeof(pagelock_rec_module), size);
    return rec->str1 ? 1 : -1;
  case PAGELOCK_REC_SYMBOL:
    if (size < sizeof(pagelock_rec_symbol)) return -1;
    rec->str1 = plr_str_at(b, sizeof(pagelock_rec_symbol), size);
    return rec->str1 ? 1 : -1;
  case PAGELOCK_REC_COUNTERS:
    return size >= sizeof(pagelock_rec_counters) ? 1 : -1;
  case PAGELOCK_REC_NOTE:
    if (size < sizeof(pagelock_rec_note)) return -1;
    rec->str1 = plr_str_at(b, sizeof(pagelock_rec_note), size);
    return rec->str1 ? 1 : -1;
  case PAGELOCK_REC_END:
    return size >= sizeof(pagelock_rec_end) ? 1 : -1;
  case PAGELOCK_REC_GPU:
    if (size < sizeof(pagelock_rec_gpu)) return -1;
    plr_fix_gpu((pagelock_rec_gpu *)b);
    return 1;
  case PAGELOCK_REC_NAME:
    if (size < sizeof(pagelock_rec_name)) return -1;
    if (rec->u.name->id == 0) return -1; /* 0 means "no name" in GPU records */
    rec->str1 = plr_str_at(b, sizeof(pagelock_rec_name), size);
    return rec->str1 ? 1 : -1;
  case PAGELOCK_REC_LINK:
    if (size < sizeof(pagelock_rec_link)) return -1;
    /* correlation 0 is CUPTI's "none": such a link could join nothing. */
    return rec->u.link->correlation ? 1 : -1;
  case PAGELOCK_REC_CLOCK:
    return size >= sizeof(pagelock_rec_clock) ? 1 : -1;
  case PAGELOCK_REC_DEVICE:
    if (size < sizeof(pagelock_rec_device)) return -1;
    rec->str1 = plr_str_at(b, sizeof(pagelock_rec_device), size);
    return rec->str1 ? 1 : -1;
  case PAGELOCK_REC_GPU_STATUS: {
    if (size < sizeof(pagelock_rec_gpu_status)) return -1;
    rec->str1 = plr_str_at(b, sizeof(pagelock_rec_gpu_status), size);
    if (!rec->str1) return -1;
    /* A status we do not know reads as "error" so its reason is shown. */
    pagelock_rec_gpu_status *st = (pagelock_rec_gpu_status *)b;
    if (st->status > PAGELOCK_GPU_TIMING_NO_CUDA)
      st->status = PAGELOCK_GPU_TIMING_ERROR;
    return 1;
  }
  default:
    return 0;
  }
}

void plr_clock_update(plr_clock *c, const pagelock_rec_clock *rec) {
  c->have = 1;
  c->cupti_ns = rec->cupti_ns;
  c->mono_ns = rec->mono_ns;
}

uint64_t plr_clock_to_mono(const plr_clock *c, uint64_t t) {
  if (!c->have) return t;
  if (c->mono_ns >= c->cupti_ns) {
    uint64_t d = c->mono_ns - c->cupti_ns;
    return t > UINT64_MAX - d ? UINT64_MAX : t + d;
  }
  uint64_t d = c->cupti_ns - c->mono_ns;
  return t < d ? 0 : t - d;
}

int plr_next(plr_reader *r, plr_record *rec) {
  while (r->stop == PLR_STOP_NONE) {
    pagelock_rec_hdr h;
    errno = 0;
    size_t got = plr_read_full(r->f, &h, sizeof h);
    if (got < sizeof h) {
      if (ferror(r->f)) {
        r->errnum = errno ? errno : EIO;
        r->stop = PLR_STOP_IO;
      } else {
        r->stop = got == 0 ? PLR_STOP_EOF : PLR_STOP_TRUNCATED;
      }
      break;
    }
    if (h.size < sizeof h || h.size % 8 != 0 ||
        h.size > PAGELOCK_TRACE_MAX_RECORD) {
      r->bad_size = h.size;
      r->bad_type = h.type;
      r->stop = PLR_STOP_CORRUPT;
      break;
    }
    memcpy(r->buf, &h, sizeof h);
    size_t body = h.size - sizeof h;
    errno = 0;
    if (plr_read_full(r->f, r->buf + sizeof h, body) != body) {
      if (ferror(r->f)) {
        r->errnum = errno ? errno : EIO;
        r->stop = PLR_STOP_IO;
      } else {
        r->stop = PLR_STOP_TRUNCATED;
      }
      break;
    }
    r->buf[h.size] = 0;
    r->complete++;
    r->offset += h.size;
    int d = plr_decode(r->buf, h.type, h.size, rec);
    if (d == 0) {
      r->unknown++;
      continue;
    }
    if (d < 0) {
      r->malformed++;
      continue;
    }
    if (h.type == PAGELOCK_REC_END) r->stop = PLR_STOP_END;
    return 1;
  }
  return 0;
}

void plr_open_strerror(const plr_reader *r, plr_open_status st,
                       const char *path, char *buf, size_t len) {
  switch (st) {
  case PLR_OPEN_OK:
    snprintf(buf, len, "'%s': no error", path);
    break;
  case PLR_OPEN_ERRNO:
    snprintf(buf, len, "cannot open '%s': %s", path, strerror(r->errnum));
    break;
  case PLR_OPEN_EMPTY:
    snprintf(buf, len,
             "'%s' is empty (the traced program may have died before "
             "writing its trace header)",
             path);
    break;
  case PLR_OPEN_SHORT_HEADER:
    snprintf(buf, len, "'%s' is truncated: its trace header is incomplete",
             path);
    break;
  case PLR_OPEN_BAD_MAGIC:
    snprintf(buf, len, "'%s' is not a pagelock trace", path);
    break;
  case PLR_OPEN_BAD_VERSION:
    snprintf(buf, len, "'%s' has an invalid trace format version 0", path);
    break;
  case PLR_OPEN_NEW_VERSION:
    snprintf(buf, len,
             "'%s' uses trace format version %u; this pagelock reads "
             "version %u or older: use a newer pagelock to report it",
             path, r->hdr.version, PAGELOCK_TRACE_VERSION);
    break;
  case PLR_OPEN_BAD_HEADER_SIZE:
    snprintf(buf, len, "'%s' is corrupt: trace header size %u is invalid",
             path, r->hdr.header_size);
    break;
  }
}
