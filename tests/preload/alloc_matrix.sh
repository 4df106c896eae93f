#!/usr/bin/env bash
# The whole preload suite (run.sh) under each allocator that is installed,
# preloaded before the shim and after it (run.sh's PL_TEST_PRELOAD_FIRST /
# PL_TEST_PRELOAD_LAST), plus 200 threads allocating at once
# (test_alloc_threads): 6 passes for jemalloc, tcmalloc and mimalloc.
#   alloc_matrix.sh BUILD_DIR
# Every case runs under `timeout`, so a hang fails instead of blocking; a
# pass stops at its first hang (the next cases would wait as long each).
# Prints a table, then what each failure said; exit 1 on any failure.  An
# allocator that is not installed is skipped, and says so.
#   PL_MATRIX_ALLOCATORS  sonames to try (default: the three below)
#   PL_MATRIX_TIMEOUT     seconds per case (default 60)
set -u
[ $# = 1 ] && [ -d "$1" ] || { echo "usage: alloc_matrix.sh BUILD_DIR" >&2; exit 2; }
B=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
TO=${PL_MATRIX_TIMEOUT:-60}
ALLOCS=${PL_MATRIX_ALLOCATORS:-libjemalloc.so.2 libtcmalloc_minimal.so.4 libmimalloc.so.2}
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-matrix.XXXXXX")
trap 'rm -rf "$T"' EXIT
[ -f "$B/fakecuda/libcuda.so.1" ] && export LD_LIBRARY_PATH="$B/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Where the loader finds a soname, or nothing.
find_lib() {
  local ldc; ldc=$(command -v ldconfig || echo /sbin/ldconfig)
  "$ldc" -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }'
}
# The Debian package that has it, for the skip line.
package_of() {
  case "$1" in
    libjemalloc*) echo libjemalloc2 ;;
    libtcmalloc*) echo libtcmalloc-minimal4 ;;
    libmimalloc*) echo libmimalloc2.0 ;;
    *) echo "?" ;;
  esac
}

cases=$(cat "$HERE"/cases/*.sh | grep -o '^case_[a-z0-9_]*()' | sed 's/^case_//; s/()$//')
ncases=$(echo $cases | wc -w)
rows=()
failed=0
printf '%-24s %-13s %5s %6s %6s %7s  %-30s %7s\n' allocator preload cases passed failed skipped "200 threads (tracked/expected)" time
for so in $ALLOCS; do
  lib=$(find_lib "$so")
  name=${so%%.so*}; name=${name#lib}; name=${name%_minimal}
  if [ -z "$lib" ]; then
    echo "skipped: $name ($so) is not installed (Debian package $(package_of "$so"))"
    continue
  fi
  for order in first last; do
    var=PL_TEST_PRELOAD_$(echo $order | tr a-z A-Z)
    start=$(date +%s%N)
    pass=0 fail=0 skip=0 hung=
    for c in $cases; do
      out="$T/$name-$order-$c.out"
      env "$var=$lib" timeout -k 5 "$TO" "$HERE/run.sh" "$B" "$c" >"$out" 2>&1
      rc=$?
      if [ $rc = 0 ]; then
        pass=$((pass + 1))
        grep -q '^    (.*skipped)$' "$out" && skip=$((skip + 1))
      else
        fail=$((fail + 1))
        if [ $rc = 124 ] || [ $rc = 137 ]; then
          hung=$c
          echo "hung (no end after ${TO} s)" >>"$out"
        fi
        rows+=("$name $order: FAIL $c" "$(sed 's/^/      /' "$out" | tail -15)")
        [ -n "$hung" ] && break
      fi
    done
    if [ -n "$hung" ]; then
      left=$((ncases - pass - fail))
      rows+=("$name $order: hung in $hung; the $left cases after it were not run")
      fail=$((fail + left))
    fi
    # 200 threads, again by itself, to show what the registry held.
    threads="not run (hung before)"
    if [ -z "$hung" ]; then
      [ $order = first ] && pre="$lib:$B/libpagelock.so" || pre="$B/libpagelock.so:$lib"
      LD_PRELOAD="$pre" timeout -k 5 "$TO" "$B/test_alloc_threads" 200 60 "$B/testlib/libnext_a.so" >"$T/at.out" 2>&1
      rc=$?
      tracked=$(grep -o 'tracked=[0-9]* expected=[0-9]*' "$T/at.out" | sed 's/tracked=//; s/ expected=/\//')
      if [ $rc = 0 ]; then
        threads="ok ${tracked:-?}"
      else
        threads="FAIL (status $rc${tracked:+, $tracked})"
        fail=$((fail + 1))
        rows+=("$name $order: 200 threads failed (status $rc; 124: hung)" "$(sed 's/^/      /' "$T/at.out" | tail -5)")
      fi
    fi
    [ $order = first ] && label="$name:shim" || label="shim:$name"
    ds=$((($(date +%s%N) - start) / 100000000))
    printf '%-24s %-13s %5s %6s %6s %7s  %-30s %5s.%ss\n' "$so" "$label" "$ncases" "$((pass - skip))" "$fail" "$skip" \
      "$threads" $((ds / 10)) $((ds % 10))
    [ $fail = 0 ] || failed=1
  done
done
echo "(order: LD_PRELOAD as the cases give it; cases that go through \`pagelock run\` get the shim first in either)"
for r in "${rows[@]+"${rows[@]}"}"; do echo "$r"; done
exit $failed
