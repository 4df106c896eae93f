# shellcheck shell=bash
# Preload cases: the registration engine (PAGELOCK_MODE register and auto) end
# to end.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# ---- autopin (PAGELOCK_MODE register and auto) ---------------------------------
# tests/preload/autopin.c under `pagelock run --mode=register` and
# `--mode=auto`: what a program may do with buffers the shim page-locks
# behind its back.  Over fakecuda, libpl_reg_guard.so is preloaded after the
# shim and exits 86 the moment memory is released while any byte of it is
# still registered.  Small thresholds keep the buffers small: tracked and
# staged from 16 KiB, and `auto` registers a buffer once as many bytes as
# its size were copied.  Each run must pass the program's own byte checks,
# the guard's, and the trace's (copies went through a registration).
AP_ENV="PAGELOCK_TRACK_MIN=16K PAGELOCK_STAGE_MIN=16K PAGELOCK_REGISTER_HOT=100"

# ap MODE TAG ARGS... [-- TRACE_CHECK_OPTIONS...]: test_autopin_prog ARGS
# under --mode=MODE.  AP_SET: more VAR=VALUE for the run; AP_GUARD: the
# guard (default libpl_reg_guard.so).  Leaves the summary line in AP_LINE.
ap() {
  local mode=$1 tag=$2 args=() d pre st why pid; shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  d="$T/ap_${tag}_$mode"; mkdir -p "$d"
  [ $SIM = 1 ] && pre="$B/testlib/${AP_GUARD:-libpl_reg_guard.so}"
  [ -n "$EXTRA" ] && pre="$EXTRA${pre:+:$pre}"
  env $AP_ENV ${AP_SET:-} ${pre:+"LD_PRELOAD=$pre"} REG_GUARD_VERBOSE=1 timeout -k 5 100 \
    "$B/pagelock" run --mode="$mode" -o "$d/t.%p.trace" -- "$B/test_autopin_prog" "${args[@]}" >"$d/out" 2>"$d/err"
  st=$?
  if [ $st != 0 ]; then
    case $st in 86) why=" (a registration outlived its memory)" ;; 124|137) why=" (hung)" ;; *) why= ;; esac
    fail "${args[*]} --mode=$mode: exit $st$why: $(grep -E '^(autopin|reg_guard|pagelock):' "$d/err" | grep -v 'trace written' | head -6)"
    return
  fi
  AP_LINE=$(grep "^${args[0]}: " "$d/out" | tail -1)
  [ -n "$AP_LINE" ] || fail "${args[*]} --mode=$mode: no summary line: $(cat "$d/out")" || return
  echo "    --mode=$mode: $AP_LINE" >&2
  # (An allocator after the shim takes free from the guard, which then
  # sees what that allocator unmaps, if anything.)
  if [ $SIM = 1 ] && [ -z "$EXTRA" ]; then
    grep -q "^reg_guard: checked [1-9][0-9]* releases" "$d/err" ||
      fail "--mode=$mode: the guard did not watch: $(grep '^reg_guard' "$d/err")" || return
  fi
  case $AP_LINE in *": skipped "*) return 0 ;; esac
  pid=${AP_LINE##* pid=}
  [ -f "$d/t.$pid.trace" ] || fail "--mode=$mode: no trace of pid $pid: $(ls "$d")" || return
  "$B/trace_check" "$d/t.$pid.trace" --complete --failed 0 "$@" >&2 || fail "--mode=$mode: the trace of ${args[*]}"
}
# The same in both modes.
ap2() { ap register "$@" && ap auto "$@"; }
ap_skip() {
  [ -z "${PL_TEST_PRELOAD_FIRST:-}" ] && [ -x "$B/test_autopin_prog" ] && return 1
  echo "    (an allocator preloaded before the shim: nothing malloc'd is registered: skipped)" >&2
}
# Whether the program's own mappings can be registered: not while another
# allocator, preloaded after the shim, serves malloc (its arenas reach mmap
# too: pl_mmap_origin in shim/hooks/hook_alloc.c).  Says so when not.
ap_mapped() {
  [ -z "${PL_TEST_PRELOAD_LAST:-}" ] && return 0
  echo "    (another allocator serves malloc: no mapping is registered: its releases untested here)" >&2
  return 1
}

# The guard itself, without the shim: a program that page-locks part of a
# buffer and releases it without unregistering dies with 86 and one line
# naming the call and both ranges, for each way of releasing memory; after
# unregistering, the release goes through.
case_autopin_guard() {
  [ $SIM = 1 ] || { echo "    (the guard asks the fake driver: skipped)" >&2; return 0; }
  local d="$T/apg" k want got st; mkdir -p "$d"
  for k in free realloc munmap mremap madvise sbrk brk; do
    LD_PRELOAD="$B/testlib/libpl_reg_guard.so" "$B/test_autopin_prog" stale $k >"$d/$k.out" 2>"$d/$k.err"
    st=$?
    want="reg_guard: STALE REGISTRATION: $(sed -n 's/^stale: //p' "$d/$k.out" | head -1)"
    got=$(cat "$d/$k.err")
    [ $st = 86 ] && [ "$got" = "$want" ] || fail "stale $k: exit $st, stderr '$got', expected 86 and '$want'" || return
  done
  LD_PRELOAD="$B/testlib/libpl_reg_guard.so" REG_GUARD_VERBOSE=1 "$B/test_autopin_prog" stale ok >"$d/ok.out" 2>"$d/ok.err" ||
    fail "stale ok: exit $?: $(cat "$d/ok.err")" || return
  grep -q "^reg_guard: checked [1-9][0-9]* releases" "$d/ok.err" || fail "stale ok: the guard did not check: $(cat "$d/ok.err")" || return
  # without the guard the stale release goes through: the guard is what catches it
  "$B/test_autopin_prog" stale free >"$d/free0.out" 2>&1 && grep -q "^stale: free went through" "$d/free0.out" ||
    fail "stale free without the guard: $(cat "$d/free0.out")"
}

# Threads allocating, reallocating, mapping, unmapping (partly too),
# remapping, discarding and handing buffers to each other, with copies in
# between (sources overwritten on return, destinations read on return),
# under a budget small enough to evict.  Then once more in register mode
# with the guard that leaves free to glibc, so that mapped ranges are
# registered too (the shim registers them only when glibc's free is next).
case_autopin_churn() {
  ap_skip && return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=8M" ap2 churn churn 3 4 -- --registered-min 1 || return
  [ $SIM = 1 ] || return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=8M" AP_GUARD=libpl_reg_guard_map.so ap register churn_map churn 3 4 -- --registered-min 1 || return
  [ -n "$EXTRA" ] || echo "$AP_LINE" | grep -q "mapped=[1-9]" || fail "no upload from a registered mapping: $AP_LINE"
}

# A host function releases a buffer the shim registered (munmap, a
# discard of its middle, the same made read-only first, mremap, free) on
# the driver's thread, where the
# driver refuses calls: the guard sees no release of registered memory,
# nothing hangs, and the program sees what it asked for (unmapped memory
# faults, discarded memory reads zero, moved memory keeps its bytes, a
# move of a range with an inaccessible part fails with EFAULT).  The
# guard that leaves free to glibc, so that mappings are registered.
case_autopin_hostfn() {
  ap_skip && return 0
  local k kinds="munmap madvise madvise_ro mremap mremap_none free"
  ap_mapped || kinds=free
  for k in $kinds; do
    AP_GUARD=libpl_reg_guard_map.so ap2 "hostfn_$k" hostfn "$k" -- --registered-min 1 || return
  done
}

# A 20 kHz signal handler maps, touches, discards and unmaps memory of its
# own, and once unmaps a registered buffer, while the main thread copies
# through registrations: no hang (the handler may interrupt the copy
# holding the registration lock), right bytes.
case_autopin_signal() {
  ap_skip && return 0
  if ap_mapped; then
    AP_GUARD=libpl_reg_guard_map.so ap2 signal signal -- --registered-min 2
  else
    AP_GUARD=libpl_reg_guard_map.so ap2 signal signal heap -- --registered-min 1
  fi
}

# An upload's source overwritten as soon as cudaMemcpyAsync returns (with
# the fake's DMA slowed down, a shim that returned before the DMA read the
# source would send the new bytes).
case_autopin_overwrite() { ap_skip || ap2 overwrite overwrite -- --registered-min 3; }
# Registered uploads of 8 MiB with their tail staged: bytes whole after an
# overwrite.
case_autopin_tail() { ap_skip || ap2 tail tail -- --registered-min 6; }
# A download's destination read as soon as the call returns.
case_autopin_readback() { ap_skip || ap2 readback readback -- --registered-min 3; }
# Two blocks sharing a page, both registered, one freed while the other stays.
case_autopin_neighbours() { ap_skip || ap2 neighbours neighbours -- --registered-min 2; }
# free then malloc (munmap then mmap) at the same address: the new bytes
# arrive.  Mapped ranges are registered only with the guard that leaves
# free to glibc: once more with that one.
case_autopin_reuse() {
  ap_skip && return 0
  ap2 reuse reuse -- --registered-min 1 || return
  [ $SIM = 1 ] || return 0
  AP_GUARD=libpl_reg_guard_map.so ap register reuse_map reuse -- --registered-min 1 || return
  [ -n "$EXTRA" ] || echo "$AP_LINE" | grep -q "mmap_registered=2/2" || fail "the mappings were not registered: $AP_LINE"
}

# Six hot 1 MiB buffers for a 2 MiB budget: never more registered (the
# fake driver's high-water mark and the trace's), the second set staged
# while the first is hot, the first evicted for it once idle.
case_autopin_budget() {
  ap_skip && return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=2M PAGELOCK_POOL_SIZE=4M" ap2 budget budget -- --registered-min 2 --why-min BUDGET=1 \
    --counter-min evictions=1 --counter-max registered_bytes_high_water=2097152
}

# The program's pointer queries and its own register/unregister over a
# buffer the shim registered answer exactly as over one never copied, and
# exactly as in a run without the shim.
case_autopin_queries() {
  ap_skip && return 0
  local d="$T/apq" base; mkdir -p "$d"
  "$B/test_autopin_prog" queries >"$d/out" 2>"$d/err" || fail "queries without the shim: $(cat "$d/err")" || return
  base=$(sed -n 's/^queries: \(answers=.* wrong=0\) .*/\1/p' "$d/out")
  [ -n "$base" ] || fail "queries without the shim: $(cat "$d/out")" || return
  ap register queries queries -- --registered-min 1 || return
  [ "$(echo "$AP_LINE" | sed 's/^queries: \(answers=.* wrong=0\) .*/\1/')" = "$base" ] ||
    fail "--mode=register answers differ from a run without the shim: '$AP_LINE' vs '$base'" || return
  ap auto queries queries -- --registered-min 1 || return
  [ "$(echo "$AP_LINE" | sed 's/^queries: \(answers=.* wrong=0\) .*/\1/')" = "$base" ] ||
    fail "--mode=auto answers differ from a run without the shim: '$AP_LINE' vs '$base'"
}

# The driver refuses every registration: every copy right, nothing
# registered, the failure in the trace and logged once.
case_autopin_fail() {
  ap_skip && return 0
  [ $SIM = 1 ] || { echo "    (fault injection needs the fake driver: skipped)" >&2; return 0; }
  local mode n
  for mode in register auto; do
    AP_SET="PAGELOCK_POOL_SIZE=4M" ap $mode fail fail -- --registered-max 0 --why-min FAILED=1 --counter-min register_failures=1 || return
    # the shim's lines: not pagelock run's own about the trace and the spin count
    n=$(grep '^pagelock: ' "$T/ap_fail_$mode/err" | grep -v 'trace written' | grep -vc 'GOMP_SPINCOUNT')
    [ "$n" = 1 ] || fail "--mode=$mode: expected the failure logged once, got: $(grep '^pagelock: ' "$T/ap_fail_$mode/err")" || return
  done
}

# Copies captured into a graph (global mode) from registered buffers, one
# more registered buffer freed during the capture, replays after a pause
# and budget pressure: right bytes, the graph's registrations kept.
case_autopin_capture() {
  ap_skip && return 0
  AP_SET="PAGELOCK_REGISTER_BUDGET=4M" ap2 capture capture -- --registered-min 3 --captured-min 2
}

# fork after registration: the child reads the parent's buffers and exits
# 0; the parent's buffers still copy right, still registered.
case_autopin_fork() { ap_skip || ap2 fork fork -- --registered-min 4; }
