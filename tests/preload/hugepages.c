/* hugepages.c - which allocations the shim advised transparent huge pages
 * (PAGELOCK_HUGEPAGES, register and auto modes): for each way of getting
 * memory, whether the 2 MiB-aligned interior of the block carries the
 * kernel's `hg` flag (MADV_HUGEPAGE) in /proc/self/smaps, and whether the
 * memory just outside that interior does (it never may: it can be a
 * neighbour's).  Prints one line "NAME inside=0|1 outside=0|1" per
 * allocation, then "errno=N" (the program's errno across the hooks); the
 * preload case compares the lines with what the mode should give. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MIB ((size_t)1 << 20)
#define HUGE (2 * MIB)

/* The VmFlags of the mapping holding address a carry `hg`: 1, 0, or -1
 * when no mapping holds it. */
static int hg_at(uintptr_t a) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  char line[1024];
  int in = 0, r = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char c;
    if (sscanf(line, "%lx-%lx%c", &lo, &hi, &c) == 3 && c == ' ') {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && strncmp(line, "VmFlags:", 8) == 0) {
      r = strstr(line, " hg") != NULL;
      in = 0;
    }
  }
  fclose(f);
  return r;
}

/* The block [p, p+n): its first aligned huge page, and the page just
 * before that aligned interior when it still lies in the block. */
static void show(const char *name, void *p, size_t n) {
  uintptr_t b = (uintptr_t)p, lo = (b + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
  int inside = lo + HUGE <= b + n ? hg_at(lo) : 0;
  int outside = lo - 4096 >= b && lo - 4096 < b + n ? hg_at(lo - 4096) : 0;
  printf("%s inside=%d outside=%d\n", name, inside, outside);
}

int main(void) {
  errno = 55;
  char *m64 = malloc(64 * MIB);
  char *m16 = malloc(16 * MIB);
  char *m1 = malloc(1 * MIB);
  char *c16 = calloc(16, MIB);
  void *a16 = NULL;
  int pr = posix_memalign(&a16, 64, 16 * MIB);
  char *r = malloc(200000);
  char *r32 = realloc(r, 32 * MIB);
  char *mm = mmap(NULL, 16 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *sh = mmap(NULL, 16 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  /* A block from glibc's heap, not a mapping of its own (glibc's dynamic
   * threshold puts blocks up to 32 MiB there once such a block was freed):
   * advice there would outlive the block. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  char *h16 = malloc(16 * MIB);
  int saved = errno;
  if (!m64 || !m16 || !m1 || !c16 || pr || !r32 || mm == MAP_FAILED || sh == MAP_FAILED || !h16) {
    fprintf(stderr, "hugepages: an allocation failed\n");
    return 1;
  }
  show("malloc64", m64, 64 * MIB);
  show("malloc16", m16, 16 * MIB);
  show("malloc1", m1, 1 * MIB);
  show("calloc16", c16, 16 * MIB);
  show("memalign16", a16, 16 * MIB);
  show("realloc32", r32, 32 * MIB);
  show("mmap16", mm, 16 * MIB);
  show("shared16", sh, 16 * MIB);
  show("heap16", h16, 16 * MIB);
  printf("errno=%d\n", saved);
  /* The memory works as memory. */
  memset(m64, 1, 64 * MIB);
  memset(mm, 2, 16 * MIB);
  int ok = m64[64 * MIB - 1] == 1 && mm[5 * MIB] == 2;
  free(m64);
  free(m16);
  free(m1);
  free(c16);
  free(a16);
  free(r32);
  free(h16);
  munmap(mm, 16 * MIB);
  munmap(sh, 16 * MIB);
  return ok ? 0 : 1;
}
