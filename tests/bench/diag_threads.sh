#!/usr/bin/env bash
# tests/bench/diag_threads.sh BUILD_DIR [ROUNDS] [COUNTS] - the copy
# threads' count against the staged uploads: per round, pinned references,
# then the default policy (at most 5 threads for an upload queued behind
# earlier ones, shim/engines/stage.c PL_NT_HELPERS) and each fixed
# PAGELOCK_COPY_THREADS in COUNTS (default "4 5 6 8"), each printing
# overlap ms, H2D 64 / 16 / 256 MiB GB/s.
set -u
B=$(cd "$1" && pwd); N=${2:-5}; COUNTS=${3:-4 5 6 8}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
S=(env LD_PRELOAD="$B/libpagelock.so" PAGELOCK_CUPTI=0 PAGELOCK_MODE=stage PAGELOCK_OUTPUT="$T/%p.trace")
val() { grep -o "$1=[0-9.]*" | cut -d= -f2; }
four() { # kind, then the environment to run under
  local k=$1; shift
  printf '%s %s %s %s' \
    "$("$@" "$B/bench_copy" overlap "$k" $((16 << 20)) 7 | val ' ms')" \
    "$("$@" "$B/bench_copy" h2d "$k" $((64 << 20)) 7 | val gbps)" \
    "$("$@" "$B/bench_copy" h2d "$k" $((16 << 20)) 7 | val gbps)" \
    "$("$@" "$B/bench_copy" h2d "$k" $((256 << 20)) 5 | val gbps)"
}
echo "per variant: overlap ms, H2D 64 / 16 / 256 MiB GB/s"
for r in $(seq "$N"); do
  line="round $r | pinned $(four pinned env) | default $(four pageable "${S[@]}")"
  for t in $COUNTS; do line="$line | $t threads $(four pageable "${S[@]}" PAGELOCK_COPY_THREADS="$t")"; done
  echo "$line"
done
