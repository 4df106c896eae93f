/* coro_stacks.c - copies from stacks that are not the thread's own, two lines
 * each (tests/preload/run.sh, case_coro_stacks):
 *  - a coroutine (makecontext) whose entry function has a variable-length
 *    array, run on a 64 KiB mapping, then on a 32 KiB one at the same base
 *    with the rest of the old one inaccessible, the array sized so that
 *    the copies come at the same stack pointer both times (checked: exit
 *    3 otherwise).  Whatever the shim remembers of the first stack must
 *    not make it read past the second's end: the program would die;
 *  - with `main`, a signal handler on an alternate stack (sigaltstack).
 * `test_coro_stacks main` runs them on the main thread, `test_coro_stacks thread`
 * the coroutines on another.  Every copy must reach its own line: 100
 * from each coroutine line, 30 from each handler line. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#define COPIES 50 /* per line and coroutine run */
#define SIGNALS 30

static void *dev;
static char *host;
static volatile int failed;
static volatile int vla_size;
static uintptr_t coro_sp[2];
static volatile int run_no;
static ucontext_t back, coro;

/* The two lines, 50 copies each, one after the other: the first run
 * ends with the line the second begins with, so that what the shim kept
 * of the first run's last copies matches the second's first copy as far
 * as the coroutine's entry, whose frame the array made larger then. */
static __attribute__((noinline)) void coro_lines(int order) {
  coro_sp[run_no] = (uintptr_t)__builtin_frame_address(0);
  for (int k = 0; k < 2; k++) {
    int line = k ^ order;
    for (int i = 0; i < COPIES; i++) {
      if (line == 0) {
        if (cudaMemcpy(dev, host, 256, cudaMemcpyHostToDevice) != cudaSuccess)
          failed = 1; /* first */
      } else {
        if (cudaMemcpy(dev, host, 256, cudaMemcpyHostToDevice) != cudaSuccess)
          failed = 2; /* second */
      }
    }
  }
  __asm__ volatile("" ::: "memory");
}

static void coro_entry(void) {
  int n = vla_size;
  volatile char vla[n];
  vla[0] = 1;
  vla[n - 1] = 1;
  coro_lines(run_no);
  if (vla[0] != 1 || vla[n - 1] != 1) failed = 1; /* the array lives across the copies */
}

/* One run of the coroutine on [stack, stack + size). */
static void coro_run(void *stack, size_t size, int vla) {
  vla_size = vla;
  if (getcontext(&coro) != 0) exit(2);
  coro.uc_stack.ss_sp = stack;
  coro.uc_stack.ss_size = size;
  coro.uc_link = &back;
  makecontext(&coro, coro_entry, 0);
  if (swapcontext(&back, &coro) != 0) exit(2);
}

static int coroutines(void) {
  const size_t big = 64 << 10, small = 32 << 10;
  char *base = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return 2;
  run_no = 0;
  coro_run(base, big, (int)(big - small) + 1024);
  if (munmap(base, big) != 0) return 2;
  /* The smaller stack at the same base; what was the top half of the
   * bigger one stays reserved and inaccessible, so nothing else lands
   * there and a read of it faults. */
  char *again = mmap(base, small, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  char *hole = mmap(base + small, big - small, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again != base || hole != base + small) {
    fprintf(stderr, "coro_stacks: could not map the second stack at the first's base\n");
    return 3;
  }
  run_no = 1;
  coro_run(base, small, 1024);
  if (coro_sp[0] != coro_sp[1]) {
    fprintf(stderr, "coro_stacks: the copies came at two stack pointers (%#lx, %#lx)\n",
            (unsigned long)coro_sp[0], (unsigned long)coro_sp[1]);
    return 3;
  }
  munmap(base, big);
  return 0;
}

static char *alt;
static const size_t alt_size = 64 << 10;
static volatile int on_alt = 1;

static __attribute__((noinline)) void handler_lines(void) {
  char here;
  if (&here < alt || &here >= alt + alt_size) on_alt = 0;
  if (cudaMemcpy(dev, host, 256, cudaMemcpyHostToDevice) != cudaSuccess) failed = 1; /* first */
  if (cudaMemcpy(dev, host, 256, cudaMemcpyHostToDevice) != cudaSuccess) failed = 1; /* second */
  __asm__ volatile("" ::: "memory");
}

static void on_signal(int sig) {
  (void)sig;
  handler_lines();
}

static int signals(void) {
  alt = malloc(alt_size);
  stack_t ss = {.ss_sp = alt, .ss_size = alt_size};
  if (alt == NULL || sigaltstack(&ss, NULL) != 0) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_ONSTACK;
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 2;
  for (int i = 0; i < SIGNALS; i++) raise(SIGUSR1);
  if (!on_alt) {
    fprintf(stderr, "coro_stacks: the handler did not run on its stack\n");
    return 3;
  }
  return 0;
}

static void *thread_main(void *arg) {
  *(int *)arg = coroutines();
  return NULL;
}

int main(int argc, char **argv) {
  int thread = argc > 1 && strcmp(argv[1], "thread") == 0;
  host = malloc(4096);
  if (host == NULL || cudaMalloc(&dev, 4096) != cudaSuccess) return 1;
  memset(host, 1, 4096);
  int rc = 0;
  if (thread) {
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, &rc) != 0 || pthread_join(t, NULL) != 0) return 2;
  } else {
    rc = coroutines();
    if (rc == 0) rc = signals();
  }
  cudaFree(dev);
  free(host);
  return rc ? rc : failed;
}
