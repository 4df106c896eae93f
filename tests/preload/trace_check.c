/* trace_check.c - assert what a trace contains, for the preload tests.
 *
 * usage: trace_check FILE [--pageable N] [--pageable-bytes B] [--pinned N]
 *                         [--copies N] [--bytes B] (copies of any kind)
 *                         [--graph-nodes N] (graph memcpy node records)
 *                         [--pinned-bytes B] [--simulated 0|1] [--complete]
 *                         [--api-min NAME=N]...
 * Counts COPY records by host memory kind and compares; prints every
 * mismatch and exits 1 if any.  Uses the reporter's reader, so the trace is
 * checked by the same code users run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

static const char *const api_names[] = {
#define N(n) #n,
    PAGELOCK_API_LIST(N)
#undef N
};

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: trace_check FILE [expectations]\n"); return 2; }
  plr_reader r;
  plr_open_status st = plr_open(&r, argv[1]);
  if (st != PLR_OPEN_OK) {
    char msg[512];
    plr_open_strerror(&r, st, argv[1], msg, sizeof msg);
    fprintf(stderr, "trace_check: %s\n", msg);
    return 1;
  }
  unsigned long n[8] = {0}, bytes[8] = {0}, api[PAGELOCK_API_COUNT] = {0}, failed = 0, stacks = 0;
  unsigned long pageable_no_stack = 0, total = 0, total_bytes = 0, graph_nodes = 0;
  plr_record rec;
  while (plr_next(&r, &rec)) {
    if (rec.type == PAGELOCK_REC_STACK) stacks++;
    if (rec.type != PAGELOCK_REC_COPY) continue;
    const pagelock_rec_copy *c = rec.u.copy;
    if (c->flags & PAGELOCK_COPY_GRAPH_NODE) { /* a definition, not a copy */
      graph_nodes++;
      continue;
    }
    if (c->host_mem < 8) { n[c->host_mem]++; bytes[c->host_mem] += c->bytes; }
    total++;
    total_bytes += c->bytes;
    if (c->api < PAGELOCK_API_COUNT) api[c->api]++;
    if (c->result != 0) failed++;
    if (c->host_mem == PAGELOCK_MEM_PAGEABLE && c->stack_id == 0) pageable_no_stack++;
  }
  int bad = 0;
#define EXPECT(name, got, want)                                                              \
  do {                                                                                       \
    if ((unsigned long)(got) != (unsigned long)(want)) {                                     \
      fprintf(stderr, "trace_check: %s: %s is %lu, expected %lu\n", argv[1], name,           \
              (unsigned long)(got), (unsigned long)(want));                                  \
      bad = 1;                                                                               \
    }                                                                                        \
  } while (0)
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--pageable")) { EXPECT("pageable copies", n[PAGELOCK_MEM_PAGEABLE], strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--pageable-bytes")) { EXPECT("pageable bytes", bytes[PAGELOCK_MEM_PAGEABLE], strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--pinned")) { EXPECT("pinned copies", n[PAGELOCK_MEM_PINNED], strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--pinned-bytes")) { EXPECT("pinned bytes", bytes[PAGELOCK_MEM_PINNED], strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--copies")) { EXPECT("copies (any host memory)", total, strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--bytes")) { EXPECT("bytes (any host memory)", total_bytes, strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--graph-nodes")) { EXPECT("graph memcpy nodes", graph_nodes, strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--failed")) { EXPECT("failed copies", failed, strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--simulated")) { EXPECT("simulated flag", (r.hdr.flags & PAGELOCK_FILE_SIMULATED) != 0, strtoul(v, 0, 10)); i++; }
    else if (!strcmp(a, "--complete")) EXPECT("clean END record", r.stop == PLR_STOP_END, 1);
    else if (!strcmp(a, "--stacks")) {
      EXPECT("pageable copies without a stack", pageable_no_stack, 0);
      if (stacks == 0) { fprintf(stderr, "trace_check: %s: no STACK records\n", argv[1]); bad = 1; }
    } else if (!strcmp(a, "--api-min")) {
      char name[128];
      snprintf(name, sizeof name, "%s", v);
      char *eq = strchr(name, '=');
      unsigned long want = eq ? strtoul(eq + 1, 0, 10) : 1;
      if (eq) *eq = 0;
      int found = -1;
      for (int k = 0; k < PAGELOCK_API_COUNT; k++) if (!strcmp(api_names[k], name)) found = k;
      if (found < 0) { fprintf(stderr, "trace_check: unknown api %s\n", name); bad = 1; }
      else if (api[found] < want) {
        fprintf(stderr, "trace_check: %s: %s seen %lu times, expected at least %lu\n", argv[1], name, api[found], want);
        bad = 1;
      }
      i++;
    } else { fprintf(stderr, "trace_check: unknown option %s\n", a); bad = 1; }
  }
  printf("trace_check: %s: pageable=%lu (%lu B) pinned=%lu (%lu B) device=%lu unknown=%lu failed=%lu\n", argv[1],
         n[PAGELOCK_MEM_PAGEABLE], bytes[PAGELOCK_MEM_PAGEABLE], n[PAGELOCK_MEM_PINNED], bytes[PAGELOCK_MEM_PINNED],
         n[PAGELOCK_MEM_DEVICE], n[PAGELOCK_MEM_UNKNOWN], failed);
  plr_close(&r);
  return bad;
}
