#!/bin/sh
# tooling.sh BUILD_DIR CASE - pagelock as a tool: installed, packaged, its
# demo's choice of CUDA, doctor, --version, scripts/setup and README's
# commands.  Exit 77: this machine lacks what the case needs (said why).
set -u
B=$(cd "$1" && pwd)
CASE=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-tool.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
mkdir "$T/elsewhere"
cd "$T/elsewhere" || exit 1
unset PAGELOCK_OUTPUT PAGELOCK_MANIFEST PAGELOCK_MODE PAGELOCK_SHIM LD_PRELOAD \
  CUDA_INJECTION64_PATH PAGELOCK_CUPTI PAGELOCK_CUPTI_LIB PAGELOCK_REGISTER_BUDGET
export PAGELOCK_NO_ADDR2LINE=1

fail() { echo "FAIL [$CASE]: $*"; echo "--- stdout"; cat "$T/out" 2>/dev/null; echo "--- stderr"; cat "$T/err" 2>/dev/null; exit 1; }
skip() { echo "SKIP [$CASE]: $*"; exit 77; }
# run WANT cmd...: output in $T/out and $T/err
run() {
  want=$1; shift
  "$@" >"$T/out" 2>"$T/err"
  got=$?
  [ "$got" = "$want" ] || fail "$* exited $got, expected $want"
}
has_out() { grep -qF -- "$1" "$T/out" || fail "stdout lacks: $1"; }
has_err() { grep -qF -- "$1" "$T/err" || fail "stderr lacks: $1"; }
no_out() { ! grep -qF -- "$1" "$T/out" || fail "stdout has: $1"; }
# A GPU (a real libcuda.so.1) answers on this machine?
real_gpu() { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; }

# tool_checks ROOT: the installed tree under ROOT (bin/pagelock, ...) works
# from another directory: the demo and a traced run with the installed shim.
tool_checks() {
  R=$1
  [ -x "$R/bin/pagelock" ] || fail "no $R/bin/pagelock"
  [ -r "$R/lib/pagelock/libpagelock.so" ] || fail "no shim under $R/lib/pagelock"
  [ -x "$R/lib/pagelock/fakecuda/pagelock-demo" ] || fail "no fake CUDA demo"
  [ -r "$R/lib/pagelock/fakecuda/libcuda.so.1" ] || fail "no fake libcuda.so.1"
  [ -r "$R/share/doc/pagelock/README.md" ] || fail "no README in share/doc"
  [ -r "$R/share/doc/pagelock/docs/benchmarks.md" ] || fail "no docs in share/doc"
  [ -r "$R/share/doc/pagelock/docs/usage.md" ] || fail "no docs/usage.md in share/doc"
  [ -r "$R/share/doc/pagelock/docs/bench/2026-11-22-first-runs.md" ] || fail "no docs/bench/ in share/doc"
  run 0 "$R/bin/pagelock" --version
  has_out "pagelock "
  run 0 "$R/bin/pagelock" demo --quick -o "$T/elsewhere/d.%p.trace"
  has_out "pagelock-demo: all bytes round-tripped"
  has_out "pagelock: trace written to $T/elsewhere/d."
  if ! real_gpu; then
    has_out "pagelock: no GPU found: running the demo over fake CUDA; timings are simulated."
    has_out "$(cd "$R/lib/pagelock/fakecuda" && pwd -P)/pagelock-demo"
  fi
  # `pagelock run` with the installed shim over a (fake) CUDA program.
  run 0 env LD_LIBRARY_PATH="$R/lib/pagelock/fakecuda" "$R/bin/pagelock" run -o "$T/elsewhere/r.%p.trace" -- "$B/test_copies"
  has_err "pagelock: trace written to $T/elsewhere/r."
  has_err "pageable copies by call site"
}

case $CASE in
install)
  cmake --install "$B" --prefix "$T/p" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install failed"; }
  tool_checks "$T/p"
  # the man page and the completion come with every build
  zcat "$T/p/share/man/man1/pagelock.1.gz" | grep -q '^\.SH ENVIRONMENT$' || fail "no man page"
  [ -r "$T/p/share/bash-completion/completions/pagelock" ] || fail "no bash completion"
  bash -c '. "$1" && complete -p pagelock' sh "$T/p/share/bash-completion/completions/pagelock" >/dev/null 2>&1 ||
    fail "the installed completion does not register for pagelock"
  ;;
package)
  command -v dpkg-deb >/dev/null 2>&1 || skip "no dpkg-deb (Debian dpkg)"
  command -v dpkg-shlibdeps >/dev/null 2>&1 || skip "no dpkg-shlibdeps (Debian dpkg-dev)"
  (cd "$B" && cpack -G DEB -B "$T/pkg") >"$T/cpack.log" 2>&1 || { cat "$T/cpack.log"; fail "cpack failed"; }
  deb=$(ls "$T"/pkg/pagelock_*.deb) || fail "no .deb"
  dep=$(dpkg-deb -f "$deb" Depends)
  case $dep in libc6*) ;; *) fail "Depends not computed: '$dep'" ;; esac
  dpkg-deb -c "$deb" | grep -q ' ./usr/share/man/man1/pagelock.1.gz$' || fail "no pagelock(1) in the package"
  dpkg-deb -c "$deb" | grep -q ' ./usr/share/bash-completion/completions/pagelock$' || fail "no bash completion in the package"
  zcat "$T/pkg/_CPack_Packages/Linux/DEB/"*/usr/share/man/man1/pagelock.1.gz 2>/dev/null | grep -q 'PAGELOCK_MODE' ||
    dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/man/man1/pagelock.1.gz | zcat | grep -q 'PAGELOCK_MODE' ||
    fail "the man page lacks the environment"
  dpkg -x "$deb" "$T/root" || fail "dpkg -x failed"
  tool_checks "$T/root/usr"
  # lintian: every tag it gives must be explained in docs/packaging.md.
  if command -v lintian >/dev/null 2>&1; then
    lintian --no-tag-display-limit "$deb" 2>/dev/null | sed -n 's/^[EWI]: pagelock[^:]*: \([a-z0-9-]*\).*/\1/p' | sort -u >"$T/tags"
    while read -r tag; do
      grep -q -- "\`$tag\`" "$SRC/docs/packaging.md" || fail "lintian tag $tag is not explained in docs/packaging.md"
    done <"$T/tags"
  fi
  ;;
demo_choice)
  # Without a GPU the demo runs over fake CUDA and says so; when libcuda
  # answers (here the fake driver, first in LD_LIBRARY_PATH) the demo
  # built on the toolkit's runtime runs, which over the fake driver fails
  # in its first call: proof that the real one was chosen.
  real_gpu && skip "a real GPU driver is installed: tests/gpu/run.sh covers this"
  [ -x "$B/pagelock-demo" ] || skip "built without the toolkit's libcudart_static.a"
  run 0 "$B/pagelock" demo --quick -o "$T/elsewhere/s.%p.trace"
  has_out "pagelock: no GPU found: running the demo over fake CUDA; timings are simulated."
  run 1 env LD_LIBRARY_PATH="$B/fakecuda" "$B/pagelock" demo --quick -o "$T/elsewhere/g.%p.trace"
  no_out "timings are simulated"
  has_err "pagelock-demo: cudaSetDevice(0) failed"
  ;;
demo_output_env)
  run 0 env PAGELOCK_OUTPUT="$T/elsewhere/env.%p.trace" "$B/pagelock" demo --quick
  has_out "pagelock: trace written to $T/elsewhere/env."
  ls "$T"/elsewhere/env.*.trace >/dev/null 2>&1 || fail "no trace at PAGELOCK_OUTPUT"
  # -o still wins over it.
  run 0 env PAGELOCK_OUTPUT="$T/elsewhere/env2.%p.trace" "$B/pagelock" demo --quick -o "$T/elsewhere/o.%p.trace"
  has_out "pagelock: trace written to $T/elsewhere/o."
  ! ls "$T"/elsewhere/env2.*.trace >/dev/null 2>&1 || fail "-o did not win over PAGELOCK_OUTPUT"
  ;;
version)
  tv=$(sed -n 's/^#define PAGELOCK_TRACE_VERSION \([0-9]*\)u$/\1/p' "$SRC/include/pagelock/trace_format.h")
  pv=$(sed -n 's/^project(pagelock VERSION \([0-9.]*\) .*/\1/p' "$SRC/CMakeLists.txt")
  run 0 "$B/pagelock" --version
  [ "$(cat "$T/out")" = "pagelock $pv (trace format $tv)" ] || fail "--version: '$(cat "$T/out")', want 'pagelock $pv (trace format $tv)'"
  ;;
doctor)
  export LD_LIBRARY_PATH="$B/fakecuda"
  run 0 "$B/pagelock" doctor "$B/test_copies_static"
  has_out "GPU:       driver"
  has_out "           device 0: fakecuda device 0"
  has_out "CUPTI:     $B/fakecuda/libcupti.so.13 (API "
  has_out "injection: CUDA_INJECTION64_PATH not set"
  has_out "memlock:   RLIMIT_MEMLOCK"
  has_out "clock:     "
  has_out "           cudart: static"
  has_out "           libcuda: loaded at run time (dlopen libcuda.so.1)"
  has_out "doctor:    no problems"
  [ "$(wc -l <"$T/out")" -le 24 ] || fail "more than one screen"
  run 0 "$B/pagelock" doctor "$B/test_copies"
  has_out "           cudart: shared (libcudart.so.13)"
  run 0 "$B/pagelock" doctor "$B/test_driver_direct"
  has_out "           libcuda: linked (libcuda.so.1)"
  # Problems that do not block recording: exit 0, each with its fix.
  run 0 env CUDA_INJECTION64_PATH=/opt/nsys/libToolsInjection64.so "$B/pagelock" doctor
  has_out "  problem: another CUPTI client is configured"
  has_out "  fix: unset CUDA_INJECTION64_PATH"
  run 0 env FAKECUPTI_VERSION=120090 "$B/pagelock" doctor
  has_out "  problem: pagelock reads CUDA 13 CUPTI records; this one is CUDA 12"
  has_out "doctor:    1 problem, 0 of them blocking recording"
  # Problems that block recording: exit 1.
  cp "$B/test_copies" "$T/suid" && chmod u+s "$T/suid"
  run 1 "$B/pagelock" doctor "$T/suid"
  has_out "  problem: it is setuid or setgid: the loader ignores LD_PRELOAD"
  run 1 "$B/pagelock" doctor "$T/no-such-program"
  has_out "  problem: no such program"
  if printf 'int main(void){return 0;}\n' | cc -x c -static -o "$T/static" - 2>/dev/null; then
    run 1 "$B/pagelock" doctor "$T/static"
    has_out "  problem: it is statically linked"
  fi
  printf '#!/bin/sh\nexit 0\n' >"$T/script" && chmod +x "$T/script"
  run 0 "$B/pagelock" doctor "$T/script"
  has_out "a script (/bin/sh)"
  run 1 env PAGELOCK_SHIM="$T/none.so" "$B/pagelock" doctor
  has_out "shim:      $T/none.so (missing)"
  if ! real_gpu; then
    unset LD_LIBRARY_PATH
    run 1 "$B/pagelock" doctor
    has_out "GPU:       none: libcuda.so.1 not found"
    has_out "  fix: install the NVIDIA driver"
  fi
  run 2 "$B/pagelock" doctor a b
  has_err "pagelock: doctor: unexpected argument 'b'"
  ;;
setup)
  # scripts/setup over a fake dpkg-query, apt-get, id and sudo: what it
  # would install, and how.
  mkdir "$T/bin"
  cat >"$T/bin/dpkg-query" <<'EOF'
#!/bin/sh
# installed: everything but the names in $FAKE_MISSING
p=$(eval echo "\${$#}")
case " $FAKE_MISSING " in *" $p "*) echo "dpkg-query: no packages found matching $p" >&2; exit 1 ;; esac
printf 'install ok installed'
EOF
  printf '#!/bin/sh\necho "apt-get $*" >>"$FAKE_LOG"\n' >"$T/bin/apt-get"
  printf '#!/bin/sh\necho "sudo:" >>"$FAKE_LOG"\nexec "$@"\n' >"$T/bin/sudo"
  printf '#!/bin/sh\necho "$FAKE_UID"\n' >"$T/bin/id"
  chmod +x "$T/bin/"*
  mkdir -p "$T/cuda/include" && : >"$T/cuda/include/cuda.h"
  export FAKE_LOG="$T/apt.log" PATH="$T/bin:$PATH" CUDA_HOME="$T/cuda"
  # A copy of the script away from the checkout: a uthash.h carried in the
  # checkout's .deps/include would count as installed.
  mkdir -p "$T/tree/scripts" && cp "$SRC/scripts/setup" "$T/tree/scripts/setup"
  SRC_SETUP=$T/tree/scripts/setup
  run 0 env FAKE_MISSING="uthash-dev libcmocka-dev" FAKE_UID=1000 "$SRC_SETUP"
  [ "$(cat "$T/out")" = "scripts/setup: installing uthash-dev (with sudo)" ] || fail "says: $(cat "$T/out")"
  [ "$(cat "$FAKE_LOG")" = "sudo:
apt-get update -qq
sudo:
apt-get install -y -qq --no-install-recommends uthash-dev" ] || fail "apt-get calls: $(cat "$FAKE_LOG")"
  rm -f "$FAKE_LOG"
  # cmake on PATH without its Debian package (a pip or tarball install, as
  # on GPU images with no mirror to reach): not installed again.
  printf '#!/bin/sh\nexit 0\n' >"$T/bin/cmake" && chmod +x "$T/bin/cmake"
  run 0 env FAKE_MISSING="cmake uthash-dev" FAKE_UID=0 "$SRC_SETUP"
  [ "$(cat "$T/out")" = "scripts/setup: installing uthash-dev" ] || fail "cmake on PATH: $(cat "$T/out")"
  rm -f "$FAKE_LOG" "$T/bin/cmake"
  run 0 env FAKE_MISSING="uthash-dev libcmocka-dev" FAKE_UID=0 "$SRC_SETUP" --tests
  has_out "scripts/setup: installing uthash-dev libcmocka-dev"
  no_out "sudo"
  grep -qx "apt-get install -y -qq --no-install-recommends uthash-dev libcmocka-dev" "$FAKE_LOG" || fail "apt-get calls: $(cat "$FAKE_LOG")"
  ! grep -q sudo "$FAKE_LOG" || fail "sudo used as root"
  rm -f "$FAKE_LOG"
  run 0 env FAKE_MISSING="" FAKE_UID=1000 "$SRC_SETUP" --tests
  [ ! -s "$T/out" ] && [ ! -e "$FAKE_LOG" ] || fail "installed something when nothing was missing"
  # No toolkit: one line naming where it looked, nothing installed.
  run 1 env FAKE_MISSING="uthash-dev" FAKE_UID=0 CUDA_HOME="$T/nowhere" PL_SETUP_CUDA_DEFAULT="$T/nocuda" "$SRC_SETUP"
  [ "$(wc -l <"$T/err")" = 1 ] || fail "not one line"
  has_err "scripts/setup: no CUDA toolkit (no include/cuda.h in CUDA_HOME=$T/nowhere or $T/nocuda): install NVIDIA's CUDA toolkit"
  [ ! -e "$FAKE_LOG" ] || fail "installed packages without a toolkit"
  run 2 "$SRC_SETUP" --frob
  has_err "scripts/setup: unknown option '--frob' (valid: --tests)"
  # CMake says the same without scripts/setup.
  run 1 cmake -S "$SRC" -B "$T/b" -DCUDA_HOME="$T/nowhere"
  # (CMake wraps its messages: compare with the lines joined)
  tr -s ' \n' '  ' <"$T/err" | grep -qF "CUDA toolkit not found (no cuda.h and cupti.h under CUDA_HOME=$T/nowhere)" ||
    fail "CMake did not name the missing toolkit"
  ;;
readme)
  # README's two commands: the first sets up, builds and runs the demo;
  # the second is exactly what .ci/run runs.
  first=$(sed -n '/^```sh$/,/^```$/p' "$SRC/README.md" | sed -n 2p | sed 's/ *#.*//')
  second=$(sed -n '/^```sh$/,/^```$/p' "$SRC/README.md" | sed -n 3p | sed 's/ *#.*//')
  [ "$first" = "scripts/setup && cmake -S . -B build && cmake --build build -j && ./build/pagelock demo" ] ||
    fail "README's first command is '$first'"
  ci=$(grep -v '^#' "$SRC/.ci/run" | grep -v '^set -eu$' | grep -v '^cd ' | sed '/^$/d' | head -1)
  [ "$second" = "$ci" ] || fail "README's test command '$second' is not .ci/run's '$ci'"
  # The first command's configure warns about nothing the user did not ask
  # for: without cmocka (hidden here) the unit tests are a status line.
  cmake -S "$SRC" -B "$T/plain" -DPAGELOCK_CMOCKA_INCLUDE=/nonexistent/cmocka \
    -DPAGELOCK_CMOCKA=PAGELOCK_CMOCKA-NOTFOUND >"$T/out" 2>"$T/err" || fail "cmake failed"
  has_out "cmocka not found (libcmocka-dev): unit tests are not built"
  ! grep -q "Warning" "$T/err" || fail "the plain configure warns: $(cat "$T/err")"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS [$CASE]"
