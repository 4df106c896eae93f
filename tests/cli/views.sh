#!/bin/sh
# views.sh BUILD_DIR CASE - CLI tests of `pagelock report --format
# html|chrome` and `pagelock compare`, over traces from pl_mkgputrace
# (version-2 traces with GPU records and round numbers) and pl_mktrace
# (copy calls only).  JSON and HTML are checked with python3; without it
# the cases are skipped (77).
set -u
B=$1
CASE=$2
PL="$B/pagelock"
MK="$B/pl_mktrace"
MG="$B/pl_mkgputrace"
command -v python3 >/dev/null 2>&1 || { echo "python3 not installed: skipped"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-views.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
export PAGELOCK_NO_ADDR2LINE=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

fail() { echo "FAIL [$CASE]: $*"; echo "--- stdout"; head -c 4000 out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }
run_pl() {
  want=$1; shift
  "$PL" "$@" >out 2>err
  got=$?
  [ "$got" = "$want" ] || fail "pagelock $* exited $got, expected $want"
}
has_out() { grep -qF -- "$1" out || fail "stdout lacks: $1"; }
has_err() { grep -qF -- "$1" err || fail "stderr lacks: $1"; }
# py SCRIPT: runs a python check with the file 'out' as sys.argv[1]
py() { python3 -c "$1" out || fail "python check failed"; }
gen() { "$MG" "$@" || fail "mkgputrace $* failed"; }

# The rows of `pagelock compare`'s text table by name, and row(NAME,
# CELLS...) asserting one of them: the start of a compare case's check.
COMPARE_ROWS='
import sys, re
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S.*?)\s{2,}(.*)$", line.rstrip())
    if m: rows[m.group(1)] = re.split(r"\s{2,}", m.group(2).strip())
def row(k, *v):
    assert rows.get(k) == list(v), (k, rows.get(k), v)
'

# Checks shared by every chrome output: valid JSON of the trace-event
# format, complete events with non-negative durations, every flow start
# matched by exactly one finish with the same id.
CHROME_COMMON='
import json, sys, collections
d = json.load(open(sys.argv[1], encoding="utf-8"))
ev = d["traceEvents"]
assert isinstance(ev, list)
for e in ev:
    assert e["ph"] in "XMsf", e
    if e["ph"] == "X":
        assert e["dur"] >= 0 and isinstance(e["ts"], (int, float)), e
s = collections.Counter(e["id"] for e in ev if e["ph"] == "s")
f = collections.Counter(e["id"] for e in ev if e["ph"] == "f")
assert s == f, (s, f)
assert all(v == 1 for v in s.values()), s
assert all(e.get("bp") == "e" for e in ev if e["ph"] == "f")
assert d["otherData"]["flows"] == len(s)
'

case $CASE in
chrome_basic)
  gen before.trace before
  run_pl 0 report --format chrome before.trace
  py "$CHROME_COMMON"'
X = [e for e in ev if e["ph"] == "X"]
calls = [e for e in X if e["cat"] == "copy_call"]
gpu = [e for e in X if e["cat"] == "gpu_copy"]
kern = [e for e in X if e["cat"] == "kernel"]
assert len(calls) == 8 and len(gpu) == 8 and len(kern) == 4, (len(calls), len(gpu), len(kern))
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
assert sorted(names.values()) == ["GPU 0 stream 7", "thread 100 (copy calls)"], names
pn = [e["args"]["name"] for e in ev if e["name"] == "process_name"]
assert pn == ["app<&>\" (pid 4242)"], pn
assert {e["pid"] for e in X} == {4242}
assert all(names[(e["pid"], e["tid"])] == "thread 100 (copy calls)" for e in calls)
assert all(names[(e["pid"], e["tid"])] == "GPU 0 stream 7" for e in gpu + kern)
# times: the first call at +1 ms from the trace start, its GPU copy 100 us
# later (GPU times came through a CLOCK record 5 s ahead), 10 ms long
c0 = min(calls, key=lambda e: e["ts"]); g0 = min(gpu, key=lambda e: e["ts"])
assert abs(c0["ts"] - 1000.0) < 1e-6 and abs(c0["dur"] - 10200.0) < 1e-6, c0
assert abs(g0["ts"] - 1100.0) < 1e-6 and abs(g0["dur"] - 10000.0) < 1e-6, g0
assert g0["args"]["gbps"] == 8.0 and g0["args"]["src"] == "pageable"
# flows: one per call, from the call (its thread, its start) to its copy
byid = {}
for e in ev:
    if e["ph"] in "sf": byid.setdefault(e["id"], {})[e["ph"]] = e
assert len(byid) == 8
for fl in byid.values():
    s_, f_ = fl["s"], fl["f"]
    call = [c for c in calls if c["ts"] == s_["ts"] and c["tid"] == s_["tid"]]
    op = [g for g in gpu if g["ts"] == f_["ts"] and g["tid"] == f_["tid"]]
    assert len(call) == 1 and len(op) == 1, fl
    assert call[0]["args"]["gpu_correlation"] == op[0]["args"]["correlation"]
# a kernel name with markup and an invalid byte arrives escaped, not lost
evil = [e["name"] for e in kern if "evil" in e["name"]]
assert evil and "<script>" in evil[0] and "\ufffd" in evil[0], evil
'
  ;;
chrome_staged)
  gen staged.trace staged
  run_pl 0 report --format chrome staged.trace
  py "$CHROME_COMMON"'
X = [e for e in ev if e["ph"] == "X"]
calls = [e for e in X if e["cat"] == "copy_call"]
assert len(calls) == 1 and "staged" in calls[0]["args"]["flags"]
s = [e for e in ev if e["ph"] == "s"]
f = [e for e in ev if e["ph"] == "f"]
# four chunks, each LINKed twice: four arrows, all from the one call
assert len(s) == 4 and len(f) == 4, (len(s), len(f))
assert all(e["ts"] == calls[0]["ts"] and e["tid"] == calls[0]["tid"] for e in s)
chunks = sorted(e["ts"] for e in X if e["cat"] == "gpu_copy")
assert sorted(e["ts"] for e in f) == chunks, chunks
'
  ;;
chrome_multi)
  # two ranks whose traces carry the same pid (two hosts): two processes
  gen r0.trace before --pid 77 --rank 0
  gen r1.trace after --pid 77 --rank 1
  run_pl 0 report --format chrome r0.trace r1.trace
  py "$CHROME_COMMON"'
pn = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert len(pn) == 2, pn
assert sorted(pn.values()) == ["app<&>\" rank 0 (pid 77)", "app<&>\" rank 1 (pid 77)"], pn
for pid in pn:
    X = [e for e in ev if e["ph"] == "X" and e["pid"] == pid]
    assert len(X) == 20, (pid, len(X))
tracks = {(e["pid"], e["args"]["name"]) for e in ev if e["name"] == "thread_name"}
assert len(tracks) == 5, tracks  # rank 1 copies run on their own stream 8
assert len([e for e in ev if e["ph"] == "s"]) == 16
'
  ;;
chrome_no_gpu)
  # a trace without GPU records (version-1 style), a missing file: still a
  # valid document, the loader's message, exit 2
  "$MK" v1.trace --copies 10 >/dev/null || fail "mktrace failed"
  run_pl 2 report --format chrome v1.trace missing.trace
  has_err "pagelock: cannot open 'missing.trace': No such file or directory"
  py "$CHROME_COMMON"'
X = [e for e in ev if e["ph"] == "X"]
assert len(X) == 10 and all(e["cat"] == "copy_call" for e in X)
assert not [e for e in ev if e["ph"] in "sf"]
'
  run_pl 2 report --format chrome missing.trace
  py "$CHROME_COMMON"'
assert ev == []
'
  ;;
gpu_bound)
  # tests/gpu/bound.py, what bound a pattern's copies (patterns.sh prints
  # it per variant), over round numbers: one iteration of each scenario,
  # which starts at mono 1001 ms.  before: DMA 10 + 5 ms of 30 (8 GB/s),
  # 0.4 ms in calls with no copy running, a 10 ms kernel; after: pinned
  # copies 2.4 ms of 10.5, 20 us of calls; staged: one 8 ms call in which
  # four 0.32 ms chunk copies ran, of a 10 ms stretch.
  BP="$(dirname "$0")/../gpu/bound.py"
  t=1001000000
  for sc in before after staged; do gen $sc.trace $sc --iters 1 >/dev/null; done
  python3 "$BP" before.trace "$t-$((t + 30000000))" >out 2>err || fail "bound.py before"
  has_out "bound: the DMA dma=50.0% (8.0 GB/s) staging=0.0% driver=1.3% program=48.7% kernels=33.3%"
  python3 "$BP" after.trace "$t-$((t + 10500000))" >out 2>err || fail "bound.py after"
  has_out "bound: the program between copies dma=22.9% (50.0 GB/s) staging=0.0% driver=0.2% program=77.0% kernels=95.2%"
  python3 "$BP" staged.trace "$t-$((t + 10000000))" >out 2>err || fail "bound.py staged"
  has_out "bound: host memory (staging copies) dma=12.8% (50.0 GB/s) staging=67.2% driver=0.0% program=20.0% kernels=90.0%"
  # two windows, the second beyond the trace: only time counts, so the
  # shares of the first halve and the program takes the rest
  python3 "$BP" staged.trace "$t-$((t + 10000000)),$((t + 50000000))-$((t + 60000000))" >out 2>err ||
    fail "bound.py two windows"
  has_out "bound: the program between copies dma=6.4% (50.0 GB/s) staging=33.6% driver=0.0% program=60.0% kernels=45.0%"
  # --timeline K: what ran in window K, then the bound of that window alone
  python3 "$BP" staged.trace "$t-$((t + 10000000)),$((t + 50000000))-$((t + 60000000))" --timeline 0 \
    >out 2>err || fail "bound.py --timeline"
  [ "$(wc -l <out)" = 7 ] || fail "--timeline: want 6 events and the bound line, got $(cat out)"
  has_out "       0.0     8000.0    8000.0  call, staged"
  has_out "    7000.0     7320.0     320.0  gpu copy 16000000 B"
  has_out "       0.0     9000.0    9000.0  kernel"
  has_out "bound: host memory (staging copies) dma=12.8% (50.0 GB/s) staging=67.2% driver=0.0% program=20.0% kernels=90.0%"
  python3 "$BP" staged.trace "$t-$((t + 10000000))" --timeline 1 >out 2>err; [ $? = 2 ] || fail "--timeline 1 of 1: not exit 2"
  has_err "bad --timeline '1': want a window number from 0 to 0"
  "$MK" sa.trace --scenario sampled >/dev/null || fail "mktrace failed"
  python3 "$BP" sa.trace "1-99999999999999" >out 2>err || fail "bound.py sampled"
  has_out "bound: unmeasured (GPU timing sampled inside the timed stretch)"
  "$MK" plain.trace >/dev/null || fail "mktrace failed"
  python3 "$BP" plain.trace "1-99999999999999" >out 2>err || fail "bound.py plain"
  has_out "bound: unmeasured (no GPU timing in the trace)"
  # bad input: one line naming the problem, exit 2
  python3 "$BP" before.trace "5-3" >out 2>err; [ $? = 2 ] || fail "bad windows: not exit 2"
  has_err "bad windows '5-3': want start-end[,start-end...] with start < end"
  echo "not a trace" >text
  python3 "$BP" text "1-2" >out 2>err; [ $? = 2 ] || fail "not a trace: not exit 2"
  has_err "not a pagelock trace"
  ;;
chrome_sampled)
  # sampled GPU timing: each pause a slice on a track of its own, clipped to
  # the trace (the second lasts to END); +11 ms and +21 ms after the start
  "$MK" sa.trace --scenario sampled >/dev/null || fail "mktrace failed"
  run_pl 0 report --format chrome sa.trace
  py "$CHROME_COMMON"'
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
P = [e for e in ev if e["ph"] == "X" and e["cat"] == "gpu_sampling"]
got = [(e["name"], e["ts"], e["dur"], e["args"]["ops_per_s"], names[(e["pid"], e["tid"])]) for e in P]
assert got == [("GPU timing paused", 11000.0, 5000.0, 61000, "GPU timing (sampled)"),
               ("GPU timing paused", 21000.0, 10000.0, 48000, "GPU timing (sampled)")], got
'
  # no pause, no track
  gen before.trace before
  run_pl 0 report --format chrome before.trace
  grep -q "gpu_sampling" out && fail "a pause track for a trace that was not sampled"
  ;;
html_sampled)
  "$MK" sa.trace --scenario sampled >/dev/null || fail "mktrace failed"
  run_pl 0 report --format html sa.trace
  has_out '<p class="note">GPU timing sampled: 1 window, 51.6% of the run traced (the program issued up to 61000 GPU operations a second, more than PAGELOCK_CUPTI_MAX_RATE, where tracing every one would slow it); GPU times below cover the windows only, host times every copy.</p>'
  has_out "2 copy calls joined to their GPU ops (2 without one; 4 more ran while GPU timing was paused)"
  gen before.trace before
  run_pl 0 report --format html before.trace
  grep -q "GPU timing sampled\|timing was paused" out && fail "sampling named for a trace that was not sampled"
  ;;
html_basic)
  gen before.trace before
  run_pl 0 report --format html -o page.html before.trace
  [ -s page.html ] || fail "no page.html"
  [ ! -s out ] || fail "stdout not empty with -o"
  cp page.html out
  has_out "GPU timing: on"
  has_out "pageable copies made 8 async calls synchronous"
  has_out "GPU 0 timeline"
  has_out "thread 100 calls"
  has_out "stream 7 ("
  has_out "Test GPU &lt;H200&gt;"
  has_out "<th>made sync</th>"
  has_out "evil&lt;&quot;&amp;&#39;&gt;(float*) &#xfffd;&lt;/title&gt;&lt;script&gt;"
  py '
import sys, re
h = open(sys.argv[1], encoding="utf-8").read()
assert h.startswith("<!DOCTYPE html>") and h.rstrip().endswith("</html>")
low = h.lower()
# self-contained: no script, nothing to fetch
assert "<script" not in low
for bad in ("src=", "href=\"http", "url(", "@import", "<link"):
    assert bad not in low, bad
assert low.count("<svg") == 1
rects = re.findall(r"<rect [^>]*fill=\"(#[0-9a-f]{6})\"", h)
# 8 calls + 8 GPU copies, uploads and downloads apart
assert rects.count("#d62728") == 8 and rects.count("#ff7f0e") == 8, rects
assert rects.count("#9467bd") == 4  # kernels
# the legend names every colour
for c in ("pageable upload (H2D)", "pageable download (D2H)", "pinned upload (H2D)",
          "pinned download (D2H)", "kernel", "memset"):
    assert c in h, c
assert "banner" not in h.split("</style>")[1], "a simulated banner for a GPU trace"
# axis ticks
assert re.search(r">20 ms</text>", h), "no 20 ms tick"
'
  ;;
html_stdout_multi)
  gen r0.trace before --pid 77 --rank 0
  gen r1.trace after --pid 78 --rank 1
  run_pl 0 report --format html r0.trace r1.trace
  py '
import sys, re
h = open(sys.argv[1], encoding="utf-8").read()
assert h.count("<section") == 2, h.count("<section")
assert "<h2>Processes</h2>" in h
assert h.count("<svg") == 2
assert re.search(r"pid 77, rank 0", h) and re.search(r"pid 78, rank 1", h)
assert "#1f77b4" in h  # rank 1 copies are pinned
'
  ;;
html_no_gpu)
  "$MK" v1.trace --copies 12 >/dev/null || fail "mktrace failed"
  run_pl 0 report --format html v1.trace
  has_out "12 copy calls"
  has_out "thread 42 calls"
  py '
import sys
h = open(sys.argv[1], encoding="utf-8").read()
assert "GPU timing: " in h and "status on" not in h
assert "<svg" in h and "#d62728" in h and "#9467bd" not in h.split("</p>", 3)[-1].split("<svg", 1)[-1]
'
  ;;
html_large)
  # 20000 ops: binned per pixel column, so the page stays small
  gen big.trace before --iters 4000
  run_pl 0 report --format html -o big.html big.trace
  size=$(wc -c <big.html)
  [ "$size" -lt 300000 ] || fail "big.html is $size bytes"
  cp big.html out
  has_out "binned per pixel column"
  py '
import sys
h = open(sys.argv[1], encoding="utf-8").read()
assert "<path fill=\"#d62728\"" in h and "<path fill=\"#ff7f0e\"" in h
assert "<path fill=\"#9467bd\"" in h
assert h.count("<title>") < 100
'
  ;;
report_output_errors)
  gen before.trace before
  run_pl 2 report --format html -o /nonexistent/dir/page.html before.trace
  has_err "pagelock: cannot write '/nonexistent/dir/page.html'"
  run_pl 2 report --format svg before.trace
  has_err "pagelock: report: invalid --format 'svg' (valid: text, json, html, chrome)"
  run_pl 2 report -o
  has_err "pagelock: report: option '-o' needs a value (FILE)"
  ;;
compare_text)
  gen before.trace before
  gen after.trace after
  run_pl 0 compare before.trace after.trace
  py "$COMPARE_ROWS"'
row("traces", "1", "1")
row("wall time (trace window)", "122.000 ms", "44.000 ms", "0.36x")
row("host blocked in copies", "61.600 ms", "0.080 ms", "0.00x")
row("copy calls", "8", "8", "1.00x")
row("pageable copies", "8", "0", "0.00x")
row("exposed copy time (GPU)", "60.000 ms", "0.000 ms", "0.00x")
row("copy time hidden under kernels", "0.0%", "100.0%", "+100.0 pts")
row("H2D pageable GB/s, copies >= 1M", "8.00", "-", "-")
row("H2D pinned GB/s, copies >= 1M", "-", "50.00", "-")
row("D2H pageable GB/s, copies >= 1M", "8.00", "-", "-")
row("D2H pinned GB/s, copies >= 1M", "-", "50.00", "-")
row("staged bytes", "0 B", "0 B", "-")
'
  ;;
compare_sampled)
  # a sampled run's GPU rows cover its windows only: compare says so
  gen before.trace before
  gen after.trace after
  "$MK" sa.trace --scenario sampled >/dev/null || fail "mktrace failed"
  run_pl 0 compare before.trace sa.trace
  has_out "GPU timing was sampled in the after run (1 of 1 traces): exposed and hidden copy time and GPU bandwidths there cover the tracing windows only."
  run_pl 0 compare sa.trace -- before.trace after.trace
  has_out "GPU timing was sampled in the before run (1 of 1 traces): exposed"
  run_pl 0 compare before.trace after.trace
  grep -q "sampled" out && fail "sampling named when neither run was sampled"
  run_pl 0 compare --format json before.trace -- sa.trace after.trace
  py '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["before"]["sampled_traces"] == 0 and d["after"]["sampled_traces"] == 1, d
assert d["after"]["traces"] == 2
'
  ;;
compare_json)
  gen before.trace before
  gen after.trace after
  gen staged.trace staged
  run_pl 0 compare --format json before.trace staged.trace
  py '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "pagelock-compare" and d["schema_version"] == 1
b, a, r = d["before"], d["after"], d["ratios"]
assert b["wall_ns"] == 122000000 and a["wall_ns"] == 12000000
assert b["host_blocked_ns"] == 61600000 and a["host_blocked_ns"] == 8000000
assert b["pageable_copies"] == 8 and a["pageable_copies"] == 1
assert a["staged_bytes"] == 64000000 and b["staged_bytes"] == 0
assert b["h2d_pageable_median_gbps"] == 8.0 and a["h2d_pinned_median_gbps"] == 50.0
assert b["hidden_copy_pct"] == 0.0 and a["hidden_copy_pct"] == 100.0
assert r["hidden_copy_pct_delta_pts"] == 100.0
assert abs(r["host_blocked_ns"] - 8000000 / 61600000) < 1e-4
assert r["staged_bytes"] is None and r["h2d_pinned_median_gbps"] is None
'
  ;;
html_readable)
  # A simulated trace gets a visible banner; uploads and downloads have
  # colours of their own; every stream row holds a drawn op and says how
  # many it has.
  "$MK" sim.trace --copies 0 --simulated --copy 3:h2d:pageable:pass:mode:4M:100000 \
    --copy 2:d2h:pageable:pass:mode:4M:100000 --copy 2:d2h:pinned:pass:none:4M:1000 >/dev/null ||
    fail "mktrace failed"
  run_pl 0 report --format html sim.trace
  py '
import re, sys
h = open(sys.argv[1], encoding="utf-8").read()
body = h.split("</style>")[1]
assert body.count("<p class=\"banner\">Simulated timings: recorded over the fake CUDA") == 1, body[:2000]
assert ".banner{" in h
rects = re.findall(r"<rect [^>]*fill=\"(#[0-9a-f]{6})\"", h)
assert rects.count("#d62728") == 3 and rects.count("#ff7f0e") == 2, rects  # pageable up, down
assert rects.count("#17becf") == 2, rects  # pinned downloads
'
  gen before.trace before
  gen after.trace after
  run_pl 0 report --format html before.trace after.trace sim.trace
  py '
import re, sys
h = open(sys.argv[1], encoding="utf-8").read()
assert "Simulated timings: 1 of 3 traces recorded over the fake CUDA" in h
for svg in re.findall(r"<svg class=\"tl\".*?</svg>", h, re.S):
    rows = re.findall(r"<rect x=\"190\" y=\"(\d+)\"[^>]*/><text x=\"4\" y=\"\d+\">([^<]*)</text>", svg)
    bars = [int(y) for y in re.findall(r"<rect x=\"[0-9.]+\" y=\"(\d+)\" width=\"[0-9.]+\" height=\"14\"", svg)]
    assert rows, svg[:500]
    for y, label in rows:
        y = int(y)
        assert any(y <= b < y + 18 for b in bars), "empty row: " + label
        if label.startswith("stream"):
            assert re.match(r"stream \d+ \(\d+ ops?\)$", label), label
'
  ;;
call_site_cost)
  # What finding call sites cost (COST): one line in the text report, an
  # object in JSON, null without the record; a short record is malformed.
  "$MK" cost.trace --copies 10 --cost captures=10,capture_ns=2M,unwinds=3,unwind_ns=1500K,py_walks=10,py_walk_ns=300K,py_probes=40 >/dev/null ||
    fail "mktrace failed"
  run_pl 0 report cost.trace
  has_out "call sites cost: 10 call stacks, 2.097 ms on the program's threads (209.7 us each,"
  has_out "3 native unwinds (1.536 ms), 10 Python walks (0.307 ms, 40 page probes)"
  run_pl 0 report --format html cost.trace
  has_out "<p>Call sites cost: 10 call stacks, 2.097 ms on the program's threads"
  run_pl 0 report --format json cost.trace
  py 'import json, sys
c = json.load(open(sys.argv[1]))["processes"][0]["call_site_cost"]
assert c == {"captures": 10, "capture_ns": 2097152, "unwinds": 3, "unwind_ns": 1536000, "py_walks": 10, "py_walk_ns": 307200, "py_probes": 40}, c'
  "$MK" plain.trace --copies 10 >/dev/null || fail "mktrace failed"
  run_pl 0 report plain.trace
  ! grep -q "call sites cost" out || fail "a cost line without a COST record"
  run_pl 0 report --format json plain.trace
  py 'import json, sys; assert json.load(open(sys.argv[1]))["processes"][0]["call_site_cost"] is None'
  "$MK" short.trace --copies 10 --cost captures=10 --cost-short >/dev/null || fail "mktrace failed"
  run_pl 0 report --format json short.trace
  py 'import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
assert p["call_site_cost"] is None and p["malformed_records"] == 1, p'
  ;;
compare_verdict)
  # One line first says which run is better and by how much; both runs'
  # simulated timings are named; --fail-if-worse=PCT exits 3.
  gen before.trace before
  gen after.trace after
  run_pl 0 compare before.trace after.trace
  [ "$(sed -n 1p out)" = "after: 770.0x less host time blocked in copies, 0.36x the wall time" ] ||
    fail "verdict: $(sed -n 1p out)"
  [ -z "$(sed -n 2p out)" ] || fail "line 2 is not blank: $(sed -n 2p out)"
  run_pl 0 compare after.trace before.trace
  [ "$(sed -n 1p out)" = "after is slower: 2.77x the wall time, 770.0x more host time blocked in copies" ] ||
    fail "slower verdict: $(sed -n 1p out)"
  run_pl 3 compare --fail-if-worse=5 after.trace before.trace
  has_out "after is slower: 2.77x the wall time"
  [ "$(cat err)" = "pagelock: compare: the after run's wall time is 177.3% worse than the before run's, more than --fail-if-worse=5: exit status 3" ] ||
    fail "gate message: $(cat err)"
  run_pl 3 compare after.trace before.trace --fail-if-worse 200
  has_err "the after run's host time blocked in copies is 76900.0% worse than the before run's, more than --fail-if-worse=200"
  run_pl 0 compare --fail-if-worse=0 before.trace after.trace
  run_pl 0 compare --fail-if-worse=0 before.trace before.trace
  [ "$(sed -n 1p out)" = "after: the same host time blocked in copies, 1.00x the wall time" ] ||
    fail "same: $(sed -n 1p out)"
  "$MK" sim.trace --copies 10 --simulated >/dev/null || fail "mktrace failed"
  run_pl 0 compare before.trace sim.trace
  [ "$(sed -n 2p out)" = "simulated timings in the after run (fake CUDA, no GPU): the times say how the simulation ran, not a GPU" ] ||
    fail "simulated: $(sed -n 2p out)"
  run_pl 0 compare sim.trace sim.trace
  has_out "simulated timings in both runs (fake CUDA, no GPU)"
  ! grep -q "slower in simulation" out || fail "equal simulated runs called slower: $(cat out)"
  # A fix that made a simulated run slower says so (issue 42): the fake
  # CUDA is no GPU.
  "$MK" sim100.trace --copies 100 --simulated >/dev/null || fail "mktrace failed"
  run_pl 0 compare sim.trace sim100.trace
  [ "$(sed -n 3p out)" = "the after run is slower in simulation: the fake CUDA gives each kind of copy its speed on a GPU host, but staging and registering take this machine's CPU beside the program; compare on a GPU before judging the fix" ] ||
    fail "simulated and slower: $(sed -n 3p out)"
  run_pl 0 compare --format json sim.trace sim100.trace
  py 'import json, sys; v = json.load(open(sys.argv[1]))["verdict"]; assert v["slower"] and v["simulated_slower"], v'
  run_pl 0 compare --format json sim100.trace sim.trace
  py 'import json, sys; v = json.load(open(sys.argv[1]))["verdict"]; assert not v["simulated_slower"], v'
  run_pl 0 compare --format json sim.trace after.trace
  py '
import json, sys
d = json.load(open(sys.argv[1]))
v = d["verdict"]
assert v["slower"] == (v["wall_ratio"] >= 1.005), v
assert v["text"].startswith("after is slower: " if v["slower"] else "after: "), v
assert d["before"]["simulated_traces"] == 1 and d["after"]["simulated_traces"] == 0, d
assert abs(v["wall_ratio"] - d["ratios"]["wall_ns"]) < 1e-4, (v, d["ratios"])
assert abs(v["host_blocked_ratio"] - d["ratios"]["host_blocked_ns"]) < 1e-4, (v, d["ratios"])
'
  run_pl 3 compare --format json --fail-if-worse=1 after.trace before.trace
  py '
import json, sys
v = json.load(open(sys.argv[1]))["verdict"]
assert v["slower"] is True and v["text"].startswith("after is slower: 2.77x the wall time"), v
'
  ;;
compare_runs)
  # a run of two ranks as a directory, and as files before "--"
  mkdir run1 && gen run1/pagelock.1.trace before --pid 1 --rank 0 \
    && gen run1/pagelock.2.trace before --pid 2 --rank 1 && : >run1/ignored.txt
  gen after.trace after
  run_pl 0 compare --format json run1 after.trace
  py '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["before"]["traces"] == 2 and d["after"]["traces"] == 1
assert d["before"]["pageable_copies"] == 16 and d["before"]["host_blocked_ns"] == 123200000
assert d["before"]["wall_ns"] == 122000000  # concurrent ranks: one window
'
  run_pl 0 compare run1/pagelock.1.trace run1/pagelock.2.trace -- after.trace
  has_out "pageable copies                                16"
  mkdir empty
  run_pl 2 compare empty after.trace
  has_err "pagelock: compare: no *.trace file in 'empty'"
  ;;
compare_errors)
  gen before.trace before
  printf 'not a trace at all, but long enough for a header..........\n' >junk.trace
  : >empty.trace
  run_pl 2 compare before.trace missing.trace
  has_err "pagelock: cannot open 'missing.trace': No such file or directory"
  [ "$(wc -l <err)" = 1 ] || fail "more than one line on stderr"
  [ ! -s out ] || fail "output despite a missing file"
  run_pl 2 compare junk.trace before.trace
  has_err "pagelock: 'junk.trace' is not a pagelock trace"
  run_pl 2 compare before.trace empty.trace
  has_err "pagelock: 'empty.trace' is empty"
  run_pl 2 compare before.trace
  has_err "pagelock: compare: needs two runs"
  run_pl 2 compare a b c
  has_err "pagelock: compare: needs two runs"
  run_pl 2 compare a b -- 
  has_err "pagelock: compare: needs two runs"
  run_pl 2 compare -- a b c
  has_err "pagelock: compare: needs two runs"
  run_pl 2 compare --format html before.trace before.trace
  has_err "pagelock: compare: invalid --format 'html' (valid: text, json)"
  run_pl 2 compare --fail-if-worse=-1 before.trace before.trace
  has_err "pagelock: compare: invalid --fail-if-worse '-1' (percent: a number, 0 or more)"
  [ "$(wc -l <err)" = 2 ] && [ "$(sed -n 2p err)" = "try 'pagelock compare --help'" ] || fail "not the error and the try line"
  ;;
report_bad_header)
  # Every header field is checked: one line naming the field, its value and
  # the valid values, exit 2, no report.
  "$MK" good.trace >/dev/null || fail "mktrace failed"
  # header_size: the u32 at offset 12
  { head -c 12 good.trace; printf '\110\000\000\000'; tail -c +17 good.trace; } >hs.trace
  run_pl 2 report hs.trace
  [ "$(cat err)" = "pagelock: 'hs.trace' is corrupt: its trace header's header_size is 72 (valid: 64 in trace format version 4)" ] || fail "header_size message"
  [ ! -s out ] || fail "a report from a bad header"
  # flags: the u32 at offset 40
  { head -c 40 good.trace; printf '\100\000\000\000'; tail -c +45 good.trace; } >fl.trace
  run_pl 2 report --format json fl.trace
  has_err "pagelock: 'fl.trace' is corrupt: its trace header's flags are 0x40 (valid: bits 0x1f in trace format version 4)"
  # reserved[1]: the u64 at offset 56
  { head -c 56 good.trace; printf '\001'; tail -c +58 good.trace; } >rs.trace
  run_pl 2 report rs.trace
  has_err "pagelock: 'rs.trace' is corrupt: its trace header's reserved[1] is 0x1 (valid: 0)"
  ;;
report_damaged)
  # A checksummed trace with one byte changed in its third block: the
  # report stops before that block, says from which byte, exits 0 as for
  # any partial trace (the warning, the header and JSON say so).
  "$MK" ck.trace --checksums 10 --copies 30 >mk.out || fail "mktrace failed"
  set -- $(sed -n 's/^blocks=//p' mk.out)
  b2=$3 b3=$4
  run_pl 0 report ck.trace
  [ ! -s err ] || fail "stderr for a good checksummed trace"
  has_out "copies: 30 calls"
  cp ck.trace bad.trace
  printf 'X' | dd of=bad.trace bs=1 seek=$((b2 + 20)) conv=notrunc 2>/dev/null
  run_pl 0 report bad.trace
  [ "$(cat err)" = "pagelock: warning: 'bad.trace' is corrupt from byte $b2 (checksum mismatch in the block of bytes $b2..$((b3 - 25))); the report covers the 22 records before it" ] || fail "damage warning"
  has_out "[partial trace: corrupt from byte $b2] =="
  # blocks 0 and 1: PROCESS, NOTE, 3 STACKs and 15 COPYs
  has_out "copies: 15 calls"
  run_pl 0 report --format json bad.trace
  py '
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
assert p["partial"] is True and p["trace_end"] == "damaged", p
assert p["corrupt_from"] == '"$b2"' and p["totals"]["copies"] == 15, p
'
  run_pl 0 report --format html bad.trace
  has_out "[partial trace: corrupt from byte $b2]</b>"
  # cut inside the third block: a tail, not damage
  head -c $((b2 + 20)) ck.trace >cut.trace
  run_pl 0 report cut.trace
  has_err "pagelock: warning: 'cut.trace' ends after 22 complete records (the program may have died): report is partial"
  ;;
report_stop_flags)
  # The shim sets a stop flag in the header when it stops writing early:
  # the reports say why instead of guessing that the program died.
  for f in 0x2:the\ disk\ filled\ up:disk-full \
           0x4:a\ write\ to\ the\ trace\ failed:write-error \
           0x8:the\ program\ closed\ the\ shim\'s\ trace\ file:fd-lost; do
    flag=${f%%:*} rest=${f#*:}
    why=${rest%%:*} word=${rest#*:}
    "$MK" s.trace --no-end --flags "$flag" >mk.out || fail "mktrace failed"
    n=$(sed -n 's/^records=//p' mk.out)
    run_pl 0 report s.trace
    has_err "pagelock: warning: 's.trace' ends after $n complete records ($why): report is partial"
    has_out "[partial trace: $why] =="
    grep -q died out err && fail "'died' for a trace whose header says why it ends"
    run_pl 0 report --format json s.trace
    has_out "\"trace_end\": \"$word\", \"corrupt_from\": null"
    run_pl 0 report --format html s.trace
    has_out "[partial trace: $why]</b>"
  done
  ;;
report_escapes)
  # Program path, host, note and symbol names with terminal escapes, CR,
  # BS, 8-bit CSI, a C1 control and invalid UTF-8: the text report shows
  # them escaped (nothing a terminal acts on), JSON and HTML stay valid.
  "$MK" evil.trace --evil-names --copies 8 >/dev/null || fail "mktrace failed"
  e='\x1b[31m\x1b]0;t\x07\x0d\x08\x9b2J\u009b\xff'
  run_pl 0 report evil.trace evil.trace
  has_out "== pid 4242 /opt/$e/app on host$e: mode observe"
  has_out "note: note $e"
  has_out "step_0$e+0x20 (app)"
  has_out "  -  host$e  4242"
  py '
import sys
b = open(sys.argv[1], "rb").read()
bad = [c for c in b if (c < 0x20 and c != 0x0a) or c >= 0x7f]
assert not bad, bad[:10]
'
  run_pl 0 report --format json evil.trace
  py '
import json, sys
p = json.load(open(sys.argv[1], encoding="utf-8"))["processes"][0]
assert p["exe"] == "/opt/\x1b[31m\x1b]0;t\x07\r\b\ufffd2J\u009b\ufffd/app", repr(p["exe"])
'
  run_pl 0 report --format html evil.trace
  py '
import sys
h = open(sys.argv[1], "rb").read()
assert b"\x1b" not in h and b"\r" not in h and b"\x08" not in h
h.decode("utf-8")
'
  ;;
hostile_formats)
  # Every writer on a trace of about a million records that repeats what
  # writers key on (correlation ids, devices, threads, streams, stacks,
  # names: mktrace --hostile): each must stay O(n log n).  Before,
  # --format chrome matched repeated ids by scanning them (quadratic) and
  # html kept a sorted device set by insertion; at this size neither
  # finished in 60 s.  20 s per format leaves room for a loaded 2-core
  # machine: each takes 0.3 to 5 s on an idle one.
  "$MK" h.trace --hostile 400000 >mk.out || fail "mktrace failed"
  echo "hostile trace: $(sed -n 's/^records=//p' mk.out) records, $(wc -c <h.trace) bytes"
  for f in text json html chrome compare; do
    start=$(date +%s%N)
    if [ $f = compare ]; then
      timeout 60 "$PL" compare h.trace h.trace >/dev/null 2>err
    else
      timeout 60 "$PL" report --format $f h.trace >/dev/null 2>err
    fi
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "  $f: $ms ms"
    [ $rc = 0 ] || fail "$f exited $rc"
    [ $ms -lt 20000 ] || fail "$f took $ms ms"
  done
  ;;
html_routes)
  # --mode auto: the routes table, the reasons table and the registration
  # counters; a run that moved nothing has none of them.
  "$MK" auto.trace --copies 0 --mode 3 \
    --copy 10:h2d:pageable:register:none:64M:2000000 \
    --copy 4:h2d:pageable:stage:shared:16M:3000000 \
    --copy 5:h2d:pageable:pass:cold:1M:100000 \
    --counters register_budget=32G,registrations=12,unregistrations=11,evictions=2,register_ns=65000000,registered_bytes_high_water=640M >/dev/null || fail "mktrace failed"
  run_pl 0 report --format html auto.trace
  py '
import sys, re
h = open(sys.argv[1], encoding="utf-8").read()
rows = re.findall(r"<tr><td class=\"l\">([^<]*)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", h)
assert ("passed through", "5", "5.0 MiB", "0.500 ms") in rows, rows
assert ("staged", "4", "64.0 MiB", "12.000 ms") in rows, rows
assert ("registered", "10", "640.0 MiB", "20.000 ms") in rows, rows
assert ("shared memory or a file mapping (DataLoader workers&#39; batches): staged", "4", "64.0 MiB", "12.000 ms") in rows, rows
assert ("cold: copied less than PAGELOCK_REGISTER_HOT of the buffer", "5", "5.0 MiB", "0.500 ms") in rows, rows
assert "<th class=\"l\">not registered because</th>" in h
assert "<p>Registration: 12 ranges registered (65.000 ms), 11 unregistered, 2 evicted, 0 failed; 0 B still registered at exit, high water 640.0 MiB of a 32.0 GiB budget.</p>" in h, h[h.find("Registration"):][:300]
'
  "$MK" obs.trace --copies 8 >/dev/null || fail "mktrace failed"
  run_pl 0 report --format html obs.trace
  py '
import sys
h = open(sys.argv[1], encoding="utf-8").read()
assert "<th class=\"l\">route</th>" not in h and "Registration:" not in h
'
  ;;
compare_routes)
  # observe against auto: the copies and bytes of each route side by side
  "$MK" before.trace --copies 0 --copy 20:h2d:pageable:pass:mode:64M:8000000 >/dev/null || fail "mktrace failed"
  "$MK" after.trace --copies 0 --mode 3 \
    --copy 16:h2d:pageable:register:none:64M:2000000 \
    --copy 4:h2d:pageable:stage:pending:64M:3000000 >/dev/null || fail "mktrace failed"
  run_pl 0 compare before.trace after.trace
  py "$COMPARE_ROWS"'
row("copies passed through", "20", "0", "0.00x")
row("bytes passed through", "1.2 GiB", "0 B", "0.00x")
row("copies staged", "0", "4", "-")
row("staged bytes", "0 B", "256.0 MiB", "-")
row("copies registered", "0", "16", "-")
row("registered bytes", "0 B", "1.0 GiB", "-")
'
  run_pl 0 compare --format json before.trace after.trace
  py '
import json, sys
d = json.load(open(sys.argv[1]))
b, a = d["before"], d["after"]
M = 1 << 20
assert b["routes"] == {"pass": {"copies": 20, "bytes": 20 * 64 * M}, "stage": {"copies": 0, "bytes": 0}, "register": {"copies": 0, "bytes": 0}}, b["routes"]
assert a["routes"] == {"pass": {"copies": 0, "bytes": 0}, "stage": {"copies": 4, "bytes": 256 * M}, "register": {"copies": 16, "bytes": 1024 * M}}, a["routes"]
assert (a["pass_copies"], a["stage_copies"], a["register_copies"], a["register_bytes"]) == (0, 4, 16, 1024 * M), a
assert d["ratios"]["pass_copies"] == 0.0 and d["ratios"]["register_copies"] is None
'
  ;;
chrome_copy_runs)
  # A COPY record of a run of 64 repeated copies is one slice from its
  # first copy's start, as long as the run's host time, named for its
  # count, with copies and timed in its args; a single copy is as before.
  "$MK" r.trace --copies 0 --copy 1:h2d:pageable:pass:small:4K:640000:64:8 \
    --copy 1:h2d:pageable:pass:cold:1M:1000000 >/dev/null || fail "mktrace failed"
  run_pl 0 report --format chrome r.trace
  py "$CHROME_COMMON"'
calls = [e for e in ev if e["ph"] == "X" and e["cat"] == "copy_call"]
assert len(calls) == 2, calls
run, one = sorted(calls, key=lambda e: e["ts"])
assert run["name"] == "cuMemcpyHtoDAsync_v2 x64", run
assert abs(run["dur"] - 640.0) < 1e-6, run
a = run["args"]
assert (a["copies"], a["timed"], a["bytes"], a["total_bytes"]) == (64, 8, 4096, 64 * 4096), a
assert one["name"] == "cuMemcpyHtoDAsync_v2" and "copies" not in one["args"], one
'
  run_pl 0 report --format html r.trace
  has_out "<title>cuMemcpyHtoDAsync_v2 x64 H2D pageable, 4.0 KiB each, host 640 us, 8 of 64 copies timed</title>"
  has_out "<li>host time of 64 copies estimated from 8 timed: repeated small copies, 1 in 8 timed</li>"
  ;;
chrome_run_lanes)
  # A loop's upload run and download run are open together: their slices
  # (each as long as its run's host time, from its first copy) overlap, and
  # a single copy made meanwhile lies inside both.  Viewers draw slices of
  # one track right only when disjoint or nested: runs go on lanes of
  # their own, never the copy-calls track.  The shim writes a run when it
  # closes: the single copy comes first in the file, the download run
  # before the upload run that started first; a third run starting after
  # the upload run's end takes its lane again.
  "$MK" r.trace --copies 0 --copy 1:h2d:pageable:pass:cold:1M:20000:1:1:300000 \
    --copy 1:d2h:pageable:pass:small:4K:640000:64:8:10000 \
    --copy 1:h2d:pageable:pass:small:4K:640000:64:8:0 \
    --copy 1:h2d:pageable:pass:small:4K:100000:16:4:645000 >/dev/null || fail "mktrace failed"
  run_pl 0 report --format chrome r.trace
  py "$CHROME_COMMON"'
X = [e for e in ev if e["ph"] == "X"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
tracks = collections.defaultdict(list)
for e in X:
    tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
for k, v in tracks.items():
    v.sort(key=lambda s: (s[0], -s[1]))
    open_ = []
    for s in v:
        while open_ and open_[-1][1] <= s[0]:
            open_.pop()
        # inside every open slice, or it partially overlaps one
        assert not open_ or s[1] <= open_[-1][1], (names.get(k), open_[-1], s)
        open_.append(s)
calls = [e for e in X if e["cat"] == "copy_call"]
assert len(calls) == 4, calls
track = lambda e: names[(e["pid"], e["tid"])]
one = [e for e in calls if "copies" not in e["args"]]
assert len(one) == 1 and track(one[0]) == "thread 42 (copy calls)", one
runs = sorted((e for e in calls if "copies" in e["args"]), key=lambda e: e["ts"])
got = [(e["name"], track(e)) for e in runs]
assert got == [("cuMemcpyHtoDAsync_v2 x64", "thread 42 (runs of repeated copies)"),
               ("cuMemcpyDtoHAsync_v2 x64", "thread 42 (runs of repeated copies, lane 2)"),
               ("cuMemcpyHtoDAsync_v2 x16", "thread 42 (runs of repeated copies)")], got
assert all(e["tid"] != one[0]["tid"] for e in runs)
assert [(e["args"]["copies"], e["args"]["timed"], e["args"]["total_bytes"]) for e in runs] == [
    (64, 8, 64 * 4096), (64, 8, 64 * 4096), (16, 4, 16 * 4096)], runs
sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in ev if e["name"] == "thread_sort_index"}
assert {sort[k] for k in names} == {0}, sort
'
  run_pl 0 report --format html r.trace
  py '
import re, sys, collections
svg = open(sys.argv[1], encoding="utf-8").read()
# rows by their top: a label sits 13 px below it, a bar 2 px
labels = {int(y) - 13: t for y, t in re.findall(r"<text x=\"4\" y=\"(\d+)\">([^<]*)</text>", svg)}
bars = collections.defaultdict(list)
for x, y, w, t in re.findall(r"<rect x=\"([\d.]+)\" y=\"(\d+)\" width=\"([\d.]+)\" height=\"14\" fill=\"#[0-9a-f]+\"><title>([^<]*)</title>", svg):
    row = labels[int(y) - 2]
    bars[row].append((float(x), float(x) + float(w), t.split(" H2D")[0].split(" D2H")[0]))
got = {row: sorted(b[2] for b in v) for row, v in bars.items()}
assert got == {"thread 42 calls": ["cuMemcpyHtoDAsync_v2"],
               "thread 42 runs": ["cuMemcpyHtoDAsync_v2 x16", "cuMemcpyHtoDAsync_v2 x64"],
               "thread 42 runs, lane 2": ["cuMemcpyDtoHAsync_v2 x64"]}, got
for row, v in bars.items():
    v.sort()
    for a, b in zip(v, v[1:]):
        assert a[1] <= b[0] + 0.01, (row, a, b)
'
  ;;
compare_copy_runs)
  # 64 single copies before, the same 64 as one run record after: the same
  # copies and bytes on both sides.
  "$MK" before.trace --copies 0 --copy 64:h2d:pageable:pass:small:4K:10000 >/dev/null || fail "mktrace failed"
  "$MK" after.trace --copies 0 --copy 1:h2d:pageable:pass:small:4K:640000:64:8 >/dev/null || fail "mktrace failed"
  run_pl 0 compare before.trace after.trace
  py "$COMPARE_ROWS"'
row("host blocked in copies", "0.640 ms", "0.640 ms", "1.00x")
row("copy calls", "64", "64", "1.00x")
row("pageable copies", "64", "64", "1.00x")
row("copies passed through", "64", "64", "1.00x")
row("bytes passed through", "256.0 KiB", "256.0 KiB", "1.00x")
'
  run_pl 0 compare --format json before.trace after.trace
  py '
import json, sys
d = json.load(open(sys.argv[1]))
for side in (d["before"], d["after"]):
    assert (side["copies"], side["pageable_copies"], side["pass_copies"], side["pass_bytes"]) == (64, 64, 64, 64 * 4096), side
    assert side["routes"]["pass"] == {"copies": 64, "bytes": 64 * 4096}, side["routes"]
assert d["ratios"]["copies"] == 1.0 and d["ratios"]["pass_bytes"] == 1.0, d["ratios"]
'
  ;;
*)
  echo "unknown case $CASE"
  exit 1
  ;;
esac
exit 0
