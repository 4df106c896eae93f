#!/bin/sh
# The shim exports symbols only from shim/hooks/hook_*.c (docs/design.md,
# "Layers"): any other file that marks a definition PL_EXPORT fails, one
# line per use naming the file and line.
# usage: check_exports.sh SHIM_DIR
dir=${1:?usage: check_exports.sh SHIM_DIR}
files=$(find "$dir" -name '*.[ch]' | sort)
[ -n "$files" ] || { echo "check_exports: no sources under $dir"; exit 1; }
# Comment lines and the macro's own definition do not count.
bad=$(grep -n 'PL_EXPORT' $files | grep -v -e '^[^:]*/hooks/hook_[^/:]*\.c:' \
  -e '^[^:]*:[0-9]*: *\(/\*\|\*\)' -e '^[^:]*:[0-9]*:#define PL_EXPORT ')
if [ -n "$bad" ]; then
  printf 'PL_EXPORT outside shim/hooks/hook_*.c (exports belong to the hook files):\n%s\n' "$bad"
  exit 1
fi
echo "PL_EXPORT only in shim/hooks/hook_*.c"
