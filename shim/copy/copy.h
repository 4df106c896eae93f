/* copy.h - the copy funnel (copy.c): where every wrapper hands its copy,
 * and the descriptors of 2D, 3D and batch calls. */
#ifndef PL_COPY_H
#define PL_COPY_H

#include "autopin.h"
#include "copycall.h"
#include "route.h"

/* The route of copy c (route.c), asking the engines what it needs to know
 * (pl_autopin_answer) as it goes; sets c->why.  *p holds what the
 * questions took (a hold, a registration to ask for after the copy).
 * Nothing is executed. */
pl_route pl_copy_route(pl_copy *c, long mode, pl_autopin_probe *p);
/* Every wrapper ends here: classify, decide (observe/stage/...), run, record.
 * Returns exactly what the program must see. */
CUresult pl_copy_exec(pl_copy *c);
/* Fill a pl_copy's sides and bytes from a 2D or 3D descriptor; a NULL
 * descriptor is left for the driver to refuse. */
void pl_fill_2d(pl_copy *c, const CUDA_MEMCPY2D *p);
void pl_fill_3d(pl_copy *c, const CUDA_MEMCPY3D *p);
/* A graph memcpy node was defined or changed (call already made, result r):
 * record it, flagged PAGELOCK_COPY_GRAPH_NODE.  Never touches the graph. */
void pl_copy_note_graph(int api, const CUDA_MEMCPY3D *p, CUresult r, void *callsite);
/* A batch call's arguments, as its wrapper saw them (c->args). */
typedef struct pl_batch_args {
  CUdeviceptr *dsts, *srcs;
  size_t *sizes, count;
  CUmemcpyAttributes *attrs;
  size_t *attrs_idxs, num_attrs, *fail_idx;
} pl_batch_args;
/* Number of entries of a batch call, and entry i of it. */
size_t pl_batch_count(const pl_copy *c);
void pl_batch_entry(const pl_copy *c, size_t i, CUdeviceptr *dst, CUdeviceptr *src, size_t *n);

#endif
