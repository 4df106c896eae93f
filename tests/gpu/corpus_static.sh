#!/usr/bin/env bash
# tests/gpu/corpus_static.sh BUILD OUT - default nvcc builds (cudart linked
# statically) under observe and auto: tests/gpu/corpus/static_app.cu copies
# from functions of its own and allocates in one, built plain and with -g;
# tests/gpu/corpus/bandwidth_like.cu does what bandwidthTest
# --memory=pageable does.  The report must name the program's functions
# (and, built with -g, their lines), never cudart's code linked beside them,
# and give every pageable copy its allocation site.  Prints
# "corpus_static: ..." rows; exits 1 when a check failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd) OUT=$2
mkdir -p "$OUT"
NVCC=${NVCC:-nvcc}
PY=${PYTHON:-python3}
unset PAGELOCK_NO_ADDR2LINE # the names come from the programs' symbol tables
failed=0
C="$OUT/corpus_static"
mkdir -p "$C"
for v in "static_app|static_app.cu|" "static_app_g|static_app.cu|-g" "bandwidth_like|bandwidth_like.cu|"; do
  IFS='|' read -r name src flags <<<"$v"
  # shellcheck disable=SC2086
  if ! $NVCC -O2 $flags -o "$C/$name" "$ROOT/tests/gpu/corpus/$src" >"$C/$name.build" 2>&1; then
    echo "corpus_static: $name FAIL (nvcc: $(tail -1 "$C/$name.build"))"
    failed=1
  fi
done

# NAME MODE: run one program under a mode and check its report.
one() {
  local name=$1 mode=$2 d="$C/$1-$2"
  rm -rf "$d"; mkdir -p "$d"
  [ -x "$C/$name" ] || return
  if ! timeout 300 "$B/pagelock" run --mode="$mode" -o "$d/t.trace" -- "$C/$name" >"$d/out" 2>"$d/err"; then
    echo "corpus_static: $name $mode FAIL (exit status: $(tail -1 "$d/err"))"; failed=1; return
  fi
  "$B/pagelock" report --format json "$d/t.trace" >"$d/report.json" 2>"$d/report.err" &&
    "$B/pagelock" report "$d/t.trace" >"$d/report.txt" 2>>"$d/report.err" ||
    { echo "corpus_static: $name $mode FAIL (pagelock report failed)"; failed=1; return; }
  if "$PY" - "$name" "$mode" "$d/out" "$d/report.json" "$d/report.txt" >"$d/check.txt" <<'PY'; then
import json, sys
name, mode, out, rjson, rtext = sys.argv[1:6]
kv = dict(w.split("=", 1) for line in open(out) for w in line.split() if "=" in w)
p = json.load(open(rjson))["processes"][0]
text = open(rtext).read()
bad = []
def need(ok, what):
    if not ok:
        bad.append(what)
need(kv.get("wrong") == "0", "the program's bytes: wrong=%s" % kv.get("wrong"))
copies = int(kv.get("copies", -1))
need(p["totals"]["pageable"]["copies"] == copies,
     "pageable copies %d, the program made %d" % (p["totals"]["pageable"]["copies"], copies))
def fn(r):
    return r["function"] or ""
for table in ("call_sites", "alloc_sites"):
    for r in p[table]:
        need(not fn(r).startswith(("libcudart_static_", "cuda", "__cuda")) and r["address"] != "0x0",
             "%s names cudart's code or nothing: %s" % (table, r["site"]))
alloc_copies = sum(r["copies"] for r in p["alloc_sites"])
need(alloc_copies == copies, "allocation sites cover %d of %d pageable copies" % (alloc_copies, copies))
need("by allocation site" in text, "no allocation-site table in the text report")
def rows(table, func):
    return [r for r in p[table] if fn(r).startswith(func)]
def check_site(table, func, n, line=None):
    rs = rows(table, func)
    got = sum(r["copies"] for r in rs)
    need(got == n, "%s: %s has %d copies, want %d (rows: %s)" % (table, func, got, n,
         [(r["site"], r["copies"]) for r in p[table]]))
    if line is not None:
        for r in rs:
            need((r["file"] or "").endswith("static_app.cu") and r["line"] == int(line),
                 "%s: %s at %s:%s, want static_app.cu:%s" % (table, func, r["file"], r["line"], line))
if name.startswith("static_app"):
    g = name.endswith("_g")
    half = copies // 2
    check_site("call_sites", "upload_weights", half, kv["upload_line"] if g else None)
    check_site("call_sites", "download_results", half, kv["download_line"] if g else None)
    check_site("alloc_sites", "make_host_buffer", copies, kv["alloc_line"] if g else None)
else:
    half = copies // 2
    for func in ("testHostToDeviceTransfer", "testDeviceToHostTransfer"):
        check_site("call_sites", func, half)
        check_site("alloc_sites", func, half)
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
    echo "corpus_static: $name $mode ok"
  else
    echo "corpus_static: $name $mode FAIL"; cat "$d/check.txt"; failed=1
  fi
}

for m in observe auto; do
  one static_app $m
  one static_app_g $m
  one bandwidth_like $m
done
exit $failed
