/* walk.c - re-reads a trace as timed events (see walk.h). */
#include "walk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "trace_read.h"

/* Kernel names are interned once each, but a corrupt or hostile trace can
 * define any number of any length: keep what a report can show. */
#define PLR_TL_MAX_NAMES 65536u
#define PLR_TL_MAX_NAME_LEN 4096u
#define PLR_TL_MAX_NAME_BYTES (16u << 20)

FILE *plr_source_open(const plr_source *src) {
  if (src->data) {
    /* fmemopen refuses a zero-length buffer on some glibc versions; an
     * empty trace is then an empty file, which the reader reports. */
    if (src->len == 0) return fopen("/dev/null", "rb");
    return fmemopen((void *)src->data, src->len, "rb");
  }
  if (!src->path) {
    errno = EINVAL;
    return NULL;
  }
  /* The writers read the file again after the CLI checked it: by then it
   * may be a FIFO, which must not hang the report. */
  return plr_open_trace(src->path, NULL, 0);
}

typedef struct plr_tl_name {
  uint32_t id;
  char *name;
  UT_hash_handle hh;
} plr_tl_name;

typedef struct plr_tl_names {
  plr_tl_name *table;
  size_t count, bytes;
} plr_tl_names;

/* Keeps the first definition of a NAME id (the writer defines each once,
 * before first use); returns -1 when out of memory. */
static int plr_tl_name_add(plr_tl_names *n, uint32_t id, const char *s) {
  plr_tl_name *e;
  HASH_FIND(hh, n->table, &id, sizeof id, e);
  if (e || n->count >= PLR_TL_MAX_NAMES) return 0;
  size_t len = strnlen(s, PLR_TL_MAX_NAME_LEN);
  if (n->bytes + len > PLR_TL_MAX_NAME_BYTES) return 0;
  e = calloc(1, sizeof *e);
  if (!e) return -1;
  e->name = malloc(len + 1);
  if (!e->name) {
    free(e);
    return -1;
  }
  memcpy(e->name, s, len);
  e->name[len] = 0;
  e->id = id;
  HASH_ADD(hh, n->table, id, sizeof e->id, e);
  n->count++;
  n->bytes += len;
  return 0;
}

/* The name of NAME id, or NULL when it was never defined (or capped). */
static const char *plr_tl_name_get(const plr_tl_names *n, uint32_t id) {
  plr_tl_name *e;
  if (id == 0) return NULL;
  HASH_FIND(hh, n->table, &id, sizeof id, e);
  return e ? e->name : NULL;
}

/* Frees every interned name. */
static void plr_tl_names_free(plr_tl_names *n) {
  plr_tl_name *e, *tmp;
  HASH_ITER(hh, n->table, e, tmp) {
    HASH_DEL(n->table, e);
    free(e->name);
    free(e);
  }
}

int plr_walk(const plr_source *src, plr_event_fn fn, void *ctx) {
  FILE *f = plr_source_open(src);
  if (!f) return -1;
  plr_reader r;
  if (plr_open_stream(&r, f) != PLR_OPEN_OK) return -1;
  plr_tl_names names = {0};
  /* No CLOCK record yet: GPU times are already CLOCK_MONOTONIC. */
  plr_clock clock;
  memset(&clock, 0, sizeof clock);
  int rc = 0;
  plr_record rec;
  while (rc == 0 && plr_next(&r, &rec)) {
    plr_event ev;
    memset(&ev, 0, sizeof ev);
    switch (rec.type) {
      case PAGELOCK_REC_COPY:
        ev.kind = PLR_EV_CALL;
        ev.copy = rec.u.copy;
        ev.start = rec.u.copy->start_ns;
        /* Unsigned wrap would put a corrupt call before its start. */
        ev.end = rec.u.copy->host_ns > UINT64_MAX - ev.start ? UINT64_MAX
                                                             : ev.start + rec.u.copy->host_ns;
        rc = fn(ctx, &ev);
        break;
      case PAGELOCK_REC_GPU: {
        const pagelock_rec_gpu *g = rec.u.gpu;
        /* The analysis ignores these (a record CUPTI never completed, or
         * corruption); drawing them would contradict its numbers. */
        if (g->start_ns == 0 || g->end_ns < g->start_ns) break;
        ev.kind = PLR_EV_GPU;
        ev.gpu = g;
        ev.start = plr_clock_to_mono(&clock, g->start_ns);
        ev.end = plr_clock_to_mono(&clock, g->end_ns);
        if (g->kind == PAGELOCK_GPU_KERNEL) ev.name = plr_tl_name_get(&names, g->name_id);
        rc = fn(ctx, &ev);
        break;
      }
      case PAGELOCK_REC_NAME:
        if (plr_tl_name_add(&names, rec.u.name->id, rec.str1)) rc = -1;
        break;
      case PAGELOCK_REC_CLOCK: plr_clock_update(&clock, rec.u.clock); break;
      case PAGELOCK_REC_LINK:
        ev.kind = PLR_EV_LINK;
        ev.link = rec.u.link;
        rc = fn(ctx, &ev);
        break;
      case PAGELOCK_REC_DEVICE:
        ev.kind = PLR_EV_DEVICE;
        ev.device = rec.u.device;
        ev.name = rec.str1;
        rc = fn(ctx, &ev);
        break;
      default: break;
    }
  }
  plr_tl_names_free(&names);
  plr_close(&r);
  return rc;
}
