/*
 * fc_graph.c: stream capture, graphs and graph launch.
 *
 * While a stream captures, the ops that would have been queued on it
 * (copies with their parameters, memsets, kernels, host functions, event
 * records and waits) are appended to a linear graph instead of running.
 * Instantiation copies the op list; a launch queues a fresh copy of every
 * op on the launch stream, in capture order.  Copies are classified
 * pinned/pageable again at launch, so a captured pageable copy replays at
 * the pageable bandwidth.
 */
#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"

#define FC_GRAPH_MAGIC 0x50524746u /* "FGRP" */
#define FC_GNODE_MAGIC 0x444f4e46u /* "FNOD" */
#define FC_GEXEC_MAGIC 0x43584546u /* "FEXC" */

typedef struct fc_gnode {
  uint32_t magic;
  fc_graph *graph;
  CUgraphNodeType type;
  fc_op *op;
} fc_gnode;

struct fc_graph {
  uint32_t magic;
  fc_gnode **nodes;
  size_t n, cap;
  CUgraphNode tail; /* storage for cuStreamGetCaptureInfo's dependency list */
  int registered;   /* handed to the application (in fc_graphs) */
  fc_graph *next, *prev;
};

typedef struct fc_gexec {
  uint32_t magic;
  fc_op **ops;
  size_t n;
  struct fc_gexec *next, *prev;
} fc_gexec;

static pthread_mutex_t fc_graph_mu = PTHREAD_MUTEX_INITIALIZER;
static fc_graph *fc_graphs;
static fc_gexec *fc_gexecs;
static _Atomic unsigned long long fc_capture_ids;

static fc_graph *fc_graph_new(void) {
  fc_graph *g = calloc(1, sizeof *g);
  if (g) g->magic = FC_GRAPH_MAGIC;
  return g;
}

static void fc_graph_register(fc_graph *g) {
  pthread_mutex_lock(&fc_graph_mu);
  g->registered = 1;
  g->next = fc_graphs;
  if (fc_graphs) fc_graphs->prev = g;
  fc_graphs = g;
  pthread_mutex_unlock(&fc_graph_mu);
}

void fc_graph_free(fc_graph *g) {
  if (g == NULL) return;
  if (g->registered) {
    pthread_mutex_lock(&fc_graph_mu);
    if (g->prev)
      g->prev->next = g->next;
    else if (fc_graphs == g)
      fc_graphs = g->next;
    if (g->next) g->next->prev = g->prev;
    pthread_mutex_unlock(&fc_graph_mu);
  }
  for (size_t i = 0; i < g->n; i++) {
    fc_op_free(g->nodes[i]->op);
    g->nodes[i]->magic = 0;
    free(g->nodes[i]);
  }
  free(g->nodes);
  g->magic = 0;
  free(g);
}

static void fc_gexec_free(fc_gexec *x) {
  pthread_mutex_lock(&fc_graph_mu);
  if (x->prev)
    x->prev->next = x->next;
  else if (fc_gexecs == x)
    fc_gexecs = x->next;
  if (x->next) x->next->prev = x->prev;
  pthread_mutex_unlock(&fc_graph_mu);
  for (size_t i = 0; i < x->n; i++) fc_op_free(x->ops[i]);
  free(x->ops);
  x->magic = 0;
  free(x);
}

void fc_graph_fini(void) {
  while (fc_graphs) fc_graph_free(fc_graphs);
  while (fc_gexecs) fc_gexec_free(fc_gexecs);
}

static CUgraphNodeType fc_node_type(int kind) {
  switch (kind) {
    case FC_OP_COPY: return CU_GRAPH_NODE_TYPE_MEMCPY;
    case FC_OP_MEMSET: return CU_GRAPH_NODE_TYPE_MEMSET;
    case FC_OP_KERNEL: return CU_GRAPH_NODE_TYPE_KERNEL;
    case FC_OP_EVENT_RECORD: return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    case FC_OP_EVENT_WAIT: return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    case FC_OP_HOSTFN: return CU_GRAPH_NODE_TYPE_HOST;
    default: return CU_GRAPH_NODE_TYPE_EMPTY;
  }
}

/* Append op to g as a new node (taking ownership of op on success). */
static CUresult fc_graph_append(fc_graph *g, fc_op *op, fc_gnode **out) {
  fc_gnode *node = calloc(1, sizeof *node);
  if (node != NULL && g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 16;
    fc_gnode **nn = realloc(g->nodes, cap * sizeof *nn);
    if (nn == NULL) {
      free(node);
      node = NULL;
    } else {
      g->nodes = nn;
      g->cap = cap;
    }
  }
  if (node == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  node->magic = FC_GNODE_MAGIC;
  node->graph = g;
  node->type = fc_node_type(op->kind);
  node->op = op;
  g->nodes[g->n++] = node;
  g->tail = (CUgraphNode)node;
  if (out) *out = node;
  return CUDA_SUCCESS;
}

CUresult fc_capture_add_locked(fc_stream *s, fc_op *op) {
  fc_graph *g = s->cap_graph;
  if (s->cap_invalid || g == NULL) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  return fc_graph_append(g, op, NULL);
}

/* ------------------------------------------------------------------ */
/* capture                                                            */

static CUresult fc_begin_capture(CUstream h, CUstreamCaptureMode mode, int pt) {
  if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (s->kind == FC_SK_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fc_graph *g = fc_graph_new();
  if (g == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&s->mu);
  if (s->capturing) {
    pthread_mutex_unlock(&s->mu);
    fc_graph_free(g);
    return CUDA_ERROR_ILLEGAL_STATE;
  }
  s->capturing = 1;
  s->cap_invalid = 0;
  s->cap_mode = mode;
  s->cap_id = atomic_fetch_add(&fc_capture_ids, 1) + 1;
  s->cap_thread = pthread_self();
  s->cap_graph = g;
  pthread_mutex_unlock(&s->mu);
  return CUDA_SUCCESS;
}

/* The calling thread's capture-interaction mode, exchanged.  A library
 * that must make a potentially unsafe call (cuMemHostUnregister) while the
 * program captures in global mode on another thread sets relaxed around it,
 * as cuda.h shows. */
FC_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  FC_ENTER(cuThreadExchangeStreamCaptureMode);
  if (mode == NULL || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
    FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  CUstreamCaptureMode old = (CUstreamCaptureMode)fc_tls_capture_mode;
  fc_tls_capture_mode = (int)*mode;
  *mode = old;
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
  FC_ENTER(cuStreamBeginCapture);
  FC_RETURN(fc_begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 0));
}

FC_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  FC_ENTER(cuStreamBeginCapture_ptsz);
  FC_RETURN(fc_begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 1));
}

FC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  FC_ENTER(cuStreamBeginCapture_v2);
  FC_RETURN(fc_begin_capture(hStream, mode, 0));
}

FC_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  FC_ENTER(cuStreamBeginCapture_v2_ptsz);
  FC_RETURN(fc_begin_capture(hStream, mode, 1));
}

static CUresult fc_end_capture(CUstream h, CUgraph *out, int pt) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&s->mu);
  if (!s->capturing) {
    pthread_mutex_unlock(&s->mu);
    return CUDA_ERROR_ILLEGAL_STATE;
  }
  if (s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      !pthread_equal(s->cap_thread, pthread_self())) {
    pthread_mutex_unlock(&s->mu);
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  fc_graph *g = s->cap_graph;
  int invalid = s->cap_invalid;
  s->capturing = 0;
  s->cap_invalid = 0;
  s->cap_graph = NULL;
  pthread_mutex_unlock(&s->mu);
  *out = NULL;
  if (invalid) {
    fc_graph_free(g);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  fc_graph_register(g);
  *out = (CUgraph)g;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  FC_ENTER(cuStreamEndCapture);
  FC_RETURN(fc_end_capture(hStream, phGraph, 0));
}

FC_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  FC_ENTER(cuStreamEndCapture_ptsz);
  FC_RETURN(fc_end_capture(hStream, phGraph, 1));
}

struct fc_capinfo {
  CUstreamCaptureStatus status;
  cuuint64_t id;
  CUgraph graph;
  const CUgraphNode *deps;
  size_t ndeps;
};

static CUresult fc_capture_info(CUstream h, int pt, struct fc_capinfo *ci) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  memset(ci, 0, sizeof *ci);
  pthread_mutex_lock(&s->mu);
  if (s->capturing) {
    ci->status =
        s->cap_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    ci->id = s->cap_id;
    ci->graph = (CUgraph)s->cap_graph;
    if (s->cap_graph && s->cap_graph->n) {
      ci->deps = &s->cap_graph->tail;
      ci->ndeps = 1;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return CUDA_SUCCESS;
}

static CUresult fc_is_capturing(CUstream h, CUstreamCaptureStatus *st, int pt) {
  if (st == NULL) return CUDA_ERROR_INVALID_VALUE;
  struct fc_capinfo ci;
  CUresult r = fc_capture_info(h, pt, &ci);
  if (r == CUDA_SUCCESS) *st = ci.status;
  return r;
}

FC_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  FC_ENTER(cuStreamIsCapturing);
  FC_RETURN(fc_is_capturing(hStream, captureStatus, 0));
}

FC_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                            CUstreamCaptureStatus *captureStatus) {
  FC_ENTER(cuStreamIsCapturing_ptsz);
  FC_RETURN(fc_is_capturing(hStream, captureStatus, 1));
}

static CUresult fc_get_capture_info(CUstream h, int pt, CUstreamCaptureStatus *st, cuuint64_t *id,
                                    CUgraph *graph, const CUgraphNode **deps,
                                    const CUgraphEdgeData **edges, size_t *ndeps) {
  if (st == NULL) return CUDA_ERROR_INVALID_VALUE;
  struct fc_capinfo ci;
  CUresult r = fc_capture_info(h, pt, &ci);
  if (r != CUDA_SUCCESS) return r;
  *st = ci.status;
  if (id) *id = ci.id;
  if (graph) *graph = ci.graph;
  if (deps) *deps = ci.deps;
  if (edges) *edges = NULL; /* all edges are default edges */
  if (ndeps) *ndeps = ci.ndeps;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out) {
  FC_ENTER(cuStreamGetCaptureInfo);
  FC_RETURN(fc_get_capture_info(hStream, 0, captureStatus_out, id_out, NULL, NULL, NULL, NULL));
}

FC_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out) {
  FC_ENTER(cuStreamGetCaptureInfo_ptsz);
  FC_RETURN(fc_get_capture_info(hStream, 1, captureStatus_out, id_out, NULL, NULL, NULL, NULL));
}

FC_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                             CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out, CUgraph *graph_out,
                                             const CUgraphNode **dependencies_out,
                                             size_t *numDependencies_out) {
  FC_ENTER(cuStreamGetCaptureInfo_v2);
  FC_RETURN(fc_get_capture_info(hStream, 0, captureStatus_out, id_out, graph_out, dependencies_out,
                                NULL, numDependencies_out));
}

FC_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                  CUstreamCaptureStatus *captureStatus_out,
                                                  cuuint64_t *id_out, CUgraph *graph_out,
                                                  const CUgraphNode **dependencies_out,
                                                  size_t *numDependencies_out) {
  FC_ENTER(cuStreamGetCaptureInfo_v2_ptsz);
  FC_RETURN(fc_get_capture_info(hStream, 1, captureStatus_out, id_out, graph_out, dependencies_out,
                                NULL, numDependencies_out));
}

FC_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                             CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out, CUgraph *graph_out,
                                             const CUgraphNode **dependencies_out,
                                             const CUgraphEdgeData **edgeData_out,
                                             size_t *numDependencies_out) {
  FC_ENTER(cuStreamGetCaptureInfo_v3);
  FC_RETURN(fc_get_capture_info(hStream, 0, captureStatus_out, id_out, graph_out, dependencies_out,
                                edgeData_out, numDependencies_out));
}

FC_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                  CUstreamCaptureStatus *captureStatus_out,
                                                  cuuint64_t *id_out, CUgraph *graph_out,
                                                  const CUgraphNode **dependencies_out,
                                                  const CUgraphEdgeData **edgeData_out,
                                                  size_t *numDependencies_out) {
  FC_ENTER(cuStreamGetCaptureInfo_v3_ptsz);
  FC_RETURN(fc_get_capture_info(hStream, 1, captureStatus_out, id_out, graph_out, dependencies_out,
                                edgeData_out, numDependencies_out));
}

/* ------------------------------------------------------------------ */
/* graphs                                                             */

static fc_graph *fc_graph_handle(CUgraph h) {
  fc_graph *g = (fc_graph *)h;
  return (g && g->magic == FC_GRAPH_MAGIC && g->registered) ? g : NULL;
}

FC_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  FC_ENTER(cuGraphCreate);
  if (phGraph == NULL || flags != 0) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  fc_graph *g = fc_graph_new();
  if (g == NULL) FC_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
  fc_graph_register(g);
  *phGraph = (CUgraph)g;
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  FC_ENTER(cuGraphDestroy);
  fc_graph *g = fc_graph_handle(hGraph);
  if (g == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  fc_graph_free(g);
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  FC_ENTER(cuGraphGetNodes);
  fc_graph *g = fc_graph_handle(hGraph);
  if (g == NULL || numNodes == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (nodes != NULL) {
    for (size_t i = 0; i < *numNodes; i++) nodes[i] = i < g->n ? (CUgraphNode)g->nodes[i] : NULL;
    if (*numNodes > g->n) *numNodes = g->n;
  } else {
    *numNodes = g->n;
  }
  FC_RETURN(CUDA_SUCCESS);
}

/* Explicit memcpy nodes.  Dependencies are accepted and ignored: nodes run
 * in the order they were added, which respects any dependency on an
 * earlier node. */
static CUresult fc_add_memcpy_node(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps,
                                   size_t ndeps, const CUDA_MEMCPY3D *p) {
  fc_graph *g = fc_graph_handle(hg);
  if (g == NULL || ph == NULL || p == NULL || (ndeps && deps == NULL))
    return CUDA_ERROR_INVALID_VALUE;
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) return r;
  fc_op *op;
  r = fc_copy_node_op(p, c->device, &op);
  if (r != CUDA_SUCCESS) return r;
  fc_gnode *node;
  r = fc_graph_append(g, op, &node);
  if (r != CUDA_SUCCESS) {
    fc_op_free(op);
    return r;
  }
  *ph = (CUgraphNode)node;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  FC_ENTER(cuGraphAddMemcpyNode);
  (void)ctx;
  FC_RETURN(fc_add_memcpy_node(phGraphNode, hGraph, dependencies, numDependencies, copyParams));
}

FC_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUgraphNodeParams *nodeParams) {
  FC_ENTER(cuGraphAddNode_v2);
  (void)dependencyData;
  if (nodeParams == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (nodeParams->type != CU_GRAPH_NODE_TYPE_MEMCPY)
    FC_RETURN(CUDA_ERROR_NOT_SUPPORTED); /* only memcpy nodes are modelled */
  FC_RETURN(fc_add_memcpy_node(phGraphNode, hGraph, dependencies, numDependencies,
                               &nodeParams->memcpy.copyParams));
}

FC_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  FC_ENTER(cuGraphNodeGetType);
  fc_gnode *n = (fc_gnode *)hNode;
  if (n == NULL || type == NULL || n->magic != FC_GNODE_MAGIC) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  *type = n->type;
  FC_RETURN(CUDA_SUCCESS);
}

static CUresult fc_instantiate(CUgraphExec *out, CUgraph hg, unsigned long long flags) {
  const unsigned long long known =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  fc_graph *g = fc_graph_handle(hg);
  if (out == NULL || g == NULL || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  fc_gexec *x = calloc(1, sizeof *x);
  if (x == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  x->ops = calloc(g->n ? g->n : 1, sizeof *x->ops);
  if (x->ops == NULL) {
    free(x);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < g->n; i++) {
    x->ops[i] = fc_op_clone(g->nodes[i]->op);
    if (x->ops[i] == NULL) {
      for (size_t k = 0; k < i; k++) fc_op_free(x->ops[k]);
      free(x->ops);
      free(x);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  x->n = g->n;
  x->magic = FC_GEXEC_MAGIC;
  pthread_mutex_lock(&fc_graph_mu);
  x->next = fc_gexecs;
  if (fc_gexecs) fc_gexecs->prev = x;
  fc_gexecs = x;
  pthread_mutex_unlock(&fc_graph_mu);
  *out = (CUgraphExec)x;
  return CUDA_SUCCESS;
}

static CUresult fc_instantiate_legacy(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log,
                                      size_t n) {
  if (err) *err = NULL;
  if (log && n) log[0] = '\0';
  return fc_instantiate(out, g, 0);
}

FC_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUgraphNode *phErrorNode, char *logBuffer,
                                      size_t bufferSize) {
  FC_ENTER(cuGraphInstantiate);
  FC_RETURN(fc_instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

FC_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                         CUgraphNode *phErrorNode, char *logBuffer,
                                         size_t bufferSize) {
  FC_ENTER(cuGraphInstantiate_v2);
  FC_RETURN(fc_instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

FC_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                               unsigned long long flags) {
  FC_ENTER(cuGraphInstantiateWithFlags);
  FC_RETURN(fc_instantiate(phGraphExec, hGraph, flags));
}

static CUresult fc_graph_launch(CUgraphExec h, CUstream hs, int pt) {
  fc_gexec *x = (fc_gexec *)h;
  if (x == NULL || x->magic != FC_GEXEC_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(hs, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  int capturing = fc_stream_capturing(s);
  if (!capturing) FC_STAT_ADD(graph_launches, 1);
  for (size_t i = 0; i < x->n && r == CUDA_SUCCESS; i++) {
    fc_op *op = fc_op_clone(x->ops[i]);
    if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!capturing) {
      if (op->kind == FC_OP_COPY)
        fc_copy_classify(op); /* replays pageable copies at pageable speed */
      else if (op->kind == FC_OP_KERNEL)
        FC_STAT_ADD(kernels_launched, 1);
      else if (op->kind == FC_OP_MEMSET)
        FC_STAT_ADD(memsets, 1);
    }
    /* Launched into a capture, the graph's nodes join it (as a child
     * graph would); otherwise they queue like any async work. */
    r = fc_submit(s, op, 0, 0);
  }
  return r;
}

FC_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  FC_ENTER(cuGraphLaunch);
  FC_RETURN(fc_graph_launch(hGraphExec, hStream, 0));
}

FC_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  FC_ENTER(cuGraphLaunch_ptsz);
  FC_RETURN(fc_graph_launch(hGraphExec, hStream, 1));
}

FC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  FC_ENTER(cuGraphExecDestroy);
  fc_gexec *x = (fc_gexec *)hGraphExec;
  if (x == NULL || x->magic != FC_GEXEC_MAGIC) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  fc_gexec_free(x);
  FC_RETURN(CUDA_SUCCESS);
}
