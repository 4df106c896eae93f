# shellcheck shell=bash
# Preload cases: the trace's file: descriptors closed or taken over, the
# manifest a FIFO, a long output, a full disk, the program's own stderr,
# special files as the output.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# ---- the trace's file --------------------------------------------------------

# A program that closes or takes over every descriptor (a daemon, a server)
# and then writes a file of its own: that file holds the program's 40 bytes
# and nothing of the trace, and the trace holds every copy, before the
# closing and after.  fd_case MODE TRACES: test_fd_close MODE, which leaves
# TRACES traces (fork_exec: the parent's and the exec'd child's).
fd_case() {
  local d="$T/fd_$1" n=20 f data; mkdir -p "$d"
  # over a real driver, the program keeps the driver's own descriptors
  # (fd_close.c, first_fd)
  env $([ $SIM = 0 ] && echo FD_CLOSE_KEEP_DRIVER=1) LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.%p.trace" \
    timeout 60 "$B/test_fd_close" "$1" "$d/data" $n >"$d/out" 2>"$d/err" ||
    fail "test_fd_close $1 failed: $(cat "$d/err")" || return
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  for data in "$d"/data*; do
    printf '%s' "the program's own 40 bytes, nothing else" | cmp -s - "$data" ||
      fail "$data holds $(stat -c %s "$data") bytes, not the program's 40" || return
  done
  [ "$(ls "$d"/t.*.trace | wc -l)" = "$2" ] || fail "expected $2 trace(s), got: $(ls "$d")" || return
  for f in "$d"/t.*.trace; do
    "$B/trace_check" "$f" --copies $((2 * n)) --complete >&2 || return
  done
}
case_fd_close_range() { fd_case close_range 1; }
case_fd_closefrom() { fd_case closefrom 1; }
case_fd_close_loop() { fd_case loop 1; }
case_fd_dup2() { fd_case dup2 1; }
# The close_range and dup3 system calls themselves: no wrapper sees them,
# the writer's check before each block does.
case_fd_raw_syscall() { fd_case raw 1; }
# The child of a fork closes every descriptor and execs: the parent's trace
# goes on, the exec'd program traces into a file of its own.
case_fd_fork_exec() {
  fd_case fork_exec 2 || return
  [ -f "$T/fd_fork_exec/data.child" ] || fail "the exec'd child wrote no data file"
}

# PAGELOCK_MANIFEST naming a FIFO that nobody reads: the program runs on
# (opening it for writing used to wait for a reader forever), one line
# says why the trace is not listed, and the trace is written.
case_manifest_fifo() {
  local d="$T/mf"; mkdir -p "$d"; mkfifo "$d/fifo"
  LD_PRELOAD="$SHIM" PAGELOCK_MANIFEST="$d/fifo" PAGELOCK_OUTPUT="$d/t.trace" timeout 20 "$B/test_copies" >/dev/null 2>"$d/err" ||
    fail "the program failed or hung (status $?): $(cat "$d/err")" || return
  [ "$(cat "$d/err")" = "pagelock: the manifest is a FIFO, not a regular file (as \`pagelock run\` makes); this trace is not listed: PAGELOCK_MANIFEST='$d/fifo'" ] ||
    fail "expected one line naming the FIFO, got: $(cat "$d/err")" || return
  "$B/trace_check" "$d/t.trace" --complete >/dev/null
}

# A 5,000-character PAGELOCK_OUTPUT: one line, the reason first, the whole
# value after it (lines used to be cut at 512 bytes, before the reason).
case_long_output() {
  local d="$T/lo"; mkdir -p "$d"
  local v; v="$d/$(head -c 5000 /dev/zero | tr '\0' x).%p.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$v" "$B/test_copies" >/dev/null 2>"$d/err" || fail "the program failed: $(head -c 300 "$d/err")" || return
  [ "$(cat "$d/err")" = "pagelock: PAGELOCK_OUTPUT is too long (valid: a path of at most 4079 bytes once %p, %h and %r are expanded); no trace written: PAGELOCK_OUTPUT='$v'" ] ||
    fail "expected one whole line, reason first; got $(wc -c <"$d/err") bytes: $(head -c 300 "$d/err")"
}

# The disk fills up mid-trace: the program runs on, one line says so, the
# trace ends at its last whole record and its header says the disk filled
# up.  A 64 KiB tmpfs in a user and mount namespace of its own where the
# machine allows one (ENOSPC), else (or with PL_TEST_NO_UNSHARE=1) a
# 64 KiB RLIMIT_FSIZE (EFBIG), with SIGXFSZ ignored in case the shim let
# the kernel raise it.  The case says which it used.
case_disk_full() {
  local d="$T/df" how line; mkdir -p "$d/fs"
  # Each copy its own record, so that 6000 copies fill the 64 KiB.
  local run="LD_PRELOAD='$SHIM' PAGELOCK_REPEATS=each PAGELOCK_OUTPUT='$d/fs/t.trace' '$B/test_fd_close' child '$d/data' 3000 >'$d/out' 2>'$d/err'"
  if [ -z "${PL_TEST_NO_UNSHARE:-}" ] && unshare -rm sh -c "mount -t tmpfs -o size=64k tmpfs '$d/fs'" 2>/dev/null; then
    how="a 64 KiB tmpfs"; line="the disk is full (No space left on device)"
    unshare -rm bash -c "mount -t tmpfs -o size=64k tmpfs '$d/fs' && { $run; echo \$? >'$d/st'; cp '$d/fs/t.trace' '$d/t.trace'; }"
  else
    how="RLIMIT_FSIZE of 64 KiB"; line="the file size limit (RLIMIT_FSIZE) is reached (File too large)"
    bash -c "trap '' XFSZ; ulimit -f 64; $run; echo \$? >'$d/st'"
    cp "$d/fs/t.trace" "$d/t.trace"
  fi
  echo "    (the disk: $how)" >&2
  [ "$(cat "$d/st" 2>/dev/null)" = 0 ] && grep -qx "copies=6000" "$d/out" || fail "the program did not run on: $(cat "$d/err")" || return
  [ "$(grep -c . "$d/err")" = 1 ] && grep -q "^pagelock: $line: the trace stops at its last whole record, byte [0-9]*: '$d/fs/t.trace'$" "$d/err" ||
    fail "expected one line saying '$line', got: $(cat "$d/err")" || return
  python3 - "$d/t.trace" <<'PY' >&2 || fail "the trace does not end at a whole record with the disk-full flag"
import struct, sys
b = open(sys.argv[1], "rb").read()
flags = struct.unpack_from("<I", b, 40)[0]
off, copies = 64, 0
while off + 8 <= len(b):
    t, s = struct.unpack_from("<II", b, off)
    if s < 8 or s % 8 or off + s > len(b):
        break
    off, copies = off + s, copies + (t == 2)
print(f"    {len(b)} bytes, records end at {off}, {copies} copies, flags {flags:#x}")
sys.exit(0 if off == len(b) and flags & 2 and 0 < copies < 6000 else 1)
PY
  # The report blames the disk, not the program.
  "$B/pagelock" report "$d/t.trace" >"$d/report" 2>"$d/report.err" || fail "report of the full-disk trace failed" || return
  grep -q "the disk filled up" "$d/report.err" "$d/report" || fail "the report does not say the disk filled up: $(cat "$d/report.err")" || return
  ! grep -q "may have died" "$d/report.err" "$d/report" || fail "the report blames the program: $(cat "$d/report.err")"
}

# ---- the program's own stderr (issue 39 item 5) ----
# A program that closes descriptor 2 (or dup2s over it, or started with it
# closed) and opens its own file there, then copies while registration and
# the staging pool fail: no pagelock line lands in its file, and the
# trace's note (the report's "warning:" line) says the log was withheld.  The
# same program keeping its stderr shows the warnings were made, and that
# they agree with each other.
case_stderr_takeover() {
  [ "$SIM" = 1 ] || { echo "    (fault injection needs the fake driver: skipped)" >&2; return 0; }
  local d="$T/sto" how f rc
  mkdir -p "$d"
  export FAKECUDA_FAIL=cuMemHostRegister_v2:0:2
  PAGELOCK_MODE=register LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/keep.trace" \
    "$B/test_stderr_takeover" keep "$d/keep.file" >"$d/keep.out" 2>"$d/keep.err" || { unset FAKECUDA_FAIL; fail "keep: exit $?: $(cat "$d/keep.out" "$d/keep.err")"; return; }
  # (an allocator preloaded before the shim serves malloc: the shim sees
  # no buffer of the program to page-lock, only its staging pool fails)
  { [ -n "${PL_TEST_PRELOAD_FIRST:-}" ] || grep -q '^pagelock: could not page-lock' "$d/keep.err"; } &&
    grep -q '^pagelock: cuMemHostRegister failed' "$d/keep.err" ||
    { unset FAKECUDA_FAIL; fail "keep: the warnings this case relies on were not made: $(cat "$d/keep.err")"; return; }
  # one run's log agrees with itself: no copy is said to be staged where
  # another line says staging is off and copies pass through
  ! grep -q 'staged instead;' "$d/keep.err" ||
    { unset FAKECUDA_FAIL; fail "keep: the log contradicts itself: $(cat "$d/keep.err")"; return; }
  printf "the program's own first line\nthe program's last line\n" >"$d/want"
  for how in close dup2 closed; do
    f="$d/$how.file"
    if [ $how = closed ]; then
      PAGELOCK_MODE=register LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$how.trace" \
        "$B/test_stderr_takeover" $how "$f" >"$d/$how.out" 2>&-
    else
      PAGELOCK_MODE=register LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$how.trace" \
        "$B/test_stderr_takeover" $how "$f" >"$d/$how.out" 2>"$d/$how.err"
    fi
    rc=$?
    [ $rc = 0 ] || { unset FAKECUDA_FAIL; fail "$how: exit $rc: $(cat "$d/$how.out")"; return; }
    echo "    $how: $(cat "$d/$how.out")" >&2
    cmp -s "$f" "$d/want" || { unset FAKECUDA_FAIL; fail "$how: the program's file holds more than its own lines: $(cat "$f")"; return; }
    [ $how = closed ] || [ ! -s "$d/$how.err" ] || { unset FAKECUDA_FAIL; fail "$how: the old stderr got: $(cat "$d/$how.err")"; return; }
    "$B/pagelock" report "$d/$how.trace" >"$d/$how.report" 2>&1 || { unset FAKECUDA_FAIL; fail "$how: report failed: $(tail -3 "$d/$how.report")"; return; }
    grep -q "^warning: .*pagelock logged nothing.*the first withheld: " "$d/$how.report" ||
      { unset FAKECUDA_FAIL; fail "$how: the report does not say the log was withheld: $(grep -i note "$d/$how.report")"; return; }
  done
  # under `pagelock run`, whose report goes to pagelock's own stderr
  "$B/pagelock" run --mode=register -o "$d/run.%p.trace" -- "$B/test_stderr_takeover" close "$d/run.file" \
    >"$d/run.out" 2>"$d/run.err"
  rc=$?
  unset FAKECUDA_FAIL
  [ $rc = 0 ] || fail "run: exit $rc: $(tail -3 "$d/run.err")" || return
  cmp -s "$d/run.file" "$d/want" || fail "run: the program's file: $(cat "$d/run.file")" || return
  grep -q "^warning: the program put another file at descriptor 2" "$d/run.err" ||
    fail "run: the report does not say the log was withheld: $(grep -i note "$d/run.err")"
}

# ---- special files as the output (issue 39 item 6) ----
# A character device means "discard": nothing written, no file made; a
# FIFO or the program's own stdout is refused in one line; never a
# suffixed file beside any of them.  `pagelock run -o /dev/null` still
# reports, from a private directory it deletes.
case_output_special() {
  local d="$T/osp" o dev0 dev1 n
  mkdir -p "$d/tmp"
  dev0=$(ls -A /dev | sort)
  for o in /dev/null /dev/full; do
    LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT=$o "$B/test_copies" >"$d/out" 2>"$d/err" ||
      fail "$o: the program failed: $(cat "$d/err")" || return
    [ ! -s "$d/err" ] || fail "$o: the shim said: $(cat "$d/err")" || return
    grep -q '^pageable=' "$d/out" || fail "$o: the program's output is lost" || return
  done
  # a link to a device where a trace would go: no file beside it either
  ln -s /dev/null "$d/link.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/link.trace" "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "link: the program failed" || return
  n=$(ls -A "$d" | grep -vx -e tmp -e out -e err -e link.trace | tr '\n' ' ')
  [ -z "$n" ] || fail "link to /dev/null: files made beside it: $n" || return
  # the program's stdout, a regular file: refused, the file holds only the program's lines
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT=/dev/stdout "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "/dev/stdout: the program failed" || return
  [ "$(grep -c . "$d/err")" = 1 ] && grep -q "^pagelock: cannot write the trace to '/dev/stdout': it is a link to one of the program's own descriptors" "$d/err" ||
    fail "/dev/stdout: expected one line, got: $(cat "$d/err")" || return
  [ "$(grep -vc '^pageable=' "$d/out")" = 0 ] || fail "/dev/stdout: the program's stdout holds more than its own line" || return
  # a FIFO: refused, never opened (a timeout catches a hang)
  mkfifo "$d/f.trace"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/f.trace" timeout 60 "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "FIFO: the program failed or hung" || return
  grep -q "^pagelock: cannot write the trace to '$d/f.trace': it is a FIFO" "$d/err" || fail "FIFO: $(cat "$d/err")" || return
  [ "$(ls "$d" | grep -c '^f\.')" = 1 ] || fail "FIFO: a file beside it: $(ls "$d")" || return
  # pagelock run: -o and PAGELOCK_OUTPUT naming /dev/null report, keep nothing
  for o in -o PAGELOCK_OUTPUT; do
    if [ $o = -o ]; then
      TMPDIR="$d/tmp" "$B/pagelock" run -o /dev/null -- "$B/test_copies" >"$d/out" 2>"$d/err"
    else
      TMPDIR="$d/tmp" PAGELOCK_OUTPUT=/dev/null "$B/pagelock" run -- "$B/test_copies" >"$d/out" 2>"$d/err"
    fi
    [ $? = 0 ] || fail "run $o /dev/null: exit status $?: $(tail -3 "$d/err")" || return
    awk '$2 == "pageable" && ($1 == "H2D" || $1 == "D2H") { n++ } END { exit n == 0 }' "$d/err" ||
      fail "run $o /dev/null: no report: $(cat "$d/err")" || return
    grep -qx "pagelock: '/dev/null' is a character device, which keeps nothing: the 1 trace above was deleted after the report" "$d/err" ||
      fail "run $o /dev/null: $(tail -2 "$d/err")" || return
    [ -z "$(ls -A "$d/tmp" | grep -v '^pagelock-manifest')" ] || fail "run $o /dev/null left: $(ls -A "$d/tmp")" || return
  done
  "$B/pagelock" run -o /dev/stdout -- sh -c 'echo ran >"$0"' "$d/ran" >"$d/out" 2>"$d/err"
  [ $? = 2 ] || fail "run -o /dev/stdout into a file: not refused" || return
  [ ! -e "$d/ran" ] || fail "run -o /dev/stdout: the program ran" || return
  grep -qx "pagelock: cannot write traces to -o '/dev/stdout': it is one of the program's own descriptors, and a trace is a regular file of its own (give a file name or a directory, or /dev/null to keep none)" "$d/err" ||
    fail "run -o /dev/stdout: $(cat "$d/err")" || return
  "$B/pagelock" run -o "$d/f.trace" -- true >"$d/out" 2>"$d/err"
  [ $? = 2 ] && grep -q "it is a FIFO" "$d/err" || fail "run -o FIFO: $(cat "$d/err")" || return
  dev1=$(ls -A /dev | sort)
  n=$(comm -13 <(echo "$dev0") <(echo "$dev1") | grep -E '^(null|full|stdout|stderr)[.]' | tr '\n' ' ')
  [ -z "$n" ] || fail "files made in /dev: $n"
}
