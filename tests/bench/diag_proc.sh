#!/usr/bin/env bash
# tests/bench/diag_proc.sh BUILD_DIR [PROCESSES] - what the basics cost,
# process by process: bench_copy probe (a clock read, cuCtxGetCurrent, a
# stream query, a host function, one 256 MiB copy call from pinned
# memory), PROCESSES times natively and under the shim, alternating.  On
# some machines a process is either fast (the copy call ~2 us) or slow
# (10-20 us) for its whole life; docs/benchmarks.md has what was seen.
set -u
B=$(cd "$1" && pwd); N=${2:-10}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null | sed 's/^/clocksource: /'
for i in $(seq "$N"); do
  echo "native $("$B/bench_copy" probe pinned $((256 << 20)) 7 | cut -d' ' -f3-)"
  echo "shim   $(LD_PRELOAD="$B/libpagelock.so" PAGELOCK_CUPTI=0 PAGELOCK_OUTPUT="$T/%p.trace" \
                 "$B/bench_copy" probe pinned $((256 << 20)) 7 | cut -d' ' -f3-)"
done
