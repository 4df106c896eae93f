#!/bin/sh
# The shim exports symbols only from shim/hook_*.c (docs/design.md, "the
# hooks"): any other file that marks a definition PL_EXPORT fails, one line
# per use naming the file and line.
# usage: check_exports.sh SHIM_DIR
dir=${1:?usage: check_exports.sh SHIM_DIR}
# Comment lines and the macro's own definition do not count.
bad=$(grep -n 'PL_EXPORT' "$dir"/*.c "$dir"/*.h | grep -v -e '^[^:]*/hook_[^/:]*\.c:' \
  -e '^[^:]*:[0-9]*: *\(/\*\|\*\)' -e '^[^:]*:[0-9]*:#define PL_EXPORT ')
if [ -n "$bad" ]; then
  printf 'PL_EXPORT outside shim/hook_*.c (exports belong to the hook files):\n%s\n' "$bad"
  exit 1
fi
echo "PL_EXPORT only in shim/hook_*.c"
