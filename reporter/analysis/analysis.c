/* analysis.c - from a loaded trace to the tables the writers print. */
#include "analysis.h"

#include <stdlib.h>
#include <string.h>

int plr_use_tools_from_env(void) {
  const char *v = getenv("PAGELOCK_NO_ADDR2LINE");
  return !(v && v[0] && strcmp(v, "0") != 0);
}

/* Names the allocation site to pin in the made-sync verdict's advice:
 * the site whose buffers cost the most made-synchronous host time. */
static void plr_name_alloc_site(plr_process *p) {
  const plr_row *r = plr_rows_worst_made_sync(&p->allocs);
  if (!r || !r->addr) return;
  /* A run whose mode already moves pageable copies needs no advice to
   * stage them. */
  int staging = p->t.have_process && (p->t.mode == PAGELOCK_MODE_STAGE ||
                                      p->t.mode == PAGELOCK_MODE_REGISTER ||
                                      p->t.mode == PAGELOCK_MODE_AUTO);
  char site[256];
  plr_site_format(r->frame, r->addr, site, sizeof site);
  for (size_t i = 0; i < p->gpu.nverdicts; i++) {
    plr_verdict *v = &p->gpu.verdicts[i];
    if (v->kind != PLR_VERDICT_MADE_SYNC) continue;
    /* Cut rather than overflow: a long C++ name still leaves the advice
     * readable. */
    snprintf(v->advice, sizeof v->advice, "pin the buffer allocated at %.200s "
             "(cudaHostAlloc / cudaHostRegister)%s", site,
             staging ? "" : " or run `pagelock run --mode=stage`");
  }
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
  plr_name_alloc_site(p);
  return 0;
}

void plr_process_free(plr_process *p) {
  plr_gpu_report_free(&p->gpu);
  plr_rows_free(&p->calls);
  plr_rows_free(&p->allocs);
  plr_sym_free(&p->sym);
  plr_trace_free(&p->t);
}

