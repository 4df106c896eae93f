/*
 * fc_copy.c: every copy and memset entry point, and the copy engines that
 * execute them on stream workers.
 *
 * The point of the model is the driver's pageable-memory behaviour:
 *  - host side pinned (cuMemHostAlloc/cuMemAllocHost/cuMemHostRegister) and
 *    an Async entry point: the copy is queued and the call returns at once;
 *  - host side pageable, Async or not: the caller takes the process-wide
 *    staging ("bounce buffer") lock, queues the copy in stream order and
 *    waits for it, at the pageable bandwidth, so the host thread is blocked
 *    for the whole transfer;
 *  - synchronous entry points return when the copy has completed.
 * A copy engine per direction and device moves the bytes in bytes /
 * bandwidth: a pageable copy's at the start (its caller waits anyway), a
 * pinned one's at the end (fc_exec_copy says why).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"

/* ------------------------------------------------------------------ */
/* execution (stream workers)                                         */

static void fc_strided_copy(const fc_copy_job *j) {
  if (j->height == 1 && j->depth == 1) {
    memcpy((void *)j->dst, (const void *)j->src, j->width);
    return;
  }
  for (size_t z = 0; z < j->depth; z++)
    for (size_t y = 0; y < j->height; y++)
      memcpy((void *)(j->dst + z * j->dslice + y * j->dpitch),
             (const void *)(j->src + z * j->sslice + y * j->spitch), j->width);
}

static uint64_t fc_job_bytes(const fc_copy_job *j) {
  return (uint64_t)j->width * j->height * j->depth;
}

/* What a memcpy costs on this machine, in ns per KiB, smoothed over the
 * transfers so far (0: none measured yet).  Here every transfer is a
 * memcpy by a stream's worker, so it can go no faster than this machine's
 * memory, where a DMA costs the host nothing.  Modelled on bandwidth
 * alone, a pinned copy (the wait, then the memcpy) ran slower than a
 * pageable one (the memcpy inside its wait) on a 2-core machine: 3.7-4.2
 * against 4.9-5.1 GB/s, the opposite of every GPU host, and a fix then
 * read as if it made the program slower.  So a pinned transfer takes its
 * modelled time or the memcpy's, whichever is longer, and a pageable one
 * at least the memcpy's times the modelled ratio between the two. */
static _Atomic uint64_t fc_memcpy_ns_per_kib;

static void fc_memcpy_note(uint64_t bytes, uint64_t ns) {
  if (bytes < (64u << 10)) return;
  uint64_t v = ns * 1024 / bytes, old = atomic_load(&fc_memcpy_ns_per_kib);
  atomic_store(&fc_memcpy_ns_per_kib, old ? (3 * old + v) / 4 : v);
}

/* A transfer's modelled time at bps, no less than `floor` ns. */
static uint64_t fc_transfer_ns(uint64_t bytes, uint64_t bps, uint64_t floor) {
  uint64_t ns = bps ? (uint64_t)((long double)bytes * 1e9L / (long double)bps) : 0;
  return ns > floor ? ns : floor;
}

void fc_exec_copy(fc_op *op) {
  for (size_t i = 0; i < op->u.copy.njobs; i++) {
    const fc_copy_job *j = &op->u.copy.jobs[i];
    if (j->dir == FC_D2D || j->dir == FC_H2H) {
      uint64_t t0 = fc_tool_now(op);
      fc_strided_copy(j);
      fc_tool_done(op, i, t0);
      continue;
    }
    struct fc_device *d = &fc_devices[j->device];
    pthread_mutex_t *engine = j->dir == FC_H2D ? &d->h2d_engine : &d->d2h_engine;
    pthread_mutex_lock(engine);
    /* A tool's interval starts once the engine is ours: two uploads
     * queued on different streams show one after the other. */
    uint64_t t_tool = fc_tool_now(op);
    uint64_t t0 = fc_now_ns();
    uint64_t bytes = fc_job_bytes(j), pin = atomic_load(&fc_pinned_bps),
             pag = atomic_load(&fc_pageable_bps);
    if (j->pageable) {
      /* The caller is blocked until this op is done: when the bytes
       * move within it cannot matter. */
      fc_strided_copy(j);
      uint64_t d = fc_now_ns() - t0;
      fc_memcpy_note(bytes, d);
      uint64_t floor = pin > pag && pag ? (uint64_t)((long double)d * pin / pag) : d;
      fc_sleep_until(t0 + fc_transfer_ns(bytes, pag, floor));
    } else {
      /* A DMA from or to page-locked memory reads and writes the host
       * buffer while the transfer runs, long after an Async call has
       * returned.  The bytes move at the end of the modelled time, the
       * latest moment the hardware could move them: a program (or a
       * shim) that overwrites an upload's source, or reads a
       * download's destination, before the copy is done sees the wrong
       * bytes every time instead of almost never.  With
       * fakecuda_set_bandwidth slowed down the window is as wide as a
       * test needs.  At exit the queued work is abandoned instead. */
      uint64_t est = atomic_load(&fc_memcpy_ns_per_kib) * bytes / 1024;
      uint64_t ns = fc_transfer_ns(bytes, pin, est);
      fc_sleep_until(t0 + ns - est);
      if (!atomic_load(&fc_shutdown)) {
        uint64_t m0 = fc_now_ns();
        fc_strided_copy(j);
        fc_memcpy_note(bytes, fc_now_ns() - m0);
      }
    }
    fc_tool_done(op, i, t_tool);
    pthread_mutex_unlock(engine);
  }
}

void fc_exec_memset(fc_op *op) {
  for (size_t y = 0; y < op->u.memset.height; y++) {
    uintptr_t row = op->u.memset.dst + y * op->u.memset.pitch;
    size_t n = op->u.memset.width;
    switch (op->u.memset.elsize) {
      case 1: memset((void *)row, (int)(op->u.memset.value & 0xff), n); break;
      case 2: {
        uint16_t v = (uint16_t)op->u.memset.value, *p = (uint16_t *)row;
        for (size_t i = 0; i < n; i++) p[i] = v;
        break;
      }
      default: {
        uint32_t v = op->u.memset.value, *p = (uint32_t *)row;
        for (size_t i = 0; i < n; i++) p[i] = v;
        break;
      }
    }
  }
}

/* ------------------------------------------------------------------ */
/* classification                                                     */

static size_t fc_job_extent(size_t width, size_t height, size_t depth, size_t pitch, size_t slice) {
  if (width == 0 || height == 0 || depth == 0) return 0;
  return (depth - 1) * slice + (height - 1) * pitch + width;
}

enum fc_side { FC_SIDE_DEVICE = 1, FC_SIDE_PINNED, FC_SIDE_PAGEABLE };

struct fc_ptr_info {
  int side;
  int device;
};

static int fc_window_of(uintptr_t p) {
  for (int d = 0; d < fc_ndevices; d++)
    if (fc_devices[d].va_base && p >= fc_devices[d].va_base &&
        p < fc_devices[d].va_base + fc_devices[d].va_size)
      return d;
  return -1;
}

/*
 * Where does [p, p+n) live?  Device (or managed) memory must be covered by
 * one allocation; an address in a device window outside any allocation is
 * invalid, as a freed or foreign device pointer is for the driver.
 */
static CUresult fc_locate(uintptr_t p, size_t n, struct fc_ptr_info *pi) {
  fc_range r;
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  if (fc_range_find(p, &r)) {
    int covered = fc_range_covers(p, n, NULL);
    if (r.kind == FC_R_DEVICE || r.kind == FC_R_MANAGED) {
      if (!covered) return CUDA_ERROR_INVALID_VALUE;
      pi->side = FC_SIDE_DEVICE;
      pi->device = r.device;
      return CUDA_SUCCESS;
    }
    /* Host memory partly outside its pinned range goes the pageable way. */
    pi->side = covered ? FC_SIDE_PINNED : FC_SIDE_PAGEABLE;
    pi->device = r.device;
    return CUDA_SUCCESS;
  }
  if (fc_window_of(p) >= 0) return CUDA_ERROR_INVALID_VALUE;
  pi->side = FC_SIDE_PAGEABLE;
  pi->device = -1;
  return CUDA_SUCCESS;
}

/* A "device" operand of an explicit-direction call: any live CUDA range
 * (pinned host memory is device-accessible at the same address). */
static CUresult fc_locate_device(uintptr_t p, size_t n, int *device) {
  fc_range r;
  if (p == 0 || !fc_range_covers(p, n, &r)) return CUDA_ERROR_INVALID_VALUE;
  *device = r.device;
  return CUDA_SUCCESS;
}

/* Host side of an H2D/D2H job: decide pinned vs pageable at issue time. */
static int fc_host_pageable(uintptr_t p, size_t n) {
  return !fc_range_is_pinned_host(p, n ? n : 1);
}

/* A host range that starts inside registered or pinned memory and runs past
 * its end: the real driver refuses such a copy with
 * CUDA_ERROR_INVALID_VALUE (driver 580, tests/gpu/probe_straddle.c).  A
 * range that starts in pageable memory is copied as pageable. */
static int fc_host_straddles(uintptr_t p, size_t n) {
  fc_range r;
  return n > 0 && fc_range_is_pinned_host(p, 1) && !fc_range_covers(p, n, &r);
}

enum { FC_CLS_PAGEABLE = 1, FC_CLS_H2H = 2, FC_CLS_STRADDLE = 4 };

int fc_copy_classify(fc_op *op) {
  int cls = 0;
  for (size_t i = 0; i < op->u.copy.njobs; i++) {
    fc_copy_job *j = &op->u.copy.jobs[i];
    uint64_t bytes = fc_job_bytes(j);
    j->pageable = 0;
    switch (j->dir) {
      case FC_H2D:
        if (fc_host_straddles(j->src,
                              fc_job_extent(j->width, j->height, j->depth, j->spitch, j->sslice)))
          cls |= FC_CLS_STRADDLE;
        j->pageable = fc_host_pageable(
            j->src, fc_job_extent(j->width, j->height, j->depth, j->spitch, j->sslice));
        FC_STAT_ADD(bytes_h2d, bytes);
        break;
      case FC_D2H:
        if (fc_host_straddles(j->dst,
                              fc_job_extent(j->width, j->height, j->depth, j->dpitch, j->dslice)))
          cls |= FC_CLS_STRADDLE;
        j->pageable = fc_host_pageable(
            j->dst, fc_job_extent(j->width, j->height, j->depth, j->dpitch, j->dslice));
        FC_STAT_ADD(bytes_d2h, bytes);
        break;
      case FC_D2D: FC_STAT_ADD(copies_d2d, 1); continue;
      default: cls |= FC_CLS_H2H; continue;
    }
    if (j->pageable) {
      cls |= FC_CLS_PAGEABLE;
      FC_STAT_ADD(copies_pageable, 1);
      FC_STAT_ADD(bytes_pageable, bytes);
    } else {
      FC_STAT_ADD(copies_pinned, 1);
      FC_STAT_ADD(bytes_pinned, bytes);
    }
  }
  return cls;
}

/* ------------------------------------------------------------------ */
/* issuing                                                            */

enum { FC_SYNC = 0, FC_ASYNC = 1, FC_ASYNC_WAIT = 2 /* async API, must finish before return */ };

/* Takes ownership of op. */
static CUresult fc_issue(fc_op *op, fc_stream *s, int mode) {
  if (fc_stream_capturing(s)) {
    /* Captured as a node; classified again when the graph launches. */
    return fc_submit(s, op, 0, mode == FC_SYNC);
  }
  int cls = fc_copy_classify(op);
  if (cls & FC_CLS_STRADDLE) {
    fc_op_free(op);
    return CUDA_ERROR_INVALID_VALUE;
  }
  int wait = mode != FC_ASYNC || (cls & FC_CLS_H2H);
  if (cls & FC_CLS_PAGEABLE) {
    /* The driver stages pageable memory through one pinned buffer: the
     * calling thread does the work, in stream order, one copy at a time. */
    pthread_mutex_lock(&fc_bounce_mu);
    CUresult r = fc_submit(s, op, 1, mode == FC_SYNC);
    pthread_mutex_unlock(&fc_bounce_mu);
    return r;
  }
  return fc_submit(s, op, wait, mode == FC_SYNC);
}

static fc_op *fc_copy_op(size_t njobs) {
  fc_op *op = fc_op_new(FC_OP_COPY);
  if (op == NULL) return NULL;
  op->u.copy.jobs = calloc(njobs ? njobs : 1, sizeof *op->u.copy.jobs);
  if (op->u.copy.jobs == NULL) {
    fc_op_free(op);
    return NULL;
  }
  op->u.copy.njobs = njobs;
  return op;
}

static void fc_job_1d(fc_copy_job *j, uintptr_t dst, uintptr_t src, size_t n, int dir, int device) {
  j->dst = dst;
  j->src = src;
  j->width = n;
  j->height = j->depth = 1;
  j->dpitch = j->spitch = n;
  j->dslice = j->sslice = n;
  j->dir = dir;
  j->device = device;
}

/* Linear copy with a known direction (HtoD, DtoH, DtoD). */
static CUresult fc_copy_dir(uintptr_t dst, uintptr_t src, size_t n, int dir, CUstream h, int pt,
                            int mode) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  int dev = s->ctx->device, d2 = 0;
  struct fc_ptr_info host;
  switch (dir) {
    case FC_H2D:
      r = fc_locate_device(dst, n, &dev);
      if (r == CUDA_SUCCESS) r = fc_locate(src, n, &host);
      break;
    case FC_D2H:
      r = fc_locate_device(src, n, &dev);
      if (r == CUDA_SUCCESS) r = fc_locate(dst, n, &host);
      break;
    default:
      r = fc_locate_device(dst, n, &dev);
      if (r == CUDA_SUCCESS) r = fc_locate_device(src, n, &d2);
      break;
  }
  if (r != CUDA_SUCCESS) return r;
  fc_op *op = fc_copy_op(1);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_job_1d(&op->u.copy.jobs[0], dst, src, n, dir, dev);
  return fc_issue(op, s, mode);
}

static int fc_dir_of(const struct fc_ptr_info *d, const struct fc_ptr_info *s, int *device,
                     int fallback) {
  int dd = d->side == FC_SIDE_DEVICE, sd = s->side == FC_SIDE_DEVICE;
  *device = dd ? d->device : sd ? s->device : fallback;
  if (dd && sd) return FC_D2D;
  if (dd) return FC_H2D;
  if (sd) return FC_D2H;
  return FC_H2H;
}

/* cuMemcpy / cuMemcpyAsync: direction inferred from the addresses (UVA). */
static CUresult fc_copy_unified(uintptr_t dst, uintptr_t src, size_t n, CUstream h, int pt,
                                int mode) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  struct fc_ptr_info di, si;
  r = fc_locate(dst, n, &di);
  if (r == CUDA_SUCCESS) r = fc_locate(src, n, &si);
  if (r != CUDA_SUCCESS) return r;
  int dev;
  int dir = fc_dir_of(&di, &si, &dev, s->ctx->device);
  fc_op *op = fc_copy_op(1);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_job_1d(&op->u.copy.jobs[0], dst, src, n, dir, dev);
  return fc_issue(op, s, mode);
}

/* ------------------------------------------------------------------ */
/* 2D / 3D                                                            */

struct fc_operand {
  CUmemorytype type;
  uintptr_t base; /* host pointer or device pointer per type */
  size_t x, y, z, pitch, height;
};

static CUresult fc_operand_place(const struct fc_operand *o, size_t w, size_t h, size_t d,
                                 uintptr_t *addr, size_t *slice, struct fc_ptr_info *pi) {
  if (o->type == CU_MEMORYTYPE_ARRAY)
    return CUDA_ERROR_NOT_SUPPORTED; /* CUDA arrays are not modelled */
  if (o->type != CU_MEMORYTYPE_HOST && o->type != CU_MEMORYTYPE_DEVICE &&
      o->type != CU_MEMORYTYPE_UNIFIED)
    return CUDA_ERROR_INVALID_VALUE;
  if (h > 1 && o->pitch < w) return CUDA_ERROR_INVALID_VALUE;
  if (d > 1 && o->height < h) return CUDA_ERROR_INVALID_VALUE;
  *slice = o->pitch * o->height;
  *addr = o->base + o->z * *slice + o->y * o->pitch + o->x;
  size_t ext = fc_job_extent(w, h, d, o->pitch, *slice);
  if (o->type == CU_MEMORYTYPE_DEVICE) {
    CUresult r = fc_locate_device(*addr, ext, &pi->device);
    pi->side = FC_SIDE_DEVICE;
    return r;
  }
  CUresult r = fc_locate(*addr, ext, pi);
  /* Declared host memory stays host memory even if it is pinned-mapped. */
  if (r == CUDA_SUCCESS && o->type == CU_MEMORYTYPE_HOST && pi->side == FC_SIDE_DEVICE)
    pi->side = FC_SIDE_PINNED;
  return r;
}

/* The op of a w x h x d copy between two operands, for a context on
 * `device` (nonzero extents). */
static CUresult fc_3d_op(const struct fc_operand *so, const struct fc_operand *dso, size_t w,
                         size_t h, size_t d, int device, fc_op **out) {
  uintptr_t sa, da;
  size_t ss, ds;
  struct fc_ptr_info si, di;
  CUresult r = fc_operand_place(so, w, h, d, &sa, &ss, &si);
  if (r == CUDA_SUCCESS) r = fc_operand_place(dso, w, h, d, &da, &ds, &di);
  if (r != CUDA_SUCCESS) return r;
  fc_op *op = fc_copy_op(1);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_copy_job *j = &op->u.copy.jobs[0];
  j->src = sa;
  j->dst = da;
  j->width = w;
  j->height = h;
  j->depth = d;
  j->spitch = so->pitch;
  j->dpitch = dso->pitch;
  j->sslice = ss;
  j->dslice = ds;
  j->dir = fc_dir_of(&di, &si, &j->device, device);
  *out = op;
  return CUDA_SUCCESS;
}

static CUresult fc_copy_3d(const struct fc_operand *so, const struct fc_operand *dso, size_t w,
                           size_t h, size_t d, CUstream hs, int pt, int mode) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(hs, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (w == 0 || h == 0 || d == 0) return CUDA_SUCCESS;
  fc_op *op;
  r = fc_3d_op(so, dso, w, h, d, s->ctx->device, &op);
  return r == CUDA_SUCCESS ? fc_issue(op, s, mode) : r;
}

static void fc_2d_operands(const CUDA_MEMCPY2D *p, struct fc_operand *so, struct fc_operand *dso) {
  *so = (struct fc_operand){
      .type = p->srcMemoryType,
      .base =
          p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->srcHost : (uintptr_t)p->srcDevice,
      .x = p->srcXInBytes,
      .y = p->srcY,
      .pitch = p->srcPitch,
      .height = p->Height,
  };
  *dso = (struct fc_operand){
      .type = p->dstMemoryType,
      .base =
          p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->dstHost : (uintptr_t)p->dstDevice,
      .x = p->dstXInBytes,
      .y = p->dstY,
      .pitch = p->dstPitch,
      .height = p->Height,
  };
}

static CUresult fc_copy_2d(const CUDA_MEMCPY2D *p, CUstream h, int pt, int mode) {
  if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
  struct fc_operand so, dso;
  fc_2d_operands(p, &so, &dso);
  return fc_copy_3d(&so, &dso, p->WidthInBytes, p->Height, 1, h, pt, mode);
}

static void fc_3d_operands(const CUDA_MEMCPY3D *p, struct fc_operand *so, struct fc_operand *dso) {
  *so = (struct fc_operand){
      .type = p->srcMemoryType,
      .base =
          p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->srcHost : (uintptr_t)p->srcDevice,
      .x = p->srcXInBytes,
      .y = p->srcY,
      .z = p->srcZ,
      .pitch = p->srcPitch,
      .height = p->srcHeight ? p->srcHeight : p->Height,
  };
  *dso = (struct fc_operand){
      .type = p->dstMemoryType,
      .base =
          p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->dstHost : (uintptr_t)p->dstDevice,
      .x = p->dstXInBytes,
      .y = p->dstY,
      .z = p->dstZ,
      .pitch = p->dstPitch,
      .height = p->dstHeight ? p->dstHeight : p->Height,
  };
}

static int fc_3d_desc_ok(const CUDA_MEMCPY3D *p) {
  return p != NULL && p->reserved0 == NULL && p->reserved1 == NULL && !p->srcLOD && !p->dstLOD;
}

static CUresult fc_copy_3d_desc(const CUDA_MEMCPY3D *p, CUstream h, int pt, int mode) {
  if (!fc_3d_desc_ok(p)) return CUDA_ERROR_INVALID_VALUE;
  struct fc_operand so, dso;
  fc_3d_operands(p, &so, &dso);
  return fc_copy_3d(&so, &dso, p->WidthInBytes, p->Height, p->Depth, h, pt, mode);
}

/* The copy of an explicit graph memcpy node, built now and run by every
 * launch of the graph; `device` is the node's context's device. */
CUresult fc_copy_node_op(const CUDA_MEMCPY3D *p, int device, fc_op **out) {
  if (!fc_3d_desc_ok(p) || p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct fc_operand so, dso;
  fc_3d_operands(p, &so, &dso);
  return fc_3d_op(&so, &dso, p->WidthInBytes, p->Height, p->Depth, device, out);
}

/* ------------------------------------------------------------------ */
/* batches                                                            */

static CUresult fc_copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                              CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                              size_t *failIdx, CUstream h, int pt) {
  if (failIdx) *failIdx = SIZE_MAX;
  /* The batch API refuses the legacy stream (0 means per-thread for _ptsz). */
  if ((h == NULL && !pt) || h == CU_STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  if (dsts == NULL || srcs == NULL || sizes == NULL || count == 0 || attrs == NULL ||
      attrsIdxs == NULL || numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 1; k < numAttrs; k++)
    if (attrsIdxs[k] <= attrsIdxs[k - 1] || attrsIdxs[k] >= count) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;

  fc_op *op = fc_copy_op(count);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t nj = 0, k = 0;
  int during_call = 0;
  for (size_t i = 0; i < count; i++) {
    while (k + 1 < numAttrs && attrsIdxs[k + 1] <= i) k++;
    CUmemcpySrcAccessOrder order = attrs[k].srcAccessOrder;
    if (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
        order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) {
      r = CUDA_ERROR_INVALID_VALUE;
    } else if (sizes[i] != 0) {
      struct fc_ptr_info di, si;
      r = fc_locate(dsts[i], sizes[i], &di);
      if (r == CUDA_SUCCESS) r = fc_locate(srcs[i], sizes[i], &si);
      if (r == CUDA_SUCCESS) {
        int dev, dir = fc_dir_of(&di, &si, &dev, s->ctx->device);
        fc_job_1d(&op->u.copy.jobs[nj++], dsts[i], srcs[i], sizes[i], dir, dev);
        during_call |= order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
      }
    }
    if (r != CUDA_SUCCESS) {
      if (failIdx) *failIdx = i;
      fc_op_free(op);
      return r;
    }
  }
  op->u.copy.njobs = nj;
  if (nj == 0) {
    fc_op_free(op);
    return CUDA_SUCCESS;
  }
  /* Pageable sources still go through the staging path whatever the
   * access order says (measured: srcAccessOrder=ANY does not help).
   * DURING_API_CALL must have read its sources before returning; waiting
   * for the batch is the conservative way to honour that. */
  return fc_issue(op, s, during_call ? FC_ASYNC_WAIT : FC_ASYNC);
}

/* ------------------------------------------------------------------ */
/* memset                                                             */

static CUresult fc_memset(CUdeviceptr dst, unsigned value, int elsize, size_t n, CUstream h, int pt,
                          int mode) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  int dev;
  if (dst % (uintptr_t)elsize != 0 || n > SIZE_MAX / (size_t)elsize)
    return CUDA_ERROR_INVALID_VALUE;
  r = fc_locate_device(dst, n * (size_t)elsize, &dev);
  if (r != CUDA_SUCCESS) return r;
  fc_op *op = fc_op_new(FC_OP_MEMSET);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.memset.dst = dst;
  op->u.memset.value = value;
  op->u.memset.elsize = elsize;
  op->u.memset.width = n;
  op->u.memset.height = 1;
  op->u.memset.pitch = n * (size_t)elsize;
  if (!fc_stream_capturing(s)) FC_STAT_ADD(memsets, 1);
  return fc_submit(s, op, mode == FC_SYNC, mode == FC_SYNC);
}

/* ------------------------------------------------------------------ */
/* entry points                                                       */

#define D(x) ((uintptr_t)(x))

/* The 32-bit era entry points still exist in the real driver.  Nothing
 * should resolve to them any more: count them so a test can tell. */
#define FC_LEGACY() FC_STAT_ADD(legacy_calls, 1)

FC_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                unsigned int ByteCount) {
  cuMemcpyHtoD_params p = {dstDevice, srcHost, ByteCount};
  FC_ENTER_P(cuMemcpyHtoD, &p);
  FC_LEGACY();
  FC_RETURN(fc_copy_dir(D(dstDevice), D(srcHost), ByteCount, FC_H2D, NULL, 0, FC_SYNC));
}

FC_EXPORT CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) {
  cuMemcpyDtoH_params p = {dstHost, srcDevice, ByteCount};
  FC_ENTER_P(cuMemcpyDtoH, &p);
  FC_LEGACY();
  FC_RETURN(fc_copy_dir(D(dstHost), D(srcDevice), ByteCount, FC_D2H, NULL, 0, FC_SYNC));
}

FC_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                unsigned int ByteCount) {
  cuMemcpyDtoD_params p = {dstDevice, srcDevice, ByteCount};
  FC_ENTER_P(cuMemcpyDtoD, &p);
  FC_LEGACY();
  FC_RETURN(fc_copy_dir(D(dstDevice), D(srcDevice), ByteCount, FC_D2D, NULL, 0, FC_SYNC));
}

FC_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                     unsigned int ByteCount, CUstream hStream) {
  cuMemcpyHtoDAsync_params p = {dstDevice, srcHost, ByteCount, hStream};
  FC_ENTER_P(cuMemcpyHtoDAsync, &p);
  FC_LEGACY();
  FC_RETURN(fc_copy_dir(D(dstDevice), D(srcHost), ByteCount, FC_H2D, hStream, 0, FC_ASYNC));
}

FC_EXPORT CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice,
                                     unsigned int ByteCount, CUstream hStream) {
  cuMemcpyDtoHAsync_params p = {dstHost, srcDevice, ByteCount, hStream};
  FC_ENTER_P(cuMemcpyDtoHAsync, &p);
  FC_LEGACY();
  FC_RETURN(fc_copy_dir(D(dstHost), D(srcDevice), ByteCount, FC_D2H, hStream, 0, FC_ASYNC));
}

FC_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                     unsigned int ByteCount, CUstream hStream) {
  cuMemcpyDtoDAsync_params p = {dstDevice, srcDevice, ByteCount, hStream};
  FC_ENTER_P(cuMemcpyDtoDAsync, &p);
  FC_LEGACY();
  FC_RETURN(fc_copy_dir(D(dstDevice), D(srcDevice), ByteCount, FC_D2D, hStream, 0, FC_ASYNC));
}

/* cuMemcpyPeer*: each side must lie in its context's device.  The copy
 * is queued on the current context's stream, as in CUDA, and works with
 * or without peer access enabled (the real driver then bounces it through
 * the host; the bytes are the same). */
static CUresult fc_copy_peer(uintptr_t dst, CUcontext dctx, uintptr_t src, CUcontext sctx, size_t n,
                             CUstream h, int pt, int mode) {
  fc_ctx *dc = (fc_ctx *)dctx, *sc = (fc_ctx *)sctx;
  if (!fc_ctx_usable(dc) || !fc_ctx_usable(sc)) return CUDA_ERROR_INVALID_CONTEXT;
  if (n) {
    int dd = -1, sd = -1;
    if (fc_locate_device(dst, n, &dd) != CUDA_SUCCESS || dd != dc->device ||
        fc_locate_device(src, n, &sd) != CUDA_SUCCESS || sd != sc->device)
      return CUDA_ERROR_INVALID_VALUE;
  }
  return fc_copy_dir(dst, src, n, FC_D2D, h, pt, mode);
}

#define FC_PEER(name, pt)                                                                       \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,   \
                          CUcontext srcContext, size_t ByteCount) {                             \
    name##_params fc__p = {dstDevice, dstContext, srcDevice, srcContext, ByteCount};            \
    FC_ENTER_P(name, &fc__p);                                                                   \
    FC_RETURN(fc_copy_peer(D(dstDevice), dstContext, D(srcDevice), srcContext, ByteCount, NULL, \
                           pt, FC_SYNC));                                                       \
  }
#define FC_PEER_ASYNC(name, pt)                                                                    \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,      \
                          CUcontext srcContext, size_t ByteCount, CUstream hStream) {              \
    name##_params fc__p = {dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream};      \
    FC_ENTER_P(name, &fc__p);                                                                      \
    FC_RETURN(fc_copy_peer(D(dstDevice), dstContext, D(srcDevice), srcContext, ByteCount, hStream, \
                           pt, FC_ASYNC));                                                         \
  }
FC_PEER(cuMemcpyPeer, 0)
FC_PEER(cuMemcpyPeer_ptds, 1)
FC_PEER_ASYNC(cuMemcpyPeerAsync, 0)
FC_PEER_ASYNC(cuMemcpyPeerAsync_ptsz, 1)

/* One macro per shape keeps the default and per-thread twins identical
 * except for what stream 0 means. */
#define FC_HTOD(name, pt)                                                                   \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {   \
    name##_params fc__p = {dstDevice, srcHost, ByteCount};                                  \
    FC_ENTER_P(name, &fc__p);                                                               \
    FC_RETURN(fc_copy_dir(D(dstDevice), D(srcHost), ByteCount, FC_H2D, NULL, pt, FC_SYNC)); \
  }
#define FC_DTOH(name, pt)                                                                   \
  FC_EXPORT CUresult name(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {         \
    name##_params fc__p = {dstHost, srcDevice, ByteCount};                                  \
    FC_ENTER_P(name, &fc__p);                                                               \
    FC_RETURN(fc_copy_dir(D(dstHost), D(srcDevice), ByteCount, FC_D2H, NULL, pt, FC_SYNC)); \
  }
#define FC_DTOD(name, pt)                                                                     \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {   \
    name##_params fc__p = {dstDevice, srcDevice, ByteCount};                                  \
    FC_ENTER_P(name, &fc__p);                                                                 \
    FC_RETURN(fc_copy_dir(D(dstDevice), D(srcDevice), ByteCount, FC_D2D, NULL, pt, FC_SYNC)); \
  }
#define FC_HTOD_ASYNC(name, pt)                                                                 \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,         \
                          CUstream hStream) {                                                   \
    name##_params fc__p = {dstDevice, srcHost, ByteCount, hStream};                             \
    FC_ENTER_P(name, &fc__p);                                                                   \
    FC_RETURN(fc_copy_dir(D(dstDevice), D(srcHost), ByteCount, FC_H2D, hStream, pt, FC_ASYNC)); \
  }
#define FC_DTOH_ASYNC(name, pt)                                                                 \
  FC_EXPORT CUresult name(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,               \
                          CUstream hStream) {                                                   \
    name##_params fc__p = {dstHost, srcDevice, ByteCount, hStream};                             \
    FC_ENTER_P(name, &fc__p);                                                                   \
    FC_RETURN(fc_copy_dir(D(dstHost), D(srcDevice), ByteCount, FC_D2H, hStream, pt, FC_ASYNC)); \
  }
#define FC_DTOD_ASYNC(name, pt)                                                                   \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,         \
                          CUstream hStream) {                                                     \
    name##_params fc__p = {dstDevice, srcDevice, ByteCount, hStream};                             \
    FC_ENTER_P(name, &fc__p);                                                                     \
    FC_RETURN(fc_copy_dir(D(dstDevice), D(srcDevice), ByteCount, FC_D2D, hStream, pt, FC_ASYNC)); \
  }
#define FC_UNIFIED(name, pt)                                                    \
  FC_EXPORT CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) { \
    name##_params fc__p = {dst, src, ByteCount};                                \
    FC_ENTER_P(name, &fc__p);                                                   \
    FC_RETURN(fc_copy_unified(D(dst), D(src), ByteCount, NULL, pt, FC_SYNC));   \
  }
#define FC_UNIFIED_ASYNC(name, pt)                                                                \
  FC_EXPORT CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) { \
    name##_params fc__p = {dst, src, ByteCount, hStream};                                         \
    FC_ENTER_P(name, &fc__p);                                                                     \
    FC_RETURN(fc_copy_unified(D(dst), D(src), ByteCount, hStream, pt, FC_ASYNC));                 \
  }
#define FC_2D(name, pt)                                 \
  FC_EXPORT CUresult name(const CUDA_MEMCPY2D *pCopy) { \
    name##_params fc__p = {pCopy};                      \
    FC_ENTER_P(name, &fc__p);                           \
    FC_RETURN(fc_copy_2d(pCopy, NULL, pt, FC_SYNC));    \
  }
#define FC_2D_ASYNC(name, pt)                                             \
  FC_EXPORT CUresult name(const CUDA_MEMCPY2D *pCopy, CUstream hStream) { \
    name##_params fc__p = {pCopy, hStream};                               \
    FC_ENTER_P(name, &fc__p);                                             \
    FC_RETURN(fc_copy_2d(pCopy, hStream, pt, FC_ASYNC));                  \
  }
#define FC_3D(name, pt)                                   \
  FC_EXPORT CUresult name(const CUDA_MEMCPY3D *pCopy) {   \
    name##_params fc__p = {pCopy};                        \
    FC_ENTER_P(name, &fc__p);                             \
    FC_RETURN(fc_copy_3d_desc(pCopy, NULL, pt, FC_SYNC)); \
  }
#define FC_3D_ASYNC(name, pt)                                             \
  FC_EXPORT CUresult name(const CUDA_MEMCPY3D *pCopy, CUstream hStream) { \
    name##_params fc__p = {pCopy, hStream};                               \
    FC_ENTER_P(name, &fc__p);                                             \
    FC_RETURN(fc_copy_3d_desc(pCopy, hStream, pt, FC_ASYNC));             \
  }

FC_HTOD(cuMemcpyHtoD_v2, 0)
FC_HTOD(cuMemcpyHtoD_v2_ptds, 1)
FC_DTOH(cuMemcpyDtoH_v2, 0)
FC_DTOH(cuMemcpyDtoH_v2_ptds, 1)
FC_DTOD(cuMemcpyDtoD_v2, 0)
FC_DTOD(cuMemcpyDtoD_v2_ptds, 1)
FC_UNIFIED(cuMemcpy, 0)
FC_UNIFIED(cuMemcpy_ptds, 1)
FC_HTOD_ASYNC(cuMemcpyHtoDAsync_v2, 0)
FC_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, 1)
FC_DTOH_ASYNC(cuMemcpyDtoHAsync_v2, 0)
FC_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, 1)
FC_DTOD_ASYNC(cuMemcpyDtoDAsync_v2, 0)
FC_DTOD_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, 1)
FC_UNIFIED_ASYNC(cuMemcpyAsync, 0)
FC_UNIFIED_ASYNC(cuMemcpyAsync_ptsz, 1)
FC_2D(cuMemcpy2D_v2, 0)
FC_2D(cuMemcpy2D_v2_ptds, 1)
FC_2D(cuMemcpy2DUnaligned_v2, 0)
FC_2D(cuMemcpy2DUnaligned_v2_ptds, 1)
FC_2D_ASYNC(cuMemcpy2DAsync_v2, 0)
FC_2D_ASYNC(cuMemcpy2DAsync_v2_ptsz, 1)
FC_3D(cuMemcpy3D_v2, 0)
FC_3D(cuMemcpy3D_v2_ptds, 1)
FC_3D_ASYNC(cuMemcpy3DAsync_v2, 0)
FC_3D_ASYNC(cuMemcpy3DAsync_v2_ptsz, 1)

/* CUDA 12.8 signature (reports the failing copy) */
FC_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                      size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                      size_t numAttrs, size_t *failIdx, CUstream hStream) {
  cuMemcpyBatchAsync_params p = {dsts,      srcs,     sizes,   count,  attrs,
                                 attrsIdxs, numAttrs, failIdx, hStream};
  FC_ENTER_P(cuMemcpyBatchAsync, &p);
  FC_RETURN(
      fc_copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, 0));
}

FC_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                           size_t count, CUmemcpyAttributes *attrs,
                                           size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
                                           CUstream hStream) {
  cuMemcpyBatchAsync_ptsz_params p = {dsts,      srcs,     sizes,   count,  attrs,
                                      attrsIdxs, numAttrs, failIdx, hStream};
  FC_ENTER_P(cuMemcpyBatchAsync_ptsz, &p);
  FC_RETURN(
      fc_copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, 1));
}

/* CUDA 13.0 signature */
FC_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                         size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                         size_t numAttrs, CUstream hStream) {
  cuMemcpyBatchAsync_v2_params p = {dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream};
  FC_ENTER_P(cuMemcpyBatchAsync_v2, &p);
  FC_RETURN(fc_copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream, 0));
}

FC_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                              size_t count, CUmemcpyAttributes *attrs,
                                              size_t *attrsIdxs, size_t numAttrs,
                                              CUstream hStream) {
  cuMemcpyBatchAsync_v2_ptsz_params p = {dsts,  srcs,      sizes,    count,
                                         attrs, attrsIdxs, numAttrs, hStream};
  FC_ENTER_P(cuMemcpyBatchAsync_v2_ptsz, &p);
  FC_RETURN(fc_copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream, 1));
}

#define FC_MEMSET(name, type, elsize, pt)                             \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, type v, size_t N) {  \
    name##_params fc__p = {dstDevice, v, N};                          \
    FC_ENTER_P(name, &fc__p);                                         \
    FC_RETURN(fc_memset(dstDevice, v, elsize, N, NULL, pt, FC_SYNC)); \
  }
#define FC_MEMSET_ASYNC(name, type, elsize, pt)                                        \
  FC_EXPORT CUresult name(CUdeviceptr dstDevice, type v, size_t N, CUstream hStream) { \
    name##_params fc__p = {dstDevice, v, N, hStream};                                  \
    FC_ENTER_P(name, &fc__p);                                                          \
    FC_RETURN(fc_memset(dstDevice, v, elsize, N, hStream, pt, FC_ASYNC));              \
  }

FC_MEMSET(cuMemsetD8_v2, unsigned char, 1, 0)
FC_MEMSET(cuMemsetD8_v2_ptds, unsigned char, 1, 1)
FC_MEMSET(cuMemsetD16_v2, unsigned short, 2, 0)
FC_MEMSET(cuMemsetD16_v2_ptds, unsigned short, 2, 1)
FC_MEMSET(cuMemsetD32_v2, unsigned int, 4, 0)
FC_MEMSET(cuMemsetD32_v2_ptds, unsigned int, 4, 1)
FC_MEMSET_ASYNC(cuMemsetD8Async, unsigned char, 1, 0)
FC_MEMSET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, 1)
FC_MEMSET_ASYNC(cuMemsetD16Async, unsigned short, 2, 0)
FC_MEMSET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, 1)
FC_MEMSET_ASYNC(cuMemsetD32Async, unsigned int, 4, 0)
FC_MEMSET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, 1)
