/* rangemap.c - an ordered map of disjoint address ranges, without malloc.
 *
 * A treap (randomised binary search tree): insert, erase and "which range
 * contains p" in O(log n) expected.  Nodes come from slabs mapped with the
 * raw mmap system call, because this structure is updated from inside the
 * shim's malloc and mmap hooks, where calling malloc (or our own mmap hook)
 * would recurse.  The caller provides the locking. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rangemap.h"

#define PL_SLAB_NODES 8192

/* Free nodes of all maps, shared: a slab is never returned to the OS. */
static pl_range *pl_free_nodes;
static uint64_t pl_rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t pl_rand(void) {
  uint64_t x = pl_rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  pl_rng_state = x;
  return (uint32_t)(x >> 16);
}

/* One node from the free list, refilled by a raw mmap; NULL when the
 * system is out of memory (the range is then simply not tracked). */
static pl_range *pl_node_alloc(void) {
  if (pl_free_nodes == NULL) {
    size_t bytes = sizeof(pl_range) * PL_SLAB_NODES;
    void *m = (void *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    pl_range *slab = m;
    for (int i = 0; i < PL_SLAB_NODES; i++) {
      slab[i].left = pl_free_nodes;
      pl_free_nodes = &slab[i];
    }
  }
  pl_range *n = pl_free_nodes;
  pl_free_nodes = n->left;
  memset(n, 0, sizeof *n);
  return n;
}

static void pl_node_free(pl_range *n) {
  n->left = pl_free_nodes;
  pl_free_nodes = n;
}

/* Split t into keys < base (*l) and keys >= base (*r). */
static void pl_split(pl_range *t, uintptr_t base, pl_range **l, pl_range **r) {
  if (t == NULL) {
    *l = *r = NULL;
    return;
  }
  if (t->base < base) {
    pl_split(t->right, base, &t->right, r);
    *l = t;
  } else {
    pl_split(t->left, base, l, &t->left);
    *r = t;
  }
}

static pl_range *pl_merge(pl_range *l, pl_range *r) {
  if (l == NULL) return r;
  if (r == NULL) return l;
  if (l->prio > r->prio) {
    l->right = pl_merge(l->right, r);
    return l;
  }
  r->left = pl_merge(l, r->left);
  return r;
}

pl_range *pl_rangemap_find(const pl_rangemap *m, uintptr_t p) {
  pl_range *t = m->root, *best = NULL;
  while (t) {
    if (t->base <= p) {
      best = t;
      t = t->right;
    } else
      t = t->left;
  }
  return best && p - best->base < best->size ? best : NULL;
}

/* First range whose end lies above p (the lowest one that can overlap
 * [p, ...)), or NULL. */
static pl_range *pl_first_overlap(const pl_rangemap *m, uintptr_t p, uintptr_t end) {
  pl_range *f = pl_rangemap_find(m, p);
  if (f) return f;
  pl_range *t = m->root, *best = NULL; /* smallest base >= p */
  while (t) {
    if (t->base >= p) {
      best = t;
      t = t->left;
    } else
      t = t->right;
  }
  return best && best->base < end ? best : NULL;
}

static void pl_erase_node(pl_rangemap *m, uintptr_t base) {
  pl_range *l, *mid, *r;
  pl_split(m->root, base, &l, &mid);
  pl_split(mid, base + 1, &mid, &r);
  if (mid) {
    pl_node_free(mid);
    m->count--;
  }
  m->root = pl_merge(l, r);
}

size_t pl_rangemap_erase_overlap(pl_rangemap *m, uintptr_t p, size_t n) {
  size_t erased = 0;
  uintptr_t end = p + (n ? n : 1);
  pl_range *o;
  while ((o = pl_first_overlap(m, p, end)) != NULL) {
    pl_erase_node(m, o->base);
    erased++;
  }
  return erased;
}

bool pl_rangemap_erase(pl_rangemap *m, uintptr_t base) {
  size_t before = m->count;
  pl_erase_node(m, base);
  return m->count != before;
}

pl_range *pl_rangemap_insert(pl_rangemap *m, uintptr_t base, size_t size) {
  /* Anything overlapping is stale: its memory was released by a path the
   * shim cannot see (glibc's internal munmap), and the address reused. */
  pl_rangemap_erase_overlap(m, base, size);
  pl_range *n = pl_node_alloc();
  if (n == NULL) return NULL;
  n->base = base;
  n->size = size;
  n->prio = pl_rand();
  pl_range *l, *r;
  pl_split(m->root, base, &l, &r);
  m->root = pl_merge(pl_merge(l, n), r);
  m->count++;
  return n;
}

/* In-order walk checking order, disjointness and the heap property. */
static bool pl_check(const pl_range *t, uintptr_t lo, uintptr_t hi, size_t *count) {
  if (t == NULL) return true;
  (*count)++;
  if (t->base < lo || t->base >= hi || t->size == 0) return false;
  if (t->left && t->left->prio > t->prio) return false;
  if (t->right && t->right->prio > t->prio) return false;
  uintptr_t end = t->base + t->size;
  return pl_check(t->left, lo, t->base, count) &&
         pl_check(t->right, end < t->base ? UINTPTR_MAX : end, hi, count);
}

bool pl_rangemap_check(const pl_rangemap *m) {
  size_t count = 0;
  return pl_check(m->root, 0, UINTPTR_MAX, &count) && count == m->count;
}

void pl_rangemap_clear(pl_rangemap *m) {
  while (m->root) pl_erase_node(m, m->root->base);
}
