#!/usr/bin/env bash
# tests/gpu/autopin.sh BUILD OUT [ROUNDS] - PAGELOCK_MODE=register/auto on
# the real GPU: correctness under fork, then the speed of reused buffers.
#
# Speed: each pattern of autopin_bench.py (reuse: one 256 MiB tensor uploaded
# 20 times; offload: 16 x 64 MiB uploaded per step on a prefetch stream;
# loader: a DataLoader-fed training loop) runs as its own process in every
# variant, the variants alternating within each round so that a slow
# stretch of the host touches them all alike:
#   native    pageable memory, no pagelock
#   pinned    pin_memory(): the physical limit of this host
#   byhand    the same tensors cudaHostRegister'ed by the program itself
#   stage     pagelock run --mode=stage
#   auto      pagelock run --mode=auto
# The table gives the median of ROUNDS (default 3) for each, and its ratio
# to pinned and to native from the same run; then the demo's pageable phase
# under --mode=auto against its pinned phase.  Prints "autopin: ..." rows.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$1 OUT=$2 ROUNDS=${3:-3}
mkdir -p "$OUT"
py() { timeout 300 python3 "$ROOT/tests/gpu/autopin_bench.py" "$@"; }
res() { sed -n 's/^result [a-z]* value=\([0-9.]*\).*/\1/p' "$1" | tail -1; }

d=$(mktemp -d)
# Fork after registration, invisibility, bytes (DataLoader workers).
"$B/pagelock" run --mode auto -o "$d/fork.%p.trace" -- python3 "$ROOT/tests/gpu/autopin_fork.py" \
  >"$OUT/autopin_fork.txt" 2>"$OUT/autopin_fork.err"
rc=$?
echo "autopin: fork after registration rc=$rc $(grep -h '^result' "$OUT/autopin_fork.txt" | tr '\n' ' ')"
grep -m1 '^routes:' "$OUT/autopin_fork.err" | sed 's/^/autopin:   /'

for pat in reuse offload loader; do
  variants="native pinned byhand stage auto"
  [ $pat = loader ] && variants="native pinned stage auto"
  for r in $(seq "$ROUNDS"); do
    for v in $variants; do
      f="$OUT/ap_${pat}_${v}_$r.txt"
      case $v in
        native) py $pat >"$f" 2>&1 ;;
        pinned) py $pat --pinned >"$f" 2>&1 ;;
        byhand) py $pat --register >"$f" 2>&1 ;;
        stage | auto)
          "$B/pagelock" run --mode $v -o "$d/$pat.$v.$r.%p.trace" -- \
            python3 "$ROOT/tests/gpu/autopin_bench.py" $pat >"$f" 2>"$f.err" ;;
      esac
      grep -q 'ok=1' "$f" || echo "autopin: FAIL $pat $v round $r: $(tail -2 "$f" "$f.err" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"
    done
  done
  python3 - "$OUT" "$pat" "$ROUNDS" $variants <<'PY'
import re, statistics, sys
out, pat, rounds, variants = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
vals, unit = {}, ""
for v in variants:
    xs = []
    for r in range(1, rounds + 1):
        try:
            m = re.search(r"value=([0-9.]+) unit=(\S+)", open(f"{out}/ap_{pat}_{v}_{r}.txt").read())
        except OSError:
            m = None
        if m:
            xs.append(float(m.group(1)))
            unit = m.group(2)
    vals[v] = (statistics.median(xs), min(xs), max(xs)) if xs else None
lower_better = unit.startswith("ms")
def ratio(a, b):
    # "speed relative to b": >1 is faster than b
    return (b / a if lower_better else a / b) if a and b else float("nan")
for v in variants:
    if vals[v] is None:
        print(f"autopin: {pat:8s} {v:7s} no result")
        continue
    med, lo, hi = vals[v]
    p = vals.get("pinned"); n = vals.get("native")
    print(f"autopin: {pat:8s} {v:7s} {med:9.2f} {unit:10s} [{lo:.2f}-{hi:.2f}]  "
          f"speed/pinned {ratio(med, p[0] if p else None):.3f}  speed/native {ratio(med, n[0] if n else None):.3f}")
PY
done
# A routes line from one auto run of each pattern: did the copies register?
for pat in reuse offload loader; do
  f="$OUT/ap_${pat}_auto_1.txt.err"
  echo "autopin: $pat auto $(grep -m1 '^routes:' "$f" 2>/dev/null) $(grep -m1 '^registration:' "$f" 2>/dev/null)"
done

# The demo: its pageable phase under --mode=auto against its pinned phase.
for r in $(seq "$ROUNDS"); do
  "$B/pagelock" demo --mode auto -o "$d/demo.$r.%p.trace" >"$OUT/demo_auto_$r.txt" 2>&1
  pg=$(sed -n 's/.*pageable (malloc): *\([0-9.]*\) ms/\1/p' "$OUT/demo_auto_$r.txt")
  pn=$(sed -n 's/.*pinned (cudaMallocHost): *\([0-9.]*\) ms/\1/p' "$OUT/demo_auto_$r.txt")
  echo "autopin: demo --mode auto round $r: pageable ${pg:-?} ms, pinned ${pn:-?} ms, ratio $(python3 -c "print(f'{$pg/$pn:.3f}')" 2>/dev/null)"
done
grep -m3 -E '^(routes|registration|not registered)' "$OUT/demo_auto_1.txt" | sed 's/^/autopin:   demo /'
grep -A4 -m1 '^not registered' "$OUT/demo_auto_1.txt" | sed 's/^/autopin:   demo /' 
rm -rf "$d"
