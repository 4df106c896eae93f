/* route.h - the one route decision: which way a copy goes, and why a
 * pageable one is not registered.
 *
 * observe: every copy passes through.  stage: a pageable 1D copy of at
 * least PAGELOCK_STAGE_MIN goes through the pinned pool.  register and
 * auto: a pageable 1D copy over a registration goes through it; any other
 * counts towards its allocation's registration (auto: once it is hot) and
 * is staged (PAGELOCK_STAGE_MIN and more) or passes through meanwhile, cut
 * where a registration may begin or end.  A copy that is not pageable, not
 * between host and device or not one range (2D, 3D, a batch) passes
 * through.
 *
 * A pure function: it calls no driver, takes no lock, reads no clock.  It
 * is handed the classified copy and what the engines have answered about
 * it so far.  Some answers cost something or change something (a hold on
 * a registration, heat added to an allocation, evictions, a wait for a
 * registration's first pieces), so they are asked only when the decision
 * needs them, in its order: the decision says what it must know next
 * (`ask`), the caller has the engines answer it (pl_autopin_answer) and
 * decides again (pl_copy_route).  The engines then only execute the route
 * (copy.c). */
#ifndef PL_ROUTE_H
#define PL_ROUTE_H

#include "pl_internal.h"

/* The routes. */
enum pl_route_kind {
  PL_ROUTE_PASS = 0,     /* the native call, as it is */
  PL_ROUTE_PASS_CUT = 1, /* the native call, cut at the edges of any registration that may
                            cover its bytes meanwhile (pl_pinreg_native) */
  PL_ROUTE_STAGE = 2,    /* through the pinned pool (pl_stage_copy); `fallback` when the
                            staging engine declines */
  PL_ROUTE_REGISTER = 3, /* through the registration held (pl_autopin_copy) */
};

/* What the decision may ask of the engines (pl_autopin_answer), in the
 * order it asks. */
enum pl_route_ask {
  PL_ASK_NONE = 0,
  PL_ASK_ANY,     /* a registration is live or in flight anywhere */
  PL_ASK_HOLD,    /* one covers the copy's first bytes: held when it does */
  PL_ASK_SPAN,    /* the tracked allocation of the host bytes (enum pl_route_span) */
  PL_ASK_BUSY,    /* a registration of its span is being made or undone */
  PL_ASK_FOLLOW,  /* that registration's first pieces came in time: held when they did */
  PL_ASK_HOT,     /* auto: the copy's bytes, added to its allocation's heat, make it hot */
  PL_ASK_CTX,     /* a context is current */
  PL_ASK_CAPTURE, /* the copy's stream is capturing */
  PL_ASK_ROOM,    /* the registration budget has room for the span (evicting) */
};

/* An answer: not asked yet, no, yes. */
enum { PL_ANS_UNASKED = 0, PL_ANS_NO = 1, PL_ANS_YES = 2 };

/* PL_ASK_SPAN's answer: the copy and the part of its allocation a
 * registration would cover (pl_reg_span). */
enum pl_route_span {
  PL_SPAN_UNASKED = 0,
  PL_SPAN_UNTRACKED, /* none the shim saw made and will see released (or a mapping
                         while another allocator serves malloc) */
  PL_SPAN_SHARED,    /* a shared or file-backed mapping */
  PL_SPAN_REFUSED,   /* the driver refused to register it before */
  PL_SPAN_EDGE,      /* the copy lies outside the part a registration would cover */
  PL_SPAN_IN,        /* the copy lies in that part */
};

/* A copy of at least this much over a registration being made follows its
 * pieces rather than being staged beside it (pl_pinreg_follow). */
#define PL_FOLLOW_MIN ((size_t)4 << 20)

typedef struct pl_route_in {
  /* The copy, classified. */
  long mode;          /* PAGELOCK_MODE_* */
  uint8_t dir;        /* pagelock_dir */
  uint8_t host;       /* the host side's memory kind */
  bool shaped;        /* 2D, 3D or a batch: not one contiguous range */
  uintptr_t host_ptr; /* its host bytes' first, for a 1D copy */
  size_t page;        /* the page size */
  uint64_t bytes;     /* of the copy */
  uint64_t stage_min; /* PAGELOCK_STAGE_MIN */
  /* The engines' answers so far (PL_ANS_*; span: PL_SPAN_*). */
  uint8_t any, hold, span, busy, follow, hot, ctx, capture, room;
} pl_route_in;

typedef struct pl_route {
  uint8_t kind;     /* PL_ROUTE_*, once ask is PL_ASK_NONE */
  uint8_t fallback; /* PL_ROUTE_STAGE: the route when the staging engine declines */
  uint8_t why;      /* pagelock_why */
  uint8_t ask;      /* PL_ASK_*: answer it and decide again */
  bool request;     /* ask for a registration of the span once the copy is done
                       (pl_autopin_after): not beside it, where the driver would hold
                       the copy's own DMAs back for every piece */
} pl_route;

static inline pl_route pl_route_ask_(uint8_t what) { return (pl_route){.ask = what}; }
static inline pl_route pl_route_go_(uint8_t kind, uint8_t why) {
  return (pl_route){.kind = kind, .why = why};
}

/* The route of the copy `in` describes, or the next question (.ask).
 * Inline, and whole: every copy that takes the whole way decides, and a
 * call, its input in memory, cost ~50 instructions more than the checks
 * themselves (callgrind over fakecuda, PAGELOCK_REPEATS=each). */
static PL_ALWAYS_INLINE pl_route pl_route_decide(const pl_route_in *in) {
  if (in->host != PAGELOCK_MEM_PAGEABLE ||
      (in->dir != PAGELOCK_DIR_H2D && in->dir != PAGELOCK_DIR_D2H))
    return pl_route_go_(PL_ROUTE_PASS, PAGELOCK_WHY_NONE);
  bool registers = in->mode == PAGELOCK_MODE_REGISTER || in->mode == PAGELOCK_MODE_AUTO;
  if (in->shaped)
    return pl_route_go_(PL_ROUTE_PASS, registers ? PAGELOCK_WHY_SHAPE : PAGELOCK_WHY_MODE);
  bool big = in->bytes >= in->stage_min;
  if (!registers) {
    pl_route r = pl_route_go_(
        in->mode == PAGELOCK_MODE_STAGE && big ? PL_ROUTE_STAGE : PL_ROUTE_PASS, PAGELOCK_WHY_MODE);
    r.fallback = PL_ROUTE_PASS; /* no registration exists to cut at */
    return r;
  }
  bool hot_only = in->mode == PAGELOCK_MODE_AUTO;
  /* Small under auto, and no registration anywhere for them to run over:
   * most of a program's copies.  Inside one page no edge of one can fall
   * (edges are page boundaries), so the call needs no cutting; a
   * registration made while it runs is waited for after it
   * (pl_autopin_settle). */
  if (in->bytes == 0) return pl_route_go_(PL_ROUTE_PASS_CUT, PAGELOCK_WHY_SMALL);
  if (hot_only && !big) {
    if (in->any == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_ANY);
    if (in->any == PL_ANS_NO) {
      uintptr_t first = in->host_ptr & ~(in->page - 1),
                last = (in->host_ptr + in->bytes - 1) & ~(in->page - 1);
      return pl_route_go_(first == last ? PL_ROUTE_PASS : PL_ROUTE_PASS_CUT, PAGELOCK_WHY_SMALL);
    }
  }
  if (in->hold == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_HOLD);
  if (in->hold == PL_ANS_YES) return pl_route_go_(PL_ROUTE_REGISTER, PAGELOCK_WHY_NONE);
  if (hot_only && !big) return pl_route_go_(PL_ROUTE_PASS_CUT, PAGELOCK_WHY_SMALL);
  /* Not registered: what it would take, staged or passed through meanwhile. */
  pl_route r = {.kind = big ? PL_ROUTE_STAGE : PL_ROUTE_PASS_CUT, .fallback = PL_ROUTE_PASS_CUT};
  switch (in->span) {
    case PL_SPAN_UNASKED: return pl_route_ask_(PL_ASK_SPAN);
    case PL_SPAN_UNTRACKED: r.why = PAGELOCK_WHY_UNTRACKED; return r;
    case PL_SPAN_SHARED: r.why = PAGELOCK_WHY_SHARED; return r;
    case PL_SPAN_REFUSED: r.why = PAGELOCK_WHY_FAILED; return r;
    case PL_SPAN_EDGE: r.why = PAGELOCK_WHY_EDGE; return r; /* its partial pages only */
    default: break;
  }
  if (in->busy == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_BUSY);
  if (in->busy == PL_ANS_YES) {
    /* Asked for by an earlier copy (the copy that asks is staged, so that
     * a buffer's first copy, the only one of a buffer allocated per step,
     * is as fast as under stage): a large copy follows its pieces as they
     * are made, if the first come in time. */
    if (in->bytes >= PL_FOLLOW_MIN) {
      if (in->follow == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_FOLLOW);
      if (in->follow == PL_ANS_YES) return pl_route_go_(PL_ROUTE_REGISTER, PAGELOCK_WHY_NONE);
    }
    r.why = PAGELOCK_WHY_PENDING;
    return r;
  }
  if (hot_only) {
    if (in->hot == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_HOT);
    if (in->hot == PL_ANS_NO) {
      r.why = PAGELOCK_WHY_COLD;
      return r;
    }
  }
  if (in->ctx == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_CTX);
  if (in->ctx == PL_ANS_NO) {
    r.why = PAGELOCK_WHY_FAILED; /* no context: the native call reports it */
    return r;
  }
  if (in->capture == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_CAPTURE);
  if (in->capture == PL_ANS_YES) {
    r.why = PAGELOCK_WHY_CAPTURE; /* never registers during a capture */
    return r;
  }
  if (in->room == PL_ANS_UNASKED) return pl_route_ask_(PL_ASK_ROOM);
  if (in->room == PL_ANS_NO) {
    r.why = PAGELOCK_WHY_BUDGET;
    return r;
  }
  r.why = PAGELOCK_WHY_PENDING;
  r.request = true;
  return r;
}

#endif
