/* repeats_check.c - a trace against the tally tests/preload/repeats.c wrote.
 *
 * usage: repeats_check TRACE EXPECT [--partial] [--no-tids] [--min-runs N] [--max-runs N]
 *        repeats_check --same TRACE1 TRACE2
 *
 * Reads the trace's records as written (not through the reader, which
 * repairs a COPY record's count and timed) and checks:
 *  - every COPY record's count is 1 to 64 and timed at most count;
 *  - every record starts no earlier than the program's first copy (t0)
 *    and no later than its last (t1), give or take SLACK_NS;
 *  - every record names a thread that made copies in this process (not
 *    with --no-tids);
 *  - the copies, each record counted as its count copies, add up exactly
 *    to the program's tally by direction, host memory kind, device,
 *    success and bytes per copy (a failed copy: direction and bytes);
 *  - the trace ends in END (not with --partial);
 *  - at least / at most N records hold more than one copy.
 * With --same: the two traces hold the same copies, every field alike but
 * times, correlations, thread ids, stack ids and heap addresses (a record
 * counted as its count copies): a program run twice the same way (under
 * setarch -R), with runs merged and each copy on its own.
 * Prints one summary line; every mismatch on stderr; exit 1 on any. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagelock/trace_format.h"

#define SLACK_NS 20000

static const char *const dir_names[] = {"unknown", "H2D", "D2H", "D2D", "H2H", "peer"};
static const char *const mem_names[] = {"unknown", "pageable", "pinned", "registered",
                                        "managed", "device",   "array"};

typedef struct want {
  int dir, mem, dev, ok; /* mem, dev: -1 any */
  uint64_t bytes, n, got;
} want;

static int name_index(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], s)) return i;
  return -2;
}

/* --same A B: every field of every copy but its times, ids and thread,
 * a record standing for count copies. */
typedef struct fields {
  uint64_t bytes, stream, host_ptr, callsite, n;
  uint32_t stack_id, alloc_stack_id, flags;
  int32_t result, device;
  uint16_t api;
  uint8_t dir, host_mem, src_mem, dst_mem, why;
} fields;

static int fields_cmp(const void *pa, const void *pb) {
  const fields *a = pa, *b = pb;
  /* every field but n */
  fields x = *a, y = *b;
  x.n = y.n = 0;
  return memcmp(&x, &y, sizeof x);
}

static fields *read_fields(const char *path, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  pagelock_file_header h;
  if (fread(&h, sizeof h, 1, f) != 1) exit(2);
  fields *v = NULL;
  size_t n = 0;
  static unsigned char buf[PAGELOCK_TRACE_MAX_RECORD];
  pagelock_rec_hdr rh;
  while (fread(&rh, sizeof rh, 1, f) == 1 && rh.size >= sizeof rh && rh.size <= sizeof buf) {
    memcpy(buf, &rh, sizeof rh);
    if (rh.size > sizeof rh && fread(buf + sizeof rh, rh.size - sizeof rh, 1, f) != 1) break;
    if (rh.type != PAGELOCK_REC_COPY || rh.size < sizeof(pagelock_rec_copy)) continue;
    pagelock_rec_copy c;
    memcpy(&c, buf, sizeof c);
    fields x;
    memset(&x, 0, sizeof x); /* padding too: compared with memcmp */
    /* What differs between two runs of one program: addresses the heap
     * handed out (the shim's own allocations differ with the option) and
     * stack ids (interned in the order stacks were captured).  Kept: the
     * stream's kind (legacy, per-thread, the program's own), whether the
     * host buffer has an allocation site, the return address (in the
     * runtime or the program's code, loaded at one address under
     * setarch -R). */
    x.bytes = c.bytes;
    x.stream = c.stream <= 2 ? c.stream : 3;
    x.host_ptr = 0;
    x.callsite = c.callsite;
    x.stack_id = c.stack_id != 0;
    x.alloc_stack_id = c.alloc_stack_id != 0;
    x.flags = c.flags;
    x.result = c.result;
    x.device = c.device;
    x.api = c.api;
    x.dir = c.dir;
    x.host_mem = c.host_mem;
    x.src_mem = c.src_mem;
    x.dst_mem = c.dst_mem;
    x.why = c.why;
    x.n = c.count ? c.count : 1;
    v = realloc(v, (n + 1) * sizeof *v);
    v[n++] = x;
  }
  fclose(f);
  qsort(v, n, sizeof *v, fields_cmp);
  /* Merge equal keys. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k && fields_cmp(&v[k - 1], &v[i]) == 0)
      v[k - 1].n += v[i].n;
    else
      v[k++] = v[i];
  }
  *out_n = k;
  return v;
}

static void print_fields(const char *what, const fields *x) {
  fprintf(stderr,
          "    %s: %llu cop%s: api %u %s host %s src %s dst %s, %llu B, stream %#llx, device %d, "
          "result %d, flags %#x, why %u, site %#llx, stack %u, alloc stack %u\n",
          what, (unsigned long long)x->n, x->n == 1 ? "y" : "ies", x->api,
          x->dir < 6 ? dir_names[x->dir] : "?", x->host_mem < 7 ? mem_names[x->host_mem] : "?",
          x->src_mem < 7 ? mem_names[x->src_mem] : "?",
          x->dst_mem < 7 ? mem_names[x->dst_mem] : "?", (unsigned long long)x->bytes,
          (unsigned long long)x->stream, x->device, x->result, x->flags, x->why,
          (unsigned long long)x->callsite, x->stack_id, x->alloc_stack_id);
}

static int same(const char *a, const char *b) {
  size_t na, nb;
  fields *va = read_fields(a, &na), *vb = read_fields(b, &nb);
  size_t i = 0, j = 0, diffs = 0;
  uint64_t ca = 0, cb = 0;
  while (i < na || j < nb) {
    int c = i == na ? 1 : j == nb ? -1 : fields_cmp(&va[i], &vb[j]);
    if (c == 0) {
      ca += va[i].n;
      cb += vb[j].n;
      if (va[i].n != vb[j].n && diffs++ < 10) {
        print_fields("first ", &va[i]);
        print_fields("second", &vb[j]);
      }
      i++, j++;
    } else if (c < 0) {
      ca += va[i].n;
      if (diffs++ < 10) print_fields("first only ", &va[i]);
      i++;
    } else {
      cb += vb[j].n;
      if (diffs++ < 10) print_fields("second only", &vb[j]);
      j++;
    }
  }
  printf("repeats_check: --same: %llu and %llu copies, %zu kinds differ\n", (unsigned long long)ca,
         (unsigned long long)cb, diffs);
  free(va);
  free(vb);
  return diffs != 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--same")) return same(argv[2], argv[3]);
  if (argc < 3) {
    fprintf(
        stderr,
        "usage: repeats_check TRACE EXPECT [--partial] [--no-tids] [--min-runs N] [--max-runs N]\n");
    return 2;
  }
  int partial = 0, no_tids = 0;
  long min_runs = -1, max_runs = -1;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--partial"))
      partial = 1;
    else if (!strcmp(argv[i], "--no-tids"))
      no_tids = 1;
    else if (!strcmp(argv[i], "--min-runs") && i + 1 < argc)
      min_runs = atol(argv[++i]);
    else if (!strcmp(argv[i], "--max-runs") && i + 1 < argc)
      max_runs = atol(argv[++i]);
    else {
      fprintf(stderr, "repeats_check: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  FILE *e = fopen(argv[2], "r");
  if (!e) {
    perror(argv[2]);
    return 2;
  }
  want *w = NULL;
  size_t nw = 0;
  uint64_t t0 = 0, t1 = 0;
  int *tids = NULL;
  size_t ntids = 0;
  char line[512];
  while (fgets(line, sizeof line, e)) {
    char d[32], m[32], v[32];
    int ok;
    unsigned long long bytes, n, t;
    int tid;
    if (sscanf(line, "tid %d", &tid) == 1) {
      tids = realloc(tids, (ntids + 1) * sizeof *tids);
      tids[ntids++] = tid;
    } else if (sscanf(line, "t0 %llu", &t) == 1) {
      t0 = t;
    } else if (sscanf(line, "t1 %llu", &t) == 1) {
      t1 = t;
    } else if (sscanf(line, "copy %31s %31s %31s %d %llu %llu", d, m, v, &ok, &bytes, &n) == 6) {
      w = realloc(w, (nw + 1) * sizeof *w);
      want *x = &w[nw++];
      x->dir = name_index(dir_names, 6, d);
      x->mem = strcmp(m, "*") ? name_index(mem_names, 7, m) : -1;
      x->dev = strcmp(v, "*") ? atoi(v) : -1;
      x->ok = ok;
      x->bytes = bytes;
      x->n = n;
      x->got = 0;
    }
  }
  fclose(e);

  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  pagelock_file_header h;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, PAGELOCK_TRACE_MAGIC, 8) != 0) {
    fprintf(stderr, "repeats_check: %s: not a trace\n", argv[1]);
    return 1;
  }
  int bad = 0, ended = 0;
  unsigned long bad_tids = 0;
  unsigned long records = 0, runs = 0, maxcount = 0, timed_total = 0, stray = 0;
  uint64_t copies = 0, untimed_parts = 0;
  static unsigned char buf[PAGELOCK_TRACE_MAX_RECORD];
  for (;;) {
    pagelock_rec_hdr rh;
    if (fread(&rh, sizeof rh, 1, f) != 1) break;
    if (rh.size < sizeof rh || rh.size > sizeof buf || rh.size % 8) {
      fprintf(stderr, "repeats_check: %s: record of size %u\n", argv[1], rh.size);
      bad = 1;
      break;
    }
    memcpy(buf, &rh, sizeof rh);
    if (fread(buf + sizeof rh, rh.size - sizeof rh, 1, f) != 1 && rh.size > sizeof rh) {
      if (!partial) {
        fprintf(stderr, "repeats_check: %s: cut inside a record\n", argv[1]);
        bad = 1;
      }
      break;
    }
    if (rh.type == PAGELOCK_REC_END) {
      ended = 1;
      break;
    }
    if (rh.type != PAGELOCK_REC_COPY) continue;
    if (rh.size < sizeof(pagelock_rec_copy)) {
      fprintf(stderr, "repeats_check: short COPY record (%u bytes)\n", rh.size);
      bad = 1;
      continue;
    }
    pagelock_rec_copy c;
    memcpy(&c, buf, sizeof c);
    if (c.flags & PAGELOCK_COPY_GRAPH_NODE) continue;
    records++;
    if (c.count == 0 || c.count > 64 || c.timed > c.count) {
      fprintf(
          stderr,
          "repeats_check: COPY record (correlation %llu, tid %u, %s %llu B) has count %u timed %u\n",
          (unsigned long long)c.correlation, c.tid, c.dir < 6 ? dir_names[c.dir] : "?",
          (unsigned long long)c.bytes, c.count, c.timed);
      bad = 1;
    }
    int known = ntids == 0 || no_tids;
    for (size_t i = 0; i < ntids && !known; i++) known = tids[i] == (int)c.tid;
    if (!known) {
      if (bad_tids++ < 5)
        fprintf(stderr,
                "repeats_check: COPY record (correlation %llu, count %u) names thread %u, which "
                "made no copy in process %llu\n",
                (unsigned long long)c.correlation, c.count, c.tid, (unsigned long long)h.pid);
      bad = 1;
    }
    /* The shim's clock (the TSC, scaled) and the program's clock_gettime
     * may differ by a few microseconds. */
    if ((t0 && c.start_ns + SLACK_NS < t0) || (t1 && c.start_ns > t1 + SLACK_NS)) {
      fprintf(stderr,
              "repeats_check: COPY record (correlation %llu, tid %u, count %u timed %u) starts at "
              "%llu, outside the program's copies [%llu, %llu] (%+lld ns from the first)\n",
              (unsigned long long)c.correlation, c.tid, c.count, c.timed,
              (unsigned long long)c.start_ns, (unsigned long long)t0, (unsigned long long)t1,
              (long long)(c.start_ns - t0));
      bad = 1;
    }
    uint32_t n = c.count ? c.count : 1;
    copies += n;
    timed_total += c.timed;
    if (n > 1) runs++;
    if (c.timed == 0) untimed_parts++;
    if (n > maxcount) maxcount = n;
    int ok = c.result == 0;
    int hit = 0;
    for (size_t i = 0; i < nw && !hit; i++) {
      want *x = &w[i];
      if (x->ok != ok || x->dir != c.dir || x->bytes != c.bytes) continue;
      if (x->mem >= 0 && x->mem != c.host_mem) continue;
      if (x->dev != -1 && x->dev != c.device) continue;
      x->got += n;
      hit = 1;
    }
    if (!hit) {
      stray += n;
      fprintf(stderr,
              "repeats_check: %u cop%s the program did not make: %s %s device %d result %d, %llu B "
              "(tid %u, timed %u)\n",
              n, n == 1 ? "y" : "ies", c.dir < 6 ? dir_names[c.dir] : "?",
              c.host_mem < 7 ? mem_names[c.host_mem] : "?", c.device, c.result,
              (unsigned long long)c.bytes, c.tid, c.timed);
      bad = 1;
    }
  }
  fclose(f);
  uint64_t expected = 0;
  for (size_t i = 0; i < nw; i++) {
    expected += w[i].n;
    if (w[i].got != w[i].n) {
      fprintf(
          stderr,
          "repeats_check: %s %s device %d %s %llu B: the program made %llu, the trace has %llu\n",
          dir_names[w[i].dir > 0 ? w[i].dir : 0], w[i].mem >= 0 ? mem_names[w[i].mem] : "*",
          w[i].dev, w[i].ok ? "ok" : "failed", (unsigned long long)w[i].bytes,
          (unsigned long long)w[i].n, (unsigned long long)w[i].got);
      bad = 1;
    }
  }
  if (!ended && !partial) {
    fprintf(stderr, "repeats_check: %s: no END record\n", argv[1]);
    bad = 1;
  }
  if (min_runs >= 0 && (long)runs < min_runs) {
    fprintf(stderr, "repeats_check: %lu records hold runs, expected at least %ld\n", runs,
            min_runs);
    bad = 1;
  }
  if (max_runs >= 0 && (long)runs > max_runs) {
    fprintf(stderr, "repeats_check: %lu records hold runs, expected at most %ld\n", runs, max_runs);
    bad = 1;
  }
  printf(
      "repeats_check: %s: pid %llu copies=%llu expected=%llu records=%lu runs=%lu max_count=%lu "
      "timed=%lu untimed_records=%llu stray=%lu end=%d\n",
      argv[1], (unsigned long long)h.pid, (unsigned long long)copies, (unsigned long long)expected,
      records, runs, maxcount, timed_total, (unsigned long long)untimed_parts, stray, ended);
  free(w);
  return bad;
}
