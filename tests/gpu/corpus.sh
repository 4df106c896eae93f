#!/usr/bin/env bash
# tests/gpu/corpus.sh BUILD OUT - a corpus of real programs on the GPU
# (issue 40): programs written on the libraries users run
# (tests/gpu/corpus/*.py), each run without pagelock, under `pagelock run`
# (observe) and under --mode=auto.  Each run must exit 0 and print
# "result verify=ok ..." (the program checks its own bytes), with the same
# checksum as the run without pagelock; each report must count the copies
# the program says it made at least, the same under observe and auto, and
# name the call and allocation sites: the script's own line, and the
# library's line that made the copy beneath it (tests/gpu/corpus/check.py).
#   accelerate   cpu_offload of a random Llama (transformers, accelerate)
#   lightning    Trainer.fit, a DataLoader with 2 workers
#   ddp          DistributedDataParallel under torchrun (2 GPUs or more)
#   mpi          mpirun -np 2 with mpi4py, each rank copying
#   cupy, numba  NumPy arrays up and down, a kernel between
#   static       default nvcc builds (tests/gpu/corpus_static.sh)
# A program whose libraries are missing (or, for ddp, a host with one GPU)
# is skipped with the reason.  CORPUS=NAME... picks some.  Prints one
# "corpus: PASS|FAIL|SKIP ..." line per check, a table last; exits 1 when
# a check failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd)
OUT=${2:-/tmp/pagelock-gpu}/corpus
C="$ROOT/tests/gpu/corpus"
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
failed=0
declare -a table

say() { echo "corpus: $*"; }

# case NAME SCRIPT PROCS PROBE -- COMMAND... -- CHECK...
# COMMAND runs the program (SCRIPT is the file with its SITE markers);
# PROCS processes print a result line each; PROBE is a shell command that
# fails (printing why) where the program cannot run.
case_run() {
  local name=$1 script=$2 procs=$3 probe=$4
  shift 5
  local -a cmd=() checks=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  checks=("$@")
  if [ -n "${CORPUS:-}" ] && [[ " $CORPUS " != *" $name "* ]]; then return; fi
  local why
  if ! why=$(eval "$probe" 2>&1); then
    say "SKIP $name: $(echo "$why" | tail -1 | cut -c1-160)"
    table+=("$(printf '%-11s %-8s %-8s %-8s %s' "$name" skip skip skip "$(echo "$why" | tail -1 | cut -c1-60)")")
    return
  fi
  local mode d rc t0 secs native_sums="" cells=() copies_obs="" copies_auto=""
  for mode in native observe auto; do
    d="$OUT/$name/$mode"
    rm -rf "$d"; mkdir -p "$d"
    t0=$SECONDS
    case $mode in
      native) timeout 600 "${cmd[@]}" ;;
      *) timeout 600 "$B/pagelock" run --mode "$mode" -o "$d/%p.trace" -- "${cmd[@]}" ;;
    esac >"$d/out" 2>"$d/err"
    rc=$?
    secs=$((SECONDS - t0))
    local bad=0 lines sums
    if [ $rc = 0 ]; then
      say "PASS $name/$mode: exit status 0 ($secs s)"
    else
      say "FAIL $name/$mode: exit status $rc: $(grep -hE 'Error|error|FAIL|pagelock:' "$d/err" | tail -3 | tr '\n' ' ' | cut -c1-300)"
      bad=1
    fi
    lines=$(grep -c '^result .*verify=ok' "$d/out")
    if [ "$lines" = "$procs" ]; then
      say "PASS $name/$mode: the program checked its bytes ($lines of $procs processes verify=ok)"
    else
      say "FAIL $name/$mode: $lines of $procs processes printed verify=ok: $(grep -h '^result' "$d/out" | tr '\n' ' ' | cut -c1-200)"
      bad=1
    fi
    sums=$(grep -o 'checksum=[0-9a-f]*' "$d/out" | sort | tr '\n' ' ')
    if [ $mode = native ]; then
      native_sums=$sums
    elif [ -n "$native_sums" ] && [ "$sums" = "$native_sums" ]; then
      say "PASS $name/$mode: the same checksum as without pagelock ($sums)"
    else
      say "FAIL $name/$mode: checksum '$sums', without pagelock '$native_sums'"
      bad=1
    fi
    if [ $mode != native ]; then
      if ! ls "$d"/*.trace >/dev/null 2>&1; then
        say "FAIL $name/$mode: no trace written"; bad=1
      elif "$B/pagelock" report --format json "$d"/*.trace >"$d/report.json" 2>"$d/report.err" &&
           "$B/pagelock" report "$d"/*.trace >"$d/report.txt" 2>>"$d/report.err"; then
        local min
        min=$(grep -o 'min_copies=[0-9]*' "$d/out" | awk -F= '{s += $2} END {print s + 0}')
        "$PY" "$C/check.py" "$name/$mode" "$script" "$d/report.json" "$d/report.txt" \
          "copies>=${min:-1}" "${checks[@]}" >"$d/check.txt" 2>&1
        [ $? = 0 ] || bad=1
        sed 's/^/corpus: /' "$d/check.txt"
        local n
        n=$("$PY" -c 'import json,sys; print(sum(p["totals"]["copies"] for p in json.load(open(sys.argv[1]))["processes"]))' "$d/report.json")
        [ $mode = observe ] && copies_obs=$n || copies_auto=$n
      else
        say "FAIL $name/$mode: pagelock report failed: $(tail -2 "$d/report.err" | tr '\n' ' ')"; bad=1
      fi
    fi
    [ $bad = 0 ] && cells+=("ok") || { cells+=("FAIL"); failed=1; }
  done
  if [ -n "$copies_obs" ] && [ "$copies_obs" = "$copies_auto" ]; then
    say "PASS $name: the same copy calls under observe and auto ($copies_obs)"
  else
    say "FAIL $name: copy calls under observe '$copies_obs', under auto '$copies_auto'"
    cells[2]="FAIL"; failed=1
  fi
  table+=("$(printf '%-11s %-8s %-8s %-8s %s' "$name" "${cells[0]}" "${cells[1]}" "${cells[2]}" "$OUT/$name")")
}

case_run accelerate "$C/accelerate_offload.py" 1 \
  "$PY -c 'import torch, accelerate, transformers; assert torch.cuda.is_available(), \"torch sees no GPU\"'" \
  -- "$PY" "$C/accelerate_offload.py" -- \
  "call:forward:accelerate/" "call:ids" "call:download" \
  "alloc:model:(transformers|accelerate)/" "alloc:download" "allocs-known" \
  "no-note:defines malloc itself"

case_run lightning "$C/lightning_fit.py" 1 \
  "$PY -c 'import torch; assert torch.cuda.is_available(), \"torch sees no GPU\"
try:
    import lightning
except ImportError:
    import pytorch_lightning'" \
  -- "$PY" "$C/lightning_fit.py" -- \
  "call:fit:lightning" "alloc:fit" "allocs-known" "pageable>=64" \
  "no-note:defines malloc itself"

case_run ddp "$C/ddp_torchrun.py" 2 \
  "[ $NGPU -ge 2 ] || { echo \"$NGPU GPU on this host\"; exit 1; }; $PY -c 'import torch.distributed'" \
  -- "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 "$C/ddp_torchrun.py" -- \
  "call:upload" "call:download" "alloc:batch" "allocs-known" "procs>=2" \
  "no-note:defines malloc itself"

case_run mpi "$C/mpi_job.py" 2 \
  "command -v mpirun >/dev/null || { echo 'no mpirun'; exit 1; }; $PY -c 'import mpi4py, torch; assert torch.cuda.is_available()'" \
  -- mpirun --allow-run-as-root -np 2 "$PY" "$C/mpi_job.py" -- \
  "call:upload" "call:download" "alloc:batch" "alloc:download" "allocs-known" "procs>=2" \
  "no-note:defines malloc itself"

case_run cupy "$C/cupy_prog.py" 1 \
  "$PY -c 'import cupy; cupy.cuda.runtime.getDeviceCount()'" \
  -- "$PY" "$C/cupy_prog.py" -- \
  "call:upload" "call:download" "alloc:alloc" "alloc:download" "allocs-known"

case_run numba "$C/numba_prog.py" 1 \
  "$PY -c 'import sys, numpy as np
try:
    from numba import cuda
    assert cuda.is_available(), \"numba sees no GPU\"
    cuda.jit(lambda a: None)[1, 1](cuda.to_device(np.zeros(4)))
except Exception as e:
    sys.exit(\"numba cannot run a kernel here: %s\" % e)'" \
  -- "$PY" "$C/numba_prog.py" -- \
  "call:upload:numba|cuda/" "call:download:numba|cuda/" "alloc:alloc" "alloc:download" "allocs-known"

# Default nvcc builds (static cudart), checked by tests/gpu/corpus_static.sh.
if { [ -z "${CORPUS:-}" ] || [[ " $CORPUS " == *" static "* ]]; } && [ -f "$ROOT/tests/gpu/corpus_static.sh" ]; then
  if command -v "${NVCC:-nvcc}" >/dev/null; then
    bash "$ROOT/tests/gpu/corpus_static.sh" "$B" "$OUT" >"$OUT/static.log" 2>&1 || failed=1
    sed -n 's/^corpus_static: \(.*\) ok$/corpus: PASS static: \1/p; s/^corpus_static: \(.*FAIL.*\)$/corpus: FAIL static: \1/p' "$OUT/static.log"
    cell() { grep -q "^corpus_static: .* $1 FAIL\|^corpus_static: .*FAIL (nvcc" "$OUT/static.log" && echo FAIL || echo ok; }
    table+=("$(printf '%-11s %-8s %-8s %-8s %s' static - "$(cell observe)" "$(cell auto)" "$OUT/static.log")")
  else
    say "SKIP static: no nvcc"
  fi
fi

echo
echo "== corpus: exit status, bytes, copy counts, call and allocation sites =="
printf '%-11s %-8s %-8s %-8s %s\n' program native observe auto files
printf '%s\n' "${table[@]}"
exit $failed
