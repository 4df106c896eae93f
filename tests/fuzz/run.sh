#!/bin/sh
# run.sh BUILD_DIR SECONDS - fuzzes the trace reader and the report writers
# for SECONDS with the fuzz_reader of a PAGELOCK_FUZZ=ON build in BUILD_DIR.
#
# Seeds are valid traces written by the CLI tests' generators (copy calls
# only, a cut one, version-2 traces with GPU, NAME, LINK, CLOCK, DEVICE
# and GPU_STATUS records, and version-3 ones with CHECK records, stop flags,
# GPU_SAMPLE records and names a terminal would act on); the corpus grows
# in BUILD_DIR/fuzz-corpus and is reused by the next run.  A crash, leak, sanitizer report or invalid
# JSON stops the fuzzer with a non-zero status (this script's too) and
# leaves the input in BUILD_DIR/fuzz-artifacts/.
set -eu
B=$1
SECS=${2:-60}
seeds="$B/fuzz-seeds"
corpus="$B/fuzz-corpus"
arts="$B/fuzz-artifacts"
mkdir -p "$seeds" "$corpus" "$arts"
"$B/pl_mktrace" "$seeds/copies.trace" --copies 6 --sites 2 >/dev/null
"$B/pl_mktrace" "$seeds/cut.trace" --copies 4 --cut-mid-record >/dev/null
"$B/pl_mktrace" "$seeds/noend.trace" --copies 3 --no-end --simulated >/dev/null
"$B/pl_mkgputrace" "$seeds/before.trace" before --iters 2
"$B/pl_mkgputrace" "$seeds/after.trace" after --iters 1 --rank 3
"$B/pl_mkgputrace" "$seeds/staged.trace" staged
# version 3: CHECK records (small blocks), stop flags, names to escape
"$B/pl_mktrace" "$seeds/checked.trace" --copies 6 --sites 2 --checksums 3 >/dev/null
"$B/pl_mktrace" "$seeds/checked-gpu.trace" --scenario staged --checksums 5 >/dev/null
"$B/pl_mktrace" "$seeds/diskfull.trace" --copies 3 --no-end --flags 0x12 --checksums 4 >/dev/null
"$B/pl_mktrace" "$seeds/evil.trace" --copies 2 --evil-names >/dev/null
# sampled GPU timing: GPU_SAMPLE pauses and resumes (one stray, two
# malformed), and a trace cut inside a GPU_SAMPLE
"$B/pl_mktrace" "$seeds/sampled.trace" --scenario sampled >/dev/null
"$B/pl_mktrace" "$seeds/sampled-cut.trace" --scenario sampled-cut >/dev/null
# --mode auto: every route, reasons (one out of range) and the
# registration counters
"$B/pl_mktrace" "$seeds/routes.trace" --copies 0 --mode 3 \
  --copy 2:h2d:pageable:register:none:1M:1000 --copy 1:h2d:pageable:stage:shared:1M:1000 \
  --copy 1:d2h:pageable:pass:cold:4K:100 --copy 1:h2d:pageable:pass:99:4K:100 \
  --copy 1:h2d:pinned:pass:none:4K:10 \
  --counters registrations=2,evictions=1,registered_bytes_high_water=2M >/dev/null
# Leaks count as findings; malloc limit keeps a runaway allocation (a size
# read from the file) from passing as "just slow".
# libFuzzer prints a line per new input: keep it in a log, show the end,
# and meanwhile a line every 10 s with the inputs run so far.
log="$B/fuzz.log"
status=0
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1" \
  "$B/fuzz_reader" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=3072 \
  -malloc_limit_mb=1024 -max_len=8192 -print_final_stats=1 \
  -artifact_prefix="$arts/" "$corpus" "$seeds" >"$log" 2>&1 &
pid=$!
t=0
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  t=$((t + 1))
  [ $((t % 10)) = 0 ] || continue
  kill -0 "$pid" 2>/dev/null || break
  n=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  echo "fuzz: ${t} of ${SECS} s, ${n:-0} inputs run"
done
wait "$pid" || status=$?
if [ "$status" != 0 ]; then
  # The finding: sanitizer report, offending input.
  sed -n '/^==[0-9]*==\|runtime error\|fuzz_reader:\|^SUMMARY\|^artifact_prefix\|Test unit written/,$p' "$log" | head -80
  echo "fuzz: FAILED (exit $status); full log in $log"
  exit 1
fi
tail -n 7 "$log"
echo "fuzz: $(sed -n 's/^stat::number_of_executed_units: *//p' "$log") inputs in ${SECS}s, no finding"
