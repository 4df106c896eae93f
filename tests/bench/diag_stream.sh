#!/usr/bin/env bash
# tests/bench/diag_stream.sh BUILD_A BUILD_B - staged H2D and overlap with two
# builds of the shim side by side (A: streaming stores into chunks, B: built
# with -DPL_NO_STREAM_STORES), alternating, three rounds, chunk sizes 2M/8M.
set -u
A=$(cd "$1" && pwd); Bb=$(cd "$2" && pwd); T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
r() { printf '%-40s %s\n' "$1" "$(env PAGELOCK_OUTPUT="$T/d.%p" "${@:2}" 2>&1 | grep '^result' | cut -d' ' -f5-)"; }
for round in 1 2 3; do
  for cs in 2M 8M; do
    for v in A B; do
      lib=$([ $v = A ] && echo "$A" || echo "$Bb")/libpagelock.so
      r "$v chunk $cs h2d 64M" LD_PRELOAD="$lib" PAGELOCK_MODE=stage PAGELOCK_CHUNK_SIZE=$cs "$A/bench_copy" h2d pageable $((64<<20)) 7
      r "$v chunk $cs overlap" LD_PRELOAD="$lib" PAGELOCK_MODE=stage PAGELOCK_CHUNK_SIZE=$cs "$A/bench_copy" overlap pageable $((16<<20)) 7
    done
  done
done
