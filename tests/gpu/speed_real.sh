#!/usr/bin/env bash
# tests/gpu/speed_real.sh BUILD OUT [ROUNDS] - issue 42's rows on real
# programs: each variant its own process, variants taking turns in each
# round (their order rotating), medians over the rounds of the paired
# ratios to pinned and to no pagelock.
#   sync_reuse  bandwidthTest's loop: a reused 256 MiB malloc buffer,
#               cudaMemcpy 100 times each way, averaged from the first copy
#               (static cudart); and a buffer's first three copies
#   accel       accelerate cpu_offload forward of a random 1.5 GB bf16 Llama
# Prints "speed: ..." lines, one per row (and what call sites cost the last
# run of each traced variant), and the raw lines in OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$1 OUT=$2 ROUNDS=${3:-3}
mkdir -p "$OUT"
d=$(mktemp -d)
nvcc -O2 -o "$B/sync_reuse" "$ROOT/tests/gpu/sync_reuse.cu" >"$OUT/speed_build.log" 2>&1 ||
  { echo "speed: FAIL sync_reuse does not build"; exit 1; }

# run VARIANT CMD...: the program under VARIANT (native, pinned: no shim;
# observe, stage, auto: pagelock run), its last line to stdout.
run() {
  local v=$1; shift
  case $v in
    native|pinned) "$@" ;;
    *) "$B/pagelock" run --mode "$v" -o "$d/$v.%p.trace" -- "$@" 2>>"$OUT/speed_$v.err" ;;
  esac | tail -1
}

: >"$OUT/speed_sync.txt"
for r in $(seq 1 "$ROUNDS"); do
  vs=(native pinned observe stage auto)
  for k in $(seq 0 4); do
    v=${vs[$(((k + r) % 5))]}
    arg=pageable; [ "$v" = pinned ] && arg=pinned
    echo "round=$r variant=$v $(run "$v" "$B/sync_reuse" "$arg" 100)" >>"$OUT/speed_sync.txt"
  done
done
: >"$OUT/speed_accel.txt"
[ -n "${PL_SPEED_NO_ACCEL:-}" ] && set -- # only the synchronous loop
if python3 -c "import accelerate, transformers" 2>/dev/null; then
  for r in $(seq 1 "$ROUNDS"); do
    vs=(native pinned observe auto)
    for k in $(seq 0 3); do
      v=${vs[$(((k + r) % 4))]}
      a=(); [ "$v" = pinned ] && a=(--pinned)
      echo "round=$r variant=$v $(run "$v" python3 "$ROOT/tests/gpu/accel_speed.py" "${a[@]}")" >>"$OUT/speed_accel.txt"
    done
  done
fi
python3 - "$OUT/speed_sync.txt" "$OUT/speed_accel.txt" <<'PY'
import re, statistics, sys
def rows(path):
    out = {}
    for line in open(path):
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        if "variant" in kv:
            out.setdefault(int(kv["round"]), {})[kv["variant"]] = kv
    return out
def ratios(rs, key, inverse):
    """median over rounds of variant/ref, as speed (time ratio inverted)"""
    res = {}
    for ref in ("pinned", "native"):
        for v in ("observe", "stage", "auto"):
            xs = []
            for r in rs.values():
                if v in r and ref in r and key in r[v] and key in r[ref]:
                    a, b = float(r[v][key]), float(r[ref][key])
                    if a > 0 and b > 0: xs.append(b / a if inverse else a / b)
            if xs: res[(v, ref)] = (statistics.median(xs), len(xs))
    return res
sync = rows(sys.argv[1])
ok = all(r.get("wrong", "0") == "0" for rr in sync.values() for r in rr.values())
print("speed: sync_reuse bytes %s" % ("ok" if ok and sync else "FAIL"))
for key in ("h2d_ms", "d2h_ms"):
    rs = ratios(sync, key, True)
    print("speed: sync_reuse %s of pinned: %s; of native: %s" % (key[:3],
          ", ".join("%s %.3f" % (v, rs[(v, "pinned")][0]) for v in ("observe", "stage", "auto") if (v, "pinned") in rs),
          ", ".join("%s %.3f" % (v, rs[(v, "native")][0]) for v in ("observe", "stage", "auto") if (v, "native") in rs)))
for v in ("pinned", "stage", "auto"):
    f = [r[v]["first_up"] for r in sync.values() if v in r]
    print("speed: sync_reuse first three uploads ms, %s: %s" % (v, " | ".join(f)))
acc = rows(sys.argv[2])
if acc:
    sums = {r["checksum"] for rr in acc.values() for r in rr.values() if "checksum" in r}
    print("speed: accel checksums %s" % ("ok" if len(sums) == 1 else "FAIL %s" % sums))
    rs = ratios(acc, "median_ms", True)
    print("speed: accel forward of pinned: %s; of native: %s" % (
          ", ".join("%s %.3f" % (v, rs[(v, "pinned")][0]) for v in ("observe", "auto") if (v, "pinned") in rs),
          ", ".join("%s %.3f" % (v, rs[(v, "native")][0]) for v in ("observe", "auto") if (v, "native") in rs)))
    for v in ("native", "pinned", "auto"):
        print("speed: accel forwards ms, %s: %s" % (v, " | ".join(r[v]["first_ms"] for r in acc.values() if v in r)))
PY
# What call sites cost the last run of each traced variant (its report's
# COST line): where observing spends the program's time.
for v in observe stage auto; do
  c=$(grep -A1 '^call sites cost' "$OUT/speed_$v.err" 2>/dev/null | tail -2 | tr -s ' \n' ' ')
  [ -z "$c" ] || echo "speed: last $v run's $c"
done
rm -rf "$d"
