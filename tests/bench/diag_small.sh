#!/usr/bin/env bash
# tests/bench/diag_small.sh BUILD_DIR [PROCESSES] [BUILD_DIR2] - where the
# shim's host time on a small pageable copy goes.  Each variant runs
# `bench_copy ab pageable 256` (the shim's wrapper against libcuda's own
# symbol, alternating in one process, so the process's own speed cancels)
# with parts of the shim's work turned off; PROCESSES processes each,
# medians of the per-process ratios.  BUILD_DIR2, when given, is a second
# build (say, with other compile-time constants) run the same way as
# "build2".  Ends with what the shim asks the driver about a copy
# (bench_copy probe): the pointer query for a pageable and a pinned
# buffer, which the classification repeats now and then, and the getters
# of a stream's context and device, asked once per stream and thread.
set -u
B=$(cd "$1" && pwd); N=${2:-5}; B2=${3:+$(cd "$3" && pwd)}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
S="PAGELOCK_CUPTI=0 PAGELOCK_MODE=stage"
declare -A V=(
  [stage]="LD_PRELOAD=$B/libpagelock.so $S"
  [observe]="LD_PRELOAD=$B/libpagelock.so PAGELOCK_CUPTI=0"
  [nostack]="LD_PRELOAD=$B/libpagelock.so $S PAGELOCK_BACKTRACE_DEPTH=0"
  [notrack]="LD_PRELOAD=$B/libpagelock.so $S PAGELOCK_TRACK_MIN=1G"
  [off]="LD_PRELOAD=$B/libpagelock.so PAGELOCK_MODE=off"
)
vs="stage observe nostack notrack off"
[ -n "$B2" ] && { V[build2]="LD_PRELOAD=$B2/libpagelock.so $S"; vs="$vs build2"; }
for i in $(seq "$N"); do
  for v in $vs; do
    env ${V[$v]} PAGELOCK_OUTPUT="$T/%p.trace" "$B/bench_copy" ab pageable 256 7 |
      sed -n 's/.*wrapped_ns=\([0-9.]*\) real_ns=\([0-9.]*\) ratio=\([0-9.]*\).*/\3 \1 \2/p' >>"$T/$v"
  done
done
for v in $vs; do
  printf '%-8s ratio median %s  wrapped-real ns: %s\n' "$v" "$(cut -d' ' -f1 "$T/$v" | sort -g | sed -n "$(( (N + 1) / 2 ))p")" \
    "$(awk '{ printf "%.0f ", $2 - $3 }' "$T/$v")"
done
for k in pageable pinned; do
  echo "probe $k: $("$B/bench_copy" probe $k 4096 3 |
    grep -o '\(ctx\|stream_ctx\|ctx_id\|ctx_dev\|stream_dev\|ptrq\)_ns=[-0-9.]*' | tr '\n' ' ')"
done
