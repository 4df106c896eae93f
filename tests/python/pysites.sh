#!/bin/sh
# Python call and allocation sites over the fake CUDA: tests/python/pysites.py
# calls the fake runtime through ctypes from marked lines (module level,
# nested functions, a thread, a generator; a thread of the standard
# library's frames only) under `pagelock run`, once per
# CPython 3.10-3.13 found (PATH, then pyenv's versions, then Debian's
# /usr/bin/python3); the report must name each marked line.  Versions not
# installed are skipped, with the reason; none at all skips the test (77).
#   tests/python/pysites.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-pysites.XXXXXX")
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PL_CUDART="$build/fakecuda/libcudart.so"
export PAGELOCK_NO_ADDR2LINE=1
# pysites.py makes its site-packages folder here, removed with the rest.
export TMPDIR="$work"

# One interpreter per minor version: the first that runs.
find_python() {
  for cand in "$(command -v "python3.$1" 2>/dev/null)" \
              "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$1.*/bin/python3.$1 \
              /usr/bin/python3.$1; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    # pyenv's shims exist for versions that are not selected, and fail.
    "$cand" -c 'import ctypes' >/dev/null 2>&1 && { echo "$cand"; return 0; }
  done
  return 1
}

ran=0 failed=0
for minor in 10 11 12 13; do
  py=$(find_python $minor) || { echo "SKIP python3.$minor: not installed"; continue; }
  out="$work/3.$minor"
  mkdir -p "$out"
  if ! "$build/pagelock" run -o "$out/%p.trace" -- "$py" "$here/pysites.py" \
       >"$out/run.out" 2>"$out/run.err"; then
    echo "FAIL python3.$minor ($py): pagelock run failed"; cat "$out/run.err"
    failed=$((failed + 1)); continue
  fi
  "$build/pagelock" report --format json "$out"/*.trace >"$out/r.json" &&
    "$build/pagelock" report "$out"/*.trace >"$out/r.txt" || {
    echo "FAIL python3.$minor: pagelock report failed"; failed=$((failed + 1)); continue; }
  if "$py" "$here/check_pysites.py" "$here/pysites.py" "$out/r.json" "$out/r.txt" \
      call:top:'<module>' \
      call:nested:inner:outer,call_outer \
      call:thread:worker:END \
      calllib:threading.py:run \
      call:generator:batches \
      call:framework:framework_upload \
      lib:call:framework:fakedrv:to_device \
      nolib:call:nested \
      alloc:alloc_top:'<module>' \
      alloc:alloc:new_buffer; then
    # HTML: the line in bold, the native site beneath; Chrome: the line
    # in the copy call's args.
    if ! "$build/pagelock" report --format html "$out"/*.trace |
         grep -q '<b>pysites.py:[0-9]* in inner</b><br>native: '; then
      echo "FAIL python3.$minor: the HTML report lacks the Python line"; failed=$((failed + 1))
    elif ! "$build/pagelock" report --format chrome "$out"/*.trace |
         grep -q '"python":"pysites.py:[0-9]* in inner","python_alloc":"pysites.py:[0-9]* in new_buffer"'; then
      echo "FAIL python3.$minor: the Chrome trace lacks the Python lines"; failed=$((failed + 1))
    # what the walks cost is counted: walks, and the pages they asked about
    elif ! "$py" -c 'import json, sys
c = [p["call_site_cost"] for p in json.load(open(sys.argv[1]))["processes"]]
assert any(x and x["py_walks"] > 0 and x["py_probes"] > 0 and x["py_walk_ns"] > 0 for x in c), c' "$out/r.json"; then
      echo "FAIL python3.$minor: the Python walks' cost is not counted"; failed=$((failed + 1))
    else
      echo "ok python3.$minor ($py)"
    fi
  else
    echo "FAIL python3.$minor ($py)"; sed -n '/by call site/,$p' "$out/r.txt"
    failed=$((failed + 1))
  fi
  ran=$((ran + 1))
done
# Debian's own python3 (statically linked libpython, no libpython.so) when
# it is not the one already run.
if [ -x /usr/bin/python3 ]; then
  out="$work/debian"; mkdir -p "$out"
  "$build/pagelock" run -o "$out/%p.trace" -- /usr/bin/python3 "$here/pysites.py" >/dev/null 2>"$out/run.err" &&
    "$build/pagelock" report --format json "$out"/*.trace >"$out/r.json" &&
    "$build/pagelock" report "$out"/*.trace >"$out/r.txt" &&
    /usr/bin/python3 "$here/check_pysites.py" "$here/pysites.py" "$out/r.json" "$out/r.txt" \
      call:nested:inner:outer,call_outer alloc:alloc:new_buffer &&
    echo "ok /usr/bin/python3" || { echo "FAIL /usr/bin/python3"; failed=$((failed + 1)); }
  ran=$((ran + 1))
fi
[ $ran -gt 0 ] || { echo "SKIP: no CPython 3.10-3.13 on this machine"; exit 77; }
[ $failed -eq 0 ]
