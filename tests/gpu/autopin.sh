#!/usr/bin/env bash
# tests/gpu/autopin.sh BUILD OUT - PAGELOCK_MODE=register/auto on
# the real GPU: a DataLoader's workers forked after registration (bytes,
# invisibility).  The speed of every pattern in every mode, the demo's
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

rm -rf "$d"
