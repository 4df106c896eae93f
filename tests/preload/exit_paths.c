/* exit_paths.c - processes that end without exit(), so without the
 * destructors that finish the trace (Python's os._exit ends
 * multiprocessing's children this way).
 *
 * usage: exit_paths child | self | vfork | handler | malloc
 *   child    a child forked before either touched CUDA (a child of a
 *            parent that did cannot use it) makes 4 pageable uploads and
 *            calls _exit(0); the parent makes 2 and returns 0
 *   self     3 uploads, then _Exit(5)
 *   vfork    2 uploads; a vfork child calls _exit(0) at once (it shares
 *            the parent's memory: it must not finish the parent's trace);
 *            2 more uploads, then return 0
 *   handler  uploads in a loop while a 20 kHz SIGALRM handler runs; its
 *            2000th run calls _exit(7), perhaps inside the shim (which
 *            must neither hang nor crash then)
 *   malloc   40 uploads from 40 call sites, then malloc and free in a
 *            loop while the same
 *            handler runs: its _exit most likely interrupts malloc, which
 *            holds its arena's lock (finishing the trace must not
 *            allocate)
 * Each upload is a cudaMemcpy from a malloc'd 1 MiB buffer. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

enum { N = 1 << 20 };
static unsigned char *host;
static void *dev;

static int setup(void) {
  host = malloc(N);
  if (host == NULL || cudaMalloc(&dev, N) != cudaSuccess) return 1;
  memset(host, 1, N);
  return 0;
}

static int uploads(int n) {
  for (int i = 0; i < n; i++)
    if (cudaMemcpy(dev, host, N, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  return 0;
}

/* 40 functions that upload: a call stack of its own for each, so that
 * the trace has many frames to name at its end (more than a sort does
 * without malloc). */
static volatile int sink;
#define PL_SITE(k)                                        \
  __attribute__((noinline)) static int upload_##k(void) { \
    int r = uploads(1);                                   \
    sink = k;                                             \
    return r;                                             \
  }
// clang-format off
#define PL_SITES(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \
  X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) \
  X(30) X(31) X(32) X(33) X(34) X(35) X(36) X(37) X(38) X(39)
// clang-format on
PL_SITES(PL_SITE)
#define PL_SITE_FN(k) upload_##k,
static int (*const sites[])(void) = {PL_SITES(PL_SITE_FN)};

static atomic_int runs;
static void on_alarm(int sig) {
  (void)sig;
  if (atomic_fetch_add(&runs, 1) == 2000) _exit(7);
}

int main(int argc, char **argv) {
  const char *how = argc == 2 ? argv[1] : "";
  if (!strcmp(how, "child")) {
    pid_t pid = fork();
    if (pid == 0) _exit(setup() || uploads(4));
    int st, bad = setup() || uploads(2);
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "exit_paths: the child failed\n");
      bad = 1;
    }
    printf("exit_paths: child %d\n", (int)pid);
    return bad;
  }
  /* SIGALRM for the main thread only: the threads CUDA starts (and the
   * shim's) inherit it blocked, so that the handler interrupts the loop. */
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alrm, NULL);
  if (strcmp(how, "child") && setup()) return 2;
  pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
  if (!strcmp(how, "self")) {
    if (uploads(3)) return 1;
    _Exit(5);
  }
  if (!strcmp(how, "vfork")) {
    if (uploads(2)) return 1;
    pid_t pid = vfork();
    if (pid == 0) _exit(0);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
    return uploads(2);
  }
  if (!strcmp(how, "handler")) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (;;)
      if (uploads(1)) return 1;
  }
  if (!strcmp(how, "malloc")) {
    for (size_t k = 0; k < sizeof sites / sizeof sites[0]; k++)
      if (sites[k]()) return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (unsigned k = 0;; k++) {
      void *p[8];
      for (int i = 0; i < 8; i++) p[i] = malloc(64 + 4096 * ((k + i) % 16));
      for (int i = 0; i < 8; i++) free(p[i]);
    }
  }
  fprintf(stderr, "usage: exit_paths child | self | vfork | handler | malloc\n");
  return 2;
}
