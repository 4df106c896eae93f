/* test_route.c - the one route decision (shim/engines/route.h) over its inputs.
 *
 * The decision is pure: these tests hand it a classified copy and the
 * engines' answers, and check the route, its fallback, the reason and
 * the questions it asks, in the order it asks them.  A scripted engine
 * (answer) gives the answers a case names, and every question asked is
 * recorded, so a case also checks that nothing is asked that the route
 * does not need: an answer can hold a registration, add heat, evict or
 * wait.  No driver, no thread: what the engines do with the route is
 * tested over the fake driver (test_autopin_*.c, test_stage_*.c). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pl_internal.h"
#include "route.h"

#define MB ((uint64_t)1 << 20)
#define PG 4096u
#define STAGE_MIN (256u << 10)

/* A copy: pageable, host to device, 1D, host bytes at 0x10000. */
static pl_route_in copy_in(long mode, uint64_t bytes) {
  return (pl_route_in){.mode = mode,
                       .dir = PAGELOCK_DIR_H2D,
                       .host = PAGELOCK_MEM_PAGEABLE,
                       .host_ptr = 0x10000,
                       .page = PG,
                       .bytes = bytes,
                       .stage_min = STAGE_MIN};
}

/* The engine's answers, by question (PL_ANS_*; SPAN: PL_SPAN_*), and the
 * questions asked, in order. */
typedef struct script {
  uint8_t ans[PL_ASK_ROOM + 1];
  uint8_t asked[16];
  unsigned n;
} script;

static void answer(pl_route_in *in, uint8_t ask, script *s) {
  assert_true(s->n < sizeof s->asked);
  s->asked[s->n++] = ask;
  uint8_t a = s->ans[ask];
  assert_int_not_equal(a, 0); /* a question the case gave no answer to */
  switch (ask) {
    case PL_ASK_ANY: in->any = a; break;
    case PL_ASK_HOLD: in->hold = a; break;
    case PL_ASK_SPAN: in->span = a; break;
    case PL_ASK_BUSY: in->busy = a; break;
    case PL_ASK_FOLLOW: in->follow = a; break;
    case PL_ASK_HOT: in->hot = a; break;
    case PL_ASK_CTX: in->ctx = a; break;
    case PL_ASK_CAPTURE: in->capture = a; break;
    case PL_ASK_ROOM: in->room = a; break;
    default: fail();
  }
}

/* Decide as pl_copy_route does: ask until the route is known. */
static pl_route run(pl_route_in in, script *s) {
  pl_route v;
  for (int i = 0; (v = pl_route_decide(&in)).ask != PL_ASK_NONE; i++) {
    assert_true(i < 16);
    answer(&in, v.ask, s);
  }
  return v;
}

/* The questions s asked are exactly the PL_ASK_NONE-terminated list. */
static void asked(const script *s, ...) {
  va_list ap;
  va_start(ap, s);
  unsigned i = 0;
  for (int q; (q = va_arg(ap, int)) != PL_ASK_NONE; i++) {
    assert_true(i < s->n);
    assert_int_equal(s->asked[i], q);
  }
  va_end(ap);
  assert_int_equal(s->n, i);
}

#define Y PL_ANS_YES
#define N PL_ANS_NO
#define END PL_ASK_NONE

/* ---- copies no engine takes ---------------------------------------------- */

static void test_not_pageable_or_not_host_device(void **state) {
  (void)state;
  static const long modes[] = {PAGELOCK_MODE_OBSERVE, PAGELOCK_MODE_STAGE, PAGELOCK_MODE_REGISTER,
                               PAGELOCK_MODE_AUTO};
  for (unsigned m = 0; m < 4; m++) {
    static const uint8_t hosts[] = {PAGELOCK_MEM_PINNED, PAGELOCK_MEM_REGISTERED,
                                    PAGELOCK_MEM_DEVICE, PAGELOCK_MEM_MANAGED,
                                    PAGELOCK_MEM_UNKNOWN};
    for (unsigned h = 0; h < sizeof hosts; h++) {
      pl_route_in in = copy_in(modes[m], 64 * MB);
      in.host = hosts[h];
      script s = {0};
      pl_route v = run(in, &s);
      assert_int_equal(v.kind, PL_ROUTE_PASS);
      assert_int_equal(v.why, PAGELOCK_WHY_NONE);
      asked(&s, END);
    }
    static const uint8_t dirs[] = {PAGELOCK_DIR_D2D, PAGELOCK_DIR_H2H, PAGELOCK_DIR_UNKNOWN};
    for (unsigned d = 0; d < sizeof dirs; d++) {
      pl_route_in in = copy_in(modes[m], 64 * MB);
      in.dir = dirs[d];
      script s = {0};
      pl_route v = run(in, &s);
      assert_int_equal(v.kind, PL_ROUTE_PASS);
      assert_int_equal(v.why, PAGELOCK_WHY_NONE);
      asked(&s, END);
    }
  }
}

static void test_shaped(void **state) {
  (void)state;
  struct {
    long mode;
    uint8_t why;
  } rows[] = {{PAGELOCK_MODE_OBSERVE, PAGELOCK_WHY_MODE},
              {PAGELOCK_MODE_STAGE, PAGELOCK_WHY_MODE},
              {PAGELOCK_MODE_REGISTER, PAGELOCK_WHY_SHAPE},
              {PAGELOCK_MODE_AUTO, PAGELOCK_WHY_SHAPE}};
  for (unsigned i = 0; i < 4; i++) {
    pl_route_in in = copy_in(rows[i].mode, 64 * MB);
    in.shaped = true;
    in.dir = i % 2 ? PAGELOCK_DIR_D2H : PAGELOCK_DIR_H2D;
    script s = {0};
    pl_route v = run(in, &s);
    assert_int_equal(v.kind, PL_ROUTE_PASS);
    assert_int_equal(v.why, rows[i].why);
    asked(&s, END);
  }
}

/* ---- observe and stage ------------------------------------------------------ */

static void test_observe_and_stage(void **state) {
  (void)state;
  struct {
    long mode;
    uint64_t bytes;
    uint8_t kind;
  } rows[] = {
      {PAGELOCK_MODE_OBSERVE, 256, PL_ROUTE_PASS},
      {PAGELOCK_MODE_OBSERVE, 64 * MB, PL_ROUTE_PASS},
      {PAGELOCK_MODE_STAGE, 0, PL_ROUTE_PASS},
      {PAGELOCK_MODE_STAGE, STAGE_MIN - 1, PL_ROUTE_PASS},
      {PAGELOCK_MODE_STAGE, STAGE_MIN, PL_ROUTE_STAGE},
      {PAGELOCK_MODE_STAGE, 64 * MB, PL_ROUTE_STAGE},
  };
  for (unsigned i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    pl_route_in in = copy_in(rows[i].mode, rows[i].bytes);
    script s = {0};
    pl_route v = run(in, &s);
    assert_int_equal(v.kind, rows[i].kind);
    /* Declined by the staging engine: the native call, uncut (no
     * registration exists in this mode). */
    assert_int_equal(v.fallback, PL_ROUTE_PASS);
    assert_int_equal(v.why, PAGELOCK_WHY_MODE);
    assert_false(v.request);
    asked(&s, END);
  }
}

/* ---- auto: small copies ----------------------------------------------------- */

/* No registration anywhere: inside one page the native call as it is,
 * across a page boundary cut where one may appear meanwhile. */
static void test_auto_small_alone(void **state) {
  (void)state;
  script s = {.ans = {[PL_ASK_ANY] = N}};
  pl_route v = run(copy_in(PAGELOCK_MODE_AUTO, 256), &s);
  assert_int_equal(v.kind, PL_ROUTE_PASS);
  assert_int_equal(v.why, PAGELOCK_WHY_SMALL);
  asked(&s, PL_ASK_ANY, END);

  pl_route_in in = copy_in(PAGELOCK_MODE_AUTO, PG);
  in.host_ptr = 0x10000 + 64; /* PyTorch's 64-byte aligned 4 KiB tensor */
  memset(&s, 0, sizeof s);
  s.ans[PL_ASK_ANY] = N;
  v = run(in, &s);
  assert_int_equal(v.kind, PL_ROUTE_PASS_CUT);
  assert_int_equal(v.why, PAGELOCK_WHY_SMALL);
  asked(&s, PL_ASK_ANY, END);

  /* The last byte of the page, and the first of the next. */
  in.host_ptr = 0x10000 + PG - 1;
  in.bytes = 1;
  memset(&s, 0, sizeof s);
  s.ans[PL_ASK_ANY] = N;
  assert_int_equal(run(in, &s).kind, PL_ROUTE_PASS);
  in.bytes = 2;
  memset(&s, 0, sizeof s);
  s.ans[PL_ASK_ANY] = N;
  assert_int_equal(run(in, &s).kind, PL_ROUTE_PASS_CUT);
}

/* A registration exists somewhere: a small copy over it goes through it;
 * any other passes, cut, and adds no heat. */
static void test_auto_small_with_registrations(void **state) {
  (void)state;
  script s = {.ans = {[PL_ASK_ANY] = Y, [PL_ASK_HOLD] = Y}};
  pl_route v = run(copy_in(PAGELOCK_MODE_AUTO, 256), &s);
  assert_int_equal(v.kind, PL_ROUTE_REGISTER);
  assert_int_equal(v.why, PAGELOCK_WHY_NONE);
  asked(&s, PL_ASK_ANY, PL_ASK_HOLD, END);

  memset(&s, 0, sizeof s);
  s.ans[PL_ASK_ANY] = Y;
  s.ans[PL_ASK_HOLD] = N;
  v = run(copy_in(PAGELOCK_MODE_AUTO, STAGE_MIN - 1), &s);
  assert_int_equal(v.kind, PL_ROUTE_PASS_CUT);
  assert_int_equal(v.why, PAGELOCK_WHY_SMALL);
  asked(&s, PL_ASK_ANY, PL_ASK_HOLD, END);
}

static void test_empty_copy(void **state) {
  (void)state;
  static const long modes[] = {PAGELOCK_MODE_REGISTER, PAGELOCK_MODE_AUTO};
  for (unsigned m = 0; m < 2; m++) {
    script s = {0};
    pl_route v = run(copy_in(modes[m], 0), &s);
    assert_int_equal(v.kind, PL_ROUTE_PASS_CUT);
    assert_int_equal(v.why, PAGELOCK_WHY_SMALL);
    asked(&s, END);
  }
}

/* ---- register and auto: the allocation -------------------------------------- */

/* What the route does with a copy no registration covers, by the answer
 * about its allocation: staged when large, passed through (cut) when
 * small, the staging engine's refusal cut too. */
static void test_span(void **state) {
  (void)state;
  struct {
    uint8_t span, why;
  } rows[] = {{PL_SPAN_UNTRACKED, PAGELOCK_WHY_UNTRACKED},
              {PL_SPAN_SHARED, PAGELOCK_WHY_SHARED},
              {PL_SPAN_REFUSED, PAGELOCK_WHY_FAILED},
              {PL_SPAN_EDGE, PAGELOCK_WHY_EDGE}};
  static const long modes[] = {PAGELOCK_MODE_REGISTER, PAGELOCK_MODE_AUTO};
  for (unsigned m = 0; m < 2; m++)
    for (unsigned i = 0; i < 4; i++)
      for (int big = 0; big < 2; big++) {
        /* Register mode asks for small copies too; auto only for large. */
        if (modes[m] == PAGELOCK_MODE_AUTO && !big) continue;
        script s = {.ans = {[PL_ASK_HOLD] = N, [PL_ASK_SPAN] = rows[i].span}};
        pl_route v = run(copy_in(modes[m], big ? 64 * MB : 64 << 10), &s);
        assert_int_equal(v.kind, big ? PL_ROUTE_STAGE : PL_ROUTE_PASS_CUT);
        assert_int_equal(v.fallback, PL_ROUTE_PASS_CUT);
        assert_int_equal(v.why, rows[i].why);
        assert_false(v.request);
        asked(&s, PL_ASK_HOLD, PL_ASK_SPAN, END);
      }
}

/* ---- register and auto: a registration asked for ----------------------------- */

/* register: the first copy asks for its buffer's registration, once it is
 * done (request), and is staged meanwhile. */
static void test_register_asks(void **state) {
  (void)state;
  script s = {.ans = {[PL_ASK_HOLD] = N,
                      [PL_ASK_SPAN] = PL_SPAN_IN,
                      [PL_ASK_BUSY] = N,
                      [PL_ASK_CTX] = Y,
                      [PL_ASK_CAPTURE] = N,
                      [PL_ASK_ROOM] = Y}};
  pl_route v = run(copy_in(PAGELOCK_MODE_REGISTER, 8 * MB), &s);
  assert_int_equal(v.kind, PL_ROUTE_STAGE);
  assert_int_equal(v.fallback, PL_ROUTE_PASS_CUT);
  assert_int_equal(v.why, PAGELOCK_WHY_PENDING);
  assert_true(v.request);
  /* No heat in register mode. */
  asked(&s, PL_ASK_HOLD, PL_ASK_SPAN, PL_ASK_BUSY, PL_ASK_CTX, PL_ASK_CAPTURE, PL_ASK_ROOM, END);
}

/* auto: cold, then hot; the reasons it is not asked for. */
static void test_auto_heat_context_capture_budget(void **state) {
  (void)state;
  struct {
    uint8_t hot, ctx, capture, room;
    uint8_t why;
    bool request;
    unsigned questions; /* after HOLD, SPAN, BUSY */
  } rows[] = {
      {N, 0, 0, 0, PAGELOCK_WHY_COLD, false, 1},    {Y, N, 0, 0, PAGELOCK_WHY_FAILED, false, 2},
      {Y, Y, Y, 0, PAGELOCK_WHY_CAPTURE, false, 3}, {Y, Y, N, N, PAGELOCK_WHY_BUDGET, false, 4},
      {Y, Y, N, Y, PAGELOCK_WHY_PENDING, true, 4},
  };
  static const uint8_t order[] = {PL_ASK_HOT, PL_ASK_CTX, PL_ASK_CAPTURE, PL_ASK_ROOM};
  for (unsigned i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    script s = {.ans = {[PL_ASK_HOLD] = N,
                        [PL_ASK_SPAN] = PL_SPAN_IN,
                        [PL_ASK_BUSY] = N,
                        [PL_ASK_HOT] = rows[i].hot,
                        [PL_ASK_CTX] = rows[i].ctx,
                        [PL_ASK_CAPTURE] = rows[i].capture,
                        [PL_ASK_ROOM] = rows[i].room}};
    pl_route v = run(copy_in(PAGELOCK_MODE_AUTO, 64 * MB), &s);
    assert_int_equal(v.kind, PL_ROUTE_STAGE);
    assert_int_equal(v.why, rows[i].why);
    assert_int_equal(v.request, rows[i].request);
    assert_int_equal(s.n, 3 + rows[i].questions);
    assert_int_equal(s.asked[0], PL_ASK_HOLD);
    assert_int_equal(s.asked[1], PL_ASK_SPAN);
    assert_int_equal(s.asked[2], PL_ASK_BUSY);
    for (unsigned q = 0; q < rows[i].questions; q++) assert_int_equal(s.asked[3 + q], order[q]);
  }
  /* Small under auto with a registration elsewhere: no heat counted. */
  script s = {.ans = {[PL_ASK_ANY] = Y, [PL_ASK_HOLD] = N}};
  pl_route v = run(copy_in(PAGELOCK_MODE_AUTO, 64 << 10), &s);
  assert_int_equal(v.why, PAGELOCK_WHY_SMALL);
  asked(&s, PL_ASK_ANY, PL_ASK_HOLD, END);
}

/* ---- a registration being made ------------------------------------------------- */

/* A copy of PL_FOLLOW_MIN or more follows its pieces if the first come in
 * time; a smaller one, or one they did not come for, is staged or passed
 * beside it. */
static void test_follow(void **state) {
  (void)state;
  script s = {
      .ans = {
          [PL_ASK_HOLD] = N, [PL_ASK_SPAN] = PL_SPAN_IN, [PL_ASK_BUSY] = Y, [PL_ASK_FOLLOW] = Y}};
  pl_route v = run(copy_in(PAGELOCK_MODE_AUTO, PL_FOLLOW_MIN), &s);
  assert_int_equal(v.kind, PL_ROUTE_REGISTER);
  assert_int_equal(v.why, PAGELOCK_WHY_NONE);
  asked(&s, PL_ASK_HOLD, PL_ASK_SPAN, PL_ASK_BUSY, PL_ASK_FOLLOW, END);

  s.ans[PL_ASK_FOLLOW] = N;
  s.n = 0;
  v = run(copy_in(PAGELOCK_MODE_REGISTER, 64 * MB), &s);
  assert_int_equal(v.kind, PL_ROUTE_STAGE);
  assert_int_equal(v.why, PAGELOCK_WHY_PENDING);
  assert_false(v.request);
  asked(&s, PL_ASK_HOLD, PL_ASK_SPAN, PL_ASK_BUSY, PL_ASK_FOLLOW, END);

  /* Below PL_FOLLOW_MIN: no wait for the pieces. */
  s.n = 0;
  v = run(copy_in(PAGELOCK_MODE_AUTO, PL_FOLLOW_MIN - PG), &s);
  assert_int_equal(v.kind, PL_ROUTE_STAGE);
  assert_int_equal(v.why, PAGELOCK_WHY_PENDING);
  asked(&s, PL_ASK_HOLD, PL_ASK_SPAN, PL_ASK_BUSY, END);
  s.n = 0;
  v = run(copy_in(PAGELOCK_MODE_REGISTER, 64 << 10), &s);
  assert_int_equal(v.kind, PL_ROUTE_PASS_CUT);
  assert_int_equal(v.why, PAGELOCK_WHY_PENDING);
  asked(&s, PL_ASK_HOLD, PL_ASK_SPAN, PL_ASK_BUSY, END);
}

/* A copy over a live registration goes through it, whatever its size,
 * and asks nothing else. */
static void test_held(void **state) {
  (void)state;
  static const uint64_t sizes[] = {64 << 10, STAGE_MIN, 64 * MB};
  static const long modes[] = {PAGELOCK_MODE_REGISTER, PAGELOCK_MODE_AUTO};
  for (unsigned m = 0; m < 2; m++)
    for (unsigned i = 0; i < 3; i++) {
      script s = {.ans = {[PL_ASK_ANY] = Y, [PL_ASK_HOLD] = Y}};
      pl_route_in in = copy_in(modes[m], sizes[i]);
      in.dir = PAGELOCK_DIR_D2H;
      pl_route v = run(in, &s);
      assert_int_equal(v.kind, PL_ROUTE_REGISTER);
      assert_int_equal(v.why, PAGELOCK_WHY_NONE);
      assert_false(v.request);
      assert_int_equal(s.asked[s.n - 1], PL_ASK_HOLD);
    }
}

/* ---- the re-entry guard ---------------------------------------------------- */

/* Pairs nest and return the depth to where it was; a thread of the
 * shim's own stays inside for good. */
static void test_guard(void **state) {
  (void)state;
  int d0 = pl_shim_depth();
  assert_false(pl_shim_inside());
  pl_shim_enter();
  pl_shim_enter();
  assert_true(pl_shim_inside());
  assert_int_equal(pl_shim_depth(), d0 + 2);
  pl_shim_leave();
  pl_shim_leave();
  assert_int_equal(pl_shim_depth(), d0);
  assert_false(pl_shim_inside());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_not_pageable_or_not_host_device),
      cmocka_unit_test(test_shaped),
      cmocka_unit_test(test_observe_and_stage),
      cmocka_unit_test(test_auto_small_alone),
      cmocka_unit_test(test_auto_small_with_registrations),
      cmocka_unit_test(test_empty_copy),
      cmocka_unit_test(test_span),
      cmocka_unit_test(test_register_asks),
      cmocka_unit_test(test_auto_heat_context_capture_budget),
      cmocka_unit_test(test_follow),
      cmocka_unit_test(test_held),
      cmocka_unit_test(test_guard),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
