#!/usr/bin/env bash
# tests/robust/run.sh BUILD [TSAN_BUILD] - the robustness suite.
#
# Everything a hostile review throws at pagelock, in one run, ending in one
# table: the program under the shim with another allocator preloaded (both
# orders), programs that close or take over every descriptor (stderr
# included), FIFOs, devices and other special files where a trace or
# manifest is expected, the signal mask of every thread the shim starts and
# a program's signal handler beside them, a disk that fills up, a SIGKILL
# mid-run, registered memory released from host functions and signal
# handlers, the allocation churn 500 times over, and a long staged stress
# under ThreadSanitizer.  Each group says
# how many cases it tried and passed; the groups that lose the end of a
# trace say how many records were kept against the copies the program
# made; the groups whose programs compare the bytes their copies delivered
# say how many bytes were compared.  A line per group as it starts and
# ends (with the seconds it took) says where the run is: the allocator
# matrix alone takes minutes on 2 cores.
#
# The groups reuse the cases of tests/preload/run.sh and tests/cli/run.sh,
# which ctest also runs one by one: here they run together, as a user's
# bad day would.  TSAN_BUILD is a tree configured with -DPAGELOCK_TSAN=ON
# (tests/run-tests makes one); without it the stress group is skipped.
# PL_ROBUST_STRESS_SECONDS sets the stress's length (default 60),
# PL_ROBUST_CHURN_RUNS and PL_ROBUST_CHURN_SECONDS the churn's (500 runs of
# 1 s).
# Exit status: 0 when every case passed, 1 otherwise.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd)
TB=${2:+$(cd "$2" && pwd)}
STRESS_SECONDS=${PL_ROBUST_STRESS_SECONDS:-60}
CHURN_RUNS=${PL_ROBUST_CHURN_RUNS:-500}
CHURN_SECONDS=${PL_ROBUST_CHURN_SECONDS:-1}
unset PL_ROBUST_STRESS_SECONDS PL_ROBUST_CHURN_RUNS PL_ROBUST_CHURN_SECONDS
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-robust.XXXXXX")
trap 'rm -rf "$T"' EXIT
export LD_LIBRARY_PATH="$B/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

declare -a rows
failed=0
SUITE_START=$(date +%s)
GROUP_START=$SUITE_START
# Progress, on the suite's stdout (3, whatever a group's command writes
# to) before the table: "robust: [ELAPSED s] ...".
exec 3>&1
say() { printf 'robust: [%4d s] %s\n' "$(($(date +%s) - SUITE_START))" "$*" >&3; }
# begin GROUP: a group starts.
begin() {
  GROUP_START=$(date +%s)
  say "$1: started"
}
# row GROUP TRIED PASSED KEPT/MADE BYTES NOTE: the group's line of the
# table, and its end on the progress lines.  BYTES: bytes the group's
# programs compared ("-": none).
row() {
  rows+=("$(printf '%-22s %6s %6s %15s %14s  %s' "$1" "$2" "$3" "$4" "$5" "$6")")
  [ "$2" = "$3" ] || failed=1
  say "$1: $3 of $2 passed$([ "$5" = - ] || echo ", $5 bytes checked") ($(($(date +%s) - GROUP_START)) s)"
}
# ticking CMD...: runs CMD (in the foreground: ^C stops it), saying every
# 60 s that it still runs; its status.  The ticker goes with the suite.
ticking() {
  (
    n=0
    while kill -0 $$ 2>/dev/null; do
      sleep 1
      n=$((n + 1))
      [ $((n % 60)) = 0 ] && say "  ... still running (${n} s)"
    done
  ) &
  local ticker=$!
  "$@"
  local st=$?
  kill "$ticker" 2>/dev/null
  wait "$ticker" 2>/dev/null
  return $st
}

# ---- bytes checked -----------------------------------------------------------
# A program that compares what its copies delivered prints
# "bytes_checked=N" (once or more: they add up), and the case that runs it
# passes that line on to its log (the preload cases echo their programs'
# lines to stderr).  bytes_checked FILE... sums them ("-" when none).
bytes_checked() {
  cat "$@" 2>/dev/null | grep -o 'bytes_checked=[0-9]*' |
    awk -F= '{ n += $2 } END { if (n) printf "%.0f", n; else print "-" }'
}

# cases RUNNER GROUP NOTE CASE...: run each case of a runner script, count,
# and sum the bytes its programs checked.
cases() {
  local runner=$1 group=$2 note=$3; shift 3
  local tried=0 passed=0 c logs=()
  begin "$group"
  for c in "$@"; do
    tried=$((tried + 1))
    logs+=("$T/$group.$c.log")
    if timeout 300 "$runner" "$B" "$c" >"$T/$group.$c.log" 2>&1; then
      passed=$((passed + 1))
    else
      echo "robust: $group: case $c failed:" >&2
      tail -20 "$T/$group.$c.log" >&2
    fi
  done
  row "$group" "$tried" "$passed" "-" "$(bytes_checked "${logs[@]}")" "$note"
}

# copies N in TRACE: COPY records the reader found (the report's totals).
copies_in() {
  "$B/pagelock" report --format json "$1" 2>/dev/null |
    python3 -c 'import json, sys; print(sum(p["totals"]["copies"] for p in json.load(sys.stdin)["processes"]))' 2>/dev/null ||
    echo 0
}

# ---- the churn at scale --------------------------------------------------------
# tests/preload/autopin.c churn: 8 threads allocating, releasing every
# way, handing buffers over, with uploads whose source is overwritten on
# return and downloads read on return, PL_ROBUST_CHURN_RUNS times (default
# 500), each its own process of PL_ROBUST_CHURN_SECONDS (1), in register
# and auto by turns, buffers up to 6 MiB so that registered uploads have
# staged tails, a small pool and a short wait so that tails find it full,
# the fake's DMA slowed so that a read after the call's return shows (the
# shim of issue 39.1, whose tails could return unread, failed 3 of 30); the
# guard after the shim (every fourth run the one that leaves free to glibc,
# so that mappings are registered too).  A run is clean when it exits 0:
# no wrong byte, no stale registration (86), no hang (the watchdog, 3).
churn_case() {
  local runs=$CHURN_RUNS clean=0 i mode guard st wrong=0 stale=0 hung=0 logs=() d="$T/churn"
  begin "churn at scale"
  mkdir -p "$d"
  for i in $(seq 1 "$runs"); do
    mode=$([ $((i % 2)) = 0 ] && echo register || echo auto)
    guard=$([ $((i % 4)) = 0 ] && echo libpl_reg_guard_map.so || echo libpl_reg_guard.so)
    FAKECUDA_PINNED_GBPS=4 PAGELOCK_MODE=$mode PAGELOCK_OUTPUT=/dev/null PAGELOCK_TRACK_MIN=16K \
      PAGELOCK_REGISTER_HOT=50 PAGELOCK_POOL_SIZE=8M PAGELOCK_WAIT_US=20 PAGELOCK_LOG=error \
      LD_PRELOAD="$B/libpagelock.so:$B/testlib/$guard" \
      timeout -k 5 120 "$B/test_autopin_prog" churn "$CHURN_SECONDS" 8 6M >"$d/$i.out" 2>"$d/$i.err"
    st=$?
    case $st in
      0) clean=$((clean + 1)); rm -f "$d/$i.err" ;;
      86) stale=$((stale + 1)) ;;
      3|124|137) hung=$((hung + 1)) ;;
      *) wrong=$((wrong + 1)) ;;
    esac
    if [ "$st" != 0 ]; then
      echo "robust: churn run $i ($mode, $guard) exited $st:" >&2
      tail -5 "$d/$i.err" >&2
    fi
    logs+=("$d/$i.out")
    [ $((i % 50)) = 0 ] && say "  churn: $i of $runs runs, $clean clean"
  done
  row "churn at scale" "$runs" "$clean" "-" "$(bytes_checked "${logs[@]}")" \
    "8 threads x ${CHURN_SECONDS} s, register/auto; not clean: $wrong wrong bytes, $stale stale, $hung hung"
}

# ---- SIGKILL mid-run ---------------------------------------------------------
# The program copies steadily and keeps its own count in a shared file; it
# is killed with SIGKILL after 2 s.  The trace must read as a partial trace
# (exit 0, "the program may have died"), hold no more copies than were made
# (one more at most: the copy in flight when the signal came), and lose at
# most what was not yet written: about a second of records.
sigkill_case() {
  local d="$T/kill" tried=0 passed=0
  begin "SIGKILL mid-run"
  mkdir -p "$d"
  tried=1
  "$B/pagelock" run -o "$d/k.%p.trace" -- "$B/test_steady" "$d/count" >"$d/out" 2>"$d/err" &
  local run=$! pid="" i
  for i in $(seq 100); do
    pid=$(python3 -c 'import struct, sys; print(struct.unpack("<QQ", open(sys.argv[1], "rb").read(16))[1])' "$d/count" 2>/dev/null)
    [ -n "$pid" ] && [ "$pid" != 0 ] && break
    sleep 0.1
  done
  sleep 2
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  wait "$run"
  local st=$?
  local made kept
  made=$(python3 -c 'import struct, sys; print(struct.unpack("<QQ", open(sys.argv[1], "rb").read(16))[0])' "$d/count" 2>/dev/null || echo 0)
  local f
  f=$(ls "$d"/k.*.trace 2>/dev/null | head -1)
  kept=$([ -n "$f" ] && copies_in "$f" || echo 0)
  if [ "$st" = 137 ] && [ -n "$f" ] && [ "$kept" -gt 0 ] && [ "$kept" -le $((made + 1)) ] &&
     grep -q "may have died" "$d/err"; then
    passed=1
  else
    echo "robust: sigkill: run exited $st (want 137), trace '$f', kept $kept of $made made" >&2
    tail -5 "$d/err" >&2
  fi
  row "SIGKILL mid-run" "$tried" "$passed" "$kept/$made" - "partial trace reads; lost only the unwritten tail"
}

# ---- staged stress under ThreadSanitizer --------------------------------------
stress_case() {
  begin "staged stress (TSan)"
  if [ -z "$TB" ] || [ ! -x "$TB/test_stage_concurrent_tsan" ]; then
    rows+=("$(printf '%-22s %6s %6s %15s %14s  %s' "staged stress (TSan)" 0 0 "-" "-" "skipped: no TSan build given")")
    say "staged stress (TSan): skipped, no TSan build given"
    return
  fi
  local log="$T/stress.log"
  if TSAN_OPTIONS="halt_on_error=1 suppressions=$ROOT/tests/unit/tsan.supp" \
     LD_LIBRARY_PATH="$TB/fakecuda" ticking timeout $((STRESS_SECONDS + 240)) \
     "$TB/test_stage_concurrent_tsan" --stress "$STRESS_SECONDS" >"$log" 2>&1; then
    row "staged stress (TSan)" 1 1 "-" "$(bytes_checked "$log")" "$(grep -o '^stress: [0-9]* copies, [0-9]* failed' "$log"), ${STRESS_SECONDS} s"
  else
    echo "robust: staged stress failed:" >&2
    tail -30 "$log" >&2
    row "staged stress (TSan)" 1 0 "-" "$(bytes_checked "$log")" "$(grep -o '^stress: .*' "$log" || echo 'no summary: see the log above')"
  fi
}

# ---- a full disk ----------------------------------------------------------------
# The preload case fills a 64 KiB tmpfs (or a 64 KiB RLIMIT_FSIZE where no
# mount namespace can be had) while the program makes 6000 copies; the CLI
# case is the same disk named with -o.  kept/made: COPY records left in the
# trace, which stops at its last whole record, against copies made.
disk_case() {
  local tried=2 passed=0 kept="-"
  begin "disk full"
  if timeout 120 "$ROOT/tests/preload/run.sh" "$B" disk_full >"$T/disk.log" 2>&1; then
    passed=$((passed + 1))
  else
    echo "robust: disk_full failed:" >&2; tail -20 "$T/disk.log" >&2
  fi
  kept=$(sed -n 's/.*records end at [0-9]*, \([0-9]*\) copies.*/\1/p' "$T/disk.log" | head -1)
  local rc
  timeout 120 "$ROOT/tests/cli/run.sh" "$B" output_full >"$T/disk_cli.log" 2>&1
  rc=$?
  if [ $rc = 0 ] || [ $rc = 77 ]; then passed=$((passed + 1)); else
    echo "robust: cli output_full failed:" >&2; tail -20 "$T/disk_cli.log" >&2
  fi
  row "disk full" "$tried" "$passed" "${kept:-?}/6000" - "$(sed -n 's/.*(the disk: \(.*\))/\1/p' "$T/disk.log" | head -1); the header says why the trace stops"
}

# ---- another allocator preloaded -------------------------------------------------
# tests/preload/alloc_matrix.sh: the whole preload suite under jemalloc,
# tcmalloc and mimalloc, each before and after the shim, and 200 threads
# allocating at once; kept/made: allocations the registry tracked against
# those the 200-thread program made and still held.
alloc_case() {
  local log="$T/alloc.log"
  begin "allocators"
  ticking timeout 1200 "$ROOT/tests/preload/alloc_matrix.sh" "$B" >"$log" 2>&1
  local st=$?
  # rows: soname order cases passed failed skipped threads...
  # tried: cases run (a case that skips itself under a pass, saying why,
  # is counted apart) plus each pass's 200-thread program
  local tried passed kept made skipped cskip
  read -r tried passed kept made skipped cskip < <(awk '
    $1 ~ /^lib.*\.so/ && $3 ~ /^[0-9]+$/ {
      t += $3 - $6 + 1; p += $4; c += $6; if ($7 == "ok") p++
      if (match($0, /ok [0-9]+\/[0-9]+/)) { split(substr($0, RSTART + 3, RLENGTH - 3), a, "/"); k += a[1]; m += a[2] }
    }
    /^skipped: / { s++ }
    END { print t + 0, p + 0, k + 0, m + 0, s + 0, c + 0 }' "$log")
  [ "$st" = 0 ] || { echo "robust: allocator matrix failed:" >&2; tail -40 "$log" >&2; [ "$tried" = "$passed" ] && passed=$((passed - 1)); }
  local missing=""
  [ "$skipped" = 0 ] || missing=" ($skipped not installed: see the log)"
  [ "$cskip" = 0 ] || missing="$missing; $cskip skipped by their own rule (see below)"
  row "allocators" "$tried" "$passed" "$kept/$made" - \
    "jemalloc, tcmalloc, mimalloc x both orders: whole preload suite + 200 threads$missing"
  sed -n '/^allocator /,/^(order/p' "$log" | sed 's/^/    /' >"$T/alloc.table"
}

say "the robustness suite: build $B${TB:+, TSan build $TB}"
alloc_case
cases "$ROOT/tests/preload/run.sh" "descriptors" \
  "close_range, closefrom, a close loop, dup2, a raw close, fork+close+exec" \
  fd_close_range fd_closefrom fd_close_loop fd_dup2 fd_raw_syscall fd_fork_exec
cases "$ROOT/tests/preload/run.sh" "closed stderr" \
  "descriptor 2 closed, dup2'd over, closed at start: no log line in the program's file, the trace says why" \
  stderr_takeover
cases "$ROOT/tests/cli/run.sh" "special files (CLI)" \
  "FIFO, device, socket, directory as a trace; a run whose trace became a FIFO" \
  not_regular run_lost_trace output_ctl
cases "$ROOT/tests/preload/run.sh" "special files (shim)" \
  "PAGELOCK_MANIFEST naming a FIFO; a 5,000-character PAGELOCK_OUTPUT" \
  manifest_fifo long_output
cases "$ROOT/tests/preload/run.sh" "special outputs" \
  "/dev/null, /dev/full, a link to one, /dev/stdout, a FIFO as the trace (shim and run): no file beside them" \
  output_special
cases "$ROOT/tests/preload/run.sh" "signal masks" \
  "every thread the shim (and CUPTI from its calls, each attach) starts, 4 modes; a SIGALRM handler on the main thread only" \
  sigmask_threads sigmask_reattach sigmask_alarm
# ---- groups whose programs compare bytes -------------------------------------
# Each program prints bytes_checked=N for what it compared (see
# bytes_checked above).
cases "$ROOT/tests/preload/run.sh" "host-function releases" \
  "munmap, madvise, mremap (also of a range not one mapping), free of a registered buffer in a host function, register and auto: no stale registration, no hang" \
  autopin_hostfn
cases "$ROOT/tests/preload/run.sh" "signal-handler releases" \
  "a 20 kHz handler maps and unmaps, and unmaps a registered buffer, while copies run, register and auto" \
  autopin_signal
churn_case
disk_case
sigkill_case
stress_case

echo
printf '%-22s %6s %6s %15s %14s  %s\n' "group" "tried" "passed" "kept/made" "bytes checked" "what"
printf '%s\n' "${rows[@]}"
[ -s "$T/alloc.table" ] && { echo; echo "allocators, per pass:"; cat "$T/alloc.table"; }
say "done: $([ $failed = 0 ] && echo "every case passed" || echo "some cases FAILED (see above)")"
exit $failed
