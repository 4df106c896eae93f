#!/usr/bin/env bash
# tests/bench/diag.sh BUILD_DIR - sensitivity runs behind docs/benchmarks.md:
# where the shim's malloc overhead comes from, and how staging responds to
# chunk and pool sizes.  Each line: label, then the benchmark's own result.
set -u
B=$(cd "$1" && pwd); SHIM="$B/libpagelock.so"; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
r() { local l=$1; shift; printf '%-34s %s\n' "$l" "$(env PAGELOCK_OUTPUT="$T/d.%p.trace" "$@" 2>&1 | grep '^result' | cut -d' ' -f2-)"; }
for i in 1 2; do
  r "malloc native" X=1 "$B/bench_malloc" 7
  r "malloc shim" LD_PRELOAD="$SHIM" "$B/bench_malloc" 7
  r "malloc shim, no stacks" LD_PRELOAD="$SHIM" PAGELOCK_BACKTRACE_DEPTH=0 "$B/bench_malloc" 7
  r "malloc shim, nothing tracked" LD_PRELOAD="$SHIM" PAGELOCK_TRACK_MIN=1G "$B/bench_malloc" 7
done
S=(LD_PRELOAD="$SHIM" PAGELOCK_MODE=stage)
for cs in 2M 4M 8M 16M; do
  r "h2d 64M chunk $cs" "${S[@]}" PAGELOCK_CHUNK_SIZE=$cs "$B/bench_copy" h2d pageable $((64<<20)) 7
  r "overlap chunk $cs" "${S[@]}" PAGELOCK_CHUNK_SIZE=$cs "$B/bench_copy" overlap pageable $((16<<20)) 7
done
r "overlap pool 256M" "${S[@]}" PAGELOCK_POOL_SIZE=256M "$B/bench_copy" overlap pageable $((16<<20)) 7
r "overlap 4 threads" "${S[@]}" PAGELOCK_COPY_THREADS=4 "$B/bench_copy" overlap pageable $((16<<20)) 7
r "overlap pinned" X=1 "$B/bench_copy" overlap pinned $((16<<20)) 7
r "d2h async 64M pool 64M" "${S[@]}" PAGELOCK_D2H=async "$B/bench_copy" d2h pageable $((64<<20)) 7
r "d2h async 64M pool 256M" "${S[@]}" PAGELOCK_D2H=async PAGELOCK_POOL_SIZE=256M "$B/bench_copy" d2h pageable $((64<<20)) 7
r "d2h async 32M" "${S[@]}" PAGELOCK_D2H=async "$B/bench_copy" d2h pageable $((32<<20)) 7
r "small pageable native" X=1 "$B/bench_copy" small pageable 256 7
r "small pageable observe" LD_PRELOAD="$SHIM" "$B/bench_copy" small pageable 256 7
r "small pageable observe, no stacks" LD_PRELOAD="$SHIM" PAGELOCK_BACKTRACE_DEPTH=0 "$B/bench_copy" small pageable 256 7
r "small pageable stage" "${S[@]}" "$B/bench_copy" small pageable 256 7
