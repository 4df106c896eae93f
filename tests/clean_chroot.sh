#!/usr/bin/env bash
# clean_chroot.sh [CHROOT] - README's two commands in a fresh Debian
# (debootstrap --variant=minbase bookworm: no uthash, no cmocka, no
# compiler) with only the CUDA toolkit bind-mounted at /usr/local/cuda, as a
# new user's machine.  Needs root, debootstrap and a Debian mirror; a CI
# step of .ci/run, not part of tests/run-tests.  PL_CHROOT_TESTS=1 runs the
# test command too, printing the suites' progress lines and its time at the
# end: 18 min 50 s on 2 cores on 2026-11-28, before the robustness suite's
# churn group (500 programs of 1 s, about 11 minutes) was added, so about
# 30 minutes now; by default only the first.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# A fresh root each time unless one is named: a second run over the same
# root would find the packages the first one installed.
fresh=0
if [ $# -ge 1 ]; then C=$1; else C=$(mktemp -d /tmp/pagelock-chroot.XXXXXX); fresh=1; fi
cleanup() {
  umount "$C/usr/local/cuda" "$C/proc" "$C/dev/pts" "$C/dev" 2>/dev/null || true
  # Removed only once nothing is mounted inside it any more: the toolkit's
  # bind mount shares the host's file system, so --one-file-system alone
  # would not keep rm out of it.
  if [ "$fresh" = 1 ] && ! grep -q " ${C%/}/" /proc/mounts; then
    rm -rf --one-file-system "$C"
    rm -f "${C%/}.debootstrap.log"
  fi
}
trap cleanup EXIT
CUDA=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
[ "$(id -u)" = 0 ] || { echo "clean_chroot: needs root (chroot, mounts)"; exit 77; }
command -v debootstrap >/dev/null || { echo "clean_chroot: needs debootstrap"; exit 77; }
if [ ! -d "$C/usr" ] && ! debootstrap --variant=minbase bookworm "$C" >"${C%/}.debootstrap.log" 2>&1; then
  echo "clean_chroot: debootstrap could not build a Debian root (no mirror reachable?): $(tail -1 "${C%/}.debootstrap.log")"
  exit 77
fi
cp /etc/resolv.conf "$C/etc/resolv.conf"
rm -rf "$C/src" && mkdir -p "$C/src" "$C/usr/local/cuda"
# The committed tree where ROOT is a checkout's top, else its files as
# they are (a CI that copies the tree without .git).
if [ "$(git -C "$ROOT" rev-parse --show-toplevel 2>/dev/null)" = "$ROOT" ]; then
  git -C "$ROOT" archive HEAD | tar -x -C "$C/src"
else
  (cd "$ROOT" && tar --exclude='./build*' --exclude=./.git -cf - .) | tar -x -C "$C/src"
fi
mount --bind -o ro "$CUDA" "$C/usr/local/cuda"
mount -t proc proc "$C/proc"
mount --bind /dev "$C/dev"
mount --bind /dev/pts "$C/dev/pts"
for p in uthash-dev libcmocka-dev; do
  ! chroot "$C" dpkg -s "$p" >/dev/null 2>&1 || { echo "clean_chroot: $p is already in the chroot"; exit 1; }
done
first=$(sed -n '/^```sh$/,/^```$/p' "$ROOT/README.md" | sed -n 2p | sed 's/ *#.*//')
second=$(sed -n '/^```sh$/,/^```$/p' "$ROOT/README.md" | sed -n 3p | sed 's/ *#.*//')
chroot "$C" /bin/bash -c "cd /src && $first" >"$C/first.log" 2>&1 || { tail -30 "$C/first.log"; echo "clean_chroot: README's first command failed"; exit 1; }
grep -q "pagelock-demo: all bytes round-tripped" "$C/first.log" || { tail -30 "$C/first.log"; exit 1; }
echo "clean_chroot: first command ok: $(grep -m1 '^scripts/setup: installing' "$C/first.log" | cut -c1-120)"
if [ "${PL_CHROOT_TESTS:-0}" = 1 ]; then
  # The whole log goes to second.log; the suites' progress lines (a stage
  # starts, the fuzzer's seconds, a robustness group ends) come through.
  t0=$(date +%s)
  set -o pipefail
  chroot "$C" /bin/bash -c "cd /src && $second" 2>&1 | tee "$C/second.log" |
    grep --line-buffered -E '^(run-tests|fuzz|robust|scripts/setup):' ||
    { tail -30 "$C/second.log"; echo "clean_chroot: README's test command failed"; exit 1; }
  set +o pipefail
  t=$(($(date +%s) - t0))
  echo "clean_chroot: test command ok in $((t / 60)) min $((t % 60)) s"
fi
