#!/usr/bin/env bash
# tests/gpu/pysites.sh BUILD OUT - Python call and allocation sites on the
# GPU: PyTorch, CuPy and Numba scripts (tests/gpu/pysites_*.py) copy from
# and allocate at lines marked "# SITE:<name>"; under `pagelock run` the
# report (text and JSON) must name those lines, the native site beneath
# (tests/python/check_pysites.py).  A framework that is not installed, or
# sees no GPU, is skipped with the reason.  Prints "pysites: ..." rows;
# exits 1 when a check failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd) OUT=$2
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PAGELOCK_NO_ADDR2LINE=1
failed=0

# NAME PROBE SPEC...: run tests/gpu/pysites_NAME.py and check SPEC (as
# check_pysites.py takes them).
one() {
  local name=$1 probe=$2
  shift 2
  local script="$ROOT/tests/gpu/pysites_$name.py" d="$OUT/pysites_$name"
  local why
  if ! why=$(timeout 120 "$PY" -c "$probe" 2>&1); then
    echo "pysites: $name SKIP ($(echo "$why" | tail -1))"
    return
  fi
  rm -rf "$d"; mkdir -p "$d"
  if ! timeout 300 "$B/pagelock" run -o "$d/%p.trace" -- "$PY" "$script" >"$d/run.out" 2>"$d/run.err"; then
    echo "pysites: $name FAIL (the script failed: $(tail -1 "$d/run.err"))"; failed=1; return
  fi
  "$B/pagelock" report --format json "$d"/*.trace >"$d/report.json" 2>"$d/report.err" &&
    "$B/pagelock" report "$d"/*.trace >"$d/report.txt" 2>>"$d/report.err" ||
    { echo "pysites: $name FAIL (pagelock report failed)"; failed=1; return; }
  if "$PY" "$ROOT/tests/python/check_pysites.py" "$script" "$d/report.json" "$d/report.txt" "$@" >"$d/check.txt"; then
    echo "pysites: $name ok"
  else
    echo "pysites: $name FAIL"; sed 's/^/  /' "$d/check.txt"; failed=1
  fi
}

one torch "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'" \
  call:h2d:upload:step_upload call:d2h:download \
  alloc:alloc:make_batch alloc:d2h:download \
  call:loader_h2d:train alloc:loader_next:train
# cupy.asarray stages a NumPy array through CuPy's own pinned pool: its
# upload is not pageable, so only the download is checked.
one cupy "import cupy; cupy.cuda.runtime.getDeviceCount()" \
  call:d2h:download alloc:d2h:download
one numba "from numba import cuda; assert cuda.is_available(), 'numba sees no GPU'" \
  call:h2d:upload call:d2h:download alloc:alloc:make alloc:d2h:download
exit $failed
