/* alloc_semantics.c - the malloc family behaves exactly as without the shim:
 * errno survives free, realloc keeps contents and failures, aligned
 * allocators honour alignment, calloc zeroes, malloc_usable_size answers,
 * mmap/mremap/munmap of tracked sizes work.  Exit 0 when all hold. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int bad;
#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "alloc_semantics: %s failed (line %d)\n", #c, __LINE__); \
      bad = 1;                                                                 \
    }                                                                          \
  } while (0)

int main(void) {
  size_t sizes[] = {1, 100, 4096, 65535, 65536, 200000, 5u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    errno = 1234;
    free(malloc(n));
    CHECK(errno == 1234);
    unsigned char *p = malloc(n);
    memset(p, 0xab, n);
    CHECK(malloc_usable_size(p) >= n);
    unsigned char *q = realloc(p, n * 3);
    CHECK(q != NULL && q[0] == 0xab && q[n - 1] == 0xab);
    unsigned char *z = calloc(n, 1);
    CHECK(z != NULL && z[0] == 0 && z[n - 1] == 0);
    void *a = NULL;
    CHECK(posix_memalign(&a, 4096, n) == 0 && ((uintptr_t)a & 4095) == 0);
    void *b = aligned_alloc(256, (n + 255) & ~(size_t)255);
    CHECK(b != NULL && ((uintptr_t)b & 255) == 0);
    void *c = memalign(64, n);
    CHECK(c != NULL && ((uintptr_t)c & 63) == 0);
    void *v = valloc(n);
    CHECK(v != NULL && ((uintptr_t)v & 4095) == 0);
    errno = 77;
    free(q);
    free(z);
    free(a);
    free(b);
    free(c);
    free(v);
    CHECK(errno == 77);
  }
  /* a huge request fails the same way */
  errno = 0;
  void *huge = malloc(SIZE_MAX / 2);
  CHECK(huge == NULL && errno == ENOMEM);
  /* a failed realloc leaves the block alive (and tracked): it can still be
   * grown and freed */
  char *keep = malloc(100000);
  void *none = realloc(keep, SIZE_MAX / 2);
  CHECK(none == NULL);
  if (none == NULL) {
    keep[99999] = 1;
    char *grown = realloc(keep, 300000);
    CHECK(grown != NULL && grown[99999] == 1);
    free(grown);
  }
  /* mmap family */
  char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  memset(m, 7, 1 << 20);
  char *m2 = mremap(m, 1 << 20, 4 << 20, MREMAP_MAYMOVE);
  CHECK(m2 != MAP_FAILED && m2[(1 << 20) - 1] == 7);
  CHECK(munmap(m2, 4 << 20) == 0);
  errno = 0;
  CHECK(mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED &&
        errno == EINVAL);
  printf("alloc_semantics: %s\n", bad ? "FAILED" : "ok");
  return bad;
}
