#!/usr/bin/env bash
# Preload tests: the shim over a CUDA (fake in CI, real on the GPU machine),
# loaded with LD_PRELOAD exactly as users run it.
#   run.sh BUILD_DIR CASE...     (no CASE: all of them)
# Each case is a function case_NAME() in one of cases/*.sh (a file per
# group); tests/CMakeLists.txt makes one ctest of each, preload_NAME.
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

# The cases, a file per group with its helpers.
for f in "$(dirname "$0")"/cases/*.sh; do . "$f"; done

# Every case, in the order of the files and, in each, of the file.
all=$(cat "$(dirname "$0")"/cases/*.sh | grep -o '^case_[a-z0-9_]*()' | sed 's/^case_//; s/()$//')
for c in ${@:-$all}; do
  f=case_$c; case $c in xcase_*) f=$c ;; esac
  if "$f"; then echo "ok   $c"; pass=$((pass+1)); else echo "FAIL $c"; fail=$((fail+1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
