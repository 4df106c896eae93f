/* test_reader_routes.c - the routes copies took (pass, stage, register)
 * and runs of repeated copies, counted copy by copy, in every trace
 * version (reader_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reader_fixture.h"

/* One copy with a route flag and a reason, from stack 1. */
static void route_copy(tb *b, uint8_t dir, uint8_t mem, uint32_t flags, uint8_t why, uint64_t bytes,
                       uint64_t host_ns) {
  tb_copy_args c = {0};
  c.start_ns = 1000000000ull + 1000 * (b->nrec + 1);
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.callsite = CUDART + 0x500;
  c.stack_id = 1;
  c.flags = flags;
  c.dir = dir;
  c.host_mem = mem;
  c.why = why;
  c.seq = 100 + b->nrec;
  tb_copy(b, &c);
}

/* A run under --mode auto: registered, staged (each staged copy moved as
 * four chunks of the shim's, which have LINK and GPU records but no COPY
 * record of their own) and passed copies, with their reasons, and the
 * registration engine's counters. */
static void build_routes(tb *b, uint32_t version, uint32_t mode) {
  const uint32_t A = PAGELOCK_COPY_ASYNC, S = PAGELOCK_COPY_STAGED, R = PAGELOCK_COPY_REGISTERED;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE, H2D = PAGELOCK_DIR_H2D, D2H = PAGELOCK_DIR_D2H;
  tb_header_v(b, version, sizeof(pagelock_file_header), 900, 0);
  tb_process(b, "/opt/app/bin/app", "node1", mode, -1);
  tb_gpu_status(b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  uint64_t s1[] = {CUDART + 0x500, APP + 0x1140, APP + 0x3010};
  tb_stack(b, 1, s1, 3);
  for (int i = 0; i < 3; i++) route_copy(b, H2D, PG, A | R, PAGELOCK_WHY_NONE, 64 << 20, 2000000);
  for (int i = 0; i < 3; i++) {
    uint64_t seq = 100 + b->nrec;
    for (uint32_t k = 0; k < 4; k++) tb_link(b, 5000 + (uint32_t)i * 4 + k, seq + 4);
    route_copy(b, H2D, PG, A | S, i < 2 ? PAGELOCK_WHY_SHARED : PAGELOCK_WHY_BUDGET,
               i < 2 ? 16 << 20 : 32 << 20, i < 2 ? 3000000 : 4000000);
    for (uint32_t k = 0; k < 4; k++)
      tb_gpu_copy(b, 0, 7, 1, PAGELOCK_GPU_MEM_PINNED, i < 2 ? 4 << 20 : 8 << 20,
                  1000100000ull + k * 1000, 1000100500ull + k * 1000, 5000 + (uint32_t)i * 4 + k,
                  1);
  }
  for (int i = 0; i < 2; i++) route_copy(b, D2H, PG, A, PAGELOCK_WHY_SMALL, 4096, 10000);
  route_copy(b, H2D, PG, A, PAGELOCK_WHY_COLD, 1 << 20, 200000);
  route_copy(b, H2D, PG, A, 200, 1 << 20, 300000); /* a reason we do not know */
  for (int i = 0; i < 2; i++)
    route_copy(b, H2D, PAGELOCK_MEM_PINNED, A, PAGELOCK_WHY_NONE, 8 << 20, 2000);
  route_copy(b, D2H, PAGELOCK_MEM_REGISTERED, 0, PAGELOCK_WHY_NONE, 4096, 1500);
  /* no route: device, managed memory, a graph node */
  route_copy(b, PAGELOCK_DIR_D2D, PAGELOCK_MEM_DEVICE, A, 0, 4096, 1000);
  route_copy(b, H2D, PAGELOCK_MEM_MANAGED, A, 0, 4096, 1000);
  route_copy(b, H2D, PG, PAGELOCK_COPY_GRAPH_NODE, PAGELOCK_WHY_CAPTURE, 1 << 20, 0);
  tb_module(b, APP, APP + 0x1000, APP + 0x10000, "");
  tb_symbol(b, APP + 0x1140, APP + 0x1100, "load_batch");
  pagelock_rec_counters c;
  memset(&c, 0, sizeof c);
  c.bytes_staged = 64 << 20;
  c.pool_bytes = 64 << 20;
  c.pool_high_water = 32 << 20;
  c.register_budget = 32ull << 30;
  c.registrations = 4;
  c.unregistrations = 3;
  c.evictions = 1;
  c.register_failures = 2;
  c.register_ns = 65000000;
  c.registered_bytes = 64 << 20;
  c.registered_bytes_high_water = 192 << 20;
  tb_counters(b, &c);
  tb_end(b, 1000000000ull + 50000000ull);
}

static void test_route_totals(void **state) {
  (void)state;
  tb b = {0};
  build_routes(&b, PAGELOCK_TRACE_VERSION, PAGELOCK_MODE_AUTO);
  plr_process p[2];
  memset(p, 0, sizeof p);
  assert_int_equal(load(&p[0].t, &b), 0);
  const plr_totals *t = &p[0].t.tot;
  /* One per copy of the program's: the twelve chunks of the staged copies
   * are not. */
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].count, 3);
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].bytes, 3 * (64 << 20));
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].count, 3);
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].bytes, 64 << 20);
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].host_ns, 10000000);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].count, 7);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].bytes,
                   2 * 4096 + 2 * (1 << 20) + 2 * (8 << 20) + 4096);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].host_ns, 525500);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SHARED].count, 2);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_BUDGET].bytes, 32 << 20);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].count, 2);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_COLD].count, 1);
  assert_int_equal(t->not_registered[0].count, 1);                    /* reason 200 */
  assert_int_equal(t->not_registered[PAGELOCK_WHY_CAPTURE].count, 0); /* a node */
  uint64_t nr = 0;
  for (int w = 0; w < PAGELOCK_WHY_COUNT; w++) nr += t->not_registered[w].count;
  assert_int_equal(nr, t->pageable.count - t->registered);
  /* Registered and staged copies did not make the host wait. */
  assert_int_equal(t->pageable_async.count, 4);
  assert_int_equal(p[0].t.counters.registrations, 4);
  analyze(&p[0]);
  char *s = report_text(p, 1);
  assert_contains(s,
                  "routes: 7 copies passed through (18.0 MiB), 3 staged (64.0 MiB), 3 "
                  "registered (192.0 MiB)\n"
                  "not registered: 2 copies  32.0 MiB  6.000 ms  shared memory or a file "
                  "mapping (DataLoader workers' batches): staged\n"
                  "not registered: 1 copies  32.0 MiB  4.000 ms  budget full "
                  "(PAGELOCK_REGISTER_BUDGET), nothing idle to evict: staged\n"
                  "not registered: 1 copies   1.0 MiB  0.300 ms  unknown: the trace gives "
                  "none (an older pagelock wrote it)\n"
                  "not registered: 1 copies   1.0 MiB  0.200 ms  cold: copied less than "
                  "PAGELOCK_REGISTER_HOT of the buffer\n"
                  "not registered: 2 copies   8.0 KiB  0.020 ms  small: below "
                  "PAGELOCK_STAGE_MIN, passed through\n"
                  "4 async copies were made synchronous");
  assert_contains(s,
                  "\nstaging: 64.0 MiB staged, 0 B passed through, 0 "
                  "fallbacks, 0 waits for a pool slot (0.000 ms), pool high "
                  "water 32.0 MiB of 64.0 MiB\n"
                  "registration: 4 ranges registered (65.000 ms), 3 "
                  "unregistered, 1 evicted, 2 failed; 64.0 MiB still "
                  "registered at exit, high water 192.0 MiB of a 32.0 GiB "
                  "budget\n");
  assert_contains(s,
                  "advice: allocate these buffers with cudaHostAlloc/"
                  "cudaMallocHost; 4 pageable copies "
                  "were neither staged nor registered (see 'not registered' "
                  "above).\n");
  free(s);
  s = report_json(p, 1);
  assert_contains(s,
                  "\"routes\": {\"pass\": {\"copies\": 7, \"bytes\": "
                  "18886656, \"host_ns\": 525500},\n"
                  "                   \"stage\": {\"copies\": 3, \"bytes\": "
                  "67108864, \"host_ns\": 10000000},\n"
                  "                   \"register\": {\"copies\": 3, "
                  "\"bytes\": 201326592, \"host_ns\": 6000000}},\n");
  assert_contains(s, "\"not_registered\": {\"unknown\": {\"copies\": 1, ");
  assert_contains(s,
                  "\"budget\": {\"copies\": 1, \"bytes\": 33554432, "
                  "\"host_ns\": 4000000}");
  assert_contains(s,
                  "\"register_budget\": 34359738368, \"registrations\": 4, "
                  "\"unregistrations\": 3, \"evictions\": 1, "
                  "\"register_failures\": 2, \"register_ns\": 65000000, "
                  "\"registered_bytes\": 67108864}");
  free(s);
  /* Two processes: the totals add up, routes and reasons included. */
  assert_int_equal(load(&p[1].t, &b), 0);
  analyze(&p[1]);
  s = report_text(p, 2);
  assert_contains(s, "== total over 2 processes ==\n");
  assert_contains(s,
                  "routes: 14 copies passed through (36.0 MiB), 6 staged "
                  "(128.0 MiB), 6 registered (384.0 MiB)\n"
                  "not registered: 4 copies  64.0 MiB  12.000 ms  shared");
  free(s);
  plr_process_free(&p[0]);
  plr_process_free(&p[1]);
  tb_free(&b);

  /* Under observe, with nothing staged or registered: no routes line. */
  tb o = {0};
  tb_header(&o, 5, 0);
  tb_process(&o, "/bin/x", "h", PAGELOCK_MODE_OBSERVE, -1);
  copy(&o, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC, 1 << 20, 50000, 0, 0x10,
       0);
  tb_end(&o, 5);
  memset(p, 0, sizeof p);
  assert_int_equal(load(&p[0].t, &o), 0);
  analyze(&p[0]);
  s = report_text(p, 1);
  assert_null(strstr(s, "routes:"));
  assert_null(strstr(s, "not registered"));
  assert_null(strstr(s, "registration:"));
  free(s);
  plr_process_free(&p[0]);
  tb_free(&o);
}

/* Versions 1 and 2 had reserved bytes where version 3 keeps a copy's
 * reason and the registration counters: whatever they hold reads as no
 * reason and no count. */
static void test_routes_old_versions(void **state) {
  (void)state;
  tb b = {0};
  build_routes(&b, 2, PAGELOCK_MODE_STAGE);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  const plr_totals *t = &p.t.tot;
  assert_int_equal(t->routes[PLR_ROUTE_STAGE].count, 3);
  assert_int_equal(t->not_registered[0].count, 7);
  for (int w = 1; w < PAGELOCK_WHY_COUNT; w++) assert_int_equal(t->not_registered[w].count, 0);
  assert_int_equal(p.t.counters.registrations, 0);
  assert_int_equal(p.t.counters.register_budget, 0);
  assert_int_equal(p.t.counters.registered_bytes, 0);
  assert_int_equal(p.t.counters.registered_bytes_high_water, 192 << 20);
  assert_int_equal(p.t.counters.bytes_staged, 64 << 20);
  analyze(&p);
  char *s = report_text(&p, 1);
  /* Stage mode: the routes, but no registration reasons to give. */
  assert_contains(s, "routes: 7 copies passed through");
  assert_null(strstr(s, "not registered"));
  assert_contains(s,
                  "registration: 0 ranges registered (0.000 ms), 0 "
                  "unregistered, 0 evicted, 0 failed; 0 B still registered "
                  "at exit, high water 192.0 MiB\n");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

/* A run of `count` back-to-back copies in one COPY record (version 4),
 * `timed` of them timed, host_ns their total; count 0 writes one copy. */
static void run_copy(tb *b, uint64_t start, uint8_t dir, uint8_t mem, uint32_t flags, uint8_t why,
                     uint32_t count, uint32_t timed, uint64_t bytes, uint64_t host_ns,
                     uint32_t stack) {
  tb_copy_args c = {0};
  c.start_ns = start;
  c.host_ns = host_ns;
  c.bytes = bytes;
  c.callsite = CUDART + 0x500;
  c.stack_id = stack;
  c.flags = flags;
  c.dir = dir;
  c.host_mem = mem;
  c.why = why;
  c.api = dir == PAGELOCK_DIR_H2D ? PAGELOCK_API_cuMemcpyHtoDAsync_v2
                                  : PAGELOCK_API_cuMemcpyDtoHAsync_v2;
  c.count = count;
  c.timed = timed;
  tb_copy(b, &c);
}

/* Under --mode auto: a run of 64 pageable 4 KiB uploads (8 timed) from
 * load_batch, one 1 MiB upload and a run of 3 registered 64 KiB downloads
 * (1 timed) from save_result, a run of 10 pinned downloads all timed. */
static void build_runs(tb *b) {
  const uint32_t A = PAGELOCK_COPY_ASYNC;
  const uint8_t PG = PAGELOCK_MEM_PAGEABLE, H2D = PAGELOCK_DIR_H2D, D2H = PAGELOCK_DIR_D2H;
  tb_header(b, 901, 0);
  tb_process(b, "/opt/app/bin/app", "node1", PAGELOCK_MODE_AUTO, -1);
  uint64_t s1[] = {CUDART + 0x500, APP + 0x1140, APP + 0x3010};
  uint64_t s2[] = {CUDART + 0x500, APP + 0x2208, APP + 0x3020};
  tb_stack(b, 1, s1, 3);
  tb_stack(b, 2, s2, 3);
  const uint64_t t0 = 1000000000ull + 1000000;
  run_copy(b, t0, H2D, PG, A, PAGELOCK_WHY_SMALL, 64, 8, 4096, 640000, 1);
  run_copy(b, t0 + 1000000, H2D, PG, A, PAGELOCK_WHY_COLD, 0, 0, 1 << 20, 1000000, 2);
  run_copy(b, t0 + 3000000, D2H, PG, A | PAGELOCK_COPY_REGISTERED, PAGELOCK_WHY_NONE, 3, 1, 65536,
           30000, 2);
  run_copy(b, t0 + 4000000, D2H, PAGELOCK_MEM_PINNED, A, PAGELOCK_WHY_NONE, 10, 10, 8192, 20000, 1);
  tb_module(b, APP, APP + 0x1000, APP + 0x10000, "");
  tb_module(b, CUDART, CUDART, CUDART + 0x100000, "/nonexistent/libcudart.so.13");
  tb_symbol(b, CUDART + 0x500, CUDART + 0x400, "cudaMemcpyAsync");
  tb_symbol(b, APP + 0x1140, APP + 0x1100, "load_batch");
  tb_symbol(b, APP + 0x2208, APP + 0x2200, "save_result");
  tb_end(b, 1000000000ull + 10000000);
}

/* What a writer prints of p: chrome or html, the trace read again from b. */
static char *report_view(const plr_process *p, const tb *b, int html) {
  plr_source src = {NULL, b->p, b->len};
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  assert_non_null(f);
  if (html)
    plr_report_html(f, p, &src, 1);
  else
    plr_report_chrome(f, p, &src, 1);
  fclose(f);
  return s;
}

/* A COPY record that stands for a run counts as its count copies, and
 * its bytes as count times each copy's, in every total, route, reason and
 * site row; its host time is already the run's; the writers say which
 * host times are estimates. */
static void test_copy_runs_count_each_copy(void **state) {
  (void)state;
  tb b = {0};
  build_runs(&b);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  const plr_totals *t = &p.t.tot;
  assert_int_equal(t->all.count, 64 + 1 + 3 + 10);
  assert_int_equal(t->all.bytes, 64 * 4096 + (1 << 20) + 3 * 65536 + 10 * 8192);
  assert_int_equal(t->all.host_ns, 640000 + 1000000 + 30000 + 20000);
  /* The 10 pinned downloads were all timed: nothing of theirs estimated. */
  assert_int_equal(t->all.est_count, 64 + 3);
  assert_int_equal(t->all.est_timed, 8 + 1);
  assert_int_equal(t->by[PAGELOCK_DIR_H2D][PAGELOCK_MEM_PAGEABLE].count, 65);
  assert_int_equal(t->by[PAGELOCK_DIR_D2H][PAGELOCK_MEM_PINNED].bytes, 10 * 8192);
  assert_int_equal(t->pageable.count, 68);
  assert_int_equal(t->pageable_async.count, 65);
  assert_int_equal(t->registered, 3);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].count, 64 + 1 + 10);
  assert_int_equal(t->routes[PLR_ROUTE_PASS].bytes, 64 * 4096 + (1 << 20) + 10 * 8192);
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].count, 3);
  assert_int_equal(t->routes[PLR_ROUTE_REGISTER].bytes, 3 * 65536);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].count, 64);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].bytes, 64 * 4096);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_SMALL].host_ns, 640000);
  assert_int_equal(t->not_registered[PAGELOCK_WHY_COLD].count, 1);
  analyze(&p);
  assert_int_equal(p.calls.n, 2);
  /* save_result: 1 MiB in 1 ms beats 192 KiB in 30 us for the worst row. */
  assert_int_equal(p.calls.v[0].b.count, 4);
  assert_int_equal(p.calls.v[0].b.bytes, (1 << 20) + 3 * 65536);
  assert_int_equal(p.calls.v[0].routes[PLR_ROUTE_REGISTER].count, 3);
  assert_int_equal(p.calls.v[1].b.count, 64);
  assert_int_equal(p.calls.v[1].b.bytes, 64 * 4096);
  assert_int_equal(p.calls.v[1].b.est_count, 64);
  assert_int_equal(p.calls.v[1].b.est_timed, 8);
  /* Sizes are each copy's: none of these is 1 MiB but the single one. */
  assert_int_equal(p.calls.v[1].big.count, 0);
  assert_int_equal(p.calls.v[0].big.count, 1);

  char *s = report_text(&p, 1);
  assert_contains(s, "copies: 78 calls, 1.5 MiB, 1.690 ms of host time inside copy calls\n");
  assert_contains(s, "  H2D      pageable          65     1.2 MiB      1.640 ms\n");
  assert_contains(s,
                  "  (host time of 67 copies estimated from 9 timed: repeated small copies, 1 in 7 "
                  "timed)\n");
  assert_contains(s,
                  "routes: 75 copies passed through (1.3 MiB), 0 staged (0 B), 3 registered "
                  "(192.0 KiB)\n");
  assert_contains(s, "not registered: 64 copies  256.0 KiB  0.640 ms  small:");
  assert_contains(s, "     64  256.0 KiB      0.640 ms  0.41  H2D      load_batch+0x40 (app)\n");
  assert_contains(s,
                  "load_batch+0x40 (app)\n"
                  "  (host time of 67 copies estimated from 9 timed: repeated small copies, 1 in "
                  "7 timed)\n");
  free(s);

  s = report_json(&p, 1);
  assert_contains(s,
                  "\"copies\": 78, \"bytes\": 1589248, \"host_ns\": 1690000, \"estimated\": "
                  "{\"copies\": 67, \"timed\": 9},\n");
  assert_contains(s,
                  "{\"copies\": 64, \"bytes\": 262144, \"host_ns\": 640000, \"gbps\": 0.410, "
                  "\"estimated\": {\"copies\": 64, \"timed\": 8}, \"dirs\": [\"H2D\"]");
  assert_contains(s,
                  "\"routes\": {\"pass\": {\"copies\": 75, \"bytes\": 1392640, \"host_ns\": "
                  "1660000},");
  assert_contains(s, "\"small\": {\"copies\": 64, \"bytes\": 262144, \"host_ns\": 640000}");
  free(s);

  /* One event per record: the run starts at its first copy and lasts its
   * host time, named for its count, on a track of the thread's runs
   * (0x10000000 | 42 << 3, lane 0), not its copy calls' (it could overlap
   * them). */
  s = report_view(&p, &b, 0);
  assert_contains(s,
                  "{\"ph\":\"X\",\"name\":\"cuMemcpyHtoDAsync_v2 x64\",\"cat\":\"copy_call\","
                  "\"pid\":901,\"tid\":268435792,\"ts\":1000.000,\"dur\":640.000");
  assert_contains(s,
                  "\"tid\":268435792,\"args\":{\"name\":\"thread 42 (runs of repeated "
                  "copies)\"}");
  assert_contains(s, ",\"copies\":64,\"timed\":8,\"total_bytes\":262144");
  assert_contains(s, "\"name\":\"cuMemcpyDtoHAsync_v2 x10\"");
  assert_contains(s, "\"name\":\"cuMemcpyHtoDAsync_v2\",");
  size_t events = 0;
  for (const char *q = s; (q = strstr(q, "\"cat\":\"copy_call\"")) != NULL; q++) events++;
  assert_int_equal(events, 4);
  free(s);
  s = report_view(&p, &b, 1);
  assert_contains(
      s,
      "<title>cuMemcpyHtoDAsync_v2 x64 H2D pageable, 4.0 KiB each, host 640 us, 8 of 64 "
      "copies timed</title>");
  assert_contains(s,
                  "<li>host time of 67 copies estimated from 9 timed: repeated small copies, 1 in "
                  "7 timed</li>");
  free(s);

  /* compare: the run's 64 copies against 64 single ones. */
  tb o = {0};
  tb_header(&o, 902, 0);
  tb_process(&o, "/opt/app/bin/app", "node1", PAGELOCK_MODE_OBSERVE, -1);
  for (int i = 0; i < 64; i++)
    run_copy(&o, 1000000000ull + 1000000 + 10000 * (uint64_t)i, PAGELOCK_DIR_H2D,
             PAGELOCK_MEM_PAGEABLE, PAGELOCK_COPY_ASYNC, PAGELOCK_WHY_MODE, 0, 0, 4096, 10000, 1);
  tb_end(&o, 1000000000ull + 10000000);
  plr_trace ot;
  assert_int_equal(load(&ot, &o), 0);
  plr_compare_side bs, as;
  memset(&bs, 0, sizeof bs);
  memset(&as, 0, sizeof as);
  plr_compare_add(&bs, &ot, NULL, NULL);
  plr_compare_add(&as, &p.t, NULL, NULL);
  plr_cmp_row rows[PLR_CMP_MAX_ROWS];
  size_t n = plr_compare_rows(&bs, &as, rows);
  int seen = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(rows[i].key, "copies")) {
      assert_true(rows[i].b.v == 64 && rows[i].a.v == 78);
      seen++;
    } else if (!strcmp(rows[i].key, "pass_copies")) {
      assert_true(rows[i].b.v == 64 && rows[i].a.v == 75);
      seen++;
    } else if (!strcmp(rows[i].key, "pass_bytes")) {
      assert_true(rows[i].b.v == 64 * 4096 && rows[i].a.v == 64 * 4096 + (1 << 20) + 10 * 8192);
      seen++;
    } else if (!strcmp(rows[i].key, "register_copies")) {
      assert_true(rows[i].b.v == 0 && rows[i].a.v == 3);
      seen++;
    }
  }
  assert_int_equal(seen, 4);
  plr_compare_side_free(&bs);
  plr_compare_side_free(&as);
  plr_trace_free(&ot);
  tb_free(&o);
  plr_process_free(&p);
  tb_free(&b);
}

/* The count and timed the reader hands out of the only COPY record of b. */
static void read_count(const tb *b, uint32_t *count, uint32_t *timed) {
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(fwrite(b->p, 1, b->len, f), b->len);
  rewind(f);
  plr_reader r;
  assert_int_equal(plr_open_stream(&r, f), PLR_OPEN_OK);
  plr_record rec;
  int copies = 0;
  while (plr_next(&r, &rec))
    if (rec.type == PAGELOCK_REC_COPY) {
      *count = rec.u.copy->count;
      *timed = rec.u.copy->timed;
      copies++;
    }
  assert_int_equal(copies, 1);
  assert_int_equal(r.malformed, 0);
  plr_close(&r);
}

/* A version-`version` trace of one COPY record (v1, v3: of the size of
 * those versions, else today's), its count and timed as given. */
static void build_one(tb *b, uint32_t version, int v1, int v3, uint32_t count, uint32_t timed) {
  tb_header_v(b, version, sizeof(pagelock_file_header), 903, 0);
  tb_copy_args c = {0};
  c.start_ns = 1000001000ull;
  c.host_ns = 5000;
  c.bytes = 4096;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = PAGELOCK_MEM_PAGEABLE;
  c.count = count;
  c.timed = timed;
  c.v1 = v1;
  c.v3 = v3;
  tb_copy(b, &c);
  tb_end(b, 1000002000ull);
}

/* Older records end before count: one copy, timed.  So does a record of
 * an older version that is longer (its bytes there are no field of its
 * version), and a version-4 count of 0; timed never exceeds count. */
static void test_copy_count_versions(void **state) {
  (void)state;
  static const struct {
    uint32_t version;
    int v1, v3;
    uint32_t count, timed, want_count, want_timed;
  } cases[] = {
      {1, 1, 0, 64, 8, 1, 1},  /* 96 bytes */
      {2, 0, 1, 64, 8, 1, 1},  /* 104 bytes */
      {3, 0, 1, 64, 8, 1, 1},  /* 104 bytes, as golden traces */
      {3, 0, 0, 64, 8, 1, 1},  /* 112 bytes in a version-3 trace */
      {4, 0, 0, 64, 8, 64, 8}, /* a run */
      {4, 0, 0, 0, 0, 1, 1},   /* a single copy */
      {4, 0, 0, 5, 9, 5, 5},   /* more timed than copies */
      {4, 0, 0, 7, 0, 7, 0},   /* none timed: kept */
      {4, 0, 1, 64, 8, 1, 1},  /* a 104-byte record in a version-4 trace */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tb b = {0};
    build_one(&b, cases[i].version, cases[i].v1, cases[i].v3, cases[i].count, cases[i].timed);
    uint32_t count = 0, timed = 0;
    read_count(&b, &count, &timed);
    if (count != cases[i].want_count || timed != cases[i].want_timed)
      fail_msg("case %zu: count %u timed %u, want %u and %u", i, count, timed, cases[i].want_count,
               cases[i].want_timed);
    plr_trace t;
    assert_int_equal(load(&t, &b), 0);
    assert_int_equal(t.tot.all.count, cases[i].want_count);
    assert_int_equal(t.tot.all.bytes, 4096ull * cases[i].want_count);
    assert_int_equal(t.tot.all.host_ns, 5000);
    plr_trace_free(&t);
    tb_free(&b);
  }
  /* A count of 0 written by the builder's writer path: patched in place. */
  tb b = {0};
  build_one(&b, 4, 0, 0, 64, 8);
  uint32_t zero = 0;
  memcpy(b.p + b.offsets[0] + offsetof(pagelock_rec_copy, count), &zero, sizeof zero);
  uint32_t count = 0, timed = 0;
  read_count(&b, &count, &timed);
  assert_int_equal(count, 1);
  assert_int_equal(timed, 1);
  tb_free(&b);
  /* count times bytes saturates instead of wrapping. */
  tb_header(&b, 904, 0);
  tb_copy_args c = {0};
  c.start_ns = 1000001000ull;
  c.bytes = 1ull << 62;
  c.count = 8;
  c.timed = 1;
  c.dir = PAGELOCK_DIR_H2D;
  c.host_mem = PAGELOCK_MEM_PAGEABLE;
  tb_copy(&b, &c);
  plr_trace t;
  assert_int_equal(load(&t, &b), 0);
  assert_int_equal(t.tot.all.count, 8);
  assert_true(t.tot.all.bytes == UINT64_MAX);
  plr_trace_free(&t);
  tb_free(&b);
}

/* Runs form while CUPTI is not tracing, so a run that started in a pause
 * of sampled GPU timing is that many copies without a GPU op by design,
 * whether its record comes before or after the samples around it. */
static void test_copy_runs_in_pause(void **state) {
  (void)state;
  tb b = {0};
  tb_header(&b, 905, 0);
  tb_process(&b, "/opt/app/bin/app", "node1", PAGELOCK_MODE_OBSERVE, -1);
  tb_gpu_status(&b, PAGELOCK_GPU_TIMING_ON, 0, 0, "");
  const uint64_t t0 = 1000000000ull;
  const uint8_t H2D = PAGELOCK_DIR_H2D, PG = PAGELOCK_MEM_PAGEABLE;
  tb_kernel(&b, 0, 7, t0 + 1000000, t0 + 1500000, 0);
  tb_gpu_sample(&b, t0 + 2000000, 0, 90000);
  /* Read after the pause, later than every sample so far: it waits. */
  run_copy(&b, t0 + 3000000, H2D, PG, PAGELOCK_COPY_ASYNC, 0, 64, 8, 4096, 640000, 0);
  tb_gpu_sample(&b, t0 + 6000000, 1, 0);
  /* Read after the resume, started in the pause: settled at once. */
  run_copy(&b, t0 + 4000000, H2D, PG, PAGELOCK_COPY_ASYNC, 0, 32, 4, 4096, 320000, 0);
  /* After the resume: no op, and it should have had one. */
  run_copy(&b, t0 + 7000000, H2D, PG, PAGELOCK_COPY_ASYNC, 0, 0, 0, 4096, 10000, 0);
  tb_end(&b, t0 + 9000000);
  plr_process p;
  memset(&p, 0, sizeof p);
  assert_int_equal(load(&p.t, &b), 0);
  assert_int_equal(p.t.tot.all.count, 97);
  assert_int_equal(p.t.gpu.join.untimed_paused, 96);
  assert_int_equal(p.t.gpu.join.unjoined, 1);
  analyze(&p);
  char *s = report_text(&p, 1);
  assert_contains(s,
                  "GPU join: 0 of 1 copy calls matched their GPU copies; 96 more copy calls ran "
                  "while GPU timing was paused\n");
  free(s);
  plr_process_free(&p);
  tb_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_route_totals),
      cmocka_unit_test(test_routes_old_versions),
      cmocka_unit_test(test_copy_runs_count_each_copy),
      cmocka_unit_test(test_copy_count_versions),
      cmocka_unit_test(test_copy_runs_in_pause),
  };
  return cmocka_run_group_tests_name("reader_routes", tests, NULL, NULL);
}
