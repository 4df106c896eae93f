#!/usr/bin/env bash
# tests/gpu/autopin.sh BUILD OUT - PAGELOCK_MODE=register/auto on
# the real GPU: a DataLoader's workers forked after registration (bytes,
# invisibility); registered memory released by host functions and signal
# handlers; the allocation churn for 60 s (PL_GPU_CHURN_S) under auto.  The speed of every pattern in every mode, the demo's
# included, is tests/gpu/patterns.sh's.  Prints "autopin: ..." rows.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$1 OUT=$2
mkdir -p "$OUT"

d=$(mktemp -d)
# Fork after registration, invisibility, bytes (DataLoader workers).
"$B/pagelock" run --mode auto -o "$d/fork.%p.trace" -- python3 "$ROOT/tests/gpu/autopin_fork.py" \
  >"$OUT/autopin_fork.txt" 2>"$OUT/autopin_fork.err"
rc=$?
echo "autopin: fork after registration rc=$rc $(grep -h '^result' "$OUT/autopin_fork.txt" | tr '\n' ' ')"
grep -m1 '^routes:' "$OUT/autopin_fork.err" | sed 's/^/autopin:   /'

# Releases where the thread may not wait (issue 39): a host function
# releases a registered buffer, a 20 kHz signal handler maps and unmaps
# while copies run; then the churn of every allocation and release with
# copies in between (sources overwritten on return, destinations read on
# return), bytes checked.  Over the real driver.
for m in register auto; do
  for k in munmap madvise madvise_ro mremap mremap_none free; do
    timeout 120 "$B/pagelock" run --mode $m -o "$d/hf.%p.trace" -- "$B/test_autopin_prog" hostfn $k \
      >"$OUT/autopin_hostfn_${k}_$m.txt" 2>"$OUT/autopin_hostfn_${k}_$m.err"
    rc=$?
    echo "autopin: hostfn $k $m rc=$rc $(grep -h '^hostfn' "$OUT/autopin_hostfn_${k}_$m.txt")"
  done
  timeout 180 "$B/pagelock" run --mode $m -o "$d/sg.%p.trace" -- "$B/test_autopin_prog" signal \
    >"$OUT/autopin_signal_$m.txt" 2>"$OUT/autopin_signal_$m.err"
  rc=$?
  echo "autopin: signal $m rc=$rc $(grep -h '^signal' "$OUT/autopin_signal_$m.txt")"
done
for ms in "auto ${PL_GPU_CHURN_S:-60}" "register 20"; do
  set -- $ms
  PAGELOCK_REGISTER_BUDGET=0 timeout $(($2 + 120)) "$B/pagelock" run --mode $1 -o "$d/ch.%p.trace" -- \
    "$B/test_autopin_prog" churn "$2" 8 64M >"$OUT/autopin_churn_$1.txt" 2>"$OUT/autopin_churn_$1.err"
  rc=$?
  echo "autopin: churn $1 $2 s rc=$rc $(grep -h '^churn' "$OUT/autopin_churn_$1.txt")"
done

rm -rf "$d"
