/* gpu_model.c - folds the version-2 (CUPTI) records of a trace into
 * plr_gpu_data while it streams, and joins copy calls to their GPU ops.
 *
 * Memory is the point here: a long run writes millions of COPY and GPU
 * records.  Intervals go into span sets that merge as they grow; each GPU
 * copy leaves one double (its bandwidth, for exact percentiles); and the
 * join keeps a call only until its GPU op arrives.
 *
 * The join.  A GPU op carries the CUPTI correlationId of the driver call
 * that queued it.  A COPY record names that id (gpu_correlation) for the
 * app's own call; the staging engine's chunks are the shim's own calls,
 * tied to the app's call (COPY.correlation, "seq") by LINK records.  Both
 * become "links" corr -> seq here, so one mechanism serves both:
 *
 *   - a call accumulator per seq holds the COPY (once read) and the ops
 *     joined so far, and how many links still wait for their op;
 *   - a link waits in a table keyed by corr until its op arrives;
 *   - an op whose corr has no link yet waits as an "orphan" (the shim
 *     writes GPU records later than COPY and LINK, but a CUPTI buffer can
 *     complete mid-call, and LINKs from CUPTI's external-correlation
 *     records come in the same batches as the ops);
 *   - a call is folded and forgotten as soon as its COPY was read and no
 *     link waits; what is left at the end is folded then.
 *
 * A batch call writes one COPY per entry, all with the same seq and the
 * same corr, and CUPTI one op per entry: each entry adds a link, and an op
 * takes the link whose byte count matches it.
 *
 * A LINK record ties every op of its corr to its call: the staging engine
 * may issue all the chunks of one call under one correlation (the H200
 * demo trace has seven ops per LINK), or one per chunk.  So a LINK is not
 * consumed by the op it meets: it stays in a ring of recent LINK
 * correlations, and ops of that corr arriving after the call was folded
 * are added to it late (the folded call's sites are remembered in a second
 * ring).  The shim writes a chunk's LINK twice (from its API callback and
 * from CUPTI's external correlation record): the repeat finds its corr in
 * the ring and is dropped.
 *
 * Each op is "settled" once it is known whose it is: the program's (joined
 * through a COPY's gpu_correlation, or never joined) or the shim's (a
 * staged chunk, joined through a LINK).  Only the program's pinned async
 * copies count towards the same-stream verdict, and bandwidth rows keep
 * chunks apart, so the report never counts pagelock's own work as the
 * program's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_model.h"
#include "idmap.h"
#include "trace_data.h"

/* Ops waiting for a COPY or LINK that never comes (GPU copies the shim did
 * not see, or a shim that wrote no correlation) must not grow without
 * bound: past this many, further ones are counted as unjoined at once. */
#define PLR_MAX_ORPHANS (1u << 16)
/* Recent LINK correlations (their ops may keep coming) and recently folded
 * linked calls (late ops find their sites), each a ring of this many. */
#define PLR_LINK_RING (1u << 16)
#define PLR_MAX_KNAMES 65536u
#define PLR_MAX_KNAME_LEN 1024u

/* Chains (a batch call's entries under one correlation) are searched this
 * far for a matching node: a hostile trace with a million COPY records
 * naming one correlation must not make the join quadratic. */
#define PLR_CHAIN_SCAN 64

/* ---- the join's nodes, in pools (idmap.h) ------------------------------ */

/* A link waiting for its op. */
typedef struct plr_link_node {
  uint64_t seq;
  uint64_t bytes; /* the COPY entry's bytes, 0 from a LINK record */
  uint32_t next;
} plr_link_node;

/* What a GPU copy op brings to its call. */
typedef struct plr_op {
  uint64_t start, end; /* CLOCK_MONOTONIC */
  uint64_t dur;
  uint64_t bytes;
  uint32_t device;
  uint32_t stream;          /* CUPTI streamId */
  uint8_t pageable, pinned; /* host side per CUPTI's src/dst kinds */
  uint8_t cdir;
  uint8_t copy_kind, src_kind, dst_kind;
  uint8_t pinned_async; /* async, H2D from or D2H to pinned host memory */
} plr_op;

typedef struct plr_orphan_node {
  plr_op op;
  uint32_t next;
} plr_orphan_node;

/* One app call (seq) being joined.  Laid out without padding holes: a
 * trace whose GPU records all come last keeps one of these per call. */
typedef struct plr_acc {
  uint64_t seq;
  uint64_t host_ns, bytes; /* summed over its COPY records */
  uint64_t callsite;
  uint64_t gpu_ns;  /* summed over its ops */
  uint32_t ncopies; /* copies of the COPY records read for this seq (batch:
                       several records; a run: its count), saturating */
  uint32_t flags;   /* OR of their flags */
  uint32_t stack_id, alloc_stack_id;
  uint32_t ops; /* ops joined so far */
  uint32_t next_free;
  int32_t device;        /* of the ops: -1 none yet, -2 several */
  int32_t outstanding;   /* links still waiting for their op */
  uint8_t dir, host_mem; /* of the first entry; host_mem pageable if any */
  uint8_t linked;        /* an op came through a LINK record */
  uint8_t pageable, pinned;
  uint8_t op_cdir; /* direction of the first op */
  uint32_t chunks; /* ops that came through LINK records */
  uint32_t pend;   /* of those, ops whose route waits for the COPY (a chain
                      of orphan nodes), PLR_NIL none */
  uint64_t chunk_bytes, chunk_gpu_ns;
} plr_acc;

/* A LINK correlation: the call its ops belong to, and whether one has
 * arrived (the call waits for the first). */
typedef struct plr_link_ent {
  uint64_t seq;
  uint8_t got;
} plr_link_ent;

/* What a late chunk needs of a call folded already. */
typedef struct plr_folded_ent {
  uint64_t callsite;
  uint32_t stack_id, alloc_stack_id;
  uint32_t flags;
  uint8_t host_mem;
} plr_folded_ent;

typedef struct plr_join {
  plr_map links;   /* corr -> head link node */
  plr_map orphans; /* corr -> head orphan node */
  plr_map accs;    /* seq -> acc */
  plr_ring linked; /* corr -> slot of lk: LINK correlations */
  plr_link_ent *lk;
  plr_ring folded; /* seq -> slot of fo: linked calls folded already */
  plr_folded_ent *fo;
  plr_link_node *ln;
  size_t nln, capln;
  uint32_t free_ln;
  plr_orphan_node *on;
  size_t non, capon;
  uint32_t free_on;
  size_t orphans_live;
  plr_acc *ac;
  size_t nac, capac;
  uint32_t free_ac;
} plr_join;

/* A free link node index, or PLR_NIL when out of memory. */
static uint32_t plr_ln_new(plr_join *j) {
  if (j->free_ln != PLR_NIL) {
    uint32_t i = j->free_ln;
    j->free_ln = j->ln[i].next;
    return i;
  }
  if (plr_pool_grow((void **)&j->ln, &j->capln, j->nln, sizeof *j->ln)) return PLR_NIL;
  return (uint32_t)j->nln++;
}

/* A free orphan node index, or PLR_NIL when out of memory. */
static uint32_t plr_on_new(plr_join *j) {
  if (j->free_on != PLR_NIL) {
    uint32_t i = j->free_on;
    j->free_on = j->on[i].next;
    return i;
  }
  if (plr_pool_grow((void **)&j->on, &j->capon, j->non, sizeof *j->on)) return PLR_NIL;
  return (uint32_t)j->non++;
}

/* The accumulator of seq, created (zeroed, mapped) when absent.  NULL when
 * out of memory. */
static plr_acc *plr_acc_get(plr_join *j, uint64_t seq, int create) {
  size_t slot = plr_map_find(&j->accs, seq);
  if (slot != SIZE_MAX) return &j->ac[j->accs.vals[slot]];
  if (!create) return NULL;
  uint32_t i;
  if (j->free_ac != PLR_NIL) {
    i = j->free_ac;
    j->free_ac = j->ac[i].next_free;
  } else {
    if (plr_pool_grow((void **)&j->ac, &j->capac, j->nac, sizeof *j->ac)) return NULL;
    i = (uint32_t)j->nac++;
  }
  if (plr_map_put(&j->accs, seq, i)) {
    j->ac[i].next_free = j->free_ac;
    j->free_ac = i;
    return NULL;
  }
  plr_acc *a = &j->ac[i];
  memset(a, 0, sizeof *a);
  a->seq = seq;
  a->device = -1;
  a->pend = PLR_NIL;
  return a;
}

/* Forgets a folded accumulator. */
static void plr_acc_drop(plr_join *j, plr_acc *a) {
  size_t slot = plr_map_find(&j->accs, a->seq);
  if (slot != SIZE_MAX) plr_map_del(&j->accs, slot);
  uint32_t i = (uint32_t)(a - j->ac);
  a->next_free = j->free_ac;
  j->free_ac = i;
}

/* ---- folding a joined call --------------------------------------------- */

static plr_gpu_dev *plr_dev_get(plr_gpu_data *g, uint32_t device, int *oom);
static plr_stream_acc *plr_stream_get(plr_gpu_dev *d, uint32_t stream);
static int plr_bw_add(plr_gpu_dev *d, const plr_op *op, int chunk);

/* What a GPU op the shim issued for a call moved (plr_op_settle's chunk):
 * none, a chunk staged through its pool, or the call's own buffer through
 * the shim's registration of it. */
enum { PLR_OP_OWN = 0, PLR_OP_STAGED = 1, PLR_OP_REG = 2 };

/* The kind of shim op of a call with these COPY flags (0: not read yet,
 * taken as staged). */
static int plr_shim_op(uint32_t flags) {
  return (flags & PAGELOCK_COPY_REGISTERED) ? PLR_OP_REG : PLR_OP_STAGED;
}

/* Counts a GPU copy op once it is known whose it is: a staged chunk or a
 * registered copy (the shim's, PLR_OP_*) or the program's own (joined
 * through its COPY, or never joined).  Bandwidth rows keep the shim's
 * apart, and only the program's pinned async copies are candidates for
 * the same-stream verdict. */
static int plr_op_settle(plr_trace *t, const plr_op *op, int chunk) {
  int oom = 0;
  plr_gpu_dev *d = plr_dev_get(&t->gpu, op->device, &oom);
  if (oom) return -1;
  if (!d) return 0; /* past PLR_MAX_GPU_DEVICES: counted in dev_overflow */
  if (plr_bw_add(d, op, chunk)) return -1;
  if (!chunk && !op->pinned_async) return 0;
  plr_stream_acc *st = plr_stream_get(d, op->stream);
  if (!st) return -1;
  if (chunk) {
    if (chunk == PLR_OP_STAGED) st->chunks++;
    return 0;
  }
  st->pinned_async++;
  st->pinned_async_ns += op->dur;
  return plr_spanvec_add(&st->pinned_spans, op->start, op->end);
}

/* Counts an op the shim issued for call a: at once when a's COPY said
 * its route, else once it does (the op waits on a, as an orphan node). */
static int plr_shim_op_settle(plr_trace *t, plr_join *j, plr_acc *a, const plr_op *op) {
  if (a->ncopies) return plr_op_settle(t, op, plr_shim_op(a->flags));
  uint32_t n = plr_on_new(j);
  if (n == PLR_NIL) return -1;
  j->on[n].op = *op;
  j->on[n].next = a->pend;
  a->pend = n;
  return 0;
}

/* Counts the ops that waited on a for its route (none read: staged). */
static int plr_acc_settle(plr_trace *t, plr_join *j, plr_acc *a) {
  for (uint32_t n = a->pend, nx; n != PLR_NIL; n = nx) {
    nx = j->on[n].next;
    if (plr_op_settle(t, &j->on[n].op, plr_shim_op(a->flags))) return -1;
    j->on[n].next = j->free_on;
    j->free_on = n;
  }
  a->pend = PLR_NIL;
  return 0;
}

/* Adds the GPU side of a joined call to a site's accumulator. */
static void plr_site_gpu_add(plr_site *s, const plr_acc *a, int made_sync) {
  s->g.calls += a->ncopies;
  s->g.gpu_ns += a->gpu_ns;
  if (plr_shim_op(a->flags) == PLR_OP_REG) {
    s->g.reg_ops += a->chunks;
    s->g.reg_bytes += a->chunk_bytes;
    s->g.reg_gpu_ns += a->chunk_gpu_ns;
  } else {
    s->g.chunks += a->chunks;
    s->g.chunk_bytes += a->chunk_bytes;
    s->g.chunk_gpu_ns += a->chunk_gpu_ns;
  }
  if (made_sync) {
    s->g.made_sync += a->ncopies;
    s->g.made_sync_host_ns += a->host_ns;
  }
  if (s->g.calls == a->ncopies) /* the site's first joined call */
    s->g.device = a->device;
  else if (s->g.device != a->device)
    s->g.device = -2;
}

/* Folds a call that has its COPY and at least one op into the join
 * results and its sites; a linked call is remembered so that chunks
 * arriving later still find it. */
static int plr_acc_fold(plr_trace *t, plr_join *j, const plr_acc *a) {
  plr_call_join *jn = &t->gpu.join;
  jn->calls += a->ncopies;
  jn->gpu_ns += a->gpu_ns;
  if (a->linked && plr_shim_op(a->flags) == PLR_OP_REG) {
    jn->registered += a->ncopies;
    jn->reg_ops += a->chunks;
    jn->reg_bytes += a->chunk_bytes;
    jn->reg_gpu_ns += a->chunk_gpu_ns;
  } else {
    jn->chunks += a->chunks;
    jn->chunk_bytes += a->chunk_bytes;
    jn->chunk_gpu_ns += a->chunk_gpu_ns;
    if (a->linked) jn->linked += a->ncopies;
  }
  if (a->pinned) jn->pinned += a->ncopies;
  unsigned cd = a->dir != PAGELOCK_DIR_UNKNOWN ? plr_cdir_of_dir(a->dir) : a->op_cdir;
  int made_sync = 0;
  /* A staged or shim-registered call may still join a pageable GPU record
   * (the partial first and last pages of a registered allocation go
   * through the native call): the program's copy did not take the
   * driver's pageable path, so it is no "pageable" verdict's. */
  if (a->pageable && !(a->flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED))) {
    jn->pageable += a->ncopies;
    /* "Made synchronous": an async entry point that still held the host
     * for at least half of what the GPU spent on the copy. */
    if (a->flags & PAGELOCK_COPY_ASYNC) {
      if (a->host_ns >= a->gpu_ns - a->gpu_ns / 2) {
        made_sync = 1;
        jn->made_sync += a->ncopies;
        jn->made_sync_host_ns += a->host_ns;
        jn->made_sync_bytes += a->bytes;
        jn->made_sync_gpu_ns += a->gpu_ns;
        jn->made_sync_dir_host_ns[cd] += a->host_ns;
        jn->made_sync_dir_bytes[cd] += a->bytes;
      }
    } else {
      jn->pageable_sync += a->ncopies;
      jn->pageable_sync_host_ns += a->host_ns;
      jn->pageable_sync_bytes += a->bytes;
      jn->pageable_sync_gpu_ns += a->gpu_ns;
      jn->pageable_sync_dir_host_ns[cd] += a->host_ns;
      jn->pageable_sync_dir_bytes[cd] += a->bytes;
    }
  }
  int shim_pageable = a->host_mem == PAGELOCK_MEM_PAGEABLE;
  /* Staged and shim-registered copies reach the GPU from pinned memory by
   * design: only a plain copy can show a disagreement. */
  int moved =
      (a->flags & (PAGELOCK_COPY_STAGED | PAGELOCK_COPY_REGISTERED | PAGELOCK_COPY_FALLBACK)) != 0;
  if (!moved && ((a->pageable && !shim_pageable && a->host_mem != PAGELOCK_MEM_UNKNOWN) ||
                 (shim_pageable && !a->pageable && a->pinned)))
    jn->mem_mismatch += a->ncopies;
  if (a->linked && plr_ring_find(&j->folded, a->seq) == SIZE_MAX) {
    size_t at = plr_ring_put(&j->folded, a->seq);
    if (at == SIZE_MAX) return -1;
    j->fo[at].callsite = a->callsite;
    j->fo[at].stack_id = a->stack_id;
    j->fo[at].alloc_stack_id = a->alloc_stack_id;
    j->fo[at].host_mem = a->host_mem;
    j->fo[at].flags = a->flags;
  }
  /* Only pageable copies (as the shim saw them) have site rows. */
  if (!shim_pageable) return 0;
  plr_site *s;
  plr_site_key k = {a->callsite, a->stack_id, 0};
  HASH_FIND(hh, t->sites, &k, sizeof k, s);
  if (s) plr_site_gpu_add(s, a, made_sync);
  if (a->alloc_stack_id) {
    plr_site_key ak = {0, a->alloc_stack_id, 0};
    HASH_FIND(hh, t->alloc_sites, &ak, sizeof ak, s);
    if (s) plr_site_gpu_add(s, a, made_sync);
  }
  return 0;
}

/* A chunk of a call folded already: its GPU time joins the call's (and
 * its sites', while the call is remembered). */
static void plr_late_chunk(plr_trace *t, plr_join *j, uint64_t seq, const plr_op *op) {
  plr_call_join *jn = &t->gpu.join;
  size_t at = plr_ring_find(&j->folded, seq);
  int reg = at != SIZE_MAX && plr_shim_op(j->fo[at].flags) == PLR_OP_REG;
  jn->gpu_ns += op->dur;
  if (reg) {
    jn->reg_ops++;
    jn->reg_bytes += op->bytes;
    jn->reg_gpu_ns += op->dur;
  } else {
    jn->chunks++;
    jn->chunk_bytes += op->bytes;
    jn->chunk_gpu_ns += op->dur;
  }
  if (at == SIZE_MAX || j->fo[at].host_mem != PAGELOCK_MEM_PAGEABLE) return;
  const plr_folded_ent *f = &j->fo[at];
  plr_site *s;
  plr_site_key k = {f->callsite, f->stack_id, 0};
  for (int pass = 0; pass < 2; pass++) {
    if (pass) {
      if (!f->alloc_stack_id) break;
      k = (plr_site_key){0, f->alloc_stack_id, 0};
      HASH_FIND(hh, t->alloc_sites, &k, sizeof k, s);
    } else {
      HASH_FIND(hh, t->sites, &k, sizeof k, s);
    }
    if (!s) continue;
    s->g.gpu_ns += op->dur;
    if (reg) {
      s->g.reg_ops++;
      s->g.reg_bytes += op->bytes;
      s->g.reg_gpu_ns += op->dur;
    } else {
      s->g.chunks++;
      s->g.chunk_bytes += op->bytes;
      s->g.chunk_gpu_ns += op->dur;
    }
  }
}

/* Folds and forgets a when it is complete: COPY read, no link waiting. */
static int plr_acc_try_finish(plr_trace *t, plr_join *j, plr_acc *a) {
  if (a->ncopies && a->outstanding <= 0 && a->ops) {
    if (plr_acc_settle(t, j, a) || plr_acc_fold(t, j, a)) return -1;
    plr_acc_drop(j, a);
  }
  return 0;
}

/* Adds one op to a call; chunk: it came through a LINK record. */
static void plr_acc_add_op(plr_acc *a, const plr_op *op, int chunk) {
  if (!a->ops) a->op_cdir = op->cdir;
  a->ops++;
  a->gpu_ns += op->dur;
  a->pageable |= op->pageable;
  a->pinned |= op->pinned;
  if (chunk) {
    a->linked = 1;
    a->chunks++;
    a->chunk_bytes += op->bytes;
    a->chunk_gpu_ns += op->dur;
  }
  if (a->device == -1)
    a->device = (int32_t)(op->device & 0x7fffffff);
  else if (a->device != (int32_t)(op->device & 0x7fffffff))
    a->device = -2;
}

/* Takes from the chain at map slot `slot` the node whose bytes equal
 * `bytes` (else the first), unlinking it and deleting the slot when the
 * chain empties.  Returns the node index. */
#define PLR_CHAIN_TAKE(j, map, pool, slot, bytes_of, bytes, out)                            \
  do {                                                                                      \
    uint32_t head_ = (map)->vals[slot], prev_ = PLR_NIL, pick_ = PLR_NIL, pprev_ = PLR_NIL, \
             scan_ = 0;                                                                     \
    for (uint32_t i_ = head_; i_ != PLR_NIL && scan_ < PLR_CHAIN_SCAN;                      \
         prev_ = i_, i_ = (pool)[i_].next, scan_++)                                         \
      if (bytes_of((pool)[i_]) == (bytes)) {                                                \
        pick_ = i_;                                                                         \
        pprev_ = prev_;                                                                     \
        break;                                                                              \
      }                                                                                     \
    if (pick_ == PLR_NIL) pick_ = head_;                                                    \
    if (pprev_ == PLR_NIL) {                                                                \
      if ((pool)[pick_].next == PLR_NIL)                                                    \
        plr_map_del(map, slot);                                                             \
      else                                                                                  \
        (map)->vals[slot] = (pool)[pick_].next;                                             \
    } else {                                                                                \
      (pool)[pprev_].next = (pool)[pick_].next;                                             \
    }                                                                                       \
    (out) = pick_;                                                                          \
  } while (0)
#define PLR_LN_BYTES(n) ((n).bytes)
#define PLR_ON_BYTES(n) ((n).op.bytes)

/* A GPU copy op arrived. */
static int plr_join_op(plr_trace *t, plr_join *j, uint32_t corr, const plr_op *op) {
  plr_call_join *jn = &t->gpu.join;
  jn->gpu_ops++;
  if (!corr) {
    jn->gpu_ops_unjoined++;
    return plr_op_settle(t, op, 0);
  }
  size_t slot = plr_map_find(&j->links, corr);
  if (slot != SIZE_MAX) {
    /* A COPY named it: the program's own op. */
    uint32_t n;
    PLR_CHAIN_TAKE(j, &j->links, j->ln, slot, PLR_LN_BYTES, op->bytes, n);
    uint64_t seq = j->ln[n].seq;
    j->ln[n].next = j->free_ln;
    j->free_ln = n;
    if (plr_op_settle(t, op, 0)) return -1;
    plr_acc *a = plr_acc_get(j, seq, 1);
    if (!a) return -1;
    a->outstanding--;
    plr_acc_add_op(a, op, 0);
    return plr_acc_try_finish(t, j, a);
  }
  size_t at = plr_ring_find(&j->linked, corr);
  if (at != SIZE_MAX) {
    /* A LINK named it: the shim's copy for that call, staged or through
     * a registration, as the call's COPY (or, folded, its memory) says. */
    plr_link_ent *e = &j->lk[at];
    plr_acc *a = plr_acc_get(j, e->seq, 0);
    size_t fo = a ? SIZE_MAX : plr_ring_find(&j->folded, e->seq);
    if (a ? plr_shim_op_settle(t, j, a, op)
          : plr_op_settle(t, op, plr_shim_op(fo != SIZE_MAX ? j->fo[fo].flags : 0)))
      return -1;
    if (!a) {
      plr_late_chunk(t, j, e->seq, op);
      e->got = 1;
      return 0;
    }
    plr_acc_add_op(a, op, 1);
    if (!e->got) {
      e->got = 1;
      a->outstanding--;
    }
    return plr_acc_try_finish(t, j, a);
  }
  if (j->orphans_live >= PLR_MAX_ORPHANS) {
    jn->gpu_ops_unjoined++;
    return plr_op_settle(t, op, 0);
  }
  uint32_t n = plr_on_new(j);
  if (n == PLR_NIL) return -1;
  j->on[n].op = *op;
  slot = plr_map_find(&j->orphans, corr);
  if (slot != SIZE_MAX) {
    j->on[n].next = j->orphans.vals[slot];
    j->orphans.vals[slot] = n;
  } else {
    j->on[n].next = PLR_NIL;
    if (plr_map_put(&j->orphans, corr, n)) return -1;
  }
  j->orphans_live++;
  return 0;
}

/* A LINK record: every op of corr belongs to call seq.  Ops that came
 * first are adopted now; a repeat of a known corr is dropped. */
static int plr_join_link_rec(plr_trace *t, plr_join *j, uint32_t corr, uint64_t seq) {
  if (plr_ring_find(&j->linked, corr) != SIZE_MAX) return 0;
  size_t at = plr_ring_put(&j->linked, corr);
  if (at == SIZE_MAX) return -1;
  j->lk[at].seq = seq;
  j->lk[at].got = 0;
  /* The call was folded already (its first LINK's op completed it): what
   * this corr brings is late. */
  plr_acc *a = plr_acc_get(j, seq, 0);
  int late = !a && plr_ring_find(&j->folded, seq) != SIZE_MAX;
  if (!a && !late && !(a = plr_acc_get(j, seq, 1))) return -1;
  size_t os = plr_map_find(&j->orphans, corr);
  if (os != SIZE_MAX) {
    for (uint32_t i = j->orphans.vals[os], nx; i != PLR_NIL; i = nx) {
      nx = j->on[i].next;
      plr_op op = j->on[i].op;
      j->on[i].next = j->free_on;
      j->free_on = i;
      j->orphans_live--;
      size_t fo = late ? plr_ring_find(&j->folded, seq) : SIZE_MAX;
      if (late ? plr_op_settle(t, &op, plr_shim_op(fo != SIZE_MAX ? j->fo[fo].flags : 0))
               : plr_shim_op_settle(t, j, a, &op))
        return -1;
      if (late) {
        plr_late_chunk(t, j, seq, &op);
      } else {
        /* plr_acc_get may not move the pool here: nothing is created. */
        plr_acc_add_op(a, &op, 1);
      }
    }
    plr_map_del(&j->orphans, os);
    j->lk[at].got = 1;
  } else if (!late) {
    a->outstanding++;
  }
  if (late) {
    j->lk[at].got = 1;
    return 0;
  }
  return plr_acc_try_finish(t, j, a);
}

/* corr is named by a COPY record of call seq (bytes: that entry's). */
static int plr_join_link(plr_trace *t, plr_join *j, uint32_t corr, uint64_t seq, uint64_t bytes) {
  /* An op that a LINK record claims is not the COPY's too. */
  if (plr_ring_find(&j->linked, corr) != SIZE_MAX) return 0;
  size_t os = plr_map_find(&j->orphans, corr);
  if (os != SIZE_MAX) {
    /* Its op came first. */
    uint32_t n;
    PLR_CHAIN_TAKE(j, &j->orphans, j->on, os, PLR_ON_BYTES, bytes, n);
    plr_op op = j->on[n].op;
    j->on[n].next = j->free_on;
    j->free_on = n;
    j->orphans_live--;
    if (plr_op_settle(t, &op, 0)) return -1;
    plr_acc *a = plr_acc_get(j, seq, 1);
    if (!a) return -1;
    plr_acc_add_op(a, &op, 0);
    return plr_acc_try_finish(t, j, a);
  }
  plr_acc *a = plr_acc_get(j, seq, 1);
  if (!a) return -1;
  uint32_t n = plr_ln_new(j);
  if (n == PLR_NIL) return -1;
  size_t slot = plr_map_find(&j->links, corr);
  j->ln[n].seq = seq;
  /* A zero-byte entry still needs a value no op of another entry has. */
  j->ln[n].bytes = bytes ? bytes : UINT64_MAX;
  if (slot != SIZE_MAX) {
    j->ln[n].next = j->links.vals[slot];
    j->links.vals[slot] = n;
  } else {
    j->ln[n].next = PLR_NIL;
    if (plr_map_put(&j->links, corr, n)) return -1;
  }
  a->outstanding++;
  return 0;
}

/* ---- sampled GPU timing -------------------------------------------------- */

/* While the shim has CUPTI's tracing paused (GPU_SAMPLE records), copy
 * calls get no GPU correlation and no GPU op by design: the report counts
 * them apart from the copies that should have joined and did not.  Whether
 * a copy without a correlation started in a pause is known once a
 * GPU_SAMPLE later than the copy was read (samples come in time order),
 * but COPY records reach the file in per-thread batches up to a second
 * late, before or after the samples around them.  So a copy later than
 * every sample read so far waits in a min-heap of start times until one
 * is.  A sampled run holds about one period's worth of such copies (the
 * shim samples once a second); past this many, further ones count as
 * unjoined, as they would without sampling. */
#define PLR_MAX_UNTIMED (1u << 20)

/* A copy record waiting: its start and how many copies it stands for. */
typedef struct plr_untimed_ent {
  uint64_t ns, copies;
} plr_untimed_ent;

typedef struct plr_untimed {
  plr_untimed_ent *v; /* min-heap by start time */
  size_t n, cap;
} plr_untimed;

/* 1 when CLOCK_MONOTONIC time ns lies in a pause known so far. */
static int plr_in_pause(const plr_gpu_data *g, uint64_t ns) {
  size_t lo = 0, hi = g->npauses;
  /* The last pause starting at or before ns. */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (g->pauses[mid].start <= ns)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && ns < g->pauses[lo - 1].end;
}

/* Settles the waiting copies that started before limit: each one in a
 * pause is untimed by design. */
static void plr_untimed_settle(plr_gpu_data *g, uint64_t limit) {
  plr_untimed *u = g->untimed;
  if (!u) return;
  while (u->n && u->v[0].ns < limit) {
    if (plr_in_pause(g, u->v[0].ns)) g->join.untimed_paused += u->v[0].copies;
    /* Pop: the last element sifts down from the root. */
    plr_untimed_ent x = u->v[--u->n];
    size_t i = 0;
    for (;;) {
      size_t k = 2 * i + 1;
      if (k >= u->n) break;
      if (k + 1 < u->n && u->v[k + 1].ns < u->v[k].ns) k++;
      if (x.ns <= u->v[k].ns) break;
      u->v[i] = u->v[k];
      i = k;
    }
    if (u->n) u->v[i] = x;
  }
}

/* One COPY record of `copies` copies (a run: its count) without a GPU
 * correlation, started at ns: settled now when a later sample was read,
 * else kept until one is.  A run lies in a pause or not by its first
 * copy's start, as a single copy does.  -1 when out of memory. */
static int plr_untimed_add(plr_gpu_data *g, uint64_t ns, uint64_t copies) {
  if (ns < g->sample_ns) {
    if (plr_in_pause(g, ns)) g->join.untimed_paused += copies;
    return 0;
  }
  if (!g->untimed && !(g->untimed = calloc(1, sizeof *g->untimed))) return -1;
  plr_untimed *u = g->untimed;
  if (u->n >= PLR_MAX_UNTIMED) return 0;
  if (u->n == u->cap) {
    size_t cap = u->cap ? u->cap * 2 : 256;
    plr_untimed_ent *v = realloc(u->v, cap * sizeof *v);
    if (!v) return -1;
    u->v = v;
    u->cap = cap;
  }
  size_t i = u->n++;
  while (i > 0 && u->v[(i - 1) / 2].ns > ns) {
    u->v[i] = u->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  u->v[i].ns = ns;
  u->v[i].copies = copies;
  return 0;
}

static void plr_untimed_free(plr_gpu_data *g) {
  if (!g->untimed) return;
  free(g->untimed->v);
  free(g->untimed);
  g->untimed = NULL;
}

/* Folds one GPU_SAMPLE (on 0 or 1, mono_ns not 0: checked by the
 * reader).  Pause and resume alternate, a pause first; a sample out of
 * time order, a resume with no pause open or a pause while paused is
 * ignored (counted), so the pauses stay sorted and disjoint. */
static int plr_fold_sample(plr_trace *t, const pagelock_rec_gpu_sample *s) {
  plr_gpu_data *g = &t->gpu;
  uint64_t ns = s->mono_ns;
  if (ns < g->sample_ns || (s->on != 0) != (g->paused != 0)) {
    g->samples_ignored++;
    return 0;
  }
  if (s->on) {
    g->pauses[g->npauses - 1].end = ns;
    g->paused = 0;
    g->windows++;
  } else {
    if (g->npauses == g->cap_pauses) {
      size_t cap = g->cap_pauses ? g->cap_pauses * 2 : 16;
      plr_gpu_pause *v = realloc(g->pauses, cap * sizeof *v);
      if (!v) return -1;
      g->pauses = v;
      g->cap_pauses = cap;
    }
    plr_gpu_pause *p = &g->pauses[g->npauses++];
    p->start = ns;
    p->end = UINT64_MAX;
    p->ops_per_s = s->ops_per_s;
    g->paused = 1;
    if (s->ops_per_s > g->max_ops_per_s) g->max_ops_per_s = s->ops_per_s;
  }
  g->sample_ns = ns;
  plr_untimed_settle(g, ns);
  return 0;
}

int plr_gpu_fold_copy(plr_trace *t, const pagelock_rec_copy *c) {
  plr_join *j = t->gpu.pending;
  if (!j) return 0;
  /* A graph node queues nothing; a capturing stream's copy runs when the
   * graph is launched, under another correlation. */
  if (c->flags & (PAGELOCK_COPY_GRAPH_NODE | PAGELOCK_COPY_CAPTURE)) return 0;
  /* Only while CUPTI traces can a pause be why a copy has no correlation;
   * with timing off every copy lacks one, and none need wait. */
  if (!c->gpu_correlation && c->start_ns && t->gpu.have_status &&
      t->gpu.status == PAGELOCK_GPU_TIMING_ON && plr_untimed_add(&t->gpu, c->start_ns, c->count))
    return -1;
  plr_acc *a = plr_acc_get(j, c->correlation, 0);
  /* A staged call's chunks may be linked after its COPY (LINKs from
   * CUPTI's external correlation records): keep it while timing is on. */
  int wait = c->gpu_correlation || ((c->flags & PAGELOCK_COPY_STAGED) && t->gpu.have_status &&
                                    t->gpu.status == PAGELOCK_GPU_TIMING_ON);
  if (!a && !wait) return 0;
  if (!a && !(a = plr_acc_get(j, c->correlation, 1))) return -1;
  if (!a->ncopies) {
    a->dir = c->dir < PLR_NDIR ? c->dir : PAGELOCK_DIR_UNKNOWN;
    a->callsite = c->callsite;
    a->stack_id = c->stack_id;
  }
  /* A run (CUPTI was not tracing when it formed, so it has no
   * gpu_correlation) joins only through a LINK of a staged copy: its
   * copies count as calls, its host time is already theirs. */
  a->ncopies = c->count > UINT32_MAX - a->ncopies ? UINT32_MAX : a->ncopies + c->count;
  a->flags |= c->flags;
  a->host_ns += c->host_ns;
  a->bytes += plr_copy_bucket(c).bytes;
  if (c->host_mem == PAGELOCK_MEM_PAGEABLE || !a->host_mem)
    a->host_mem = c->host_mem < PLR_NMEM ? c->host_mem : PAGELOCK_MEM_UNKNOWN;
  if (!a->alloc_stack_id) a->alloc_stack_id = c->alloc_stack_id;
  if (c->gpu_correlation) {
    uint64_t seq = a->seq;
    /* plr_join_link may move the accumulator pool: look a up again. */
    if (plr_join_link(t, j, c->gpu_correlation, seq, c->bytes)) return -1;
    a = plr_acc_get(j, seq, 0);
    if (!a) return 0; /* folded already */
  }
  return plr_acc_try_finish(t, j, a);
}

/* ---- devices ------------------------------------------------------------- */

/* The accumulator of a device ordinal, created when absent; NULL past
 * PLR_MAX_GPU_DEVICES or when out of memory (*oom set).  Every GPU record
 * looks its device up, and a hostile trace names a new one in each: a
 * binary search over the sorted ordinals keeps that at 8 steps. */
static plr_gpu_dev *plr_dev_get(plr_gpu_data *g, uint32_t device, int *oom) {
  size_t lo = 0, hi = g->ndev;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (g->dev_ord[mid] < device)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < g->ndev && g->dev_ord[lo] == device) return &g->dev[g->dev_at[lo]];
  if (g->ndev >= PLR_MAX_GPU_DEVICES) return NULL;
  if (g->ndev == g->cap_dev) {
    size_t cap = g->cap_dev ? g->cap_dev * 2 : 4;
    plr_gpu_dev *d = realloc(g->dev, cap * sizeof *d);
    if (!d) {
      *oom = 1;
      return NULL;
    }
    g->dev = d;
    g->cap_dev = cap;
  }
  memmove(g->dev_ord + lo + 1, g->dev_ord + lo, (g->ndev - lo) * sizeof *g->dev_ord);
  memmove(g->dev_at + lo + 1, g->dev_at + lo, (g->ndev - lo) * sizeof *g->dev_at);
  g->dev_ord[lo] = device;
  g->dev_at[lo] = (uint16_t)g->ndev;
  plr_gpu_dev *d = &g->dev[g->ndev++];
  memset(d, 0, sizeof *d);
  d->device = device;
  return d;
}

/* Adds one bandwidth sample (and its sums) to the row of its key. */
static int plr_bw_add(plr_gpu_dev *d, const plr_op *op, int chunk) {
  uint64_t dur = op->dur;
  uint32_t key = (uint32_t)op->copy_kind | (uint32_t)op->src_kind << 8 |
                 (uint32_t)op->dst_kind << 16 | (uint32_t)plr_size_bucket(op->bytes) << 24 |
                 (chunk == PLR_OP_STAGED ? PLR_BW_CHUNK
                  : chunk == PLR_OP_REG  ? PLR_BW_REG
                                         : 0u);
  plr_bw_acc *b;
  HASH_FIND(hh, d->bw, &key, sizeof key, b);
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b) return -1;
    b->key = key;
    HASH_ADD(hh, d->bw, key, sizeof b->key, b);
  }
  b->count++;
  b->bytes += op->bytes;
  b->gpu_ns += dur;
  if (!dur) return 0; /* no rate without a duration */
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 16;
    double *v = realloc(b->gbps, cap * sizeof *v);
    if (!v) return -1;
    b->gbps = v;
    b->cap = cap;
  }
  b->gbps[b->n++] = (double)op->bytes / (double)dur;
  return 0;
}

/* The per-stream sums of one stream, created when absent. */
static plr_stream_acc *plr_stream_get(plr_gpu_dev *d, uint32_t stream) {
  plr_stream_acc *s;
  HASH_FIND(hh, d->streams, &stream, sizeof stream, s);
  if (s) return s;
  s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->stream = stream;
  HASH_ADD(hh, d->streams, stream, sizeof s->stream, s);
  return s;
}

/* Folds one GPU record (enums already clamped by the reader). */
static int plr_fold_gpu(plr_trace *t, const pagelock_rec_gpu *r) {
  plr_gpu_data *g = &t->gpu;
  g->records++;
  if (r->kind == 0) {
    g->unknown_kind++;
    return 0;
  }
  /* CUPTI leaves 0 in records it could not time; a reversed interval is
   * corruption.  Either would distort every measure, so skip it. */
  if (r->start_ns == 0 || r->end_ns < r->start_ns) {
    g->bad_times++;
    return 0;
  }
  uint64_t s = plr_clock_to_mono(&g->clock, r->start_ns);
  uint64_t e = plr_clock_to_mono(&g->clock, r->end_ns);
  uint64_t dur = e - s;
  if (r->kind == PAGELOCK_GPU_SYNC) {
    g->syncs++;
    g->sync_ns += dur;
    return 0;
  }
  if (r->kind == PAGELOCK_GPU_OVERHEAD) {
    g->overheads++;
    g->overhead_ns += dur;
    return 0;
  }
  int oom = 0;
  plr_gpu_dev *d = plr_dev_get(g, r->device, &oom);
  if (oom) return -1;
  int is_copy = r->kind == PAGELOCK_GPU_MEMCPY || r->kind == PAGELOCK_GPU_MEMCPY_P2P;
  unsigned cd = plr_cdir_of_copy_kind(r->copy_kind);
  if (d) {
    if (!d->have_window || s < d->first_ns) d->first_ns = s;
    if (!d->have_window || e > d->last_ns) d->last_ns = e;
    d->have_window = 1;
    if (r->kind == PAGELOCK_GPU_KERNEL) {
      d->kernels++;
      if (plr_spanvec_add(&d->kern, s, e)) return -1;
      plr_stream_acc *st = plr_stream_get(d, r->stream);
      if (!st) return -1;
      st->kernels++;
      st->kernel_ns += dur;
    } else if (r->kind == PAGELOCK_GPU_MEMSET) {
      d->memsets++;
      if (plr_spanvec_add(&d->mset, s, e)) return -1;
    } else if (is_copy) {
      d->copies++;
      if (plr_spanvec_add(&d->copy[cd], s, e)) return -1;
      if ((r->src_kind == PAGELOCK_GPU_MEM_PAGEABLE || r->dst_kind == PAGELOCK_GPU_MEM_PAGEABLE) &&
          plr_spanvec_add(&d->pageable, s, e))
        return -1;
    }
  } else {
    g->dev_overflow++;
  }
  if (!is_copy) return 0;
  /* Bandwidth and stream sums wait until the op is known to be the
   * program's or a staged chunk (plr_op_settle). */
  plr_op op;
  memset(&op, 0, sizeof op);
  op.start = s;
  op.end = e;
  op.dur = dur;
  op.bytes = r->bytes;
  op.device = r->device;
  op.stream = r->stream;
  op.cdir = (uint8_t)cd;
  op.copy_kind = r->copy_kind;
  op.src_kind = r->src_kind;
  op.dst_kind = r->dst_kind;
  op.pageable =
      r->src_kind == PAGELOCK_GPU_MEM_PAGEABLE || r->dst_kind == PAGELOCK_GPU_MEM_PAGEABLE;
  op.pinned = r->src_kind == PAGELOCK_GPU_MEM_PINNED || r->dst_kind == PAGELOCK_GPU_MEM_PINNED;
  op.pinned_async = (r->flags & PAGELOCK_GPU_ASYNC) &&
                    ((cd == PLR_CDIR_H2D && r->src_kind == PAGELOCK_GPU_MEM_PINNED) ||
                     (cd == PLR_CDIR_D2H && r->dst_kind == PAGELOCK_GPU_MEM_PINNED));
  if (!g->pending) return plr_op_settle(t, &op, 0);
  return plr_join_op(t, g->pending, r->correlation, &op);
}

/* Keeps the first NAME record of each id. */
static int plr_fold_name(plr_trace *t, const plr_record *rec) {
  uint32_t id = rec->u.name->id;
  plr_kname *k;
  HASH_FIND(hh, t->gpu.names, &id, sizeof id, k);
  if (k || HASH_COUNT(t->gpu.names) >= PLR_MAX_KNAMES) return 0;
  k = calloc(1, sizeof *k);
  if (!k) return -1;
  k->id = id;
  k->name = strndup(rec->str1, PLR_MAX_KNAME_LEN);
  if (!k->name) {
    free(k);
    return -1;
  }
  HASH_ADD(hh, t->gpu.names, id, sizeof k->id, k);
  return 0;
}

int plr_gpu_load_begin(plr_trace *t) {
  plr_join *j = calloc(1, sizeof *j);
  if (!j) return -1;
  int oom = plr_ring_init(&j->linked, PLR_LINK_RING) | plr_ring_init(&j->folded, PLR_LINK_RING);
  j->lk = malloc(PLR_LINK_RING * sizeof *j->lk);
  j->fo = malloc(PLR_LINK_RING * sizeof *j->fo);
  if (oom || !j->lk || !j->fo) {
    plr_ring_free(&j->linked);
    plr_ring_free(&j->folded);
    free(j->lk);
    free(j->fo);
    free(j);
    return -1;
  }
  j->free_ln = j->free_on = j->free_ac = PLR_NIL;
  t->gpu.pending = j;
  return 0;
}

int plr_gpu_fold(plr_trace *t, const plr_record *rec) {
  plr_gpu_data *g = &t->gpu;
  int oom = 0;
  switch (rec->type) {
    case PAGELOCK_REC_GPU: return plr_fold_gpu(t, rec->u.gpu);
    case PAGELOCK_REC_NAME: return plr_fold_name(t, rec);
    case PAGELOCK_REC_LINK:
      g->links++;
      if (!g->pending) return 0;
      return plr_join_link_rec(t, g->pending, rec->u.link->correlation, rec->u.link->copy_seq);
    case PAGELOCK_REC_CLOCK:
      g->clocks++;
      plr_clock_update(&g->clock, rec->u.clock);
      return 0;
    case PAGELOCK_REC_DEVICE: {
      plr_gpu_dev *d = plr_dev_get(g, rec->u.device->device, &oom);
      if (oom) return -1;
      if (!d || d->have_props) return 0; /* the first description wins */
      d->have_props = 1;
      d->copy_engines = rec->u.device->copy_engines;
      d->sm_count = rec->u.device->sm_count;
      d->pci_gen = rec->u.device->pci_gen;
      snprintf(d->name, sizeof d->name, "%s", rec->str1);
      return 0;
    }
    case PAGELOCK_REC_GPU_SAMPLE: return plr_fold_sample(t, rec->u.gpu_sample);
    case PAGELOCK_REC_GPU_STATUS: {
      const pagelock_rec_gpu_status *s = rec->u.gpu_status;
      g->have_status = 1;
      g->status = s->status;
      g->cupti_version = s->cupti_version;
      g->status_records = s->records;
      g->status_dropped = s->dropped;
      g->status_buffers = s->buffers;
      snprintf(g->reason, sizeof g->reason, "%s", rec->str1);
      return 0;
    }
    default: return 0;
  }
}

/* 1 when a bandwidth row's copies are pinned host copies of >= 1 MiB in
 * direction cd: the reference "would save" compares against. */
static int plr_is_pinned_ref(const plr_bw_acc *b, unsigned cd) {
  unsigned kind = b->key & 0xff, src = (b->key >> 8) & 0xff, dst = (b->key >> 16) & 0xff,
           bucket = PLR_BW_BUCKET(b->key);
  if (bucket < plr_size_bucket(1u << 20)) return 0;
  if (cd == PLR_CDIR_H2D) return kind == PAGELOCK_GPU_COPY_HTOD && src == PAGELOCK_GPU_MEM_PINNED;
  if (cd == PLR_CDIR_D2H) return kind == PAGELOCK_GPU_COPY_DTOH && dst == PAGELOCK_GPU_MEM_PINNED;
  return 0;
}

/* Median of the pinned reference samples of direction cd over devices
 * [d0, d1) into *out (0 when there are none); -1 when out of memory. */
static int plr_pinned_median(const plr_gpu_dev *dev, size_t d0, size_t d1, unsigned cd,
                             double *out) {
  size_t n = 0;
  *out = 0;
  for (size_t i = d0; i < d1; i++) {
    const plr_bw_acc *b, *tmp;
    HASH_ITER(hh, dev[i].bw, b, tmp) {
      if (plr_is_pinned_ref(b, cd)) n += b->n;
    }
  }
  if (!n) return 0;
  double *v = malloc(n * sizeof *v);
  if (!v) return -1;
  size_t k = 0;
  for (size_t i = d0; i < d1; i++) {
    const plr_bw_acc *b, *tmp;
    HASH_ITER(hh, dev[i].bw, b, tmp) {
      if (!plr_is_pinned_ref(b, cd)) continue;
      if (b->n) memcpy(v + k, b->gbps, b->n * sizeof *v); /* gbps NULL when n 0 */
      k += b->n;
    }
  }
  *out = plr_median_select(v, n);
  free(v);
  return 0;
}

/* qsort order of devices by ordinal. */
static int plr_cmp_dev(const void *a, const void *b) {
  const plr_gpu_dev *x = a, *y = b;
  return x->device < y->device ? -1 : x->device > y->device;
}

/* Frees the join's tables. */
static void plr_join_free(plr_join *j) {
  if (!j) return;
  plr_map_free(&j->links);
  plr_map_free(&j->orphans);
  plr_map_free(&j->accs);
  plr_ring_free(&j->linked);
  plr_ring_free(&j->folded);
  free(j->lk);
  free(j->fo);
  free(j->ln);
  free(j->on);
  free(j->ac);
  free(j);
}

int plr_gpu_load_end(plr_trace *t) {
  plr_gpu_data *g = &t->gpu;
  plr_join *j = g->pending;
  if (j) {
    /* Calls still open: fold those that got an op; ops without a call are
     * unjoined. */
    for (size_t i = 0; i < j->accs.cap; i++) {
      if (j->accs.vals[i] == PLR_NIL) continue;
      plr_acc *a = &j->ac[j->accs.vals[i]];
      if (plr_acc_settle(t, j, a)) return -1;
      if (a->ncopies && a->ops) {
        if (plr_acc_fold(t, j, a)) return -1;
      } else if (!a->ncopies) {
        g->join.gpu_ops_unjoined += a->ops;
      }
    }
    /* Ops no COPY or LINK claimed are the program's as far as anyone
     * knows (a DtoD copy, a copy of a thread whose records were lost). */
    for (size_t i = 0; i < j->orphans.cap; i++) {
      if (j->orphans.vals[i] == PLR_NIL) continue;
      for (uint32_t n = j->orphans.vals[i]; n != PLR_NIL; n = j->on[n].next)
        if (plr_op_settle(t, &j->on[n].op, 0)) return -1;
    }
    g->join.gpu_ops_unjoined += j->orphans_live;
    plr_join_free(j);
    g->pending = NULL;
  }
  /* A pause no resume followed lasts to the end of the trace; then every
   * copy still waiting is settled. */
  if (g->paused) {
    plr_gpu_pause *p = &g->pauses[g->npauses - 1];
    p->end = t->last_ns > p->start ? t->last_ns : p->start;
    g->paused = 0;
  }
  plr_untimed_settle(g, UINT64_MAX);
  plr_untimed_free(g);
  uint64_t copies = t->tot.all.count, timed = g->join.calls + g->join.untimed_paused;
  g->join.unjoined = copies > timed ? copies - timed : 0;
  for (size_t i = 0; i < g->ndev; i++) {
    plr_gpu_dev *d = &g->dev[i];
    d->kern.n = plr_spans_normalize(d->kern.v, d->kern.n);
    d->mset.n = plr_spans_normalize(d->mset.v, d->mset.n);
    for (int c = 0; c < PLR_NCDIR; c++)
      d->copy[c].n = plr_spans_normalize(d->copy[c].v, d->copy[c].n);
    d->pageable.n = plr_spans_normalize(d->pageable.v, d->pageable.n);
  }
  if (g->ndev > 1) qsort(g->dev, g->ndev, sizeof *g->dev, plr_cmp_dev);
  /* Bandwidth percentiles: the pinned references first (they read the
   * samples of several rows), then each row's own; then the samples go. */
  for (unsigned cd = 0; cd < PLR_CDIR_OTHER; cd++) {
    if (plr_pinned_median(g->dev, 0, g->ndev, cd, &g->pinned_gbps[cd])) return -1;
    for (size_t i = 0; i < g->ndev; i++)
      if (plr_pinned_median(g->dev, i, i + 1, cd, &g->dev[i].pinned_gbps[cd])) return -1;
  }
  for (size_t i = 0; i < g->ndev; i++) {
    plr_bw_acc *b, *tmp;
    HASH_ITER(hh, g->dev[i].bw, b, tmp) {
      b->median = plr_median_select(b->gbps, b->n);
      b->p10 = plr_p10_select(b->gbps, b->n);
      free(b->gbps);
      b->gbps = NULL;
      b->cap = 0;
    }
  }
  return 0;
}

void plr_gpu_data_free(plr_gpu_data *g) {
  plr_join_free(g->pending);
  plr_untimed_free(g);
  free(g->pauses);
  for (size_t i = 0; i < g->ndev; i++) {
    plr_gpu_dev *d = &g->dev[i];
    plr_spanvec_free(&d->kern);
    plr_spanvec_free(&d->mset);
    for (int c = 0; c < PLR_NCDIR; c++) plr_spanvec_free(&d->copy[c]);
    plr_spanvec_free(&d->pageable);
    plr_bw_acc *b, *bt;
    HASH_ITER(hh, d->bw, b, bt) {
      HASH_DEL(d->bw, b);
      free(b->gbps);
      free(b);
    }
    plr_stream_acc *s, *st;
    HASH_ITER(hh, d->streams, s, st) {
      HASH_DEL(d->streams, s);
      plr_spanvec_free(&s->pinned_spans);
      free(s);
    }
  }
  free(g->dev);
  plr_kname *k, *kt;
  HASH_ITER(hh, g->names, k, kt) {
    HASH_DEL(g->names, k);
    free(k->name);
    free(k);
  }
  memset(g, 0, sizeof *g);
}
