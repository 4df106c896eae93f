/* guard_main.c - allocations of every size through a next allocator that
 * has no chunk headers (guard_alloc.c), under the shim: each block is
 * written, resized and checked, the aligned calls' too.  Exits 0 when every byte held and the
 * allocator served the blocks; a hook that reads below a block dies of
 * SIGSEGV instead. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  /* volatile: the compiler may assume malloc writes no memory of ours */
  volatile unsigned long *served = dlsym(RTLD_DEFAULT, "guard_alloc_count");
  if (served == NULL) {
    fprintf(stderr, "guard_main: guard_alloc is not loaded\n");
    return 2;
  }
  unsigned long before = *served;
  static const size_t sizes[] = {1, 24, 4096, 65535, 65536, 200000, 1 << 20, (1 << 22) + 3};
  for (int round = 0; round < 50; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      size_t n = sizes[i];
      unsigned char *p = round & 1 ? calloc(1, n) : malloc(n);
      if (p == NULL) {
        fprintf(stderr, "guard_main: no block of %zu\n", n);
        return 1;
      }
      memset(p, (int)(i + 1), n);
      p = realloc(p, n * 2);
      if (p == NULL) {
        fprintf(stderr, "guard_main: realloc to %zu failed\n", n * 2);
        return 1;
      }
      for (size_t k = 0; k < n; k++)
        if (p[k] != (unsigned char)(i + 1)) {
          fprintf(stderr, "guard_main: byte %zu of %zu lost\n", k, n);
          return 1;
        }
      free(p);
    }
  }
  /* The aligned calls are the allocator's too (as jemalloc's are): a block
   * from them resizes and frees like any other. */
  static const size_t aligns[] = {16, 64, 4096, 1 << 21};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    size_t a = aligns[i], n = 3 * a + 5;
    unsigned char *b[3] = {NULL, NULL, NULL};
    if (posix_memalign((void **)&b[0], a, n) != 0) b[0] = NULL;
    b[1] = aligned_alloc(a, (n + a - 1) / a * a);
    b[2] = memalign(a, n);
    for (int k = 0; k < 3; k++) {
      if (b[k] == NULL || (uintptr_t)b[k] % a != 0) {
        fprintf(stderr, "guard_main: aligned call %d gave %p for alignment %zu\n", k, (void *)b[k],
                a);
        return 1;
      }
      memset(b[k], 0x33 + k, n);
      unsigned char *q = realloc(b[k], 2 * n);
      if (q == NULL) {
        fprintf(stderr, "guard_main: realloc of an aligned block of %zu failed\n", n);
        return 1;
      }
      for (size_t j = 0; j < n; j++)
        if (q[j] != (unsigned char)(0x33 + k)) {
          fprintf(stderr, "guard_main: byte %zu of an aligned block lost\n", j);
          return 1;
        }
      free(q);
    }
  }
  if (*served - before < 50 * 8 * 2 + 4 * 3 * 2) {
    fprintf(stderr, "guard_main: the next allocator served %lu blocks\n", *served - before);
    return 1;
  }
  printf("guard_main: ok, %lu blocks\n", *served - before);
  return 0;
}
