#!/bin/sh
# run.sh BUILD_DIR - golden reports.
#
# For every tests/golden/NAME.trace that has a NAME.expected.txt, runs
# `pagelock report NAME.trace` (from this directory, so paths in the output
# are relative and stable) and diffs its stdout with NAME.expected.txt; when
# NAME.expected.json exists, the same with --format json.  Symbol tools and
# colour are off and COLUMNS unset (sentences wrap at 100 columns, as in any
# file) so the output depends on the trace alone.
#
# PAGELOCK_GOLDEN_UPDATE=1 rewrites the expected files from the current
# output instead (review the diff before committing it).
#
# Exit status: 0 all matched, 1 a difference, 77 no golden trace yet (ctest
# reports the test as skipped).
set -u
# (absolute: the reports run from this directory, and an update from a
# relative path once wrote every expected file empty)
B=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd) || exit 1
D=$(cd "$(dirname "$0")" && pwd) || exit 1
PL="$B/pagelock"
[ -x "$PL" ] || { echo "no pagelock in $B"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-golden.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
cd "$D" || exit 1
export PAGELOCK_NO_ADDR2LINE=1 NO_COLOR=1
unset PAGELOCK_OUTPUT PAGELOCK_MANIFEST LD_PRELOAD COLUMNS
n=0
bad=0
for t in *.trace; do
  [ -e "$t" ] || continue
  base=${t%.trace}
  if [ ! -f "$base.expected.txt" ]; then
    echo "note: $t has no $base.expected.txt: not checked"
    continue
  fi
  n=$((n + 1))
  for fmt in txt json; do
    want="$base.expected.$fmt"
    [ -f "$want" ] || continue
    if [ "$fmt" = json ]; then
      "$PL" report --format json "$t" >"$T/out" 2>"$T/err"
    else
      "$PL" report "$t" >"$T/out" 2>"$T/err"
    fi
    rc=$?
    if [ "${PAGELOCK_GOLDEN_UPDATE:-0}" = 1 ]; then
      cp "$T/out" "$want" && echo "updated $want"
      continue
    fi
    if [ "$rc" != 0 ]; then
      echo "FAIL $t ($fmt): pagelock report exited $rc"
      cat "$T/err"
      bad=1
    elif ! diff -u "$want" "$T/out"; then
      echo "FAIL $t ($fmt): report differs from $want (above)"
      cat "$T/err"
      bad=1
    else
      echo "ok   $t ($fmt)"
    fi
  done
done
# Whatever the expected files say, the verdicts must hold against the
# trace's own records (check_truth.py): chunks are never program copies,
# a verdict cites only the time of the copies it names.
if [ "$n" != 0 ] && [ "${PAGELOCK_GOLDEN_UPDATE:-0}" != 1 ] &&
   command -v python3 >/dev/null 2>&1; then
  if python3 "$D/check_truth.py" "$PL" *.trace; then
    echo "ok   verdicts agree with the traces' records (check_truth.py)"
  else
    bad=1
  fi
fi
if [ "$n" = 0 ]; then
  echo "SKIP: no golden traces (tests/golden/*.trace with a .expected.txt) yet"
  exit 77
fi
exit $bad
