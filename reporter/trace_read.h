/* trace_read.h - streaming, validating reader of one pagelock trace file.
 *
 * The reader owns framing and per-type validation only: it hands out one
 * decoded record at a time and never keeps more than one record in memory,
 * so what the caller aggregates decides the memory a report needs.  It never
 * trusts the file: every size, depth and string is checked before use. */
#ifndef PLR_TRACE_READ_H
#define PLR_TRACE_READ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagelock_trace.h"

/* Why plr_open refused a file. */
typedef enum plr_open_status {
  PLR_OPEN_OK = 0,
  PLR_OPEN_ERRNO,           /* open/read failed, errno kept in errnum */
  PLR_OPEN_EMPTY,           /* zero bytes */
  PLR_OPEN_SHORT_HEADER,    /* fewer bytes than a file header */
  PLR_OPEN_BAD_MAGIC,       /* not a pagelock trace at all */
  PLR_OPEN_BAD_VERSION,     /* version 0: never written by any pagelock */
  PLR_OPEN_NEW_VERSION,     /* written by a newer pagelock */
  PLR_OPEN_BAD_HEADER_SIZE, /* header_size smaller than v1's or absurd */
} plr_open_status;

/* Why the record stream stopped; everything but END means the trace is
 * incomplete and the report built from it partial. */
typedef enum plr_stop {
  PLR_STOP_NONE = 0,  /* still reading */
  PLR_STOP_END,       /* END record seen: the writer closed the trace */
  PLR_STOP_EOF,       /* clean end of file at a record boundary, no END */
  PLR_STOP_TRUNCATED, /* file ends inside a record */
  PLR_STOP_CORRUPT,   /* a record size no writer produces */
  PLR_STOP_IO,        /* read error */
} plr_stop;

/* A header_size above this is treated as corruption rather than as a future
 * header extension we could skip. */
#define PLR_MAX_HEADER_SIZE 4096u

typedef struct plr_reader {
  FILE *f;
  pagelock_file_header hdr;
  uint64_t complete;  /* framed records read so far (malformed ones too) */
  uint64_t malformed; /* known types whose body failed validation: skipped */
  uint64_t unknown;   /* unknown types: skipped */
  uint64_t offset;    /* file offset of the next record */
  uint32_t bad_size;  /* the offending size when stop == PLR_STOP_CORRUPT */
  uint32_t bad_type;
  plr_stop stop;
  int errnum;         /* errno for PLR_OPEN_ERRNO / PLR_STOP_IO */
  unsigned char *buf; /* one record, PAGELOCK_TRACE_MAX_RECORD + 1 bytes */
} plr_reader;

/* One validated record.  Pointers alias the reader's buffer and are valid
 * until the next plr_next call.  Strings are NUL-terminated (checked). */
typedef struct plr_record {
  uint32_t type;
  uint32_t size;
  union {
    const pagelock_rec_hdr *hdr;
    const pagelock_rec_process *process;
    const pagelock_rec_copy *copy;
    const pagelock_rec_stack *stack;
    const pagelock_rec_module *module;
    const pagelock_rec_symbol *symbol;
    const pagelock_rec_counters *counters;
    const pagelock_rec_note *note;
    const pagelock_rec_end *end;
    /* Version 2 (CUPTI).  Enum fields of GPU and GPU_STATUS records are
     * already clamped: out-of-range values read as the "unknown" value. */
    const pagelock_rec_gpu *gpu;
    const pagelock_rec_name *name;
    const pagelock_rec_link *link;
    const pagelock_rec_clock *clock;
    const pagelock_rec_device *device;
    const pagelock_rec_gpu_status *gpu_status;
  } u;
  /* exe, module path, symbol name, note text, kernel name (NAME), device
   * name (DEVICE), reason (GPU_STATUS) */
  const char *str1;
  const char *str2;        /* host (PROCESS only) */
  const uint64_t *frames;  /* STACK only, u.stack->depth entries */
} plr_record;

/* CUPTI timestamps -> CLOCK_MONOTONIC.  Feed every CLOCK record to
 * plr_clock_update as it streams by and convert each GPU record's times
 * with the state at that point: the last CLOCK record before a GPU record
 * wins, and with none the times are already CLOCK_MONOTONIC. */
typedef struct plr_clock {
  int have;
  uint64_t cupti_ns, mono_ns;
} plr_clock;

/* Remembers the pair of one CLOCK record. */
void plr_clock_update(plr_clock *c, const pagelock_rec_clock *rec);

/* t - cupti_ns + mono_ns, saturating at 0 and UINT64_MAX (a corrupt pair
 * must not wrap a time around). */
uint64_t plr_clock_to_mono(const plr_clock *c, uint64_t t);

/* Opens path and validates the file header.  On failure returns the status,
 * closes everything and leaves errnum set for PLR_OPEN_ERRNO.  The caller
 * must plr_close on success only. */
plr_open_status plr_open(plr_reader *r, const char *path);

/* Same, over an already open stream the reader takes ownership of (fclose'd
 * by plr_close or on failure).  Lets tests feed memory streams. */
plr_open_status plr_open_stream(plr_reader *r, FILE *f);

/* Decodes the next record of a known type into rec and returns 1; unknown
 * and malformed records are skipped (counted).  A COPY record of version-1
 * size (PAGELOCK_REC_COPY_V1_SIZE) is accepted and its version-2 fields
 * read as 0.  Returns 0 once the stream
 * stopped; r->stop then says why.  Never reads past an END record. */
int plr_next(plr_reader *r, plr_record *rec);

void plr_close(plr_reader *r);

/* Writes the user-facing message for a failed plr_open of path into buf,
 * without the "pagelock: " prefix. */
void plr_open_strerror(const plr_reader *r, plr_open_status st,
                       const char *path, char *buf, size_t len);

#endif
