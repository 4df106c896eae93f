/*
 * fc_tool.c: the driver's side of the tracing-tool interface (fc_tool.h),
 * i.e. what the fake libcupti.so.13 learns about API calls and GPU work.
 *
 * Nothing here runs unless a tool has attached: fc_enter, fc_submit and
 * the wait calls test one atomic pointer first, fc_op_free and the stream
 * workers the op's own trace handle.
 */
#include <cupti_driver_cbid.h>
#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"

_Atomic(const struct fc_tool_ops *) fc_tool;

/* The innermost call of this thread that a tool saw begin. */
static __thread struct fc_tool_call *fc_tls_call;

/*
 * CUPTI's callback id of every export.  Indexing the real
 * CUPTI_DRIVER_TRACE_CBID_<name> by the same X-macro that defines the
 * exports means a new row in fc_procs.def without a CUPTI id of the same
 * name does not compile.
 */
static const uint32_t fc_sym_cbid[FC_SYM__COUNT] = {
#define FC_SYM(base, ver, sym) [FC_SYM_##sym] = CUPTI_DRIVER_TRACE_CBID_##sym,
#define FC_SYM_PT(base, ver, sym, twin) \
  [FC_SYM_##sym] = CUPTI_DRIVER_TRACE_CBID_##sym, [FC_SYM_##twin] = CUPTI_DRIVER_TRACE_CBID_##twin,
#define FC_LOOKUP(base, ver, sym)
#include "fc_procs.def"
#undef FC_SYM
#undef FC_SYM_PT
#undef FC_LOOKUP
};

FC_EXPORT int fakecuda_tool_attach(const struct fc_tool_ops *ops,
                                   struct fc_tool_driver_info *info) {
  if (ops != NULL && ops->abi != FC_TOOL_ABI) return -1;
  if (info != NULL) {
    info->driver_version = fc_driver_version;
    info->ndevices = fc_ndevices;
  }
  atomic_store_explicit(&fc_tool, ops, memory_order_release);
  return 0;
}

struct fc_tool_call *fc_tool_enter(const struct fc_tool_ops *t, struct fc_tool_call *c,
                                   enum fc_sym_id id, const void *params, const char *symbol) {
  /* No tool after exit teardown began or in a forked child: the state
   * the tool would be told about is gone. */
  if (atomic_load(&fc_shutdown) || atomic_load(&fc_forked_child)) return NULL;
  fc_ctx *ctx = fc_ctx_current();
  *c = (struct fc_tool_call){
      .cbid = fc_sym_cbid[id],
      .name = fc_sym_names[id],
      .params = params,
      .symbol = symbol,
      .ctx = (CUcontext)ctx,
      .ctx_id = ctx ? ctx->uid : 0,
      .ops = t,
      .prev = fc_tls_call,
  };
  fc_tls_call = c;
  t->api_enter(c);
  return c;
}

void fc_tool_leave(struct fc_tool_call *c, CUresult r) {
  c->result = r;
  c->ops->api_exit(c);
  fc_tls_call = c->prev;
}

void fc_tool_sync(int kind, fc_ctx *ctx, fc_stream *s, fc_event *e) {
  if (atomic_load_explicit(&fc_tool, memory_order_relaxed) == NULL) return;
  struct fc_tool_call *c = fc_tls_call;
  if (c == NULL) return;
  c->sync = kind;
  c->sync_ctx_id = ctx ? ctx->uid : 0;
  c->sync_stream_id = s ? s->id : 0;
  c->sync_event_id = e ? e->id : 0;
}

/* What a copy side is, as CUPTI names it: pinned host memory used as a
 * device operand is still pinned memory. */
static uint8_t fc_tool_mem_of(uintptr_t p) {
  fc_range r;
  if (!fc_range_find(p, &r)) return FC_TM_PAGEABLE;
  switch (r.kind) {
    case FC_R_DEVICE: return FC_TM_DEVICE;
    case FC_R_MANAGED: return FC_TM_MANAGED;
    default: return FC_TM_PINNED;
  }
}

static uint8_t fc_tool_host_of(uintptr_t p, int pageable) {
  if (pageable) return FC_TM_PAGEABLE;
  uint8_t k = fc_tool_mem_of(p);
  return k == FC_TM_DEVICE ? FC_TM_PINNED : k;
}

static void fc_tool_copy_of(const fc_copy_job *j, struct fc_tool_copy *tc) {
  tc->bytes = (uint64_t)j->width * j->height * j->depth;
  tc->device = (uint32_t)j->device;
  switch (j->dir) {
    case FC_H2D:
      tc->copy_kind = FC_TC_HTOD;
      tc->src_kind = fc_tool_host_of(j->src, j->pageable);
      tc->dst_kind = fc_tool_mem_of(j->dst);
      break;
    case FC_D2H:
      tc->copy_kind = FC_TC_DTOH;
      tc->src_kind = fc_tool_mem_of(j->src);
      tc->dst_kind = fc_tool_host_of(j->dst, j->pageable);
      break;
    case FC_D2D:
      tc->copy_kind = FC_TC_DTOD;
      tc->src_kind = fc_tool_mem_of(j->src);
      tc->dst_kind = fc_tool_mem_of(j->dst);
      break;
    default:
      tc->copy_kind = FC_TC_HTOH;
      tc->src_kind = fc_tool_mem_of(j->src);
      tc->dst_kind = fc_tool_mem_of(j->dst);
      break;
  }
}

void fc_tool_queue(fc_stream *s, fc_op *op, int async) {
  const struct fc_tool_ops *t = atomic_load_explicit(&fc_tool, memory_order_acquire);
  if (t == NULL || atomic_load(&fc_shutdown)) return;
  struct fc_tool_op to = {
      .async = async,
      .device = (uint32_t)s->ctx->device,
      .ctx_id = s->ctx->uid,
      .stream_id = s->id,
  };
  struct fc_tool_copy one, *many = NULL;
  switch (op->kind) {
    case FC_OP_COPY:
      to.kind = FC_TOP_COPY;
      to.ncopies = op->u.copy.njobs;
      if (to.ncopies == 0) return;
      many = to.ncopies > 1 ? calloc(to.ncopies, sizeof *many) : &one;
      if (many == NULL) return; /* the op runs untraced, as CUPTI drops what it cannot hold */
      for (size_t i = 0; i < to.ncopies; i++) fc_tool_copy_of(&op->u.copy.jobs[i], &many[i]);
      to.copies = many;
      break;
    case FC_OP_MEMSET:
      to.kind = FC_TOP_MEMSET;
      to.bytes = (uint64_t)op->u.memset.width * op->u.memset.height * (uint64_t)op->u.memset.elsize;
      to.value = op->u.memset.value;
      to.mem_kind = fc_tool_mem_of(op->u.memset.dst);
      break;
    case FC_OP_KERNEL:
      to.kind = FC_TOP_KERNEL;
      to.kname = op->u.kernel.name;
      memcpy(to.grid, op->u.kernel.grid, sizeof to.grid);
      memcpy(to.block, op->u.kernel.block, sizeof to.block);
      to.shmem = op->u.kernel.shmem;
      break;
    default: return; /* host functions, events, markers: CUPTI has no GPU record for them here */
  }
  op->trace = t->op_queued(fc_tls_call, &to);
  if (op->trace) op->tool = t;
  if (many != &one) free(many);
}

void fc_tool_release(fc_op *op) {
  op->tool->op_release(op->trace);
  op->trace = NULL;
}
