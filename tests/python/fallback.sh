#!/bin/sh
# An interpreter the walk does not read (tests/python/fakepy.c: 3.14, and a
# free-threaded 3.13): the copies keep their native sites, nothing is read
# through the unknown layout (the fake's thread-state function aborts if
# called), and the report says why, once.
#   tests/python/fallback.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-pyfallback.XXXXXX")
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PAGELOCK_NO_ADDR2LINE=1
failed=0
check() { # PROGRAM EXPECTED-NOTE-TEXT
  out="$work/$1"
  mkdir -p "$out"
  "$build/pagelock" run -o "$out/%p.trace" -- "$build/$1" >/dev/null 2>"$out/err" ||
    { echo "FAIL $1: run failed"; cat "$out/err"; failed=1; return; }
  "$build/pagelock" report "$out"/*.trace >"$out/r.txt" 2>&1
  n=$(grep -c "Python frames are not recorded: $2" "$out/r.txt")
  if [ "$n" != 1 ]; then
    echo "FAIL $1: the note '$2' appears $n times (want 1)"; cat "$out/r.txt"; failed=1; return
  fi
  grep -q "native:" "$out/r.txt" && { echo "FAIL $1: a Python site appeared"; failed=1; return; }
  grep -A3 "by call site" "$out/r.txt" | grep -q "test_fakepy" ||
    { echo "FAIL $1: the call sites are not the program's native ones"; cat "$out/r.txt"; failed=1; return; }
  echo "ok $1"
}
check test_fakepy_314 "Python 3.14 is not one pagelock reads"
check test_fakepy_313t "Python 3.13 (free-threaded) is not one pagelock reads"
exit $failed
