#!/usr/bin/env bash
# tests/gpu/cupti_cost.sh OUT [ROUNDS] [PATTERN] [VARIANTS] - what CUPTI's
# tracing costs a program (patterns.py PATTERN, default small: many small
# copies and kernels), by piece:
# a diagnostic build (-DPL_DIAG_CUPTI) leaves out the activity kinds or
# callbacks PL_DIAG_CUPTI_OFF names (positions in shim/record/cupti.c's pl_kinds:
# 0 MEMCPY, 1 MEMCPY2, 2 MEMSET, 3 CONCURRENT_KERNEL, 4 OVERHEAD,
# 5 EXTERNAL_CORRELATION; cb: the copy callbacks), all traced throughout
# (PAGELOCK_CUPTI_MAX_RATE=0); "sampled" is the default, which pauses
# tracing above 2000 GPU operations a second.  Variants take turns
# within each round; prints one "cupti_cost:" row per variant, the median
# us/iter and its ratio to no pagelock.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1 ROUNDS=${2:-4} PAT=${3:-small}
B=/tmp/pagelock-diag-build
mkdir -p "$OUT/cupti_cost"
cmake -S "$ROOT" -B "$B" -DPAGELOCK_REAL_CUDA=ON -DPAGELOCK_UNIT_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-DPL_DIAG_CUPTI >"$OUT/cupti_cost/cmake.log" 2>&1 &&
  cmake --build "$B" -j16 >"$OUT/cupti_cost/build.log" 2>&1 || { echo "cupti_cost: build FAIL"; exit 1; }
P="$ROOT/tests/gpu/patterns.py"
VARS=${4:-native nocupti sampled all none-cb kernel bonus copies cb}
declare -A OFF=([all]="" [none-cb]="0,1,2,3,4,5,cb" [kernel]="3" [bonus]="4,5" [copies]="0,1" [cb]="cb")
for r in $(seq "$ROUNDS"); do
  for v in $VARS; do
    f="$OUT/cupti_cost/${v}_$r.txt"
    case $v in
      native) timeout 120 python3 "$P" "$PAT" ;;
      nocupti) PAGELOCK_CUPTI=0 timeout 120 "$B/pagelock" run -o /tmp/cc.%p.trace -- python3 "$P" "$PAT" ;;
      sampled) timeout 120 "$B/pagelock" run -o /tmp/cc.%p.trace -- python3 "$P" "$PAT" ;;
      *) PAGELOCK_CUPTI_MAX_RATE=0 PL_DIAG_CUPTI_OFF="${OFF[$v]}" timeout 120 "$B/pagelock" run -o /tmp/cc.%p.trace -- python3 "$P" "$PAT" ;;
    esac >"$f" 2>"$f.err"
    rm -f /tmp/cc.*.trace
  done
done
python3 - "$OUT/cupti_cost" "$ROUNDS" $VARS <<'PY'
import re, statistics, sys
d, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med, unit = {}, ""
for v in variants:
    xs = []
    for r in range(1, rounds + 1):
        m = re.search(r"value=([0-9.]+) unit=(\S+)", open(f"{d}/{v}_{r}.txt").read())
        if m:
            xs.append(float(m.group(1)))
            unit = m.group(2)
    med[v] = (statistics.median(xs), min(xs), max(xs)) if xs else None
for v in variants:
    if med[v]:
        m, lo, hi = med[v]
        print(f"cupti_cost: {v:8s} {m:8.2f} {unit} [{lo:.2f}-{hi:.2f}]  x native {m / med['native'][0]:.3f}")
PY
