/* trace_model.h - one trace file aggregated as it streams.
 *
 * Copy records are folded into fixed totals and into one accumulator per
 * distinct (stack, call site) and per allocation stack, so memory grows with
 * the number of distinct stacks, modules and symbols, never with the number
 * of copies. */
#ifndef PLR_TRACE_MODEL_H
#define PLR_TRACE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <uthash.h>

#include "pagelock_trace.h"
#include "trace_read.h"

#define PLR_NDIR 5 /* pagelock_dir values; out-of-range -> UNKNOWN */
#define PLR_NMEM 7 /* pagelock_mem values; out-of-range -> UNKNOWN */
#define PLR_MAX_NOTES 64

typedef struct plr_bucket {
  uint64_t count;
  uint64_t bytes;
  uint64_t host_ns;
} plr_bucket;

typedef struct plr_totals {
  plr_bucket all;
  plr_bucket by[PLR_NDIR][PLR_NMEM]; /* [dir][host_mem] */
  plr_bucket pageable;               /* host side pageable */
  plr_bucket pageable_async;         /* async + pageable + not staged */
  plr_bucket staged;                 /* moved by the staging engine */
  uint64_t failed;                   /* result != CUDA_SUCCESS */
  uint64_t fallbacks;                /* PAGELOCK_COPY_FALLBACK */
  uint64_t captured;                 /* PAGELOCK_COPY_CAPTURE */
  uint64_t registered;               /* PAGELOCK_COPY_REGISTERED */
  uint64_t graph_nodes;              /* PAGELOCK_COPY_GRAPH_NODE: defined, not copies */
  uint64_t graph_nodes_pageable;     /* ... of them with a pageable host side */
} plr_totals;

/* Accumulator of pageable copies sharing one raw key. */
typedef struct plr_site_key {
  uint64_t callsite; /* 0 for allocation sites */
  uint32_t stack_id;
  uint32_t zero;     /* padding kept 0: the key is hashed as bytes */
} plr_site_key;

typedef struct plr_site {
  plr_site_key key;
  plr_bucket b;
  uint32_t dirs; /* bit (1 << pagelock_dir) for each direction seen */
  UT_hash_handle hh;
} plr_site;

typedef struct plr_stack {
  uint32_t id;
  uint32_t depth;
  uint64_t frames[PAGELOCK_MAX_FRAMES];
  UT_hash_handle hh;
} plr_stack;

typedef struct plr_module {
  uint64_t base, start, end;
  char *path; /* "" = main program */
} plr_module;

typedef struct plr_symbol {
  uint64_t addr;
  uint64_t sym_addr;
  char *name;
  UT_hash_handle hh;
} plr_symbol;

typedef struct plr_note {
  uint32_t kind;
  char *text;
} plr_note;

typedef struct plr_trace {
  char *path;
  pagelock_file_header hdr;

  int have_process;
  uint64_t ppid;
  uint32_t mode;
  int32_t rank;
  char *exe;  /* never NULL after load: "" when no PROCESS record */
  char *host;

  uint64_t first_ns, last_ns; /* CLOCK_MONOTONIC span seen in the trace */
  plr_totals tot;
  plr_site *sites;       /* pageable copies by (stack_id, callsite) */
  plr_site *alloc_sites; /* pageable copies by alloc_stack_id */

  plr_stack *stacks;
  plr_module *modules;
  size_t nmodules, cap_modules;
  plr_symbol *symbols;
  plr_note notes[PLR_MAX_NOTES];
  size_t nnotes;
  uint64_t notes_dropped;

  int have_counters;
  pagelock_rec_counters counters;
  int have_end;
  pagelock_rec_end end;

  /* How reading ended, copied from the reader. */
  plr_stop stop;
  uint64_t complete_records;
  uint64_t malformed_records;
  uint64_t unknown_records;
  uint64_t duplicate_stacks;
  uint32_t bad_size;
  int io_errnum;
} plr_trace;

/* Reads and aggregates path.  Returns 0 when the file is a trace (the
 * result may still be partial: see plr_trace_partial), -1 when it cannot be
 * reported at all; msg then holds the reason without the "pagelock: "
 * prefix.  t must be plr_trace_free'd after a 0 return only. */
int plr_trace_load(plr_trace *t, const char *path, char *msg, size_t len);

/* Same over an open stream (taken over and closed), for tests; path is the
 * name used in messages. */
int plr_trace_load_stream(plr_trace *t, FILE *f, const char *path, char *msg,
                          size_t len);

/* 1 when the writer did not close the trace cleanly. */
int plr_trace_partial(const plr_trace *t);

/* Writes "'f' ends after N complete records ..." (no prefix) when the trace
 * is partial, else an empty string. */
void plr_trace_partial_message(const plr_trace *t, char *buf, size_t len);

const plr_stack *plr_trace_stack(const plr_trace *t, uint32_t id);

/* The module whose executable range holds addr, or NULL. */
const plr_module *plr_trace_module(const plr_trace *t, uint64_t addr);

void plr_trace_free(plr_trace *t);

/* Adds b into acc. */
void plr_bucket_add(plr_bucket *acc, const plr_bucket *b);

/* Sums the totals of one trace into acc. */
void plr_totals_add(plr_totals *acc, const plr_totals *t);

const char *plr_mode_name(uint32_t mode);
const char *plr_dir_name(unsigned dir);
const char *plr_mem_name(unsigned mem);
const char *plr_note_kind_name(uint32_t kind);

#endif
