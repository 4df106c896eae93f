# shellcheck shell=bash
# Preload cases: GPU timing (CUPTI): records joined, both ways in, kernels,
# staged links, sampling, detaching, why it is unavailable, a program's own
# CUPTI client, streaming.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# ---- GPU timing (CUPTI) ------------------------------------------------------
# Over fakecuda, libcupti.so.13 is the fake one next to the fake driver.

# Plain LD_PRELOAD records: every copy call joins the GPU's record of it,
# CUPTI's memory kinds agree with ours, times line up, one start; and no
# synchronization records, whose tracing slowed every sync of the program
# (the program synchronizes its streams).
case_cupti_records() {
  local d="$T/cr"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  eval "$(sed 's/ /;/g' "$d/out")"
  "$B/trace_check" "$d"/t.*.trace --pageable "$pageable" --pinned "$pinned" --complete --gpu-status 0 \
    --gpu-status-records 2 --gpu-memcpy-min $((pageable + pinned)) --gpu-joined --gpu-syncs-max 0 >&2
}

# Both routes at once (pagelock run sets LD_PRELOAD and CUDA_INJECTION64_PATH):
# CUPTI starts once (one status record at start, one at exit).
case_cupti_injection() {
  local d="$T/ci"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-status-records 2 --gpu-joined >&2 || return
  # The injection route alone (no preload): GPU records without copy hooks.
  CUDA_INJECTION64_PATH="$LIB" PAGELOCK_OUTPUT="$d/i.%p.trace" "$B/test_copies" >"$d/out2" 2>"$d/err2" || fail "copies failed under injection: $(cat "$d/err2")" || return
  "$B/trace_check" "$d"/i.*.trace --copies 0 --gpu-status 0 --gpu-memcpy-min 42 >&2
}

# Kernels: concurrent-kernel records with their interned names, copies of
# the demo joined.
case_cupti_kernels() {
  local d="$T/ck"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/t.%p.trace" "$DEMO" --quick >/dev/null 2>"$d/err" || fail "demo failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-kernels-min 4 --gpu-kernel-name pagelock_spin --gpu-joined >&2
}

# Staged copies: the engine's chunks link back to the app's call.
case_cupti_stage_links() {
  local d="$T/cs"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_MODE=stage PAGELOCK_STAGE_MIN=64K PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >/dev/null 2>"$d/err" || fail "copies failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-links-min 1 --gpu-joined >&2
}

# GPU timing sampled: a loop of small copies makes more GPU operations a
# second than PAGELOCK_CUPTI_MAX_RATE (2000), so tracing pauses, and opens
# one window every 40 (10 ms windows here: one every 400 ms), CUPTI kept
# attached (PAGELOCK_CUPTI_DETACH=0; detached: case_cupti_detach).  Nothing
# inside a pause is traced (no correlation, no GPU record), the windows
# are, every byte arrives; at rate 0, or at a slow rate, nothing pauses and
# every copy joins its GPU record.
case_cupti_sample() {
  local d="$T/csm"; mkdir -p "$d"
  # CUPTI kept attached: a pause turns off what a window turned on, from
  # the shim's thread while the program's is inside a copy call (slow
  # pageable copies over fakecuda: 4 KiB takes 40 us, most of the loop).
  # Turning the copy callbacks off then would leave that thread's
  # correlation id stuck for every later window (--gpu-sampled: no two
  # GPU memcpy records share an id).
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_DETACH=0 PAGELOCK_CUPTI_WINDOW_MS=10 PAGELOCK_LOG=debug PAGELOCK_OUTPUT="$d/t.%p.trace" \
    FAKECUDA_PAGEABLE_GBPS=0.1 "$B/test_sample" 1200 >"$d/out" 2>"$d/err" || fail "the loop failed: $(cat "$d/out" "$d/err")" || return
  grep -q "wrong=0" "$d/out" || fail "bytes differ: $(cat "$d/out")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-pauses-min 2 --gpu-resumes-min 1 \
    --gpu-pause-rate-min 2001 --gpu-sampled >&2 || return
  [ "$(grep -c '^pagelock: GPU timing sampled: about [0-9]* GPU operations a second' "$d/err")" = 1 ] ||
    fail "expected one line saying GPU timing is sampled: $(grep -v 'GPU timing paused\|resumed' "$d/err" | head -5)" || return
  grep -q '^pagelock: GPU timing resumed at' "$d/err" || fail "no resume in the debug log" || return
  # The report says so, and never calls a pause idle GPU time
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/t.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  grep -q '^GPU timing sampled: [0-9]* windows\?, [0-9.]*% of the run traced' "$d/report" ||
    fail "the report does not say GPU timing was sampled: $(head -5 "$d/report")" || return
  # (a pause lasts 390 ms; a loaded machine may leave real gaps of a few
  # ms inside the windows, which the report rightly lists)
  local longest; longest=$(grep -o 'the longest gap was [0-9]*' "$d/report" | grep -o '[0-9]*$')
  [ "${longest:-0}" -lt 100 ] || fail "a pause reads as idle GPU time: $(grep -A1 'idled' "$d/report")" || return
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_MAX_RATE=0 PAGELOCK_OUTPUT="$d/all.%p.trace" "$B/test_sample" 300 \
    >"$d/out" 2>"$d/err" || fail "the loop failed at rate 0: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/all.*.trace --complete --gpu-pauses-max 0 --gpu-joined >&2 || return
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=10 PAGELOCK_OUTPUT="$d/slow.%p.trace" "$B/test_sample" 300 2000 \
    >"$d/out" 2>"$d/err" || fail "the slow loop failed: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/slow.*.trace --complete --gpu-pauses-max 0 --gpu-joined >&2
}

# GPU operations that are not copy calls (kernels; memsets here) count
# from the first window: a loop of 1,000 copy calls a second and 10,000
# memsets pauses tracing within its first windows (10 ms here), not at
# the first flush a second in, which left a short program traced in full.
case_cupti_sample_records() {
  local d="$T/csr" at; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=10 PAGELOCK_LOG=debug PAGELOCK_OUTPUT="$d/t.%p.trace" \
    "$B/test_sample" 600 2000 10 >"$d/out" 2>"$d/err" || fail "the loop failed: $(cat "$d/out" "$d/err")" || return
  at=$(sed -n 's/^pagelock: GPU timing paused at [0-9]* GPU operations a second at \([0-9.]*\) s$/\1/p' "$d/err" | head -1)
  [ -n "$at" ] || fail "tracing never paused: $(grep '^pagelock: GPU' "$d/err" | head -3)" || return
  awk -v t="$at" 'BEGIN { exit !(t < 0.3) }' || fail "tracing paused only at $at s" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-pauses-min 1 --gpu-sampled >&2
}

# The same loop with CUPTI detached between windows (the default): a pause
# detaches it 4 windows in, and each window attaches it again first
# (5 ms windows: one every 800 ms).  No CUPTI call is made while detached
# (each would attach it again: fakecuda logs every attach), the windows
# are traced, their copies carry correlation ids that no earlier stretch
# used (CUPTI numbers calls from 1 again after an attach), every byte
# arrives, and the report says GPU timing was sampled.
case_cupti_detach() {
  local d="$T/cdt"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_ATTACH_LOG=1 PAGELOCK_CUPTI_WINDOW_MS=5 PAGELOCK_LOG=debug \
    PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_sample" 2600 >"$d/out" 2>"$d/err" ||
    fail "the loop failed: $(cat "$d/out" "$d/err")" || return
  grep -q "wrong=0" "$d/out" || fail "bytes differ: $(cat "$d/out")" || return
  local att det res
  att=$(grep -c '^fakecupti: attached' "$d/err")
  det=$(grep -c '^pagelock: GPU timing detached at' "$d/err")
  res=$(grep -c '^pagelock: GPU timing resumed at' "$d/err")
  [ "$res" -ge 2 ] && [ "$det" -ge "$res" ] ||
    fail "expected 2 windows or more, each after a detach: $det detached, $res resumed" || return
  # (fake CUPTI only: the real one logs no attach)
  [ $SIM = 0 ] || [ "$att" = $((res + 1)) ] ||
    fail "CUPTI attached $att times for $res windows: a call while detached attached it again" || return
  grep -q '^pagelock: GPU timing sampled: .*every 800 ms, CUPTI detached in between' "$d/err" ||
    fail "no line saying GPU timing is sampled with CUPTI detached: $(grep '^pagelock: GPU timing s' "$d/err")" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-pauses-min 3 --gpu-resumes-min 2 \
    --gpu-sampled >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/t.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  grep -q '^GPU timing sampled: [0-9]* windows\?, [0-9.]*% of the run traced' "$d/report" ||
    fail "the report does not say GPU timing was sampled: $(head -5 "$d/report")"
}

# GPU timing unavailable: interception goes on, the trace says why, the
# report says so first.  check_unavailable DIR STATUS WORDS
check_unavailable() {
  eval "$(sed 's/ /;/g' "$1/out")"
  "$B/trace_check" "$1"/t.*.trace --pageable "$pageable" --pinned "$pinned" --complete --gpu-status "$2" >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$1"/t.*.trace >"$1/report" 2>&1 || fail "report failed" || return
  # the pageable copies' verdict and fix lead (host timing is enough), then why
  # GPU timing is missing
  sed -n 2p "$1/report" | grep -q "^verdict: .*pageable" || fail "the pageable verdict is not first: $(head -3 "$1/report")" || return
  sed -n '/^GPU timing/,+1p' "$1/report" | tr '\n' ' ' | grep -qi "^GPU timing unavailable.*$3" || fail "report does not say why GPU timing is missing: $(head -6 "$1/report")"
}
case_cupti_off() {
  local d="$T/co"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI=0 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  [ ! -s "$d/err" ] || fail "turning CUPTI off printed: $(cat "$d/err")" || return
  check_unavailable "$d" 1 "PAGELOCK_CUPTI=0"
}
case_cupti_missing() {
  local d="$T/cm"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_LIB="$d/no-such-libcupti.so" PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  [ "$(grep -c . "$d/err")" = 1 ] && grep -q "^pagelock: no GPU timing: PAGELOCK_CUPTI_LIB=.*cannot be loaded" "$d/err" ||
    fail "expected one line naming the missing libcupti, got: $(cat "$d/err")" || return
  check_unavailable "$d" 2 "cannot be loaded"
}
# Fake-CUPTI fault injection: another subscriber (nsys), a CUPTI of another
# major version, dropped records.
case_cupti_busy() {
  [ $SIM = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/cb"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_FAIL=subscribe PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  grep -q "another CUPTI client" "$d/err" || fail "no line about the other CUPTI client: $(cat "$d/err")" || return
  check_unavailable "$d" 3 "another CUPTI client"
}
case_cupti_version() {
  [ $SIM = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/cv"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_VERSION=120001 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  check_unavailable "$d" 4 "version 120001"
}
case_cupti_dropped() {
  [ $SIM = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/cd"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" FAKECUPTI_FAIL=nobuffer PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_copies" >"$d/out" 2>"$d/err" || fail "copies failed" || return
  "$B/trace_check" "$d"/t.*.trace --complete --gpu-status 0 --gpu-dropped-min 7 >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/t.*.trace 2>&1 | grep -m1 "^GPU timing" | grep -q "7 dropped" || fail "report does not give the dropped count"
}
# The program starts its own CUPTI client midway (a profiler): it gets
# CUPTI as it would without pagelock, whether it reaches libcupti through
# the dynamic linker or dlopen + dlsym; the trace says from when GPU timing
# stopped; every copy is still recorded.
case_cupti_program_client() {
  local d="$T/cpc" how; mkdir -p "$d"
  "$B/test_cupti_client" linked >/dev/null 2>"$d/err0" || fail "the client fails even without the shim: $(cat "$d/err0")" || return
  for how in linked dlsym; do
    LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$how.%p.trace" "$B/test_cupti_client" $how >"$d/out" 2>"$d/err" ||
      fail "$how: the program's own CUPTI client broke under the shim: $(cat "$d/err")" || return
    grep -q "^pagelock: no GPU timing: the program started its own CUPTI client" "$d/err" ||
      fail "$how: no line saying GPU timing stopped: $(cat "$d/err")" || return
    eval "$(sed 's/ /;/g' "$d/out")"
    "$B/trace_check" "$d"/$how.*.trace --pinned "$pinned" --pinned-bytes "$pinned_bytes" --complete \
      --gpu-status 3 --gpu-memcpy-min 6 >&2 || return
    PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/$how.*.trace 2>&1 | sed -n 2p |
      grep -q "^GPU timing partial: CUPTI, [1-9][0-9]* records, .*then the program started its own CUPTI client" ||
      fail "$how: the report does not say GPU timing stopped partway" || return
  done
  # The same once pagelock's GPU timing is sampled: no window of ours
  # opens inside the program's session (5 ms windows: one every 200 ms).
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=5 PAGELOCK_LOG=debug PAGELOCK_OUTPUT="$d/sm.%p.trace" \
    "$B/test_cupti_client" linked sampled >"$d/out" 2>"$d/err" ||
    fail "sampled: the program's own CUPTI client broke under the shim: $(grep -v 'GPU timing paused\|resumed' "$d/err")" || return
  grep -q "^pagelock: GPU timing paused" "$d/err" || fail "sampled: GPU timing never paused: $(cat "$d/err")" || return
  # ... and with CUPTI kept attached through the pauses, the program's
  # thread inside a copy call at one of them (slow copies over fakecuda):
  # its own records each carry their call's correlation id.
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_DETACH=0 PAGELOCK_CUPTI_WINDOW_MS=5 FAKECUDA_PAGEABLE_GBPS=0.05 \
    PAGELOCK_OUTPUT="$d/sa.%p.trace" "$B/test_cupti_client" linked sampled >"$d/out" 2>"$d/err" ||
    fail "sampled, attached: the program's own CUPTI client broke under the shim: $(cat "$d/err")" || return
  # A client of the activity API alone (buffers of its own, never
  # subscribed), starting after pagelock detached CUPTI: it gets CUPTI as
  # it would without pagelock, with no window of ours after it.
  for how in linked dlsym; do
    LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_WINDOW_MS=5 PAGELOCK_OUTPUT="$d/ac$how.%p.trace" \
      "$B/test_cupti_client" $how activity >"$d/out" 2>"$d/err" ||
      fail "activity, $how: the program's own activity client broke under the shim: $(cat "$d/err")" || return
    grep -q "^pagelock: no GPU timing: the program started its own CUPTI client" "$d/err" ||
      fail "activity, $how: no line saying GPU timing stopped: $(cat "$d/err")" || return
  done
  # The same client from before the program's first CUDA call: pagelock's
  # own CUPTI session never starts.
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/early.%p.trace" "$B/test_cupti_client" linked early \
    >"$d/out" 2>"$d/err" || fail "early: the program's own activity client broke under the shim: $(cat "$d/err")" || return
  grep -q "^pagelock: no GPU timing: the program started its own CUPTI client (a profiler) before CUDA" "$d/err" ||
    fail "early: no line saying the program's client came first: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/early.*.trace --pinned 8 --complete --gpu-status 3 >&2 || return
  # A start of ours that failed after subscribing must leave no subscription
  # behind for the program's client to collide with (fake CUPTI only: it
  # can make the activity API fail).
  [ $SIM = 1 ] || return 0
  LD_PRELOAD="$SHIM" FAKECUPTI_FAIL=enable PAGELOCK_OUTPUT="$d/fe.%p.trace" "$B/test_cupti_client" linked subscribe-only \
    >"$d/out" 2>"$d/err" || fail "after a failed start, the program could not subscribe: $(cat "$d/err")" || return
  "$B/trace_check" "$d"/fe.*.trace --pinned 6 --complete --gpu-status 5 >&2
}

# A long run streams its GPU records (periodic flush), not only at exit.
case_cupti_streams() {
  local d="$T/cst"; mkdir -p "$d"
  LD_PRELOAD="$SHIM" PAGELOCK_CUPTI_FLUSH_MS=100 PAGELOCK_OUTPUT="$d/t.%p.trace" "$B/test_stress" 3 >/dev/null 2>"$d/err" &
  local pid=$! mid=0 n
  # Poll rather than sample once: on a loaded machine (CI, ctest -j) the
  # first flush can come late.  A sample counts only if the program was
  # still running after it was read, so the exit flush cannot pass it.
  while [ "$mid" = 0 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.2
    n=$("$B/trace_check" "$d"/t.*.trace 2>/dev/null | grep -o 'memcpy=[0-9]*' | cut -d= -f2)
    kill -0 $pid 2>/dev/null && [ "${n:-0}" -gt 0 ] && mid=$n
  done
  wait $pid || fail "stress failed: $(cat "$d/err")" || return
  [ "$mid" -gt 0 ] || fail "no GPU records in the trace while the program ran"
}
