/* analysis.c - from a loaded trace to the tables the writers print. */
#include "analysis.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"

int plr_use_tools_from_env(void) {
  const char *v = getenv("PAGELOCK_NO_ADDR2LINE");
  return !(v && v[0] && strcmp(v, "0") != 0);
}

/* 1 when s (may be NULL) contains w. */
static int plr_has(const char *s, const char *w) { return s && strstr(s, w); }

int plr_row_framework(const plr_row *r) {
  const plr_frame *f = r ? r->frame : NULL;
  if (!f) return PLR_FW_NONE;
  const char *path = f->mod ? f->mod->path : NULL;
  /* libtorch_cpu/libtorch_cuda and libc10 hold PyTorch's allocators
   * (c10::alloc_cpu) and copy kernels; CuPy and Numba ship as Python
   * packages whose extension modules carry their names. */
  if (plr_has(f->module, "libtorch") || plr_has(f->module, "libc10") || plr_has(path, "/torch/") ||
      plr_has(f->func, "c10::") || plr_has(f->func, "at::"))
    return PLR_FW_TORCH;
  if (plr_has(f->module, "cupy") || plr_has(path, "/cupy") || plr_has(f->func, "cupy"))
    return PLR_FW_CUPY;
  if (plr_has(f->module, "numba") || plr_has(path, "/numba/") || plr_has(f->func, "numba"))
    return PLR_FW_NUMBA;
  return PLR_FW_NONE;
}

const char *plr_process_pin_words(const plr_process *p) {
  int fw = p->allocs.n ? plr_row_framework(&p->allocs.v[0]) : PLR_FW_NONE;
  if (fw == PLR_FW_NONE && p->calls.n) fw = plr_row_framework(&p->calls.v[0]);
  switch (fw) {
    case PLR_FW_TORCH:
      return "pin them with PyTorch (DataLoader(pin_memory=True) for batches, "
             "tensor.pin_memory() for tensors that live long)";
    case PLR_FW_CUPY: return "allocate them with cupyx.empty_pinned";
    case PLR_FW_NUMBA: return "allocate them with numba.cuda.pinned_array";
    default: return "allocate these buffers with cudaHostAlloc/cudaMallocHost";
  }
}

/* Part of x proportional to part / whole. */
static uint64_t plr_share(uint64_t x, uint64_t part, uint64_t whole) {
  if (!whole || part >= whole) return x;
  return (uint64_t)((double)x * (double)part / (double)whole);
}

/* A site for a sentence: at most PLR_SITE_SHORT characters.  Too long, it
 * loses its native frame ("LINE (via LIB; native: ...)" becomes "LINE (via
 * LIB)"), else it is cut between words with "...": a C++ name cut in the
 * middle read "(libc10.s is PyTorch's". */
#define PLR_SITE_SHORT 160
void plr_site_shorten(char *site) {
  size_t n = strlen(site);
  if (n <= PLR_SITE_SHORT) return;
  char *native = strstr(site, "; native: ");
  if (native && (size_t)(native - site) + 1 <= PLR_SITE_SHORT) {
    strcpy(native, ")");
    return;
  }
  size_t cut = PLR_SITE_SHORT - 3;
  while (cut > PLR_SITE_SHORT / 2 && site[cut] != ' ') cut--;
  strcpy(site + cut, "...");
}

/* Buffers of one allocation site, each copied about once, that make it a
 * site that allocates per step (plr_site_advice). */
#define PLR_FRESH_MIN 4

void plr_site_advice(const plr_process *p, const plr_row *alloc, const plr_row *call, char *buf,
                     size_t len) {
  const plr_trace *t = &p->t;
  const plr_row *r = alloc && alloc->addr ? alloc : call;
  char site[256] = "";
  /* The Python line when the stack has one (pysite.c), else the native site. */
  if (r && r->addr) plr_row_site_format(r, site, sizeof site);
  plr_site_shorten(site);
  int fw = plr_row_framework(alloc && alloc->addr ? alloc : NULL);
  if (fw == PLR_FW_NONE) fw = plr_row_framework(call);
  /* Shared memory: copies the shim saw from a shared mapping (register,
   * auto), or PyTorch's MapAllocator, which maps the shared-memory file a
   * DataLoader worker filled (any mode). */
  int shared = r && (r->shared.count || (r->frame && plr_has(r->frame->func, "MapAllocator")));
  const char *at = alloc && alloc->addr ? "allocated at" : "copied at";
  int k;
  /* A buffer allocated anew for every step, each copied once: pinning it
   * where it is allocated would pin every step's buffer, and no mode can
   * register what is copied only once. */
  if (alloc && alloc->addr && alloc->fresh >= PLR_FRESH_MIN &&
      alloc->fresh * 10 >= alloc->b.count * 9) {
    static const char *const one[] = {
        [PLR_FW_TORCH] = "torch.empty(..., pin_memory=True), filled with copy_()",
        [PLR_FW_CUPY] = "cupyx.empty_pinned",
        [PLR_FW_NUMBA] = "numba.cuda.pinned_array"};
    const char *how =
        fw > 0 && fw < (int)(sizeof one / sizeof one[0]) && one[fw] ? one[fw] : "cudaHostAlloc";
    snprintf(buf, len,
             "%" PRIu64
             " buffers allocated at %.160s were each copied once: allocate one pinned "
             "buffer (%s) and reuse it; --mode=auto stages such copies, and registers none: a "
             "buffer copied once is never worth it",
             alloc->fresh, site, how);
    return;
  }
  /* Cut rather than overflow: a long C++ name still leaves the advice
   * readable. */
  switch (fw) {
    case PLR_FW_TORCH:
      k = shared ? snprintf(buf, len,
                            "the buffer %s %.160s is a batch from "
                            "DataLoader workers (shared memory): pass "
                            "pin_memory=True to the DataLoader",
                            at, site)
                 : snprintf(buf, len,
                            "the tensor %s %.160s is PyTorch's: call "
                            "tensor.pin_memory() once if it lives long, or pass "
                            "pin_memory=True to the DataLoader that makes it",
                            at, site);
      break;
    case PLR_FW_CUPY:
      k = snprintf(buf, len,
                   "allocate the array %s %.160s with "
                   "cupyx.empty_pinned (CuPy's pinned host memory)",
                   at, site);
      break;
    case PLR_FW_NUMBA:
      k = snprintf(buf, len,
                   "allocate the array %s %.160s with "
                   "numba.cuda.pinned_array",
                   at, site);
      break;
    default:
      k = snprintf(buf, len,
                   "pin the buffer %s %.160s (cudaHostAlloc / "
                   "cudaHostRegister)",
                   at, site);
      break;
  }
  if (k < 0 || (size_t)k >= len || !r) return;
  /* What --mode=auto does with this site, and the time at stake: the
   * row's time above pinned, for the copies auto moves. */
  char ms[32];
  uint64_t left = r->would_save_ns > 0 ? (uint64_t)r->would_save_ns : 0;
  uint32_t mode = t->have_process ? t->mode : PAGELOCK_MODE_OBSERVE;
  if (mode == PAGELOCK_MODE_AUTO || mode == PAGELOCK_MODE_REGISTER) {
    plr_fmt_ms(left, ms, sizeof ms);
    snprintf(buf + k, len - (size_t)k,
             "; --mode=%s registered %" PRIu64 " and staged %" PRIu64 " of its %" PRIu64
             " copies, %s ms left "
             "against pinned",
             mode == PAGELOCK_MODE_AUTO ? "auto" : "register", r->routes[PLR_ROUTE_REGISTER].count,
             r->routes[PLR_ROUTE_STAGE].count, r->b.count, ms);
    return;
  }
  if (!r->big.count) {
    snprintf(buf + k, len - (size_t)k,
             "; --mode=auto would pass its copies "
             "through (all below PAGELOCK_STAGE_MIN, 1 MiB) and save nothing");
    return;
  }
  /* The time at stake only where the trace measured it (a pinned copy of
   * the same kind to compare with). */
  char save[64] = "";
  if (r->would_save_ns > 0) {
    plr_fmt_ms(plr_share(left, r->big.host_ns, r->b.host_ns), ms, sizeof ms);
    snprintf(save, sizeof save, ": up to %s ms less %s", ms,
             mode == PAGELOCK_MODE_STAGE ? "left" : "blocked");
  }
  /* Untracked: pagelock saw no allocation of these copies' buffers (a
   * call row's copies carry none), so no mode registers them; a buffer
   * whose site is merely unnamed was tracked and can be. */
  int untracked = !(alloc && alloc->addr) && !(call && call->tracked.count);
  if (shared || untracked)
    snprintf(buf + k, len - (size_t)k,
             "; --mode=auto would stage its "
             "copies of 1 MiB or more through pinned chunks (%s memory is "
             "never registered)%s",
             shared ? "shared" : "untracked", save);
  else
    snprintf(buf + k, len - (size_t)k,
             "; --mode=auto would register the "
             "buffer once it is copied often enough (PAGELOCK_REGISTER_HOT) "
             "and copy it at pinned speed%s",
             save);
}

/* Host time of a row's copies that took the driver's pageable path. */
static uint64_t plr_row_pass_ns(const plr_row *r) { return r->routes[PLR_ROUTE_PASS].host_ns; }

/* The rows of rs with pageable-path host time, most first, into v (at
 * most cap); returns how many, with all of them counted in *nall and
 * their time in *all. */
static size_t plr_rows_by_pass(const plr_rows *rs, const plr_row **v, size_t cap, uint64_t *all,
                               size_t *nall) {
  *all = 0;
  *nall = 0;
  for (size_t i = 0; i < rs->n; i++)
    if (plr_row_pass_ns(&rs->v[i]) && rs->v[i].addr) {
      *all += plr_row_pass_ns(&rs->v[i]);
      (*nall)++;
    }
  size_t n = 0;
  while (n < cap) {
    const plr_row *best = NULL;
    for (size_t i = 0; i < rs->n; i++) {
      const plr_row *r = &rs->v[i];
      int taken = 0;
      for (size_t k = 0; k < n; k++) taken |= v[k] == r;
      if (taken || !plr_row_pass_ns(r) || !r->addr) continue;
      if (!best || plr_row_pass_ns(r) > plr_row_pass_ns(best)) best = r;
    }
    if (!best) break;
    v[n++] = best;
  }
  return n;
}

/* The fix of the first pageable-copy verdict: the worst allocation site in its
 * framework's words, with what --mode=auto does or would do about it, then
 * every other site with at least a tenth of the pageable copies' host time
 * (the rest counted), so that the line names every buffer that matters.
 * Call sites stand in when no allocation site is known. */
static void plr_name_alloc_sites(plr_process *p) {
  enum { PLR_FIX_SITES = 4 };
  const plr_row *v[PLR_FIX_SITES];
  uint64_t all;
  size_t nall;
  int alloc = 1;
  size_t n = plr_rows_by_pass(&p->allocs, v, PLR_FIX_SITES, &all, &nall);
  if (!n) {
    alloc = 0;
    n = plr_rows_by_pass(&p->calls, v, PLR_FIX_SITES, &all, &nall);
  }
  if (!n) return;
  char advice[sizeof p->gpu.pageable[0].advice];
  plr_site_advice(p, alloc ? v[0] : NULL, alloc ? NULL : v[0], advice, sizeof advice);
  size_t len = strlen(advice), shown = 1;
  uint64_t rest = all - plr_row_pass_ns(v[0]);
  for (size_t i = 1; i < n && plr_row_pass_ns(v[i]) * 10 >= all; i++) {
    char site[256], ms[32];
    plr_row_site_format(v[i], site, sizeof site);
    plr_site_shorten(site);
    plr_fmt_ms(plr_row_pass_ns(v[i]), ms, sizeof ms);
    int k = snprintf(advice + len, sizeof advice - len, "; also the buffers %s %.160s (%s ms)",
                     alloc ? "allocated at" : "copied at", site, ms);
    if (k < 0 || (size_t)k >= sizeof advice - len) {
      advice[len] = 0;
      break;
    }
    len += (size_t)k;
    rest -= plr_row_pass_ns(v[i]);
    shown++;
  }
  if (nall > shown && len < sizeof advice) {
    char ms[32];
    plr_fmt_ms(rest, ms, sizeof ms);
    snprintf(advice + len, sizeof advice - len, "; and %zu more %s sites (%s ms)", nall - shown,
             alloc ? "allocation" : "call", ms);
  }
  /* One fix for the pageable copies, under the first verdict; the other
   * keeps its own words rather than repeat the sites. */
  if (p->gpu.npageable) memcpy(p->gpu.pageable[0].advice, advice, sizeof advice);
}

int plr_process_analyze(plr_process *p, int use_tools) {
  plr_sym_init(&p->sym, &p->t, use_tools);
  p->calls.v = p->allocs.v = NULL;
  p->calls.n = p->allocs.n = 0;
  memset(&p->gpu, 0, sizeof p->gpu);
  if (plr_sites_want(&p->t, &p->sym)) return -1;
  plr_sym_resolve(&p->sym);
  if (plr_sites_build(&p->t, &p->sym, PLR_SITE_CALL, &p->calls)) return -1;
  if (plr_sites_build(&p->t, &p->sym, PLR_SITE_ALLOC, &p->allocs)) return -1;
  if (plr_gpu_analyze(&p->t, p->gap_threshold_ns, &p->gpu)) return -1;
  plr_rows_apply_gpu(&p->calls, &p->gpu);
  plr_rows_apply_gpu(&p->allocs, &p->gpu);
  plr_name_alloc_sites(p);
  return 0;
}

void plr_process_free(plr_process *p) {
  plr_gpu_report_free(&p->gpu);
  plr_rows_free(&p->calls);
  plr_rows_free(&p->allocs);
  plr_sym_free(&p->sym);
  plr_trace_free(&p->t);
}
