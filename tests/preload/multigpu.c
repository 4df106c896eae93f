/* multigpu.c - one process driving two devices from two threads (issue 23).
 * An ordinary CUDA runtime program: over the fake driver with
 * FAKECUDA_DEVICES=2 in CI, over two real GPUs on the GPU host.
 *
 *   multigpu [ROUNDS]        (default 6)
 *   multigpu rank [ROUNDS]   one process of a job, one device per process
 *
 * Thread i makes device i current (cudaSetDevice) and, ROUNDS times,
 * uploads a pageable 3 MiB buffer of bytes known from (device, round) and
 * downloads it into another, alternating cudaMemcpy and cudaMemcpyAsync on a
 * stream of its own.  Then each thread copies its device buffer to a buffer
 * on the other device (device to device: cudaMemcpy DeviceToDevice from
 * thread 0, cudaMemcpyAsync Default from thread 1) and, once both have,
 * downloads the buffer on its own device: the other thread's last bytes.
 * Then each thread clears that buffer, copies the other device's round
 * buffer into it as a peer copy (cudaMemcpyPeer from thread 0,
 * cudaMemcpyPeerAsync on its stream from thread 1) and downloads it again.
 * So each thread's host<->device copies all name its own device: 2 * ROUNDS
 * + 2 of them, with 2 device-to-device and 2 peer copies in all.
 *
 * Prints one line, "multigpu: devices=2 rounds=R copies_per_device=N d2d=2
 * peer=2 wrong=W high_water=H misuses=M pid=P" (H: the fake driver's
 * registered-bytes high-water mark; M: the events it was asked to record on
 * a stream of another context, which CUDA refuses; both -1 over a real
 * driver) and exits non-zero on any wrong
 * byte or failed call; with fewer than two devices "multigpu: skipped
 * devices=N pid=P" and 0.
 *
 * `rank` is one process of a torchrun or mpirun job: device $LOCAL_RANK
 * (0 when unset), one thread, ROUNDS pageable uploads and downloads of the
 * same 3 MiB buffers (reused: hot under auto), bytes checked; prints
 * "multigpu-rank: device=D copies=N wrong=W failed=F pid=P" ("multigpu-rank:
 * skipped devices=N pid=P" and 0 when there is no device $LOCAL_RANK). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fakecuda.h" /* struct fakecuda_stats: looked up, never linked */

#define MG_BYTES ((size_t)3 << 20)

typedef struct mg_thread {
  int dev, rounds;
  pthread_t th;
  unsigned char *dbuf;  /* this device: the rounds' buffer */
  unsigned char *dpeer; /* this device: what the other thread copies in */
  unsigned long wrong, failed, copies;
  int last_seed; /* the seed of this thread's last round */
} mg_thread;

static mg_thread mg[2];
static pthread_barrier_t mg_bar;

static void mg_fill(unsigned char *p, size_t n, int seed) {
  for (size_t j = 0; j < n; j++)
    p[j] = (unsigned char)(j * 131u + (unsigned)seed * 29u + (j >> 12));
}

static unsigned long mg_check(const unsigned char *p, size_t n, int seed) {
  unsigned long bad = 0;
  for (size_t j = 0; j < n; j++)
    if (p[j] != (unsigned char)(j * 131u + (unsigned)seed * 29u + (j >> 12))) bad++;
  return bad;
}

#define MG_CALL(t, call)                                                       \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "multigpu: device %d: %s failed: %s\n", (t)->dev, #call, \
              cudaGetErrorString(e_));                                         \
      (t)->failed++;                                                           \
    }                                                                          \
  } while (0)

static void *mg_run(void *arg) {
  mg_thread *t = arg;
  cudaStream_t s = NULL;
  unsigned char *up = malloc(MG_BYTES), *down = malloc(MG_BYTES);
  if (!up || !down) {
    t->failed++;
    goto out;
  }
  MG_CALL(t, cudaSetDevice(t->dev));
  MG_CALL(t, cudaStreamCreate(&s));
  for (int r = 0; r < t->rounds; r++) {
    int seed = t->dev * 1000 + r;
    mg_fill(up, MG_BYTES, seed);
    memset(down, 0xee, MG_BYTES);
    if (r % 2 == 0) {
      MG_CALL(t, cudaMemcpy(t->dbuf, up, MG_BYTES, cudaMemcpyHostToDevice));
      MG_CALL(t, cudaMemcpy(down, t->dbuf, MG_BYTES, cudaMemcpyDeviceToHost));
    } else {
      MG_CALL(t, cudaMemcpyAsync(t->dbuf, up, MG_BYTES, cudaMemcpyHostToDevice, s));
      MG_CALL(t, cudaMemcpyAsync(down, t->dbuf, MG_BYTES, cudaMemcpyDeviceToHost, s));
      MG_CALL(t, cudaStreamSynchronize(s));
    }
    t->copies += 2;
    t->wrong += mg_check(down, MG_BYTES, seed);
    t->last_seed = seed;
    int cur = -1;
    MG_CALL(t, cudaGetDevice(&cur));
    if (cur != t->dev) {
      fprintf(stderr, "multigpu: thread of device %d finds device %d current\n", t->dev, cur);
      t->failed++;
    }
  }
  /* Device to device, into the other device's buffer. */
  mg_thread *o = &mg[1 - t->dev];
  if (t->dev == 0) {
    MG_CALL(t, cudaMemcpy(o->dpeer, t->dbuf, MG_BYTES, cudaMemcpyDeviceToDevice));
  } else {
    MG_CALL(t, cudaMemcpyAsync(o->dpeer, t->dbuf, MG_BYTES, cudaMemcpyDefault, s));
    MG_CALL(t, cudaStreamSynchronize(s));
  }
  pthread_barrier_wait(&mg_bar);
  memset(down, 0xee, MG_BYTES);
  MG_CALL(t, cudaMemcpy(down, t->dpeer, MG_BYTES, cudaMemcpyDeviceToHost));
  t->copies++;
  t->wrong += mg_check(down, MG_BYTES, o->last_seed);
  /* Peer, from the other device's round buffer (final since the barrier)
   * into this device's cleared buffer. */
  MG_CALL(t, cudaMemset(t->dpeer, 0, MG_BYTES));
  if (t->dev == 0) {
    MG_CALL(t, cudaMemcpyPeer(t->dpeer, t->dev, o->dbuf, o->dev, MG_BYTES));
  } else {
    MG_CALL(t, cudaMemcpyPeerAsync(t->dpeer, t->dev, o->dbuf, o->dev, MG_BYTES, s));
    MG_CALL(t, cudaStreamSynchronize(s));
  }
  memset(down, 0xee, MG_BYTES);
  MG_CALL(t, cudaMemcpy(down, t->dpeer, MG_BYTES, cudaMemcpyDeviceToHost));
  t->copies++;
  t->wrong += mg_check(down, MG_BYTES, o->last_seed);
  MG_CALL(t, cudaStreamDestroy(s));
out:
  free(up);
  free(down);
  return NULL;
}

/* One process of a job (see the head). */
static int mg_rank(int rounds) {
  const char *lr = getenv("LOCAL_RANK");
  int dev = lr ? atoi(lr) : 0, n = 0;
  unsigned long wrong = 0, failed = 0, copies = 0;
  unsigned char *src = malloc(MG_BYTES), *back = malloc(MG_BYTES), *d = NULL;
  cudaStream_t s;
  if (cudaGetDeviceCount(&n) != cudaSuccess || dev >= n) {
    printf("multigpu-rank: skipped devices=%d pid=%d\n", n, (int)getpid());
    return 0;
  }
  if (src == NULL || back == NULL || cudaSetDevice(dev) != cudaSuccess ||
      cudaMalloc((void **)&d, MG_BYTES) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
    fprintf(stderr, "multigpu: rank on device %d of %d: setup failed\n", dev, n);
    return 1;
  }
  for (int r = 0; r < rounds; r++) {
    int seed = 100 * dev + r;
    mg_fill(src, MG_BYTES, seed);
    memset(back, 0, MG_BYTES);
    bool async = r % 2;
    if (async) {
      failed += cudaMemcpyAsync(d, src, MG_BYTES, cudaMemcpyHostToDevice, s) != cudaSuccess;
      memset(src, 0xee, MG_BYTES); /* the program's own again once the call returned */
      failed += cudaMemcpyAsync(back, d, MG_BYTES, cudaMemcpyDeviceToHost, s) != cudaSuccess;
      failed += cudaStreamSynchronize(s) != cudaSuccess;
    } else {
      failed += cudaMemcpy(d, src, MG_BYTES, cudaMemcpyHostToDevice) != cudaSuccess;
      failed += cudaMemcpy(back, d, MG_BYTES, cudaMemcpyDeviceToHost) != cudaSuccess;
    }
    copies += 2;
    wrong += mg_check(back, MG_BYTES, seed);
  }
  failed += cudaStreamDestroy(s) != cudaSuccess;
  failed += cudaFree(d) != cudaSuccess;
  free(src);
  free(back);
  printf("multigpu-rank: device=%d copies=%lu wrong=%lu failed=%lu pid=%d\n", dev, copies, wrong,
         failed, (int)getpid());
  return wrong || failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "rank")) {
    int rounds = argc > 2 ? atoi(argv[2]) : 6;
    if (rounds < 1 || rounds > 1000) {
      fprintf(stderr, "multigpu: bad ROUNDS '%s' (valid: 1 to 1000)\n", argv[2]);
      return 2;
    }
    return mg_rank(rounds);
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 6, n = 0;
  if (rounds < 1 || rounds > 1000) {
    fprintf(stderr, "multigpu: bad ROUNDS '%s' (valid: 1 to 1000)\n", argv[1]);
    return 2;
  }
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    printf("multigpu: skipped devices=%d pid=%d\n", n, (int)getpid());
    return 0;
  }
  unsigned long failed = 0;
  for (int i = 0; i < 2; i++) {
    mg[i].dev = i;
    mg[i].rounds = rounds;
    if (cudaSetDevice(i) != cudaSuccess ||
        cudaMalloc((void **)&mg[i].dbuf, MG_BYTES) != cudaSuccess ||
        cudaMalloc((void **)&mg[i].dpeer, MG_BYTES) != cudaSuccess) {
      fprintf(stderr, "multigpu: device %d: setup failed\n", i);
      return 1;
    }
  }
  pthread_barrier_init(&mg_bar, NULL, 2);
  for (int i = 0; i < 2; i++) pthread_create(&mg[i].th, NULL, mg_run, &mg[i]);
  for (int i = 0; i < 2; i++) pthread_join(mg[i].th, NULL);
  pthread_barrier_destroy(&mg_bar);
  for (int i = 0; i < 2; i++) {
    cudaSetDevice(i);
    if (cudaFree(mg[i].dbuf) != cudaSuccess || cudaFree(mg[i].dpeer) != cudaSuccess) failed++;
    failed += mg[i].failed;
  }
  long long high = -1, misuses = -1;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void (*get_stats)(struct fakecuda_stats *) = NULL;
  if (h) *(void **)&get_stats = dlsym(h, "fakecuda_get_stats");
  if (get_stats) {
    struct fakecuda_stats st;
    get_stats(&st);
    high = (long long)st.registered_bytes_high_water;
    misuses = (long long)st.event_ctx_mismatches;
  }
  unsigned long wrong = mg[0].wrong + mg[1].wrong;
  printf(
      "multigpu: devices=%d rounds=%d copies_per_device=%lu d2d=2 peer=2 wrong=%lu failed=%lu high_water=%lld "
      "misuses=%lld pid=%d\n",
      n, rounds, mg[0].copies == mg[1].copies ? mg[0].copies : 0, wrong, failed, high, misuses,
      (int)getpid());
  return wrong || failed ? 1 : 0;
}
