/* native_names.c - a copy from a static function placed right after an
 * exported one (linked with -rdynamic, so the exported one is in .dynsym):
 * the report must name the static function from the symbol table, the
 * debuglink file or DWARF, and with none of them the module and offset,
 * never the exported neighbour, the nearest exported symbol before it
 * (tests/preload/run.sh, case_native_names).  Prints the copy's line. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int copy_line;
static volatile int sink;

__attribute__((noipa, visibility("default"))) void pl_exported_neighbour(void) { sink++; }

__attribute__((noipa)) static int copy_from_static(void *d, const void *h, size_t n) {
  int rc = cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess;
  copy_line = __LINE__ - 1;
  sink++; /* no tail call: this frame stays on the stack */
  return rc;
}

int main(void) {
  size_t n = 1u << 20;
  void *d = NULL;
  char *h = malloc(n);
  if (h == NULL || cudaMalloc(&d, n) != cudaSuccess) return 1;
  memset(h, 5, n);
  pl_exported_neighbour();
  for (int i = 0; i < 3; i++)
    if (copy_from_static(d, h, n)) return 1;
  printf("copy_line=%d\n", copy_line);
  cudaFree(d);
  free(h);
  return 0;
}
