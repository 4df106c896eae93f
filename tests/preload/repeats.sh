#!/usr/bin/env bash
# Runs of repeated copies end to end (docs/design.md, "Runs of repeated
# copies"): tests/preload/repeats.c makes loops of repeated small copies
# and breaks them every way a program can, tallying what it did; the trace
# (repeats_check, which reads COPY records as written) and the JSON report
# (`pagelock report --format json`) must say exactly the same.
#   repeats.sh BUILD_DIR CASE...     (no CASE: all of them)
# Prints one line per case and "N passed, M failed" last; exit 1 on failure.
set -u
. "$(dirname "$0")/cuda_env.sh"
LIB="$B/libpagelock.so"
PROG="$B/test_repeats_prog"
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-repeats.XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0; fail=0

fail() { echo "    $*" >&2; return 1; }

# The JSON report of one trace against the program's tally: the totals
# (copies, bytes, failed), the table by direction and host memory kind,
# and the call sites adding up to the pageable copies; and the Chrome
# report's copy events adding up to the program's copies.
json_check() { # TRACE EXPECT
  command -v python3 >/dev/null || { echo "    (no python3: JSON not checked)" >&2; return 0; }
  "$B/pagelock" report --format json "$1" >"$1.json" 2>"$1.json.err" || fail "report --format json failed: $(cat "$1.json.err")" || return
  "$B/pagelock" report --format chrome "$1" >"$1.chrome" 2>"$1.chrome.err" || fail "report --format chrome failed: $(cat "$1.chrome.err")" || return
  python3 - "$1.json" "$2" "$1.chrome" <<'PY' >&2
import json, sys
rep = json.load(open(sys.argv[1]))
ok, failed = {}, {}
for line in open(sys.argv[2]):
    f = line.split()
    if not f or f[0] != "copy":
        continue
    d, m, dev, good, b, n = f[1], f[2], f[3], int(f[4]), int(f[5]), int(f[6])
    if good:
        ok[(d, m)] = ok.get((d, m), (0, 0))
        ok[(d, m)] = (ok[(d, m)][0] + n, ok[(d, m)][1] + n * b)
    else:
        failed[d] = failed.get(d, (0, 0))
        failed[d] = (failed[d][0] + n, failed[d][1] + n * b)
bad = []
procs = rep["processes"]
if len(procs) != 1:
    bad.append("%d processes in one trace's report" % len(procs))
t = procs[0]["totals"]
want_n = sum(v[0] for v in ok.values()) + sum(v[0] for v in failed.values())
want_b = sum(v[1] for v in ok.values()) + sum(v[1] for v in failed.values())
want_f = sum(v[0] for v in failed.values())
if t["copies"] != want_n: bad.append("totals.copies %d, the program made %d" % (t["copies"], want_n))
if t["bytes"] != want_b: bad.append("totals.bytes %d, the program copied %d" % (t["bytes"], want_b))
if t["failed"] != want_f: bad.append("totals.failed %d, %d of the program's calls failed" % (t["failed"], want_f))
got = {}
for r in t["by_kind"]:
    got[(r["dir"], r["mem"])] = (r["copies"], r["bytes"])
# Successful copies by kind exactly; failed ones may sit under any kind
# of their direction (classified or not), nowhere else.
extra = {}
for k in set(got) | set(ok):
    g, w = got.get(k, (0, 0)), ok.get(k, (0, 0))
    if g[0] < w[0] or (g[0] - w[0] == 0 and g[1] != w[1]):
        bad.append("by_kind %s/%s: %d copies %d B, the program made %d copies %d B" % (k[0], k[1], g[0], g[1], w[0], w[1]))
    extra[k[0]] = (extra.get(k[0], (0, 0))[0] + g[0] - w[0], extra.get(k[0], (0, 0))[1] + g[1] - w[1])
for d in set(extra) | set(failed):
    e, f = extra.get(d, (0, 0)), failed.get(d, (0, 0))
    if e != f:
        bad.append("by_kind %s: %d copies %d B beyond the successful ones, %d copies %d B failed" % (d, e[0], e[1], f[0], f[1]))
pg = t["pageable"]["copies"]
want_pg = sum(v[0] for k, v in ok.items() if k[1] == "pageable")
if pg < want_pg: bad.append("totals.pageable.copies %d, the program made %d successful pageable copies" % (pg, want_pg))
sites = sum(s["copies"] for s in procs[0]["call_sites"])
if sites != pg: bad.append("call_sites add up to %d copies, totals.pageable to %d" % (sites, pg))
# The Chrome timeline: one event per record, a run's saying how many
# copies it stands for.
ch = json.load(open(sys.argv[3]))
ev = ch["traceEvents"] if isinstance(ch, dict) else ch
calls = [e for e in ev if e.get("cat") == "copy_call" and e.get("ph") == "X"]
n_ch = sum(e.get("args", {}).get("copies", 1) for e in calls)
if n_ch != want_n: bad.append("chrome: copy_call events stand for %d copies, the program made %d" % (n_ch, want_n))
for e in calls:
    a = e.get("args", {})
    if a.get("timed", 1) > a.get("copies", 1) or e["ts"] < 0 or e["dur"] < 0:
        bad.append("chrome: event %s" % e); break
for b in bad:
    print("    json: " + b)
sys.exit(1 if bad else 0)
PY
}

# Run the program under the shim and check every process's trace.
#   rp NAME [--partial-children] [--no-child-tids] [--no-aslr] [--min-runs N]
#      [--max-runs N] [--preload-after LIB] [VAR=VALUE...] -- SCENARIO ARGS...
# Every process (a forked child too) writes expect.<pid>; its trace is
# t.<pid>.trace.  With --partial-children a child's trace may lack END;
# with --no-child-tids a child's records may name any thread.
rp() {
  local name=$1; shift
  local d="$T/$name" partial_kids=0 check_opts=() kid_opts=() envs=() wrap=() preload="$LIB"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
      --partial-children) partial_kids=1 ;;
      --no-child-tids) kid_opts+=(--no-tids) ;;
      --no-aslr) wrap=(setarch "$(uname -m)" -R) ;;
      --preload-after) preload="$preload:$2"; shift ;;
      --min-runs) check_opts+=(--min-runs "$2"); shift ;;
      --max-runs) check_opts+=(--max-runs "$2"); shift ;;
      *) envs+=("$1") ;;
    esac
    shift
  done
  shift
  mkdir -p "$d"
  env "${envs[@]}" RP_OUT="$d" LD_PRELOAD="$preload" PAGELOCK_OUTPUT="$d/t.%p.trace" \
    timeout -k 5 50 "${wrap[@]}" "$PROG" "$@" >"$d/out" 2>"$d/err" ||
    fail "$name: repeats $* exited $?: $(tail -5 "$d/err")" || return
  [ ! -s "$d/err" ] || fail "$name: stderr not empty: $(head -5 "$d/err")" || return
  grep -q '^skipped=1' "$d/out" && { echo "    ($name: skipped: $(cat "$d/out"))" >&2; return 0; }
  local main_pid="" e pid opts n=0
  for e in "$d"/expect.*; do
    [ -f "$e" ] || fail "$name: the program wrote no tally" || return
    pid=${e##*.}
    [ -f "$d/t.$pid.trace" ] || fail "$name: no trace for process $pid: $(ls "$d")" || return
    opts=()
    # The first process to have started is the parent; the rest are
    # children (their pids are larger, barring wrap-around).
    [ -z "$main_pid" ] && main_pid=$(ls "$d" | sed -n 's/^expect\.\([0-9]*\)$/\1/p' | sort -n | head -1)
    [ "$pid" != "$main_pid" ] && [ "$partial_kids" = 1 ] && opts+=(--partial)
    [ "$pid" != "$main_pid" ] && opts+=("${kid_opts[@]}")
    # A child's copies all fail: no runs there to count.
    [ "$pid" = "$main_pid" ] && opts+=("${check_opts[@]}")
    "$B/repeats_check" "$d/t.$pid.trace" "$e" "${opts[@]}" >"$d/check.$pid" 2>&1 ||
      { sed 's/^/    /' "$d/check.$pid" >&2; fail "$name: process $pid's trace"; return; }
    echo "    $name: $(cat "$d/check.$pid")" | sed "s|$d/||" >&2
    json_check "$d/t.$pid.trace" "$e" || fail "$name: process $pid's JSON report" || return
    n=$((n + 1))
  done
  [ "$(ls "$d" | grep -c '^t\..*\.trace$')" = "$n" ] || fail "$name: $(ls "$d" | grep -c '^t\..*\.trace$') traces, $n tallies" || return
}

# The same program with runs merged and every copy on its own: the traces
# hold the same copies field by field (repeats_check --same), and the JSON
# reports say the same but for times (totals, routes, reasons, kinds, call
# sites and allocation sites with their copies, bytes, directions and
# device).
same_reports() { # NAME [VAR=VALUE...] -- SCENARIO ARGS...
  command -v python3 >/dev/null || { echo "    (no python3: skipped)" >&2; return 0; }
  local n=$1 envs=(); shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local noaslr=()
  setarch "$(uname -m)" -R true 2>/dev/null && noaslr=(--no-aslr)
  rp "${n}_m" --min-runs 1 "${noaslr[@]}" "${envs[@]}" PAGELOCK_CUPTI=0 -- "$@" || return
  rp "${n}_e" --max-runs 0 "${noaslr[@]}" "${envs[@]}" PAGELOCK_REPEATS=each PAGELOCK_CUPTI=0 -- "$@" || return
  # Record by record: every field but times, ids and heap addresses (the
  # return addresses need the same load addresses: no ASLR).
  if [ ${#noaslr[@]} -gt 0 ]; then
    "$B/repeats_check" --same "$T/${n}_m"/t.*.trace "$T/${n}_e"/t.*.trace >"$T/${n}.same" 2>&1 ||
      { sed 's/^/    /' "$T/${n}.same" >&2; fail "$n: the traces with runs merged and each copy on its own differ"; return; }
  else
    echo "    (setarch -R not permitted: traces not compared field by field)" >&2
  fi
  python3 - "$T/${n}_m" "$T/${n}_e" <<'PY' >&2
import glob, json, sys
def norm(d):
    procs = []
    for f in sorted(glob.glob(d + "/t.*.trace.json")):
        p = json.load(open(f))["processes"][0]
        t = p["totals"]
        def b(x): return (x["copies"], x["bytes"])
        out = {"copies": t["copies"], "bytes": t["bytes"], "failed": t["failed"],
               "fallbacks": t["fallbacks"], "captured": t["captured"], "registered": t["registered"],
               "pageable": b(t["pageable"]), "pageable_async": b(t["pageable_async"]),
               "staged": b(t["staged"]), "d2d": b(t["device_to_device"]), "peer": b(t["peer"]),
               "routes": {k: b(v) for k, v in t["routes"].items()},
               "not_registered": {k: b(v) for k, v in t["not_registered"].items()},
               "by_kind": sorted((r["dir"], r["mem"], r["copies"], r["bytes"]) for r in t["by_kind"])}
        for table in ("call_sites", "alloc_sites"):
            agg = {}
            for r in p[table]:
                k = (r["site"], r["device"])
                a = agg.setdefault(k, [0, 0, set()])
                a[0] += r["copies"]; a[1] += r["bytes"]; a[2] |= set(r["dirs"])
            out[table] = sorted((k[0], k[1], v[0], v[1], sorted(v[2])) for k, v in agg.items())
        procs.append(out)
    return procs
m, e = norm(sys.argv[1]), norm(sys.argv[2])
bad = 0
if len(m) != len(e):
    print("    %d traces merged, %d each" % (len(m), len(e))); sys.exit(1)
for i, (a, b) in enumerate(zip(m, e)):
    for k in a:
        if a[k] != b[k]:
            bad = 1
            print("    trace %d: %s differs:\n      merged: %s\n      each:   %s" % (i, k, a[k], b[k]))
sys.exit(bad)
PY
  [ $? = 0 ] || fail "$n: the reports with runs merged and with each copy on its own differ"
}

# Every scenario three ways: runs merged with GPU timing off (where runs
# are made of every repeat), with it on (CUPTI traces some copies, which
# then take records of their own), and every copy on its own.
three() { # NAME [rp options and VAR=VALUE...] -- SCENARIO ARGS...
  local n=$1 envs=(); shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  rp "${n}_merge" --min-runs 1 "${envs[@]}" PAGELOCK_CUPTI=0 -- "$@" || return
  rp "${n}_cupti" "${envs[@]}" -- "$@" || return
  rp "${n}_each" --max-runs 0 "${envs[@]}" PAGELOCK_REPEATS=each PAGELOCK_CUPTI=0 -- "$@" || return
}

# 300 threads at once (more than the shim's 256 rings), a third of them
# ending mid-loop; a pool of 4 threads taking 96 loops; 40 threads one
# after another from one call path.
case_threads() { three threads -- threads 300 12; }

# fork() in the middle of the main thread's loop while a helper thread is
# in a run too; each child goes on with the same calls (all failing, as in
# a forked child) and leaves with exit() or, after the writer drained its
# ring, with _exit().
case_fork_exit() { three fork_exit --no-child-tids -- fork exit; }
case_fork_underscore_exit() {
  rp fork_uexit_merge --partial-children --no-child-tids --min-runs 1 PAGELOCK_CUPTI=0 -- fork _exit
}
case_fork_underscore_exit_each() {
  rp fork_uexit_each --partial-children --no-child-tids --max-runs 0 PAGELOCK_REPEATS=each PAGELOCK_CUPTI=0 -- fork _exit
}
# A forked child's records name the child's own thread, not the thread
# of the parent that forked it.
case_fork_child_tid() { rp fork_tid PAGELOCK_CUPTI=0 -- fork exit; }

# The buffer behind a loop freed and allocated again at the same address,
# small and tracked; registered and unregistered midway by the looping
# thread and by another; pinned, freed and malloc'd; an mmap'd range
# replaced in place.  The host memory kind changes at exactly that copy.
case_memswap() { three memswap -- memswap; }
case_memswap_auto() { rp memswap_auto PAGELOCK_MODE=auto PAGELOCK_CUPTI=0 -- memswap; }

# The default streams with the device switched between iterations (two
# fake devices), and cuCtxSetCurrent between two contexts.
case_ctx() { three ctx FAKECUDA_DEVICES=2 -- ctx; }

# More distinct repeated copies than a thread's 4 run slots, bursts,
# async, device to device, the 256 KiB limit, 0 bytes, runs of exactly
# 64, 65, 128, 129 copies.
case_slots() { three slots -- slots; }
case_slots_stage() { rp slots_stage --min-runs 1 PAGELOCK_MODE=stage PAGELOCK_STAGE_MIN=64K PAGELOCK_CUPTI=0 -- slots; }

# Calls that fail in the middle of a run: injected driver errors (one
# call, then every call for a while) and a device pointer out of range.
case_fail() { three fail -- fail; }

# Idle periods longer than the writer's one-second drain inside loops, a
# loop copying through a drain, a thread ending after its run was drained.
case_idle() { rp idle_merge --min-runs 1 PAGELOCK_CUPTI=0 -- idle 1; }
case_idle_cupti() { rp idle_cupti -- idle 1; }

# A thread leaving by the raw exit system call (its ring never released),
# one by pthread_exit, copies in an atexit handler, the main thread leaving
# by pthread_exit while the last thread still copies.
case_exits() { three exits -- exits return; }
case_exits_main_pthread_exit() { three exits_pe -- exits pthread_exit; }

# A thread that made its copies, told the main thread so and returned, is
# held back in its end (at the shim's next lock, by lock_delay.c, as a
# preemption there would) while the main thread returns from main: the
# process exit must still hand over every copy the thread made, as it
# does for copies each on its own.
case_thread_end_exit() {
  local lib="$B/testlib/libpl_lock_delay.so"
  rp thread_end_each --max-runs 0 --preload-after "$lib" PAGELOCK_REPEATS=each PAGELOCK_CUPTI=0 -- thread_end || return
  grep -q '^lock_delay=1' "$T/thread_end_each/out" || fail "lock_delay.c was not preloaded: $(cat "$T/thread_end_each/out")" || return
  rp thread_end_merge --preload-after "$lib" PAGELOCK_CUPTI=0 -- thread_end
}

# Many threads sharing few rings: 253 threads hold a ring each, 6 threads
# at a time make runs of random length with pauses for 2 s, each ending
# after a while and replaced (its ring and stack reused).
case_churn() {
  rp churn_merge --min-runs 1 PAGELOCK_CUPTI=0 -- churn 2 253 || return
  rp churn_cupti -- churn 2 253
}

# Merged and each: the same report but for times.
case_same_reports() {
  same_reports sr_memswap -- memswap || return
  same_reports sr_slots -- slots || return
  same_reports sr_fail -- fail || return
  same_reports sr_exits -- exits return || return
  same_reports sr_ctx FAKECUDA_DEVICES=2 -- ctx || return
  same_reports sr_threads -- threads 300 8
}

# Every case defined above, in the order they appear.
all=$(grep -o '^case_[a-z0-9_]*()' "$0" | sed 's/^case_//; s/()$//')
for c in ${@:-$all}; do
  f=case_$c
  if "$f"; then echo "ok   $c"; pass=$((pass+1)); else echo "FAIL $c"; fail=$((fail+1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
