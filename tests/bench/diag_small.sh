#!/usr/bin/env bash
# tests/bench/diag_small.sh BUILD_DIR [ROUNDS] - where the host time of a
# small pageable copy goes under the shim: native, then the shim with parts
# of its work turned off, alternating, ROUNDS times; medians per variant.
set -u
B=$(cd "$1" && pwd); N=${2:-7}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
declare -A V=(
  [native]="X=1"
  [observe]="LD_PRELOAD=$B/libpagelock.so PAGELOCK_CUPTI=0"
  [nostack]="LD_PRELOAD=$B/libpagelock.so PAGELOCK_CUPTI=0 PAGELOCK_BACKTRACE_DEPTH=0"
  [notrack]="LD_PRELOAD=$B/libpagelock.so PAGELOCK_CUPTI=0 PAGELOCK_TRACK_MIN=1G"
  [off]="LD_PRELOAD=$B/libpagelock.so PAGELOCK_MODE=off"
)
for i in $(seq "$N"); do
  for v in native observe nostack notrack off; do
    env ${V[$v]} PAGELOCK_OUTPUT="$T/%p.trace" "$B/bench_copy" small pageable 256 7 | grep -o 'ns_per_call=[0-9.]*' | cut -d= -f2 >>"$T/$v"
  done
done
for v in native observe nostack notrack off; do
  printf '%-8s median %8s  all: %s\n' "$v" "$(sort -g "$T/$v" | sed -n "$(( (N + 1) / 2 ))p")" "$(tr '\n' ' ' <"$T/$v")"
done
