#!/usr/bin/env bash
# tests/gpu/record_goldens.sh - records the golden traces that need a GPU
# (issue 21, truthful verdicts) and writes their expected reports.
#
#   gpu-dataloader-observe  a PyTorch loop fed by DataLoader(pin_memory=False,
#                           num_workers=2): batches arrive in shared memory
#   gpu-dataloader-stage    the same under --mode=stage (chunks + LINKs)
#   gpu-demo-stage          pagelock demo --mode stage
#
# Usage (repo root, on the GPU machine, torch importable):
#   tests/gpu/record_goldens.sh [OUTDIR]
# Then copy OUTDIR/*.trace and OUTDIR/*.expected.* into tests/golden/, read
# the reports, and commit: tests/golden/run.sh diffs them and runs
# check_truth.py over every trace (a staged chunk counted as a program copy,
# or a verdict citing time of copies it does not name, fails).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/pagelock-goldens}
B=${B:-/tmp/pagelock-gpu-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
mkdir -p "$OUT"
if [ ! -x "$B/pagelock" ]; then
  cmake -S "$ROOT" -B "$B" -DPAGELOCK_REAL_CUDA=ON -DPAGELOCK_UNIT_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/cmake.log" 2>&1 &&
    cmake --build "$B" -j16 >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
fi
PL="$B/pagelock"

cat >"$OUT/dataloader_loop.py" <<'PY'
# A training loop fed by a DataLoader without pinned memory: the issue-21
# program.  Workers build batches in shared memory; each is uploaded with
# .to("cuda", non_blocking=True), then a matmul and an 8-byte loss read.
import torch
from torch.utils.data import DataLoader, Dataset

class Rand(Dataset):
    def __len__(self): return 96
    def __getitem__(self, i): return torch.full((1024, 1024), float(i))

def main():
    torch.manual_seed(0)
    w = torch.randn(1024, 1024, device="cuda")
    dl = DataLoader(Rand(), batch_size=4, num_workers=2, pin_memory=False)
    for x in dl:
        x = x.to("cuda", non_blocking=True)
        loss = (x @ w).mean()
        loss.item()
    torch.cuda.synchronize()

if __name__ == "__main__":
    main()
PY

rec() { # NAME MODE CMD...
  local name=$1 mode=$2; shift 2
  rm -f "$OUT/$name".*.trace
  "$PL" run --mode="$mode" -o "$OUT/$name.%p.trace" -- "$@" >"$OUT/$name.log" 2>&1
  # The main process's trace: the one with the most copies (workers copy
  # nothing); rename it to NAME.trace.
  local best="" n=0 k
  for f in "$OUT/$name".*.trace; do
    k=$(PAGELOCK_NO_ADDR2LINE=1 "$PL" report --format json "$f" 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["copies"])' 2>/dev/null || echo 0)
    if [ "$k" -gt "$n" ]; then n=$k; best=$f; fi
  done
  [ -n "$best" ] || { echo "FAIL $name: no trace with copies (see $OUT/$name.log)"; return 1; }
  mv "$best" "$OUT/$name.trace"
  rm -f "$OUT/$name".*.trace
  (cd "$OUT" && PAGELOCK_NO_ADDR2LINE=1 NO_COLOR=1 "$PL" report "$name.trace" >"$name.expected.txt" &&
     PAGELOCK_NO_ADDR2LINE=1 NO_COLOR=1 "$PL" report --format json "$name.trace" >"$name.expected.json")
  echo "recorded $name ($n copies)"
}

rec gpu-dataloader-observe observe python3 "$OUT/dataloader_loop.py"
rec gpu-dataloader-stage stage python3 "$OUT/dataloader_loop.py"
rm -f "$OUT"/gpu-demo-stage*.trace
"$PL" demo --mode stage -o "$OUT/gpu-demo-stage.%p.trace" >"$OUT/gpu-demo-stage.log" 2>&1
f=$(ls "$OUT"/gpu-demo-stage.*.trace 2>/dev/null | head -1)
if [ -n "$f" ]; then
  mv "$f" "$OUT/gpu-demo-stage.trace"
  (cd "$OUT" && PAGELOCK_NO_ADDR2LINE=1 NO_COLOR=1 "$PL" report gpu-demo-stage.trace >gpu-demo-stage.expected.txt &&
     PAGELOCK_NO_ADDR2LINE=1 NO_COLOR=1 "$PL" report --format json gpu-demo-stage.trace >gpu-demo-stage.expected.json)
  echo "recorded gpu-demo-stage"
else
  echo "FAIL gpu-demo-stage: no trace (see $OUT/gpu-demo-stage.log)"
fi
python3 "$ROOT/tests/golden/check_truth.py" "$PL" "$OUT"/gpu-*.trace &&
  echo "ok   check_truth over the new traces"
