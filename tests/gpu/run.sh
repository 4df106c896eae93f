#!/usr/bin/env bash
# tests/gpu/run.sh - everything that needs a real GPU, in one go.
# Builds pagelock against the real CUDA runtime, runs the preload tests over
# real CUDA (shared cudart, static cudart from a default nvcc build), the
# demo and the benchmarks, and prints a short table last.
# Usage (repo root, on the GPU machine): tests/gpu/run.sh [OUTDIR]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-${OUT:-/tmp/pagelock-gpu}}
mkdir -p "$OUT"
B=/tmp/pagelock-gpu-build
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
declare -a rows
row() { rows+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }

nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader | tee "$OUT/device.txt"
date -u +%Y-%m-%dT%H:%MZ >>"$OUT/device.txt"

# cmocka is not on the GPU image; uthash travels in .deps (see README).
cmake -S "$ROOT" -B "$B" -DPAGELOCK_REAL_CUDA=ON -DPAGELOCK_UNIT_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/cmake.log" 2>&1 &&
  cmake --build "$B" -j16 >"$OUT/build.log" 2>&1
if [ $? != 0 ]; then tail -30 "$OUT/build.log" "$OUT/cmake.log"; row build FAIL "see build.log"; printf '%s\n' "${rows[@]}"; exit 1; fi
row build ok "$(nvcc --version | tail -1)"

# A default nvcc build links cudart statically: the shim must still see it.
nvcc -O2 -o "$B/test_copies_static" "$ROOT/tests/preload/copies.c" >>"$OUT/build.log" 2>&1 &&
  row "nvcc static build" ok "" || row "nvcc static build" FAIL ""

export PL_TEST_REAL_CUDA=1
"$ROOT/tests/preload/run.sh" "$B" >"$OUT/preload.log" 2>&1
row "preload tests (real CUDA)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/preload.log")"

# static cudart: the counts must be exact there too
d=$(mktemp -d)
"$B/pagelock" run -o "$d/s.%p.trace" -- "$B/test_copies_static" >"$d/out" 2>"$OUT/static.err"
eval "$(sed 's/ /;/g' "$d/out")"
"$B/trace_check" "$d"/s.*.trace --pageable "${pageable:-x}" --pageable-bytes "${pageable_bytes:-x}" \
   --pinned "${pinned:-x}" --pinned-bytes "${pinned_bytes:-x}" --failed 0 --complete --simulated 0 >"$OUT/static.log" 2>&1
row "static cudart counts exact" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/static.log" | cut -c1-120)"
# CUPTI: every copy call joined to the GPU's own record of it
python3 "$ROOT/tests/gpu/gpu_records.py" "$(ls "$d"/s.*.trace | head -1)" --status 0 --joined-frac 1.0 --min-gpu 42 >"$OUT/static.gpu.log" 2>&1
row "CUPTI: static cudart, all joined" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/static.gpu.log" | grep -o 'copies=.*' | cut -c1-90)"

# Python programs (PyTorch, CuPy): the trace must count exactly the copies
# each script says it made, and the bytes must arrive intact.
for py in torch cupy; do
  d=$(mktemp -d)
  if python3 -c "import $py" 2>/dev/null; then
    "$B/pagelock" run -o "$d/p.%p.trace" -- python3 "$ROOT/tests/gpu/${py}_copies.py" >"$d/out" 2>"$OUT/$py.err"
    rc=$?
    pageable= pageable_bytes= pinned= pinned_bytes= copies= bytes=
    eval "$(grep -E '^(pageable|copies)=' "$d/out" | sed 's/ /;/g')"
    args=(--failed 0 --complete --simulated 0)
    [ -n "$pageable" ] && args+=(--pageable "$pageable" --pageable-bytes "$pageable_bytes")
    [ -n "$pinned" ] && args+=(--pinned "$pinned" --pinned-bytes "$pinned_bytes")
    [ -n "$copies" ] && args+=(--copies "$copies" --bytes "$bytes")
    # one trace per process that copied: python itself
    "$B/trace_check" $(ls "$d"/p.*.trace | head -1) "${args[@]}" >"$OUT/$py.log" 2>&1
    ok=$?
    row "$py counts exact, bytes intact" "$([ $rc = 0 ] && [ $ok = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/$py.log" | cut -c1-110)"
    python3 "$ROOT/tests/gpu/gpu_records.py" "$(ls "$d"/p.*.trace | head -1)" --status 0 --joined-frac 1.0 >"$OUT/$py.gpu.log" 2>&1
    row "CUPTI: $py, all joined" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/$py.gpu.log" | grep -o 'copies=.*' | cut -c1-90)"
    cp "$d"/p.*.trace "$OUT/" 2>/dev/null
    "$B/pagelock" run --mode stage -o "$d/s.%p.trace" -- python3 "$ROOT/tests/gpu/${py}_copies.py" >"$d/sout" 2>"$OUT/$py.stage.err"
    row "$py under --mode=stage, bytes intact" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 '^staging:' "$OUT/$py.stage.err" | cut -c1-100)"
  else
    row "$py" skip "not installed"
  fi
done

# Staging correctness over real CUDA: the preload programs in stage mode.
for prog in test_copies test_copies_static test_copies_ptds test_driver_direct; do
  PAGELOCK_MODE=stage LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/st.%p.trace" "$B/$prog" >/dev/null 2>"$OUT/stage_$prog.err"
  row "stage: $prog bytes intact" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/stage_$prog.err" | cut -c1-90)"
done
for prog in test_copies; do
  PAGELOCK_MODE=stage PAGELOCK_D2H=async LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/sa.%p.trace" "$B/$prog" >/dev/null 2>"$OUT/stagea_$prog.err"
  row "stage, D2H async: $prog bytes intact" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/stagea_$prog.err" | cut -c1-90)"
done

# Staged chunks join their app call through LINK records.
PAGELOCK_MODE=stage LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/sl.%p.trace" "$B/test_stage_e2e" >/dev/null 2>&1
python3 "$ROOT/tests/gpu/gpu_records.py" "$(ls "$d"/sl.*.trace | head -1)" --status 0 --joined-frac 1.0 --min-links 1 >"$OUT/stage.gpu.log" 2>&1
row "CUPTI: staged copies joined via links" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/stage.gpu.log" | grep -o 'copies=.*' | cut -c1-90)"
# Route 2: the driver's injection hook alone (no LD_PRELOAD).
CUDA_INJECTION64_PATH="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/inj.%p.trace" "$B/test_copies" >/dev/null 2>&1
python3 "$ROOT/tests/gpu/gpu_records.py" "$(ls "$d"/inj.*.trace | head -1)" --status 0 --min-gpu 42 >"$OUT/inject.gpu.log" 2>&1
row "CUPTI: CUDA_INJECTION64_PATH alone" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/inject.gpu.log" | grep -o 'gpu=.*' | cut -c1-90)"

"$B/pagelock" demo >"$OUT/demo.txt" 2>&1
row "pagelock demo" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 -i 'pageable' "$OUT/demo.txt" | cut -c1-100)"

if [ -x "$ROOT/tests/bench/run.sh" ]; then
  "$ROOT/tests/bench/run.sh" "$B" "$OUT" >"$OUT/bench.log" 2>&1
  row "benchmarks" "$([ $? = 0 ] && echo ok || echo FAIL)" "see bench.log"
fi

echo
cat "$OUT/preload.log"
echo "---- bench ----"; cat "$OUT/bench.log" 2>/dev/null | tail -75
echo "---- demo ----"; head -60 "$OUT/demo.txt"
echo
echo "== pagelock GPU run: $(head -1 "$OUT/device.txt") =="
printf '%s\n' "${rows[@]}"
