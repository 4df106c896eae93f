#!/usr/bin/env bash
# tests/bench/diag_malloc.sh BUILD_DIR [ROUNDS] - the malloc workload over
# ROUNDS alternating rounds: native, the shim, the shim tracking nothing
# (PAGELOCK_TRACK_MIN=1G: interposition alone), the shim with no call stacks;
# per-round ratios and medians, to tell interposition from tracking.
set -u
B=$(cd "$1" && pwd); N=${2:-9}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
S="LD_PRELOAD=$B/libpagelock.so PAGELOCK_CUPTI=0"
declare -A V=([native]="X=1" [shim]="$S" [notrack]="$S PAGELOCK_TRACK_MIN=1G" [nostack]="$S PAGELOCK_BACKTRACE_DEPTH=0")
for i in $(seq "$N"); do
  for v in native shim notrack nostack; do
    env ${V[$v]} PAGELOCK_OUTPUT="$T/%p.trace" "$B/bench_malloc" 7 | grep -o 'ms=[0-9.]*' | cut -d= -f2 >>"$T/$v"
  done
done
med() { sort -g "$1" | sed -n "$(( (N + 1) / 2 ))p"; }
for v in native shim notrack nostack; do
  printf '%-8s median %7s ms  ratio %s  all: %s\n' "$v" "$(med "$T/$v")" \
    "$(awk -v a="$(med "$T/$v")" -v b="$(med "$T/native")" 'BEGIN { printf "%.3f", a / b }')" "$(tr '\n' ' ' <"$T/$v")"
done
printf 'per-round shim/native: %s\n' "$(paste "$T/shim" "$T/native" | awk '{ printf "%.3f ", $1 / $2 }')"
