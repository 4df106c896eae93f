/* trace_read.c - opening a trace file, framing and validation of its
 * record stream. */
#define _GNU_SOURCE
#include "trace_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

const char *plr_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFIFO: return "a FIFO";
    case S_IFDIR: return "a directory";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFREG: return "a regular file";
    default: return "not a regular file";
  }
}

/* The message for a path that is not a regular file. */
static void plr_not_trace_msg(const char *path, unsigned mode, char *msg, size_t len) {
  if (S_ISDIR(mode))
    snprintf(msg, len,
             "'%s' is a directory, not a trace file (name the "
             "trace files in it, e.g. '%s'/*.trace)",
             path, path);
  else
    snprintf(msg, len,
             "'%s' is %s, not a trace file (a trace is a regular "
             "file written by libpagelock.so)",
             path, plr_file_kind(mode));
}

/* plr_open_trace without the message: NULL with errno set, and *mode the
 * file's st_mode when it is not a regular file (0 otherwise). */
static FILE *plr_open_regular(const char *path, unsigned *mode) {
  *mode = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    int err = errno;
    /* A socket cannot be opened at all: say what it is. */
    if (err == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) *mode = (unsigned)st.st_mode;
    errno = err;
    return NULL;
  }
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    *mode = (unsigned)st.st_mode;
    close(fd);
    errno = EINVAL;
    return NULL;
  }
  /* Reads of a regular file never block; clearing the flag keeps the
   * stream's reads plain whatever the file system makes of it. */
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

FILE *plr_open_trace(const char *path, char *msg, size_t len) {
  unsigned mode;
  FILE *f = plr_open_regular(path, &mode);
  if (!f && msg) {
    int err = errno;
    if (mode)
      plr_not_trace_msg(path, mode, msg, len);
    else
      snprintf(msg, len, "cannot open '%s': %s", path, strerror(err));
    errno = err;
  }
  return f;
}

plr_open_status plr_open(plr_reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  unsigned mode;
  FILE *f = plr_open_regular(path, &mode);
  if (!f) {
    r->errnum = errno;
    r->file_mode = mode;
    return mode ? PLR_OPEN_NOT_REGULAR : PLR_OPEN_ERRNO;
  }
  return plr_open_stream(r, f);
}

/* Records a refused header field: its name, value and the valid values. */
static plr_open_status plr_bad_field(plr_reader *r, const char *field, const char *value_fmt,
                                     uint64_t value, const char *valid) {
  r->bad_field = field;
  snprintf(r->bad_value, sizeof r->bad_value, value_fmt, (unsigned long long)value);
  snprintf(r->bad_valid, sizeof r->bad_valid, "%s", valid);
  return PLR_OPEN_BAD_HEADER;
}

/* Checks every field of a complete header.  No version has had a header
 * other than 64 bytes, and no writer leaves a field out of range, so any
 * other value is damage: refusing beats a report built on it (a wrong
 * header_size would shift every record). */
static plr_open_status plr_check_header(plr_reader *r) {
  const pagelock_file_header *h = &r->hdr;
  char valid[64];
  if (h->version == 0) {
    snprintf(valid, sizeof valid, "1 to %u", PAGELOCK_TRACE_VERSION);
    return plr_bad_field(r, "version", "%llu", 0, valid);
  }
  if (h->version > PAGELOCK_TRACE_VERSION) return PLR_OPEN_NEW_VERSION;
  if (h->header_size != sizeof *h) {
    snprintf(valid, sizeof valid, "%zu in trace format version %u", sizeof *h, h->version);
    return plr_bad_field(r, "header_size", "%llu", h->header_size, valid);
  }
  if (h->pid == 0 || h->pid > PLR_PID_MAX) {
    snprintf(valid, sizeof valid, "1 to %u", PLR_PID_MAX);
    return plr_bad_field(r, "pid", "%llu", h->pid, valid);
  }
  /* Clock readings: 0 is no reading, and above 2^63 - 1 (year 2262, or
   * 292 years of uptime) every time difference the report takes would
   * overflow. */
  if (h->start_realtime_ns == 0 || h->start_realtime_ns > INT64_MAX)
    return plr_bad_field(r, "start_realtime_ns", "%llu", h->start_realtime_ns,
                         "1 to 9223372036854775807");
  if (h->start_mono_ns == 0 || h->start_mono_ns > INT64_MAX)
    return plr_bad_field(r, "start_mono_ns", "%llu", h->start_mono_ns, "1 to 9223372036854775807");
  uint32_t known = h->version >= 3 ? PLR_FILE_FLAGS_V3 : PLR_FILE_FLAGS_V1;
  if (h->flags & ~known) {
    snprintf(valid, sizeof valid, "bits 0x%x in trace format version %u", known, h->version);
    return plr_bad_field(r, "flags", "0x%llx", h->flags, valid);
  }
  if (h->reserved0) return plr_bad_field(r, "reserved0", "0x%llx", h->reserved0, "0");
  if (h->reserved[0]) return plr_bad_field(r, "reserved[0]", "0x%llx", h->reserved[0], "0");
  if (h->reserved[1]) return plr_bad_field(r, "reserved[1]", "0x%llx", h->reserved[1], "0");
  return PLR_OPEN_OK;
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
    } else if (got >= sizeof r->hdr.magic && memcmp(r->hdr.magic, PAGELOCK_TRACE_MAGIC, 8) != 0) {
      st = PLR_OPEN_BAD_MAGIC;
    } else if (got < sizeof r->hdr.magic && memcmp(r->hdr.magic, PAGELOCK_TRACE_MAGIC, got) != 0) {
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
  st = plr_check_header(r);
  if (st != PLR_OPEN_OK) goto fail;
  /* Room past the largest record, so that a string running to the very end
   * of a record still gets a NUL the validator can find (it is then
   * rejected, never over-read), and so that a COPY record of an older
   * version can be zero-extended to today's size in place. */
  r->buf = malloc((size_t)PAGELOCK_TRACE_MAX_RECORD + sizeof(pagelock_rec_copy));
  if (!r->buf) {
    r->errnum = ENOMEM;
    st = PLR_OPEN_ERRNO;
    goto fail;
  }
  r->f = f;
  r->offset = r->hdr.header_size;
  r->blk_start = r->offset;
  r->checksums = (r->hdr.flags & PAGELOCK_FILE_CHECKSUMS) != 0;
  return PLR_OPEN_OK;
fail:
  fclose(f);
  return st;
}

void plr_close(plr_reader *r) {
  if (r->f) fclose(r->f);
  free(r->buf);
  free(r->blk);
  r->f = NULL;
  r->buf = NULL;
  r->blk = NULL;
}

/* Finds the NUL-terminated string starting at off inside a record of size
 * bytes; returns NULL when it is not terminated before the record ends. */
static const char *plr_str_at(const unsigned char *rec, size_t off, size_t size) {
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

/* Makes count and timed of a COPY record mean the same in every version:
 * before version 4 a record is one copy, timed (its bytes at count's offset
 * belong to no field, even in a longer record).  A version-4 writer never
 * writes count 0 nor times more copies than it counts; rather than drop a
 * record whose other fields are good, count 0 reads as one copy, timed,
 * and timed above count as every copy timed. */
static void plr_fix_copy(pagelock_rec_copy *c, uint32_t version) {
  if (version < 4 || c->count == 0) c->count = c->timed = 1;
  if (c->timed > c->count) c->timed = c->count;
}

/* Checks the type-specific body of a framed record of a version-`version`
 * trace and fills rec.  Returns 1 for a usable record of a known type, 0
 * for an unknown type, -1 for a known type whose body is malformed.  b is
 * the reader's buffer, which has room for sizeof of any record after size
 * bytes: short COPY records of older versions are zero-extended there, and
 * enums and COPY counts are fixed in place. */
static int plr_decode(unsigned char *b, uint32_t type, uint32_t size, uint32_t version,
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
      /* Version 1 ends before gpu_correlation, versions 2 and 3 before
       * count: those fields read as 0 (count then as 1, below). */
      if (size < sizeof(pagelock_rec_copy)) memset(b + size, 0, sizeof(pagelock_rec_copy) - size);
      plr_fix_copy((pagelock_rec_copy *)b, version);
      return 1;
    case PAGELOCK_REC_STACK: {
      if (size < sizeof(pagelock_rec_stack)) return -1;
      const pagelock_rec_stack *s = rec->u.stack;
      if (s->id == 0 || s->depth > PAGELOCK_MAX_FRAMES) return -1;
      if ((size - sizeof *s) / 8 < s->depth) return -1;
      rec->frames = (const uint64_t *)(b + sizeof *s);
      return 1;
    }
    case PAGELOCK_REC_PYSTACK: {
      if (size < sizeof(pagelock_rec_pystack)) return -1;
      const pagelock_rec_pystack *s = rec->u.pystack;
      if (s->stack_id == 0 || s->depth == 0 || s->depth > PAGELOCK_MAX_PY_FRAMES) return -1;
      if ((size - sizeof *s) / sizeof(pagelock_py_frame) < s->depth) return -1;
      rec->pyframes = (const pagelock_py_frame *)(b + sizeof *s);
      return 1;
    }
    case PAGELOCK_REC_PYCODE: {
      if (size < sizeof(pagelock_rec_pycode) || rec->u.pycode->id == 0) return -1;
      rec->str1 = plr_str_at(b, sizeof(pagelock_rec_pycode), size);
      if (!rec->str1) return -1;
      size_t off = sizeof(pagelock_rec_pycode) + strlen(rec->str1) + 1;
      rec->str2 = off < size ? plr_str_at(b, off, size) : NULL;
      return rec->str2 ? 1 : -1;
    }
    case PAGELOCK_REC_MODULE:
      if (size < sizeof(pagelock_rec_module)) return -1;
      rec->str1 = plr_str_at(b, sizeof(pagelock_rec_module), size);
      return rec->str1 ? 1 : -1;
    case PAGELOCK_REC_SYMBOL:
      if (size < sizeof(pagelock_rec_symbol)) return -1;
      rec->str1 = plr_str_at(b, sizeof(pagelock_rec_symbol), size);
      return rec->str1 ? 1 : -1;
    case PAGELOCK_REC_COUNTERS: return size >= sizeof(pagelock_rec_counters) ? 1 : -1;
    case PAGELOCK_REC_COST: return size >= sizeof(pagelock_rec_cost) ? 1 : -1;
    case PAGELOCK_REC_NOTE:
      if (size < sizeof(pagelock_rec_note)) return -1;
      rec->str1 = plr_str_at(b, sizeof(pagelock_rec_note), size);
      return rec->str1 ? 1 : -1;
    case PAGELOCK_REC_END: return size >= sizeof(pagelock_rec_end) ? 1 : -1;
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
    case PAGELOCK_REC_CLOCK: return size >= sizeof(pagelock_rec_clock) ? 1 : -1;
    case PAGELOCK_REC_DEVICE:
      if (size < sizeof(pagelock_rec_device)) return -1;
      rec->str1 = plr_str_at(b, sizeof(pagelock_rec_device), size);
      return rec->str1 ? 1 : -1;
    case PAGELOCK_REC_GPU_SAMPLE: {
      if (size < sizeof(pagelock_rec_gpu_sample)) return -1;
      /* on is a boolean and mono_ns a clock reading (0 is none): anything
       * else is damage, and a guessed pause would hide GPU time. */
      const pagelock_rec_gpu_sample *s = rec->u.gpu_sample;
      return s->on <= 1 && s->mono_ns != 0 ? 1 : -1;
    }
    case PAGELOCK_REC_GPU_STATUS: {
      if (size < sizeof(pagelock_rec_gpu_status)) return -1;
      rec->str1 = plr_str_at(b, sizeof(pagelock_rec_gpu_status), size);
      if (!rec->str1) return -1;
      /* A status we do not know reads as "error" so its reason is shown. */
      pagelock_rec_gpu_status *st = (pagelock_rec_gpu_status *)b;
      if (st->status > PAGELOCK_GPU_TIMING_NO_CUDA) st->status = PAGELOCK_GPU_TIMING_ERROR;
      return 1;
    }
    default: return 0;
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

/* Sets the stop of a failed read: a read error, or a file that ends at a
 * record boundary (got == 0) or inside a record. */
static plr_stop plr_read_stop(plr_reader *r, size_t got) {
  if (ferror(r->f)) {
    r->errnum = errno ? errno : EIO;
    return PLR_STOP_IO;
  }
  return got == 0 ? PLR_STOP_EOF : PLR_STOP_TRUNCATED;
}

/* Decodes the framed record in r->buf.  Returns 1 to hand it out, 0 to
 * skip it (counted). */
static int plr_take(plr_reader *r, uint32_t type, uint32_t size, plr_record *rec) {
  r->buf[size] = 0;
  r->complete++;
  r->offset += size;
  int d = plr_decode(r->buf, type, size, r->hdr.version, rec);
  if (d == 0) {
    r->unknown++;
    return 0;
  }
  if (d < 0) {
    r->malformed++;
    return 0;
  }
  if (type == PAGELOCK_REC_END) r->stop = PLR_STOP_END;
  return 1;
}

/* Makes room for n more bytes of the block: -1 past PLR_MAX_BLOCK, -2 out
 * of memory. */
static int plr_blk_room(plr_reader *r, size_t used, size_t n) {
  if (used + n > PLR_MAX_BLOCK) return -1;
  if (used + n <= r->blk_cap) return 0;
  size_t cap = r->blk_cap ? r->blk_cap : 64u << 10;
  while (cap < used + n) cap *= 2;
  if (cap > PLR_MAX_BLOCK) cap = PLR_MAX_BLOCK;
  unsigned char *p = realloc(r->blk, cap);
  if (!p) return -2;
  r->blk = p;
  r->blk_cap = cap;
  return 0;
}

/* Stops at damage in the block being read: none of its records are
 * handed out. */
static void plr_damaged(plr_reader *r, plr_damage_kind kind, uint64_t to, uint64_t at,
                        uint64_t value) {
  r->blk_pos = r->blk_end = r->blk_check = 0;
  r->blk_stop = PLR_STOP_DAMAGED;
  r->damage.kind = kind;
  r->damage.from = r->blk_start;
  r->damage.to = to;
  r->damage.at = at;
  r->damage.value = value;
  r->damage.records = r->complete;
}

/* Looks for the CHECK record of the block starting at file offset start
 * among the n bytes at p (which start there, so records are 8-aligned from
 * p): 24 bytes whose start field is `start` and whose type or size (one of
 * them may be the damaged byte) is a CHECK's.  Returns its offset from p,
 * or SIZE_MAX. */
static size_t plr_find_check(const unsigned char *p, size_t n, uint64_t start) {
  for (size_t o = 0; o + sizeof(pagelock_rec_check) <= n; o += 8) {
    pagelock_rec_check c;
    memcpy(&c, p + o, sizeof c);
    if (c.start == start &&
        (c.h.type == PAGELOCK_REC_CHECK || c.h.size == sizeof(pagelock_rec_check)))
      return o;
  }
  return SIZE_MAX;
}

/* The bytes read since the last CHECK end the file (avail of them, the
 * whole records among them len).  A writer that stopped mid-block (killed,
 * disk full) leaves such a tail, handed out unchecked.  But when the CHECK
 * of this very block is among those bytes, whole, the block is damaged: a
 * damaged size field made the records skip over its CHECK, or the CHECK's
 * own type or size was hit.  (A cut inside the last CHECK leaves it
 * incomplete: a tail.) */
static void plr_tail(plr_reader *r, size_t len, size_t avail) {
  size_t at = plr_find_check(r->blk, avail, r->blk_start);
  if (at != SIZE_MAX) {
    plr_damaged(r, PLR_DAMAGE_FRAMING, r->blk_start + at, r->blk_start + at, 0);
    return;
  }
  r->blk_end = len;
  r->unverified = len > 0;
}

/* Reads the next block of a checksummed trace, up to and including its
 * CHECK record, and verifies it.  Leaves the records to hand out in
 * blk[blk_pos, blk_end), and in blk_stop why reading ends after them. */
static void plr_fill_block(plr_reader *r) {
  size_t len = 0; /* bytes of whole records read */
  int room = 0;
  r->blk_start = r->offset;
  r->blk_pos = r->blk_end = r->blk_check = 0;
  for (;;) {
    pagelock_rec_hdr h;
    if ((room = plr_blk_room(r, len, sizeof h)) != 0) break;
    errno = 0;
    size_t got = plr_read_full(r->f, r->blk + len, sizeof h);
    if (got < sizeof h) {
      r->blk_stop = plr_read_stop(r, got);
      plr_tail(r, len, len);
      return;
    }
    memcpy(&h, r->blk + len, sizeof h);
    uint64_t at = r->blk_start + len;
    if (h.size < sizeof h || h.size % 8 != 0 || h.size > PAGELOCK_TRACE_MAX_RECORD) {
      /* A writer never frames a record so: the block is damaged.  Without
       * its CHECK its extent is known up to this record only. */
      plr_damaged(r, PLR_DAMAGE_SIZE, at, at, h.size);
      return;
    }
    if ((room = plr_blk_room(r, len, h.size)) != 0) break;
    size_t body = h.size - sizeof h;
    errno = 0;
    got = plr_read_full(r->f, r->blk + len + sizeof h, body);
    if (got < body) {
      r->blk_stop = plr_read_stop(r, 1);
      plr_tail(r, len, len + sizeof h + got);
      return;
    }
    if (h.type == PAGELOCK_REC_CHECK) {
      pagelock_rec_check c;
      /* Exactly 24 bytes: a CHECK's own header is under no checksum, so a
       * size other than its own would move the reader unchecked. */
      if (h.size != sizeof c) {
        plr_damaged(r, PLR_DAMAGE_CHECK, at, at, h.size);
        return;
      }
      memcpy(&c, r->blk + len, sizeof c);
      if (c.start != r->blk_start) {
        plr_damaged(r, PLR_DAMAGE_START, at, at, c.start);
        return;
      }
      /* reserved is not under any checksum: a flipped bit there is found
       * only this way. */
      if (c.reserved != 0) {
        plr_damaged(r, PLR_DAMAGE_CHECK, at, at, h.size);
        return;
      }
      if (pagelock_crc32c(0, r->blk, len) != c.crc32c) {
        plr_damaged(r, PLR_DAMAGE_CRC, at, at, 0);
        return;
      }
      r->blk_end = len;
      r->blk_check = h.size;
      r->blocks++;
      return;
    }
    len += h.size;
  }
  if (room == -2) {
    r->errnum = ENOMEM;
    r->blk_stop = PLR_STOP_IO;
    return;
  }
  plr_damaged(r, PLR_DAMAGE_LONG, r->blk_start + len, r->blk_start + len, 0);
}

/* plr_next for a checksummed trace. */
static int plr_next_checked(plr_reader *r, plr_record *rec) {
  while (r->stop == PLR_STOP_NONE) {
    if (r->blk_pos < r->blk_end) {
      pagelock_rec_hdr h;
      memcpy(&h, r->blk + r->blk_pos, sizeof h);
      memcpy(r->buf, r->blk + r->blk_pos, h.size);
      r->blk_pos += h.size;
      if (plr_take(r, h.type, h.size, rec)) return 1;
      continue;
    }
    if (r->blk_check) {
      /* The CHECK that closed the block: consumed here. */
      r->offset += r->blk_check;
      r->complete++;
      r->blk_check = 0;
      r->blk_stop = PLR_STOP_NONE;
      r->blk_pos = r->blk_end = 0;
      continue;
    }
    if (r->blk_stop != PLR_STOP_NONE) {
      r->stop = r->blk_stop;
      break;
    }
    plr_fill_block(r);
  }
  return 0;
}

int plr_next(plr_reader *r, plr_record *rec) {
  if (r->checksums) return plr_next_checked(r, rec);
  while (r->stop == PLR_STOP_NONE) {
    pagelock_rec_hdr h;
    errno = 0;
    size_t got = plr_read_full(r->f, &h, sizeof h);
    if (got < sizeof h) {
      r->stop = plr_read_stop(r, got);
      break;
    }
    if (h.size < sizeof h || h.size % 8 != 0 || h.size > PAGELOCK_TRACE_MAX_RECORD) {
      r->bad_size = h.size;
      r->bad_type = h.type;
      r->stop = PLR_STOP_CORRUPT;
      break;
    }
    memcpy(r->buf, &h, sizeof h);
    size_t body = h.size - sizeof h;
    errno = 0;
    if (plr_read_full(r->f, r->buf + sizeof h, body) != body) {
      r->stop = plr_read_stop(r, 1);
      break;
    }
    /* Version 3 writes CHECK records only into checksummed traces: one in
     * a trace whose header does not say so means the header's flags were
     * damaged, and nothing after them can be trusted either.  (In versions
     * 1 and 2, type 15 is just a type they did not know.) */
    if (h.type == PAGELOCK_REC_CHECK && r->hdr.version >= 3) {
      r->damage.kind = PLR_DAMAGE_UNFLAGGED;
      r->damage.from = r->damage.to = r->damage.at = r->offset;
      r->damage.records = r->complete;
      r->stop = PLR_STOP_DAMAGED;
      break;
    }
    if (plr_take(r, h.type, h.size, rec)) return 1;
  }
  return 0;
}

void plr_open_strerror(const plr_reader *r, plr_open_status st, const char *path, char *buf,
                       size_t len) {
  switch (st) {
    case PLR_OPEN_OK: snprintf(buf, len, "'%s': no error", path); break;
    case PLR_OPEN_ERRNO:
      snprintf(buf, len, "cannot open '%s': %s", path, strerror(r->errnum));
      break;
    case PLR_OPEN_NOT_REGULAR: plr_not_trace_msg(path, r->file_mode, buf, len); break;
    case PLR_OPEN_EMPTY:
      snprintf(buf, len,
               "'%s' is empty (the traced program may have died before "
               "writing its trace header)",
               path);
      break;
    case PLR_OPEN_SHORT_HEADER:
      snprintf(buf, len, "'%s' is truncated: its trace header is incomplete", path);
      break;
    case PLR_OPEN_BAD_MAGIC: snprintf(buf, len, "'%s' is not a pagelock trace", path); break;
    case PLR_OPEN_NEW_VERSION:
      snprintf(buf, len,
               "'%s' uses trace format version %u; this pagelock reads "
               "version %u or older: use a newer pagelock to report it",
               path, r->hdr.version, PAGELOCK_TRACE_VERSION);
      break;
    case PLR_OPEN_BAD_HEADER:
      snprintf(buf, len, "'%s' is corrupt: its trace header's %s %s %s (valid: %s)", path,
               r->bad_field ? r->bad_field : "?",
               r->bad_field && strcmp(r->bad_field, "flags") == 0 ? "are" : "is", r->bad_value,
               r->bad_valid);
      break;
  }
}

void plr_damage_message(const plr_damage *d, const pagelock_file_header *h, const char *path,
                        char *buf, size_t len) {
  char why[160];
  unsigned long long at = d->at, to = d->to, from = d->from;
  switch (d->kind) {
    case PLR_DAMAGE_UNFLAGGED:
      snprintf(buf, len,
               "'%s' is corrupt: a CHECK record at byte %llu, but its header's "
               "flags (0x%x) say it has no checksums; the report covers the "
               "%llu records before it",
               path, at, h ? h->flags : 0u, (unsigned long long)d->records);
      return;
    case PLR_DAMAGE_CRC:
      snprintf(why, sizeof why, "checksum mismatch in the block of bytes %llu..%llu", from, to - 1);
      break;
    case PLR_DAMAGE_START:
      snprintf(why, sizeof why,
               "the CHECK record at byte %llu says its block starts at byte "
               "%llu",
               at, (unsigned long long)d->value);
      break;
    case PLR_DAMAGE_CHECK:
      snprintf(why, sizeof why, "the CHECK record at byte %llu is malformed", at);
      break;
    case PLR_DAMAGE_SIZE:
      snprintf(why, sizeof why,
               "the record at byte %llu has size %llu, which no writer "
               "produces",
               at, (unsigned long long)d->value);
      break;
    case PLR_DAMAGE_FRAMING:
      snprintf(why, sizeof why, "its records do not lead to the CHECK record at byte %llu", at);
      break;
    case PLR_DAMAGE_LONG:
      snprintf(why, sizeof why, "no CHECK record closes the block within %u MiB",
               PLR_MAX_BLOCK >> 20);
      break;
    default: snprintf(why, sizeof why, "damaged");
  }
  snprintf(buf, len,
           "'%s' is corrupt from byte %llu (%s); the report covers the %llu "
           "records before it",
           path, from, why, (unsigned long long)d->records);
}
