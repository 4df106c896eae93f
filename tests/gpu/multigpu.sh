#!/usr/bin/env bash
# tests/gpu/multigpu.sh BUILD OUT [ROUNDS] - several GPUs in one host
# (issue 23), for tests/gpu/run.sh on a host with two or more:
#   1. the preload cases multigpu_* over the real devices: one process
#      driving two GPUs from two threads under observe, stage and auto
#      (bytes exact, the pool bound and register budget held, the report's
#      device table, the GPU join), device-to-device and peer copies
#      recorded and never staged, two processes one GPU each;
#   2. a torchrun job, two ranks with NCCL all-reducing between steps while
#      each uploads pageable batches (tests/gpu/torchrun_ranks.py), without
#      pagelock, under observe and under auto, and one rank alone under
#      auto; the same with pinned batches, two ranks and one, without
#      pagelock (the physical limit of two ranks sharing the host); taking
#      turns ROUNDS times (default 2; PL_MG_VARIANTS picks the variants):
#      every rank's bytes and all-reduce exact, one trace per rank and the
#      report's rank table, and each rank's ms per step against one rank
#      alone of the same kind.
# NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0).  Prints
# "multigpu: ..." rows; exits 1 when a check fails.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$1 OUT=$2 ROUNDS=${3:-2}
mkdir -p "$OUT/multigpu"
export NCCL_NVLS_ENABLE=0
bad=0
say() { echo "multigpu: $*"; }

mapfile -t cases < <(grep -o '^case_multigpu[a-z0-9_]*' "$ROOT/tests/preload/cases/multigpu.sh" | sed 's/^case_//')
PL_TEST_REAL_CUDA=1 "$ROOT/tests/preload/run.sh" "$B" "${cases[@]}" >"$OUT/multigpu/preload.log" 2>&1 || bad=1
say "preload cases over the real devices: $(tail -1 "$OUT/multigpu/preload.log")"
grep -q 'skipped' "$OUT/multigpu/preload.log" && say "FAIL: a case was skipped: $(grep -m1 skipped "$OUT/multigpu/preload.log")" && bad=1

if ! python3 -c "import torch.distributed" 2>/dev/null; then
  say "torchrun: skipped (no PyTorch)"
  exit $bad
fi
P="$ROOT/tests/gpu/torchrun_ranks.py"
# job VARIANT ROUND: one torchrun job, its ranks' lines in the result file
job() {
  local v=$1 r=$2 d="$OUT/multigpu/$1.$2" n=2
  mkdir -p "$d"
  local run=(python3 -m torch.distributed.run --standalone --nproc_per_node)
  case $v in
    native) timeout 300 "${run[@]}" $n "$P" ;;
    pinned) timeout 300 "${run[@]}" $n "$P" --pinned ;;
    pinnedalone) n=1; timeout 300 "${run[@]}" $n "$P" --pinned ;;
    observe | auto) timeout 300 "$B/pagelock" run --mode "$v" -o "$d/rank%r.%p.trace" -- "${run[@]}" $n "$P" ;;
    alone) n=1; timeout 300 "$B/pagelock" run --mode auto -o "$d/rank%r.%p.trace" -- "${run[@]}" $n "$P" ;;
  esac >"$d/out" 2>"$d/err"
  local st=$? got; got=$(grep -c '^rank [0-9]* .* ok=1 ' "$d/out")
  if [ $st != 0 ] || [ "$got" != $n ]; then
    say "FAIL $v round $r: exit $st, $got of $n ranks ok: $(grep -hE '^(rank|pagelock|Traceback)|Error' "$d/out" "$d/err" | head -4 | tr '\n' ' ' | cut -c1-300)"
    bad=1
    return
  fi
  case $v in native | pinned*) return ;; esac
  # One trace per rank: complete, no copy failed, CUPTI on, and every copy
  # on the rank's own device, its 22 uploads at least.
  local k pid t
  for k in $(seq 0 $((n - 1))); do
    pid=$(grep "^rank $k " "$d/out" | grep -o 'pid=[0-9]*' | cut -d= -f2)
    t="$d/rank$k.$pid.trace"
    if ! "$B/trace_check" "$t" --complete --failed 0 --thread-one-device --gpu-status 0 >"$d/check$k.log" 2>&1 ||
      ! "$B/pagelock" report --format json "$t" 2>>"$d/check$k.log" | python3 -c '
import json, sys
k = int(sys.argv[1])
devs = {d["device"]: d["copies"] for p in json.load(sys.stdin)["processes"]
        for d in (p.get("gpu") or {}).get("devices", [])}
if devs.get(k, 0) < 22 or any(n for d, n in devs.items() if d != k):
    sys.exit(f"the report gives copies per device {devs}: 22 or more on {k}, none elsewhere")' $k >>"$d/check$k.log" 2>&1; then
      say "FAIL $v round $r: rank $k's trace: $(tail -2 "$d/check$k.log" | tr '\n' ' ' | cut -c1-300)"
      bad=1
    fi
  done
  if [ $n = 2 ] && [ "$(grep -Ec '^ +[01] +[^ ]+ +[0-9]+ +[0-9]+ ' "$d/err")" != 2 ]; then
    say "FAIL $v round $r: the report has no rank table of both ranks: $(grep -A3 -E '^ *rank +host' "$d/err" | tr '\n' ' ')"
    bad=1
  fi
}
for r in $(seq "$ROUNDS"); do
  for v in ${PL_MG_VARIANTS:-native pinned observe auto alone pinnedalone}; do job "$v" "$r"; done
done
# ms per step of each rank, median over the rounds; against one rank alone
python3 - "$OUT/multigpu" "$ROUNDS" <<'PY'
import glob, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ms = {}
for v in ("native", "pinned", "observe", "auto", "alone", "pinnedalone"):
    for f in glob.glob(f"{out}/{v}.*/out"):
        for m in re.finditer(r"^rank (\d+) .*ms_per_step=([0-9.]+)", open(f).read(), re.M):
            ms.setdefault((v, int(m.group(1))), []).append(float(m.group(2)))
def alone(v):
    """One rank alone of the same kind: pinned for pinned, auto otherwise."""
    a = ms.get(("pinnedalone" if v.startswith("pinned") else "alone", 0))
    return statistics.median(a) if a else None
for (v, k), xs in sorted(ms.items()):
    med = statistics.median(xs)
    a = alone(v)
    rel = f"  one rank alone / this {a / med:.3f}" if a and not v.endswith("alone") else ""
    print(f"multigpu: torchrun {v:8s} rank {k}: {med:8.3f} ms/step [{min(xs):.3f}-{max(xs):.3f}] "
          f"over {len(xs)} rounds{rel}")
PY
exit $bad
