#!/usr/bin/env bash
# tests/gpu/run.sh - everything that needs a real GPU, in one go.
# Builds pagelock against the real CUDA runtime, runs the preload tests over
# real CUDA (shared cudart, static cudart from a default nvcc build), the
# demo and the benchmarks, and prints a short table last.
# Usage (repo root, on the GPU machine): tests/gpu/run.sh [OUTDIR]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-${OUT:-/tmp/pagelock-gpu}}
mkdir -p "$OUT" "$OUT/golden"
B=/tmp/pagelock-gpu-build
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
declare -a rows
row() { rows+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }

nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader | tee "$OUT/device.txt"
date -u +%Y-%m-%dT%H:%MZ >>"$OUT/device.txt"

# cmocka is not on the GPU image; uthash travels in .deps (see docs/usage.md).
cmake -S "$ROOT" -B "$B" -DPAGELOCK_REAL_CUDA=ON -DPAGELOCK_UNIT_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/cmake.log" 2>&1 &&
  cmake --build "$B" -j16 >"$OUT/build.log" 2>&1
if [ $? != 0 ]; then tail -30 "$OUT/build.log" "$OUT/cmake.log"; row build FAIL "see build.log"; printf '%s\n' "${rows[@]}"; exit 1; fi
row build ok "$(nvcc --version | tail -1)"

# What the driver does with a copy that crosses the edge of a registered
# range (the engine cuts pass-through copies there; fakecuda models it).
nvcc -O2 -o "$B/probe_straddle" "$ROOT/tests/gpu/probe_straddle.c" >>"$OUT/build.log" 2>&1 &&
  "$B/probe_straddle" >"$OUT/probe_straddle.txt" 2>&1
row "driver: copies across a registration edge" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -c . "$OUT/probe_straddle.txt") cases: probe_straddle.txt"
# What one registration call costs the process's other threads (why the
# shim registers in pieces, shim/engines/pinreg.h).
nvcc -O2 -o "$B/probe_register" "$ROOT/tests/gpu/probe_register.c" -lpthread >>"$OUT/build.log" 2>&1 &&
  timeout 120 "$B/probe_register" >"$OUT/probe_register.txt" 2>&1
row "driver: uploads beside a registration" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 'whole, uploads' "$OUT/probe_register.txt" | grep -o 'worst [0-9.]* ms' | head -1) whole, $(grep -m1 '16 MiB pieces 50us apart' "$OUT/probe_register.txt" | grep -o 'worst [0-9.]* ms' | head -1) in pieces: probe_register.txt"

# Whether holding page-locked memory (the staging pool's slab) makes each
# small pageable copy of the process dearer (small copies ran slower under
# stage than under observe, docs/bench/2026-11-27-huge-pages.md run X).
nvcc -O2 -o "$B/probe_small_reg" "$ROOT/tests/gpu/probe_small_reg.c" >>"$OUT/build.log" 2>&1 &&
  timeout 120 "$B/probe_small_reg" >"$OUT/probe_small_reg.txt" 2>&1
row "driver: small copies beside page-locked memory" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -o 'registered.*x$' "$OUT/probe_small_reg.txt" | grep -o '[0-9.]*x$') with a registration, $(grep -o 'cudaHostAlloc.*x$' "$OUT/probe_small_reg.txt" | grep -o '[0-9.]*x$') with cudaHostAlloc: probe_small_reg.txt"

# Registration (PAGELOCK_MODE=register/auto): fork and invisibility, and
# the demo under auto, in tests/gpu/autopin.sh (their speed: patterns).
autopin() {
  if python3 -c "import torch" 2>/dev/null; then
    "$ROOT/tests/gpu/autopin.sh" "$B" "$OUT" >"$OUT/autopin.log" 2>&1
    row "autopin (register/auto)" "$(grep -q 'FAIL\|rc=[1-9]' "$OUT/autopin.log" && echo FAIL || echo ok)" "see autopin.log"
  else
    row "autopin (register/auto)" skip "no PyTorch"
  fi
}
# Parts, so that a run fits the device tool's 10 minutes a call:
# PL_GPU_PARTS picks them (default: all, in this order).
#   core      preload tests, static cudart, CUPTI, PyTorch/CuPy, allocators,
#             staging correctness, the demo, report formats, torch.profiler
#   readme    README's first command, verbatim, in a clean copy (default build)
#   autopin   register/auto: fork after registration, the demo under auto
#   pysites   Python call and allocation sites (PyTorch, CuPy, Numba)
#   goldens   records the GPU golden traces (tests/gpu/record_goldens.sh)
#   patterns  the copy patterns of real programs in every mode, one table
#   bench     the single-copy benchmarks (tests/bench/run.sh)
#   multigpu  with two GPUs or more: one process driving two, a torchrun
#             job with NCCL, peer copies (tests/gpu/multigpu.sh)
#   speed     issue 42's rows on real programs: bandwidthTest's synchronous
#             loop and a buffer's first copies, accelerate's offload
#             forward, each against pinned and no pagelock (speed_real.sh)
#   corpus    real programs (accelerate, Lightning, DDP, MPI, CuPy, Numba)
#             without pagelock, observed and under auto: bytes, counts,
#             sites (tests/gpu/corpus.sh)
PARTS=${PL_GPU_PARTS:-${PL_GPU_ONLY:-core readme autopin pysites goldens patterns bench multigpu speed corpus}}
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

if want core; then
# A default nvcc build links cudart statically: the shim must still see it.
nvcc -O2 -o "$B/test_copies_static" "$ROOT/tests/preload/copies.c" >>"$OUT/build.log" 2>&1 &&
  row "nvcc static build" ok "" || row "nvcc static build" FAIL ""

export PL_TEST_REAL_CUDA=1
"$ROOT/tests/preload/run.sh" "$B" >"$OUT/preload.log" 2>&1
row "preload tests (real CUDA)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/preload.log")"

# static cudart: the counts must be exact there too.  The checks that every
# copy joins its GPU record trace throughout (PAGELOCK_CUPTI_MAX_RATE=0):
# they test the join, and a run of many GPU operations is sampled after
# its first 100 ms (the sampler has its own cases).
d=$(mktemp -d)
PAGELOCK_CUPTI_MAX_RATE=0 "$B/pagelock" run -o "$d/s.%p.trace" -- "$B/test_copies_static" >"$d/out" 2>"$OUT/static.err"
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
    PAGELOCK_CUPTI_MAX_RATE=0 "$B/pagelock" run -o "$d/p.%p.trace" -- python3 "$ROOT/tests/gpu/${py}_copies.py" >"$d/out" 2>"$OUT/$py.err"
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

# Production PyTorch servers often preload jemalloc (or tcmalloc): the
# shim must neither hang nor lose a byte then, in either preload order.
# The allocators travel as Debian packages in .deps/debs (docs/usage.md), unpacked
# here into a scratch root.
alloc_root=/tmp/pagelock-allocators
rm -rf "$alloc_root"; mkdir -p "$alloc_root"
for deb in "$ROOT"/.deps/debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" "$alloc_root"; done
if python3 -c "import torch" 2>/dev/null; then
  for lib in libjemalloc.so.2 libtcmalloc_minimal.so.4 libmimalloc.so.2; do
    so=$(find "$alloc_root" -name "$lib" | head -1)
    [ -n "$so" ] || { row "torch + $lib" skip "not in .deps/debs"; continue; }
    d=$(mktemp -d)
    # pagelock run puts the shim first, whatever the user's LD_PRELOAD says
    LD_PRELOAD="$so" timeout 300 "$B/pagelock" run --mode stage -o "$d/j.%p.trace" -- \
      python3 "$ROOT/tests/gpu/torch_copies.py" >"$d/out" 2>"$OUT/alloc_$lib.err"
    rc=$?
    pageable= pageable_bytes= pinned= pinned_bytes=
    eval "$(grep -E '^pageable=' "$d/out" | sed 's/ /;/g')"
    "$B/trace_check" "$(ls "$d"/j.*.trace | head -1)" --pageable "${pageable:-x}" --pageable-bytes "${pageable_bytes:-x}" \
      --pinned "${pinned:-x}" --pinned-bytes "${pinned_bytes:-x}" --failed 0 --complete --simulated 0 >"$OUT/alloc_$lib.log" 2>&1
    ok=$?
    row "torch + $lib, stage, shim first" "$([ $rc = 0 ] && [ $ok = 0 ] && echo ok || echo FAIL)" "rc=$rc $(tail -1 "$OUT/alloc_$lib.log" | cut -c1-80)"
    # the allocator first, by hand: no hang, bytes intact, and the report
    # says why allocation sites are missing
    LD_PRELOAD="$so:$B/libpagelock.so" PAGELOCK_MODE=stage PAGELOCK_OUTPUT="$d/f.%p.trace" timeout 300 \
      python3 "$ROOT/tests/gpu/torch_copies.py" >"$d/fout" 2>"$OUT/alloc_${lib}_first.err"
    rc=$?
    "$B/pagelock" report "$(ls "$d"/f.*.trace | head -1)" >"$OUT/alloc_${lib}_first.txt" 2>&1
    row "torch + $lib first, stage" "$([ $rc = 0 ] && echo ok || echo FAIL)" "rc=$rc $(grep -m1 -o 'allocation sites.*' "$OUT/alloc_${lib}_first.txt" | cut -c1-70)"
  done
fi

# Staging correctness over real CUDA: the preload programs in stage mode.
for prog in test_copies test_copies_static test_copies_ptds test_driver_direct; do
  PAGELOCK_MODE=stage LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/st.%p.trace" "$B/$prog" >/dev/null 2>"$OUT/stage_$prog.err"
  row "stage: $prog bytes intact" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/stage_$prog.err" | cut -c1-90)"
done
# Copies larger than the pool whose copy threads grow midway (PyTorch).
if python3 -c "import torch" 2>/dev/null; then
  for d2h in sync async; do
    PAGELOCK_D2H=$d2h timeout 300 "$B/pagelock" run --mode stage -o "$d/w.%p.trace" -- \
      python3 "$ROOT/tests/gpu/wide_copies.py" >"$OUT/wide_$d2h.txt" 2>"$OUT/wide_$d2h.err"
    row "stage: wide copies, D2H $d2h" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 '^staging:' "$OUT/wide_$d2h.err" | cut -c1-90)"
  done
fi
for prog in test_copies; do
  PAGELOCK_MODE=stage PAGELOCK_D2H=async LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/sa.%p.trace" "$B/$prog" >/dev/null 2>"$OUT/stagea_$prog.err"
  row "stage, D2H async: $prog bytes intact" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/stagea_$prog.err" | cut -c1-90)"
done

# Asynchronous device-to-host copies queued behind a 300 ms kernel: bytes
# exact, on a stream, beside another stream, and on the legacy stream, also
# with every stream on one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1:
# an engine that blocks a stream in a host function while it queues GPU
# work of its own deadlocks there; docs/bench/2026-11-22-deferring-async-d2h.md).
for mc in 8 1; do
  CUDA_DEVICE_MAX_CONNECTIONS=$mc PAGELOCK_MODE=stage PAGELOCK_D2H=async LD_PRELOAD="$B/libpagelock.so" \
    PAGELOCK_OUTPUT="$d/held$mc.%p.trace" timeout 120 "$B/test_stage_e2e" --held 256 32 >"$OUT/held$mc.txt" 2>&1
  row "D2H async behind a kernel, $mc queues" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -o 'call_ms.*other_stream_ms=[0-9.]*' "$OUT/held$mc.txt")"
done
timeout 120 "$B/test_stage_e2e" --held 256 32 >"$OUT/held_native.txt" 2>&1
row "  same without the shim" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -o 'call_ms.*other_stream_ms=[0-9.]*' "$OUT/held_native.txt")"
CUDA_DEVICE_MAX_CONNECTIONS=1 PAGELOCK_MODE=stage PAGELOCK_POOL_SIZE=8M PAGELOCK_CHUNK_SIZE=1M PAGELOCK_STAGE_MIN=64K \
  PAGELOCK_D2H=async LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/e1.%p.trace" timeout 120 "$B/test_stage_e2e" >"$OUT/e2e_conn1.txt" 2>&1
row "stage e2e, D2H async, 1 queue" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/e2e_conn1.txt" | cut -c1-90)"

# Staged chunks join their app call through LINK records.
PAGELOCK_CUPTI_MAX_RATE=0 PAGELOCK_MODE=stage LD_PRELOAD="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/sl.%p.trace" "$B/test_stage_e2e" >/dev/null 2>&1
python3 "$ROOT/tests/gpu/gpu_records.py" "$(ls "$d"/sl.*.trace | head -1)" --status 0 --joined-frac 1.0 --min-links 1 >"$OUT/stage.gpu.log" 2>&1
row "CUPTI: staged copies joined via links" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/stage.gpu.log" | grep -o 'copies=.*' | cut -c1-90)"
# Route 2: the driver's injection hook alone (no LD_PRELOAD).
PAGELOCK_CUPTI_MAX_RATE=0 CUDA_INJECTION64_PATH="$B/libpagelock.so" PAGELOCK_OUTPUT="$d/inj.%p.trace" "$B/test_copies" >/dev/null 2>&1
python3 "$ROOT/tests/gpu/gpu_records.py" "$(ls "$d"/inj.*.trace | head -1)" --status 0 --min-gpu 42 >"$OUT/inject.gpu.log" 2>&1
row "CUPTI: CUDA_INJECTION64_PATH alone" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/inject.gpu.log" | grep -o 'gpu=.*' | cut -c1-90)"

"$B/pagelock" demo -o "$OUT/golden/demo.%p.trace" >"$OUT/demo.txt" 2>&1
row "pagelock demo" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 -i 'pageable' "$OUT/demo.txt" | cut -c1-100)"
# The same workload staged, and the two side by side; HTML and Chrome views.
"$B/pagelock" demo --mode stage -o "$OUT/golden/staged.%p.trace" >"$OUT/demo_stage.txt" 2>&1
row "pagelock demo --mode stage" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 '^staging:' "$OUT/demo_stage.txt" | cut -c1-100)"
"$B/pagelock" compare "$OUT"/golden/demo.*.trace "$OUT"/golden/staged.*.trace >"$OUT/compare.txt" 2>&1
row "pagelock compare observe stage" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -m1 'host blocked' "$OUT/compare.txt" | tr -s ' ' | cut -c1-100)"
"$B/pagelock" report --format html -o "$OUT/demo.html" "$OUT"/golden/demo.*.trace 2>"$OUT/html.err" &&
  "$B/pagelock" report --format chrome -o "$OUT/demo.chrome.json" "$OUT"/golden/demo.*.trace 2>>"$OUT/html.err"
row "report html + chrome of the demo" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(wc -c <"$OUT/demo.html") B html"

# PyTorch's own profiler (a CUPTI client) started midway: it must still
# see CUDA events, and pagelock's report says GPU timing stopped there.
if python3 -c "import torch" 2>/dev/null; then
  python3 "$ROOT/tests/gpu/torch_profiler.py" >"$OUT/torch_prof_native.txt" 2>&1
  row "torch.profiler without the shim" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/torch_prof_native.txt" | cut -c1-90)"
  "$B/pagelock" run -o "$d/tp.%p.trace" -- python3 "$ROOT/tests/gpu/torch_profiler.py" >"$OUT/torch_prof.txt" 2>"$OUT/torch_prof.err"
  rc=$?
  grep -m1 "^GPU timing" "$OUT/torch_prof.err" | grep -q "^GPU timing partial" && [ $rc = 0 ]
  row "torch.profiler under pagelock run" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/torch_prof.txt" | cut -c1-50) | $(grep -m1 "^GPU timing" "$OUT/torch_prof.err" | cut -c1-60)"
fi

# PyTorch speed: pageable native, pinned native, pageable staged (64 MiB),
# staged as preloaded by hand too (libgomp's threads spin their full
# 300,000 rounds after each torch.equal then: pagelock run shortens that).
if python3 -c "import torch" 2>/dev/null; then
  for v in native pinned stage preload; do
    case $v in
      native) e=(X=1); a=() ;;
      pinned) e=(X=1); a=(--pinned) ;;
      stage) e=("$B/pagelock" run --mode stage -o "$d/ts.%p.trace" --); a=() ;;
      preload) e=(LD_PRELOAD="$B/libpagelock.so" PAGELOCK_MODE=stage PAGELOCK_CUPTI=0 PAGELOCK_OUTPUT="$d/ts.%p.trace"); a=() ;;
    esac
    env "${e[@]}" python3 "$ROOT/tests/gpu/torch_speed.py" "${a[@]}" >"$OUT/torch_speed_$v.txt" 2>&1
    row "torch 64 MiB $v" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -o 'h2d_gbps.*' "$OUT/torch_speed_$v.txt")"
    # PyTorch's OpenMP threads spin after each parallel op and take the
    # cores the copy threads need: the same with one OpenMP thread.
    env OMP_NUM_THREADS=1 "${e[@]}" python3 "$ROOT/tests/gpu/torch_speed.py" "${a[@]}" >"$OUT/torch_speed_${v}_omp1.txt" 2>&1
    row "torch 64 MiB $v, OMP_NUM_THREADS=1" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -o 'h2d_gbps.*' "$OUT/torch_speed_${v}_omp1.txt")"
  done
fi

fi # core

if want readme; then
  "$ROOT/tests/gpu/readme_first.sh" >"$OUT/readme_first.log" 2>&1
  row "README's first command (default build)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(head -1 "$OUT/readme_first.log" | cut -c1-100)"
fi
want autopin && autopin
if want pysites; then
  "$ROOT/tests/gpu/pysites.sh" "$B" "$OUT" >"$OUT/pysites.log" 2>&1
  row "Python sites (torch, cupy, numba)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep '^pysites:' "$OUT/pysites.log" | tr '\n' ' ' | cut -c1-120)"
fi
if want goldens; then
  B="$B" "$ROOT/tests/gpu/record_goldens.sh" "$OUT/goldens" >"$OUT/goldens.log" 2>&1
  row "golden traces recorded" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(ls "$OUT/goldens"/*.trace 2>/dev/null | wc -l) traces in goldens/"
fi
if want patterns; then
  if python3 -c "import torch" 2>/dev/null; then
    "$ROOT/tests/gpu/patterns.sh" "$B" "$OUT" "${PL_PAT_ROUNDS:-3}" >"$OUT/patterns.log" 2>&1
    row "patterns (every mode)" "$(grep -q FAIL "$OUT/patterns.log" && echo FAIL || echo ok)" "see patterns.log"
  else
    row "patterns (every mode)" skip "no PyTorch"
  fi
fi
if want bench && [ -x "$ROOT/tests/bench/run.sh" ]; then
  "$ROOT/tests/bench/run.sh" "$B" "$OUT" >"$OUT/bench.log" 2>&1
  row "benchmarks" "$([ $? = 0 ] && echo ok || echo FAIL)" "see bench.log"
fi
if want multigpu; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$ngpu" -ge 2 ]; then
    "$ROOT/tests/gpu/multigpu.sh" "$B" "$OUT" "${PL_MG_ROUNDS:-2}" >"$OUT/multigpu.log" 2>&1
    row "several GPUs ($ngpu)" "$([ $? = 0 ] && echo ok || echo FAIL)" "see multigpu.log"
  else
    row "several GPUs" skip "$ngpu GPU on this host"
  fi
fi

if want speed; then
  "$ROOT/tests/gpu/speed_real.sh" "$B" "$OUT" "${PL_SPEED_ROUNDS:-3}" >"$OUT/speed.log" 2>&1
  row "speed of real programs (issue 42)" "$(grep -q FAIL "$OUT/speed.log" && echo FAIL || echo ok)" "see speed.log"
fi

if want corpus; then
  "$ROOT/tests/gpu/corpus.sh" "$B" "$OUT" >"$OUT/corpus.log" 2>&1
  row "corpus of real programs" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -c '^corpus: PASS' "$OUT/corpus.log") checks passed, $(grep -c '^corpus: FAIL' "$OUT/corpus.log") failed: corpus.log"
fi

echo
[ -f "$OUT/preload.log" ] && cat "$OUT/preload.log"
echo "---- autopin ----"; grep '^autopin:' "$OUT/autopin.log" 2>/dev/null
echo "---- python sites ----"; grep '^pysites:' "$OUT/pysites.log" 2>/dev/null
echo "---- patterns ----"; grep '^patterns:' "$OUT/patterns.log" 2>/dev/null
echo "---- bench ----"; cat "$OUT/bench.log" 2>/dev/null | tail -95
echo "---- several GPUs ----"; grep '^multigpu:' "$OUT/multigpu.log" 2>/dev/null
echo "---- speed ----"; grep '^speed:' "$OUT/speed.log" 2>/dev/null
echo "---- corpus ----"; grep '^corpus: \(FAIL\|SKIP\)' "$OUT/corpus.log" 2>/dev/null; sed -n '/^== corpus/,$p' "$OUT/corpus.log" 2>/dev/null
[ -f "$OUT/demo.txt" ] && { echo "---- demo ----"; head -60 "$OUT/demo.txt"; }
# One archive of everything, for the device tool (it returns few files).
tar -C "$OUT" -czf /tmp/pagelock-gpu-all.tar.gz --exclude='*.tar.gz' . 2>/dev/null && mv /tmp/pagelock-gpu-all.tar.gz "$OUT/all.tar.gz"

echo
echo "== pagelock GPU run: $(head -1 "$OUT/device.txt") =="
printf '%s\n' "${rows[@]}"
