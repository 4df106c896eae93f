#!/bin/sh
# run.sh BUILD_DIR CASE - one CLI test of the pagelock executable.
#
# The shim is not under test here: PAGELOCK_SHIM points at libm, which any
# program can preload harmlessly, and traces come from pl_mktrace or from
# programs that append to $PAGELOCK_MANIFEST themselves.
set -u
B=$1
CASE=$2
PL="$B/pagelock"
MK="$B/pl_mktrace"
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-cli.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
export PAGELOCK_NO_ADDR2LINE=1
# The cases check the report's sentences whole, on one line each: wide
# enough that none wraps (report_wrap tests the wrapping).
export COLUMNS=1000
unset PAGELOCK_OUTPUT PAGELOCK_MANIFEST PAGELOCK_MODE LD_PRELOAD CUDA_INJECTION64_PATH
# Some cases start pagelock itself with LD_PRELOAD set; a sanitizer build
# would refuse to start then.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

for f in /lib/x86_64-linux-gnu/libm.so.6 /lib/aarch64-linux-gnu/libm.so.6 \
         /lib64/libm.so.6 /usr/lib64/libm.so.6 /usr/lib/libm.so.6; do
  [ -r "$f" ] && { PAGELOCK_SHIM=$f; break; }
done
[ -n "${PAGELOCK_SHIM:-}" ] || { echo "no libm.so.6 to stand in for the shim"; exit 1; }
export PAGELOCK_SHIM

fail() { echo "FAIL [$CASE]: $*"; echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }

# run_pl EXPECTED_STATUS args...: runs pagelock, output in ./out and ./err
run_pl() {
  want=$1; shift
  "$PL" "$@" >out 2>err
  got=$?
  [ "$got" = "$want" ] || fail "pagelock $* exited $got, expected $want"
}
has_err() { grep -qF -- "$1" err || fail "stderr lacks: $1"; }
has_out() { grep -qF -- "$1" out || fail "stdout lacks: $1"; }
no_err() { ! grep -qF -- "$1" err || fail "stderr has: $1"; }
# records FILE: the record count mktrace printed for FILE
mk() { "$MK" "$@" >mk.out || fail "mktrace $* failed"; sed -n 's/^records=//p' mk.out; }

case $CASE in
usage)
  # A usage error is its line and where help is, nothing more.
  run_pl 2
  [ "$(cat err)" = "pagelock: no command given (run, report, compare, demo, doctor)
try 'pagelock --help'" ] || fail "no command: $(cat err)"
  run_pl 2 frobnicate
  [ "$(cat err)" = "pagelock: unknown command 'frobnicate' (valid: run, report, compare, demo, doctor)
try 'pagelock --help'" ] || fail "unknown command: $(cat err)"
  run_pl 0 --help
  has_out "usage: pagelock run"
  has_out "exit status:"
  has_out "  3        a gate failed: --max-blocked"
  [ ! -s err ] || fail "stderr from --help"
  # every command's errors: two lines, the second naming its help
  for c in "run --frob" "report --frob x.trace" "compare --frob a b" "demo --frob" "doctor --frob" \
    "report -q x.trace" "report --format" "run --help=1 true" "report x.trace --max-blocked=1ms"; do
    set -- $c
    run_pl 2 "$@"
    [ "$(wc -l <err)" = 2 ] || fail "pagelock $c: not two lines"
    [ "$(sed -n 2p err)" = "try 'pagelock $1 --help'" ] || fail "pagelock $c: second line $(sed -n 2p err)"
    grep -q "^pagelock: $1: " err || fail "pagelock $c: first line $(sed -n 1p err)"
  done
  run_pl 2 report --frob x.trace
  has_err "pagelock: report: unknown option '--frob'"
  run_pl 2 report -q x.trace
  has_err "pagelock: report: unknown option '-q'"
  run_pl 2 report --format
  has_err "pagelock: report: option '--format' needs a value (F)"
  run_pl 2 run --help=1 true
  has_err "pagelock: run: option '--help' takes no value"
  run_pl 2 report x.trace --max-blocked=1ms
  has_err "pagelock: report: invalid --max-blocked '1ms' (milliseconds: a number, 0 or more)"
  ;;
command_help)
  # `pagelock CMD --help` (and -h, and `pagelock help CMD`) is that
  # command's help on stdout, exit 0, whatever else is on the line.
  for c in run report compare demo doctor; do
    run_pl 0 "$c" --help
    [ "$(sed -n 1p out)" = "usage: pagelock $c $(sed -n 1p out | cut -d' ' -f4-)" ] || fail "$c --help: $(sed -n 1p out)"
    has_out "options:"
    has_out "  -h, --help"
    has_out "exit status: "
    grep -q "^commands:" out && fail "$c --help printed the general help"
    cp out want
    run_pl 0 "$c" -h
    cmp -s out want || fail "$c -h differs from $c --help"
    run_pl 0 help "$c"
    cmp -s out want || fail "help $c differs from $c --help"
  done
  run_pl 0 report a.trace --format json --help
  has_out "usage: pagelock report [OPTIONS] TRACE..."
  has_out "      --max-blocked=MS"
  run_pl 0 compare --help
  has_out "      --fail-if-worse=PCT"
  run_pl 0 run --help
  has_out "  -m, --mode=M"
  # run's options end at the program: its --help is the program's
  run_pl 0 run sh -c 'echo "$1"' sh --help
  [ "$(cat out)" = "--help" ] || fail "run passed on: $(cat out)"
  ;;
getopt)
  # Options as getopt_long takes them, in every form.
  mk good.trace --copies 40 --sites 3 >/dev/null
  run_pl 0 report --format json good.trace
  cp out json
  for form in "-fjson good.trace" "-f json good.trace" "--format=json good.trace" \
    "--format json good.trace" "good.trace --format json" "good.trace -fjson" "--form=json good.trace"; do
    # shellcheck disable=SC2086
    run_pl 0 report $form
    cmp -s out json || fail "report $form is not the JSON report"
  done
  run_pl 0 report -oo1.json --format=json good.trace
  cmp -s o1.json json || fail "-oFILE"
  run_pl 0 report good.trace -o o2.json -fjson
  cmp -s o2.json json || fail "-o FILE after the operand"
  run_pl 0 report --output o3.json --format json good.trace
  cmp -s o3.json json || fail "--output FILE"
  # -- ends options: a trace named like an option
  cp good.trace ./-f.trace
  run_pl 0 report --format=json -- -f.trace
  sed 's/-f\.trace/good.trace/' out | cmp -s - json || fail "-- before an operand that looks like an option"
  # compare: options after the runs, and -- between runs
  run_pl 0 compare good.trace good.trace --format json
  has_out '"schema": "pagelock-compare"'
  run_pl 0 compare -fjson good.trace -- good.trace good.trace
  has_out '"before": {"traces": 1,'
  has_out '"after": {"traces": 2,'
  run_pl 0 compare --format=json -- good.trace good.trace
  has_out '"after": {"traces": 1,'
  # run stops at the program's name: the rest is the program's
  run_pl 0 run -oout.%p.trace --mode=off sh -c 'echo "$PAGELOCK_MODE $*"' sh --mode stage -o x
  [ "$(cat out)" = "off --mode stage -o x" ] || fail "run: $(cat out)"
  run_pl 0 run -m stage -- sh -c 'echo "$PAGELOCK_MODE"'
  [ "$(cat out)" = "stage" ] || fail "run -m stage --: $(cat out)"
  run_pl 0 demo --help
  ;;
version)
  run_pl 0 --version
  has_out "pagelock 0.1.0"
  ;;
exit_status)
  run_pl 7 run -- sh -c 'exit 7'
  run_pl 0 run true
  run_pl 3 run --mode off sh -c 'exit 3'
  # a script without "#!" runs under sh, as with execvp
  printf 'exit 4\n' >noshebang && chmod +x noshebang
  run_pl 4 run ./noshebang
  has_err "pagelock: no trace was written"
  ;;
signal)
  run_pl 143 run -- sh -c 'kill -TERM $$'
  run_pl 137 run -- sh -c 'kill -KILL $$'
  # SIGINT/SIGQUIT to pagelock itself are ignored while the child runs
  run_pl 3 run -- sh -c 'kill -INT $PPID; kill -QUIT $PPID; sleep 0.2; exit 3'
  # SIGTERM/SIGHUP to pagelock are forwarded to the child
  run_pl 9 run -- sh -c 'trap "exit 9" TERM; kill -TERM $PPID; sleep 5 & wait'
  run_pl 8 run -- sh -c 'trap "exit 8" HUP; kill -HUP $PPID; sleep 5 & wait'
  # a signal ignored when pagelock started (nohup) stays ignored in the program
  ( trap '' HUP; "$PL" run sh -c 'kill -HUP $$; exit 0' >out 2>err ) || fail "ignored SIGHUP not inherited"
  ;;
not_found)
  run_pl 127 run no-such-program-pagelock-test
  has_err "pagelock: program 'no-such-program-pagelock-test' not found"
  run_pl 127 run ./nope -x
  has_err "pagelock: program './nope' not found"
  ;;
not_executable)
  printf '#!/bin/sh\nexit 0\n' >script.sh
  chmod 644 script.sh
  run_pl 127 run ./script.sh
  has_err "pagelock: program './script.sh' not executable"
  run_pl 127 run "$T"
  has_err "not executable"
  ;;
bad_mode)
  run_pl 2 run --mode fast true
  has_err "pagelock: run: invalid --mode 'fast' (valid: observe, stage, register, auto, off)"
  has_err "try 'pagelock run --help'"
  run_pl 2 run --mode=turbo true
  has_err "pagelock: run: invalid --mode 'turbo'"
  run_pl 2 demo --mode x
  has_err "pagelock: demo: invalid --mode 'x'"
  for m in observe stage register auto off; do run_pl 0 run --mode "$m" true; done
  ;;
no_program)
  run_pl 2 run
  [ "$(cat err)" = "pagelock: run: no program given
try 'pagelock run --help'" ] || fail "message: $(cat err)"
  run_pl 2 run --mode stage --
  has_err "pagelock: run: no program given"
  ;;
unwritable_output)
  run_pl 2 run -o /nonexistent-pagelock-dir/x.%p.trace true
  has_err "pagelock: cannot write traces to '/nonexistent-pagelock-dir/': No such file or directory"
  : >afile
  run_pl 2 run -o afile/x.trace true
  has_err "pagelock: cannot write traces to 'afile/': Not a directory"
  if [ "$(id -u)" != 0 ]; then
    mkdir ro && chmod 555 ro
    run_pl 2 run -o ro/t.%p.trace true
    has_err "pagelock: cannot write traces to 'ro/': Permission denied"
  fi
  mkdir ok
  run_pl 0 run -o ok/t.%p.trace true
  run_pl 0 run -o ok true
  # without -o, a PAGELOCK_OUTPUT from the environment is checked, and kept
  PAGELOCK_OUTPUT=/nonexistent-pagelock-dir/y.trace "$PL" run true >out 2>err
  [ $? = 2 ] || fail "bad PAGELOCK_OUTPUT not refused"
  has_err "pagelock: cannot write traces to '/nonexistent-pagelock-dir/'"
  PAGELOCK_OUTPUT=ok/z.%p.trace "$PL" run sh -c 'echo "$PAGELOCK_OUTPUT" >ok/seen' >out 2>err
  [ "$(cat ok/seen)" = "ok/z.%p.trace" ] || fail "PAGELOCK_OUTPUT changed: $(cat ok/seen)"
  "$PL" run sh -c 'echo "${PAGELOCK_OUTPUT:-unset}" >ok/seen2' >out 2>err
  [ "$(cat ok/seen2)" = "unset" ] || fail "PAGELOCK_OUTPUT set without -o"
  ;;
report_missing)
  run_pl 2 report missing.trace
  has_err "pagelock: cannot open 'missing.trace': No such file or directory"
  ;;
report_not_trace)
  printf 'hello, this is not a trace at all, just some text....................................\n' >text.trace
  run_pl 2 report text.trace
  has_err "pagelock: 'text.trace' is not a pagelock trace"
  printf 'abc' >tiny.trace
  run_pl 2 report tiny.trace
  has_err "pagelock: 'tiny.trace' is not a pagelock trace"
  ;;
report_empty)
  : >empty.trace
  run_pl 2 report empty.trace
  has_err "pagelock: 'empty.trace' is empty"
  ;;
report_short_header)
  mk good.trace >/dev/null
  head -c 20 good.trace >short.trace
  run_pl 2 report short.trace
  has_err "pagelock: 'short.trace' is truncated: its trace header is incomplete"
  ;;
report_future_version)
  mk good.trace >/dev/null
  # version is the little-endian u32 at offset 8
  { head -c 8 good.trace; printf '\011\000\000\000'; tail -c +13 good.trace; } >future.trace
  run_pl 2 report future.trace
  has_err "pagelock: 'future.trace' uses trace format version 9; this pagelock reads version 4 or older"
  ;;
report_truncated)
  n=$(mk cut.trace --cut-mid-record --copies 50)
  [ -n "$n" ] || fail "mktrace printed no record count"
  run_pl 0 report cut.trace
  has_err "pagelock: warning: 'cut.trace' ends after $n complete records (the program may have died): report is partial"
  has_out "[partial trace]"
  has_out "copies: 49 calls"
  ;;
report_corrupt_size)
  n=$(mk bad.trace --no-end)
  # a COPY record header claiming 12 bytes: not a multiple of 8
  printf '\002\000\000\000\014\000\000\000garbage-garbage-' >>bad.trace
  run_pl 0 report bad.trace
  has_err "pagelock: warning: 'bad.trace' ends after $n complete records (the program may have died): report is partial"
  n=$(mk big.trace --no-end)
  # size 0x7fffffff: over PAGELOCK_TRACE_MAX_RECORD
  printf '\002\000\000\000\370\377\377\177' >>big.trace
  run_pl 0 report big.trace
  has_err "'big.trace' ends after $n complete records"
  n=$(mk zero.trace --no-end)
  printf '\002\000\000\000\000\000\000\000' >>zero.trace
  run_pl 0 report zero.trace
  has_err "'zero.trace' ends after $n complete records"
  n=$(mk past.trace --no-end)
  # size 4096: more than the file holds
  printf '\002\000\000\000\000\020\000\000abcdefgh' >>past.trace
  run_pl 0 report past.trace
  has_err "'past.trace' ends after $n complete records"
  ;;
report_no_end)
  n=$(mk noend.trace --no-end)
  run_pl 0 report noend.trace
  has_err "pagelock: warning: 'noend.trace' ends after $n complete records (the program may have died): report is partial"
  ;;
report_good)
  mk good.trace --copies 40 --sites 3 --simulated >/dev/null
  run_pl 0 report good.trace
  [ -s err ] && fail "unexpected stderr"
  has_out "== pid 4242 /opt/app/bin/app on testhost: mode observe"
  has_out "(simulated timings)"
  has_out "note: synthetic trace written by mktrace"
  has_out "copies: 40 calls, 40.0 MiB"
  has_out "30 async copies were made synchronous by pageable memory, blocking the host"
  has_out "pageable copies by call site (worst first):"
  has_out "step_2+0x20 (app)"
  has_out "advice: allocate these buffers with cudaHostAlloc/cudaMallocHost, or run with --mode=auto"
  grep -q "cudaMemcpyAsync" out && fail "a cudart frame was chosen as call site"
  ;;
report_json)
  mk good.trace --copies 40 --sites 3 >/dev/null
  run_pl 0 report --format json good.trace
  has_out '"schema": "pagelock-report"'
  has_out '"call_sites"'
  if command -v python3 >/dev/null 2>&1; then
    python3 - out <<'EOF' || fail "json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["processes"][0]
assert p["pid"] == 4242 and p["partial"] is False, p
assert p["totals"]["copies"] == 40, p["totals"]
assert d["totals"]["pageable_async"]["copies"] == 30
sites = p["call_sites"]
assert [s["function"] for s in sites] == ["step_2", "step_1", "step_0"], sites
assert sum(s["copies"] for s in sites) == 30
EOF
  fi
  run_pl 0 report --format=json good.trace
  ;;
report_json_bytes)
  # Linux names are bytes: invalid UTF-8 must still give valid JSON.
  mk bytes.trace --host "$(printf 'bad\377host')" >/dev/null
  run_pl 0 report --format json bytes.trace
  python3 - out <<'EOF' || fail "JSON with a non-UTF-8 host name is not valid JSON"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
assert d["processes"][0]["host"] == "bad\ufffdhost", d["processes"][0]["host"]
EOF
  ;;
report_format)
  mk good.trace >/dev/null
  run_pl 2 report --format xml good.trace
  has_err "pagelock: report: invalid --format 'xml' (valid: text, json, html, chrome)"
  run_pl 2 report
  has_err "pagelock: report: no trace file given"
  ;;
report_many_files)
  mk a.trace --pid 101 >/dev/null
  mk b.trace --pid 202 --mode 1 >/dev/null
  run_pl 0 report a.trace b.trace
  has_out "== pid 101 /opt/app/bin/app"
  has_out "== pid 202 /opt/app/bin/app on testhost: mode stage"
  has_out "== total over 2 processes =="
  has_out "copies: 200 calls"
  # one bad file among good ones: report the good ones, exit 2
  run_pl 2 report a.trace missing.trace
  has_out "== pid 101"
  has_err "cannot open 'missing.trace'"
  ;;
report_million)
  mk big.trace --copies 1000000 --sites 50 >/dev/null
  start=$(date +%s%N)
  run_pl 0 report big.trace
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  echo "report of 1000000 copy records: $ms ms"
  [ "$ms" -lt 5000 ] || fail "report took $ms ms"
  has_out "copies: 1000000 calls"
  has_out "... 30 more"
  ;;
gpu_made_sync)
  # 3 pageable async 16 MiB uploads blocked the host 3 ms each while their
  # GPU copies took 2.8 ms: made synchronous.  GPU times are in CUPTI's
  # clock, 500 ms behind; the CLOCK record brings them back.
  mk ms.trace --scenario made-sync >/dev/null
  run_pl 0 report ms.trace
  [ -s err ] && fail "unexpected stderr"
  [ "$(sed -n 2p out)" = "verdict: pageable copies made 3 async calls synchronous, blocking the host 9.000 ms (pinned, they would block about 8.100 ms less); pageable copies left the GPU 8.400 ms of copy time with no kernel running" ] || fail "made-sync verdict is not first"
  [ "$(sed -n 4p out)" = "GPU timing: CUPTI, 10 records, 0 dropped" ] || fail "line 4 is not the GPU timing status"
  has_out "  fix: pin the buffer allocated at make_batch+0x30 (app) (cudaHostAlloc / cudaHostRegister); --mode=auto would register the buffer once it is copied often enough (PAGELOCK_REGISTER_HOT) and copy it at pinned speed: up to 8.100 ms less blocked"
  # the idle verdict names what it refers to instead of "see above"
  has_out "  fix: first fix the 3 copy calls that pageable memory made synchronous (they blocked the host 9.000 ms), so that it can queue work ahead"
  grep -q "see above" out && fail "a cross reference without its name"
  has_out "verdict: the GPU idled for long gaps: device 0 (NVIDIA H200) was idle 3 times for 1.000 ms or more, 6.300 ms in all (21% of its active window); the longest gap was 2.100 ms"
  has_out "GPU join: 7 of 7 copy calls matched their GPU copies"
  has_out "       0  NVIDIA H200        2  30.100   15.000  9.300  0.100  0.000   9.400     10%    8.500    0.000  6.600     3"
  has_out "  device 0 idle gaps >= 1.000 ms (longest first): 2.100 ms at +9.000 ms, 2.100 ms at +19.000 ms, 2.100 ms at +29.000 ms"
  has_out "       0  HtoD  pageable  device  16M-64M      3  48.0 MiB   8.400         5.99      5.99"
  has_out "       0  HtoD  pinned    device  16M-64M      3  48.0 MiB   0.900        55.92     55.92"
  has_out "  count     bytes  host blocked  GB/s  dir    GPU ms  made sync  would save  call site"
  has_out "      3  48.0 MiB      9.000 ms  5.59  H2D  8.400 ms          3    8.100 ms  load_batch+0x20 (app)"
  has_out "      3  48.0 MiB      9.000 ms  5.59  H2D  8.400 ms          3    8.100 ms  make_batch+0x30 (app)"
  # the old summary line is still there for scripts that grep it
  has_out "3 async copies were made synchronous by pageable memory, blocking the host 9.000 ms"
  # no colour into a file, even when a terminal would get some
  grep -q "$(printf '\033')" out && fail "colour escape in redirected output"
  run_pl 0 report --format json ms.trace
  if command -v python3 >/dev/null 2>&1; then
    python3 - out <<'PYEOF' || fail "json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["processes"][0]
g = p["gpu"]
assert p["trace_version"] == 4, p["trace_version"]
assert g["status"] == "on" and g["records"] == 10 and g["dropped"] == 0, g
j = g["join"]
assert j["calls"] == 7 and j["made_sync"] == 3 and j["made_sync_host_ns"] == 9000000, j
dev = g["devices"][0]
assert dev["name"] == "NVIDIA H200" and dev["copy_engines"] == 2, dev
assert dev["window"] == {"start_ns": 1001100000, "end_ns": 1031200000}, dev["window"]
assert dev["kernel_busy_ns"] == 15000000 and dev["copy_busy_all_ns"] == 9400000, dev
assert dev["copy_busy_ns"] == {"H2D": 9300000, "D2H": 100000, "other": 0}, dev
assert dev["copy_hidden_ns"] == 900000 and dev["copy_exposed_ns"] == 8500000, dev
assert dev["idle_ns"] == 6600000 and dev["gaps_total"] == 3 and dev["gaps_ns"] == 6300000, dev
assert dev["pinned_gbps"] == {"H2D": 55.924, "D2H": 41.943}, dev["pinned_gbps"]
assert len(dev["bandwidth"]) == 3 and dev["bandwidth"][0]["src"] == "pageable", dev["bandwidth"]
v = p["pageable_verdicts"] + g["verdicts"]
assert [x["kind"] for x in p["pageable_verdicts"]] == ["made-sync"], p["pageable_verdicts"]
assert [x["kind"] for x in g["verdicts"]] == ["idle"], g["verdicts"]
assert "made 3 async calls synchronous" in v[0]["text"] and v[0]["ns"] == 9000000, v[0]
assert v[0]["device"] is None and v[1]["device"] == 0, v
s = p["call_sites"][0]
assert s["gpu_calls"] == 3 and s["made_sync"] == 3 and s["would_save_ns"] == 8100000 and s["device"] == 0, s
assert p["alloc_sites"][0]["function"] == "make_batch", p["alloc_sites"]
assert d["ranks"][0]["exposed_copy_ns"] == 8500000 and d["ranks"][0]["hidden_pct"] == 9.6, d["ranks"]
PYEOF
  fi
  ;;
gpu_sampled)
  # Sampled GPU timing (GPU_SAMPLE), times after the trace opened: traced
  # until +11 ms, paused 5 ms, traced +16..+21 ms, paused to END (+31 ms);
  # a stray resume first (mktrace.c, scenario sampled).
  mk sa.trace --scenario sampled >/dev/null
  run_pl 0 report sa.trace
  has_err "pagelock: warning: 'sa.trace': 2 malformed records were skipped"
  # the headline counts every copy by its host time; its GPU figures are marked
  [ "$(sed -n 2p out)" = "verdict: pageable copies made 4 async calls synchronous, blocking the host 1.900 ms (pinned, they would block about 1.100 ms less) (GPU figures from the sampled windows)" ] || fail "line 2 is not the made-sync verdict"
  [ "$(sed -n 5p out)" = "GPU timing sampled: 1 window, 51.6% of the run traced (the program issued up to 61000 GPU operations a second, more than PAGELOCK_CUPTI_MAX_RATE, where tracing every one would slow it); GPU times below cover the windows only, host times every copy" ] || fail "line 5 is not the sampling line"
  grep -q "copies overlapped compute" out && fail "copies called overlapped beside pageable copies made synchronous"
  # the real 5 ms gap in the first window is listed, the 5 ms pause is not
  has_out "  device 0 idle gaps >= 1.000 ms (longest first): 5.000 ms at +3.000 ms"
  grep -q "idle gaps.*, " out && fail "a pause listed as an idle gap"
  has_out "verdict: the GPU idled for long gaps: device 0 (NVIDIA H200) was idle 1 times for 1.000 ms or more, 5.000 ms in all (34% of its active window outside tracing pauses); the longest gap was 5.000 ms"
  # copies in pauses have no GPU op by design: not among those that missed
  has_out "GPU join: 2 of 4 copy calls matched their GPU copies; 4 more copy calls ran while GPU timing was paused"
  run_pl 0 report --format json sa.trace
  python3 - out <<'PYEOF' || fail "json check failed"
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
g = p["gpu"]
assert p["malformed_records"] == 2 and p["span_ns"] == 31000000, p
# the stray resume is ignored (else 2 windows); the last pause lasts to END
assert g["sampling"] == {"sampled": True, "pauses": 2, "windows": 1, "paused_ns": 15000000,
                         "traced_ns": 16000000, "max_ops_per_s": 61000, "untimed_copies": 4,
                         "ignored": 1}, g["sampling"]
d = g["devices"][0]
# window 19.6 ms, busy 8.4 ms, paused 5 ms inside it: idle 6.2 ms, not 11.2
assert d["idle_ns"] == 6200000, d["idle_ns"]
assert d["gaps_total"] == 1 and d["gaps_ns"] == 5000000, d
assert d["gaps"] == [{"start_ns": 1003000000, "end_ns": 1008000000, "ns": 5000000}], d["gaps"]
assert g["join"]["calls"] == 2 and g["join"]["unjoined"] == 2, g["join"]
PYEOF
  # cut inside a last GPU_SAMPLE (a resume at +23 ms), no END: the
  # truncated record is not read, and the open pause lasts to the last copy
  # (+27 ms)
  mk cut.trace --scenario sampled-cut >/dev/null
  run_pl 0 report --format json cut.trace
  has_err "pagelock: warning: 'cut.trace' ends after 29 complete records"
  python3 - out <<'PYEOF' || fail "json check failed (cut)"
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
assert p["trace_end"] == "truncated" and p["span_ns"] == 27000000, p
assert p["gpu"]["sampling"] == {"sampled": True, "pauses": 2, "windows": 1, "paused_ns": 11000000,
                                "traced_ns": 16000000, "max_ops_per_s": 61000,
                                "untimed_copies": 4, "ignored": 1}, p["gpu"]["sampling"]
PYEOF
  # without GPU_SAMPLE records: not sampled, zeros, no line
  mk ms.trace --scenario made-sync >/dev/null
  run_pl 0 report ms.trace
  grep -q "sampled" out && fail "a sampling line for a trace that was not sampled"
  run_pl 0 report --format json ms.trace
  has_out '"sampling": {"sampled": false, "pauses": 0, "windows": 0, "paused_ns": 0, "traced_ns": 0, "max_ops_per_s": 0, "untimed_copies": 0, "ignored": 0}'
  ;;
gpu_same_stream)
  mk ss.trace --scenario same-stream >/dev/null
  run_pl 0 report ss.trace
  has_out "verdict: pinned but not overlapped: copies and kernels share a stream (device 0 (NVIDIA H200): 10 of 10 pinned async copies ran on stream 7 with kernels; 0% of their time was hidden under kernels, 10.000 ms exposed)"
  has_out "  fix: move copies to their own stream with cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)"
  grep -q "made .* async calls synchronous" out && fail "pinned copies called made synchronous"
  ;;
gpu_one_engine)
  mk oe.trace --scenario one-engine >/dev/null
  run_pl 0 report oe.trace
  has_out "verdict: one copy engine: uploads and downloads serialise (device 0 (Tesla T4): 10.000 ms of H2D and 10.000 ms of D2H copies cannot run at the same time)"
  has_out "verdict: copies overlapped compute: 100% of copy time (20.000 of 20.000 ms) was hidden under kernels"
  has_out "       0  Tesla T4        1  20.000   20.000  10.000  10.000  0.000  20.000    100%    0.000    0.000  0.000     0"
  ;;
gpu_idle)
  mk idle.trace --scenario idle >/dev/null
  run_pl 0 report idle.trace
  has_out "verdict: the GPU idled for long gaps: device 0 (NVIDIA H200) was idle 9 times for 1.000 ms or more, 45.000 ms in all (82% of its active window); the longest gap was 5.000 ms"
  has_out ", ... 1 more"
  ;;
gpu_busy)
  mk busy.trace --scenario busy >/dev/null
  run_pl 0 report busy.trace
  # host timing is enough for the pageable verdict and its fix: they lead
  [ "$(sed -n 2p out)" = "verdict: pageable copies made 4 async calls synchronous, blocking the host 2.000 ms" ] || fail "line 2 is not the pageable verdict"
  sed -n 3p out | grep -q "^  fix: pin the buffer .* at " || fail "line 3 is not the verdict's fix with its site"
  [ "$(sed -n 4p out)" = "GPU timing unavailable: another CUPTI client (nsys, ncu or a profiler) is attached; copies are still intercepted" ] || fail "line 4 does not say why GPU timing is missing"
  has_out "  fix: run without the other profiler (nsys, ncu, torch.profiler) to get GPU timing"
  has_out "4 async copies were made synchronous by pageable memory"
  grep "^verdict:" out | grep -vq "pageable" && fail "a GPU verdict without GPU timing"
  grep -q "GPU ms" out && fail "GPU columns without GPU timing"
  run_pl 0 report --format json busy.trace
  has_out '"status": "busy", "reason": "another CUPTI client'
  has_out '{"kind": "no-gpu-timing", "ns": 0, "device": null'
  ;;
gpu_staged)
  mk st.trace --scenario staged >/dev/null
  run_pl 0 report st.trace
  has_out "GPU join: 4 of 4 copy calls matched their GPU copies (4 staged through 16 chunks)"
  has_out "         staged through 16 chunks (256.0 MiB, 4.800 ms of GPU time)"
  has_out "       0  HtoD  staged  device  16M-64M     16  256.0 MiB   4.800        55.92     55.92"
  grep -q "matched no call" out && fail "staged chunks counted as GPU copies of no call"
  grep -q "pinned but not overlapped" out && fail "staged chunks counted as the program's pinned copies"
  has_out "4 pageable copies (256.0 MiB) were staged through pinned memory"
  grep -q "async calls synchronous" out && fail "staged copies called made synchronous"
  grep -q "disagree" out && fail "staged chunks reported as a pageable/pinned disagreement"
  ;;
gpu_v1)
  # a version-1 trace (96-byte COPY records) still reports
  n=$(mk v1.trace --v1 --copies 40)
  run_pl 0 report v1.trace
  [ -s err ] && fail "unexpected stderr"
  has_out "GPU timing unavailable: no GPU_STATUS record"
  has_out "this trace was written by an older pagelock (trace format 1)"
  has_out "copies: 40 calls, 40.0 MiB"
  has_out "30 async copies were made synchronous by pageable memory"
  run_pl 0 report --format json v1.trace
  has_out '"trace_version": 1'
  ;;
gpu_ranks)
  mk r0.trace --scenario made-sync --rank 0 --host nodeA --pid 100 >/dev/null
  mk r1.trace --scenario same-stream --rank 1 --host nodeB --pid 200 >/dev/null
  mk r2.trace --scenario busy --rank 2 --host nodeB --pid 300 >/dev/null
  run_pl 0 report r0.trace r1.trace r2.trace
  has_out "== total over 3 processes =="
  has_out "per rank:"
  has_out "  rank  host   pid  copies  pageable  host blocked  exposed copy  hidden"
  has_out "     0  nodeA  100       7         3      9.008 ms      8.500 ms     10%"
  has_out "     1  nodeB  200      10         0      0.020 ms     10.000 ms      0%"
  has_out "     2  nodeB  300       4         4      2.000 ms             -       -"
  run_pl 0 report --format json r0.trace r1.trace r2.trace
  has_out '"ranks": ['
  has_out '{"rank": 2, "host": "nodeB", "pid": 300, "copies": 4, "pageable": 4, "host_ns": 2000000, "exposed_copy_ns": null, "hidden_pct": null}'
  ;;
report_dir)
  # A directory stands for its *.trace files, as for compare: the same
  # report as the files named one by one (in name order), other files and
  # non-regular *.trace entries left out; no trace in it: one line, exit 2.
  mkdir job empty
  mk job/x.0.trace --scenario made-sync --rank 0 --host nodeA --pid 100 >/dev/null
  mk job/x.1.trace --scenario same-stream --rank 1 --host nodeB --pid 200 >/dev/null
  mk job/x.0.1.trace --scenario busy --rank 2 --host nodeB --pid 300 >/dev/null
  echo notes >job/README
  mkfifo job/y.trace
  for f in text json; do
    run_pl 0 report --format $f job/x.0.1.trace job/x.0.trace job/x.1.trace
    mv out want.$f
    run_pl 0 report --format $f job
    cmp -s out want.$f || fail "report --format $f DIR differs from its files named one by one"
    [ "$(cat err)" = "pagelock: report: skipped 1 *.trace entry in 'job' that is not a regular file (FIFO, socket, device or directory)" ] || fail "skip message: $(cat err)"
  done
  has_out '"pid": 300'
  run_pl 0 report job/
  has_out "== total over 3 processes =="
  run_pl 2 report empty
  [ "$(cat err)" = "pagelock: report: no *.trace file in 'empty'" ] || fail "empty directory: $(cat err)"
  ;;
report_big_gpu)
  # One million COPY records and their one million GPU records (plus
  # 100000 kernels): wall time and peak memory of the report, with GPU
  # records in batches after their COPYs (as the shim writes them), then
  # with every GPU record after the last COPY (the join's worst case).
  for how in batched late; do
    if [ $how = late ]; then mk big.trace --big 1000000 --late >/dev/null
    else mk big.trace --big 1000000 >/dev/null; fi
    size=$(wc -c <big.trace)
    start=$(date +%s%N)
    if [ -x /usr/bin/time ]; then
      /usr/bin/time -v "$PL" report big.trace >out 2>err || fail "report failed"
      rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' err)
    else
      "$PL" report big.trace >out 2>err || fail "report failed"
      rss=unknown
    fi
    end=$(date +%s%N)
    ms=$(( (end - start) / 1000000 ))
    echo "report of 1000000 COPY + 1100000 GPU records, $how ($size bytes): $ms ms, peak RSS ${rss} KiB"
    has_out "copies: 1000000 calls"
    has_out "GPU join: 1000000 of 1000000 copy calls matched their GPU copies"
    has_out "verdict: pageable copies made 750000 async calls synchronous"
  done
  ;;
run_no_trace)
  run_pl 0 run true
  has_err "pagelock: no trace was written (the program made no CUDA copies, or the shim was not loaded"
  # where no GPU answers, the way to try it anyway: the fake CUDA
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    has_err "pagelock: no GPU answers here; to try pagelock on this machine, run the program over the fake CUDA (simulated timings): LD_LIBRARY_PATH=$(cd "$B" && pwd)/fakecuda pagelock run ..."
  fi
  LD_LIBRARY_PATH="$B/fakecuda" "$PL" run true >out 2>err || fail "run true over the fake CUDA"
  no_err "no GPU answers"
  ;;
run_manifest)
  # The child writes a trace and lists it, as the shim would; it also
  # reports the environment pagelock gave it.
  mk t.trace >/dev/null
  cat >child.sh <<EOF
#!/bin/sh
echo "\$PAGELOCK_MANIFEST" >manifest-path
echo "$T/t.trace" >>"\$PAGELOCK_MANIFEST"
echo "$T/t.trace" >>"\$PAGELOCK_MANIFEST"
printf '%s\n' "\$LD_PRELOAD" "\$PAGELOCK_MODE" "\$CUDA_INJECTION64_PATH" "\${PAGELOCK_OUTPUT:-unset}" >env.txt
exit 5
EOF
  chmod +x child.sh
  LD_PRELOAD="$PAGELOCK_SHIM" CUDA_INJECTION64_PATH=/keep/me.so "$PL" run --mode auto -o out.%p.trace ./child.sh >out 2>err
  [ $? = 5 ] || fail "status not passed through"
  has_err "== pid 4242 /opt/app/bin/app"
  has_err "pagelock: trace written to $T/t.trace"
  [ "$(grep -c 'pagelock: trace written to' err)" = 1 ] || fail "duplicate manifest lines not merged"
  shim=$(readlink -f "$PAGELOCK_SHIM")
  [ "$(sed -n 1p env.txt)" = "$shim:$PAGELOCK_SHIM" ] || [ "$(sed -n 1p env.txt)" = "$shim" ] || fail "LD_PRELOAD: $(sed -n 1p env.txt)"
  [ "$(sed -n 2p env.txt)" = auto ] || fail "PAGELOCK_MODE: $(sed -n 2p env.txt)"
  [ "$(sed -n 3p env.txt)" = /keep/me.so ] || fail "CUDA_INJECTION64_PATH overwritten"
  [ "$(sed -n 4p env.txt)" = "$T/out.%p.trace" ] || fail "PAGELOCK_OUTPUT: $(sed -n 4p env.txt)"
  [ -e "$(cat manifest-path)" ] && fail "manifest not removed"
  # an existing LD_PRELOAD entry is kept after the shim
  echo 'printf "%s\n" "$LD_PRELOAD" >env2.txt' >c2.sh
  LD_PRELOAD=/nonexistent/keep.so "$PL" run sh c2.sh >out 2>err
  [ "$(cat env2.txt)" = "$shim:/nonexistent/keep.so" ] || fail "LD_PRELOAD: $(cat env2.txt)"
  ;;
demo_no_shim)
  # The demo workload over whatever CUDA this machine has (fake CUDA without
  # a GPU), with a stand-in shim: no traces, but the workload must pass.
  [ -x "$B/pagelock-demo" ] || { echo "SKIP: no pagelock-demo"; exit 77; }
  run_pl 0 demo --quick
  has_out "pagelock-demo: all bytes round-tripped"
  has_out "pagelock: no trace was written"
  if grep -q "no GPU found" out; then
    has_out "pagelock: no GPU found: running the demo over fake CUDA; timings are simulated."
  fi
  ;;
demo)
  # End to end: the real shim over the demo workload.
  [ -x "$B/pagelock-demo" ] && [ -r "$B/libpagelock.so" ] || { echo "SKIP: no demo or shim"; exit 77; }
  unset PAGELOCK_SHIM PAGELOCK_NO_ADDR2LINE
  run_pl 0 demo --quick -o "$T/demo.%p.trace"
  has_out "pagelock-demo: all bytes round-tripped"
  has_out "async copies were made synchronous by pageable memory"
  has_out "pageable copies by call site (worst first):"
  # names of the demo's own (static) functions need addr2line
  if command -v addr2line >/dev/null 2>&1; then has_out "run_phase"; fi
  no_err "unknown variable"
  has_out "pagelock: trace written to $T/demo."
  if grep -q "no GPU found" out; then has_out "(simulated timings)"; fi
  run_pl 0 demo --quick --mode auto -o "$T/auto.%p.trace"
  has_out "mode auto"
  ;;
help_options)
  # docs/usage.md's configuration table is include/pagelock/options.def
  # written out (pl_optdump), byte for byte; `pagelock --help` lists every
  # option of that list with its default and valid values, and no other
  # PAGELOCK_ name.
  usage=$(dirname "$0")/../../docs/usage.md
  [ -r "$usage" ] || fail "no docs/usage.md at $usage"
  "$B/pl_optdump" >table || fail "pl_optdump failed: $(cat table)"
  awk '/^\| variable \| default \|/ { on = 1 } on && !/^\|/ { exit } on' "$usage" >usage_table
  diff -u usage_table table >table.diff ||
    fail "docs/usage.md's configuration table differs from include/pagelock/options.def (paste the output of pl_optdump over it): $(cat table.diff)"
  run_pl 0 --help
  grep '^| `PAGELOCK_' table | while IFS='|' read -r _ name def values meaning _; do
    name=$(printf '%s' "$name" | tr -d ' `')
    # the option's line and its continuation lines
    awk -v n="$name" '$1 == n { on = 1; print; next }
      on && /^                           [^ ]/ { print; next } { on = 0 }' out >blk
    [ -s blk ] || fail "--help does not list $name"
    # the default and the meaning whole: never cut (COPY_THREADS' default
    # once ended in "queued behind earli")
    joined=$(tr '\n' ' ' <blk | tr -s ' ')
    for part in "$def" "$meaning"; do
      tail=$(printf '%s' "$part" | tr -d '`' | sed 's/ *$//; s/)$//; s/^ *(//' | awk '{ for (i = NF - 3; i <= NF; i++) if (i > 0) printf "%s%s", $i, (i < NF ? " " : "") }')
      case $joined in *"$tail"*) ;; *) fail "--help: $name lacks the end of '$part' ('$tail'): $joined" ;; esac
    done
    d=$(printf '%s' "$def" | sed -n 's/^ *`\([^`]*\)`.*/\1/p')
    if [ -n "$d" ]; then
      tr '\n' ' ' <blk | tr -s ' ' | grep -qF -e "(default $d)" -e "(default $d;" || fail "--help: $name lacks '(default $d)': $(cat blk)"
    fi
    for v in $(printf '%s' "$values" | tr -d '`,'); do
      case $v in a|at|least|size|path|pattern) continue ;; esac
      grep -qF -- "$v" blk || fail "--help: $name lacks the valid value '$v': $(cat blk)"
    done
  done || exit 1
  for n in $(grep -o '^  PAGELOCK_[A-Z0-9_]*' out); do
    grep -qF "| \`$n\` |" table || fail "--help shows $n, which include/pagelock/options.def does not list"
  done
  ;;
mode_env)
  # PAGELOCK_MODE from the environment is the mode unless --mode is given;
  # the child gets the canonical name (the shim matches without case too).
  echo 'echo "$PAGELOCK_MODE" >>modes' >m.sh
  PAGELOCK_MODE=stage "$PL" run sh m.sh >out 2>err || fail "PAGELOCK_MODE=stage: exit $?"
  PAGELOCK_MODE=stage "$PL" run --mode off sh m.sh >out 2>err || fail "--mode off: exit $?"
  PAGELOCK_MODE=Auto "$PL" run sh m.sh >out 2>err || fail "PAGELOCK_MODE=Auto: exit $?"
  PAGELOCK_MODE= "$PL" run sh m.sh >out 2>err || fail "empty PAGELOCK_MODE: exit $?"
  "$PL" run sh m.sh >out 2>err || fail "no PAGELOCK_MODE: exit $?"
  [ "$(tr '\n' ' ' <modes)" = "stage off auto observe observe " ] || fail "modes seen: $(tr '\n' ' ' <modes)"
  # a bad value is refused before the program runs, as --mode's are
  PAGELOCK_MODE=fast "$PL" run sh -c 'echo ran >ran' >out 2>err
  [ $? = 2 ] || fail "bad PAGELOCK_MODE not refused"
  [ "$(cat err)" = "pagelock: invalid PAGELOCK_MODE='fast' in the environment (valid: observe, stage, register, auto, off; --mode overrides it)" ] || fail "message: $(cat err)"
  [ -e ran ] && fail "the program ran despite a bad PAGELOCK_MODE"
  PAGELOCK_MODE=fast "$PL" demo --quick >out 2>err
  [ $? = 2 ] || fail "demo: bad PAGELOCK_MODE not refused"
  has_err "pagelock: invalid PAGELOCK_MODE='fast' in the environment"
  # --mode wins over a bad environment value
  PAGELOCK_MODE=fast "$PL" run --mode=register sh m.sh >out 2>err || fail "--mode over a bad PAGELOCK_MODE: exit $?"
  [ "$(tail -n 1 modes)" = register ] || fail "mode seen: $(tail -n 1 modes)"
  ;;
omp_spin)
  # Under the modes that stage the program gets GOMP_SPINCOUNT=10000 (idle
  # OpenMP threads would spin on the copy threads' cores), never over a
  # spin count or wait policy of its own, and PAGELOCK_OMP_SPIN says
  # otherwise.
  # The program lists a trace whose modules hold libgomp (PyTorch's wheel
  # name): the CLI's line about the spin count is said only then.
  mk gomp.trace --copies 4 --module /opt/torch/lib/libgomp-a34b3233.so.1 >/dev/null
  printf 'echo "${GOMP_SPINCOUNT:--}" >>w\necho "%s" >>"$PAGELOCK_MANIFEST"\n' "$T/gomp.trace" >w.sh
  said=0
  ran() { # MODE ENV...: runs w.sh; counts the CLI's line about it
    m=$1; shift
    env "$@" "$PL" run --mode "$m" sh w.sh >out 2>err || fail "$m $*: exit $?"
    grep -qF "the program ran with GOMP_SPINCOUNT=10000" err && said=$((said + 1))
  }
  unset OMP_WAIT_POLICY GOMP_SPINCOUNT PAGELOCK_OMP_SPIN
  ran observe X=1
  ran off X=1
  ran stage X=1
  ran register X=1
  ran auto X=1
  ran auto GOMP_SPINCOUNT=77
  ran auto OMP_WAIT_POLICY=active
  ran stage PAGELOCK_OMP_SPIN=keep
  ran observe PAGELOCK_OMP_SPIN=Short
  ran stage PAGELOCK_OMP_SPIN=short GOMP_SPINCOUNT=5
  [ "$(tr '\n' ' ' <w)" = "- - 10000 10000 10000 77 - - 10000 5 " ] ||
    fail "GOMP_SPINCOUNT seen: $(tr '\n' ' ' <w)"
  [ $said = 4 ] || fail "the line about it came $said times, not 4"
  # without libgomp in the trace (a C program's), or without a trace: no line
  mk plain.trace --copies 4 --module /usr/lib/libfoo.so.1 >/dev/null
  printf 'echo "%s" >>"$PAGELOCK_MANIFEST"\n' "$T/plain.trace" >p.sh
  "$PL" run --mode stage sh p.sh >out 2>err || fail "plain: exit $?"
  has_err "== pid 4242"
  no_err "GOMP_SPINCOUNT"
  "$PL" run --mode stage true >out 2>err || fail "no trace: exit $?"
  no_err "GOMP_SPINCOUNT"
  mk gomp2.trace --copies 4 --module /usr/lib/x86_64-linux-gnu/libgomp.so.1 >/dev/null
  printf 'echo "%s" >>"$PAGELOCK_MANIFEST"\n' "$T/gomp2.trace" >g.sh
  "$PL" run --mode auto sh g.sh >out 2>err || fail "libgomp.so.1: exit $?"
  has_err "the program ran with GOMP_SPINCOUNT=10000"
  PAGELOCK_OMP_SPIN=yes "$PL" run --mode auto sh -c 'echo ran >ran' >out 2>err
  [ $? = 2 ] || fail "bad PAGELOCK_OMP_SPIN not refused"
  [ "$(cat err)" = "pagelock: invalid PAGELOCK_OMP_SPIN='yes' in the environment (valid: short, keep)" ] || fail "message: $(cat err)"
  [ -e ran ] && fail "the program ran despite a bad PAGELOCK_OMP_SPIN"
  PAGELOCK_OMP_SPIN=yes "$PL" demo --quick >out 2>err
  [ $? = 2 ] || fail "demo: bad PAGELOCK_OMP_SPIN not refused"
  ;;
output_ctl)
  # The manifest lists one trace path per line: a control character in the
  # pattern is refused before the program runs, not found out after it.
  run_pl 2 run -o "$(printf 'a\nb.%%p.trace')" sh -c 'echo ran >ran'
  [ "$(cat err)" = 'pagelock: invalid -o '\''a\nb.%p.trace'\'': a trace path cannot hold control characters (this one has a newline)' ] || fail "message: $(cat err)"
  [ -e ran ] && fail "the program ran despite a newline in -o"
  PAGELOCK_OUTPUT="$(printf 'x\ty.trace')" "$PL" run sh -c 'echo ran >ran' >out 2>err
  [ $? = 2 ] || fail "a tab in PAGELOCK_OUTPUT not refused"
  has_err "pagelock: invalid PAGELOCK_OUTPUT 'x\\ty.trace': a trace path cannot hold control characters (this one has a tab)"
  [ -e ran ] && fail "the program ran despite a tab in PAGELOCK_OUTPUT"
  # the current directory is part of the path too
  d=$(printf 'new\nline')
  mkdir "$d" && cd "$d" || fail "mkdir"
  "$PL" run sh -c 'echo ran >ran' >../out 2>../err
  st=$?
  cd "$T" || fail "cd"
  [ $st = 2 ] || fail "a newline in the current directory not refused"
  has_err "pagelock: cannot write traces to '$T/new\\nline/': a trace path cannot hold control characters (this one has a newline); give -o a path without them"
  [ "$(wc -l <err)" = 1 ] || fail "more than one line"
  [ -e "$d/ran" ] && fail "the program ran"
  run_pl 0 run -o "$T/ok.%p.trace" true
  ;;
output_full)
  # A full filesystem is refused before the run: the shim would create the
  # trace and fail on its first write.  Needs a tmpfs of our own.
  command -v unshare >/dev/null 2>&1 || { echo "SKIP: no unshare"; exit 77; }
  mkdir full
  cat >full.sh <<'EOF'
mount -t tmpfs -o size=64k tmpfs full 2>/dev/null || exit 77
dd if=/dev/zero of=full/fill bs=4k >/dev/null 2>&1
"$1" run -o full/t.%p.trace sh -c 'echo ran >ran' >out 2>err
echo $? >status
EOF
  unshare -rm sh full.sh "$PL" 2>/dev/null
  [ $? = 77 ] || [ ! -s status ] && { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
  [ "$(cat status)" = 2 ] || fail "run over a full filesystem exited $(cat status)"
  [ "$(cat err)" = "pagelock: cannot write traces to 'full/': No space left on device" ] || fail "message: $(cat err)"
  [ -e ran ] && fail "the program ran"
  ;;
run_lost_trace)
  # A trace the program wrote but pagelock cannot read is not a success.
  : >empty.trace
  printf 'echo "%s" >>"$PAGELOCK_MANIFEST"\n' "$T/empty.trace" >lost.sh
  run_pl 2 run sh lost.sh
  has_err "pagelock: '$T/empty.trace' is empty"
  has_err "pagelock: the program exited 0, but 1 trace it wrote could not be reported: exit status 2"
  # the program's own failure wins
  printf 'exit 3\n' >>lost.sh
  run_pl 3 run sh lost.sh
  no_err "the program exited 0"
  # a manifest that is no longer a regular file is not read (nor waited on)
  printf 'rm -f "$PAGELOCK_MANIFEST"; mkfifo "$PAGELOCK_MANIFEST"\n' >fifo.sh
  timeout 10 "$PL" run sh fifo.sh >out 2>err
  [ $? = 2 ] || fail "a FIFO as manifest: exit $?"
  has_err "pagelock: cannot read the trace manifest"
  ;;
run_preload_order)
  # The shim goes first in LD_PRELOAD, even when listed after another
  # library (an allocator): ld.so binds malloc to the first that has it.
  shim=$(readlink -f "$PAGELOCK_SHIM")
  other=$(dirname "$shim")/libdl.so.2
  [ -r "$other" ] || other=$(dirname "$shim")/libpthread.so.0
  [ -r "$other" ] || fail "no second library to preload"
  echo 'echo "$LD_PRELOAD" >>pre' >p.sh
  LD_PRELOAD="$other:$PAGELOCK_SHIM" "$PL" run sh p.sh >out 2>err || fail "exit $?"
  LD_PRELOAD="$other $shim" "$PL" run sh p.sh >out 2>err || fail "exit $?"
  LD_PRELOAD="$other" "$PL" run sh p.sh >out 2>err || fail "exit $?"
  LD_PRELOAD="$shim::$other:$shim" "$PL" run sh p.sh >out 2>err || fail "exit $?"
  "$PL" run sh p.sh >out 2>err || fail "exit $?"
  printf '%s\n' "$shim:$other" "$shim:$other" "$shim:$other" "$shim:$other" "$shim" >want
  cmp -s pre want || fail "LD_PRELOAD seen: $(cat pre)"
  ;;
signal_terminal)
  # ^C on a terminal reaches the whole foreground process group: the
  # program stops, pagelock run reports what it wrote and exits 130.
  # SIGINT and SIGQUIT to pagelock run's own pid alone are ignored, as
  # time(1) does.  Each under a timeout: a hang fails the case.
  command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
  # A container or chroot without /dev/pts has no terminal to give the job.
  python3 -c 'import os; os.close(os.openpty()[0])' 2>/dev/null || { echo "SKIP: no pseudo-terminal (/dev/pts)"; exit 77; }
  mk t.trace >/dev/null
  printf '#!/bin/sh\necho "%s" >>"$PAGELOCK_MANIFEST"\necho ready\nexec sleep 20\n' "$T/t.trace" >job.sh
  chmod +x job.sh
  timeout 40 python3 - "$PL" "$T/job.sh" >out 2>err <<'EOF' || fail "python check failed"
import os, pty, select, signal, subprocess, sys, time
pl, job = sys.argv[1], sys.argv[2]

def dfl():
    # The job must start with default dispositions, whatever ran us.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)

def drain(fd, until=None, limit=15.0):
    got, end = b"", time.time() + limit
    while time.time() < end:
        if not select.select([fd], [], [], 0.1)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the terminal's last user is gone
            break
        if not chunk:
            break
        got += chunk
        if until and until in got:
            break
    return got

# ^C typed on pagelock run's controlling terminal.
pid, fd = pty.fork()
if pid == 0:
    dfl()
    os.execv(pl, [pl, "run", "--", job])
got = drain(fd, b"ready")
assert b"ready" in got, got
t0 = time.time()
os.write(fd, b"\x03")
got += drain(fd)
_, st = os.waitpid(pid, 0)
text = got.decode(errors="replace")
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 130, (st, text)
assert time.time() - t0 < 10, "the job did not stop at ^C"
assert "== pid 4242" in text and "pagelock: trace written to" in text, text

# SIGINT and SIGQUIT to pagelock run alone, then SIGINT to the group.
p = subprocess.Popen([pl, "run", "--", job], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, preexec_fn=dfl,
                     start_new_session=True)
assert p.stdout.readline() == b"ready\n"
os.kill(p.pid, signal.SIGINT)
os.kill(p.pid, signal.SIGQUIT)
time.sleep(0.3)
assert p.poll() is None, "pagelock run died of a signal sent to it alone"
os.killpg(p.pid, signal.SIGINT)
_, err = p.communicate(timeout=10)
assert p.returncode == 130, (p.returncode, err)
assert b"== pid 4242" in err and b"pagelock: trace written to" in err, err
EOF
  ;;
not_regular)
  # A FIFO, directory, device or socket named as a trace (or listed in a
  # manifest, or found in a directory) is refused at once with one line;
  # nothing may wait on it (timeout: a hang fails the case).
  mk good.trace >/dev/null
  mkfifo fifo.trace
  tpl() { want=$1; shift; timeout 10 "$PL" "$@" >out 2>err; got=$?; [ "$got" = "$want" ] || fail "pagelock $* exited $got, expected $want"; }
  tpl 2 report fifo.trace
  [ "$(cat err)" = "pagelock: 'fifo.trace' is a FIFO, not a trace file (a trace is a regular file written by libpagelock.so)" ] || fail "FIFO message: $(cat err)"
  tpl 2 report /dev/null
  [ "$(cat err)" = "pagelock: '/dev/null' is a character device, not a trace file (a trace is a regular file written by libpagelock.so)" ] || fail "device message: $(cat err)"
  # a directory stands for its *.trace files, as for compare
  tpl 0 report .
  [ "$(cat err)" = "pagelock: report: skipped 1 *.trace entry in '.' that is not a regular file (FIFO, socket, device or directory)" ] || fail "directory message: $(cat err)"
  has_out "== pid 4242"
  tpl 2 report good.trace fifo.trace
  has_out "== pid 4242"
  tpl 2 report --format html good.trace fifo.trace
  tpl 2 compare fifo.trace good.trace
  [ "$(cat err)" = "pagelock: 'fifo.trace' is a FIFO, not a trace file (a trace is a regular file written by libpagelock.so)" ] || fail "compare: $(cat err)"
  tpl 2 compare good.trace /dev/null
  has_err "'/dev/null' is a character device, not a trace file"
  # a run's directory holding non-regular *.trace entries: skipped, said once
  mkdir run1 run2
  cp good.trace run1/a.trace
  mkfifo run1/b.trace run2/x.trace
  mkdir run1/c.trace
  n=2
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' run1/d.trace || fail "socket"
    n=3
    tpl 2 report run1/d.trace
    [ "$(cat err)" = "pagelock: 'run1/d.trace' is a socket, not a trace file (a trace is a regular file written by libpagelock.so)" ] || fail "socket message: $(cat err)"
  fi
  tpl 0 compare run1 good.trace
  [ "$(cat err)" = "pagelock: compare: skipped $n *.trace entries in 'run1' that are not regular files (FIFO, socket, device or directory)" ] || fail "skip message: $(cat err)"
  has_out "traces"
  tpl 2 compare good.trace run2
  has_err "pagelock: compare: skipped 1 *.trace entry in 'run2' that is not a regular file"
  has_err "pagelock: compare: no *.trace file in 'run2'"
  # a FIFO listed in run's manifest
  printf 'echo "%s" >>"$PAGELOCK_MANIFEST"\n' "$T/fifo.trace" >f.sh
  tpl 2 run sh f.sh
  has_err "pagelock: '$T/fifo.trace' is a FIFO, not a trace file"
  ;;
report_d2d_peer)
  # Device-to-device and peer copies (several GPUs) are counted apart from
  # host<->device copies, on one line and in totals.device_to_device and
  # totals.peer, and never as pageable.
  mk d.trace --copies 0 --copy 3:h2d:pageable:pass:mode:4M:100000 \
    --copy 2:d2d:none:pass:none:3M:5000 --copy 5:peer:none:pass:none:1M:7000 >/dev/null
  run_pl 0 report d.trace
  [ -s err ] && fail "unexpected stderr"
  has_out "device-to-device: 2 copies, 6.0 MiB; peer: 5 copies, 5.0 MiB"
  has_out "copies: 10 calls, 23.0 MiB,"
  grep -q '^  peer     unknown            5 ' out || fail "no peer row in the split table: $(cat out)"
  run_pl 0 report --format json d.trace
  python3 - out <<'PYEOF' || fail "json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
M = 1 << 20
for t in (d["processes"][0]["totals"], d["totals"]):
    assert t["device_to_device"] == {"copies": 2, "bytes": 6 * M, "host_ns": 10000}, t
    assert t["peer"] == {"copies": 5, "bytes": 5 * M, "host_ns": 35000}, t
    assert t["pageable"]["copies"] == 3, t["pageable"]
    assert t["copies"] == 10, t
PYEOF
  # none: no line
  mk h.trace --copies 0 --copy 3:h2d:pageable:pass:mode:4M:100000 >/dev/null
  run_pl 0 report h.trace
  grep -q "^device-to-device:" out && fail "a device-to-device line without such copies"
  ;;
report_copy_runs)
  # Version 4: a COPY record that stands for a run of repeated small copies
  # counts as its count copies of its bytes each, everywhere; the report
  # says whose host time is an estimate.  A version-3 trace (COPY records
  # end before count) reads as before: one copy a record, no estimate.
  mk r.trace --copies 0 --mode 3 \
    --copy 1:h2d:pageable:pass:small:4K:640000:64:8 \
    --copy 2:h2d:pageable:pass:cold:1M:1000000 >/dev/null
  run_pl 0 report r.trace
  [ -s err ] && fail "unexpected stderr"
  has_out "copies: 66 calls, 2.2 MiB, 2.640 ms of host time inside copy calls"
  has_out "  H2D      pageable          66     2.2 MiB      2.640 ms"
  has_out "routes: 66 copies passed through (2.2 MiB), 0 staged (0 B), 0 registered (0 B)"
  has_out "not registered:  2 copies    2.0 MiB  2.000 ms  cold:"
  has_out "not registered: 64 copies  256.0 KiB  0.640 ms  small:"
  has_out "66 async copies were made synchronous by pageable memory"
  has_out "     66  2.2 MiB      2.640 ms  0.89  H2D  step_0+0x20 (app)"
  [ "$(grep -c '^  (host time of 64 copies estimated from 8 timed: repeated small copies, 1 in 8 timed)$' out)" = 2 ] ||
    fail "not one estimate line under the totals and one under the site table"
  run_pl 0 report --format json r.trace
  python3 - out <<'PYEOF' || fail "json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["processes"][0]
M = 1 << 20
for t in (p["totals"], d["totals"]):
    assert (t["copies"], t["bytes"], t["host_ns"]) == (66, 64 * 4096 + 2 * M, 2640000), t
    assert t["estimated"] == {"copies": 64, "timed": 8}, t
    assert t["routes"]["pass"] == {"copies": 66, "bytes": 64 * 4096 + 2 * M, "host_ns": 2640000}, t
    assert t["not_registered"]["small"] == {"copies": 64, "bytes": 64 * 4096, "host_ns": 640000}, t
    assert t["pageable_async"]["copies"] == 66, t
s = p["call_sites"]
assert len(s) == 1 and s[0]["copies"] == 66 and s[0]["bytes"] == 64 * 4096 + 2 * M, s
assert s[0]["estimated"] == {"copies": 64, "timed": 8}, s
assert d["ranks"][0]["copies"] == 66, d["ranks"]
PYEOF
  mk v3.trace --v3 --copies 0 --mode 3 \
    --copy 1:h2d:pageable:pass:small:4K:640000:64:8 \
    --copy 2:h2d:pageable:pass:cold:1M:1000000 >/dev/null
  run_pl 0 report v3.trace
  [ -s err ] && fail "unexpected stderr (version 3)"
  has_out "copies: 3 calls, 2.0 MiB, 2.640 ms of host time inside copy calls"
  has_out "not registered: 1 copies  4.0 KiB  0.640 ms  small:"
  grep -q "estimated" out && fail "an estimate in a version-3 trace"
  run_pl 0 report --format json v3.trace
  python3 - out <<'PYEOF' || fail "json check failed (version 3)"
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
assert p["trace_version"] == 3 and p["malformed_records"] == 0, p
assert p["totals"]["copies"] == 3 and "estimated" not in p["totals"], p["totals"]
assert "estimated" not in p["call_sites"][0], p["call_sites"]
PYEOF
  ;;
report_routes)
  # --mode auto: which route each copy took, why the pageable ones were not
  # registered (most host time first), the registration engine's counters.
  mk auto.trace --copies 0 --mode 3 \
    --copy 10:h2d:pageable:register:none:64M:2000000 \
    --copy 4:h2d:pageable:stage:shared:16M:3000000 \
    --copy 2:h2d:pageable:stage:budget:64M:5000000 \
    --copy 3:d2h:pageable:pass:small:4K:20000 \
    --copy 5:h2d:pageable:pass:cold:1M:100000 \
    --copy 6:h2d:pinned:pass:none:8M:2000 \
    --counters register_budget=32G,registrations=12,unregistrations=11,evictions=2,register_failures=1,register_ns=65000000,registered_bytes=64M,registered_bytes_high_water=640M >/dev/null
  run_pl 0 report auto.trace
  [ -s err ] && fail "unexpected stderr"
  sed -n '/^  D2H /,/made synchronous/p' out >got
  printf '%s\n' \
    "  D2H      pageable           3    12.0 KiB      0.060 ms" \
    "routes: 14 copies passed through (53.0 MiB), 6 staged (192.0 MiB), 10 registered (640.0 MiB)" \
    "not registered: 4 copies   64.0 MiB  12.000 ms  shared memory or a file mapping (DataLoader workers' batches): staged" \
    "not registered: 2 copies  128.0 MiB  10.000 ms  budget full (PAGELOCK_REGISTER_BUDGET), nothing idle to evict: staged" \
    "not registered: 5 copies    5.0 MiB   0.500 ms  cold: copied less than PAGELOCK_REGISTER_HOT of the buffer" \
    "not registered: 3 copies   12.0 KiB   0.060 ms  small: below PAGELOCK_STAGE_MIN, passed through" \
    "8 async copies were made synchronous by pageable memory, blocking the host 0.560 ms" >want
  cmp -s want got || fail "routes lines differ: $(diff want got)"
  has_out "registration: 12 ranges registered (65.000 ms), 11 unregistered, 2 evicted, 1 failed; 64.0 MiB still registered at exit, high water 640.0 MiB of a 32.0 GiB budget"
  has_out "advice: allocate these buffers with cudaHostAlloc/cudaMallocHost; 8 pageable copies were neither staged nor registered (see 'not registered' above)."
  grep -q "^staging:" out && fail "a staging line without staging counters"
  run_pl 0 report --format json auto.trace
  python3 - out <<'PYEOF' || fail "json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
t = d["processes"][0]["totals"]
M = 1 << 20
assert t["routes"] == {
    "pass": {"copies": 14, "bytes": 3 * 4096 + 5 * M + 6 * 8 * M, "host_ns": 572000},
    "stage": {"copies": 6, "bytes": 4 * 16 * M + 2 * 64 * M, "host_ns": 22000000},
    "register": {"copies": 10, "bytes": 640 * M, "host_ns": 20000000}}, t["routes"]
nr = t["not_registered"]
assert sorted(nr) == ["budget", "cold", "shared", "small"], nr
assert nr["shared"] == {"copies": 4, "bytes": 64 * M, "host_ns": 12000000}, nr
assert nr["budget"]["copies"] == 2 and nr["small"]["bytes"] == 3 * 4096, nr
assert sum(v["copies"] for v in nr.values()) == t["pageable"]["copies"] - t["registered"]
c = d["processes"][0]["counters"]
assert (c["register_budget"], c["registrations"], c["unregistrations"], c["evictions"],
        c["register_failures"], c["register_ns"], c["registered_bytes"],
        c["registered_bytes_high_water"]) == (32 << 30, 12, 11, 2, 1, 65000000, 64 * M, 640 * M), c
assert d["totals"]["routes"] == t["routes"] and d["totals"]["not_registered"] == nr
PYEOF
  # --mode stage: the routes, no reasons (the mode never registers), and no
  # registration line for a budget alone
  mk stage.trace --copies 4 --mode 1 --copy 2:h2d:pageable:stage:mode:64M:6000000 \
    --counters bytes_staged=128M,pool_bytes=64M,pool_high_water=64M,register_budget=16G >/dev/null
  run_pl 0 report stage.trace
  has_out "routes: 4 copies passed through (4.0 MiB), 2 staged (128.0 MiB), 0 registered (0 B)"
  grep -q "not registered" out && fail "reasons under --mode stage"
  grep -q "^registration:" out && fail "a registration line for a budget alone"
  has_out "staging: 128.0 MiB staged"
  # observe, nothing moved: neither in the text; JSON has both
  mk obs.trace --copies 8 >/dev/null
  run_pl 0 report obs.trace
  grep -q "^routes:\|not registered" out && fail "routes under observe"
  run_pl 0 report --format json obs.trace
  python3 - out <<'PYEOF' || fail "json check failed (observe)"
import json, sys
t = json.load(open(sys.argv[1]))["processes"][0]["totals"]
assert t["routes"]["pass"]["copies"] == 8 and t["routes"]["stage"]["copies"] == 0, t["routes"]
assert t["not_registered"] == {"unknown": {"copies": 6, "bytes": 6 << 20, "host_ns": 606000}}, t["not_registered"]
PYEOF
  ;;
report_escaped_paths)
  # Trace paths come from the command line or a run's manifest: any bytes.
  # Every stderr line quoting one shows control bytes escaped (escape.h).
  mk good.trace >/dev/null
  p=$(printf 'a\033[31mb')
  cp good.trace "$T/$p.trace"
  : >"$T/$p-empty.trace"
  printf 'echo "%s" >>"$PAGELOCK_MANIFEST"\necho "%s" >>"$PAGELOCK_MANIFEST"\n' \
    "$T/$p.trace" "$T/$p-empty.trace" >esc.sh
  run_pl 2 run sh esc.sh
  has_err "pagelock: trace written to $T/a\\x1b[31mb.trace"
  has_err "pagelock: '$T/a\\x1b[31mb-empty.trace' is empty"
  grep -q "$(printf '\033')" err && fail "a raw ESC on stderr"
  run_pl 2 report "$p-empty.trace"
  [ "$(cat err)" = "pagelock: 'a\\x1b[31mb-empty.trace' is empty (the traced program may have died before writing its trace header)" ] || fail "report: $(cat err)"
  # warnings quote the path too
  n=$(mk "$p-cut.trace" --no-end)
  run_pl 0 report "$p-cut.trace"
  [ "$(cat err)" = "pagelock: warning: 'a\\x1b[31mb-cut.trace' ends after $n complete records (the program may have died): report is partial" ] || fail "warning: $(cat err)"
  # compare: a run's directory holding such a name
  mkdir "run$p"
  : >"run$p/x$p.trace"
  run_pl 2 compare "run$p" good.trace
  [ "$(cat err)" = "pagelock: 'runa\\x1b[31mb/xa\\x1b[31mb.trace' is empty (the traced program may have died before writing its trace header)" ] || fail "compare: $(cat err)"
  ;;
gate_report)
  # --max-blocked=MS: exit 3 when pageable copies blocked the host longer
  # than MS in all (3 x 1 ms here; the pinned copies' 10 ms do not count),
  # every trace together, in every format.
  mk g.trace --copies 0 --copy 3:h2d:pageable:pass:mode:4M:1000000 \
    --copy 2:h2d:pinned:pass:none:4M:5000000 >/dev/null
  run_pl 0 report --max-blocked=3 g.trace
  has_out "copies: 5 calls"
  [ ! -s err ] || fail "stderr under the limit"
  run_pl 3 report --max-blocked=2.999 g.trace
  has_out "copies: 5 calls"
  [ "$(cat err)" = "pagelock: pageable copies blocked the host 3.000 ms in all, more than --max-blocked=2.999: exit status 3" ] ||
    fail "message: $(cat err)"
  run_pl 3 report g.trace --max-blocked 0 --format json
  has_out '"schema": "pagelock-report"'
  run_pl 0 report --max-blocked=6 g.trace g.trace
  run_pl 3 report --max-blocked=5.5 g.trace g.trace
  has_err "blocked the host 6.000 ms in all, more than --max-blocked=5.5"
  run_pl 3 report --max-blocked=1 --format html -o page.html g.trace
  grep -q "</html>" page.html || fail "no page written under a failed gate"
  # an unreadable trace is an error first
  run_pl 2 report --max-blocked=1 g.trace missing.trace
  no_err "--max-blocked"
  mk none.trace --copies 0 --copy 2:h2d:pinned:pass:none:4M:5000000 >/dev/null
  run_pl 0 report --max-blocked=0 none.trace
  ;;
gate_run)
  # run --max-blocked: judged after the report, only when the program
  # exited 0 (a failed program's own status wins).
  mk g.trace --copies 0 --copy 3:h2d:pageable:pass:mode:4M:1000000 >/dev/null
  printf 'echo "%s" >>"$PAGELOCK_MANIFEST"\nexit "${1:-0}"\n' "$T/g.trace" >g.sh
  run_pl 3 run --max-blocked=2 sh g.sh
  has_err "== pid 4242"
  has_err "pagelock: trace written to $T/g.trace"
  [ "$(tail -n 1 err)" = "pagelock: pageable copies blocked the host 3.000 ms in all, more than --max-blocked=2: exit status 3" ] ||
    fail "last line: $(tail -n 1 err)"
  run_pl 0 run --max-blocked=3 sh g.sh
  no_err "--max-blocked"
  run_pl 5 run --max-blocked=2 sh g.sh 5
  no_err "--max-blocked"
  run_pl 0 run --max-blocked=0 true
  run_pl 2 run --max-blocked=x true
  has_err "pagelock: run: invalid --max-blocked 'x'"
  ;;
report_wrap)
  # Sentences (verdicts, fixes, notes, advice) wrap at the terminal's
  # width, else COLUMNS, else 100, between words, continuation lines
  # indented under the sentence; tables do not wrap.  One prefix per note.
  w="a warning note long enough to wrap: the program put another file at descriptor 2, so pagelock logged nothing there, and this sentence goes on for a while"
  mk ms.trace --scenario made-sync >/dev/null
  mk n.trace --copies 20 --warning "$w" >/dev/null
  COLUMNS=1000 "$PL" report ms.trace n.trace >wide 2>err || fail "wide report"
  # wrapped, with continuation lines joined back, is the wide report
  unjoin() { awk '/^         [^ ]/ && prev ~ /^(verdict|warning): / || /^       [^ ]/ && prev ~ /^  fix: / ||
      /^        [^ ]/ && prev ~ /^advice: / || /^      [^ ]/ && prev ~ /^note: / {
      sub(/^ +/, ""); line = line " " $0; next }
    { if (NR > 1) print line; line = $0; prev = $0 } END { print line }' "$1"; }
  check_width() { # FILE WIDTH
    awk -v w="$2" '/^(verdict|  fix|note|warning|advice): |^(       |         |        |      )[^ 0-9]/ && length($0) > w { print; bad = 1 } END { exit bad }' "$1" >long ||
      fail "lines over $2 columns in $1: $(cat long)"
  }
  for cols in unset 60 132; do
    if [ $cols = unset ]; then
      env -u COLUMNS "$PL" report ms.trace n.trace >out 2>err || fail "report"
      width=100
    else
      COLUMNS=$cols "$PL" report ms.trace n.trace >out 2>err || fail "report"
      width=$cols
    fi
    check_width out $width
    unjoin out >joined
    cmp -s joined wide || fail "COLUMNS=$cols: the wrapped report joined is not the wide one: $(diff joined wide | head -20)"
  done
  env -u COLUMNS "$PL" report ms.trace >out 2>err
  [ "$(sed -n 3p out)" = "         would block about 8.100 ms less); pageable copies left the GPU 8.400 ms of copy time with" ] ||
    fail "verdict continuation: $(sed -n 2,4p out)"
  grep -q "^note: warning:" wide && fail "a double prefix: $(grep '^note: warning:' wide)"
  grep -q "^warning: a warning note long enough" wide || fail "no warning line: $(cat wide)"
  # a terminal's width wins over COLUMNS
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import os; os.close(os.openpty()[0])' 2>/dev/null; then
    COLUMNS=200 python3 - "$PL" "$T/ms.trace" >tty.out <<'PYEOF' || fail "pty check: $(cat tty.out)"
import fcntl, os, pty, re, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    # 72 columns, set on the terminal before pagelock starts
    fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 72, 0, 0))
    os.environ["NO_COLOR"] = "1"
    os.execv(sys.argv[1], [sys.argv[1], "report", sys.argv[2]])
got = b""
while True:
    try:
        b = os.read(fd, 65536)
    except OSError:
        break
    if not b:
        break
    got += b
os.waitpid(pid, 0)
lines = got.decode().replace("\r\n", "\n").split("\n")
prose = [l for l in lines if re.match(r"(verdict:|  fix:|advice:|note:|warning:| {6,9}[^ 0-9])", l)]
assert prose and all(len(l) <= 72 for l in prose), [l for l in prose if len(l) > 72]
assert any(len(l) > 60 for l in prose), prose
print("ok")
PYEOF
  fi
  ;;
man_page)
  # pagelock(1): written by the default build (pl_mkman, no help2man), with
  # every section, every option of every command and every PAGELOCK_
  # variable; it renders without a warning.
  man="$B/pagelock.1"
  [ -s "$man" ] || fail "no $man: the build did not write the man page"
  [ "$(zcat "$B/pagelock.1.gz")" = "$(cat "$man")" ] || fail "pagelock.1.gz is not pagelock.1"
  for sec in NAME SYNOPSIS DESCRIPTION COMMANDS OPTIONS ENVIRONMENT '"EXIT STATUS"' EXAMPLES '"SEE ALSO"'; do
    grep -qx ".SH $sec" "$man" || fail "no section $sec"
  done
  for c in run report compare demo doctor; do
    grep -qx ".SS $c" "$man" || fail "no command $c"
    "$PL" "$c" --help | sed -n '/^options:$/,/^$/s/^  \(-., \)\{0,1\} *--\([a-z-]*\).*/\2/p' >opts
    [ -s opts ] || fail "no options in $c --help"
    while read -r o; do
      grep -q "fB\\\\-\\\\-$o\\\\fR" "$man" || fail "the man page lacks $c --$o"
    done <opts
  done
  "$B/pl_optdump" | sed -n 's/^| `\(PAGELOCK_[A-Z0-9_]*\)`.*/\1/p' >vars
  [ "$(wc -l <vars)" -gt 20 ] || fail "pl_optdump listed $(wc -l <vars) variables"
  while read -r v; do grep -qx ".B $v" "$man" || fail "ENVIRONMENT lacks $v"; done <vars
  grep -q "^\.B 3$" "$man" || fail "EXIT STATUS lacks 3"
  command -v groff >/dev/null 2>&1 || { echo "SKIP: no groff (Debian groff-base) to render the man page"; exit 77; }
  groff -man -Tutf8 -ww -z "$man" 2>warn
  [ ! -s warn ] || fail "groff warns: $(cat warn)"
  MANWIDTH=80 groff -man -Tutf8 -rLL=80n "$man" 2>/dev/null | sed 's/.\x08//g' >page
  grep -q "^EXIT STATUS" page || fail "no EXIT STATUS in the rendered page"
  grep -q "pagelock report \[OPTIONS\] TRACE" page || fail "synopsis not rendered"
  if command -v man >/dev/null 2>&1; then
    MANWIDTH=80 man -l "$man" >page2 2>warn2 || fail "man -l failed: $(cat warn2)"
    grep -q "PAGELOCK_COPY_THREADS" page2 || fail "man -l: no environment"
  fi
  ;;
completion)
  # completion/pagelock.bash in bash: commands, options, modes, formats,
  # trace files; and its option lists are those of `pagelock CMD --help`.
  command -v bash >/dev/null 2>&1 || { echo "SKIP: no bash"; exit 77; }
  comp=$(dirname "$0")/../../completion/pagelock.bash
  [ -r "$comp" ] || fail "no $comp"
  mkdir sub && : >a.trace && : >b.trace && : >notes.txt
  # complete WORDS...: COMPREPLY for the last word, sorted, one a line
  complete_words() {
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _pagelock; [ ${#COMPREPLY[@]} = 0 ] || printf "%s\n" "${COMPREPLY[@]}" | sort' \
      sh "$comp" "$@" 2>&1
  }
  want() { got=$(complete_words "$@" | tr '\n' ' '); [ "$got" = "$W" ] || fail "completing '$*': '$got', want '$W'"; }
  W="report run " want pagelock r
  W="compare " want pagelock co
  W="auto " want pagelock run --mode au
  W="auto " want pagelock run --mode = au
  W="observe off " want pagelock demo -m o
  W="chrome " want pagelock report --format ch
  W="json text " want pagelock compare --format ""
  W="json " want pagelock report --format=j
  W="--fail-if-worse --format " want pagelock compare --f
  W="--max-blocked --mode " want pagelock run --m
  W="a.trace b.trace sub " want pagelock report ""
  W="a.trace " want pagelock compare b.trace -- a
  W="run " want pagelock help ru
  # after the program's name, pagelock's options are not offered
  W="" want pagelock run ./prog --mo
  for c in run report compare demo doctor; do
    "$PL" "$c" --help | sed -n '/^options:$/,/^$/p' >help
    { sed -n 's/^  \(-.\), .*/\1/p' help; sed -n 's/^  \(-., \)\{0,1\} *\(--[a-z-]*\).*/\2/p' help; } | sort >o1
    bash -c '. "$1"; _pagelock_opts "$2"' sh "$comp" "$c" | tr ' ' '\n' | sed '/^$/d' | sort >o2
    cmp -s o1 o2 || fail "completion's options of $c differ from its --help: $(diff o1 o2)"
  done
  ;;
*)
  echo "unknown case $CASE"
  exit 2
  ;;
esac
exit 0
