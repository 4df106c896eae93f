/* stderr_takeover.c - a program that puts a file of its own at descriptor
 * 2, then makes copies that the shim warns about (issue 39 item 5).
 *
 * usage: stderr_takeover HOW FILE [ROUNDS]
 *   HOW  close   close(2), then open FILE, which gets 2
 *        dup2    open FILE, dup2 it onto 2
 *        closed  2 was closed when the program started (run it with 2>&-):
 *                open FILE, which gets 2
 *        keep    FILE is opened at another number; 2 stays as it was
 * It writes one line of its own to FILE, uploads and downloads an 8 MiB
 * malloc'd buffer ROUNDS times (default 8: enough for auto to register
 * it), checks the bytes, and writes a last line.  FILE must then hold the
 * program's two lines and nothing else.  Prints "copies=N wrong=W fd=F
 * bytes_checked=B", F being the number FILE got. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define N (8u << 20)

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: stderr_takeover close|dup2|closed|keep FILE [ROUNDS]\n");
    return 2;
  }
  const char *how = argv[1];
  int rounds = argc > 3 ? atoi(argv[3]) : 8;
  int fd;
  if (strcmp(how, "close") == 0) {
    close(2);
    fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  } else if (strcmp(how, "dup2") == 0) {
    int f = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    fd = f < 0 ? -1 : dup2(f, 2);
    if (f >= 0 && f != 2) close(f);
  } else if (strcmp(how, "closed") == 0 || strcmp(how, "keep") == 0) {
    fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  } else {
    return 2;
  }
  if (fd < 0 || (strcmp(how, "keep") != 0) != (fd == 2)) {
    printf("stderr_takeover: %s: the file got descriptor %d\n", how, fd);
    return 2;
  }
  static const char first[] = "the program's own first line\n",
                    last[] = "the program's last line\n";
  if (write(fd, first, sizeof first - 1) != (ssize_t)sizeof first - 1) return 2;

  unsigned char *h = malloc(N), *back = malloc(N);
  void *d;
  if (!h || !back || cudaMalloc(&d, N) != cudaSuccess) return 2;
  long copies = 0, wrong = 0;
  for (int r = 0; r < rounds; r++) {
    for (size_t i = 0; i < N; i++) h[i] = (unsigned char)(i * 13 + (size_t)r);
    if (cudaMemcpy(d, h, N, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(back, d, N, cudaMemcpyDeviceToHost) != cudaSuccess)
      return 2;
    copies += 2;
    if (memcmp(h, back, N) != 0) wrong++;
  }
  if (write(fd, last, sizeof last - 1) != (ssize_t)sizeof last - 1) return 2;
  printf("copies=%ld wrong=%ld fd=%d bytes_checked=%llu\n", copies, wrong, fd,
         (unsigned long long)rounds * N);
  return wrong != 0;
}
