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

#include "pagelock/trace_format.h"

/* Why plr_open refused a file. */
typedef enum plr_open_status {
  PLR_OPEN_OK = 0,
  PLR_OPEN_ERRNO,        /* open/read failed, errno kept in errnum */
  PLR_OPEN_EMPTY,        /* zero bytes */
  PLR_OPEN_SHORT_HEADER, /* fewer bytes than a file header */
  PLR_OPEN_BAD_MAGIC,    /* not a pagelock trace at all */
  PLR_OPEN_NEW_VERSION,  /* written by a newer pagelock */
  PLR_OPEN_BAD_HEADER,   /* a header field no writer produces: bad_field */
  PLR_OPEN_NOT_REGULAR,  /* a FIFO, directory, device or socket: file_mode */
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
  PLR_STOP_DAMAGED,   /* checksummed trace: a block failed its check (damage) */
} plr_stop;

/* What is wrong with the block of a checksummed trace that stopped the
 * reader (PLR_STOP_DAMAGED). */
typedef enum plr_damage_kind {
  PLR_DAMAGE_NONE = 0,
  PLR_DAMAGE_CRC,       /* the CHECK's crc32c does not match the block */
  PLR_DAMAGE_START,     /* the CHECK's start is not the previous block's end */
  PLR_DAMAGE_CHECK,     /* the CHECK record itself is malformed */
  PLR_DAMAGE_SIZE,      /* a record size no writer produces, in the block */
  PLR_DAMAGE_FRAMING,   /* the records do not frame up to the block's CHECK */
  PLR_DAMAGE_LONG,      /* no CHECK within PLR_MAX_BLOCK bytes */
  PLR_DAMAGE_UNFLAGGED, /* a CHECK record in a trace not flagged as checksummed */
} plr_damage_kind;

typedef struct plr_damage {
  plr_damage_kind kind;
  uint64_t from;    /* first byte of the damaged block: records before it are good */
  uint64_t to;      /* one past its last byte as far as known (the CHECK's offset) */
  uint64_t at;      /* the offending record (CHECK, bad size) */
  uint64_t value;   /* the bad size (SIZE), the CHECK's start (START) */
  uint64_t records; /* records before `from` */
} plr_damage;

/* The most bytes between two CHECK records: a writer closes every buffer
 * it writes (256 KiB, plus the record that did not fit, at most 1 MiB), so
 * a longer block is damage, and the reader never holds more than this. */
#define PLR_MAX_BLOCK (4u << 20)

/* The bits of pagelock_file_header.flags each version may set. */
#define PLR_FILE_FLAGS_V1 PAGELOCK_FILE_SIMULATED
#define PLR_FILE_FLAGS_V3                                                                    \
  (PAGELOCK_FILE_SIMULATED | PAGELOCK_FILE_STOP_DISK_FULL | PAGELOCK_FILE_STOP_WRITE_ERROR | \
   PAGELOCK_FILE_STOP_FD_LOST | PAGELOCK_FILE_CHECKSUMS)
#define PLR_FILE_STOP_FLAGS \
  (PAGELOCK_FILE_STOP_DISK_FULL | PAGELOCK_FILE_STOP_WRITE_ERROR | PAGELOCK_FILE_STOP_FD_LOST)

/* Linux's PID_MAX_LIMIT on 64-bit: no pid is larger. */
#define PLR_PID_MAX 4194304u

typedef struct plr_reader {
  FILE *f;
  pagelock_file_header hdr;
  uint64_t complete;  /* framed records handed out or skipped so far */
  uint64_t malformed; /* known types whose body failed validation: skipped */
  uint64_t unknown;   /* unknown types: skipped */
  uint64_t offset;    /* file offset of the next record handed out */
  uint32_t bad_size;  /* the offending size when stop == PLR_STOP_CORRUPT */
  uint32_t bad_type;
  plr_stop stop;
  int errnum;         /* errno for PLR_OPEN_ERRNO / PLR_STOP_IO */
  unsigned file_mode; /* st_mode for PLR_OPEN_NOT_REGULAR */
  unsigned char *buf; /* one record, PAGELOCK_TRACE_MAX_RECORD + 1 bytes */
  /* PLR_OPEN_BAD_HEADER: which field, its value and the valid ones. */
  const char *bad_field;
  char bad_value[32];
  char bad_valid[64];
  /* Checksummed traces (PAGELOCK_FILE_CHECKSUMS) are read a block at a
   * time: records are handed out only once their CHECK matched. */
  int checksums;
  unsigned char *blk;               /* the block's bytes, file offset blk_start on */
  size_t blk_cap, blk_pos, blk_end; /* records to hand out: [pos, end) */
  size_t blk_check;                 /* size of the verified CHECK after blk_end, or 0 */
  uint64_t blk_start;
  plr_stop blk_stop; /* why reading stops once the block is handed out */
  uint64_t blocks;   /* blocks verified */
  int unverified;    /* records after the last CHECK were handed out */
  plr_damage damage; /* stop == PLR_STOP_DAMAGED */
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
    /* Python sites (optional records of version 3). */
    const pagelock_rec_pystack *pystack;
    const pagelock_rec_pycode *pycode;
    /* Sampled GPU timing (optional): on is 0 or 1, mono_ns not 0. */
    const pagelock_rec_gpu_sample *gpu_sample;
    /* What finding call sites cost (optional). */
    const pagelock_rec_cost *cost;
  } u;
  /* exe, module path, symbol name, note text, kernel name (NAME), device
   * name (DEVICE), reason (GPU_STATUS), file name (PYCODE) */
  const char *str1;
  const char *str2;                  /* host (PROCESS), function name (PYCODE) */
  const uint64_t *frames;            /* STACK only, u.stack->depth entries */
  const pagelock_py_frame *pyframes; /* PYSTACK only, u.pystack->depth */
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

/* Opens the trace at path for reading without ever blocking on it: a FIFO
 * named as (or swapped in for) a trace would otherwise hang the open, or
 * the first read, until some writer came.  open() with O_NONBLOCK, then
 * fstat on that very descriptor (a stat before the open could be raced),
 * anything but a regular file refused, O_NONBLOCK cleared, fdopen.
 * Returns the stream, or NULL with errno set (EINVAL for a file that is
 * not regular) and, when msg is not NULL, the reason in msg without the
 * "pagelock: " prefix ("'f' is a FIFO, not a trace file (...)"). */
FILE *plr_open_trace(const char *path, char *msg, size_t len);

/* "a FIFO", "a directory", "a socket", ... for a stat mode that is not a
 * regular file. */
const char *plr_file_kind(unsigned mode);

/* Opens path (as plr_open_trace does: PLR_OPEN_NOT_REGULAR for anything but
 * a regular file) and validates every field of the file header: magic,
 * version (1 to PAGELOCK_TRACE_VERSION), header_size (64, the only size any
 * version has), pid, the two start times, flags (no bit the version does
 * not define) and the reserved fields (0).  On failure returns the status,
 * closes everything and leaves errnum set for PLR_OPEN_ERRNO.  The caller
 * must plr_close on success only. */
plr_open_status plr_open(plr_reader *r, const char *path);

/* Same, over an already open stream the reader takes ownership of (fclose'd
 * by plr_close or on failure).  Lets tests feed memory streams. */
plr_open_status plr_open_stream(plr_reader *r, FILE *f);

/* Decodes the next record of a known type into rec and returns 1; unknown
 * and malformed records are skipped (counted).  A COPY record of version-1
 * size (PAGELOCK_REC_COPY_V1_SIZE) is accepted and the fields it lacks
 * read as 0.  A COPY's count is at least 1 and its timed at most count:
 * before version 4 (and for a count of 0) both read as 1.  Returns 0 once
 * the stream stopped; r->stop then says why.  Never reads past an END
 * record.
 *
 * In a checksummed trace CHECK records are consumed here: a block's records
 * are handed out once its CHECK matched, and a block that does not stops
 * the stream (PLR_STOP_DAMAGED, r->damage) before any of them.  The records
 * after the last CHECK (a trace cut short by a kill or a full disk) are
 * handed out unchecked (r->unverified), unless a CHECK further on shows
 * they are a damaged block rather than a tail. */
int plr_next(plr_reader *r, plr_record *rec);

void plr_close(plr_reader *r);

/* Writes the user-facing message for a failed plr_open of path into buf,
 * without the "pagelock: " prefix. */
void plr_open_strerror(const plr_reader *r, plr_open_status st, const char *path, char *buf,
                       size_t len);

/* "'f' is corrupt from byte N (why); the report covers the K records before
 * it", without the prefix, for a reader or trace stopped by damage. */
void plr_damage_message(const plr_damage *d, const pagelock_file_header *h, const char *path,
                        char *buf, size_t len);

#endif
