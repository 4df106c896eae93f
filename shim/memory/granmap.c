/* granmap.c - tracked allocations, found by address without a lock.
 *
 * Why not the treap (rangemap.c): every free() of the program asks "was
 * this tracked?", and every large malloc/free updates the map, from many
 * threads at once; a lock there costs more than the allocation.  So the
 * address space is cut into granules of 2^shift bytes, where 2^shift <=
 * PAGELOCK_TRACK_MIN, and a two-level radix table gives each granule two
 * slots holding the ranges that overlap it.  Tracked ranges are at least one
 * granule long, so no granule can overlap more than two of them (the tail
 * of one and the head of the next).  Insert and erase touch only the
 * range's own granules with compare-and-swap; lookups are two loads.
 *
 * A range found overlapping a new one is stale (its memory was released by
 * a path no hook sees, such as glibc's internal free) and is erased first.
 * Nodes are recycled, never unmapped, so a racing reader may see a recycled
 * node (a wrong answer for memory being freed under it, as the program's
 * own use would be) but never a fault. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "granmap.h"

#define PL_NODE_SLAB 4096

unsigned pl_gm_shift;
size_t pl_gm_top_len;
pl_gslot *_Atomic *pl_gm_top; /* pl_gm_top_len leaves, mapped on demand */
#define pl_shift pl_gm_shift
#define pl_top_len pl_gm_top_len
#define pl_top pl_gm_top

/* ---- nodes ----------------------------------------------------------------- */

static pl_range *pl_free_list; /* guarded by pl_node_lock */
static pthread_mutex_t pl_node_lock = PTHREAD_MUTEX_INITIALIZER;
#define PL_TCACHE 32
static PL_TLS pl_range *pl_tcache[PL_TCACHE];
static PL_TLS int pl_tcache_n;

static void *pl_raw_map(size_t n) {
  void *m = (void *)syscall(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

/* Nodes given back by a hook that interrupted this thread's own get or
 * put (a signal handler's munmap or free): pushed here without a lock,
 * taken back whole under it.  A push-only stack emptied by one exchange
 * has no ABA. */
static _Atomic(pl_range *) pl_orphans;
/* This thread is inside pl_node_get or pl_node_put: its cache and maybe
 * the lock are in the middle of a change. */
static PL_TLS bool pl_node_busy;

/* A zeroed node: from this thread's cache, else a batch from the shared
 * list (refilled from a fresh slab), so the lock is rarely taken.  NULL
 * when reentered (the range goes untracked). */
static pl_range *pl_node_get(void) {
  if (pl_node_busy) return NULL;
  pl_node_busy = true;
  atomic_signal_fence(memory_order_seq_cst);
  if (pl_tcache_n == 0) {
    pthread_mutex_lock(&pl_node_lock);
    for (pl_range *o = atomic_exchange(&pl_orphans, NULL), *next; o; o = next) {
      next = o->left;
      o->left = pl_free_list;
      pl_free_list = o;
    }
    if (pl_free_list == NULL) {
      pl_range *slab = pl_raw_map(sizeof(pl_range) * PL_NODE_SLAB);
      for (int i = 0; slab && i < PL_NODE_SLAB; i++) {
        slab[i].left = pl_free_list;
        pl_free_list = &slab[i];
      }
    }
    while (pl_tcache_n < PL_TCACHE / 2 && pl_free_list) {
      pl_tcache[pl_tcache_n++] = pl_free_list;
      pl_free_list = pl_free_list->left;
    }
    pthread_mutex_unlock(&pl_node_lock);
  }
  pl_range *n = pl_tcache_n ? pl_tcache[--pl_tcache_n] : NULL;
  atomic_signal_fence(memory_order_seq_cst);
  pl_node_busy = false;
  if (n == NULL) return NULL;
  /* Field by field, atomically: a reader may still hold the old incarnation. */
  __atomic_store_n(&n->stack_id, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&n->gen, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&n->cached, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&n->spans, 0, __ATOMIC_RELAXED);
  return n;
}

static void pl_node_put(pl_range *n) {
  if (pl_node_busy) {
    pl_range *head = atomic_load(&pl_orphans);
    do n->left = head;
    while (!atomic_compare_exchange_weak(&pl_orphans, &head, n));
    return;
  }
  pl_node_busy = true;
  atomic_signal_fence(memory_order_seq_cst);
  if (pl_tcache_n < PL_TCACHE) {
    pl_tcache[pl_tcache_n++] = n;
  } else {
    pthread_mutex_lock(&pl_node_lock);
    n->left = pl_free_list;
    pl_free_list = n;
    pthread_mutex_unlock(&pl_node_lock);
  }
  atomic_signal_fence(memory_order_seq_cst);
  pl_node_busy = false;
}

/* ---- the table ----------------------------------------------------------- */

bool pl_granmap_init(size_t track_min) {
  if (pl_top) return true;
  unsigned s = 12;
  while (s < 30 && ((size_t)1 << (s + 1)) <= track_min) s++;
  size_t len = (size_t)1 << (PL_ADDR_BITS - s - PL_LEAF_BITS);
  pl_gslot *_Atomic *top = pl_raw_map(len * sizeof *top);
  if (top == NULL) return false;
  pl_shift = s;
  pl_top_len = len;
  pl_top = top;
  return true;
}

size_t pl_granmap_granule(void) { return pl_top ? (size_t)1 << pl_shift : 0; }

/* A leaf: its slots, then one bit per granule saying "a tracked range
 * starts here".  The bits turn the backward search for the nearest range
 * start (up to PL_GM_SPAN granules, each its own cache line) into one or two
 * word loads. */
#define PL_LEAF_SLOTS_BYTES (sizeof(pl_gslot) << PL_LEAF_BITS)
#define PL_LEAF_BYTES (PL_LEAF_SLOTS_BYTES + ((size_t)1 << PL_LEAF_BITS) / 8)
#define PL_LEAF_MASK (((uintptr_t)1 << PL_LEAF_BITS) - 1)

static inline _Atomic uint64_t *pl_leaf_bits(pl_gslot *leaf) {
  return (_Atomic uint64_t *)((char *)leaf + PL_LEAF_SLOTS_BYTES);
}

/* The leaf holding granule g, or NULL where none is mapped: inline, for
 * the lookups. */
static inline pl_gslot *pl_leaf_find(uintptr_t g) {
  size_t hi = g >> PL_LEAF_BITS;
  return hi < pl_top_len ? atomic_load_explicit(&pl_top[hi], memory_order_acquire) : NULL;
}

/* The leaf holding granule g, mapping it when `create`. */
static pl_gslot *pl_leaf(uintptr_t g, bool create) {
  size_t hi = g >> PL_LEAF_BITS;
  if (hi >= pl_top_len) return NULL;
  pl_gslot *leaf = atomic_load_explicit(&pl_top[hi], memory_order_acquire);
  if (leaf == NULL) {
    if (!create) return NULL;
    pl_gslot *fresh = pl_raw_map(PL_LEAF_BYTES);
    if (fresh == NULL) return NULL;
    if (!atomic_compare_exchange_strong(&pl_top[hi], &leaf, fresh))
      syscall(SYS_munmap, fresh, PL_LEAF_BYTES); /* another thread won */
    else
      leaf = fresh;
  }
  return leaf;
}

/* The slots of granule g, mapping its leaf when `create`. */
static pl_gslot *pl_slot(uintptr_t g, bool create) {
  pl_gslot *leaf = pl_leaf(g, create);
  return leaf ? &leaf[g & PL_LEAF_MASK] : NULL;
}

/* Mark or unmark granule g as where a range starts (its leaf is mapped). */
static void pl_start_bit(uintptr_t g, bool on) {
  pl_gslot *leaf = pl_leaf(g, false);
  if (leaf == NULL) return;
  uintptr_t i = g & PL_LEAF_MASK;
  uint64_t bit = (uint64_t)1 << (i & 63);
  if (on)
    atomic_fetch_or_explicit(&pl_leaf_bits(leaf)[i >> 6], bit, memory_order_release);
  else
    atomic_fetch_and_explicit(&pl_leaf_bits(leaf)[i >> 6], ~bit, memory_order_release);
}

/* The highest set bit of v among its bits from..to (0 <= from <= to <=
 * 63), as a granule (bit 0 is granule `base`), or UINTPTR_MAX. */
static inline uintptr_t pl_top_bit(uint64_t v, uintptr_t base, unsigned from, unsigned to) {
  v &= to == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (to + 1)) - 1);
  v &= ~(((uint64_t)1 << from) - 1);
  return v ? base + 63 - (uintptr_t)__builtin_clzll(v) : UINTPTR_MAX;
}

/* The highest granule in [lo, hi] where a range starts, or UINTPTR_MAX.
 * hi - lo < PL_GM_SPAN: at most two leaves, a few words.  Every lookup of
 * an untracked pointer asks it (every copy from a small buffer, say), so
 * the usual case, one leaf and one or two words, is written out: the loop
 * below took 70 instructions for it. */
_Static_assert(PL_GM_SPAN <= 64, "a lookup's span fits two words of start bits");
static inline uintptr_t pl_last_start(uintptr_t lo, uintptr_t hi) {
  if ((lo >> PL_LEAF_BITS) == (hi >> PL_LEAF_BITS)) {
    pl_gslot *leaf = pl_leaf_find(hi);
    if (leaf == NULL) return UINTPTR_MAX;
    _Atomic uint64_t *bits = pl_leaf_bits(leaf);
    uintptr_t i = hi & PL_LEAF_MASK, j = lo & PL_LEAF_MASK, base = hi & ~PL_LEAF_MASK;
    uintptr_t wi = i >> 6, wj = j >> 6;
    uint64_t v = atomic_load_explicit(&bits[wi], memory_order_acquire);
    uintptr_t x = pl_top_bit(v, base | (wi << 6), wi == wj ? (unsigned)(j & 63) : 0, i & 63);
    if (x != UINTPTR_MAX || wi == wj) return x;
    v = atomic_load_explicit(&bits[wj], memory_order_acquire);
    return pl_top_bit(v, base | (wj << 6), (unsigned)(j & 63), 63);
  }
  for (uintptr_t x = hi;;) {
    pl_gslot *leaf = pl_leaf(x, false);
    uintptr_t leaf_lo = x & ~PL_LEAF_MASK, from = lo > leaf_lo ? lo : leaf_lo;
    if (leaf != NULL) {
      _Atomic uint64_t *bits = pl_leaf_bits(leaf);
      for (uintptr_t w = x & PL_LEAF_MASK;;) {
        uintptr_t word = w >> 6, base = (x & ~PL_LEAF_MASK) | (word << 6);
        uint64_t v = atomic_load_explicit(&bits[word], memory_order_acquire);
        /* keep bits base+0 .. w, and those >= from */
        unsigned top = (unsigned)(w & 63);
        v &= top == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (top + 1)) - 1);
        if (from > base) v &= ~(((uint64_t)1 << (from - base)) - 1);
        if (v) return base + 63 - (uintptr_t)__builtin_clzll(v);
        if (base <= from) break;
        w = (word << 6) - 1;
      }
    }
    if (leaf_lo <= lo || leaf_lo == 0) return UINTPTR_MAX;
    x = leaf_lo - 1;
  }
}

static bool pl_overlaps(const pl_range *r, uintptr_t b, size_t n) {
  uintptr_t rb = PL_RBASE(r);
  return rb < b + n && b < rb + PL_RSIZE(r);
}

/* The last granule node r is linked into. */
static uintptr_t pl_last_granule(const pl_range *r) {
  uintptr_t rb = PL_RBASE(r);
  return PL_RSPANS(r) ? (rb + PL_RSIZE(r) - 1) >> pl_shift : rb >> pl_shift;
}

/* Take node r out of every granule it occupies, once. */
static void pl_unlink(pl_range *r) {
  uintptr_t g0 = PL_RBASE(r) >> pl_shift, g1 = pl_last_granule(r);
  bool mine = false;
  /* The start bit goes first: a range being inserted at the same granule
   * can only get this memory after we are done, and sets its bit after. */
  pl_start_bit(g0, false);
  for (uintptr_t g = g0; g <= g1; g++) {
    pl_gslot *s = pl_gm_slot(g);
    for (int k = 0; s && k < 2; k++) {
      pl_range *exp = r;
      if (atomic_compare_exchange_strong(&s->s[k], &exp, NULL) && g == g0) mine = true;
    }
  }
  /* Only the thread that removed it from its first granule recycles it. */
  if (mine) pl_node_put(r);
}

pl_range *pl_granmap_insert(uintptr_t base, size_t size) {
  if (pl_top == NULL || size < ((size_t)1 << pl_shift)) return NULL;
  pl_range *r = pl_node_get();
  if (r == NULL) return NULL;
  __atomic_store_n(&r->base, base, __ATOMIC_RELAXED);
  __atomic_store_n(&r->size, size, __ATOMIC_RELAXED);
  uintptr_t g0 = base >> pl_shift, g1 = (base + size - 1) >> pl_shift;
  bool spans = g1 - g0 + 1 > PL_GM_SPAN;
  __atomic_store_n(&r->spans, (uint8_t)spans, __ATOMIC_RELAXED);
  if (!spans) g1 = g0;
  /* Whatever overlaps is stale (its memory was released by a path no hook
   * sees, such as glibc's internal free): forget it first.  Only two kinds
   * can overlap: one holding `base`, and ranges starting inside the new one
   * (found in its own granules).  Loads only, unless there is something to
   * forget. */
  pl_range *o = pl_granmap_find(base);
  if (o) pl_unlink(o);
  /* Ranges starting inside the new one, found by their start bits. */
  for (uintptr_t ge = (base + size - 1) >> pl_shift, g = ge; g > g0;) {
    uintptr_t lo = g - g0 > PL_GM_SPAN - 1 ? g - (PL_GM_SPAN - 1) : g0 + 1;
    uintptr_t x = pl_last_start(lo, g);
    if (x == UINTPTR_MAX) {
      g = lo - 1;
      continue;
    }
    pl_gslot *s = pl_gm_slot(x);
    for (int k = 0; s && k < 2; k++) {
      pl_range *cur = atomic_load_explicit(&s->s[k], memory_order_acquire);
      if (cur && pl_overlaps(cur, base, size)) pl_unlink(cur);
    }
    g = x - 1;
  }
  for (uintptr_t g = g0; g <= g1; g++) {
    pl_gslot *s = pl_slot(g, true);
    bool placed = false;
    for (int tries = 0; s && !placed && tries < 4; tries++) {
      /* Stale overlapping ranges go first, from both slots, so none can
       * survive beside the new one. */
      for (int k = 0; k < 2; k++) {
        pl_range *cur = atomic_load(&s->s[k]);
        if (cur != NULL && cur != r && pl_overlaps(cur, base, size)) pl_unlink(cur);
      }
      for (int k = 0; k < 2 && !placed; k++) {
        pl_range *cur = NULL;
        placed = atomic_compare_exchange_strong(&s->s[k], &cur, r);
      }
    }
    if (placed && g == g0) pl_start_bit(g0, true);
    if (!placed) {
      /* Cannot happen for ranges of at least a granule; undo and give up
       * rather than leave a half-linked node. */
      if (g > g0) pl_start_bit(g0, false);
      for (uintptr_t u = g0; u < g; u++) {
        pl_gslot *su = pl_slot(u, false);
        for (int k = 0; su && k < 2; k++) {
          pl_range *exp = r;
          atomic_compare_exchange_strong(&su->s[k], &exp, NULL);
        }
      }
      pl_node_put(r);
      return NULL;
    }
  }
  return r;
}

pl_range *pl_granmap_find(uintptr_t p) {
  if (pl_top == NULL) return NULL;
  uintptr_t g = p >> pl_shift;
  /* p's own granule holds any range covering p that starts there or spans
   * (long ranges are linked everywhere they reach)... */
  pl_gslot *s = pl_gm_slot(g);
  for (int i = 0; s && i < 2; i++) {
    pl_range *r = atomic_load_explicit(&s->s[i], memory_order_acquire);
    if (r == NULL) continue;
    uintptr_t rb = PL_RBASE(r);
    if (p >= rb && p - rb < PL_RSIZE(r)) return r;
  }
  /* ...else only a short range starting at most PL_GM_SPAN - 1 granules
   * back can: the nearest start before g decides, since tracked ranges are
   * disjoint (an earlier one holding p would hold that start too). */
  if (g == 0) return NULL;
  uintptr_t lo = g >= PL_GM_SPAN - 1 ? g - (PL_GM_SPAN - 1) : 0;
  uintptr_t x = pl_last_start(lo, g - 1);
  if (x == UINTPTR_MAX) return NULL;
  s = pl_gm_slot(x);
  for (int i = 0; s && i < 2; i++) {
    pl_range *r = atomic_load_explicit(&s->s[i], memory_order_acquire);
    if (r == NULL) continue;
    uintptr_t rb = PL_RBASE(r);
    if (p >= rb && p - rb < PL_RSIZE(r)) return r;
  }
  return NULL;
}

bool pl_granmap_erase(uintptr_t base) {
  pl_range *r = pl_granmap_find_base(base);
  if (r == NULL) return false;
  pl_unlink(r);
  return true;
}

void pl_granmap_erase_overlap(uintptr_t p, size_t n) {
  if (pl_top == NULL || n == 0) return;
  /* Short ranges sit only where they start: look that far back too. */
  uintptr_t g1 = (p + n - 1) >> pl_shift, g0 = p >> pl_shift;
  g0 = g0 >= PL_GM_SPAN - 1 ? g0 - (PL_GM_SPAN - 1) : 0;
  for (uintptr_t g = g0; g <= g1; g++) {
    pl_gslot *s = pl_gm_slot(g);
    if (s == NULL) {
      /* skip the rest of an unmapped leaf */
      g |= ((uintptr_t)1 << PL_LEAF_BITS) - 1;
      continue;
    }
    for (int k = 0; k < 2; k++) {
      pl_range *r = atomic_load(&s->s[k]);
      if (r && pl_overlaps(r, p, n)) pl_unlink(r);
    }
  }
}

/* Walk every mapped leaf: count the ranges (each once, at its first
 * granule) and check that each sits exactly in the granules it covers.  A
 * shared live counter would be simpler, and would be one more cache line
 * every allocating thread writes. */
static bool pl_walk(size_t *count) {
  size_t firsts = 0;
  bool ok = true;
  for (size_t hi = 0; pl_top && hi < pl_top_len; hi++) {
    pl_gslot *leaf = atomic_load(&pl_top[hi]);
    if (leaf == NULL) continue;
    for (size_t lo = 0; lo < ((size_t)1 << PL_LEAF_BITS); lo++) {
      uintptr_t g = (hi << PL_LEAF_BITS) | lo;
      pl_range *a = atomic_load(&leaf[lo].s[0]), *b = atomic_load(&leaf[lo].s[1]);
      for (int k = 0; k < 2; k++) {
        pl_range *r = k ? b : a;
        if (r == NULL) continue;
        uintptr_t r0 = r->base >> pl_shift, r1 = pl_last_granule(r);
        if (g < r0 || g > r1) ok = false; /* a node where it does not belong */
        if (r->spans != (((r->base + r->size - 1) >> pl_shift) - r0 + 1 > PL_GM_SPAN)) ok = false;
        if (g == r0) firsts++;
        /* and it must be in every other granule it covers */
        if (g == r0)
          for (uintptr_t u = r0 + 1; u <= r1; u++) {
            pl_gslot *su = pl_slot(u, false);
            if (su == NULL || (atomic_load(&su->s[0]) != r && atomic_load(&su->s[1]) != r))
              ok = false;
          }
      }
      if (a && b && (a == b || pl_overlaps(a, b->base, b->size))) ok = false;
      /* the start bit says exactly whether a range starts here */
      bool starts = (a && (a->base >> pl_shift) == g) || (b && (b->base >> pl_shift) == g);
      bool bit = (atomic_load(&pl_leaf_bits(leaf)[lo >> 6]) >> (lo & 63)) & 1;
      if (starts != bit) ok = false;
    }
  }
  *count = firsts;
  return ok;
}

size_t pl_granmap_count(void) {
  size_t n;
  (void)pl_walk(&n);
  return n;
}

bool pl_granmap_check(void) {
  size_t n;
  return pl_walk(&n);
}

void pl_granmap_atfork_child(void) { pthread_mutex_init(&pl_node_lock, NULL); }
