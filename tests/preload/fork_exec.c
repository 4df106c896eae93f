/* fork_exec.c - fork and exec under the shim while other threads copy and
 * allocate.
 *
 * Four threads keep the shim's locks busy (copies, large mallocs); the main
 * thread forks children that allocate through the shim (a lock inherited in
 * the held state would hang them) and then exec a CUDA program, which must
 * trace into its own file.  usage: fork_exec CHILD_PROGRAM NCHILDREN */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static atomic_int stop;

static void *busy(void *arg) {
  (void)arg;
  void *dev;
  if (cudaMalloc(&dev, 1 << 20) != cudaSuccess) return NULL;
  while (!atomic_load(&stop)) {
    char *p = malloc(200000);
    memset(p, 1, 200000);
    cudaMemcpy(dev, p, 200000, cudaMemcpyHostToDevice);
    free(p);
  }
  cudaFree(dev);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  int n = atoi(argv[2]);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, busy, NULL);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      /* malloc/free through the shim's hooks in the child */
      for (int k = 0; k < 50; k++) free(malloc(100000 + k));
      alarm(60);
      execl(argv[1], argv[1], (char *)NULL);
      _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "fork_exec: child %d failed (status %d)\n", i, st);
      bad = 1;
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  printf("children=%d\n", n);
  return bad;
}
