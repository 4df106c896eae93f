#!/bin/sh
# The Python walk under seccomp filters, over the fake CUDA
# (tests/python/seccomp.py), in every mode:
#  - kill-vm-readv (the process dies on process_vm_readv): the program
#    survives and the report still names its lines;
#  - refuse-probe (EPERM for the walk's page probe): the program survives,
#    the walk turns off, the report says why once and shows native sites;
#  - PAGELOCK_PYTHON=0: the same, saying the option turned it off.
# With Debian's python3 or the first CPython 3.10-3.13 found; none skips
# the test (77).
#   tests/python/seccomp.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-pyseccomp.XXXXXX")
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PL_CUDART="$build/fakecuda/libcudart.so"
export PAGELOCK_NO_ADDR2LINE=1

py=
for cand in /usr/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[0-3].*/bin/python3; do
  [ -x "$cand" ] && "$cand" -c 'import ctypes' >/dev/null 2>&1 && { py=$cand; break; }
done
[ -n "$py" ] || { echo "SKIP: no CPython 3.10-3.13 on this machine"; exit 77; }
case $(uname -m) in
  x86_64|aarch64) ;;
  *) echo "SKIP: seccomp.py knows the system call numbers of x86_64 and aarch64 only"; exit 77 ;;
esac

failed=0
# run NAME MODE FILTER [ENV...]: runs seccomp.py; fails unless it survived.
run() {
  name=$1 mode=$2 filter=$3
  shift 3
  out="$work/$name-$mode"
  mkdir -p "$out"
  env "$@" "$build/pagelock" run --mode "$mode" -o "$out/%p.trace" -- "$py" "$here/seccomp.py" "$filter" \
    >"$out/run.out" 2>"$out/run.err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q survived "$out/run.out"; then
    echo "FAIL $name under $mode: exit status $rc (159: killed by SIGSYS)"; cat "$out/run.err"
    failed=$((failed + 1)); return 1
  fi
  [ "$mode" = off ] && { echo "ok $name under $mode"; return 1; } # no trace to read
  "$build/pagelock" report --format json "$out"/*.trace >"$out/r.json" &&
    "$build/pagelock" report "$out"/*.trace >"$out/r.txt" ||
    { echo "FAIL $name under $mode: pagelock report failed"; failed=$((failed + 1)); return 1; }
  return 0
}

# native NAME MODE NOTE: no Python site, the note once.
native() {
  n=$(grep -c "Python frames are not recorded: $3" "$out/r.txt")
  if [ "$n" != 1 ]; then
    echo "FAIL $1 under $2: the note '$3' appears $n times (want 1)"; cat "$out/r.txt"
    failed=$((failed + 1))
  elif grep -q "seccomp.py:" "$out/r.txt"; then
    echo "FAIL $1 under $2: a Python site appeared"; failed=$((failed + 1))
  else
    echo "ok $1 under $2"
  fi
}

for mode in observe stage register auto off; do
  if run kill-vm-readv $mode kill-vm-readv; then
    if "$py" "$here/check_pysites.py" "$here/seccomp.py" "$out/r.json" "$out/r.txt" \
        call:copy:upload call:copyback:upload alloc:alloc:upload; then
      echo "ok kill-vm-readv under $mode"
    else
      echo "FAIL kill-vm-readv under $mode"; failed=$((failed + 1))
    fi
  fi
  run refuse-probe $mode refuse-probe &&
    native refuse-probe $mode "the kernel refused the page probe (rt_sigprocmask: EPERM"
  run python-off $mode none PAGELOCK_PYTHON=0 &&
    native python-off $mode "PAGELOCK_PYTHON is off"
done
[ $failed -eq 0 ]
