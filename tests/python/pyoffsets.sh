#!/bin/sh
# shim/where/pystack_layout.h against the headers of every CPython 3.10-3.13
# installed with its headers (tests/python/pyoffsets.c); versions without
# them are skipped with the reason, none at all skips the test (77).
#   tests/python/pyoffsets.sh [CC]
set -u
here=$(cd "$(dirname "$0")" && pwd)
cc=${1:-cc}
work=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-pyoffsets.XXXXXX")
trap 'rm -rf "$work"' EXIT
checked=0 failed=0
for py in /usr/bin/python3.11 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[0-3].*/bin/python3.1[0-3]; do
  [ -x "$py" ] || continue
  inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null) || continue
  if [ ! -f "$inc/Python.h" ]; then echo "SKIP $py: no headers in $inc"; continue; fi
  exe="$work/off$checked"
  if ! "$cc" -std=gnu11 -I"$inc" -I"$inc/internal" -I"$here/../../shim/where" "$here/pyoffsets.c" -o "$exe" 2>"$work/cc.err"; then
    echo "FAIL $py: pyoffsets.c does not compile against $inc"; cat "$work/cc.err"; failed=$((failed + 1)); continue
  fi
  "$exe" || failed=$((failed + 1))
  checked=$((checked + 1))
done
[ $checked -gt 0 ] || { echo "SKIP: no CPython 3.10-3.13 headers on this machine"; exit 77; }
[ $failed -eq 0 ]
