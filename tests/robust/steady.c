/* steady.c - copies at a steady pace until it is killed, for the
 * robustness suite's SIGKILL case (tests/robust/run.sh).
 *
 * After each copy returns, the count of copies made so far is stored in
 * COUNTFILE, a shared mapping, so it survives the kill.  The trace then
 * says how many of them the shim kept: a SIGKILL may lose what was not yet
 * written (up to a second of records, and the records still in a thread's
 * ring), never more, and never leaves a trace the reader cannot read.
 * usage: steady COUNTFILE  (stops by itself after 60 s) */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define BYTES (64u << 10)

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: steady COUNTFILE\n");
    return 2;
  }
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 2 * sizeof(uint64_t)) != 0) {
    perror(argv[1]);
    return 2;
  }
  volatile uint64_t *count =
      mmap(NULL, 2 * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (count == MAP_FAILED) {
    perror("mmap");
    return 2;
  }
  void *dev;
  char *host = malloc(BYTES);
  if (host == NULL || cudaMalloc(&dev, BYTES) != cudaSuccess) {
    fprintf(stderr, "steady: no device memory\n");
    return 3;
  }
  memset(host, 7, BYTES);
  count[1] = (uint64_t)getpid(); /* ready: the suite may kill it from now on */
  alarm(60);
  struct timespec pace = {0, 200000}; /* 0.2 ms: a few thousand copies a second */
  for (;;) {
    if (cudaMemcpy(dev, host, BYTES, cudaMemcpyHostToDevice) != cudaSuccess) return 4;
    count[0]++;
    nanosleep(&pace, NULL);
  }
}
