#!/usr/bin/env bash
# tests/gpu/patterns.sh BUILD OUT [ROUNDS] - the copy patterns of real
# programs (tests/gpu/patterns.py) in every mode, one table.
#
# Each pattern runs as its own process per variant, the variants taking
# turns within each round, in an order that rotates from round to round, so
# that a slow stretch of the host touches them all alike:
#   native    pageable memory, no pagelock
#   pinned    pin_memory(), no pagelock: the physical limit of this host
#   observe   pagelock run (records, changes nothing)
#   stage     pagelock run --mode=stage
#   auto      pagelock run --mode=auto
# and, where PL_PAT_VARIANTS names them, diagnostic variants of observe:
#   preload   the shim preloaded by hand, CUPTI off (no launcher, no CUPTI)
#   notrack   observe with PAGELOCK_TRACK_MIN=1024G (no allocation tracked)
#   nostack   observe with PAGELOCK_BACKTRACE_DEPTH=0 (no native or Python stacks)
#   nocupti   observe with PAGELOCK_CUPTI=0 (no GPU timestamps)
#   fulltrace observe with PAGELOCK_CUPTI_MAX_RATE=0 (GPU timing traced
#             throughout, never sampled)
#   attached  observe with PAGELOCK_CUPTI_DETACH=0 (sampled, CUPTI kept
#             attached between windows)
#   byhand    the program cudaHostRegister's its own tensors
#   nohuge    auto with PAGELOCK_HUGEPAGES=0 (no huge pages advised)
#   stagekeep stage with PAGELOCK_OMP_SPIN=keep (OpenMP's threads spin as
#   autokeep  long as they would without pagelock run; auto likewise)
#   autoB     auto with another build of pagelock, in the folder PL_PAT_B:
#             two builds side by side in one run
# For `small`, also the shim's share measured inside one process
# (bench_copy abloop, observe and auto).
# The table gives the median of ROUNDS (default 3) with its range, the
# speed as a fraction of pinned and relative to native, all from this run,
# and for each traced variant what bound its copies in round 1
# (tests/gpu/bound.py: the DMA, host memory, driver calls or the program;
# what ran in one timed stretch goes to patterns/PAT_VARIANT_timeline.txt).
# Prints "patterns: ..." rows.  PL_PAT_PATTERNS picks the patterns;
# PL_PAT_TRACES names a folder that keeps the traces (for copy_times.py).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$1 OUT=$2 ROUNDS=${3:-3}
PATS=${PL_PAT_PATTERNS:-cks offload reuse upload afterop loader small threads}
VARS=${PL_PAT_VARIANTS:-native pinned observe stage auto}
mkdir -p "$OUT/patterns"
d=${PL_PAT_TRACES:-$(mktemp -d)}
mkdir -p "$d"
P="$ROOT/tests/gpu/patterns.py"
one() { # pattern variant round
  local pat=$1 v=$2 r=$3 f="$OUT/patterns/${1}_${2}_$3.txt" t="$d/$1.$2.$3.%p.trace"
  case $v in
    native) timeout 300 python3 "$P" "$pat" ;;
    pinned) timeout 300 python3 "$P" "$pat" --pinned ;;
    byhand) timeout 300 python3 "$P" "$pat" --register ;;
    observe | stage | auto) timeout 300 "$B/pagelock" run --mode "$v" -o "$t" -- python3 "$P" "$pat" ;;
    preload) PAGELOCK_CUPTI=0 PAGELOCK_OUTPUT="$t" LD_PRELOAD="$B/libpagelock.so" timeout 300 python3 "$P" "$pat" ;;
    notrack) PAGELOCK_TRACK_MIN=1024G timeout 300 "$B/pagelock" run -o "$t" -- python3 "$P" "$pat" ;;
    nostack) PAGELOCK_BACKTRACE_DEPTH=0 timeout 300 "$B/pagelock" run -o "$t" -- python3 "$P" "$pat" ;;
    nocupti) PAGELOCK_CUPTI=0 timeout 300 "$B/pagelock" run -o "$t" -- python3 "$P" "$pat" ;;
    fulltrace) PAGELOCK_CUPTI_MAX_RATE=0 timeout 300 "$B/pagelock" run -o "$t" -- python3 "$P" "$pat" ;;
    attached) PAGELOCK_CUPTI_DETACH=0 timeout 300 "$B/pagelock" run -o "$t" -- python3 "$P" "$pat" ;;
    nohuge) PAGELOCK_HUGEPAGES=0 timeout 300 "$B/pagelock" run --mode auto -o "$t" -- python3 "$P" "$pat" ;;
    autoB) timeout 300 "$PL_PAT_B/pagelock" run --mode auto -o "$t" -- python3 "$P" "$pat" ;;
    stagekeep | autokeep)
      PAGELOCK_OMP_SPIN=keep timeout 300 "$B/pagelock" run --mode "${v%keep}" -o "$t" -- python3 "$P" "$pat" ;;
  esac >"$f" 2>"$f.err"
  grep -q 'ok=1' "$f" || echo "patterns: FAIL $pat $v round $r: $(tail -2 "$f" "$f.err" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"
}
for pat in $PATS; do
  vs=$VARS
  [ "$pat" = loader ] && vs=$(echo " $VARS " | sed 's/ byhand / /')
  # Each round starts one variant later than the round before, so that no
  # variant always follows the same one (a host that drifts into a slow
  # state for tens of seconds, as these do, would favour a fixed order).
  for r in $(seq "$ROUNDS"); do
    set -- $vs
    for k in $(seq $(((r - 1) % $#))); do set -- "${@:2}" "$1"; done
    for v in "$@"; do one "$pat" "$v" "$r"; done
  done
  python3 - "$OUT/patterns" "$pat" "$ROUNDS" $vs <<'PY'
import re, statistics, sys
out, pat, rounds, variants = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
vals, byround, unit = {}, {}, ""
for v in variants:
    xs = []
    for r in range(1, rounds + 1):
        try:
            m = re.search(r"value=([0-9.]+) unit=(\S+)", open(f"{out}/{pat}_{v}_{r}.txt").read())
        except OSError:
            m = None
        if m:
            xs.append(float(m.group(1)))
            byround[v, r] = xs[-1]
            unit = m.group(2)
    vals[v] = (statistics.median(xs), min(xs), max(xs)) if xs else None
higher_better = unit in ("GB/s", "samples/s")
def speed(a, b):
    """a's speed relative to b's: above 1 is faster."""
    if not a or not b:
        return float("nan")
    return a / b if higher_better else b / a
p = vals.get("pinned"); n = vals.get("native")
for v in variants:
    if vals[v] is None:
        print(f"patterns: {pat:8s} {v:8s} no result")
        continue
    med, lo, hi = vals[v]
    # Each round's variant against native in the same round (they ran
    # side by side): the median of those ratios, less swayed by a slow
    # stretch of the host than a ratio of medians.
    pairs = sorted(speed(byround[v, r], byround["native", r]) for r in range(1, rounds + 1)
                   if (v, r) in byround and ("native", r) in byround)
    paired = f"  paired {statistics.median(pairs):.3f} [{pairs[0]:.3f}-{pairs[-1]:.3f}]" if pairs and v != "native" else ""
    print(f"patterns: {pat:8s} {v:8s} {med:10.3f} {unit:9s} [{lo:.3f}-{hi:.3f}]  "
          f"of-pinned {speed(med, p[0] if p else None):.3f}  vs-native {speed(med, n[0] if n else None):.3f}{paired}")
PY
  # The small pattern's processes swing more than observing costs it:
  # the hosts move between a fast state (32-38 us an iteration) and a slow
  # one (45-57) for seconds at a time, within one process as often as
  # between two, whatever the variant (its tenths, chunks=).  So also the
  # fastest tenth of all the variant's stretches of 2000 iterations (0.1 s)
  # against native's: what each variant costs while the host is in its
  # fast state.
  if [ "$pat" = small ]; then
    python3 - "$OUT/patterns" "$ROUNDS" $vs <<'PY'
import glob, random, re, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
procs = {}  # variant: each process's stretches
for v in variants:
    for r in range(1, rounds + 1):
        for f in glob.glob(f"{out}/small_{v}_{r}.txt"):
            m = re.search(r"chunks=([0-9.,]+)", open(f).read())
            if m:
                procs.setdefault(v, []).append([float(x) for x in m.group(1).split(",")])
def tenth(ps, q=10):
    xs = sorted(x for p in ps for x in p)
    return xs[len(xs) // q]
for v, ps in procs.items():
    nat = procs.get("native")
    vs = (f"  vs-native {tenth(nat) / tenth(ps):.3f} (quarter {tenth(nat, 4) / tenth(ps, 4):.3f})"
          if nat and v != "native" else "")
    print(f"patterns:   small {v:8s} fastest tenth of {sum(map(len, ps))} stretches of 2000 "
          f"iterations: {tenth(ps):.1f} us/iter{vs}")
# How fine the measure is here: the same ratio between two groups of as
# many processes drawn at random from all variants, 90% of 2000 draws.
every = [p for ps in procs.values() for p in ps]
k = len(procs.get("native", []))
if k and len(every) > k:
    rnd = random.Random(1)
    null = sorted(tenth(rnd.sample(every, k)) / tenth(rnd.sample(every, k)) for _ in range(2000))
    print(f"patterns:   small fastest tenths of two random groups of {k} processes differ by "
          f"{null[100]:.3f}-{null[1899]:.3f} (90% of 2000 draws)")
PY
  fi
  # The same shape in C, the shim's entry points against libcuda's own in
  # one process (bench_copy abloop), gives the shim's share.  Median over
  # ROUNDS processes.
  if [ "$pat" = small ] && [ -x "$B/bench_copy" ]; then
    for m in observe auto; do
      for r in $(seq "$ROUNDS"); do
        LD_PRELOAD="$B/libpagelock.so" PAGELOCK_MODE=$m PAGELOCK_OUTPUT="$d/abloop.%p.trace" \
          timeout 120 "$B/bench_copy" abloop pageable 4096 7 2>/dev/null | grep -o 'ratio=[0-9.]*' | cut -d= -f2
      done | sort -g | awk -v m=$m 'NF { v[n++] = $1 } END {
        if (n) printf "patterns:   small in one process (bench_copy abloop), %s: %.3fx the time without the shim [%s-%s], %d processes\n", m, v[int((n - 1) / 2)], v[0], v[n - 1], n
        else printf "patterns:   small in one process (bench_copy abloop), %s: no result\n", m }'
    done
  fi
  # What bound the copies of each traced variant, in round 1's timed
  # stretches, from its trace's own timestamps (tests/gpu/bound.py).
  for v in $vs; do
    case $v in native | pinned | byhand) continue ;; esac
    f="$OUT/patterns/${pat}_${v}_1.txt"
    pid=$(grep -o 'pid=[0-9]*' "$f" 2>/dev/null | cut -d= -f2)
    win=$(grep -o 'windows=[0-9,-]*' "$f" 2>/dev/null | cut -d= -f2)
    if [ -n "$pid" ] && [ -n "$win" ] && [ -f "$d/$pat.$v.1.$pid.trace" ]; then
      echo "patterns:   $pat $v $(python3 "$ROOT/tests/gpu/bound.py" "$d/$pat.$v.1.$pid.trace" "$win" 2>&1)"
      # what ran in its second timed stretch (the first when alone), for
      # finding where the time went
      k=0; case $win in *,*) k=1 ;; esac
      python3 "$ROOT/tests/gpu/bound.py" "$d/$pat.$v.1.$pid.trace" "$win" --timeline $k \
        >"$OUT/patterns/${pat}_${v}_timeline.txt" 2>&1
    fi
  done
done
# The demo (pagelock-demo: 8 x {32 MiB up, 2 ms kernel, 32 MiB down} on one
# stream, pageable then pinned): its binary alone, then `pagelock demo` in
# each mode.  Its pageable phase against its own pinned phase (the physical
# limit, same process) and against the pageable phase without pagelock.
# PL_PAT_DEMO_VARIANTS picks its variants (nohuge as above).
DEMO_VARS=${PL_PAT_DEMO_VARIANTS:-native observe stage auto}
if [ -z "${PL_PAT_PATTERNS:-}" ] || [ "${PL_PAT_DEMO:-}" = 1 ]; then
  for r in $(seq "$ROUNDS"); do
    for v in $DEMO_VARS; do
      f="$OUT/patterns/demo_${v}_$r.txt"
      case $v in
        native) timeout 120 "$B/pagelock-demo" >"$f" 2>&1 ;;
        nohuge) PAGELOCK_HUGEPAGES=0 timeout 120 "$B/pagelock" demo --mode auto -o "$d/demo.$v.$r.%p.trace" >"$f" 2>&1 ;;
        *) timeout 120 "$B/pagelock" demo --mode $v -o "$d/demo.$v.$r.%p.trace" >"$f" 2>&1 ;;
      esac
      grep -q 'all bytes round-tripped' "$f" || echo "patterns: FAIL demo $v round $r: $(tail -2 "$f" | tr '\n' ' ' | cut -c1-200)"
    done
  done
  python3 - "$OUT/patterns" "$ROUNDS" $DEMO_VARS <<'PY'
import re, statistics, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def phase(txt, name):
    m = re.search(name + r"[^:]*:\s*([0-9.]+) ms", txt)
    return float(m.group(1)) if m else None
res = {}
for v in variants:
    pg, pn = [], []
    for r in range(1, rounds + 1):
        try:
            txt = open(f"{out}/demo_{v}_{r}.txt").read()
        except OSError:
            continue
        a, b = phase(txt, r"pageable \(malloc\)"), phase(txt, r"pinned \(cudaMallocHost\)")
        if a and b:
            pg.append(a)
            pn.append(b)
    if pg:
        res[v] = (statistics.median(pg), min(pg), max(pg), statistics.median(pn))
nat = res.get("native")
for v, (med, lo, hi, pin) in res.items():
    print(f"patterns: demo     {v:8s} {med:10.3f} ms/phase  [{lo:.3f}-{hi:.3f}]  pinned phase {pin:.3f}  "
          f"pageable/pinned {med / pin:.3f}  vs-native {(nat[0] / med if nat else float('nan')):.3f}")
PY
fi
for pat in $PATS; do
  for v in stage auto; do
    f="$OUT/patterns/${pat}_${v}_1.txt.err"
    [ -f "$f" ] && echo "patterns:   $pat $v: $(grep -m1 '^routes:' "$f") $(grep -m1 '^registration:' "$f")"
  done
done
[ -n "${PL_PAT_TRACES:-}" ] || rm -rf "$d"
