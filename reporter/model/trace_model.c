/* trace_model.c - folds a record stream into one plr_trace. */
#include "trace_model.h"

#include "gpu_model.h"
#include "pysite.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Modules and symbols come from the writer's exit-time dump; a corrupt or
 * hostile file could still claim millions, so cap what we keep. */
#define PLR_MAX_MODULES 65536u
#define PLR_MAX_SYMBOLS (1u << 20)

/* The modes in which the shim registers memory. */
static int plr_mode_registers(const plr_trace *t) {
  return t->have_process && (t->mode == PAGELOCK_MODE_REGISTER || t->mode == PAGELOCK_MODE_AUTO);
}

int plr_trace_shows_routes(const plr_trace *t) {
  return plr_mode_registers(t) || t->tot.routes[PLR_ROUTE_STAGE].count ||
         t->tot.routes[PLR_ROUTE_REGISTER].count;
}

int plr_trace_shows_why(const plr_trace *t) { return plr_mode_registers(t); }

/* strdup that reports failure through *oom instead of crashing later. */
static char *plr_dup(const char *s, int *oom) {
  char *d = strdup(s);
  if (!d) *oom = 1;
  return d;
}

/* Adds the copies of b, of `each` bytes apiece, to the site keyed by key
 * in *table, creating it. */
static int plr_site_add(plr_site **table, const plr_site_key *key, const plr_bucket *b,
                        uint64_t each, unsigned dir, unsigned route, int shared, int tracked,
                        int fresh, int32_t device) {
  plr_site *s;
  HASH_FIND(hh, *table, key, sizeof *key, s);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->key = *key;
    s->device = -1;
    HASH_ADD(hh, *table, key, sizeof s->key, s);
  }
  plr_bucket_add(&s->b, b);
  plr_bucket_add(&s->bydir[plr_cdir_of_dir(dir)], b);
  s->dirs |= 1u << (dir < PLR_NDIR ? dir : 0);
  plr_bucket_add(&s->routes[route], b);
  if (shared) plr_bucket_add(&s->shared, b);
  if (tracked) plr_bucket_add(&s->tracked, b);
  s->fresh += fresh != 0;
  plr_device_fold(&s->device, device < 0 ? -1 : device);
  if (each >= PLR_STAGE_MIN_DEFAULT) plr_bucket_add(&s->big, b);
  return 0;
}

/* Folds one COPY record into totals and site tables. */
static int plr_fold_copy(plr_trace *t, const pagelock_rec_copy *c) {
  unsigned dir = c->dir < PLR_NDIR ? c->dir : PAGELOCK_DIR_UNKNOWN;
  unsigned mem = c->host_mem < PLR_NMEM ? c->host_mem : PAGELOCK_MEM_UNKNOWN;
  /* A run of repeated copies counts as its count copies everywhere: every
   * field but the times holds for each of them. */
  plr_bucket b = plr_copy_bucket(c);
  uint64_t n = b.count;
  plr_totals *tot = &t->tot;
  /* A graph memcpy node is a definition, not a copy: it is counted apart
   * (each launch of the graph copies, and the shim does not see launches). */
  if (c->flags & PAGELOCK_COPY_GRAPH_NODE) {
    tot->graph_nodes += n;
    if (mem == PAGELOCK_MEM_PAGEABLE) tot->graph_nodes_pageable += n;
    return 0;
  }
  plr_bucket_add(&tot->all, &b);
  plr_bucket_add(&tot->by[dir][mem], &b);
  if (c->result != 0) tot->failed += n;
  if (c->flags & PAGELOCK_COPY_FALLBACK) tot->fallbacks += n;
  if (c->flags & PAGELOCK_COPY_CAPTURE) tot->captured += n;
  if (c->flags & PAGELOCK_COPY_REGISTERED) tot->registered += n;
  if (c->flags & PAGELOCK_COPY_STAGED) plr_bucket_add(&tot->staged, &b);
  /* A registered copy's host side is pageable memory the shim page-locked
   * (its pointer query answers pageable, as the program's would); a
   * staged one's is pageable too.  Both flags never come together, and
   * registration would win: the bytes moved through the registration. */
  if (c->flags & PAGELOCK_COPY_REGISTERED)
    plr_bucket_add(&tot->routes[PLR_ROUTE_REGISTER], &b);
  else if (c->flags & PAGELOCK_COPY_STAGED)
    plr_bucket_add(&tot->routes[PLR_ROUTE_STAGE], &b);
  else if (mem == PAGELOCK_MEM_PAGEABLE || mem == PAGELOCK_MEM_PINNED ||
           mem == PAGELOCK_MEM_REGISTERED)
    plr_bucket_add(&tot->routes[PLR_ROUTE_PASS], &b);

  if (c->start_ns) {
    if (!t->first_ns || c->start_ns < t->first_ns) t->first_ns = c->start_ns;
    uint64_t e = c->start_ns + c->host_ns;
    if (e > t->last_ns) t->last_ns = e;
  }
  if (mem != PAGELOCK_MEM_PAGEABLE) return 0;

  plr_bucket_add(&tot->pageable, &b);
  /* Staged and registered copies never took the driver's pageable path:
   * they did not make the host wait the way a pageable call does. */
  if (!(c->flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED))) {
    unsigned cd = plr_cdir_of_dir(dir);
    if (c->flags & PAGELOCK_COPY_ASYNC) {
      plr_bucket_add(&tot->pageable_async, &b);
      plr_bucket_add(&tot->pageable_async_dir[cd], &b);
    } else {
      plr_bucket_add(&tot->pageable_sync, &b);
      plr_bucket_add(&tot->pageable_sync_dir[cd], &b);
    }
  }
  if (!(c->flags & PAGELOCK_COPY_REGISTERED)) {
    /* Versions 1 and 2 had no reason field (its bytes were reserved). */
    unsigned why = t->hdr.version >= 3 && c->why < PAGELOCK_WHY_COUNT ? c->why : 0;
    plr_bucket_add(&tot->not_registered[why], &b);
  }
  unsigned route = (c->flags & PAGELOCK_COPY_REGISTERED) ? PLR_ROUTE_REGISTER
                   : (c->flags & PAGELOCK_COPY_STAGED)   ? PLR_ROUTE_STAGE
                                                         : PLR_ROUTE_PASS;
  int shared = t->hdr.version >= 3 && c->why == PAGELOCK_WHY_SHARED;
  plr_site_key k = {c->callsite, c->stack_id, 0};
  int tracked = c->alloc_stack_id != 0;
  int fresh = (c->flags & PAGELOCK_COPY_FIRST_USE) != 0;
  if (plr_site_add(&t->sites, &k, &b, c->bytes, dir, route, shared, tracked, fresh, c->device))
    return -1;
  if (c->alloc_stack_id) {
    plr_site_key ak = {0, c->alloc_stack_id, 0};
    if (plr_site_add(&t->alloc_sites, &ak, &b, c->bytes, dir, route, shared, 1, fresh, c->device))
      return -1;
  }
  return 0;
}

/* Interns a STACK record; the first definition of an id wins because the
 * writer emits each id before its first use. */
static int plr_fold_stack(plr_trace *t, const plr_record *rec) {
  const pagelock_rec_stack *s = rec->u.stack;
  plr_stack *st;
  uint32_t id = s->id;
  HASH_FIND(hh, t->stacks, &id, sizeof id, st);
  if (st) {
    t->duplicate_stacks++;
    return 0;
  }
  st = calloc(1, sizeof *st);
  if (!st) return -1;
  st->id = id;
  st->depth = s->depth;
  memcpy(st->frames, rec->frames, (size_t)s->depth * 8);
  HASH_ADD(hh, t->stacks, id, sizeof st->id, st);
  return 0;
}

/* Appends a MODULE record (sorted by start after loading). */
static int plr_fold_module(plr_trace *t, const plr_record *rec) {
  if (t->nmodules >= PLR_MAX_MODULES) return 0;
  if (t->nmodules == t->cap_modules) {
    size_t cap = t->cap_modules ? t->cap_modules * 2 : 64;
    plr_module *m = realloc(t->modules, cap * sizeof *m);
    if (!m) return -1;
    t->modules = m;
    t->cap_modules = cap;
  }
  int oom = 0;
  plr_module *m = &t->modules[t->nmodules];
  m->base = rec->u.module->base;
  m->start = rec->u.module->start;
  m->end = rec->u.module->end;
  m->path = plr_dup(rec->str1, &oom);
  if (oom) return -1;
  t->nmodules++;
  return 0;
}

/* Keeps the first SYMBOL record of each address. */
static int plr_fold_symbol(plr_trace *t, const plr_record *rec) {
  uint64_t addr = rec->u.symbol->addr;
  plr_symbol *s;
  HASH_FIND(hh, t->symbols, &addr, sizeof addr, s);
  if (s || HASH_COUNT(t->symbols) >= PLR_MAX_SYMBOLS) return 0;
  s = calloc(1, sizeof *s);
  if (!s) return -1;
  int oom = 0;
  s->addr = addr;
  s->sym_addr = rec->u.symbol->sym_addr;
  s->name = plr_dup(rec->str1, &oom);
  if (oom) {
    free(s);
    return -1;
  }
  HASH_ADD(hh, t->symbols, addr, sizeof s->addr, s);
  return 0;
}

/* FNV-1a of a note's text: notes are compared by hash first, so that a
 * trace of a million notes of up to 1 MiB costs one pass over each, not a
 * string compare with every note kept. */
static uint64_t plr_note_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  return h;
}

/* Keeps distinct notes only: a shim that logs the same problem per thread
 * must not flood the report header. */
static int plr_fold_note(plr_trace *t, const plr_record *rec) {
  uint64_t h = plr_note_hash(rec->str1);
  for (size_t i = 0; i < t->nnotes; i++)
    if (t->notes[i].hash == h && strcmp(t->notes[i].text, rec->str1) == 0) return 0;
  if (t->nnotes == PLR_MAX_NOTES) {
    t->notes_dropped++;
    return 0;
  }
  int oom = 0;
  t->notes[t->nnotes].kind = rec->u.note->kind;
  t->notes[t->nnotes].hash = h;
  t->notes[t->nnotes].text = plr_dup(rec->str1, &oom);
  if (oom) return -1;
  t->nnotes++;
  return 0;
}

/* Keeps the first PROCESS record: a second one can only be corruption. */
static int plr_fold_process(plr_trace *t, const plr_record *rec) {
  if (t->have_process) return 0;
  int oom = 0;
  char *exe = plr_dup(rec->str1, &oom);
  char *host = plr_dup(rec->str2, &oom);
  if (oom) {
    free(exe);
    free(host);
    return -1;
  }
  free(t->exe);
  free(t->host);
  t->exe = exe;
  t->host = host;
  t->have_process = 1;
  t->ppid = rec->u.process->ppid;
  t->mode = rec->u.process->mode;
  t->rank = rec->u.process->rank;
  return 0;
}

/* qsort order of modules by start address, for binary search. */
static int plr_cmp_module(const void *a, const void *b) {
  const plr_module *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

int plr_trace_load(plr_trace *t, const char *path, char *msg, size_t len) {
  FILE *f = plr_open_trace(path, msg, len);
  if (!f) return -1;
  return plr_trace_load_stream(t, f, path, msg, len);
}

int plr_trace_load_stream(plr_trace *t, FILE *f, const char *path, char *msg, size_t len) {
  memset(t, 0, sizeof *t);
  plr_reader r;
  plr_open_status st = plr_open_stream(&r, f);
  if (st != PLR_OPEN_OK) {
    plr_open_strerror(&r, st, path, msg, len);
    return -1;
  }
  int oom = plr_gpu_load_begin(t) != 0;
  t->path = plr_dup(path, &oom);
  t->exe = plr_dup("", &oom);
  t->host = plr_dup("", &oom);
  t->hdr = r.hdr;
  t->rank = -1;
  plr_record rec;
  while (!oom && plr_next(&r, &rec)) {
    int rc = 0;
    switch (rec.type) {
      case PAGELOCK_REC_PROCESS: rc = plr_fold_process(t, &rec); break;
      case PAGELOCK_REC_COPY:
        rc = plr_fold_copy(t, rec.u.copy);
        if (!rc) rc = plr_gpu_fold_copy(t, rec.u.copy);
        break;
      case PAGELOCK_REC_GPU:
      case PAGELOCK_REC_NAME:
      case PAGELOCK_REC_LINK:
      case PAGELOCK_REC_CLOCK:
      case PAGELOCK_REC_DEVICE:
      case PAGELOCK_REC_GPU_STATUS:
      case PAGELOCK_REC_GPU_SAMPLE: rc = plr_gpu_fold(t, &rec); break;
      case PAGELOCK_REC_STACK: rc = plr_fold_stack(t, &rec); break;
      case PAGELOCK_REC_PYSTACK:
      case PAGELOCK_REC_PYCODE: rc = plr_py_fold(t, &rec); break;
      case PAGELOCK_REC_MODULE: rc = plr_fold_module(t, &rec); break;
      case PAGELOCK_REC_SYMBOL: rc = plr_fold_symbol(t, &rec); break;
      case PAGELOCK_REC_COUNTERS:
        t->have_counters = 1;
        memcpy(&t->counters, rec.u.counters, sizeof t->counters);
        /* Reserved bytes before version 3: whatever they hold is no count. */
        if (t->hdr.version < 3)
          memset(&t->counters.register_budget, 0,
                 sizeof t->counters - offsetof(pagelock_rec_counters, register_budget));
        break;
      case PAGELOCK_REC_COST:
        t->have_cost = 1;
        memcpy(&t->cost, rec.u.cost, sizeof t->cost);
        break;
      case PAGELOCK_REC_NOTE: rc = plr_fold_note(t, &rec); break;
      case PAGELOCK_REC_END:
        t->have_end = 1;
        memcpy(&t->end, rec.u.end, sizeof t->end);
        if (t->end.end_mono_ns > t->last_ns) t->last_ns = t->end.end_mono_ns;
        break;
    }
    if (rc) oom = 1;
  }
  t->stop = r.stop;
  t->complete_records = r.complete;
  t->malformed_records = r.malformed;
  t->unknown_records = r.unknown;
  t->bad_size = r.bad_size;
  t->io_errnum = r.errnum;
  t->damage = r.damage;
  t->blocks = r.blocks;
  t->unverified = r.unverified;
  plr_close(&r);
  if (!oom && plr_gpu_load_end(t)) oom = 1;
  if (oom) {
    snprintf(msg, len, "'%s': out of memory while reading the trace", path);
    plr_trace_free(t);
    return -1;
  }
  /* The span starts when the trace was opened, which is before any copy. */
  if (t->hdr.start_mono_ns && (!t->first_ns || t->hdr.start_mono_ns < t->first_ns))
    t->first_ns = t->hdr.start_mono_ns;
  if (t->nmodules > 1) qsort(t->modules, t->nmodules, sizeof *t->modules, plr_cmp_module);
  return 0;
}

int plr_trace_partial(const plr_trace *t) {
  return t->stop != PLR_STOP_END || (t->hdr.flags & PLR_FILE_STOP_FLAGS);
}

const char *plr_trace_stop_reason(const plr_trace *t) {
  uint32_t f = t->hdr.flags;
  if (f & PAGELOCK_FILE_STOP_DISK_FULL) return "the disk filled up";
  if (f & PAGELOCK_FILE_STOP_WRITE_ERROR) return "a write to the trace failed";
  if (f & PAGELOCK_FILE_STOP_FD_LOST) return "the program closed the shim's trace file";
  return NULL;
}

const char *plr_trace_end_name(const plr_trace *t) {
  /* Damage first: it says where the report stops, whatever the writer
   * said about why it stopped. */
  if (t->stop == PLR_STOP_DAMAGED) return "damaged";
  uint32_t f = t->hdr.flags;
  if (f & PAGELOCK_FILE_STOP_DISK_FULL) return "disk-full";
  if (f & PAGELOCK_FILE_STOP_WRITE_ERROR) return "write-error";
  if (f & PAGELOCK_FILE_STOP_FD_LOST) return "fd-lost";
  switch (t->stop) {
    case PLR_STOP_END: return "end";
    case PLR_STOP_TRUNCATED: return "truncated";
    case PLR_STOP_CORRUPT: return "corrupt";
    case PLR_STOP_IO: return "read-error";
    default: return "no-end";
  }
}

void plr_trace_partial_message(const plr_trace *t, char *buf, size_t len) {
  if (!plr_trace_partial(t)) {
    if (len) buf[0] = 0;
    return;
  }
  if (t->stop == PLR_STOP_DAMAGED) {
    plr_damage_message(&t->damage, &t->hdr, t->path, buf, len);
    return;
  }
  if (t->stop == PLR_STOP_IO) {
    snprintf(buf, len,
             "'%s': read error after %llu complete records (%s): report is "
             "partial",
             t->path, (unsigned long long)t->complete_records, strerror(t->io_errnum));
    return;
  }
  const char *why = plr_trace_stop_reason(t);
  snprintf(buf, len, "'%s' ends after %llu complete records (%s): report is partial", t->path,
           (unsigned long long)t->complete_records, why ? why : "the program may have died");
}

const plr_stack *plr_trace_stack(const plr_trace *t, uint32_t id) {
  plr_stack *s;
  HASH_FIND(hh, t->stacks, &id, sizeof id, s);
  return s;
}

const plr_module *plr_trace_module(const plr_trace *t, uint64_t addr) {
  size_t lo = 0, hi = t->nmodules;
  /* Last module starting at or below addr; ranges do not overlap in a sane
   * trace and a corrupt one just resolves to the wrong module. */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->modules[mid].start <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return NULL;
  const plr_module *m = &t->modules[lo - 1];
  return addr < m->end ? m : NULL;
}

const char *plr_trace_kernel_name(const plr_trace *t, uint32_t id) {
  plr_kname *k;
  HASH_FIND(hh, t->gpu.names, &id, sizeof id, k);
  return k ? k->name : NULL;
}

/* Frees every entry of a uthash table of malloc'd plr_site-like items. */
#define PLR_FREE_TABLE(head, type)    \
  do {                                \
    type *cur_, *tmp_;                \
    HASH_ITER(hh, head, cur_, tmp_) { \
      HASH_DEL(head, cur_);           \
      free(cur_);                     \
    }                                 \
  } while (0)

void plr_trace_free(plr_trace *t) {
  plr_gpu_data_free(&t->gpu);
  PLR_FREE_TABLE(t->sites, plr_site);
  PLR_FREE_TABLE(t->alloc_sites, plr_site);
  PLR_FREE_TABLE(t->stacks, plr_stack);
  plr_py_free(t);
  plr_symbol *s, *tmp;
  HASH_ITER(hh, t->symbols, s, tmp) {
    HASH_DEL(t->symbols, s);
    free(s->name);
    free(s);
  }
  for (size_t i = 0; i < t->nmodules; i++) free(t->modules[i].path);
  free(t->modules);
  for (size_t i = 0; i < t->nnotes; i++) free(t->notes[i].text);
  free(t->path);
  free(t->exe);
  free(t->host);
  memset(t, 0, sizeof *t);
}
