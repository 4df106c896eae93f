#!/usr/bin/env bash
# tests/gpu/probe_cupti.sh - a quick look at what CUPTI gives the shim on a
# real GPU (records by kind, joins, links, status), for each start route.
# Usage: tests/gpu/probe_cupti.sh OUTDIR [BUILD]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/probe}; B=${2:-/tmp/pagelock-probe}
mkdir -p "$OUT"
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
cmake -S "$ROOT" -B "$B" -DPAGELOCK_REAL_CUDA=ON -DPAGELOCK_UNIT_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/cmake.log" 2>&1
cmake --build "$B" -j16 --target pagelock pagelock_cli trace_check test_copies test_driver_direct test_stage_e2e test_stress test_cupti_client pagelock-demo >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* /usr/local/cuda/lib64/libcupti.so* 2>/dev/null | head -3
S=$B/libpagelock.so
run() { # name env... -- cmd
  local name=$1; shift
  local d="$OUT/$name"; mkdir -p "$d"
  env PAGELOCK_LOG=info PAGELOCK_OUTPUT="$d/t.%p.trace" "$@" >"$d/out" 2>"$d/err"
  echo "== $name rc=$? $(grep -c . "$d/err") stderr lines: $(head -c 300 "$d/err" | tr '\n' '|')"
  for t in "$d"/t.*.trace; do [ -f "$t" ] && python3 "$ROOT/tests/gpu/gpu_records.py" "$t"; done
}
run preload LD_PRELOAD=$S "$B/test_copies"
run inject LD_PRELOAD=$S CUDA_INJECTION64_PATH=$S "$B/test_copies"
run driver LD_PRELOAD=$S "$B/test_driver_direct"
run demo LD_PRELOAD=$S "$B/pagelock-demo" --quick
run stage LD_PRELOAD=$S PAGELOCK_MODE=stage "$B/test_stage_e2e"
run stage_async LD_PRELOAD=$S PAGELOCK_MODE=stage PAGELOCK_D2H=async "$B/test_stage_e2e"
run off LD_PRELOAD=$S PAGELOCK_CUPTI=0 "$B/test_copies"
if python3 -c "import torch" 2>/dev/null; then run torch LD_PRELOAD=$S python3 "$ROOT/tests/gpu/torch_copies.py"; fi
# the CUPTI preload cases over real CUDA
PL_TEST_REAL_CUDA=1 "$ROOT/tests/preload/run.sh" "$B" cupti_records cupti_kernels cupti_injection cupti_stage_links cupti_off cupti_missing cupti_streams cupti_program_client ranks 2>&1 | tail -12
# PyTorch's profiler started midway under the shim
if python3 -c "import torch" 2>/dev/null; then
  python3 "$ROOT/tests/gpu/torch_profiler.py"; echo "native rc=$?"
  "$B/pagelock" run -o "$OUT/tp.%p.trace" -- python3 "$ROOT/tests/gpu/torch_profiler.py" 2>"$OUT/tp.err"; echo "shim rc=$?"
  grep -E "^pagelock:|^GPU timing|^== " "$OUT/tp.err" | head -5
fi
