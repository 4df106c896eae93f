/* bench_ring.c - the reference the staging engine is measured against: a
 * pageable upload staged by hand through a ring of pinned chunks, the
 * program doing it itself (no shim).  Each chunk is filled by THREADS
 * threads at once, then queued as one cudaMemcpyAsync; a chunk is refilled
 * once the event recorded after its copy has completed.  What this reaches
 * on a host is what staging can reach there (docs/benchmarks.md).
 *
 * usage: bench_ring SIZE THREADS [CHUNK [CHUNKS [REPS]]]
 *   defaults: CHUNK 16 MiB, CHUNKS 4, REPS 7.  Prints the median GB/s of
 *   REPS uploads of SIZE bytes (three warm-ups first). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define BENCH_NAME "bench_ring"
#include "bench_util.h"

#define MAX_THREADS 64
#define MAX_CHUNKS 64

static pthread_barrier_t go, done;
static int nthreads;
static char *job_dst;
static const char *job_src;
static size_t job_len;
static int stop;

static void *filler(void *arg) {
  size_t k = (size_t)arg;
  for (;;) {
    pthread_barrier_wait(&go);
    if (stop) return NULL;
    size_t part = (job_len + (size_t)nthreads - 1) / (size_t)nthreads;
    size_t off = k * part;
    if (off < job_len)
      memcpy(job_dst + off, job_src + off, off + part > job_len ? job_len - off : part);
    pthread_barrier_wait(&done);
  }
}

/* Fill dst from src with every thread (the caller is thread 0). */
static void fill(char *dst, const char *src, size_t n) {
  job_dst = dst;
  job_src = src;
  job_len = n;
  pthread_barrier_wait(&go);
  size_t part = (n + (size_t)nthreads - 1) / (size_t)nthreads;
  memcpy(dst, src, part > n ? n : part);
  pthread_barrier_wait(&done);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_ring SIZE THREADS [CHUNK [CHUNKS [REPS]]]\n");
    return 2;
  }
  size_t size = strtoull(argv[1], NULL, 10);
  nthreads = atoi(argv[2]);
  size_t chunk = argc > 3 ? strtoull(argv[3], NULL, 10) : 16u << 20;
  int nchunks = argc > 4 ? atoi(argv[4]) : 4;
  int reps = argc > 5 ? atoi(argv[5]) : 7;
  if (size == 0 || chunk == 0 || nthreads < 1 || nthreads > MAX_THREADS || nchunks < 1 ||
      nchunks > MAX_CHUNKS || reps < 1 || reps > 100) {
    fprintf(stderr, "bench_ring: SIZE and CHUNK > 0, THREADS 1-%d, CHUNKS 1-%d, REPS 1-100\n",
            MAX_THREADS, MAX_CHUNKS);
    return 2;
  }
  char *src = malloc(size);
  if (src == NULL) return 1;
  memset(src, 0x5a, size);
  void *dev;
  char *ring;
  cudaStream_t s;
  cudaEvent_t ev[MAX_CHUNKS];
  RT(cudaMalloc(&dev, size));
  RT(cudaHostAlloc((void **)&ring, chunk * (size_t)nchunks, cudaHostAllocDefault));
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < nchunks; i++) RT(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
  pthread_barrier_init(&go, NULL, (unsigned)nthreads);
  pthread_barrier_init(&done, NULL, (unsigned)nthreads);
  pthread_t th[MAX_THREADS];
  for (long k = 1; k < nthreads; k++) pthread_create(&th[k], NULL, filler, (void *)k);
  double v[100];
  int used[MAX_CHUNKS];
  for (int r = -3; r < reps; r++) {
    memset(used, 0, sizeof used);
    double t0 = now_s();
    size_t i = 0;
    for (size_t off = 0; off < size; off += chunk, i++) {
      size_t n = size - off < chunk ? size - off : chunk;
      int slot = (int)(i % (size_t)nchunks);
      if (used[slot]) RT(cudaEventSynchronize(ev[slot]));
      fill(ring + (size_t)slot * chunk, src + off, n);
      RT(cudaMemcpyAsync((char *)dev + off, ring + (size_t)slot * chunk, n, cudaMemcpyHostToDevice,
                         s));
      RT(cudaEventRecord(ev[slot], s));
      used[slot] = 1;
    }
    RT(cudaStreamSynchronize(s));
    if (r >= 0) v[r] = (double)size / (now_s() - t0) / 1e9;
  }
  stop = 1;
  pthread_barrier_wait(&go);
  for (int k = 1; k < nthreads; k++) pthread_join(th[k], NULL);
  /* The bytes arrived. */
  char *back = malloc(size);
  if (back == NULL) return 1;
  RT(cudaMemcpy(back, dev, size, cudaMemcpyDeviceToHost));
  int same = memcmp(back, src, size) == 0;
  printf("result mode=ring size=%zu threads=%d chunk=%zu chunks=%d gbps=%.2f same=%d\n", size,
         nthreads, chunk, nchunks, median(v, reps), same);
  return same ? 0 : 1;
}
