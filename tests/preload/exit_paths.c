/* exit_paths.c - processes that end without exit(), so without the
 * destructors that finish the trace (Python's os._exit ends
 * multiprocessing's children this way).
 *
 * usage: exit_paths child | self | vfork | handler
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
 * Each upload is a cudaMemcpy from a malloc'd 1 MiB buffer. */
#define _GNU_SOURCE
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
  if (strcmp(how, "child") && setup()) return 2;
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
  fprintf(stderr, "usage: exit_paths child | self | vfork | handler\n");
  return 2;
}
