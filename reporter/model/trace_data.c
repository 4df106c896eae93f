/* trace_data.c - bucket arithmetic, and how a record's fields map onto
 * the model's directions and memory kinds (trace_data.h). */
#include "trace_data.h"

void plr_bucket_add(plr_bucket *acc, const plr_bucket *b) {
  acc->count += b->count;
  acc->bytes += b->bytes;
  acc->host_ns += b->host_ns;
  acc->est_count += b->est_count;
  acc->est_timed += b->est_timed;
}

plr_bucket plr_copy_bucket(const pagelock_rec_copy *c) {
  plr_bucket b = {c->count, c->bytes, c->host_ns, 0, 0};
  if (c->count > 1 && c->bytes > UINT64_MAX / c->count)
    b.bytes = UINT64_MAX;
  else
    b.bytes = c->bytes * c->count;
  if (c->timed < c->count) {
    b.est_count = c->count;
    b.est_timed = c->timed;
  }
  return b;
}

plr_bucket plr_totals_dir(const plr_totals *t, unsigned dir) {
  plr_bucket b = {0};
  if (dir < PLR_NDIR)
    for (int m = 0; m < PLR_NMEM; m++) plr_bucket_add(&b, &t->by[dir][m]);
  return b;
}

void plr_totals_add(plr_totals *acc, const plr_totals *t) {
  plr_bucket_add(&acc->all, &t->all);
  for (int d = 0; d < PLR_NDIR; d++)
    for (int m = 0; m < PLR_NMEM; m++) plr_bucket_add(&acc->by[d][m], &t->by[d][m]);
  plr_bucket_add(&acc->pageable, &t->pageable);
  plr_bucket_add(&acc->pageable_async, &t->pageable_async);
  plr_bucket_add(&acc->pageable_sync, &t->pageable_sync);
  for (int c = 0; c < PLR_NCDIR; c++) {
    plr_bucket_add(&acc->pageable_async_dir[c], &t->pageable_async_dir[c]);
    plr_bucket_add(&acc->pageable_sync_dir[c], &t->pageable_sync_dir[c]);
  }
  plr_bucket_add(&acc->staged, &t->staged);
  acc->failed += t->failed;
  acc->fallbacks += t->fallbacks;
  acc->captured += t->captured;
  acc->registered += t->registered;
  acc->graph_nodes += t->graph_nodes;
  acc->graph_nodes_pageable += t->graph_nodes_pageable;
  for (int r = 0; r < PLR_NROUTE; r++) plr_bucket_add(&acc->routes[r], &t->routes[r]);
  for (int w = 0; w < PAGELOCK_WHY_COUNT; w++)
    plr_bucket_add(&acc->not_registered[w], &t->not_registered[w]);
}

unsigned plr_cdir_of_dir(unsigned dir) {
  return dir == PAGELOCK_DIR_H2D   ? PLR_CDIR_H2D
         : dir == PAGELOCK_DIR_D2H ? PLR_CDIR_D2H
                                   : PLR_CDIR_OTHER;
}

unsigned plr_cdir_of_copy_kind(unsigned k) {
  switch (k) {
    case PAGELOCK_GPU_COPY_HTOD:
    case PAGELOCK_GPU_COPY_HTOA: return PLR_CDIR_H2D;
    case PAGELOCK_GPU_COPY_DTOH:
    case PAGELOCK_GPU_COPY_ATOH: return PLR_CDIR_D2H;
    default: return PLR_CDIR_OTHER;
  }
}

unsigned plr_gpu_host_kind(const pagelock_rec_gpu *g) {
  switch (g->copy_kind) {
    case PAGELOCK_GPU_COPY_HTOD:
    case PAGELOCK_GPU_COPY_HTOA:
    case PAGELOCK_GPU_COPY_HTOH: return g->src_kind;
    case PAGELOCK_GPU_COPY_DTOH:
    case PAGELOCK_GPU_COPY_ATOH: return g->dst_kind;
    case PAGELOCK_GPU_COPY_UNKNOWN:
      /* Direction unknown: a host kind on either side is the host side. */
      if (g->src_kind == PAGELOCK_GPU_MEM_PAGEABLE || g->src_kind == PAGELOCK_GPU_MEM_PINNED)
        return g->src_kind;
      if (g->dst_kind == PAGELOCK_GPU_MEM_PAGEABLE || g->dst_kind == PAGELOCK_GPU_MEM_PINNED)
        return g->dst_kind;
      return PAGELOCK_GPU_MEM_UNKNOWN;
    default: return PAGELOCK_GPU_MEM_DEVICE;
  }
}

int plr_gpu_is_copy(const pagelock_rec_gpu *g) {
  return g->kind == PAGELOCK_GPU_MEMCPY || g->kind == PAGELOCK_GPU_MEMCPY_P2P;
}
