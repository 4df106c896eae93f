/* callsite.c - call-site choice and the per-site tables. */
#include "callsite.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"

/* 1 when s starts with p. */
static int plr_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

int plr_skip_module(const char *base, plr_site_kind kind) {
  /* libtorch frames stay: they are the code users recognise. */
  static const char *const cuda[] = {"libpagelock", "libcudart", "libcuda.", "libcupti"};
  static const char *const alloc[] = {"libc.so",     "libc-",       "libstdc++",   "libc++",
                                      "libjemalloc", "libtcmalloc", "libmimalloc", "ld-linux"};
  for (size_t i = 0; i < sizeof cuda / sizeof cuda[0]; i++)
    if (plr_prefix(base, cuda[i])) return 1;
  if (kind == PLR_SITE_ALLOC)
    for (size_t i = 0; i < sizeof alloc / sizeof alloc[0]; i++)
      if (plr_prefix(base, alloc[i])) return 1;
  return 0;
}

/* The identifier a mangled name of file scope or of a plain function
 * starts with (_ZL24__sti____cudaRegisterAllv: __sti____cudaRegisterAllv),
 * or name itself. */
static const char *plr_unmangled_head(const char *name) {
  const char *s = name;
  if (strncmp(s, "_Z", 2) != 0) return name;
  s += 2;
  if (*s == 'L') s++;
  if (!isdigit((unsigned char)*s)) return name;
  while (isdigit((unsigned char)*s)) s++;
  return s;
}

int plr_skip_function(const char *name, plr_site_kind kind) {
  /* A static runtime (a default nvcc build) lives inside the program.
   * Every function libcudart_static.a defines is an API entry point
   * (cuda*, __cuda*) or an internal one named libcudart_static_ and a
   * hash (CUDA 12 and 13: nothing else in its symbol table); nvcc adds
   * registration code and launch stubs to the program's own files. */
  static const char *const rt[] = {
      "cuda",     "__cuda",        "libcudart_static_", "_ZN6cudart",
      "cudart::", "__sti____cuda", "__device_stub_",    "__nv_cudaEntityRegisterCallback"};
  const char *head = plr_unmangled_head(name);
  for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++)
    if (plr_prefix(name, rt[i]) || plr_prefix(head, rt[i])) return 1;
  if (name[0] == 'c' && name[1] == 'u' && isupper((unsigned char)name[2])) return 1;
  if (kind == PLR_SITE_ALLOC) {
    /* Allocator entry points, matched by exact name or by internal
     * prefix: static allocators also live in the main program. */
    static const char *const exact[] = {"malloc",        "calloc",   "realloc", "posix_memalign",
                                        "aligned_alloc", "memalign", "valloc",  "pvalloc",
                                        "mmap",          "mmap64"};
    static const char *const prefix[] = {"__libc_", "_int_",        "__GI_", "_Znw",
                                         "_Zna",    "operator new", "je_",   "tc_"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
      if (strcmp(name, exact[i]) == 0) return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
      if (plr_prefix(name, prefix[i])) return 1;
  }
  return 0;
}

/* The frames a raw site stands for, innermost first. */
static size_t plr_site_frames(const plr_trace *t, const plr_site *s, plr_site_kind kind,
                              uint64_t *out) {
  const plr_stack *st = s->key.stack_id ? plr_trace_stack(t, s->key.stack_id) : NULL;
  if (st && st->depth) {
    memcpy(out, st->frames, st->depth * sizeof *out);
    return st->depth;
  }
  if (kind == PLR_SITE_CALL && s->key.callsite) {
    out[0] = s->key.callsite;
    return 1;
  }
  return 0;
}

/* The raw site table of one kind. */
static plr_site *plr_table(const plr_trace *t, plr_site_kind kind) {
  return kind == PLR_SITE_CALL ? t->sites : t->alloc_sites;
}

int plr_sites_want(const plr_trace *t, plr_symbolizer *sym) {
  for (int kind = PLR_SITE_CALL; kind <= PLR_SITE_ALLOC; kind++) {
    const plr_site *s, *tmp;
    HASH_ITER(hh, plr_table(t, (plr_site_kind)kind), s, tmp) {
      uint64_t fr[PAGELOCK_MAX_FRAMES];
      size_t n = plr_site_frames(t, s, (plr_site_kind)kind, fr);
      for (size_t i = 0; i < n; i++)
        if (fr[i] && plr_sym_want(sym, fr[i])) return -1;
      if (kind == PLR_SITE_CALL && s->key.callsite && plr_sym_want(sym, s->key.callsite)) return -1;
    }
  }
  return 0;
}

/* Picks the frame to show for one raw site: the innermost frame that is
 * neither CUDA/pagelock plumbing by module nor by function name. */
static uint64_t plr_choose(const plr_trace *t, const plr_symbolizer *sym, const plr_site *s,
                           plr_site_kind kind) {
  uint64_t fr[PAGELOCK_MAX_FRAMES];
  size_t n = plr_site_frames(t, s, kind, fr);
  for (size_t i = 0; i < n; i++) {
    if (!fr[i]) continue;
    const plr_frame *f = plr_sym_get(sym, fr[i]);
    if (f && f->module && plr_skip_module(f->module, kind)) continue;
    if (f && f->func && plr_skip_function(f->func, kind)) continue;
    return fr[i];
  }
  /* Everything looked like plumbing (a deep CUDA stack cut at
   * PAGELOCK_MAX_FRAMES): the hooked call's return address is still the
   * most specific thing we know. */
  if (kind == PLR_SITE_CALL && s->key.callsite) return s->key.callsite;
  return n ? fr[0] : 0;
}

/* Adds the GPU sums of b into a (device: the common one, or -2). */
static void plr_site_gpu_merge(plr_site_gpu *a, const plr_site_gpu *b) {
  if (!b->calls) return;
  if (!a->calls)
    a->device = b->device;
  else if (a->device != b->device)
    a->device = -2;
  a->calls += b->calls;
  a->gpu_ns += b->gpu_ns;
  a->made_sync += b->made_sync;
  a->made_sync_host_ns += b->made_sync_host_ns;
  a->chunks += b->chunks;
  a->chunk_bytes += b->chunk_bytes;
  a->chunk_gpu_ns += b->chunk_gpu_ns;
  a->reg_ops += b->reg_ops;
  a->reg_bytes += b->reg_bytes;
  a->reg_gpu_ns += b->reg_gpu_ns;
}

/* The interned innermost Python line of a row, NULL none. */
static const plr_pyloc *plr_row_line(const plr_row *r) { return r->py ? r->py->f[0] : NULL; }

/* The interned library line that made a row's calls, NULL none. */
static const plr_pyloc *plr_row_lib(const plr_row *r) { return r->py ? r->py->lib : NULL; }

/* qsort order of rows by Python line, library line, then chosen frame
 * address, for merging. */
static int plr_cmp_addr(const void *a, const void *b) {
  const plr_row *x = a, *y = b;
  uintptr_t lx = (uintptr_t)plr_row_line(x), ly = (uintptr_t)plr_row_line(y);
  if (lx != ly) return lx < ly ? -1 : 1;
  lx = (uintptr_t)plr_row_lib(x), ly = (uintptr_t)plr_row_lib(y);
  if (lx != ly) return lx < ly ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* qsort order of rows: most host time first, then a total order so equal
 * rows print the same way every run. */
static int plr_cmp_worst(const void *a, const void *b) {
  const plr_row *x = a, *y = b;
  if (x->b.host_ns != y->b.host_ns) return x->b.host_ns > y->b.host_ns ? -1 : 1;
  if (x->b.bytes != y->b.bytes) return x->b.bytes > y->b.bytes ? -1 : 1;
  if (x->b.count != y->b.count) return x->b.count > y->b.count ? -1 : 1;
  return plr_cmp_addr(a, b);
}

/* A row and the host time of every row sharing its Python line. */
typedef struct plr_grow {
  plr_row r;
  uint64_t group_ns;
} plr_grow;

/* Groups worst first, a group's rows together and worst first; a row with
 * no Python line is a group of its own, so a trace without Python sorts
 * exactly as plr_cmp_worst. */
static int plr_cmp_group(const void *a, const void *b) {
  const plr_grow *x = a, *y = b;
  if (x->group_ns != y->group_ns) return x->group_ns > y->group_ns ? -1 : 1;
  const plr_pyloc *lx = plr_row_line(&x->r), *ly = plr_row_line(&y->r);
  /* Equal totals: keep each group whole, Python lines first. */
  if (!lx != !ly) return lx ? -1 : 1;
  if (lx && lx != ly) {
    int c = strcmp(lx->file, ly->file);
    if (c) return c;
    if (lx->line != ly->line) return lx->line < ly->line ? -1 : 1;
    return strcmp(lx->func, ly->func);
  }
  return plr_cmp_worst(&x->r, &y->r);
}

/* Sorts v[0..m) worst group first (plr_cmp_group). */
static int plr_sort_groups(plr_row *v, size_t m) {
  plr_grow *g = calloc(m ? m : 1, sizeof *g);
  if (!g) return -1;
  for (size_t i = 0; i < m; i++) {
    g[i].r = v[i];
    g[i].group_ns = v[i].b.host_ns;
  }
  /* v is in plr_cmp_addr order: a line's rows are adjacent. */
  for (size_t i = 0; i < m;) {
    size_t j = i + 1;
    uint64_t sum = v[i].b.host_ns;
    if (plr_row_line(&v[i])) {
      while (j < m && plr_row_line(&v[j]) == plr_row_line(&v[i])) sum += v[j++].b.host_ns;
      for (size_t k = i; k < j; k++) g[k].group_ns = sum;
    }
    i = j;
  }
  qsort(g, m, sizeof *g, plr_cmp_group);
  for (size_t i = 0; i < m; i++) v[i] = g[i].r;
  free(g);
  return 0;
}

int plr_sites_build(const plr_trace *t, const plr_symbolizer *sym, plr_site_kind kind,
                    plr_rows *out) {
  out->v = NULL;
  out->n = 0;
  plr_site *table = plr_table(t, kind);
  size_t n = HASH_COUNT(table);
  if (!n) return 0;
  plr_row *v = calloc(n, sizeof *v);
  if (!v) return -1;
  size_t i = 0;
  const plr_site *s, *tmp;
  HASH_ITER(hh, table, s, tmp) {
    v[i].b = s->b;
    v[i].dirs = s->dirs;
    memcpy(v[i].bydir, s->bydir, sizeof v[i].bydir);
    memcpy(v[i].routes, s->routes, sizeof v[i].routes);
    v[i].shared = s->shared;
    v[i].big = s->big;
    v[i].tracked = s->tracked;
    v[i].fresh = s->fresh;
    v[i].g = s->g;
    v[i].device = s->device;
    v[i].would_save_ns = -1;
    v[i].addr = plr_choose(t, sym, s, kind);
    v[i].py = plr_py_site(t, s->key.stack_id);
    i++;
  }
  /* Different stacks often share the frame the user sees (one line called
   * from several places): merge them. */
  qsort(v, n, sizeof *v, plr_cmp_addr);
  size_t m = 0;
  for (i = 0; i < n; i++) {
    if (m && v[m - 1].addr == v[i].addr && plr_row_line(&v[m - 1]) == plr_row_line(&v[i]) &&
        plr_row_lib(&v[m - 1]) == plr_row_lib(&v[i])) {
      plr_row *r = &v[m - 1];
      plr_bucket_add(&r->b, &v[i].b);
      r->dirs |= v[i].dirs;
      for (int c = 0; c < PLR_NCDIR; c++) plr_bucket_add(&r->bydir[c], &v[i].bydir[c]);
      for (int c = 0; c < PLR_NROUTE; c++) plr_bucket_add(&r->routes[c], &v[i].routes[c]);
      plr_bucket_add(&r->shared, &v[i].shared);
      plr_bucket_add(&r->big, &v[i].big);
      plr_bucket_add(&r->tracked, &v[i].tracked);
      r->fresh += v[i].fresh;
      plr_site_gpu_merge(&r->g, &v[i].g);
      plr_device_fold(&r->device, v[i].device);
    } else {
      v[m++] = v[i];
    }
  }
  for (i = 0; i < m; i++) v[i].frame = v[i].addr ? plr_sym_get(sym, v[i].addr) : NULL;
  if (plr_sort_groups(v, m)) {
    free(v);
    return -1;
  }
  out->v = v;
  out->n = m;
  return 0;
}

int32_t plr_row_device(const plr_row *r) {
  if (r->device != -1) return r->device;
  return r->g.calls ? r->g.device : -1;
}

void plr_rows_apply_gpu(plr_rows *rows, const plr_gpu_report *g) {
  for (size_t i = 0; i < rows->n; i++) {
    plr_row *r = &rows->v[i];
    const double *bw = g->pinned_gbps;
    /* The site's own device when all its copies ran on one: as their COPY
     * records name it, else as their joined GPU ops do (traces before the
     * shim filled it in).  g->dev is sorted by ordinal. */
    int32_t dev = plr_row_device(r);
    if (dev >= 0) {
      size_t lo = 0, hi = g->ndev;
      while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->dev[mid].device < (uint32_t)dev)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < g->ndev && g->dev[lo].device == (uint32_t)dev) bw = g->dev[lo].pinned_gbps;
    }
    int64_t save = 0;
    int known = 0;
    for (unsigned c = 0; c < PLR_NCDIR && save >= 0; c++) {
      const plr_bucket *b = &r->bydir[c];
      if (!b->count) continue;
      if (c == PLR_CDIR_OTHER || bw[c] <= 0) {
        save = -1;
        break;
      }
      double pinned_ns = (double)b->bytes / bw[c];
      if ((double)b->host_ns > pinned_ns)
        save += (int64_t)((double)b->host_ns - pinned_ns < 3e18
                              ? (double)b->host_ns - pinned_ns
                              : 3e18); /* corrupt host_ns: cap so 3 dirs fit int64 */
      known = 1;
    }
    r->would_save_ns = known ? save : -1;
  }
}

void plr_rows_free(plr_rows *r) {
  free(r->v);
  r->v = NULL;
  r->n = 0;
}

void plr_site_format(const plr_frame *f, uint64_t addr, char *buf, size_t len) {
  if (!addr) {
    snprintf(buf, len, "(unknown call site)");
    return;
  }
  if (!f || (!f->func && !f->module)) {
    snprintf(buf, len, "0x%llx", (unsigned long long)addr);
    return;
  }
  int k;
  unsigned long long modoff = f->mod ? (unsigned long long)(addr - f->mod->base) : 0;
  if (f->func && f->have_func_off)
    k = snprintf(buf, len, "%s+0x%llx (%s)", f->func, (unsigned long long)f->func_off,
                 f->module ? f->module : "?");
  else if (f->func && f->module)
    k = snprintf(buf, len, "%s (%s+0x%llx)", f->func, f->module, modoff);
  else if (f->func)
    k = snprintf(buf, len, "%s", f->func);
  else
    k = snprintf(buf, len, "%s+0x%llx", f->module, modoff);
  if (k < 0 || (size_t)k >= len || !f->file) return;
  if (f->line)
    snprintf(buf + k, len - (size_t)k, " %s:%u", plr_basename(f->file), f->line);
  else
    snprintf(buf + k, len - (size_t)k, " %s", plr_basename(f->file));
}

void plr_row_site_format(const plr_row *r, char *buf, size_t len) {
  if (!r->py) {
    plr_site_format(r->frame, r->addr, buf, len);
    return;
  }
  char py[512], lib[512] = "", native[512];
  plr_pyloc_format(r->py->f[0], py, sizeof py);
  if (r->py->lib) plr_pyloc_format_lib(r->py->lib, lib, sizeof lib);
  plr_site_format(r->frame, r->addr, native, sizeof native);
  snprintf(buf, len, "%s (%s%s%snative: %s)", py, lib[0] ? "via " : "", lib, lib[0] ? "; " : "",
           native);
}
