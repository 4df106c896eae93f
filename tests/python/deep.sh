#!/bin/sh
# Python sites of copies made deep inside installed packages, over the fake
# CUDA: tests/python/deep.py copies through a package it installs under a
# site-packages folder, 150 library frames below its own lines, from the
# main thread, a second thread, a forked child, a subinterpreter and a
# __del__ at shutdown, after allocating from 7,000 distinct lines.  Each
# copy's report row must name the user's line and, where a library made
# the copy, that library's line (text, JSON, HTML, Chrome), once per
# CPython 3.10-3.13 found and Debian's /usr/bin/python3; versions not
# installed are skipped, none at all skips the test (77).  Then more
# distinct stacks than the shim's table holds (tests/python/flood.py).
#   tests/python/deep.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-pydeep.XXXXXX")
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PL_CUDART="$build/fakecuda/libcudart.so"
export PAGELOCK_NO_ADDR2LINE=1

find_python() {
  for cand in "$(command -v "python3.$1" 2>/dev/null)" \
              "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$1.*/bin/python3.$1 \
              /usr/bin/python3.$1; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    "$cand" -c 'import ctypes' >/dev/null 2>&1 && { echo "$cand"; return 0; }
  done
  return 1
}

ran=0 failed=0
check() { # NAME PYTHON
  out="$work/$1"
  mkdir -p "$out/pkg"
  if ! DEEP_DIR="$out/pkg" "$build/pagelock" run -o "$out/%p.trace" -- "$2" "$here/deep.py" \
       >"$out/run.out" 2>"$out/run.err"; then
    echo "FAIL $1 ($2): pagelock run failed"; cat "$out/run.err"; failed=$((failed + 1)); return
  fi
  ran=$((ran + 1))
  n=$(ls "$out"/*.trace | wc -l)
  [ "$n" = 2 ] || { echo "FAIL $1: $n traces, want 2 (the program and its forked child)"; failed=$((failed + 1)); return; }
  "$build/pagelock" report --format json "$out"/*.trace >"$out/r.json" &&
    "$build/pagelock" report "$out"/*.trace >"$out/r.txt" ||
    { echo "FAIL $1: pagelock report failed"; failed=$((failed + 1)); return; }
  if ! "$2" "$here/check_pysites.py" "$here/deep.py" "$out/r.json" "$out/r.txt" \
      call:main_fit:train:call_train,call_main,END \
      lib:call:main_fit:pre_forward:pre_forward \
      lib:call:main_fit:via_framework:via_framework \
      alloc:main_fit:train \
      lib:alloc:main_fit:offload_buffer:offload_buffer \
      call:thread_fit:worker \
      lib:call:thread_fit:pre_forward:pre_forward \
      call:child_fit:child \
      lib:call:child_fit:pre_forward:pre_forward \
      call:direct:train \
      lib:call:direct:framework_copy:copy_to_device \
      call:own:train \
      nolib:call:own \
      alloc:mapped:train \
      call:sub:sub_upload \
      call:del:__del__; then
    echo "FAIL $1 ($2)"; sed -n '/by call site/,$p' "$out/r.txt"; failed=$((failed + 1)); return
  fi
  # HTML: the user's line in bold, the library's and the native site
  # beneath; Chrome: both lines in the copy call's args.
  if ! "$build/pagelock" report --format html "$out"/*.trace |
       grep -q '<b>deep.py:[0-9]* in train</b><br>library: deeplib/hooks.py:[0-9]* in pre_forward<br>native: '; then
    echo "FAIL $1: the HTML report lacks the user's and the library's lines"; failed=$((failed + 1)); return
  fi
  if ! "$build/pagelock" report --format chrome "$out"/*.trace |
       grep -q '"python":"deep.py:[0-9]* in [A-Za-z.]*train","python_library":"deeplib/hooks.py:[0-9]* in [A-Za-z.]*pre_forward"'; then
    echo "FAIL $1: the Chrome trace lacks the user's and the library's lines"; failed=$((failed + 1)); return
  fi
  echo "ok $1 ($2)"
}

first=
for minor in 10 11 12 13; do
  py=$(find_python $minor) || { echo "SKIP python3.$minor: not installed"; continue; }
  check "3.$minor" "$py"
  first=${first:-$py}
done
[ -x /usr/bin/python3 ] && check debian /usr/bin/python3

# More distinct stacks than the table holds (tests/python/flood.py): the
# run completes, and the report says how many went without one.
if [ -n "$first" ]; then
  out="$work/flood"; mkdir -p "$out"
  if ! "$build/pagelock" run -o "$out/%p.trace" -- "$first" "$here/flood.py" >"$out/run.out" 2>"$out/run.err"; then
    echo "FAIL flood: pagelock run failed"; cat "$out/run.err"; failed=$((failed + 1))
  elif ! "$build/pagelock" report "$out"/*.trace | grep -q 'warning: [0-9]* copies and allocations were not given a stack'; then
    echo "FAIL flood: the report does not say that stacks were lost"; failed=$((failed + 1))
  else
    echo "ok flood ($first)"
  fi
fi
[ $ran -gt 0 ] || { echo "SKIP: no CPython 3.10-3.13 on this machine"; exit 77; }
[ $failed -eq 0 ]
