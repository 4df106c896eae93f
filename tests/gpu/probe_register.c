/* probe_register.c - what a registration (cudaHostRegister) costs the other
 * threads of the process while it runs.  The registration engine
 * (shim/engines/pinreg.c) registers a hot buffer on the shim's own thread and
 * stages the copies that arrive meanwhile; how much those copies lose
 * depends on whether the driver serialises them behind the registration
 * and on how the registration's size is cut.  Prints one line per case:
 * the registration's time, and the latency of 8 MiB pinned uploads (or of
 * 8 MiB host copies out of the buffer being registered) issued meanwhile
 * from another thread.
 * Build: nvcc -O2 -o probe_register probe_register.c -lpthread (tests/gpu/run.sh). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define MIB (1u << 20)
#define BUF (256u * MIB)
#define CHUNK (8u * MIB)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static char *buf, *pinned;
static void *dev;
static cudaStream_t st;
static atomic_int running;
static size_t piece;
static long pause_us;
static double reg_ms;

static void *registrar(void *arg) {
  (void)arg;
  double t0 = now_ms();
  for (size_t at = 0; at < BUF; at += piece) {
    if (cudaHostRegister(buf + at, piece, cudaHostRegisterPortable) != cudaSuccess)
      fprintf(stderr, "probe_register: register failed at %zu\n", at);
    if (pause_us && at + piece < BUF) {
      struct timespec ts = {0, pause_us * 1000};
      nanosleep(&ts, NULL);
    }
  }
  reg_ms = now_ms() - t0;
  atomic_store(&running, 0);
  return NULL;
}

static void unregister_all(void) {
  for (size_t at = 0; at < BUF; at += piece) cudaHostUnregister(buf + at);
}

/* One 8 MiB unit of the concurrent work: a pinned upload or a host copy
 * out of the buffer, as a staging copy thread does. */
static cudaEvent_t evq;
static void unit(int kind, size_t k) {
  if (kind == 0) {
    cudaMemcpyAsync(dev, pinned, CHUNK, cudaMemcpyHostToDevice, st);
    cudaStreamSynchronize(st);
  } else if (kind == 2) {
    for (int i = 0; i < 100; i++) cudaEventQuery(evq);
  } else if (kind == 3) {
    for (int i = 0; i < 100; i++) cudaEventRecord(evq, st);
  } else {
    memcpy(pinned, buf + (k * CHUNK) % BUF, CHUNK);
  }
}

static const char *units[] = {"uploads of 8 MiB", "memcpys of 8 MiB", "100 event queries",
                              "100 event records"};
static void one(const char *what, size_t pc, int kind) {
  double base = 1e9;
  for (int i = 0; i < 8; i++) {
    double t = now_ms();
    unit(kind, (size_t)i);
    t = now_ms() - t;
    if (t < base) base = t;
  }
  piece = pc;
  atomic_store(&running, 1);
  pthread_t th;
  pthread_create(&th, NULL, registrar, NULL);
  double worst = 0, sum = 0;
  int n = 0;
  while (atomic_load(&running)) {
    double t = now_ms();
    unit(kind, (size_t)n);
    t = now_ms() - t;
    sum += t;
    n++;
    if (t > worst) worst = t;
  }
  pthread_join(th, NULL);
  double u = now_ms();
  unregister_all();
  u = now_ms() - u;
  printf(
      "probe_register: %-34s register %6.1f ms (%3zu MiB pieces), unregister %5.1f ms; "
      "meanwhile %3d x %s, mean %.2f ms, worst %.2f ms (alone %.2f ms)\n",
      what, reg_ms, pc / MIB, u, n, units[kind], n ? sum / n : 0, worst, base);
}

int main(void) {
  buf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED || cudaMalloc(&dev, BUF) != cudaSuccess ||
      cudaMallocHost((void **)&pinned, CHUNK) != cudaSuccess ||
      cudaStreamCreate(&st) != cudaSuccess)
    return 2;
  cudaEventCreateWithFlags(&evq, cudaEventDisableTiming);
  char thp[128] = "?";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f) {
    if (fgets(thp, sizeof thp, f) == NULL) thp[0] = 0;
    fclose(f);
  }
  printf("probe_register: transparent_hugepage: %s", thp);
  /* The same 256 MiB with and without huge pages: what the driver's
   * per-page work costs. */
  for (int h = 0; h < 3; h++) {
    char *b2 =
        mmap(NULL, BUF + 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *a2 = (char *)(((uintptr_t)b2 + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
    if (h < 2) madvise(a2, BUF, h ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(a2, 1, BUF);
    double t0 = now_ms();
    cudaHostRegister(a2, BUF, cudaHostRegisterPortable);
    double t1 = now_ms();
    cudaHostUnregister(a2);
    double t2 = now_ms();
    printf("probe_register: 256 MiB %-22s register %6.1f ms, unregister %5.1f ms\n",
           h == 0   ? "MADV_NOHUGEPAGE"
           : h == 1 ? "MADV_HUGEPAGE"
                    : "as the kernel gives",
           t1 - t0, t2 - t1);
    munmap(b2, BUF + 2 * MIB);
  }
  memset(buf, 1, BUF);
  madvise(buf, BUF, MADV_NOHUGEPAGE);
  one("whole, uploads beside", BUF, 0);
  one("whole, memcpys beside", BUF, 1);
  one("whole, event queries beside", BUF, 2);
  one("whole, event records beside", BUF, 3);
  one("8 MiB pieces, uploads", 8 * MIB, 0);
  pause_us = 50;
  one("8 MiB pieces 50us apart, uploads", 8 * MIB, 0);
  one("16 MiB pieces 50us apart, uploads", 16 * MIB, 0);
  one("32 MiB pieces 50us apart, uploads", 32 * MIB, 0);
  pause_us = 200;
  one("8 MiB pieces 200us apart, uploads", 8 * MIB, 0);
  one("32 MiB pieces 200us apart, uploads", 32 * MIB, 0);
  pause_us = 0;
  /* A copy over two adjacent registrations: accepted as one? */
  cudaHostRegister(buf, 32 * MIB, 0);
  cudaHostRegister(buf + 32 * MIB, 32 * MIB, 0);
  cudaError_t e = cudaMemcpyAsync(dev, buf + 16 * MIB, 32 * MIB, cudaMemcpyHostToDevice, st);
  cudaGetLastError();
  cudaStreamSynchronize(st);
  double t = now_ms();
  for (int i = 0; i < 5; i++) cudaMemcpyAsync(dev, buf, 64 * MIB, cudaMemcpyHostToDevice, st);
  cudaStreamSynchronize(st);
  t = (now_ms() - t) / 5;
  printf(
      "probe_register: a copy over two adjacent registrations: %d; 64 MiB over both: %.2f ms "
      "(%.1f GB/s)\n",
      (int)e, t, 64.0 * MIB / t / 1e6);
  cudaHostUnregister(buf);
  cudaHostUnregister(buf + 32 * MIB);
  return 0;
}
