/* nopie_malloc.c - a program built without PIE that takes malloc's
 * address, as Debian's python3 does: its symbol table then holds an
 * undefined malloc with the address of a PLT stub, which is what
 * dlsym(RTLD_DEFAULT, "malloc") answers.  The shim must still see that
 * its own malloc serves the program (no "defines malloc itself" note) and
 * name the allocation site (tests/preload/run.sh, case_nopie_malloc). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set in code: non-PIC code takes a function's address as an immediate,
 * which the linker points at a PLT stub of the program's own. */
void *(*volatile pl_alloc)(size_t);

__attribute__((noinline)) static char *make_buffer(size_t n) {
  char *h = pl_alloc(n);
  if (h) memset(h, 3, n);
  return h;
}

int main(void) {
  size_t n = 2u << 20;
  pl_alloc = malloc;
  void *d = NULL;
  char *h = make_buffer(n);
  if (h == NULL || cudaMalloc(&d, n) != cudaSuccess) return 1;
  for (int i = 0; i < 3; i++)
    if (cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  printf("copies=3\n");
  cudaFree(d);
  free(h);
  return 0;
}
