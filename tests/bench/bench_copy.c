/* bench_copy.c - copy timings for tests/bench/run.sh.
 *
 *   bench_copy h2d|d2h KIND SIZE REPS    bandwidth (stream-synchronised) and
 *                                        the time the call itself took (d2h
 *                                        pageable: also the same call from a
 *                                        pinned buffer, pinned_call_us)
 *   bench_copy small KIND 256 REPS       host time per cudaMemcpyAsync call
 *                                        (10,000 calls a repetition)
 *   bench_copy overlap KIND SIZE REPS    a kernel stream and a copy stream:
 *                                        end-to-end time of 8 copies of SIZE
 *                                        beside 8 kernels of equal length
 *   bench_copy pipe KIND SIZE REPS       a pipeline: 8 uploads of SIZE on one
 *                                        stream beside 8 downloads of SIZE on
 *                                        another, end-to-end time
 *   bench_copy tiny KIND 4096 REPS       the profiler's worst case: 2,000
 *                                        empty kernels each followed by a
 *                                        4 KB copy on one stream, time per
 *                                        pair (us), end to end
 *   bench_copy ab KIND 256 REPS          the shim's own cost per small copy,
 *                                        with the process's cost cancelled:
 *                                        alternating batches of 10,000
 *                                        cuMemcpyHtoDAsync_v2 calls through
 *                                        the entry point a program gets
 *                                        (the shim's wrapper, when preloaded)
 *                                        and through libcuda's own symbol,
 *                                        in one process; ns per call each
 *   bench_copy abloop KIND SIZE REPS     the same on a loop of a program's
 *                                        small copies among kernels (the
 *                                        "small" pattern, tests/gpu/patterns.py):
 *                                        an upload of SIZE, a 2 us kernel, an
 *                                        8-byte download, a synchronize, 500
 *                                        times a batch; the copies and the
 *                                        synchronize through the program's
 *                                        entry points or libcuda's own, in
 *                                        alternating batches; us per iteration
 *   bench_copy probe KIND SIZE REPS      what this process pays for the
 *                                        basics: a clock read, a trivial
 *                                        driver call, a stream query, the
 *                                        getters of a stream's context and
 *                                        device, a host function, and one
 *                                        SIZE copy
 *                                        call from pinned memory (us); they
 *                                        differ from process to process
 *                                        (tests/bench/diag_proc.sh)
 * KIND is pinned or pageable.  Prints one line "result key=value ..." with
 * medians over REPS; the shim (or not) is chosen by whoever runs it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "../../demo/spin_ptx.h"
#define BENCH_NAME "bench_copy"
#include "bench_util.h"

static void *host_alloc(const char *kind, size_t n) {
  void *p;
  if (strcmp(kind, "pinned") == 0)
    RT(cudaMallocHost(&p, n));
  else
    p = malloc(n);
  memset(p, 0x5a, n); /* fault the pages in: first-touch is not the copy's cost */
  return p;
}

static void CUDA_CB bench_nop(void *arg) { (void)arg; }

/* libcuda's own address of `name`, read from the loaded file's dynamic
 * symbol table: under the shim every lookup through the dynamic linker
 * (dlsym, cuGetProcAddress) answers with the wrapper, which is the point of
 * the shim and exactly what the `ab` mode must get around. */
struct bench_mod {
  const char *path;
  uintptr_t base;
};
static int bench_find_cuda(struct dl_phdr_info *i, size_t n, void *arg) {
  (void)n;
  struct bench_mod *m = arg;
  if (i->dlpi_name && strstr(i->dlpi_name, "libcuda.so")) {
    m->path = i->dlpi_name;
    m->base = i->dlpi_addr;
    return 1;
  }
  return 0;
}
static void *bench_real_sym(const char *name) {
  struct bench_mod m = {0};
  dl_iterate_phdr(bench_find_cuda, &m);
  if (m.path == NULL) return NULL;
  int fd = open(m.path, O_RDONLY);
  struct stat st;
  if (fd < 0) return NULL;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return NULL;
  }
  const char *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (f == MAP_FAILED) return NULL;
  const Elf64_Ehdr *eh = (const void *)f;
  const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff);
  void *found = NULL;
  for (int k = 0; k < eh->e_shnum && !found; k++) {
    if (sh[k].sh_type != SHT_DYNSYM) continue;
    const Elf64_Sym *sym = (const void *)(f + sh[k].sh_offset);
    const char *str = f + sh[sh[k].sh_link].sh_offset;
    for (size_t j = 0; j < sh[k].sh_size / sizeof *sym; j++)
      if (sym[j].st_value != 0 && strcmp(str + sym[j].st_name, name) == 0) {
        found = (void *)(m.base + sym[j].st_value);
        break;
      }
  }
  munmap((void *)f, (size_t)st.st_size);
  return found;
}

/* An A/B inside one process: batch(side, arg) runs one batch through the
 * entry points a program gets (side 0: the shim's wrappers, when
 * preloaded) or through libcuda's own (side 1) and returns its time per
 * unit.  Batches alternate, and which goes first alternates too: whatever
 * drifts in the process (clock, caches, the driver's queue) falls on both
 * alike.  Prints "result mode=MODE ... UNIT_wrapped ... ratio" with the
 * medians over reps. */
static void bench_ab(const char *mode, const char *kind, size_t size, int reps, const char *unit,
                     double (*batch)(int side, void *arg), void *arg, int same) {
  double *t[2] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double))};
  double *ratio = calloc((size_t)reps, sizeof *ratio);
  for (int r = -1; r < reps; r++) {
    double one[2];
    for (int h = 0; h < 2; h++) one[h ^ (r & 1)] = batch(h ^ (r & 1), arg);
    if (r >= 0) {
      t[0][r] = one[0];
      t[1][r] = one[1];
      ratio[r] = one[0] / one[1];
    }
  }
  printf("result mode=%s kind=%s size=%zu wrapped_%s=%.2f real_%s=%.2f ratio=%.3f same=%d\n", mode,
         kind, size, unit, median(t[0], reps), unit, median(t[1], reps), median(ratio, reps), same);
  free(t[0]);
  free(t[1]);
  free(ratio);
}

typedef CUresult (*bench_htod_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*bench_dtoh_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*bench_sync_fn)(CUstream);

/* What the A/B batches work on: each entry point as the program reaches
 * it [0] and libcuda's own [1]. */
typedef struct bench_abargs {
  bench_htod_fn up[2];
  bench_dtoh_fn down[2];
  bench_sync_fn sync[2];
  CUdeviceptr dev;
  void *host, *out;
  size_t size;
  CUstream s;
  CUfunction spin;
  void **params;
} bench_abargs;

/* `ab`: 10,000 small uploads, or 1 GiB's worth of large ones (at least
 * 4: a pageable 64 MiB upload takes ~8 ms); ns per call. */
static double bench_ab_copies(int side, void *arg) {
  const bench_abargs *a = arg;
  size_t worth = ((size_t)1 << 30) / (a->size ? a->size : 1);
  const int calls = worth >= 10000 ? 10000 : worth < 4 ? 4 : (int)worth;
  double t0 = now_s();
  for (int i = 0; i < calls; i++) DRV(a->up[side](a->dev, a->host, a->size, a->s));
  double t = (now_s() - t0) / calls * 1e9;
  DRV(a->sync[1](a->s));
  return t;
}

/* `abloop`: 500 steps of upload, kernel, 8-byte download, synchronize; us
 * per step. */
static double bench_ab_loop(int side, void *arg) {
  const bench_abargs *a = arg;
  const int iters = 500;
  double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    DRV(a->up[side](a->dev, a->host, a->size, a->s));
    DRV(cuLaunchKernel(a->spin, 1, 1, 1, 1, 1, 1, 0, a->s, a->params, NULL));
    DRV(a->down[side](a->out, a->dev, 8, a->s));
    DRV(a->sync[side](a->s));
  }
  return (now_s() - t0) / iters * 1e6;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(
        stderr,
        "usage: bench_copy h2d|d2h|small|ab|abloop|overlap|pipe|tiny|probe pinned|pageable SIZE "
        "REPS\n");
    return 2;
  }
  const char *mode = argv[1], *kind = argv[2];
  size_t size = strtoull(argv[3], NULL, 10);
  int reps = atoi(argv[4]);
  if (reps < 1 || reps > 1000) reps = 5;
  double *v = calloc((size_t)reps, sizeof *v), *call = calloc((size_t)reps, sizeof *call);
  void *dev;
  cudaStream_t s, k;
  RT(cudaFree(0));
  RT(cudaMalloc(&dev, size < 256 ? 256 : size));
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  RT(cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking));
  void *host = host_alloc(kind, size);

  if (!strcmp(mode, "h2d") || !strcmp(mode, "d2h")) {
    int h2d = mode[0] == 'h';
    /* Three warm-up repetitions: the shim's pinned pool grows on demand
     * (a cuMemHostAlloc of ~2.7 ms per 8 MiB chunk, once), and the steady
     * state is what a program copying in a loop sees. */
    for (int r = -3; r < reps; r++) {
      double t0 = now_s();
      if (h2d)
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      else
        RT(cudaMemcpyAsync(host, dev, size, cudaMemcpyDeviceToHost, s));
      double t1 = now_s();
      RT(cudaStreamSynchronize(s));
      double t2 = now_s();
      if (r >= 0) {
        v[r] = size / (t2 - t0) / 1e9;
        call[r] = (t1 - t0) * 1e6;
      }
      if (getenv("BENCH_VERBOSE"))
        fprintf(stderr, "rep %d: %.2f GB/s, call %.1f us\n", r, size / (t2 - t0) / 1e9,
                (t1 - t0) * 1e6);
    }
    double gbps = median(v, reps), us = median(call, reps);
    /* The same call from a pinned buffer, in this process, after it: the
     * driver's own cost of queuing one copy.  It differs from process to
     * process (on the H200 host 2 us in some, 10-20 us in others, on any
     * CPU), and a staged asynchronous download pays it for every DMA and
     * host function it queues. */
    double ref = 0;
    if (!h2d && strcmp(kind, "pageable") == 0) {
      void *pin;
      RT(cudaMallocHost(&pin, size));
      for (int r = -3; r < reps; r++) {
        double t0 = now_s();
        RT(cudaMemcpyAsync(pin, dev, size, cudaMemcpyDeviceToHost, s));
        double t1 = now_s();
        RT(cudaStreamSynchronize(s));
        if (r >= 0) call[r] = (t1 - t0) * 1e6;
      }
      ref = median(call, reps);
      RT(cudaFreeHost(pin));
    }
    printf("result mode=%s kind=%s size=%zu gbps=%.2f call_us=%.1f pinned_call_us=%.1f\n", mode,
           kind, size, gbps, us, ref);
  } else if (!strcmp(mode, "small")) {
    const int calls = 10000;
    for (int r = -1; r < reps; r++) {
      double t0 = now_s();
      for (int i = 0; i < calls; i++)
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      double t1 = now_s();
      RT(cudaStreamSynchronize(s));
      if (r >= 0) v[r] = (t1 - t0) / calls * 1e9;
    }
    printf("result mode=small kind=%s size=%zu ns_per_call=%.1f\n", kind, size, median(v, reps));
  } else if (!strcmp(mode, "ab") || !strcmp(mode, "abloop")) {
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    bench_abargs a = {.up = {lib ? (bench_htod_fn)dlsym(lib, "cuMemcpyHtoDAsync_v2") : NULL,
                             (bench_htod_fn)bench_real_sym("cuMemcpyHtoDAsync_v2")},
                      .down = {lib ? (bench_dtoh_fn)dlsym(lib, "cuMemcpyDtoHAsync_v2") : NULL,
                               (bench_dtoh_fn)bench_real_sym("cuMemcpyDtoHAsync_v2")},
                      .sync = {lib ? (bench_sync_fn)dlsym(lib, "cuStreamSynchronize") : NULL,
                               (bench_sync_fn)bench_real_sym("cuStreamSynchronize")},
                      .dev = (CUdeviceptr)dev,
                      .host = host,
                      .size = size,
                      .s = (CUstream)s};
    for (int h = 0; h < 2; h++)
      if (a.up[h] == NULL || a.down[h] == NULL || a.sync[h] == NULL) {
        fprintf(stderr, "bench_copy: a copy or synchronize entry point was not found\n");
        return 2;
      }
    if (!strcmp(mode, "ab")) {
      bench_ab(mode, kind, size, reps, "ns", bench_ab_copies, &a, a.up[0] == a.up[1]);
    } else {
      /* What observing costs a loop whose every step waits for the GPU, as
       * a training step waits for its loss: time across processes swings
       * more than the shim's share (tests/gpu/patterns.py small, 32-49 us
       * an iteration on one host), so both sides run in one process, in
       * turns.  CUPTI, when on, records the GPU work of both sides alike:
       * this measures the shim's path alone. */
      CUmodule m;
      DRV(cuModuleLoadData(&m, pagelock_spin_ptx));
      DRV(cuModuleGetFunction(&a.spin, m, "pagelock_spin"));
      unsigned long long ns = 2000;
      void *params[] = {&ns};
      a.params = params;
      a.out = host_alloc(kind, 8);
      bench_ab(mode, kind, size, reps, "us", bench_ab_loop, &a, a.up[0] == a.up[1]);
    }
  } else if (!strcmp(mode, "overlap")) {
    CUmodule m;
    CUfunction f;
    DRV(cuModuleLoadData(&m, pagelock_spin_ptx));
    DRV(cuModuleGetFunction(&f, m, "pagelock_spin"));
    /* Each kernel lasts as long as one pinned copy of SIZE at ~50 GB/s, so
     * perfect overlap halves the serial time. */
    unsigned long long ns = (unsigned long long)(size / 50.0);
    void *params[] = {&ns};
    for (int r = -1; r < reps; r++) {
      RT(cudaDeviceSynchronize());
      double t0 = now_s();
      for (int i = 0; i < 8; i++) {
        DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)k, params, NULL));
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      }
      RT(cudaDeviceSynchronize());
      if (r >= 0) v[r] = (now_s() - t0) * 1e3;
    }
    printf("result mode=overlap kind=%s size=%zu ms=%.2f kernel_ms=%.2f\n", kind, size,
           median(v, reps), 8 * ns / 1e6);
  } else if (!strcmp(mode, "pipe")) {
    /* Uploads of the next batch on s beside downloads of the last results
     * on k: what a training loop does.  The download's buffer is apart. */
    void *out = host_alloc(kind, size), *dev2;
    RT(cudaMalloc(&dev2, size));
    for (int r = -1; r < reps; r++) {
      RT(cudaDeviceSynchronize());
      double t0 = now_s();
      for (int i = 0; i < 8; i++) {
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
        RT(cudaMemcpyAsync(out, dev2, size, cudaMemcpyDeviceToHost, k));
      }
      RT(cudaDeviceSynchronize());
      if (r >= 0) v[r] = (now_s() - t0) * 1e3;
    }
    printf("result mode=pipe kind=%s size=%zu ms=%.2f\n", kind, size, median(v, reps));
  } else if (!strcmp(mode, "probe")) {
    const int n = 100000;
    struct timespec ts;
    CUcontext cx;
    double t0 = now_s();
    for (int i = 0; i < n; i++) clock_gettime(CLOCK_MONOTONIC, &ts);
    double clock_ns = (now_s() - t0) / n * 1e9;
    t0 = now_s();
    for (int i = 0; i < n; i++) DRV(cuCtxGetCurrent(&cx));
    double ctx_ns = (now_s() - t0) / n * 1e9;
    t0 = now_s();
    for (int i = 0; i < n; i++) (void)cuStreamQuery((CUstream)s);
    double query_ns = (now_s() - t0) / n * 1e9;
    /* The getters the shim asks per copy for the device it ran on
     * (shim/base/driver.c pl_copy_device). */
    CUcontext sc;
    CUdevice dv;
    t0 = now_s();
    for (int i = 0; i < n; i++) DRV(cuStreamGetCtx((CUstream)s, &sc));
    double sctx_ns = (now_s() - t0) / n * 1e9;
    t0 = now_s();
    for (int i = 0; i < n; i++) DRV(cuCtxGetDevice(&dv));
    double cdev_ns = (now_s() - t0) / n * 1e9;
    /* Newer than some drivers (CUDA 12.0 and 12.8): looked up, -1 where
     * missing. */
    void *cu = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    CUresult (*get_id)(CUcontext, unsigned long long *) = cu ? dlsym(cu, "cuCtxGetId") : NULL;
    CUresult (*get_dev)(CUstream, CUdevice *) = cu ? dlsym(cu, "cuStreamGetDevice") : NULL;
    double cid_ns = -1, sdev_ns = -1;
    unsigned long long cid;
    if (get_id) {
      t0 = now_s();
      for (int i = 0; i < n; i++) DRV(get_id(cx, &cid));
      cid_ns = (now_s() - t0) / n * 1e9;
    }
    if (get_dev) {
      t0 = now_s();
      for (int i = 0; i < n; i++) DRV(get_dev((CUstream)s, &dv));
      sdev_ns = (now_s() - t0) / n * 1e9;
    }
    t0 = now_s();
    for (int i = 0; i < 1000; i++) RT(cudaLaunchHostFunc(s, bench_nop, NULL));
    double hostfn_ns = (now_s() - t0) / 1000 * 1e9;
    /* The driver's pointer query, as the shim's classification asks it,
     * for this (pageable or pinned) buffer. */
    unsigned long long pq_type = 0, pq_managed = 0;
    CUpointer_attribute pq_attr[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *pq_data[2] = {&pq_type, &pq_managed};
    t0 = now_s();
    for (int i = 0; i < 10000; i++)
      (void)cuPointerGetAttributes(2, pq_attr, pq_data, (CUdeviceptr)host);
    double ptrq_ns = (now_s() - t0) / 10000 * 1e9;
    RT(cudaStreamSynchronize(s));
    for (int r = -2; r < reps; r++) {
      t0 = now_s();
      RT(cudaMemcpyAsync(host, dev, size, cudaMemcpyDeviceToHost, s));
      double t1 = now_s();
      RT(cudaStreamSynchronize(s));
      if (r >= 0) call[r] = (t1 - t0) * 1e6;
    }
    printf(
        "result mode=probe kind=%s clock_ns=%.1f ctx_ns=%.1f stream_query_ns=%.1f stream_ctx_ns=%.1f ctx_id_ns=%.1f ctx_dev_ns=%.1f stream_dev_ns=%.1f hostfn_ns=%.0f ptrq_ns=%.0f call_us=%.1f\n",
        kind, clock_ns, ctx_ns, query_ns, sctx_ns, cid_ns, cdev_ns, sdev_ns, hostfn_ns, ptrq_ns,
        median(call, reps));
  } else if (!strcmp(mode, "tiny")) {
    CUmodule m;
    CUfunction f;
    DRV(cuModuleLoadData(&m, pagelock_spin_ptx));
    DRV(cuModuleGetFunction(&f, m, "pagelock_spin"));
    unsigned long long ns = 0;
    void *params[] = {&ns};
    const int pairs = 2000;
    for (int r = -1; r < reps; r++) {
      RT(cudaDeviceSynchronize());
      double t0 = now_s();
      for (int i = 0; i < pairs; i++) {
        DRV(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, params, NULL));
        RT(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, s));
      }
      RT(cudaStreamSynchronize(s));
      if (r >= 0) v[r] = (now_s() - t0) / pairs * 1e6;
    }
    printf("result mode=tiny kind=%s size=%zu us_per_pair=%.2f\n", kind, size, median(v, reps));
  } else {
    fprintf(stderr, "bench_copy: unknown mode %s\n", mode);
    return 2;
  }
  return 0;
}
