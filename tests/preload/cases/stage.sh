# shellcheck shell=bash
# Preload cases: the staging engine end to end (PAGELOCK_MODE=stage): bytes, a
# device reset, copies held behind a kernel, the report.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# The staging engine end to end, under the real preload: byte-exact round
# trips of every size class with a small pool (so chunks recycle and waits
# happen), both device-to-host modes.  Nothing may be printed.
stage_e2e() { # D2H_MODE
  local d="$T/se_$1"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_MODE=stage PAGELOCK_POOL_SIZE=8M PAGELOCK_CHUNK_SIZE=1M PAGELOCK_STAGE_MIN=64K \
    PAGELOCK_D2H=$1 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_stage_e2e" >"$d/out" 2>"$d/err" ||
    { cat "$d/out" "$d/err" >&2; fail "stage_e2e ($1) failed"; return; }
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --failed 0 --complete >/dev/null || fail "trace incomplete"
}
case_stage_e2e() { stage_e2e sync; }
case_stage_e2e_async() { stage_e2e async; }

# A program that goes on after cudaDeviceReset: the context takes the
# pool's events and slab, and the registrations of auto, with it.  Three
# rounds, each ending in a reset: bytes exact, nothing printed, every
# round staged in full (no copy falls back), the pool within its bound,
# and under auto each round's buffers registered again and nothing left
# registered at exit.  Before the fix the second round used an event of
# the first context (fakecuda aborts; a crash on the GPU).  A wait for a
# chunk may take a second here: on a loaded 2-core machine the default
# 2 ms ran out, and a fallback would hide a pool that never came back.
stage_reset() { # MODE
  local d="$T/rs_$1"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_MODE=$1 PAGELOCK_POOL_SIZE=8M PAGELOCK_CHUNK_SIZE=1M PAGELOCK_STAGE_MIN=64K \
    PAGELOCK_WAIT_US=1000000 \
    PAGELOCK_OUTPUT="$d/t.%p.trace" timeout 120 "$B/test_stage_e2e" --reset 3 >"$d/out" 2>"$d/err" ||
    { cat "$d/out" "$d/err" >&2; fail "stage_e2e --reset under $1 failed"; return; }
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  grep -q '^result mode=reset rounds=3 wrong=0$' "$d/out" || fail "no verdict: $(cat "$d/out")" || return
  "$B/trace_check" "$d"/t.*.trace --failed 0 --complete >/dev/null || fail "trace incomplete" || return
  "$B/pagelock" report "$d"/t.*.trace >"$d/report" 2>&1
  grep -q '^staging: .* 0 fallbacks, .*pool high water [0-9.]* MiB of 8.0 MiB' "$d/report" ||
    fail "staging fell back or outgrew its bound: $(grep '^staging' "$d/report")" || return
  # An allocator preloaded before the shim hides malloc: then auto stages
  # every copy, as stage does.
  if [ "$1" = auto ] && [ -z "${PL_TEST_PRELOAD_FIRST:-}" ]; then
    grep -q '^registration: 12 ranges registered .* 12 unregistered, 0 evicted, 0 failed; 0 B still registered at exit' "$d/report" ||
      fail "registrations not made again per context: $(grep '^registration' "$d/report")"
  else
    grep -q '^routes: 0 copies passed through (0 B), 126 staged' "$d/report" ||
      fail "not every copy staged: $(grep '^routes' "$d/report")"
  fi
}
case_stage_reset() { stage_reset stage; }
case_auto_reset() { stage_reset auto; }

# Asynchronous device-to-host copies of 2.5 pools queued behind a 300 ms
# kernel (PAGELOCK_D2H=async), after two copies that fill the pool, beside
# a copy on another stream, and on the legacy stream: bytes exact, no byte
# landed while the kernel still ran, the program finishes.  (A copy larger
# than the pool waits for chunks that only the kernel's end frees, then
# goes native: docs/bench/2026-11-22-deferring-async-d2h.md says why it cannot be deferred behind a
# blocking host function.)
case_stage_held() {
  local d="$T/sh"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_MODE=stage PAGELOCK_POOL_SIZE=8M PAGELOCK_CHUNK_SIZE=1M PAGELOCK_STAGE_MIN=64K \
    PAGELOCK_D2H=async PAGELOCK_OUTPUT="$d/t.%p.trace" timeout 60 "$B/test_stage_e2e" --held 20 2 >"$d/out" 2>"$d/err" ||
    { cat "$d/out" "$d/err" >&2; fail "stage_e2e --held failed"; return; }
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  grep -q '^result mode=held .* early=0 wrong=0$' "$d/out" || fail "no verdict: $(cat "$d/out")" || return
  "$B/trace_check" "$d"/t.*.trace --failed 0 --complete >/dev/null || fail "trace incomplete"
}

# A staged run's report names what was staged, with the engine's counters.
case_stage_report() {
  local d="$T/sr"; mkdir -p "$d"
  PAGELOCK_STAGE_MIN=64K "$B/pagelock" run --mode stage -o "$d/t.%p.trace" -- "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed under stage" || return
  grep -q "^staging: .* staged" "$d/err" || fail "no staging counters in the report: $(cat "$d/err")" || return
  grep -q "pageable copies (.*) were staged through pinned memory" "$d/err" || fail "staged copies not reported"
}
