/* hook_copy.c - one wrapper per exact driver copy symbol.
 *
 * Each wrapper only describes its call (direction, pointers, bytes, stream,
 * the saved arguments and a thunk that reissues the original call) and hands
 * it to pl_copy_exec(), the single place where a copy is decided (device
 * to device and peer copies only get their COPY record there).  One
 * wrapper per decorated name matters: cuMemcpyHtoD_v2 and its _ptds twin
 * differ in which default stream they use, and mapping a hook to the legacy
 * 32-bit cuMemcpyHtoD would silently truncate pointers. */
#define _GNU_SOURCE
#include <string.h>

#include "pl_internal.h"
#include "copy.h"
#include "hooks.h"

/* A driver entry point missing from this driver: the program could only
 * have reached our wrapper through the PLT of a newer libcuda. */
#define PL_REAL(api, type)          \
  type f = (type)pl_hook_real(api); \
  if (f == NULL) return CUDA_ERROR_NOT_FOUND

#define PL_CALLSITE __builtin_return_address(0)

/* ---- host to device -------------------------------------------------- */

typedef CUresult (*pl_htod_t)(CUdeviceptr, const void *, size_t);
typedef CUresult (*pl_htod_async_t)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*pl_dtoh_t)(void *, CUdeviceptr, size_t);
typedef CUresult (*pl_dtoh_async_t)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*pl_any_t)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*pl_any_async_t)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*pl_2d_t)(const CUDA_MEMCPY2D *);
typedef CUresult (*pl_2d_async_t)(const CUDA_MEMCPY2D *, CUstream);
typedef CUresult (*pl_3d_t)(const CUDA_MEMCPY3D *);
typedef CUresult (*pl_3d_async_t)(const CUDA_MEMCPY3D *, CUstream);
typedef CUresult (*pl_batch_t)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                               size_t *, size_t, size_t *, CUstream);
typedef CUresult (*pl_batch_v2_t)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
                                  CUmemcpyAttributes *, size_t *, size_t, CUstream);

static CUresult pl_native_htod(const pl_copy *c) {
  PL_REAL(c->api, pl_htod_t);
  return f(c->dst, (const void *)(uintptr_t)c->src, c->bytes);
}
static CUresult pl_native_htod_async(const pl_copy *c) {
  PL_REAL(c->api, pl_htod_async_t);
  return f(c->dst, (const void *)(uintptr_t)c->src, c->bytes, c->stream);
}
static CUresult pl_native_dtoh(const pl_copy *c) {
  PL_REAL(c->api, pl_dtoh_t);
  return f((void *)(uintptr_t)c->dst, c->src, c->bytes);
}
static CUresult pl_native_dtoh_async(const pl_copy *c) {
  PL_REAL(c->api, pl_dtoh_async_t);
  return f((void *)(uintptr_t)c->dst, c->src, c->bytes, c->stream);
}
static CUresult pl_native_any(const pl_copy *c) {
  PL_REAL(c->api, pl_any_t);
  return f(c->dst, c->src, c->bytes);
}
static CUresult pl_native_any_async(const pl_copy *c) {
  PL_REAL(c->api, pl_any_async_t);
  return f(c->dst, c->src, c->bytes, c->stream);
}

#define PL_WRAP_HTOD(NAME, FLAGS)                                       \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, const void *src, size_t n) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                            \
                 .flags = (FLAGS),                                      \
                 .dir = PAGELOCK_DIR_H2D,                               \
                 .dst = dst,                                            \
                 .src = (CUdeviceptr)(uintptr_t)src,                    \
                 .bytes = n,                                            \
                 .callsite = PL_CALLSITE,                               \
                 .native = pl_native_htod,                              \
                 .dst_mem = PAGELOCK_MEM_DEVICE};                       \
    return pl_copy_exec(&c);                                            \
  }
#define PL_WRAP_HTOD_ASYNC(NAME, FLAGS)                                             \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, const void *src, size_t n, CUstream s) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                        \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC,                            \
                 .dir = PAGELOCK_DIR_H2D,                                           \
                 .dst = dst,                                                        \
                 .src = (CUdeviceptr)(uintptr_t)src,                                \
                 .bytes = n,                                                        \
                 .stream = s,                                                       \
                 .callsite = PL_CALLSITE,                                           \
                 .native = pl_native_htod_async,                                    \
                 .dst_mem = PAGELOCK_MEM_DEVICE};                                   \
    return pl_copy_exec(&c);                                                        \
  }
#define PL_WRAP_DTOH(NAME, FLAGS)                                 \
  PL_EXPORT CUresult NAME(void *dst, CUdeviceptr src, size_t n) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                      \
                 .flags = (FLAGS),                                \
                 .dir = PAGELOCK_DIR_D2H,                         \
                 .dst = (CUdeviceptr)(uintptr_t)dst,              \
                 .src = src,                                      \
                 .bytes = n,                                      \
                 .callsite = PL_CALLSITE,                         \
                 .native = pl_native_dtoh,                        \
                 .src_mem = PAGELOCK_MEM_DEVICE};                 \
    return pl_copy_exec(&c);                                      \
  }
#define PL_WRAP_DTOH_ASYNC(NAME, FLAGS)                                       \
  PL_EXPORT CUresult NAME(void *dst, CUdeviceptr src, size_t n, CUstream s) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                  \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC,                      \
                 .dir = PAGELOCK_DIR_D2H,                                     \
                 .dst = (CUdeviceptr)(uintptr_t)dst,                          \
                 .src = src,                                                  \
                 .bytes = n,                                                  \
                 .stream = s,                                                 \
                 .callsite = PL_CALLSITE,                                     \
                 .native = pl_native_dtoh_async,                              \
                 .src_mem = PAGELOCK_MEM_DEVICE};                             \
    return pl_copy_exec(&c);                                                  \
  }
/* cuMemcpy/cuMemcpyAsync: unified addressing, either side may be host. */
#define PL_WRAP_ANY(NAME, FLAGS)                                        \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                            \
                 .flags = (FLAGS),                                      \
                 .dst = dst,                                            \
                 .src = src,                                            \
                 .bytes = n,                                            \
                 .callsite = PL_CALLSITE,                               \
                 .native = pl_native_any};                              \
    return pl_copy_exec(&c);                                            \
  }
#define PL_WRAP_ANY_ASYNC(NAME, FLAGS)                                              \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                        \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC,                            \
                 .dst = dst,                                                        \
                 .src = src,                                                        \
                 .bytes = n,                                                        \
                 .stream = s,                                                       \
                 .callsite = PL_CALLSITE,                                           \
                 .native = pl_native_any_async};                                    \
    return pl_copy_exec(&c);                                                        \
  }

PL_WRAP_HTOD(cuMemcpyHtoD_v2, 0)
PL_WRAP_HTOD(cuMemcpyHtoD_v2_ptds, PAGELOCK_COPY_PTDS)
PL_WRAP_DTOH(cuMemcpyDtoH_v2, 0)
PL_WRAP_DTOH(cuMemcpyDtoH_v2_ptds, PAGELOCK_COPY_PTDS)
PL_WRAP_HTOD_ASYNC(cuMemcpyHtoDAsync_v2, 0)
PL_WRAP_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, PAGELOCK_COPY_PTDS)
PL_WRAP_DTOH_ASYNC(cuMemcpyDtoHAsync_v2, 0)
PL_WRAP_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, PAGELOCK_COPY_PTDS)
PL_WRAP_ANY(cuMemcpy, 0)
PL_WRAP_ANY(cuMemcpy_ptds, PAGELOCK_COPY_PTDS)
PL_WRAP_ANY_ASYNC(cuMemcpyAsync, 0)
PL_WRAP_ANY_ASYNC(cuMemcpyAsync_ptsz, PAGELOCK_COPY_PTDS)

/* ---- device to device, peer: recorded, never staged nor registered --------
 * No host memory takes part, so the wrappers name both sides device memory
 * and the direction themselves: no pointer query is made for them. */

typedef CUresult (*pl_peer_t)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
typedef CUresult (*pl_peer_async_t)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t,
                                    CUstream);
typedef struct pl_peer_args {
  CUcontext dst_ctx, src_ctx;
} pl_peer_args;

static CUresult pl_native_peer(const pl_copy *c) {
  const pl_peer_args *a = c->args;
  PL_REAL(c->api, pl_peer_t);
  return f(c->dst, a->dst_ctx, c->src, a->src_ctx, c->bytes);
}
static CUresult pl_native_peer_async(const pl_copy *c) {
  const pl_peer_args *a = c->args;
  PL_REAL(c->api, pl_peer_async_t);
  return f(c->dst, a->dst_ctx, c->src, a->src_ctx, c->bytes, c->stream);
}

#define PL_WRAP_DTOD(NAME, FLAGS)                                       \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                            \
                 .flags = (FLAGS),                                      \
                 .dir = PAGELOCK_DIR_D2D,                               \
                 .dst = dst,                                            \
                 .src = src,                                            \
                 .bytes = n,                                            \
                 .callsite = PL_CALLSITE,                               \
                 .native = pl_native_any,                               \
                 .src_mem = PAGELOCK_MEM_DEVICE,                        \
                 .dst_mem = PAGELOCK_MEM_DEVICE};                       \
    return pl_copy_exec(&c);                                            \
  }
#define PL_WRAP_DTOD_ASYNC(NAME, FLAGS)                                             \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                        \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC,                            \
                 .dir = PAGELOCK_DIR_D2D,                                           \
                 .dst = dst,                                                        \
                 .src = src,                                                        \
                 .bytes = n,                                                        \
                 .stream = s,                                                       \
                 .callsite = PL_CALLSITE,                                           \
                 .native = pl_native_any_async,                                     \
                 .src_mem = PAGELOCK_MEM_DEVICE,                                    \
                 .dst_mem = PAGELOCK_MEM_DEVICE};                                   \
    return pl_copy_exec(&c);                                                        \
  }
#define PL_WRAP_PEER(NAME, FLAGS)                                                           \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, \
                          size_t n) {                                                       \
    pl_peer_args a = {dctx, sctx};                                                          \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                                \
                 .flags = (FLAGS),                                                          \
                 .dir = PAGELOCK_DIR_PEER,                                                  \
                 .dst = dst,                                                                \
                 .src = src,                                                                \
                 .bytes = n,                                                                \
                 .callsite = PL_CALLSITE,                                                   \
                 .args = &a,                                                                \
                 .native = pl_native_peer,                                                  \
                 .src_mem = PAGELOCK_MEM_DEVICE,                                            \
                 .dst_mem = PAGELOCK_MEM_DEVICE};                                           \
    return pl_copy_exec(&c);                                                                \
  }
#define PL_WRAP_PEER_ASYNC(NAME, FLAGS)                                                     \
  PL_EXPORT CUresult NAME(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, \
                          size_t n, CUstream s) {                                           \
    pl_peer_args a = {dctx, sctx};                                                          \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                                \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC,                                    \
                 .dir = PAGELOCK_DIR_PEER,                                                  \
                 .dst = dst,                                                                \
                 .src = src,                                                                \
                 .bytes = n,                                                                \
                 .stream = s,                                                               \
                 .callsite = PL_CALLSITE,                                                   \
                 .args = &a,                                                                \
                 .native = pl_native_peer_async,                                            \
                 .src_mem = PAGELOCK_MEM_DEVICE,                                            \
                 .dst_mem = PAGELOCK_MEM_DEVICE};                                           \
    return pl_copy_exec(&c);                                                                \
  }

PL_WRAP_DTOD(cuMemcpyDtoD_v2, 0)
PL_WRAP_DTOD(cuMemcpyDtoD_v2_ptds, PAGELOCK_COPY_PTDS)
PL_WRAP_DTOD_ASYNC(cuMemcpyDtoDAsync_v2, 0)
PL_WRAP_DTOD_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, PAGELOCK_COPY_PTDS)
PL_WRAP_PEER(cuMemcpyPeer, 0)
PL_WRAP_PEER(cuMemcpyPeer_ptds, PAGELOCK_COPY_PTDS)
PL_WRAP_PEER_ASYNC(cuMemcpyPeerAsync, 0)
PL_WRAP_PEER_ASYNC(cuMemcpyPeerAsync_ptsz, PAGELOCK_COPY_PTDS)

/* ---- 2D / 3D ----------------------------------------------------------- */

static CUresult pl_native_2d(const pl_copy *c) {
  PL_REAL(c->api, pl_2d_t);
  return f((const CUDA_MEMCPY2D *)c->args);
}
static CUresult pl_native_2d_async(const pl_copy *c) {
  PL_REAL(c->api, pl_2d_async_t);
  return f((const CUDA_MEMCPY2D *)c->args, c->stream);
}
static CUresult pl_native_3d(const pl_copy *c) {
  PL_REAL(c->api, pl_3d_t);
  return f((const CUDA_MEMCPY3D *)c->args);
}
static CUresult pl_native_3d_async(const pl_copy *c) {
  PL_REAL(c->api, pl_3d_async_t);
  return f((const CUDA_MEMCPY3D *)c->args, c->stream);
}

#define PL_WRAP_2D(NAME, FLAGS, FILL, NATIVE, T)                                                  \
  PL_EXPORT CUresult NAME(const T *p) {                                                           \
    pl_copy c = {                                                                                 \
        .api = PAGELOCK_API_##NAME, .flags = (FLAGS), .callsite = PL_CALLSITE, .native = NATIVE}; \
    FILL(&c, p);                                                                                  \
    return pl_copy_exec(&c);                                                                      \
  }
#define PL_WRAP_2D_ASYNC(NAME, FLAGS, FILL, NATIVE, T)   \
  PL_EXPORT CUresult NAME(const T *p, CUstream s) {      \
    pl_copy c = {.api = PAGELOCK_API_##NAME,             \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC, \
                 .stream = s,                            \
                 .callsite = PL_CALLSITE,                \
                 .native = NATIVE};                      \
    FILL(&c, p);                                         \
    return pl_copy_exec(&c);                             \
  }

PL_WRAP_2D(cuMemcpy2D_v2, 0, pl_fill_2d, pl_native_2d, CUDA_MEMCPY2D)
PL_WRAP_2D(cuMemcpy2D_v2_ptds, PAGELOCK_COPY_PTDS, pl_fill_2d, pl_native_2d, CUDA_MEMCPY2D)
PL_WRAP_2D(cuMemcpy2DUnaligned_v2, 0, pl_fill_2d, pl_native_2d, CUDA_MEMCPY2D)
PL_WRAP_2D(cuMemcpy2DUnaligned_v2_ptds, PAGELOCK_COPY_PTDS, pl_fill_2d, pl_native_2d, CUDA_MEMCPY2D)
PL_WRAP_2D_ASYNC(cuMemcpy2DAsync_v2, 0, pl_fill_2d, pl_native_2d_async, CUDA_MEMCPY2D)
PL_WRAP_2D_ASYNC(cuMemcpy2DAsync_v2_ptsz, PAGELOCK_COPY_PTDS, pl_fill_2d, pl_native_2d_async,
                 CUDA_MEMCPY2D)
PL_WRAP_2D(cuMemcpy3D_v2, 0, pl_fill_3d, pl_native_3d, CUDA_MEMCPY3D)
PL_WRAP_2D(cuMemcpy3D_v2_ptds, PAGELOCK_COPY_PTDS, pl_fill_3d, pl_native_3d, CUDA_MEMCPY3D)
PL_WRAP_2D_ASYNC(cuMemcpy3DAsync_v2, 0, pl_fill_3d, pl_native_3d_async, CUDA_MEMCPY3D)
PL_WRAP_2D_ASYNC(cuMemcpy3DAsync_v2_ptsz, PAGELOCK_COPY_PTDS, pl_fill_3d, pl_native_3d_async,
                 CUDA_MEMCPY3D)

/* ---- batches ------------------------------------------------------------ */

static CUresult pl_native_batch(const pl_copy *c) {
  const pl_batch_args *a = c->args;
  PL_REAL(c->api, pl_batch_t);
  return f(a->dsts, a->srcs, a->sizes, a->count, a->attrs, a->attrs_idxs, a->num_attrs, a->fail_idx,
           c->stream);
}
static CUresult pl_native_batch_v2(const pl_copy *c) {
  const pl_batch_args *a = c->args;
  PL_REAL(c->api, pl_batch_v2_t);
  return f(a->dsts, a->srcs, a->sizes, a->count, a->attrs, a->attrs_idxs, a->num_attrs, c->stream);
}

#define PL_WRAP_BATCH(NAME, FLAGS)                                                           \
  PL_EXPORT CUresult NAME(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, \
                          CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs,            \
                          size_t *fail_idx, CUstream s) {                                    \
    pl_batch_args a = {dsts, srcs, sizes, count, attrs, idxs, nattrs, fail_idx};             \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                                 \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC | PAGELOCK_COPY_BATCH,               \
                 .stream = s,                                                                \
                 .callsite = PL_CALLSITE,                                                    \
                 .args = &a,                                                                 \
                 .native = pl_native_batch};                                                 \
    return pl_copy_exec(&c);                                                                 \
  }
#define PL_WRAP_BATCH_V2(NAME, FLAGS)                                                           \
  PL_EXPORT CUresult NAME(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,    \
                          CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s) { \
    pl_batch_args a = {dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL};                    \
    pl_copy c = {.api = PAGELOCK_API_##NAME,                                                    \
                 .flags = (FLAGS) | PAGELOCK_COPY_ASYNC | PAGELOCK_COPY_BATCH,                  \
                 .stream = s,                                                                   \
                 .callsite = PL_CALLSITE,                                                       \
                 .args = &a,                                                                    \
                 .native = pl_native_batch_v2};                                                 \
    return pl_copy_exec(&c);                                                                    \
  }

PL_WRAP_BATCH(cuMemcpyBatchAsync, 0)
PL_WRAP_BATCH(cuMemcpyBatchAsync_ptsz, PAGELOCK_COPY_PTDS)
PL_WRAP_BATCH_V2(cuMemcpyBatchAsync_v2, 0)
PL_WRAP_BATCH_V2(cuMemcpyBatchAsync_v2_ptsz, PAGELOCK_COPY_PTDS)

/* ---- graph memcpy nodes: logged, never changed ------------------------- */

typedef CUresult (*pl_gadd_t)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                              const CUDA_MEMCPY3D *, CUcontext);
typedef CUresult (*pl_gset_t)(CUgraphNode, const CUDA_MEMCPY3D *);
typedef CUresult (*pl_gxset_t)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext);
typedef CUresult (*pl_gaddnode_t)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                  CUgraphNodeParams *);
typedef CUresult (*pl_gaddnode2_t)(CUgraphNode *, CUgraph, const CUgraphNode *,
                                   const CUgraphEdgeData *, size_t, CUgraphNodeParams *);
typedef CUresult (*pl_gnodeset_t)(CUgraphNode, CUgraphNodeParams *);
typedef CUresult (*pl_gxnodeset_t)(CUgraphExec, CUgraphNode, CUgraphNodeParams *);

/* The memcpy descriptor of generic node parameters, or NULL. */
static const CUDA_MEMCPY3D *pl_node_memcpy(const CUgraphNodeParams *np) {
  return np && np->type == CU_GRAPH_NODE_TYPE_MEMCPY ? &np->memcpy.copyParams : NULL;
}

PL_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps,
                                        size_t n, const CUDA_MEMCPY3D *p, CUcontext ctx) {
  PL_REAL(PAGELOCK_API_cuGraphAddMemcpyNode, pl_gadd_t);
  CUresult r = f(ph, g, deps, n, p, ctx);
  pl_copy_note_graph(PAGELOCK_API_cuGraphAddMemcpyNode, p, r, PL_CALLSITE);
  return r;
}

PL_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D *p) {
  PL_REAL(PAGELOCK_API_cuGraphMemcpyNodeSetParams, pl_gset_t);
  CUresult r = f(node, p);
  pl_copy_note_graph(PAGELOCK_API_cuGraphMemcpyNodeSetParams, p, r, PL_CALLSITE);
  return r;
}

PL_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec x, CUgraphNode node,
                                                  const CUDA_MEMCPY3D *p, CUcontext ctx) {
  PL_REAL(PAGELOCK_API_cuGraphExecMemcpyNodeSetParams, pl_gxset_t);
  CUresult r = f(x, node, p, ctx);
  pl_copy_note_graph(PAGELOCK_API_cuGraphExecMemcpyNodeSetParams, p, r, PL_CALLSITE);
  return r;
}

PL_EXPORT CUresult cuGraphAddNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                  CUgraphNodeParams *np) {
  PL_REAL(PAGELOCK_API_cuGraphAddNode, pl_gaddnode_t);
  CUresult r = f(ph, g, deps, n, np);
  pl_copy_note_graph(PAGELOCK_API_cuGraphAddNode, pl_node_memcpy(np), r, PL_CALLSITE);
  return r;
}

PL_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps,
                                     const CUgraphEdgeData *edges, size_t n,
                                     CUgraphNodeParams *np) {
  PL_REAL(PAGELOCK_API_cuGraphAddNode_v2, pl_gaddnode2_t);
  CUresult r = f(ph, g, deps, edges, n, np);
  pl_copy_note_graph(PAGELOCK_API_cuGraphAddNode_v2, pl_node_memcpy(np), r, PL_CALLSITE);
  return r;
}

PL_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams *np) {
  PL_REAL(PAGELOCK_API_cuGraphNodeSetParams, pl_gnodeset_t);
  CUresult r = f(node, np);
  pl_copy_note_graph(PAGELOCK_API_cuGraphNodeSetParams, pl_node_memcpy(np), r, PL_CALLSITE);
  return r;
}

PL_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec x, CUgraphNode node,
                                            CUgraphNodeParams *np) {
  PL_REAL(PAGELOCK_API_cuGraphExecNodeSetParams, pl_gxnodeset_t);
  CUresult r = f(x, node, np);
  pl_copy_note_graph(PAGELOCK_API_cuGraphExecNodeSetParams, pl_node_memcpy(np), r, PL_CALLSITE);
  return r;
}

void *const pl_copy_wrappers[PAGELOCK_API_COUNT] = {
#define PL_WRAPPER(n) (void *)n,
    PAGELOCK_API_LIST(PL_WRAPPER)
#undef PL_WRAPPER
};
