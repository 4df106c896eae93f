# shellcheck shell=bash
# Preload cases: the shim preloaded into a program: exact counts, a clean run
# says nothing, bad settings named, no trace clobbered, the exit status passed
# through, mode off.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

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
