# shellcheck shell=bash
# Preload cases: call sites: one copy from two lines, buffers made anew each
# step, stacks that are not a thread's own.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

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

# What finding call sites cost the program (the COST record): the two
# sites' stacks unwound at least once each, the time counted, the report's
# line; none of it with the stacks off.
case_site_cost() {
  local d="$T/cost" n; mkdir -p "$d"
  "$B/pagelock" run -o "$d/on.trace" -- "$B/test_two_sites" >/dev/null 2>"$d/err" ||
    fail "two_sites failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d/on.trace" --cost-min captures=2 --cost-min unwinds=2 \
    --cost-min capture_ns=1 --cost-min unwind_ns=1 >&2 || return
  n=$(sed -n 's/^call sites cost: \([0-9]*\) call stacks, [0-9.]* ms on the program.s threads.*/\1/p' "$d/err")
  [ -n "$n" ] && [ "$n" -ge 2 ] || fail "the report's cost line: $(grep -A1 '^call sites cost' "$d/err")" || return
  PAGELOCK_BACKTRACE_DEPTH=0 "$B/pagelock" run -o "$d/off.trace" -- "$B/test_two_sites" >/dev/null 2>"$d/err" ||
    fail "two_sites failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d/off.trace" --cost-max captures=0 >&2 || return
  ! grep -q '^call sites cost' "$d/err" || fail "a cost line with the stacks off: $(grep '^call sites cost' "$d/err")"
}

# Twenty Python lines copying in turn through one native path
# (tests/python/lines.py, ctypes): each line its own call site, and the
# native unwind made for the path, not for each line (the memo keys on
# the native path alone; keyed by the Python frames too, every copy was
# unwound: 69 unwinds for 100 copies).
case_site_cost_lines() {
  [ "$SIM" = 1 ] && command -v python3 >/dev/null || { echo "    (needs python3 and the fake runtime: skipped)" >&2; return 0; }
  local d="$T/lines" n; mkdir -p "$d"
  PL_CUDART="$B/fakecuda/libcudart.so" PAGELOCK_TRACK_MIN=1024G "$B/pagelock" run -o "$d/t.%p.trace" -- \
    python3 "$(dirname "$0")/../python/lines.py" >/dev/null 2>"$d/err" || fail "lines.py failed: $(tail -3 "$d/err")" || return
  n=$(grep -c ' lines.py:[0-9]* in step$' "$d/err")
  [ "$n" = 20 ] || fail "expected 20 call sites in step, got $n" || return
  "$B/trace_check" "$d"/t.*.trace --pageable 100 --cost-min captures=100 --cost-max unwinds=4 >&2
}
