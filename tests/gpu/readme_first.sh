#!/usr/bin/env bash
# readme_first.sh - README's first command, verbatim, in a clean copy of
# the tree (git HEAD, or the files as they are), on the GPU machine: it must
# set up, build with no options and run `pagelock demo` on the real GPU (no
# "simulated" notice, the device's name in the report).  For
# tests/gpu/run.sh; prints one line, exits non-zero on failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-readme.XXXXXX") || exit 1
trap 'rm -rf "$W"' EXIT
# git archive only where ROOT is a checkout's top with nothing changed: the
# GPU host gets a copy of the tree, which may sit inside another checkout or
# carry the .git of an older commit than its files (then every changed file
# shows, and the files are copied as they are).
if [ "$(git -C "$ROOT" rev-parse --show-toplevel 2>/dev/null)" = "$ROOT" ] &&
   [ -z "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then
  git -C "$ROOT" archive HEAD | tar -x -C "$W"
else
  (cd "$ROOT" && tar --exclude='./build*' --exclude=./.git --exclude=./.deps -cf - .) | tar -x -C "$W"
fi
# uthash.h carried beside the tree where the image lacks uthash-dev.
[ -d "$ROOT/.deps" ] && cp -r "$ROOT/.deps" "$W/"
cmd=$(sed -n '/^```sh$/,/^```$/p' "$ROOT/README.md" | sed -n 2p | sed 's/ *#.*//')
(cd "$W" && bash -c "$cmd") >"$W/out.txt" 2>&1
rc=$?
if [ $rc = 0 ] && ! grep -q "timings are simulated" "$W/out.txt" &&
   grep -q "pagelock-demo: all bytes round-tripped" "$W/out.txt" &&
   grep -q "^GPU timing: CUPTI" "$W/out.txt"; then
  echo "readme_first: ok: $(grep -m1 '^== pid' "$W/out.txt" | cut -c1-100)"
  exit 0
fi
echo "readme_first: FAIL (exit $rc): $(grep -m1 -E 'failed|error|simulated|not found' "$W/out.txt" | cut -c1-160)"
tail -20 "$W/out.txt" >&2
exit 1
