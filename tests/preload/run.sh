#!/usr/bin/env bash
# Preload tests: the shim over a CUDA (fake in CI, real on the GPU machine),
# loaded with LD_PRELOAD exactly as users run it.
#   run.sh BUILD_DIR CASE...     (no CASE: all of them)
# Prints one line per case and "N passed, M failed" last; exit 1 on failure.
set -u
. "$(dirname "$0")/cuda_env.sh"
# PL_TEST_PRELOAD_FIRST / PL_TEST_PRELOAD_LAST: one more library (an
# allocator: tests/preload/alloc_matrix.sh) preloaded before or after the
# shim in every case.  LIB is the shim, SHIM the LD_PRELOAD list the cases
# give; every other program runs with the library preloaded too, as under a
# user's LD_PRELOAD=libjemalloc.so.2 (`pagelock run` puts the shim first).
LIB="$B/libpagelock.so"
# The demo built for this CUDA (cmake/pagelock_demo.cmake).
DEMO="$B/pagelock-demo"
[ "$SIM" = 1 ] && DEMO="$B/fakecuda/pagelock-demo"
SHIM="${PL_TEST_PRELOAD_FIRST:+$PL_TEST_PRELOAD_FIRST:}$LIB${PL_TEST_PRELOAD_LAST:+:$PL_TEST_PRELOAD_LAST}"
EXTRA=${PL_TEST_PRELOAD_FIRST:-}
[ -z "${PL_TEST_PRELOAD_LAST:-}" ] || EXTRA="${EXTRA:+$EXTRA:}$PL_TEST_PRELOAD_LAST"
[ -z "$EXTRA" ] || export LD_PRELOAD="$EXTRA"
# Reports are read a sentence a line: wide enough that none wraps.
export COLUMNS=1000
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0; fail=0

# each case prints why it failed on stderr and returns non-zero
fail() { echo "    $*" >&2; return 1; }

case_observe_counts() {
  local d="$T/oc"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_copies" >"$d/out" 2>"$d/err" || { cat "$d/err" >&2; fail "copies exited non-zero"; return; }
  local f; f=$(ls "$d"/t.*.trace 2>/dev/null)
  [ "$(echo "$f" | wc -w)" = 1 ] || fail "expected one trace file, got: $f" || return
  # the program prints its own counts: the trace must agree exactly
  eval "$(sed 's/ /;/g' "$d/out")"
  "$B/trace_check" "$f" --pageable "$pageable" --pageable-bytes "$pageable_bytes" \
     --pinned "$pinned" --pinned-bytes "$pinned_bytes" --failed 0 --complete --stacks --simulated $SIM >&2 || return
  grep -q "pagelock: trace written to $f" "$d/err" || fail "run did not name the trace file" || return
  "$B/pagelock" report "$f" >"$d/report" || fail "report failed" || return
  local shown; shown=$(awk '$2 == "pageable" && ($1 == "H2D" || $1 == "D2H") { n += $3 } END { print n + 0 }' "$d/report")
  [ "$shown" = "$pageable" ] || fail "report shows $shown pageable copies, the program made $pageable" || return
  grep -q "copies.c" "$d/report" || grep -q "roundtrip" "$d/report" || fail "report does not name the call site (roundtrip in copies.c)"
}

case_plain_preload() {
  local d="$T/pp"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/x.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  [ "$(ls "$d" | grep -c '^x\..*\.trace$')" = 1 ] || fail "expected one trace from a plain LD_PRELOAD run" || return
  [ ! -s "$d/err" ] || fail "shim printed to stderr in a clean run: $(cat "$d/err")"
}

case_non_cuda_program() {
  local d="$T/nc"; mkdir -p "$d"
  (cd "$d" && sh -c 'echo hello; ls /' >"$T/nc.want" 2>&1)
  (cd "$d" && LD_PRELOAD="$SHIM" sh -c 'echo hello; ls /' >"$T/nc.got" 2>&1) || fail "sh failed under the shim" || return
  cmp -s "$T/nc.want" "$T/nc.got" || fail "output differs under the shim" || return
  [ -z "$(ls -A "$d")" ] || fail "a program without CUDA left files: $(ls -A "$d")"
}

case_bad_env() {
  local d="$T/be"; mkdir -p "$d"
  PAGELOCK_MODE=bogus PAGELOCK_MOED=x PAGELOCK_BACKTRACE_DEPTH=99 LD_PRELOAD="$SHIM" \
    PAGELOCK_OUTPUT="$d/t.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "program failed with bad settings" || return
  grep -qx "pagelock: invalid PAGELOCK_MODE='bogus' (valid: observe,stage,register,auto,off); using 'observe'" "$d/err" || fail "no clear line for a bad PAGELOCK_MODE: $(cat "$d/err")" || return
  grep -q "^pagelock: unknown variable PAGELOCK_MOED" "$d/err" || fail "typo PAGELOCK_MOED not warned" || return
  grep -q "^pagelock: invalid PAGELOCK_BACKTRACE_DEPTH='99' (valid: an integer from 0 to 16)" "$d/err" || fail "bad depth not reported" || return
  [ "$(grep -c . "$d/err")" = 3 ] || fail "expected exactly 3 lines on stderr, got: $(cat "$d/err")" || return
  grep -q '^pageable=' "$d/out" || fail "program output lost" || return
  [ -f "$d/t.trace" ] || fail "fallback to observe did not trace"
}

case_no_clobber() {
  local d="$T/nc2"; mkdir -p "$d"
  echo precious >"$d/t.trace"
  echo target >"$d/target"; ln -s "$d/target" "$d/t.1.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.trace" "$B/test_copies" >/dev/null 2>"$d/err" || fail "program failed" || return
  [ "$(cat "$d/t.trace")" = precious ] || fail "existing file overwritten" || return
  [ "$(cat "$d/target")" = target ] || fail "wrote through a symlink" || return
  [ -f "$d/t.2.trace" ] || fail "no suffixed trace (the number goes before .trace): $(ls "$d")" || return
  "$B/trace_check" "$d/t.2.trace" --complete >/dev/null || fail "suffixed trace incomplete"
  local mode; mode=$(stat -c %a "$d/t.2.trace")
  [ "$mode" = "$(printf '%o' $(( 0666 & ~$(umask) )))" ] || fail "trace mode $mode does not follow the umask $(umask)"
}

case_unwritable_output() {
  local d="$T/uw"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/nope/t.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "program failed when the trace could not be written" || return
  [ "$(grep -c "^pagelock: cannot create trace file '$d/nope/t.trace'" "$d/err")" = 1 ] || fail "expected one clear line, got: $(cat "$d/err")" || return
  grep -q '^pageable=' "$d/out" || fail "program output lost"
}

case_exit_status() {
  "$B/pagelock" run -o "$T/es.%p.trace" -- "$B/test_copies" >/dev/null 2>&1 || fail "clean run returned non-zero" || return
  "$B/pagelock" run -- sh -c 'exit 7' >/dev/null 2>&1; [ $? = 7 ] || fail "exit status 7 not passed through"
}

case_mode_off() {
  local d="$T/off"; mkdir -p "$d"
  PAGELOCK_MODE=off LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.trace" "$B/test_copies" >/dev/null 2>&1 || fail "program failed in mode off" || return
  [ ! -e "$d/t.trace" ] || fail "mode off wrote a trace"
}

# exact counts of a test_copies-like program run under `pagelock run`
expect_copies() { # NAME BINARY [trace_check options...]
  local d="$T/$1" bin="$2"; shift 2; mkdir -p "$d"
  [ -x "$bin" ] || { echo "    (no $bin in this build: skipped)" >&2; return 0; }
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$bin" >"$d/out" 2>"$d/err" || { cat "$d/err" >&2; fail "$bin exited non-zero"; return; }
  local pageable= pageable_bytes= pinned= pinned_bytes=
  eval "$(sed 's/ /;/g' "$d/out")"
  local f; f=$(ls "$d"/t.*.trace)
  set -- --failed 0 --complete --simulated $SIM "$@"
  [ -n "$pageable" ] && set -- --pageable "$pageable" "$@"
  [ -n "$pageable_bytes" ] && set -- --pageable-bytes "$pageable_bytes" "$@"
  [ -n "$pinned" ] && set -- --pinned "$pinned" --pinned-bytes "$pinned_bytes" "$@"
  "$B/trace_check" "$f" "$@" >&2
}

case_reach_static_cudart() { expect_copies static "$B/test_copies_static" --api-min cuMemcpyHtoDAsync_v2=10 --api-min cuMemcpy=2; }
# A static runtime lives inside the program: its functions (the API's
# cuda*, the rest named libcudart_static_<hash> as in the real archive)
# are looked past, and the report names the program's own functions and
# lines for every copy and allocation, under observe and auto.
case_static_sites() {
  local d="$T/ss" m; mkdir -p "$d"
  for m in observe auto; do
    "$B/pagelock" run --mode=$m -o "$d/$m.trace" -- "$B/test_static_sites" >"$d/out" 2>"$d/err" ||
      fail "--mode=$m: the program failed: $(cat "$d/out" "$d/err")" || return
    "$B/pagelock" report --format json "$d/$m.trace" >"$d/$m.json" 2>"$d/err" ||
      fail "--mode=$m: report failed: $(cat "$d/err")" || return
    python3 - "$d/$m.json" "$(cat "$d/out")" "$m" <<'PY' >&2 || fail "--mode=$m: sites not named" || return
import json, sys
lines = dict(kv.split("=") for kv in sys.argv[2].split())
p = json.load(open(sys.argv[1]))["processes"][0]
def named(rows):
    return sorted((r["copies"], r["function"], (r["file"] or "").rsplit("/", 1)[-1], r["line"]) for r in rows)
want_calls = [(4, "download_result", "static_sites.c", int(lines["download_line"])),
              (4, "upload_batch", "static_sites.c", int(lines["upload_line"]))]
want_allocs = [(8, "make_batch", "static_sites.c", int(lines["alloc_line"]))]
ok = named(p["call_sites"]) == want_calls and named(p["alloc_sites"]) == want_allocs
if not ok:
    print("    %s: call sites %s, want %s" % (sys.argv[3], named(p["call_sites"]), want_calls))
    print("    %s: allocation sites %s, want %s" % (sys.argv[3], named(p["alloc_sites"]), want_allocs))
sys.exit(0 if ok else 1)
PY
  done
}
# A native frame is named by the symbol or DWARF function that covers it:
# a static function from .symtab (with and without DWARF), from the
# debuglink file of a stripped program, and with neither the program and
# the offset, never the exported function just before it (the nearest
# exported symbol, which addr2line names).
case_native_names() {
  local d="$T/nn" v; mkdir -p "$d"
  command -v strip >/dev/null && command -v objcopy >/dev/null ||
    { echo "    (no strip/objcopy: skipped)" >&2; return 0; }
  cp "$B/test_native_names" "$d/full"
  strip --strip-debug -o "$d/nodwarf" "$d/full"
  objcopy --only-keep-debug "$d/full" "$d/linked.debug"
  strip --strip-all -o "$d/linked" "$d/full"
  objcopy --add-gnu-debuglink="$d/linked.debug" "$d/linked"
  objcopy --only-keep-debug "$d/full" "$d/bare.debug"
  strip --strip-all -o "$d/bare" "$d/full"
  objcopy --add-gnu-debuglink="$d/bare.debug" "$d/bare"
  rm "$d/bare.debug"
  for v in full nodwarf linked bare; do
    "$B/pagelock" run -o "$d/$v.trace" -- "$d/$v" >"$d/$v.out" 2>"$d/err" ||
      fail "$v: the program failed: $(cat "$d/err")" || return
    "$B/pagelock" report --format json "$d/$v.trace" >"$d/$v.json" 2>"$d/err" ||
      fail "$v: report failed: $(cat "$d/err")" || return
  done
  python3 - "$d" <<'PY' >&2 || fail "native frames misnamed"
import json, re, sys
d = sys.argv[1]
line = int(open(d + "/full.out").read().split("=")[1])
ok = True
for v, func, src in [("full", "copy_from_static", line), ("nodwarf", "copy_from_static", None),
                     ("linked", "copy_from_static", line), ("bare", None, None)]:
    rows = json.load(open("%s/%s.json" % (d, v)))["processes"][0]["call_sites"]
    got = [(r["copies"], r["function"], r["line"] or None, r["site"]) for r in rows]
    good = len(got) == 1 and got[0][:3] == (3, func, src)
    if v == "bare":
        good = good and re.fullmatch(r"bare\+0x[0-9a-f]+", got[0][3]) is not None
    if not good:
        print("    %s: %s, want 3 copies at %s line %s" % (v, got, func, src))
        ok = False
sys.exit(0 if ok else 1)
PY
}
# bandwidthTest --memory=pageable's pattern beside the static runtime
# (tests/gpu/corpus/bandwidth_like.cu): under auto, every pageable copy has
# its allocation site (the table once printed its header and no rows), and
# the copies made through a registration are counted as registered, not as
# staged chunks, in the join and the bandwidth rows.
case_static_bandwidth() {
  local d="$T/sb" m; mkdir -p "$d"
  for m in observe auto; do
    # every GPU op traced: the join is what is checked
    PAGELOCK_CUPTI_MAX_RATE=10000000 "$B/pagelock" run --mode=$m -o "$d/$m.trace" -- \
      "$B/test_bandwidth_like" 10 16 >"$d/out" 2>"$d/err" ||
      fail "--mode=$m: the program failed: $(cat "$d/out" "$d/err")" || return
    "$B/pagelock" report --format json "$d/$m.trace" >"$d/$m.json" 2>"$d/err" ||
      fail "--mode=$m: report failed: $(cat "$d/err")" || return
    python3 - "$d/$m.json" "$m" <<'PY' >&2 || fail "--mode=$m: sites or routes wrong" || return
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
bad = []
pageable = p["totals"]["pageable"]["copies"]
if pageable != 60:
    bad.append("pageable copies %d, want 60" % pageable)
for table in ("call_sites", "alloc_sites"):
    got = sorted(((r["function"] or "?").split("(")[0], r["copies"]) for r in p[table])
    want = [("testDeviceToHostTransfer", 30), ("testHostToDeviceTransfer", 30)]
    if got != want:
        bad.append("%s: %s, want %s" % (table, got, want))
if sys.argv[2] == "auto":
    j = p["gpu"]["join"]
    reg = p["totals"]["routes"]["register"]["copies"]
    staged = p["totals"]["routes"]["stage"]["copies"]
    if not reg or j["registered"] != reg or j["linked"] != staged:
        bad.append("join: %d registered, %d staged calls; routes: %d registered, %d staged" %
                   (j["registered"], j["linked"], reg, staged))
    rows = [b for dev in p["gpu"]["devices"] for b in dev["bandwidth"]]
    if not any(b["registered"] for b in rows) or any(b["registered"] and b["staged_chunks"] for b in rows):
        bad.append("bandwidth rows do not name registered copies apart")
for b in bad:
    print("    %s: %s" % (sys.argv[2], b))
sys.exit(1 if bad else 0)
PY
  done
}
case_reach_ptds() { expect_copies ptds "$B/test_copies_ptds" --api-min cuMemcpyHtoDAsync_v2_ptsz=10 --api-min cuMemcpyHtoD_v2_ptds=10 --api-min cuMemcpy_ptds=2; }
case_reach_driver_direct() {
  expect_copies direct "$B/test_driver_direct" --api-min cuMemcpyHtoD_v2=1 --api-min cuMemcpyDtoHAsync_v2=1 \
    --api-min cuMemcpyAsync=1 --api-min cuMemcpy2D_v2=1 --api-min cuMemcpy2DAsync_v2=1 --api-min cuMemcpy3D_v2=1 \
    --api-min cuMemcpyBatchAsync_v2=3 --graph-nodes 2
}
case_reach_dlopen_dlsym() { expect_copies dlopen "$B/test_dlopen_client" --api-min cuMemcpyHtoD_v2=3 --api-min cuMemcpyDtoH_v2=3; }

case_dlsym_rtld_next() {
  "$B/test_next_main" >/dev/null || fail "RTLD_NEXT broken even without the shim" || return
  LD_PRELOAD="$SHIM" "$B/test_next_main" >"$T/next.out" 2>&1 || fail "under the shim: $(cat "$T/next.out")"
}

# A next allocator other than glibc's, whose blocks have nothing readable
# below them: every hook must hand it every request and never look below a
# block.  It maps memory through the shim's mmap hook while holding its
# lock, as jemalloc does, and exits 86 when a hook allocates from there
# (which would deadlock jemalloc); 200 threads at once too.  Without the
# shim first, to tell its own faults from ours.
case_next_allocator() {
  [ -z "$EXTRA" ] || { echo "    (guard_alloc must be the allocator after the shim, not $EXTRA: skipped)" >&2; return 0; }
  LD_PRELOAD="$B/testlib/libguard_alloc.so" "$B/test_guard_main" >/dev/null 2>"$T/ga.err" ||
    fail "broken even without the shim: $(cat "$T/ga.err")" || return
  LD_PRELOAD="$SHIM:$B/testlib/libguard_alloc.so" PAGELOCK_OUTPUT="$T/ga.%p.trace" timeout 60 "$B/test_guard_main" \
    >"$T/ga.out" 2>&1 || fail "under the shim (status $?): $(cat "$T/ga.out")" || return
  LD_PRELOAD="$SHIM:$B/testlib/libguard_alloc.so" timeout 120 "$B/test_alloc_threads" 200 20 \
    >"$T/ga.out" 2>&1 || fail "200 threads under the shim (status $?): $(cat "$T/ga.out")"
}

case_alloc_sites() {
  local d="$T/as"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_copies" >/dev/null 2>&1 || fail "copies failed" || return
  "$B/pagelock" report "$d"/t.*.trace >"$d/report" || fail "report failed" || return
  grep -qi "alloc" "$d/report" || fail "no allocation-site table in the report" || return
  grep -q "main" "$d/report" || fail "the allocation site (main in copies.c) is not named: $(cat "$d/report")"
}

# A program without PIE that takes malloc's address (Debian's python3)
# holds a PLT stub for malloc of its own: the shim's malloc still serves
# it, so no note may say that the program defines malloc, and the buffer's
# allocation site is named.
case_nopie_malloc() {
  [ -z "$EXTRA" ] || { echo "    (an allocator is preloaded too: skipped)" >&2; return 0; }
  local d="$T/np"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.trace" -- "$B/test_nopie_malloc" >"$d/out" 2>"$d/err" ||
    fail "the program failed: $(cat "$d/out" "$d/err")" || return
  "$B/pagelock" report "$d/t.trace" >"$d/report" 2>&1 || fail "report failed: $(cat "$d/report")" || return
  ! grep -q "defines malloc" "$d/report" || fail "false note: $(grep "defines malloc" "$d/report")" || return
  grep -A2 "by allocation site" "$d/report" | grep -q "make_buffer.*nopie_malloc.c" ||
    fail "the allocation site (make_buffer) is not named: $(cat "$d/report")"
}

case_fork_exec() {
  local d="$T/fe"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_fork_exec" "$B/test_copies" 5 >"$d/out" 2>"$d/err" || { cat "$d/err" >&2; fail "fork_exec failed"; return; }
  local n; n=$(ls "$d"/t.*.trace | wc -l)
  [ "$n" = 6 ] || fail "expected 6 traces (parent + 5 exec'd children), got $n" || return
  local exact=0 f
  for f in "$d"/t.*.trace; do
    "$B/trace_check" "$f" --complete >/dev/null 2>&1 || fail "incomplete trace $f" || return
    "$B/trace_check" "$f" --pageable 22 --pinned 20 >/dev/null 2>&1 && exact=$((exact+1))
  done
  [ "$exact" = 5 ] || fail "expected 5 child traces with exact counts, got $exact"
}

case_stress() {
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$T/stress.%p.trace" timeout 120 "$B/test_stress" 3 >"$T/stress.out" 2>&1 || fail "stress: $(cat "$T/stress.out")" || return
  grep -q "registry=consistent" "$T/stress.out" || fail "registry not checked: $(cat "$T/stress.out")"
}

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

# The malloc family under the shim behaves as without it (errno, realloc,
# alignment, failures, mmap/mremap/munmap); checked with and without.
# PAGELOCK_HUGEPAGES: in register and auto modes, under the kernel's
# `madvise` mode, malloc'd blocks of at least 4 MiB that are mappings of
# their own (glibc's mmap'd chunks) get MADV_HUGEPAGE on their 2 MiB-aligned
# interior and nothing outside it (a neighbour's memory); a heap block
# (its advice would outlive it), the program's own mappings (often sparse
# reservations), smaller blocks, observe and stage never; 0 turns it off,
# a larger threshold leaves the 16 MiB blocks be.  Under `always` or `never`
# nothing is advised, nor under another allocator (alloc_matrix.sh): its
# blocks are not glibc's, and the shim registers no mmap'd range then.
case_hugepages() {
  local sys=/sys/kernel/mm/transparent_hugepage/enabled
  [ -r $sys ] || { echo "    (no transparent huge pages in this kernel: skipped)" >&2; return 0; }
  local big="malloc64 malloc16 calloc16 memalign16 realloc32" big32="malloc64 realloc32" m n
  grep -q '\[madvise\]' $sys || { echo "    (THP mode is not madvise: nothing may be advised)" >&2; big= big32=; }
  [ -z "$EXTRA" ] || { echo "    (another allocator preloaded: nothing may be advised)" >&2; big= big32=; }
  hp_run() { # label, then the environment; prints the program's lines
    local label=$1; shift
    env "$@" LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$T/hp.%p.trace" "$B/test_hugepages" >"$T/hp.$label" 2>&1 ||
      fail "$label: $(cat "$T/hp.$label")"
  }
  hp_expect() { # label, the names advised
    local label=$1 adv=" $2 " want got
    for n in malloc64 malloc16 calloc16 memalign16 realloc32 mmap16 malloc1 shared16 heap16; do
      want=0; case $adv in *" $n "*) want=1 ;; esac
      got=$(grep "^$n " "$T/hp.$label")
      [ "$got" = "$n inside=$want outside=0" ] || fail "$label: '$got', expected inside=$want outside=0" || return
    done
    grep -qx 'errno=55' "$T/hp.$label" || fail "$label: errno changed: $(grep errno "$T/hp.$label")"
  }
  for m in observe stage; do
    hp_run $m PAGELOCK_MODE=$m && hp_expect $m "" || return
  done
  for m in register auto; do
    hp_run $m PAGELOCK_MODE=$m && hp_expect $m "$big" || return
  done
  hp_run off PAGELOCK_MODE=auto PAGELOCK_HUGEPAGES=0 && hp_expect off "" || return
  hp_run 32M PAGELOCK_MODE=auto PAGELOCK_HUGEPAGES=32M && hp_expect 32M "$big32" || return
  hp_run 512K PAGELOCK_MODE=auto PAGELOCK_HUGEPAGES=512K && hp_expect 512K "$big" || return
}

case_alloc_semantics() {
  "$B/test_alloc_semantics" >/dev/null || fail "fails even without the shim" || return
  LD_PRELOAD="$SHIM" PAGELOCK_TRACK_MIN=4K "$B/test_alloc_semantics" >"$T/as.out" 2>&1 || fail "$(cat "$T/as.out")" || return
  LD_PRELOAD="$SHIM" "$B/test_alloc_semantics" >"$T/as.out" 2>&1 || fail "$(cat "$T/as.out")"
}

# A setuid program gets no trace from the shim (it would write where the
# caller's environment says, with privileges the caller lacks).  Needs root
# (to make the binary setuid) and setpriv (to run it as nobody).
case_setuid() {
  [ -x "$B/test_setuid_copies" ] || { echo "    (no test_setuid_copies in this build: skipped)" >&2; return 0; }
  if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then echo "    (needs root and setpriv: skipped)" >&2; return 0; fi
  local d; d=$(mktemp -d /tmp/pagelock-suid.XXXXXX); chmod 755 "$d"; mkdir "$d/out"; chmod 777 "$d/out"
  cp "$B/test_setuid_copies" "$d/plain"; cp "$B/test_setuid_copies" "$d/suid"
  chmod 755 "$d/plain"; chmod 4755 "$d/suid"
  local run=(setpriv --reuid=65534 --regid=65534 --clear-groups env PAGELOCK_OUTPUT="$d/out/%p.trace")
  "${run[@]}" "$d/plain" >/dev/null 2>"$d/err1" || { rm -rf "$d"; fail "plain copy failed as nobody: $(cat "$d/err1")"; return; }
  [ "$(ls "$d/out" | wc -l)" = 1 ] || { rm -rf "$d"; fail "control run wrote no trace (the test could not fail)"; return; }
  rm -f "$d/out"/*
  "${run[@]}" "$d/suid" >/dev/null 2>"$d/err2" || { rm -rf "$d"; fail "setuid copy failed: $(cat "$d/err2")"; return; }
  local n; n=$(ls "$d/out" | wc -l); rm -rf "$d"
  [ "$n" = 0 ] || fail "a setuid program wrote $n trace file(s)"
}

# ---- allocators --------------------------------------------------------------
# The allocator of these cases is alloc_matrix.sh's (jemalloc, tcmalloc,
# mimalloc), else guard_alloc.

# An allocator preloaded before the shim serves the program's malloc, so
# malloc'd buffers have no allocation site: the trace says why in a NOTE
# and the report shows it, with the way out.  With the shim first: sites,
# and no such note.
case_alloc_first() {
  local d="$T/af" a="${PL_TEST_PRELOAD_FIRST:-${PL_TEST_PRELOAD_LAST:-$B/testlib/libguard_alloc.so}}" name
  name=$(basename "$a"); mkdir -p "$d"
  LD_PRELOAD="$a:$LIB" PAGELOCK_OUTPUT="$d/f.%p.trace" timeout 60 "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "copies failed with $name first (status $?): $(cat "$d/err")" || return
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  eval "$(sed 's/ /;/g' "$d/out")"
  "$B/trace_check" "$d"/f.*.trace --pageable "$pageable" --pinned "$pinned" --failed 0 --complete >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/f.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  # tcmalloc defines mmap too: then mapped buffers are named as well
  grep -qxF "warning: allocation sites are missing for malloc'd buffers because $name is preloaded before libpagelock.so; put libpagelock.so first in LD_PRELOAD (\`pagelock run\` does this)" "$d/report" ||
    grep -qxF "warning: allocation sites are missing for malloc'd and mmap'd buffers because $name is preloaded before libpagelock.so; put libpagelock.so first in LD_PRELOAD (\`pagelock run\` does this)" "$d/report" ||
    fail "the report does not say why allocation sites are missing: $(head -5 "$d/report")" || return
  LD_PRELOAD="$LIB:$a" PAGELOCK_OUTPUT="$d/l.%p.trace" timeout 60 "$B/test_copies" >/dev/null 2>"$d/err" ||
    fail "copies failed with $name last (status $?): $(cat "$d/err")" || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/l.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  ! grep -q "allocation sites are missing" "$d/report" || fail "a note about allocation sites with the shim first" || return
  grep -A3 "^pageable copies by allocation site" "$d/report" | grep -q " test_copies+0x" ||
    fail "no allocation site with the shim first: $(cat "$d/report")"
}

# 200 threads allocating at once, started together: every malloc-family
# call, mmap, mremap, munmap, a thread in dlopen/dlclose, forks.  No hang,
# every byte kept, the registry exact (alloc_threads.c says what it holds).
case_alloc_threads() {
  LD_PRELOAD="$SHIM" timeout 120 "$B/test_alloc_threads" 200 30 "$B/testlib/libnext_a.so" >"$T/at.out" 2>&1 ||
    fail "status $? (124: hung): $(cat "$T/at.out")" || return
  grep -q "^alloc_threads: ok .* registry=consistent" "$T/at.out" || fail "$(cat "$T/at.out")"
}
# ---- end allocators ----------------------------------------------------------

# ---- GPU timing (CUPTI) ------------------------------------------------------
# Over fakecuda, libcupti.so.13 is the fake one next to the fake driver.

# Plain LD_PRELOAD records: every copy call joins the GPU's record of it,
# CUPTI's memory kinds agree with ours, times line up, one start; and no
# synchronization records, whose tracing slowed every sync of the program
# (the program synchronizes its streams).
case_cupti_records() {
  local d="$T/cr"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  eval "$(sed 's/ /;/g' "$d/out")"
  "$B/trace_check" "$d"/t.*.trace --pageable "$pageable" --pinned "$pinned" --complete --gpu-status 0 \
    --gpu-status-records 2 --gpu-memcpy-min $((pageable + pinned)) --gpu-joined --gpu-syncs-max 0 >&2
}

# Both routes at once (pagelock run sets LD_PRELOAD and CUDA_INJECTION64_PATH):
# CUPTI starts once (one status record at start, one at exit).
case_cupti_injection() {
  local d="$T/ci"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-status-records 2 --gpu-joined >&2 || return
  # The injection route alone (no preload): GPU records without copy hooks.
  CUDA_INJECTION64_PATH="$LIB" PAGELOCK_OUTPUT="$d/i.%p.trace" "$B/test_copies" >"$d/out2" 2>"$d/err2" || fail "copies failed under injection: $(cat "$d/err2")" || return
  "$B/trace_check" "$d"/i.*.trace --copies 0 --gpu-status 0 --gpu-memcpy-min 42 >&2
}

# Kernels: concurrent-kernel records with their interned names, copies of
# the demo joined.
case_cupti_kernels() {
  local d="$T/ck"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.%p.trace" "$DEMO" --quick >/dev/null 2>"$d/err" || fail "demo failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-kernels-min 4 --gpu-kernel-name pagelock_spin --gpu-joined >&2
}

# Staged copies: the engine's chunks link back to the app's call.
case_cupti_stage_links() {
  local d="$T/cs"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_MODE=stage PAGELOCK_STAGE_MIN=64K PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >/dev/null 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-links-min 1 --gpu-joined >&2
}

# GPU timing sampled: a loop of small copies makes more GPU operations a
# second than PAGELOCK_CUPTI_MAX_RATE (2000), so tracing pauses, and opens
# one window every 40 (10 ms windows here: one every 400 ms), CUPTI kept
# attached (PAGELOCK_CUPTI_DETACH=0; detached: case_cupti_detach).  Nothing
# inside a pause is traced (no correlation, no GPU record), the windows
# are, every byte arrives; at rate 0, or at a slow rate, nothing pauses and
# every copy joins its GPU record.
case_cupti_sample() {
  local d="$T/csm"; mkdir -p "$d"
  # CUPTI kept attached: a pause turns off what a window turned on, from
  # the shim's thread while the program's is inside a copy call (slow
  # pageable copies over fakecuda: 4 KiB takes 40 us, most of the loop).
  # Turning the copy callbacks off then would leave that thread's
  # correlation id stuck for every later window (--gpu-sampled: no two
  # GPU memcpy records share an id).
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_DETACH=0 PAGELOCK_CUPTI_WINDOW_MS=10 PAGELOCK_LOG=debug PAGELOCK_OUTPUT="$d/t.%p.trace" \
    FAKECUDA_PAGEABLE_GBPS=0.1 "$B/test_sample" 1200 >"$d/out" 2>"$d/err" || fail "the loop failed: $(cat "$d/out" "$d/err")" || return
  grep -q "wrong=0" "$d/out" || fail "bytes differ: $(cat "$d/out")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-pauses-min 2 --gpu-resumes-min 1 \
    --gpu-pause-rate-min 2001 --gpu-sampled >&2 || return
  [ "$(grep -c '^pagelock: GPU timing sampled: about [0-9]* GPU operations a second' "$d/err")" = 1 ] ||
    fail "expected one line saying GPU timing is sampled: $(grep -v 'GPU timing paused\|resumed' "$d/err" | head -5)" || return
  grep -q '^pagelock: GPU timing resumed at' "$d/err" || fail "no resume in the debug log" || return
  # The report says so, and never calls a pause idle GPU time
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/t.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  grep -q '^GPU timing sampled: [0-9]* windows\?, [0-9.]*% of the run traced' "$d/report" ||
    fail "the report does not say GPU timing was sampled: $(head -5 "$d/report")" || return
  # (a pause lasts 390 ms; a loaded machine may leave real gaps of a few
  # ms inside the windows, which the report rightly lists)
  local longest; longest=$(grep -o 'the longest gap was [0-9]*' "$d/report" | grep -o '[0-9]*$')
  [ "${longest:-0}" -lt 100 ] || fail "a pause reads as idle GPU time: $(grep -A1 'idled' "$d/report")" || return
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_MAX_RATE=0 PAGELOCK_OUTPUT="$d/all.%p.trace" "$B/test_sample" 300 \
    >"$d/out" 2>"$d/err" || fail "the loop failed at rate 0: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/all.*.trace --complete --gpu-pauses-max 0 --gpu-joined >&2 || return
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=10 PAGELOCK_OUTPUT="$d/slow.%p.trace" "$B/test_sample" 300 2000 \
    >"$d/out" 2>"$d/err" || fail "the slow loop failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/slow.*.trace --complete --gpu-pauses-max 0 --gpu-joined >&2
}

# The same loop with CUPTI detached between windows (the default): a pause
# detaches it 4 windows in, and each window attaches it again first
# (5 ms windows: one every 800 ms).  No CUPTI call is made while detached
# (each would attach it again: fakecuda logs every attach), the windows
# are traced, their copies carry correlation ids that no earlier stretch
# used (CUPTI numbers calls from 1 again after an attach), every byte
# arrives, and the report says GPU timing was sampled.
case_cupti_detach() {
  local d="$T/cdt"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_ATTACH_LOG=1 PAGELOCK_CUPTI_WINDOW_MS=5 PAGELOCK_LOG=debug \
    PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_sample" 2600 >"$d/out" 2>"$d/err" ||
    fail "the loop failed: $(cat "$d/out" "$d/err")" || return
  grep -q "wrong=0" "$d/out" || fail "bytes differ: $(cat "$d/out")" || return
  local att det res
  att=$(grep -c '^fakecupti: attached' "$d/err")
  det=$(grep -c '^pagelock: GPU timing detached at' "$d/err")
  res=$(grep -c '^pagelock: GPU timing resumed at' "$d/err")
  [ "$res" -ge 2 ] && [ "$det" -ge "$res" ] ||
    fail "expected 2 windows or more, each after a detach: $det detached, $res resumed" || return
  # (fake CUPTI only: the real one logs no attach)
  [ $SIM = 0 ] || [ "$att" = $((res + 1)) ] ||
    fail "CUPTI attached $att times for $res windows: a call while detached attached it again" || return
  grep -q '^pagelock: GPU timing sampled: .*every 800 ms, CUPTI detached in between' "$d/err" ||
    fail "no line saying GPU timing is sampled with CUPTI detached: $(grep '^pagelock: GPU timing s' "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-pauses-min 3 --gpu-resumes-min 2 \
    --gpu-sampled >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/t.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  grep -q '^GPU timing sampled: [0-9]* windows\?, [0-9.]*% of the run traced' "$d/report" ||
    fail "the report does not say GPU timing was sampled: $(head -5 "$d/report")"
}

# GPU timing unavailable: interception goes on, the trace says why, the
# report says so first.  check_unavailable DIR STATUS WORDS
check_unavailable() {
  eval "$(sed 's/ /;/g' "$1/out")"
  "$B/trace_check" "$1"/t.*.trace --pageable "$pageable" --pinned "$pinned" --complete --gpu-status "$2" >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$1"/t.*.trace >"$1/report" 2>&1 || fail "report failed" || return
  # the pageable copies' verdict and fix lead (host timing is enough), then why
  # GPU timing is missing
  sed -n 2p "$1/report" | grep -q "^verdict: .*pageable" || fail "the pageable verdict is not first: $(head -3 "$1/report")" || return
  sed -n '/^GPU timing/,+1p' "$1/report" | tr '\n' ' ' | grep -qi "^GPU timing unavailable.*$3" || fail "report does not say why GPU timing is missing: $(head -6 "$1/report")"
}
case_cupti_off() {
  local d="$T/co"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI=0 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  [ ! -s "$d/err" ] || fail "turning CUPTI off printed: $(cat "$d/err")" || return
  check_unavailable "$d" 1 "PAGELOCK_CUPTI=0"
}
case_cupti_missing() {
  local d="$T/cm"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_LIB="$d/no-such-libcupti.so" PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  [ "$(grep -c . "$d/err")" = 1 ] && grep -q "^pagelock: no GPU timing: PAGELOCK_CUPTI_LIB=.*cannot be loaded" "$d/err" ||
    fail "expected one line naming the missing libcupti, got: $(cat "$d/err")" || return
  check_unavailable "$d" 2 "cannot be loaded"
}
# Fake-CUPTI fault injection: another subscriber (nsys), a CUPTI of another
# major version, dropped records.
case_cupti_busy() {
  [ $SIM = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/cb"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_FAIL=subscribe PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  grep -q "another CUPTI client" "$d/err" || fail "no line about the other CUPTI client: $(cat "$d/err")" || return
  check_unavailable "$d" 3 "another CUPTI client"
}
case_cupti_version() {
  [ $SIM = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/cv"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_VERSION=120001 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  check_unavailable "$d" 4 "version 120001"
}
case_cupti_dropped() {
  [ $SIM = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/cd"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_FAIL=nobuffer PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-dropped-min 7 >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/t.*.trace 2>&1 | grep -m1 "^GPU timing" | grep -q "7 dropped" || fail "report does not give the dropped count"
}
# The program starts its own CUPTI client midway (a profiler): it gets
# CUPTI as it would without pagelock, whether it reaches libcupti through
# the dynamic linker or dlopen + dlsym; the trace says from when GPU timing
# stopped; every copy is still recorded.
case_cupti_program_client() {
  local d="$T/cpc" how; mkdir -p "$d"
  "$B/test_cupti_client" linked >/dev/null 2>"$d/err0" || fail "the client fails even without the shim: $(cat "$d/err0")" || return
  for how in linked dlsym; do
    LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$how.%p.trace" "$B/test_cupti_client" $how >"$d/out" 2>"$d/err" ||
      fail "$how: the program's own CUPTI client broke under the shim: $(cat "$d/err")" || return
    grep -q "^pagelock: no GPU timing: the program started its own CUPTI client" "$d/err" ||
      fail "$how: no line saying GPU timing stopped: $(cat "$d/err")" || return
    eval "$(sed 's/ /;/g' "$d/out")"
    "$B/trace_check" "$d"/$how.*.trace --pinned "$pinned" --pinned-bytes "$pinned_bytes" --complete \
      --gpu-status 3 --gpu-memcpy-min 6 >&2 || return
    PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/$how.*.trace 2>&1 | sed -n 2p |
      grep -q "^GPU timing partial: CUPTI, [1-9][0-9]* records, .*then the program started its own CUPTI client" ||
      fail "$how: the report does not say GPU timing stopped partway" || return
  done
  # The same once pagelock's GPU timing is sampled: no window of ours
  # opens inside the program's session (5 ms windows: one every 200 ms).
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=5 PAGELOCK_LOG=debug PAGELOCK_OUTPUT="$d/sm.%p.trace" \
    "$B/test_cupti_client" linked sampled >"$d/out" 2>"$d/err" ||
    fail "sampled: the program's own CUPTI client broke under the shim: $(grep -v 'GPU timing paused\|resumed' "$d/err")" || return
  grep -q "^pagelock: GPU timing paused" "$d/err" || fail "sampled: GPU timing never paused: $(cat "$d/err")" || return
  # ... and with CUPTI kept attached through the pauses, the program's
  # thread inside a copy call at one of them (slow copies over fakecuda):
  # its own records each carry their call's correlation id.
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_DETACH=0 PAGELOCK_CUPTI_WINDOW_MS=5 FAKECUDA_PAGEABLE_GBPS=0.05 \
    PAGELOCK_OUTPUT="$d/sa.%p.trace" "$B/test_cupti_client" linked sampled >"$d/out" 2>"$d/err" ||
    fail "sampled, attached: the program's own CUPTI client broke under the shim: $(cat "$d/err")" || return
  # A client of the activity API alone (buffers of its own, never
  # subscribed), starting after pagelock detached CUPTI: it gets CUPTI as
  # it would without pagelock, with no window of ours after it.
  for how in linked dlsym; do
    LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=5 PAGELOCK_OUTPUT="$d/ac$how.%p.trace" \
      "$B/test_cupti_client" $how activity >"$d/out" 2>"$d/err" ||
      fail "activity, $how: the program's own activity client broke under the shim: $(cat "$d/err")" || return
    grep -q "^pagelock: no GPU timing: the program started its own CUPTI client" "$d/err" ||
      fail "activity, $how: no line saying GPU timing stopped: $(cat "$d/err")" || return
  done
  # The same client from before the program's first CUDA call: pagelock's
  # own CUPTI session never starts.
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/early.%p.trace" "$B/test_cupti_client" linked early \
    >"$d/out" 2>"$d/err" || fail "early: the program's own activity client broke under the shim: $(cat "$d/err")" || return
  grep -q "^pagelock: no GPU timing: the program started its own CUPTI client (a profiler) before CUDA" "$d/err" ||
    fail "early: no line saying the program's client came first: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/early.*.trace --pinned 8 --complete --gpu-status 3 >&2 || return
  # A start of ours that failed after subscribing must leave no subscription
  # behind for the program's client to collide with (fake CUPTI only: it
  # can make the activity API fail).
  [ $SIM = 1 ] || return 0
  LD_PRELOAD="$SHIM" FAKECUPTI_FAIL=enable PAGELOCK_OUTPUT="$d/fe.%p.trace" "$B/test_cupti_client" linked subscribe-only \
    >"$d/out" 2>"$d/err" || fail "after a failed start, the program could not subscribe: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/fe.*.trace --pinned 6 --complete --gpu-status 5 >&2
}

# A long run streams its GPU records (periodic flush), not only at exit.
case_cupti_streams() {
  local d="$T/cst"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_FLUSH_MS=100 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_stress" 3 >/dev/null 2>"$d/err" &
  local pid=$! mid=0 n
  # Poll rather than sample once: on a loaded machine (CI, ctest -j) the
  # first flush can come late.  A sample counts only if the program was
  # still running after it was read, so the exit flush cannot pass it.
  while [ "$mid" = 0 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.2
    n=$("$B/trace_check" "$d"/t.*.trace 2>/dev/null | grep -o 'memcpy=[0-9]*' | cut -d= -f2)
    kill -0 $pid 2>/dev/null && [ "${n:-0}" -gt 0 ] && mid=$n
  done
  wait $pid || fail "stress failed: $(cat "$d/err")" || return
  [ "$mid" -gt 0 ] || fail "no GPU records in the trace while the program ran"
}

# The JSON report's call sites of trace $1 (under $2), as "address copies"
# sorted by copies, must be distinct addresses with exactly the copies
# listed after: call_sites_are TRACE DIR 100 100.
call_sites_are() {
  local trace=$1 dir=$2; shift 2
  "$B/pagelock" report --format json "$trace" >"$dir/report.json" 2>"$dir/report.err" ||
    fail "report failed: $(cat "$dir/report.err")" || return
  python3 - "$dir/report.json" "$@" <<'PY' >&2
import json, sys
sites = json.load(open(sys.argv[1]))["processes"][0]["call_sites"]
got = sorted((s["copies"], s["address"]) for s in sites)
want = sorted(int(c) for c in sys.argv[2:])
ok = [c for c, _ in got] == want and len({a for _, a in got}) == len(got)
if not ok:
    print("    call sites (copies, address):", got, "want copies", want)
sys.exit(0 if ok else 1)
PY
}

# Two lines of main make the same copy: each is its own call site, with
# its 100 copies (the stack memo and a run of repeats key on the return
# address into the hook and the stack depth, the same for both lines;
# the frames above tell them apart), merged into runs or not.
case_two_sites() {
  local d="$T/two" rep; mkdir -p "$d"
  for rep in merge each; do
    PAGELOCK_REPEATS=$rep "$B/pagelock" run -o "$d/$rep.trace" -- "$B/test_two_sites" \
      >/dev/null 2>"$d/err" || fail "two_sites failed: $(cat "$d/err")" || return
    call_sites_are "$d/$rep.trace" "$d" 100 100 ||
      fail "PAGELOCK_REPEATS=$rep: two call sites of 100 copies each" || return
  done
}

# A buffer allocated anew for every step and copied once (fresh.c) gets
# advice of its own: one pinned buffer, reused; a buffer reused every step
# gets the advice to pin it.  Each fresh buffer's first copy says so in
# its record (PAGELOCK_COPY_FIRST_USE).
case_fresh_buffers() {
  local d="$T/fresh" mode; mkdir -p "$d"
  for mode in observe; do
    "$B/pagelock" run --mode=$mode -o "$d/f$mode.trace" -- "$B/test_fresh" fresh >/dev/null 2>"$d/err" ||
      fail "fresh, $mode: $(cat "$d/err")" || return
    "$B/pagelock" report "$d/f$mode.trace" >"$d/f$mode.txt" 2>&1
    grep -q "12 buffers allocated at .*fresh.c:[0-9]* were each copied once: allocate one pinned buffer" \
      "$d/f$mode.txt" || fail "fresh, $mode: no per-step advice: $(grep -m2 'fix:' "$d/f$mode.txt")" || return
    "$B/pagelock" run --mode=$mode -o "$d/r$mode.trace" -- "$B/test_fresh" reuse >/dev/null 2>"$d/err" ||
      fail "reuse, $mode: $(cat "$d/err")" || return
    "$B/pagelock" report "$d/r$mode.trace" >"$d/r$mode.txt" 2>&1
    grep -q "each copied once" "$d/r$mode.txt" && fail "reuse, $mode: told it was fresh buffers" && return 1
    grep -q "fix: pin the buffer allocated at .*fresh.c:[0-9]" "$d/r$mode.txt" ||
      fail "reuse, $mode: no advice to pin the reused buffer: $(grep -m2 'fix:' "$d/r$mode.txt")" || return
  done
}

# Copies from stacks that are not the thread's own (coro_stacks.c): a
# coroutine's, whose entry has a variable-length array, on a 64 KiB
# mapping and then on a 32 KiB one at the same base, the copies at the
# same stack pointer both times, and a signal handler's on sigaltstack.
# Nothing the shim keeps of the first stack may make it read past the
# second's end (the program would die), and each of the two lines of each
# keeps its copies: on the main thread and on another.
case_coro_stacks() {
  local d="$T/coro" mode rep rc want; mkdir -p "$d"
  for mode in main thread; do
    want="100 100"; [ $mode = main ] && want="30 30 100 100"
    for rep in merge each; do
      PAGELOCK_REPEATS=$rep "$B/pagelock" run -o "$d/$mode-$rep.trace" -- "$B/test_coro_stacks" $mode \
        >"$d/out" 2>"$d/err"
      rc=$?
      [ $rc = 0 ] || fail "$mode, PAGELOCK_REPEATS=$rep: the program exited $rc: $(cat "$d/out" "$d/err")" || return
      # shellcheck disable=SC2086
      call_sites_are "$d/$mode-$rep.trace" "$d" $want ||
        fail "$mode, PAGELOCK_REPEATS=$rep: call sites of $want copies" || return
    done
  done
}

# A multi-process job (torchrun/mpirun style: RANK set per process) gives
# one trace per rank, and one report covers them all, rank by rank.
case_ranks() {
  local d="$T/rk"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/rank%r.trace" -- sh -c "RANK=0 '$B/test_copies' >/dev/null & RANK=1 '$B/test_copies' >/dev/null & wait" \
    >/dev/null 2>"$d/err" || fail "job failed: $(cat "$d/err")" || return
  [ -f "$d/rank0.trace" ] && [ -f "$d/rank1.trace" ] || fail "expected rank0.trace and rank1.trace, got: $(ls "$d")" || return
  "$B/trace_check" "$d/rank1.trace" --pageable 22 --complete --gpu-status 0 >&2 || return
  grep -Eq "^ *rank +host" "$d/err" || fail "no per-rank table in the report: $(cat "$d/err")" || return
  [ "$(grep -Ec '^ +[01] +[^ ]+ +[0-9]+ +42 ' "$d/err")" = 2 ] || fail "the per-rank table does not list both ranks with 42 copies: $(grep -A4 -E '^ *rank +host' "$d/err")"
}

# ---- the trace's file --------------------------------------------------------

# A program that closes or takes over every descriptor (a daemon, a server)
# and then writes a file of its own: that file holds the program's 40 bytes
# and nothing of the trace, and the trace holds every copy, before the
# closing and after.  fd_case MODE TRACES: test_fd_close MODE, which leaves
# TRACES traces (fork_exec: the parent's and the exec'd child's).
fd_case() {
  local d="$T/fd_$1" n=20 f data; mkdir -p "$d"
  # over a real driver, the program keeps the driver's own descriptors
  # (fd_close.c, first_fd)
  env $([ $SIM = 0 ] && echo FD_CLOSE_KEEP_DRIVER=1) LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.%p.trace" \
    timeout 60 "$B/test_fd_close" "$1" "$d/data" $n >"$d/out" 2>"$d/err" ||
    fail "test_fd_close $1 failed: $(cat "$d/err")" || return
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  for data in "$d"/data*; do
    printf '%s' "the program's own 40 bytes, nothing else" | cmp -s - "$data" ||
      fail "$data holds $(stat -c %s "$data") bytes, not the program's 40" || return
  done
  [ "$(ls "$d"/t.*.trace | wc -l)" = "$2" ] || fail "expected $2 trace(s), got: $(ls "$d")" || return
  for f in "$d"/t.*.trace; do
    "$B/trace_check" "$f" --copies $((2 * n)) --complete >&2 || return
  done
}
case_fd_close_range() { fd_case close_range 1; }
case_fd_closefrom() { fd_case closefrom 1; }
case_fd_close_loop() { fd_case loop 1; }
case_fd_dup2() { fd_case dup2 1; }
# The close_range and dup3 system calls themselves: no wrapper sees them,
# the writer's check before each block does.
case_fd_raw_syscall() { fd_case raw 1; }
# The child of a fork closes every descriptor and execs: the parent's trace
# goes on, the exec'd program traces into a file of its own.
case_fd_fork_exec() {
  fd_case fork_exec 2 || return
  [ -f "$T/fd_fork_exec/data.child" ] || fail "the exec'd child wrote no data file"
}

# PAGELOCK_MANIFEST naming a FIFO that nobody reads: the program runs on
# (opening it for writing used to wait for a reader forever), one line
# says why the trace is not listed, and the trace is written.
case_manifest_fifo() {
  local d="$T/mf"; mkdir -p "$d"; mkfifo "$d/fifo"
  LD_PRELOAD="$SHIM" PAGELOCK_MANIFEST="$d/fifo" PAGELOCK_OUTPUT="$d/t.trace" timeout 20 "$B/test_copies" >/dev/null 2>"$d/err" ||
    fail "the program failed or hung (status $?): $(cat "$d/err")" || return
  [ "$(cat "$d/err")" = "pagelock: the manifest is a FIFO, not a regular file (as \`pagelock run\` makes); this trace is not listed: PAGELOCK_MANIFEST='$d/fifo'" ] ||
    fail "expected one line naming the FIFO, got: $(cat "$d/err")" || return
  "$B/trace_check" "$d/t.trace" --complete >/dev/null
}

# A 5,000-character PAGELOCK_OUTPUT: one line, the reason first, the whole
# value after it (lines used to be cut at 512 bytes, before the reason).
case_long_output() {
  local d="$T/lo"; mkdir -p "$d"
  local v; v="$d/$(head -c 5000 /dev/zero | tr '\0' x).%p.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$v" "$B/test_copies" >/dev/null 2>"$d/err" || fail "the program failed: $(head -c 300 "$d/err")" || return
  [ "$(cat "$d/err")" = "pagelock: PAGELOCK_OUTPUT is too long (valid: a path of at most 4079 bytes once %p, %h and %r are expanded); no trace written: PAGELOCK_OUTPUT='$v'" ] ||
    fail "expected one whole line, reason first; got $(wc -c <"$d/err") bytes: $(head -c 300 "$d/err")"
}

# The disk fills up mid-trace: the program runs on, one line says so, the
# trace ends at its last whole record and its header says the disk filled
# up.  A 64 KiB tmpfs in a user and mount namespace of its own where the
# machine allows one (ENOSPC), else (or with PL_TEST_NO_UNSHARE=1) a
# 64 KiB RLIMIT_FSIZE (EFBIG), with SIGXFSZ ignored in case the shim let
# the kernel raise it.  The case says which it used.
case_disk_full() {
  local d="$T/df" how line; mkdir -p "$d/fs"
  # Each copy its own record, so that 6000 copies fill the 64 KiB.
  local run="LD_PRELOAD='$SHIM' PAGELOCK_REPEATS=each PAGELOCK_OUTPUT='$d/fs/t.trace' '$B/test_fd_close' child '$d/data' 3000 >'$d/out' 2>'$d/err'"
  if [ -z "${PL_TEST_NO_UNSHARE:-}" ] && unshare -rm sh -c "mount -t tmpfs -o size=64k tmpfs '$d/fs'" 2>/dev/null; then
    how="a 64 KiB tmpfs"; line="the disk is full (No space left on device)"
    unshare -rm bash -c "mount -t tmpfs -o size=64k tmpfs '$d/fs' && { $run; echo \$? >'$d/st'; cp '$d/fs/t.trace' '$d/t.trace'; }"
  else
    how="RLIMIT_FSIZE of 64 KiB"; line="the file size limit (RLIMIT_FSIZE) is reached (File too large)"
    bash -c "trap '' XFSZ; ulimit -f 64; $run; echo \$? >'$d/st'"
    cp "$d/fs/t.trace" "$d/t.trace"
  fi
  echo "    (the disk: $how)" >&2
  [ "$(cat "$d/st" 2>/dev/null)" = 0 ] && grep -qx "copies=6000" "$d/out" || fail "the program did not run on: $(cat "$d/err")" || return
  [ "$(grep -c . "$d/err")" = 1 ] && grep -q "^pagelock: $line: the trace stops at its last whole record, byte [0-9]*: '$d/fs/t.trace'$" "$d/err" ||
    fail "expected one line saying '$line', got: $(cat "$d/err")" || return
  python3 - "$d/t.trace" <<'PY' >&2 || fail "the trace does not end at a whole record with the disk-full flag"
import struct, sys
b = open(sys.argv[1], "rb").read()
flags = struct.unpack_from("<I", b, 40)[0]
off, copies = 64, 0
while off + 8 <= len(b):
    t, s = struct.unpack_from("<II", b, off)
    if s < 8 or s % 8 or off + s > len(b):
        break
    off, copies = off + s, copies + (t == 2)
print(f"    {len(b)} bytes, records end at {off}, {copies} copies, flags {flags:#x}")
sys.exit(0 if off == len(b) and flags & 2 and 0 < copies < 6000 else 1)
PY
  # The report blames the disk, not the program.
  "$B/pagelock" report "$d/t.trace" >"$d/report" 2>"$d/report.err" || fail "report of the full-disk trace failed" || return
  grep -q "the disk filled up" "$d/report.err" "$d/report" || fail "the report does not say the disk filled up: $(cat "$d/report.err")" || return
  ! grep -q "may have died" "$d/report.err" "$d/report" || fail "the report blames the program: $(cat "$d/report.err")"
}

# ---- autopin (PAGELOCK_MODE register and auto) ---------------------------------
# tests/preload/autopin.c under `pagelock run --mode=register` and
# `--mode=auto`: what a program may do with buffers the shim page-locks
# behind its back.  Over fakecuda, libpl_reg_guard.so is preloaded after the
# shim and exits 86 the moment memory is released while any byte of it is
# still registered.  Small thresholds keep the buffers small: tracked and
# staged from 16 KiB, and `auto` registers a buffer once as many bytes as
# its size were copied.  Each run must pass the program's own byte checks,
# the guard's, and the trace's (copies went through a registration).
AP_ENV="PAGELOCK_TRACK_MIN=16K PAGELOCK_STAGE_MIN=16K PAGELOCK_REGISTER_HOT=100"

# ap MODE TAG ARGS... [-- TRACE_CHECK_OPTIONS...]: test_autopin_prog ARGS
# under --mode=MODE.  AP_SET: more VAR=VALUE for the run; AP_GUARD: the
# guard (default libpl_reg_guard.so).  Leaves the summary line in AP_LINE.
ap() {
  local mode=$1 tag=$2 args=() d pre st why pid; shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  d="$T/ap_${tag}_$mode"; mkdir -p "$d"
  [ $SIM = 1 ] && pre="$B/testlib/${AP_GUARD:-libpl_reg_guard.so}"
  [ -n "$EXTRA" ] && pre="$EXTRA${pre:+:$pre}"
  env $AP_ENV ${AP_SET:-} ${pre:+"LD_PRELOAD=$pre"} REG_GUARD_VERBOSE=1 timeout -k 5 100 \
    "$B/pagelock" run --mode="$mode" -o "$d/t.%p.trace" -- "$B/test_autopin_prog" "${args[@]}" >"$d/out" 2>"$d/err"
  st=$?
  if [ $st != 0 ]; then
    case $st in 86) why=" (a registration outlived its memory)" ;; 124|137) why=" (hung)" ;; *) why= ;; esac
    fail "${args[*]} --mode=$mode: exit $st$why: $(grep -E '^(autopin|reg_guard|pagelock):' "$d/err" | grep -v 'trace written' | head -6)"
    return
  fi
  AP_LINE=$(grep "^${args[0]}: " "$d/out" | tail -1)
  [ -n "$AP_LINE" ] || fail "${args[*]} --mode=$mode: no summary line: $(cat "$d/out")" || return
  echo "    --mode=$mode: $AP_LINE" >&2
  # (An allocator after the shim takes free from the guard, which then
  # sees what that allocator unmaps, if anything.)
  if [ $SIM = 1 ] && [ -z "$EXTRA" ]; then
    grep -q "^reg_guard: checked [1-9][0-9]* releases" "$d/err" ||
      fail "--mode=$mode: the guard did not watch: $(grep '^reg_guard' "$d/err")" || return
  fi
  case $AP_LINE in *": skipped "*) return 0 ;; esac
  pid=${AP_LINE##* pid=}
  [ -f "$d/t.$pid.trace" ] || fail "--mode=$mode: no trace of pid $pid: $(ls "$d")" || return
  "$B/trace_check" "$d/t.$pid.trace" --complete --failed 0 "$@" >&2 || fail "--mode=$mode: the trace of ${args[*]}"
}
# The same in both modes.
ap2() { ap register "$@" && ap auto "$@"; }
ap_skip() {
  [ -z "${PL_TEST_PRELOAD_FIRST:-}" ] && [ -x "$B/test_autopin_prog" ] && return 1
  echo "    (an allocator preloaded before the shim: nothing malloc'd is registered: skipped)" >&2
}

# The guard itself, without the shim: a program that page-locks part of a
# buffer and releases it without unregistering dies with 86 and one line
# naming the call and both ranges, for each way of releasing memory; after
# unregistering, the release goes through.
case_autopin_guard() {
  [ $SIM = 1 ] || { echo "    (the guard asks the fake driver: skipped)" >&2; return 0; }
  local d="$T/apg" k want got st; mkdir -p "$d"
  for k in free realloc munmap mremap madvise sbrk brk; do
    LD_PRELOAD="$B/testlib/libpl_reg_guard.so" "$B/test_autopin_prog" stale $k >"$d/$k.out" 2>"$d/$k.err"
    st=$?
    want="reg_guard: STALE REGISTRATION: $(sed -n 's/^stale: //p' "$d/$k.out" | head -1)"
    got=$(cat "$d/$k.err")
    [ $st = 86 ] && [ "$got" = "$want" ] || fail "stale $k: exit $st, stderr '$got', expected 86 and '$want'" || return
  done
  LD_PRELOAD="$B/testlib/libpl_reg_guard.so" REG_GUARD_VERBOSE=1 "$B/test_autopin_prog" stale ok >"$d/ok.out" 2>"$d/ok.err" ||
    fail "stale ok: exit $?: $(cat "$d/ok.err")" || return
  grep -q "^reg_guard: checked [1-9][0-9]* releases" "$d/ok.err" || fail "stale ok: the guard did not check: $(cat "$d/ok.err")" || return
  # without the guard the stale release goes through: the guard is what catches it
  "$B/test_autopin_prog" stale free >"$d/free0.out" 2>&1 && grep -q "^stale: free went through" "$d/free0.out" ||
    fail "stale free without the guard: $(cat "$d/free0.out")"
}

# Threads allocating, reallocating, mapping, unmapping (partly too),
# remapping, discarding and handing buffers to each other, with copies in
# between (sources overwritten on return, destinations read on return),
# under a budget small enough to evict.  Then once more in register mode
# with the guard that leaves free to glibc, so that mapped ranges are
# registered too (the shim registers them only when glibc's free is next).
case_autopin_churn() {
  ap_skip && return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=8M" ap2 churn churn 3 4 -- --registered-min 1 || return
  [ $SIM = 1 ] || return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=8M" AP_GUARD=libpl_reg_guard_map.so ap register churn_map churn 3 4 -- --registered-min 1 || return
  [ -n "$EXTRA" ] || echo "$AP_LINE" | grep -q "mapped=[1-9]" || fail "no upload from a registered mapping: $AP_LINE"
}

# A host function releases a buffer the shim registered (munmap, a
# discard of its middle, mremap, free) on the driver's thread, where the
# driver refuses calls: the guard sees no release of registered memory,
# nothing hangs, and the program sees what it asked for (unmapped memory
# faults, discarded memory reads zero, moved memory keeps its bytes).  The
# guard that leaves free to glibc, so that mappings are registered.
case_autopin_hostfn() {
  ap_skip && return 0
  local k
  for k in munmap madvise mremap free; do
    AP_GUARD=libpl_reg_guard_map.so ap2 "hostfn_$k" hostfn "$k" -- --registered-min 1 || return
  done
}

# A 20 kHz signal handler maps, touches, discards and unmaps memory of its
# own, and once unmaps a registered buffer, while the main thread copies
# through registrations: no hang (the handler may interrupt the copy
# holding the registration lock), right bytes.
case_autopin_signal() {
  ap_skip || AP_GUARD=libpl_reg_guard_map.so ap2 signal signal -- --registered-min 2
}

# An upload's source overwritten as soon as cudaMemcpyAsync returns (with
# the fake's DMA slowed down, a shim that returned before the DMA read the
# source would send the new bytes).
case_autopin_overwrite() { ap_skip || ap2 overwrite overwrite -- --registered-min 3; }
# Registered uploads of 8 MiB with their tail staged: bytes whole after an
# overwrite.
case_autopin_tail() { ap_skip || ap2 tail tail -- --registered-min 6; }
# A download's destination read as soon as the call returns.
case_autopin_readback() { ap_skip || ap2 readback readback -- --registered-min 3; }
# Two blocks sharing a page, both registered, one freed while the other stays.
case_autopin_neighbours() { ap_skip || ap2 neighbours neighbours -- --registered-min 2; }
# free then malloc (munmap then mmap) at the same address: the new bytes
# arrive.  Mapped ranges are registered only with the guard that leaves
# free to glibc: once more with that one.
case_autopin_reuse() {
  ap_skip && return 0
  ap2 reuse reuse -- --registered-min 1 || return
  [ $SIM = 1 ] || return 0
  AP_GUARD=libpl_reg_guard_map.so ap register reuse_map reuse -- --registered-min 1 || return
  [ -n "$EXTRA" ] || echo "$AP_LINE" | grep -q "mmap_registered=2/2" || fail "the mappings were not registered: $AP_LINE"
}

# Six hot 1 MiB buffers for a 2 MiB budget: never more registered (the
# fake driver's high-water mark and the trace's), the second set staged
# while the first is hot, the first evicted for it once idle.
case_autopin_budget() {
  ap_skip && return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=2M PAGELOCK_POOL_SIZE=4M" ap2 budget budget -- --registered-min 2 --why-min BUDGET=1 \
    --counter-min evictions=1 --counter-max registered_bytes_high_water=2097152
}

# The program's pointer queries and its own register/unregister over a
# buffer the shim registered answer exactly as over one never copied, and
# exactly as in a run without the shim.
case_autopin_queries() {
  ap_skip && return 0
  local d="$T/apq" base; mkdir -p "$d"
  "$B/test_autopin_prog" queries >"$d/out" 2>"$d/err" || fail "queries without the shim: $(cat "$d/err")" || return
  base=$(sed -n 's/^queries: \(answers=.* wrong=0\) .*/\1/p' "$d/out")
  [ -n "$base" ] || fail "queries without the shim: $(cat "$d/out")" || return
  ap register queries queries -- --registered-min 1 || return
  [ "$(echo "$AP_LINE" | sed 's/^queries: \(answers=.* wrong=0\) .*/\1/')" = "$base" ] ||
    fail "--mode=register answers differ from a run without the shim: '$AP_LINE' vs '$base'" || return
  ap auto queries queries -- --registered-min 1 || return
  [ "$(echo "$AP_LINE" | sed 's/^queries: \(answers=.* wrong=0\) .*/\1/')" = "$base" ] ||
    fail "--mode=auto answers differ from a run without the shim: '$AP_LINE' vs '$base'"
}

# The driver refuses every registration: every copy right, nothing
# registered, the failure in the trace and logged once.
case_autopin_fail() {
  ap_skip && return 0
  [ $SIM = 1 ] || { echo "    (fault injection needs the fake driver: skipped)" >&2; return 0; }
  local mode n
  for mode in register auto; do
    AP_SET="PAGELOCK_POOL_SIZE=4M" ap $mode fail fail -- --registered-max 0 --why-min FAILED=1 --counter-min register_failures=1 || return
    # the shim's lines: not pagelock run's own about the trace and the spin count
    n=$(grep '^pagelock: ' "$T/ap_fail_$mode/err" | grep -v 'trace written' | grep -vc 'GOMP_SPINCOUNT')
    [ "$n" = 1 ] || fail "--mode=$mode: expected the failure logged once, got: $(grep '^pagelock: ' "$T/ap_fail_$mode/err")" || return
  done
}

# Copies captured into a graph (global mode) from registered buffers, one
# more registered buffer freed during the capture, replays after a pause
# and budget pressure: right bytes, the graph's registrations kept.
case_autopin_capture() {
  ap_skip && return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=4M" ap2 capture capture -- --registered-min 3 --captured-min 2
}

# fork after registration: the child reads the parent's buffers and exits
# 0; the parent's buffers still copy right, still registered.
case_autopin_fork() { ap_skip || ap2 fork fork -- --registered-min 4; }

# ---- several devices (issue 23) --------------------------------------------
# tests/preload/multigpu.c: one process, two devices, two threads each with
# its own device current, pageable 3 MiB uploads and downloads of known
# bytes, then one device-to-device copy and one peer copy each way between
# the devices.
# Over fakecuda with FAKECUDA_DEVICES=2 (the GPU host runs it over its own
# devices and skips it with fewer than two).
MG_ENV="FAKECUDA_DEVICES=2 PAGELOCK_TRACK_MIN=16K PAGELOCK_STAGE_MIN=16K PAGELOCK_REGISTER_HOT=100"
MG_ROUNDS=6
# Each thread's host<->device copies: 2 per round and the downloads of
# what the other device's buffer was copied into (device to device, peer).
MG_PER_DEV=$((2 * MG_ROUNDS + 2))

# mg MODE TAG [-- TRACE_CHECK_OPTIONS...]: test_multigpu under
# --mode=MODE (MG_SET: more VAR=VALUE).  Bytes exact on both devices, the
# trace complete with no failed copy, and the JSON report's GPU device
# table lists devices 0 and 1, each with copies.  Leaves the program's
# line in MG_LINE and the run's folder in MG_DIR.
mg() {
  local mode=$1 tag=$2 d st pid; shift 2
  [ $# -gt 0 ] && shift
  d="$T/mg_${tag}_$mode"; mkdir -p "$d"; MG_DIR=$d
  env $MG_ENV ${MG_SET:-} timeout -k 5 100 \
    "$B/pagelock" run --mode="$mode" -o "$d/t.%p.trace" -- "$B/test_multigpu" $MG_ROUNDS >"$d/out" 2>"$d/err"
  st=$?
  MG_LINE=$(grep '^multigpu: ' "$d/out" | tail -1)
  [ $st = 0 ] || fail "--mode=$mode: exit $st: $MG_LINE $(grep -E '^(multigpu|pagelock):' "$d/err" | grep -v 'trace written' | head -4)" || return
  echo "    --mode=$mode: $MG_LINE" >&2
  case $MG_LINE in *": skipped "*) MG_LINE=; return 0 ;; esac
  echo "$MG_LINE" | grep -q " copies_per_device=$MG_PER_DEV d2d=2 peer=2 wrong=0 failed=0 " ||
    fail "--mode=$mode: $MG_LINE" || return
  # Chunks used only with their own context: the fake refuses (and counts)
  # an event recorded on a stream of another context, as CUDA does.
  case $MG_LINE in *" misuses=0 "* | *" misuses=-1 "*) ;;
    *) fail "--mode=$mode: events recorded on another context's stream: $MG_LINE" || return ;;
  esac
  pid=${MG_LINE##* pid=}
  [ -f "$d/t.$pid.trace" ] || fail "--mode=$mode: no trace of pid $pid: $(ls "$d")" || return
  "$B/trace_check" "$d/t.$pid.trace" --complete --failed 0 --pageable $((2 * MG_PER_DEV)) "$@" >&2 ||
    fail "--mode=$mode: the trace" || return
  "$B/pagelock" report --format json "$d/t.$pid.trace" >"$d/report.json" 2>"$d/report.err" ||
    fail "--mode=$mode: report --format json failed: $(cat "$d/report.err")" || return
  python3 - "$d/report.json" <<'PY' >&2 || fail "--mode=$mode: the report's device table"
import json, sys
j = json.load(open(sys.argv[1]))
devs = {d["device"]: d for p in j["processes"] for d in (p.get("gpu") or {}).get("devices", [])}
bad = [f"device {i}: {'missing' if i not in devs else 'no copies'}" for i in (0, 1)
       if i not in devs or devs[i]["copies"] == 0]
if set(devs) - {0, 1}:
    bad.append(f"devices {sorted(set(devs) - {0, 1})} the program never used")
for b in bad:
    print("report: " + b)
sys.exit(1 if bad else 0)
PY
}
mg_skip() {
  command -v python3 >/dev/null && [ -x "$B/test_multigpu" ] && return 1
  echo "    (python3 or test_multigpu missing: skipped)" >&2
}

# Observe: nothing staged or registered, both devices in the report, the
# device-to-device copies recorded as they went, every copy joined to the
# GPU's record of it.
case_multigpu_observe() { mg_skip || mg observe observe -- --registered-max 0 --d2d-min 1 --gpu-status 0 --gpu-joined; }

# Stage with a 4 MiB pool shared by the two devices' contexts: bytes exact,
# the pool bound never exceeded (stage registers nothing but the pool's
# slabs, so the fake driver's registered-bytes high-water mark is the
# pool's), copies staged, device-to-device copies passed through, no chunk's
# event recorded on another context's stream (mg checks it).
case_multigpu_stage() {
  mg_skip && return 0
  MG_SET="PAGELOCK_POOL_SIZE=4M" mg stage stage -- --registered-max 0 --d2d-min 1 || return
  [ -n "$MG_LINE" ] || return 0
  local hw=${MG_LINE##* high_water=}; hw=${hw%% *}
  [ "$hw" = -1 ] || [ "$hw" -le 4194304 ] || fail "registered bytes reached $hw, over the 4 MiB pool: $MG_LINE" || return
  [ "$hw" = -1 ] || [ "$hw" -gt 0 ] || fail "nothing staged: $MG_LINE" || return
  grep -q "^routes: .* [1-9][0-9]* staged" "$MG_DIR/err" || fail "no staged copies in the report: $(grep '^routes' "$MG_DIR/err")"
}

# Auto with the default pool: hot buffers registered in both contexts,
# bytes exact, device-to-device copies passed through.
case_multigpu_auto() { mg_skip || mg auto auto -- --registered-min 4 --d2d-min 1; }

# Auto and register with a 4 MiB pool shared by the two contexts: a copy
# staged while its buffer is being registered runs out of chunks and
# passes the rest through, which the driver refused (cudaErrorInvalidValue)
# when that rest started inside the fresh registration and ran past its end
# (the fake models the refusal); it is now cut at the interior's edges.
case_multigpu_auto_small_pool() {
  mg_skip || { MG_SET="PAGELOCK_POOL_SIZE=4M" mg auto xpool -- --registered-min 4 &&
    MG_SET="PAGELOCK_POOL_SIZE=4M" mg register xpool -- --registered-min 4; }
}

# Every COPY record names the device of the context its copy ran in (the
# shim asks the driver once per context change, per thread): each thread's
# host<->device copies on its own device, and no thread on two devices.
case_multigpu_copy_device() {
  mg_skip || mg observe dev -- --device-copies 0=$MG_PER_DEV --device-copies 1=$MG_PER_DEV --thread-one-device
}

# The register budget held over two contexts: under auto with an 8 MiB
# budget and a 4 MiB pool, four 3 MiB buffers hot in two contexts cannot
# all be registered (copies staged for the budget).  The shim's own high-water mark stays within the
# budget, and so does the fake driver's registered bytes minus the pool.
case_multigpu_budget() {
  mg_skip && return 0
  MG_SET="PAGELOCK_POOL_SIZE=4M PAGELOCK_REGISTER_BUDGET=8M" mg auto budget -- --registered-min 1 --why-min BUDGET=1 \
    --counter-max registered_bytes_high_water=8388608 --counter-min register_budget=8388608 \
    --counter-max register_budget=8388608 || return
  [ -n "$MG_LINE" ] || return 0
  local hw=${MG_LINE##* high_water=}; hw=${hw%% *}
  [ "$hw" = -1 ] || [ "$hw" -le $(((4 + 8) << 20)) ] ||
    fail "registered bytes reached $hw, over the 8 MiB budget plus the 4 MiB pool: $MG_LINE"
}

# Device-to-device copies (cudaMemcpy DeviceToDevice: cuMemcpyDtoD_v2;
# cudaMemcpyAsync Default: cuMemcpyAsync) and peer copies (cudaMemcpyPeer,
# cudaMemcpyPeerAsync: cuMemcpyPeer, cuMemcpyPeerAsync) each leave one COPY
# record, of its own direction, passed through under every mode.
case_multigpu_d2d() {
  mg_skip && return 0
  local mode
  for mode in observe stage auto; do
    MG_SET="PAGELOCK_POOL_SIZE=4M" mg $mode d2d -- --d2d 2 --peer 2 --api-min cuMemcpyDtoD_v2=1 \
      --api-min cuMemcpyPeer=1 --api-min cuMemcpyPeerAsync=1 || return
  done
}
# Two processes of one job, one device each (torchrun, mpirun: RANK and
# LOCAL_RANK per process), under observe, stage and auto: bytes exact, one
# trace per rank whose copies all name its own device, and one report
# whose rank table lists both.
case_multigpu_ranks() {
  mg_skip && return 0
  local m d r
  for m in observe stage auto; do
    d="$T/mgr_$m"; mkdir -p "$d"
    env $MG_ENV timeout -k 5 100 "$B/pagelock" run --mode=$m -o "$d/rank%r.trace" -- sh -c \
      "RANK=0 LOCAL_RANK=0 '$B/test_multigpu' rank 4 & RANK=1 LOCAL_RANK=1 '$B/test_multigpu' rank 4 & wait" \
      >"$d/out" 2>"$d/err" ||
      fail "--mode=$m: the job failed: $(grep -hE '^(multigpu|pagelock)' "$d/out" "$d/err" | head -4)" || return
    if grep -q 'skipped' "$d/out"; then echo "    (fewer than two devices: skipped)" >&2; return 0; fi
    echo "    --mode=$m: $(tr '\n' ' ' <"$d/out")" >&2
    for r in 0 1; do
      grep -q "^multigpu-rank: device=$r copies=8 wrong=0 failed=0 " "$d/out" ||
        fail "--mode=$m: rank $r: $(cat "$d/out")" || return
      [ -f "$d/rank$r.trace" ] || fail "--mode=$m: no rank$r.trace: $(ls "$d")" || return
      "$B/trace_check" "$d/rank$r.trace" --complete --failed 0 --pageable 8 --device-copies $r=8 >&2 ||
        fail "--mode=$m: rank $r's trace" || return
    done
    grep -Eq '^ *rank +host' "$d/err" || fail "--mode=$m: no per-rank table: $(tail -5 "$d/err")" || return
    [ "$(grep -Ec '^ +[01] +[^ ]+ +[0-9]+ +8 ' "$d/err")" = 2 ] ||
      fail "--mode=$m: the rank table does not list both ranks with 8 copies: $(grep -A3 -E '^ *rank +host' "$d/err")" || return
  done
}

# ---- the shim's threads and the program's signals (issue 39 item 4) ----
# Every thread but the program's own blocks every signal the program could
# receive, in each mode, with every thread the mode starts there to see:
# the trace writer, CUPTI's thread, the copy threads, the registration
# thread, and the thread CUPTI starts from the shim's calls (fake CUPTI
# made to inherit its creator's mask).  Over a real driver only the
# shim's own threads are judged.
case_sigmask_threads() {
  local d="$T/smt" m want only="" got
  mkdir -p "$d"
  [ "$SIM" = 1 ] || only=pagelock-
  for m in observe stage register auto; do
    case $m in
      observe) want="pagelock-cupti pagelock-trace" ;;
      stage) want="pagelock-copy pagelock-cupti pagelock-trace" ;;
      *) want="pagelock-cupti pagelock-pin pagelock-trace" ;;
    esac
    [ "$SIM" = 1 ] && want="$want fakecupti"
    FAKECUPTI_WORKER_SIGNALS=inherit PAGELOCK_COPY_THREADS=3 PAGELOCK_MODE=$m LD_PRELOAD="$SHIM" \
      PAGELOCK_OUTPUT="$d/$m.%p.trace" timeout 120 "$B/test_sigmask" threads $only >"$d/$m.out" 2>"$d/$m.err" ||
      fail "$m: a thread leaves signals unblocked (or the program failed): $(grep -v 'blocked=all' "$d/$m.out" | cut -c1-300) $(head -3 "$d/$m.err")" || return
    got=$(sed -n 's/^threads=//p' "$d/$m.out")
    echo "    $m: $got, $(grep -o 'bytes_checked=[0-9]*' "$d/$m.out")" >&2
    for t in $want; do
      case ",$got," in *",$t,"*) ;; *) fail "$m: no thread named $t among: $got" || return ;; esac
    done
  done
}

# The threads CUPTI starts again each time the shim attaches it for a
# window of GPU timing, from the shim's own CUPTI thread: fake CUPTI's
# thread keeps the mask of the thread that started it, and must find every
# signal blocked there.  Windows of 5 ms: one attach every 0.8 s.
case_sigmask_reattach() {
  [ "$SIM" = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/smr" k
  mkdir -p "$d"
  FAKECUPTI_WORKER_SIGNALS=inherit FAKECUPTI_ATTACH_LOG=1 PAGELOCK_CUPTI_WINDOW_MS=5 LD_PRELOAD="$SHIM" \
    PAGELOCK_OUTPUT="$d/t.%p.trace" timeout 120 "$B/test_sigmask" reattach 2500 >"$d/out" 2>"$d/err" ||
    fail "$(cat "$d/out") $(grep -v '^fakecupti: attached' "$d/err" | head -3)" || return
  echo "    $(cat "$d/out"), $(grep -c '^fakecupti: attached' "$d/err") attaches" >&2
  k=$(sed -n 's/.* cupti_threads=\([0-9]*\) .*/\1/p' "$d/out")
  [ "${k:-0}" -ge 2 ] && [ "$(grep -c '^fakecupti: attached' "$d/err")" -ge 2 ] ||
    fail "CUPTI was not attached again (so nothing was tested): $(cat "$d/out")"
}

# A single-threaded program whose SIGALRM handler (128 KiB of stack)
# asserts it runs on the main thread, a 50 us timer firing while it
# copies: the handler ran on the shim's CUPTI thread (64 KiB, nothing
# blocked) and crashed the program 6 times in 7 under plain observe.
case_sigmask_alarm() {
  local d="$T/sma" m ms
  mkdir -p "$d"
  for m in observe auto; do
    ms=1500; [ $m = observe ] || ms=600
    PAGELOCK_MODE=$m LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$m.%p.trace" timeout 120 \
      "$B/test_sigmask" alarm $ms >"$d/$m.out" 2>"$d/$m.err" ||
      fail "$m: $(cat "$d/$m.out") $(head -3 "$d/$m.err")" || return
    echo "    $m: $(cat "$d/$m.out")" >&2
  done
}

# ---- the program's own stderr (issue 39 item 5) ----
# A program that closes descriptor 2 (or dup2s over it, or started with it
# closed) and opens its own file there, then copies while registration and
# the staging pool fail: no pagelock line lands in its file, and the
# trace's note (the report's "warning:" line) says the log was withheld.  The
# same program keeping its stderr shows the warnings were made, and that
# they agree with each other.
case_stderr_takeover() {
  [ "$SIM" = 1 ] || { echo "    (fault injection needs the fake driver: skipped)" >&2; return 0; }
  local d="$T/sto" how f rc
  mkdir -p "$d"
  export FAKECUDA_FAIL=cuMemHostRegister_v2:0:2
  PAGELOCK_MODE=register LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/keep.trace" \
    "$B/test_stderr_takeover" keep "$d/keep.file" >"$d/keep.out" 2>"$d/keep.err" || { unset FAKECUDA_FAIL; fail "keep: exit $?: $(cat "$d/keep.out" "$d/keep.err")"; return; }
  grep -q '^pagelock: could not page-lock' "$d/keep.err" && grep -q '^pagelock: cuMemHostRegister failed' "$d/keep.err" ||
    { unset FAKECUDA_FAIL; fail "keep: the warnings this case relies on were not made: $(cat "$d/keep.err")"; return; }
  # one run's log agrees with itself: no copy is said to be staged where
  # another line says staging is off and copies pass through
  ! grep -q 'staged instead;' "$d/keep.err" ||
    { unset FAKECUDA_FAIL; fail "keep: the log contradicts itself: $(cat "$d/keep.err")"; return; }
  printf "the program's own first line\nthe program's last line\n" >"$d/want"
  for how in close dup2 closed; do
    f="$d/$how.file"
    if [ $how = closed ]; then
      PAGELOCK_MODE=register LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$how.trace" \
        "$B/test_stderr_takeover" $how "$f" >"$d/$how.out" 2>&-
    else
      PAGELOCK_MODE=register LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$how.trace" \
        "$B/test_stderr_takeover" $how "$f" >"$d/$how.out" 2>"$d/$how.err"
    fi
    rc=$?
    [ $rc = 0 ] || { unset FAKECUDA_FAIL; fail "$how: exit $rc: $(cat "$d/$how.out")"; return; }
    echo "    $how: $(cat "$d/$how.out")" >&2
    cmp -s "$f" "$d/want" || { unset FAKECUDA_FAIL; fail "$how: the program's file holds more than its own lines: $(cat "$f")"; return; }
    [ $how = closed ] || [ ! -s "$d/$how.err" ] || { unset FAKECUDA_FAIL; fail "$how: the old stderr got: $(cat "$d/$how.err")"; return; }
    "$B/pagelock" report "$d/$how.trace" >"$d/$how.report" 2>&1 || { unset FAKECUDA_FAIL; fail "$how: report failed: $(tail -3 "$d/$how.report")"; return; }
    grep -q "^warning: .*pagelock logged nothing.*the first withheld: " "$d/$how.report" ||
      { unset FAKECUDA_FAIL; fail "$how: the report does not say the log was withheld: $(grep -i note "$d/$how.report")"; return; }
  done
  # under `pagelock run`, whose report goes to pagelock's own stderr
  "$B/pagelock" run --mode=register -o "$d/run.%p.trace" -- "$B/test_stderr_takeover" close "$d/run.file" \
    >"$d/run.out" 2>"$d/run.err"
  rc=$?
  unset FAKECUDA_FAIL
  [ $rc = 0 ] || fail "run: exit $rc: $(tail -3 "$d/run.err")" || return
  cmp -s "$d/run.file" "$d/want" || fail "run: the program's file: $(cat "$d/run.file")" || return
  grep -q "^warning: the program put another file at descriptor 2" "$d/run.err" ||
    fail "run: the report does not say the log was withheld: $(grep -i note "$d/run.err")"
}

# ---- special files as the output (issue 39 item 6) ----
# A character device means "discard": nothing written, no file made; a
# FIFO or the program's own stdout is refused in one line; never a
# suffixed file beside any of them.  `pagelock run -o /dev/null` still
# reports, from a private directory it deletes.
case_output_special() {
  local d="$T/osp" o dev0 dev1 n
  mkdir -p "$d/tmp"
  dev0=$(ls -A /dev | sort)
  for o in /dev/null /dev/full; do
    LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT=$o "$B/test_copies" >"$d/out" 2>"$d/err" ||
      fail "$o: the program failed: $(cat "$d/err")" || return
    [ ! -s "$d/err" ] || fail "$o: the shim said: $(cat "$d/err")" || return
    grep -q '^pageable=' "$d/out" || fail "$o: the program's output is lost" || return
  done
  # a link to a device where a trace would go: no file beside it either
  ln -s /dev/null "$d/link.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/link.trace" "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "link: the program failed" || return
  n=$(ls -A "$d" | grep -vx -e tmp -e out -e err -e link.trace | tr '\n' ' ')
  [ -z "$n" ] || fail "link to /dev/null: files made beside it: $n" || return
  # the program's stdout, a regular file: refused, the file holds only the program's lines
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT=/dev/stdout "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "/dev/stdout: the program failed" || return
  [ "$(grep -c . "$d/err")" = 1 ] && grep -q "^pagelock: cannot write the trace to '/dev/stdout': it is a link to one of the program's own descriptors" "$d/err" ||
    fail "/dev/stdout: expected one line, got: $(cat "$d/err")" || return
  [ "$(grep -vc '^pageable=' "$d/out")" = 0 ] || fail "/dev/stdout: the program's stdout holds more than its own line" || return
  # a FIFO: refused, never opened (a timeout catches a hang)
  mkfifo "$d/f.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/f.trace" timeout 60 "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "FIFO: the program failed or hung" || return
  grep -q "^pagelock: cannot write the trace to '$d/f.trace': it is a FIFO" "$d/err" || fail "FIFO: $(cat "$d/err")" || return
  [ "$(ls "$d" | grep -c '^f\.')" = 1 ] || fail "FIFO: a file beside it: $(ls "$d")" || return
  # pagelock run: -o and PAGELOCK_OUTPUT naming /dev/null report, keep nothing
  for o in -o PAGELOCK_OUTPUT; do
    if [ $o = -o ]; then
      TMPDIR="$d/tmp" "$B/pagelock" run -o /dev/null -- "$B/test_copies" >"$d/out" 2>"$d/err"
    else
      TMPDIR="$d/tmp" PAGELOCK_OUTPUT=/dev/null "$B/pagelock" run -- "$B/test_copies" >"$d/out" 2>"$d/err"
    fi
    [ $? = 0 ] || fail "run $o /dev/null: exit status $?: $(tail -3 "$d/err")" || return
    awk '$2 == "pageable" && ($1 == "H2D" || $1 == "D2H") { n++ } END { exit n == 0 }' "$d/err" ||
      fail "run $o /dev/null: no report: $(cat "$d/err")" || return
    grep -qx "pagelock: '/dev/null' is a character device, which keeps nothing: the 1 trace above was deleted after the report" "$d/err" ||
      fail "run $o /dev/null: $(tail -2 "$d/err")" || return
    [ -z "$(ls -A "$d/tmp" | grep -v '^pagelock-manifest')" ] || fail "run $o /dev/null left: $(ls -A "$d/tmp")" || return
  done
  "$B/pagelock" run -o /dev/stdout -- sh -c 'echo ran >"$0"' "$d/ran" >"$d/out" 2>"$d/err"
  [ $? = 2 ] || fail "run -o /dev/stdout into a file: not refused" || return
  [ ! -e "$d/ran" ] || fail "run -o /dev/stdout: the program ran" || return
  grep -qx "pagelock: cannot write traces to -o '/dev/stdout': it is one of the program's own descriptors, and a trace is a regular file of its own (give a file name or a directory, or /dev/null to keep none)" "$d/err" ||
    fail "run -o /dev/stdout: $(cat "$d/err")" || return
  "$B/pagelock" run -o "$d/f.trace" -- true >"$d/out" 2>"$d/err"
  [ $? = 2 ] && grep -q "it is a FIFO" "$d/err" || fail "run -o FIFO: $(cat "$d/err")" || return
  dev1=$(ls -A /dev | sort)
  n=$(comm -13 <(echo "$dev0") <(echo "$dev1") | grep -E '^(null|full|stdout|stderr)[.]' | tr '\n' ' ')
  [ -z "$n" ] || fail "files made in /dev: $n"
}

# ---- rank names (issue 40, Ranks) ----
# %r is the launcher's rank, and a process with none (torchrun's or
# mpirun's own) gets "norank", never 0; a name taken gets its number
# before ".trace" (x.0.1.trace); `pagelock report DIR` reads them all.
case_rank_names() {
  local d="$T/rank" v n
  mkdir -p "$d"
  local clean="env -u RANK -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK -u MV2_COMM_WORLD_RANK -u SLURM_PROCID -u LOCAL_RANK"
  rn() { $clean "$@" LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/x.%r.trace" "$B/test_copies" >/dev/null 2>>"$d/err" || fail "$*: the program failed"; }
  rn || return
  rn RANK=0 || return
  rn RANK=0 LOCAL_RANK=0 || return
  rn OMPI_COMM_WORLD_RANK=3 || return
  rn PMIX_RANK=4 || return
  rn PMI_RANK=5 || return
  rn MV2_COMM_WORLD_RANK=6 || return
  rn SLURM_PROCID=7 || return
  rn LOCAL_RANK=1 || return
  rn RANK=abc || return
  [ ! -s "$d/err" ] || fail "the shim said: $(cat "$d/err")" || return
  [ "$(cd "$d" && ls *.trace | sort | tr '\n' ' ')" = "x.0.1.trace x.0.trace x.3.trace x.4.trace x.5.trace x.6.trace x.7.trace x.norank.1.trace x.norank.2.trace x.norank.trace " ] ||
    fail "trace names: $(cd "$d" && ls | tr '\n' ' ')" || return
  "$B/pagelock" report "$d" >"$d/report" 2>"$d/rerr" || fail "report DIR: $(cat "$d/rerr")" || return
  grep -q "== total over 10 processes ==" "$d/report" || fail "report DIR did not read the 10 traces: $(grep '^==' "$d/report" | head -3)" || return
  "$B/pagelock" report --format json "$d" >"$d/json" 2>/dev/null || fail "report --format json DIR" || return
  command -v python3 >/dev/null 2>&1 || return 0
  n=$(python3 -c 'import json, sys; print(sorted(-1 if p["rank"] is None else p["rank"] for p in json.load(sys.stdin)["processes"]))' <"$d/json")
  [ "$n" = "[-1, -1, -1, 0, 0, 3, 4, 5, 6, 7]" ] || fail "ranks in the traces (-1: none): $n"
}

# Every case defined above, in the order they appear.
all=$(grep -o '^case_[a-z0-9_]*()' "$0" | sed 's/^case_//; s/()$//')
for c in ${@:-$all}; do
  f=case_$c; case $c in xcase_*) f=$c ;; esac
  if "$f"; then echo "ok   $c"; pass=$((pass+1)); else echo "FAIL $c"; fail=$((fail+1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
