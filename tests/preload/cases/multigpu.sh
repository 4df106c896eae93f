# shellcheck shell=bash
# Preload cases: several devices in one process, and one device per rank.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# ---- several devices (issue 23) --------------------------------------------
# tests/preload/multigpu.c: one process, two devices, two threads each with
# its own device current, pageable 3 MiB uploads and downloads of known
# bytes, then one device-to-device copy and one peer copy each way between
# the devices.
# Over fakecuda with FAKECUDA_DEVICES=2 (the GPU host runs it over its own
# devices and skips it with fewer than two).
MG_ENV="FAKECUDA_DEVICES=2 PAGELOCK_TRACK_MIN=16K PAGELOCK_STAGE_MIN=16K PAGELOCK_REGISTER_HOT=100"
MG_ROUNDS=6
# Each thread's host<->device copies: 2 per round and the downloads of
# what the other device's buffer was copied into (device to device, peer).
MG_PER_DEV=$((2 * MG_ROUNDS + 2))

# mg MODE TAG [-- TRACE_CHECK_OPTIONS...]: test_multigpu under
# --mode=MODE (MG_SET: more VAR=VALUE).  Bytes exact on both devices, the
# trace complete with no failed copy, and the JSON report's GPU device
# table lists devices 0 and 1, each with copies.  Leaves the program's
# line in MG_LINE and the run's folder in MG_DIR.
mg() {
  local mode=$1 tag=$2 d st pid; shift 2
  [ $# -gt 0 ] && shift
  d="$T/mg_${tag}_$mode"; mkdir -p "$d"; MG_DIR=$d
  env $MG_ENV ${MG_SET:-} timeout -k 5 100 \
    "$B/pagelock" run --mode="$mode" -o "$d/t.%p.trace" -- "$B/test_multigpu" $MG_ROUNDS >"$d/out" 2>"$d/err"
  st=$?
  MG_LINE=$(grep '^multigpu: ' "$d/out" | tail -1)
  [ $st = 0 ] || fail "--mode=$mode: exit $st: $MG_LINE $(grep -E '^(multigpu|pagelock):' "$d/err" | grep -v 'trace written' | head -4)" || return
  echo "    --mode=$mode: $MG_LINE" >&2
  case $MG_LINE in *": skipped "*) MG_LINE=; return 0 ;; esac
  echo "$MG_LINE" | grep -q " copies_per_device=$MG_PER_DEV d2d=2 peer=2 wrong=0 failed=0 " ||
    fail "--mode=$mode: $MG_LINE" || return
  # Chunks used only with their own context: the fake refuses (and counts)
  # an event recorded on a stream of another context, as CUDA does.
  case $MG_LINE in *" misuses=0 "* | *" misuses=-1 "*) ;;
    *) fail "--mode=$mode: events recorded on another context's stream: $MG_LINE" || return ;;
  esac
  pid=${MG_LINE##* pid=}
  [ -f "$d/t.$pid.trace" ] || fail "--mode=$mode: no trace of pid $pid: $(ls "$d")" || return
  "$B/trace_check" "$d/t.$pid.trace" --complete --failed 0 --pageable $((2 * MG_PER_DEV)) "$@" >&2 ||
    fail "--mode=$mode: the trace" || return
  "$B/pagelock" report --format json "$d/t.$pid.trace" >"$d/report.json" 2>"$d/report.err" ||
    fail "--mode=$mode: report --format json failed: $(cat "$d/report.err")" || return
  python3 - "$d/report.json" <<'PY' >&2 || fail "--mode=$mode: the report's device table"
import json, sys
j = json.load(open(sys.argv[1]))
devs = {d["device"]: d for p in j["processes"] for d in (p.get("gpu") or {}).get("devices", [])}
bad = [f"device {i}: {'missing' if i not in devs else 'no copies'}" for i in (0, 1)
       if i not in devs or devs[i]["copies"] == 0]
if set(devs) - {0, 1}:
    bad.append(f"devices {sorted(set(devs) - {0, 1})} the program never used")
for b in bad:
    print("report: " + b)
sys.exit(1 if bad else 0)
PY
}
mg_skip() {
  command -v python3 >/dev/null && [ -x "$B/test_multigpu" ] && return 1
  echo "    (python3 or test_multigpu missing: skipped)" >&2
}

# Observe: nothing staged or registered, both devices in the report, the
# device-to-device copies recorded as they went, every copy joined to the
# GPU's record of it.
case_multigpu_observe() { mg_skip || mg observe observe -- --registered-max 0 --d2d-min 1 --gpu-status 0 --gpu-joined; }

# Stage with a 4 MiB pool shared by the two devices' contexts: bytes exact,
# the pool bound never exceeded (stage registers nothing but the pool's
# slabs, so the fake driver's registered-bytes high-water mark is the
# pool's), copies staged, device-to-device copies passed through, no chunk's
# event recorded on another context's stream (mg checks it).
case_multigpu_stage() {
  mg_skip && return 0
  MG_SET="PAGELOCK_POOL_SIZE=4M" mg stage stage -- --registered-max 0 --d2d-min 1 || return
  [ -n "$MG_LINE" ] || return 0
  local hw=${MG_LINE##* high_water=}; hw=${hw%% *}
  [ "$hw" = -1 ] || [ "$hw" -le 4194304 ] || fail "registered bytes reached $hw, over the 4 MiB pool: $MG_LINE" || return
  [ "$hw" = -1 ] || [ "$hw" -gt 0 ] || fail "nothing staged: $MG_LINE" || return
  grep -q "^routes: .* [1-9][0-9]* staged" "$MG_DIR/err" || fail "no staged copies in the report: $(grep '^routes' "$MG_DIR/err")"
}

# Auto with the default pool: hot buffers registered in both contexts,
# bytes exact, device-to-device copies passed through.
case_multigpu_auto() { mg_skip || mg auto auto -- --registered-min 4 --d2d-min 1; }

# Auto and register with a 4 MiB pool shared by the two contexts: a copy
# staged while its buffer is being registered runs out of chunks and
# passes the rest through, which the driver refused (cudaErrorInvalidValue)
# when that rest started inside the fresh registration and ran past its end
# (the fake models the refusal); it is now cut at the interior's edges.
case_multigpu_auto_small_pool() {
  mg_skip || { MG_SET="PAGELOCK_POOL_SIZE=4M" mg auto xpool -- --registered-min 4 &&
    MG_SET="PAGELOCK_POOL_SIZE=4M" mg register xpool -- --registered-min 4; }
}

# Every COPY record names the device of the context its copy ran in (the
# shim asks the driver once per context change, per thread): each thread's
# host<->device copies on its own device, and no thread on two devices.
case_multigpu_copy_device() {
  mg_skip || mg observe dev -- --device-copies 0=$MG_PER_DEV --device-copies 1=$MG_PER_DEV --thread-one-device
}

# The register budget held over two contexts: under auto with an 8 MiB
# budget and a 4 MiB pool, four 3 MiB buffers hot in two contexts cannot
# all be registered (copies staged for the budget).  The shim's own high-water mark stays within the
# budget, and so does the fake driver's registered bytes minus the pool.
case_multigpu_budget() {
  mg_skip && return 0
  MG_SET="PAGELOCK_POOL_SIZE=4M PAGELOCK_REGISTER_BUDGET=8M" mg auto budget -- --registered-min 1 --why-min BUDGET=1 \
    --counter-max registered_bytes_high_water=8388608 --counter-min register_budget=8388608 \
    --counter-max register_budget=8388608 || return
  [ -n "$MG_LINE" ] || return 0
  local hw=${MG_LINE##* high_water=}; hw=${hw%% *}
  [ "$hw" = -1 ] || [ "$hw" -le $(((4 + 8) << 20)) ] ||
    fail "registered bytes reached $hw, over the 8 MiB budget plus the 4 MiB pool: $MG_LINE"
}

# Device-to-device copies (cudaMemcpy DeviceToDevice: cuMemcpyDtoD_v2;
# cudaMemcpyAsync Default: cuMemcpyAsync) and peer copies (cudaMemcpyPeer,
# cudaMemcpyPeerAsync: cuMemcpyPeer, cuMemcpyPeerAsync) each leave one COPY
# record, of its own direction, passed through under every mode.
case_multigpu_d2d() {
  mg_skip && return 0
  local mode
  for mode in observe stage auto; do
    MG_SET="PAGELOCK_POOL_SIZE=4M" mg $mode d2d -- --d2d 2 --peer 2 --api-min cuMemcpyDtoD_v2=1 \
      --api-min cuMemcpyPeer=1 --api-min cuMemcpyPeerAsync=1 || return
  done
}
# Two processes of one job, one device each (torchrun, mpirun: RANK and
# LOCAL_RANK per process), under observe, stage and auto: bytes exact, one
# trace per rank whose copies all name its own device, and one report
# whose rank table lists both.
case_multigpu_ranks() {
  mg_skip && return 0
  local m d r
  for m in observe stage auto; do
    d="$T/mgr_$m"; mkdir -p "$d"
    env $MG_ENV timeout -k 5 100 "$B/pagelock" run --mode=$m -o "$d/rank%r.trace" -- sh -c \
      "RANK=0 LOCAL_RANK=0 '$B/test_multigpu' rank 4 & RANK=1 LOCAL_RANK=1 '$B/test_multigpu' rank 4 & wait" \
      >"$d/out" 2>"$d/err" ||
      fail "--mode=$m: the job failed: $(grep -hE '^(multigpu|pagelock)' "$d/out" "$d/err" | head -4)" || return
    if grep -q 'skipped' "$d/out"; then echo "    (fewer than two devices: skipped)" >&2; return 0; fi
    echo "    --mode=$m: $(tr '\n' ' ' <"$d/out")" >&2
    for r in 0 1; do
      grep -q "^multigpu-rank: device=$r copies=8 wrong=0 failed=0 " "$d/out" ||
        fail "--mode=$m: rank $r: $(cat "$d/out")" || return
      [ -f "$d/rank$r.trace" ] || fail "--mode=$m: no rank$r.trace: $(ls "$d")" || return
      "$B/trace_check" "$d/rank$r.trace" --complete --failed 0 --pageable 8 --device-copies $r=8 >&2 ||
        fail "--mode=$m: rank $r's trace" || return
    done
    grep -Eq '^ *rank +host' "$d/err" || fail "--mode=$m: no per-rank table: $(tail -5 "$d/err")" || return
    [ "$(grep -Ec '^ +[01] +[^ ]+ +[0-9]+ +8 ' "$d/err")" = 2 ] ||
      fail "--mode=$m: the rank table does not list both ranks with 8 copies: $(grep -A3 -E '^ *rank +host' "$d/err")" || return
  done
}
