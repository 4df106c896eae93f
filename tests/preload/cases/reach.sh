# shellcheck shell=bash
# Preload cases: every way a program reaches the driver (static and per-thread
# cudart, the driver itself, dlopen/dlsym, RTLD_NEXT), and the sites named
# there.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# exact counts of a test_copies-like program run under `pagelock run`
expect_copies() { # NAME BINARY [trace_check options...]
  local d="$T/$1" bin="$2"; shift 2; mkdir -p "$d"
  [ -x "$bin" ] || { echo "    (no $bin in this build: skipped)" >&2; return 0; }
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$bin" >"$d/out" 2>"$d/err" || { cat "$d/err" >&2; fail "$bin exited non-zero"; return; }
  local pageable= pageable_bytes= pinned= pinned_bytes=
  eval "$(sed 's/ /;/g' "$d/out")"
  local f; f=$(ls "$d"/t.*.trace)
  set -- --failed 0 --complete --simulated $SIM "$@"
  [ -n "$pageable" ] && set -- --pageable "$pageable" "$@"
  [ -n "$pageable_bytes" ] && set -- --pageable-bytes "$pageable_bytes" "$@"
  [ -n "$pinned" ] && set -- --pinned "$pinned" --pinned-bytes "$pinned_bytes" "$@"
  "$B/trace_check" "$f" "$@" >&2
}

case_reach_static_cudart() { expect_copies static "$B/test_copies_static" --api-min cuMemcpyHtoDAsync_v2=10 --api-min cuMemcpy=2; }
# A static runtime lives inside the program: its functions (the API's
# cuda*, the rest named libcudart_static_<hash> as in the real archive)
# are looked past, and the report names the program's own functions and
# lines for every copy and allocation, under observe and auto.
case_static_sites() {
  local d="$T/ss" m; mkdir -p "$d"
  for m in observe auto; do
    "$B/pagelock" run --mode=$m -o "$d/$m.trace" -- "$B/test_static_sites" >"$d/out" 2>"$d/err" ||
      fail "--mode=$m: the program failed: $(cat "$d/out" "$d/err")" || return
    "$B/pagelock" report --format json "$d/$m.trace" >"$d/$m.json" 2>"$d/err" ||
      fail "--mode=$m: report failed: $(cat "$d/err")" || return
    python3 - "$d/$m.json" "$(cat "$d/out")" "$m" <<'PY' >&2 || fail "--mode=$m: sites not named" || return
import json, sys
lines = dict(kv.split("=") for kv in sys.argv[2].split())
p = json.load(open(sys.argv[1]))["processes"][0]
def named(rows):
    return sorted((r["copies"], r["function"], (r["file"] or "").rsplit("/", 1)[-1], r["line"]) for r in rows)
want_calls = [(4, "download_result", "static_sites.c", int(lines["download_line"])),
              (4, "upload_batch", "static_sites.c", int(lines["upload_line"]))]
want_allocs = [(8, "make_batch", "static_sites.c", int(lines["alloc_line"]))]
ok = named(p["call_sites"]) == want_calls and named(p["alloc_sites"]) == want_allocs
if not ok:
    print("    %s: call sites %s, want %s" % (sys.argv[3], named(p["call_sites"]), want_calls))
    print("    %s: allocation sites %s, want %s" % (sys.argv[3], named(p["alloc_sites"]), want_allocs))
sys.exit(0 if ok else 1)
PY
  done
}
# A native frame is named by the symbol or DWARF function that covers it:
# a static function from .symtab (with and without DWARF), from the
# debuglink file of a stripped program, and with neither the program and
# the offset, never the exported function just before it (the nearest
# exported symbol, which addr2line names).
case_native_names() {
  local d="$T/nn" v; mkdir -p "$d"
  command -v strip >/dev/null && command -v objcopy >/dev/null ||
    { echo "    (no strip/objcopy: skipped)" >&2; return 0; }
  cp "$B/test_native_names" "$d/full"
  strip --strip-debug -o "$d/nodwarf" "$d/full"
  objcopy --only-keep-debug "$d/full" "$d/linked.debug"
  strip --strip-all -o "$d/linked" "$d/full"
  objcopy --add-gnu-debuglink="$d/linked.debug" "$d/linked"
  objcopy --only-keep-debug "$d/full" "$d/bare.debug"
  strip --strip-all -o "$d/bare" "$d/full"
  objcopy --add-gnu-debuglink="$d/bare.debug" "$d/bare"
  rm "$d/bare.debug"
  for v in full nodwarf linked bare; do
    "$B/pagelock" run -o "$d/$v.trace" -- "$d/$v" >"$d/$v.out" 2>"$d/err" ||
      fail "$v: the program failed: $(cat "$d/err")" || return
    "$B/pagelock" report --format json "$d/$v.trace" >"$d/$v.json" 2>"$d/err" ||
      fail "$v: report failed: $(cat "$d/err")" || return
  done
  python3 - "$d" <<'PY' >&2 || fail "native frames misnamed"
import json, re, sys
d = sys.argv[1]
line = int(open(d + "/full.out").read().split("=")[1])
ok = True
for v, func, src in [("full", "copy_from_static", line), ("nodwarf", "copy_from_static", None),
                     ("linked", "copy_from_static", line), ("bare", None, None)]:
    rows = json.load(open("%s/%s.json" % (d, v)))["processes"][0]["call_sites"]
    got = [(r["copies"], r["function"], r["line"] or None, r["site"]) for r in rows]
    good = len(got) == 1 and got[0][:3] == (3, func, src)
    if v == "bare":
        good = good and re.fullmatch(r"bare\+0x[0-9a-f]+", got[0][3]) is not None
    if not good:
        print("    %s: %s, want 3 copies at %s line %s" % (v, got, func, src))
        ok = False
sys.exit(0 if ok else 1)
PY
}
# bandwidthTest --memory=pageable's pattern beside the static runtime
# (tests/gpu/corpus/bandwidth_like.cu): under auto, every pageable copy has
# its allocation site (the table once printed its header and no rows), and
# the copies made through a registration are counted as registered, not as
# staged chunks, in the join and the bandwidth rows.
case_static_bandwidth() {
  local d="$T/sb" m; mkdir -p "$d"
  for m in observe auto; do
    # every GPU op traced: the join is what is checked
    PAGELOCK_CUPTI_MAX_RATE=10000000 "$B/pagelock" run --mode=$m -o "$d/$m.trace" -- \
      "$B/test_bandwidth_like" 10 16 >"$d/out" 2>"$d/err" ||
      fail "--mode=$m: the program failed: $(cat "$d/out" "$d/err")" || return
    "$B/pagelock" report --format json "$d/$m.trace" >"$d/$m.json" 2>"$d/err" ||
      fail "--mode=$m: report failed: $(cat "$d/err")" || return
    python3 - "$d/$m.json" "$m" <<'PY' >&2 || fail "--mode=$m: sites or routes wrong" || return
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
bad = []
pageable = p["totals"]["pageable"]["copies"]
if pageable != 60:
    bad.append("pageable copies %d, want 60" % pageable)
for table in ("call_sites", "alloc_sites"):
    got = sorted(((r["function"] or "?").split("(")[0], r["copies"]) for r in p[table])
    want = [("testDeviceToHostTransfer", 30), ("testHostToDeviceTransfer", 30)]
    if got != want:
        bad.append("%s: %s, want %s" % (table, got, want))
if sys.argv[2] == "auto":
    j = p["gpu"]["join"]
    reg = p["totals"]["routes"]["register"]["copies"]
    staged = p["totals"]["routes"]["stage"]["copies"]
    if not reg or j["registered"] != reg or j["linked"] != staged:
        bad.append("join: %d registered, %d staged calls; routes: %d registered, %d staged" %
                   (j["registered"], j["linked"], reg, staged))
    rows = [b for dev in p["gpu"]["devices"] for b in dev["bandwidth"]]
    if not any(b["registered"] for b in rows) or any(b["registered"] and b["staged_chunks"] for b in rows):
        bad.append("bandwidth rows do not name registered copies apart")
for b in bad:
    print("    %s: %s" % (sys.argv[2], b))
sys.exit(1 if bad else 0)
PY
  done
}
case_reach_ptds() { expect_copies ptds "$B/test_copies_ptds" --api-min cuMemcpyHtoDAsync_v2_ptsz=10 --api-min cuMemcpyHtoD_v2_ptds=10 --api-min cuMemcpy_ptds=2; }
case_reach_driver_direct() {
  expect_copies direct "$B/test_driver_direct" --api-min cuMemcpyHtoD_v2=1 --api-min cuMemcpyDtoHAsync_v2=1 \
    --api-min cuMemcpyAsync=1 --api-min cuMemcpy2D_v2=1 --api-min cuMemcpy2DAsync_v2=1 --api-min cuMemcpy3D_v2=1 \
    --api-min cuMemcpyBatchAsync_v2=3 --graph-nodes 2
}
case_reach_dlopen_dlsym() { expect_copies dlopen "$B/test_dlopen_client" --api-min cuMemcpyHtoD_v2=3 --api-min cuMemcpyDtoH_v2=3; }

case_dlsym_rtld_next() {
  "$B/test_next_main" >/dev/null || fail "RTLD_NEXT broken even without the shim" || return
  LD_PRELOAD="$SHIM" "$B/test_next_main" >"$T/next.out" 2>&1 || fail "under the shim: $(cat "$T/next.out")"
}
