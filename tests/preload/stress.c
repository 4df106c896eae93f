/* stress.c - 16 threads allocating, freeing, reallocating and copying at
 * once, for a fixed time, under the shim.  A watchdog turns a deadlock into
 * a failure; at the end the shim's registry must be consistent and hold no
 * more ranges than are live.  usage: stress SECONDS */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define THREADS 16
static atomic_int stop;
static atomic_long ops, copies, bad;

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
  void *dev;
  cudaStream_t s;
  if (cudaMalloc(&dev, 1 << 20) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
    bad++;
    return NULL;
  }
  char *slot[8] = {0};
  size_t len[8] = {0};
  unsigned char *back = malloc(1 << 20);
  while (!atomic_load(&stop)) {
    int i = rand_r(&seed) % 8;
    size_t n = (size_t)(rand_r(&seed) % 4 ? 4096 : 70000) + (size_t)(rand_r(&seed) % 300000);
    switch (rand_r(&seed) % 5) {
      case 0:
        free(slot[i]);
        slot[i] = malloc(n);
        len[i] = n;
        break;
      case 1: {
        char *p = realloc(slot[i], n);
        if (p) {
          slot[i] = p;
          len[i] = n;
        }
        break;
      }
      case 2:
        free(slot[i]);
        slot[i] = calloc(1, n);
        len[i] = n;
        break;
      case 3: {
        char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
          memset(m, 3, n);
          munmap(m, n);
        }
        break;
      }
      default:
        if (slot[i]) {
          size_t c = len[i] < (1 << 20) ? len[i] : (1 << 20);
          memset(slot[i], (int)(c & 0xff), c);
          if (cudaMemcpyAsync(dev, slot[i], c, cudaMemcpyHostToDevice, s) != cudaSuccess ||
              cudaMemcpyAsync(back, dev, c, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
              cudaStreamSynchronize(s) != cudaSuccess || memcmp(back, slot[i], c) != 0)
            bad++;
          copies += 2;
        }
    }
    ops++;
  }
  for (int i = 0; i < 8; i++) free(slot[i]);
  free(back);
  cudaStreamDestroy(s);
  cudaFree(dev);
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "stress: watchdog fired: deadlock or hang\n";
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(3);
}

int main(int argc, char **argv) {
  int secs = argc > 1 ? atoi(argv[1]) : 3;
  signal(SIGALRM, watchdog);
  alarm((unsigned)secs + 60);
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
  struct timespec ts = {secs, 0};
  nanosleep(&ts, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  /* The shim exports its registry check; absent means no shim (a control run). */
  int (*check)(size_t *, size_t *) =
      (int (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "pagelock_registry_check");
  size_t tracked = 0, pinned = 0;
  int ok = check ? check(&tracked, &pinned) : 1;
  printf("ops=%ld copies=%ld bad=%ld registry=%s tracked=%zu pinned=%zu\n", (long)ops, (long)copies,
         (long)bad, check ? (ok ? "consistent" : "BROKEN") : "absent", tracked, pinned);
  /* Every worker freed all it allocated: only a few long-lived ranges
   * (cudart's own, stdio) may remain. */
  return bad == 0 && ok && tracked < 64 ? 0 : 1;
}
