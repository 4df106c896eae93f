# shellcheck shell=bash
# Preload cases: processes: fork and exec, a threaded stress, setuid, ranks of
# a job and the trace names they give.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

case_fork_exec() {
  local d="$T/fe"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_fork_exec" "$B/test_copies" 5 >"$d/out" 2>"$d/err" || { cat "$d/err" >&2; fail "fork_exec failed"; return; }
  local n; n=$(ls "$d"/t.*.trace | wc -l)
  [ "$n" = 6 ] || fail "expected 6 traces (parent + 5 exec'd children), got $n" || return
  local exact=0 f
  for f in "$d"/t.*.trace; do
    "$B/trace_check" "$f" --complete >/dev/null 2>&1 || fail "incomplete trace $f" || return
    "$B/trace_check" "$f" --pageable 22 --pinned 20 >/dev/null 2>&1 && exact=$((exact+1))
  done
  [ "$exact" = 5 ] || fail "expected 5 child traces with exact counts, got $exact"
}

# Processes that end by _exit or _Exit (Python's os._exit) run no
# destructor: their traces are finished there all the same, a forked
# child's too; a vfork child's _exit leaves its parent's trace alone; and
# _exit from a signal handler that may have interrupted the shim, or
# malloc, ends the process with its status, without a hang.
case_exit_paths() {
  local d="$T/ex" st f n
  mkdir -p "$d"
  ex() { LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$1.%p.trace" timeout -k 5 20 "$B/test_exit_paths" "$1" >"$d/$1.out" 2>"$d/$1.err"; }
  ex child || fail "child: exit $?: $(cat "$d/child.err")" || return
  n=$(ls "$d"/child.*.trace | wc -l)
  [ "$n" = 2 ] || fail "child: expected 2 traces, got $n: $(ls "$d")" || return
  f="$d/child.$(sed -n 's/^exit_paths: child //p' "$d/child.out").trace"
  "$B/trace_check" "$f" --complete --pageable 4 >&2 || fail "child: the child's trace, ended by _exit" || return
  ex self; st=$?
  [ $st = 5 ] || fail "self: exit $st, expected 5: $(cat "$d/self.err")" || return
  # (not from a handler: CUPTI's records are flushed, every copy joins its own)
  "$B/trace_check" "$d"/self.*.trace --complete --pageable 3 --gpu-joined >&2 || fail "self: the trace, ended by _Exit" || return
  ex vfork || fail "vfork: exit $?: $(cat "$d/vfork.err")" || return
  n=$(ls "$d"/vfork.*.trace | wc -l)
  [ "$n" = 1 ] || fail "vfork: expected the parent's trace only, got $n" || return
  "$B/trace_check" "$d"/vfork.*.trace --complete --pageable 4 >&2 || fail "vfork: the parent's trace" || return
  ex handler; st=$?
  [ $st = 7 ] || fail "handler: exit $st, expected 7 (124: hung): $(cat "$d/handler.err")" || return
  [ ! -s "$d/handler.err" ] || fail "handler: the shim said: $(cat "$d/handler.err")" || return
  # the handler's _exit interrupts malloc, 5 runs: finishing the trace
  # there must take no lock malloc holds (the trace is still complete)
  local k
  for k in 1 2 3 4 5; do
    ex malloc; st=$?
    [ $st = 7 ] || fail "malloc run $k: exit $st, expected 7 (124: hung): $(cat "$d/malloc.err")" || return
  done
  "$B/trace_check" "$(ls "$d"/malloc.*.trace | head -1)" --complete --pageable 40 >&2 || fail "malloc: the trace"
}

case_stress() {
  LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$T/stress.%p.trace" timeout 120 "$B/test_stress" 3 >"$T/stress.out" 2>&1 || fail "stress: $(cat "$T/stress.out")" || return
  grep -q "registry=consistent" "$T/stress.out" || fail "registry not checked: $(cat "$T/stress.out")"
}

# A setuid program gets no trace from the shim (it would write where the
# caller's environment says, with privileges the caller lacks).  Needs root
# (to make the binary setuid) and setpriv (to run it as nobody).
case_setuid() {
  [ -x "$B/test_setuid_copies" ] || { echo "    (no test_setuid_copies in this build: skipped)" >&2; return 0; }
  if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then echo "    (needs root and setpriv: skipped)" >&2; return 0; fi
  local d; d=$(mktemp -d /tmp/pagelock-suid.XXXXXX); chmod 755 "$d"; mkdir "$d/out"; chmod 777 "$d/out"
  cp "$B/test_setuid_copies" "$d/plain"; cp "$B/test_setuid_copies" "$d/suid"
  chmod 755 "$d/plain"; chmod 4755 "$d/suid"
  local run=(setpriv --reuid=65534 --regid=65534 --clear-groups env PAGELOCK_OUTPUT="$d/out/%p.trace")
  "${run[@]}" "$d/plain" >/dev/null 2>"$d/err1" || { rm -rf "$d"; fail "plain copy failed as nobody: $(cat "$d/err1")"; return; }
  [ "$(ls "$d/out" | wc -l)" = 1 ] || { rm -rf "$d"; fail "control run wrote no trace (the test could not fail)"; return; }
  rm -f "$d/out"/*
  "${run[@]}" "$d/suid" >/dev/null 2>"$d/err2" || { rm -rf "$d"; fail "setuid copy failed: $(cat "$d/err2")"; return; }
  local n; n=$(ls "$d/out" | wc -l); rm -rf "$d"
  [ "$n" = 0 ] || fail "a setuid program wrote $n trace file(s)"
}

# A multi-process job (torchrun/mpirun style: RANK set per process) gives
# one trace per rank, and one report covers them all, rank by rank.
case_ranks() {
  local d="$T/rk"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/rank%r.trace" -- sh -c "RANK=0 '$B/test_copies' >/dev/null & RANK=1 '$B/test_copies' >/dev/null & wait" \
    >/dev/null 2>"$d/err" || fail "job failed: $(cat "$d/err")" || return
  [ -f "$d/rank0.trace" ] && [ -f "$d/rank1.trace" ] || fail "expected rank0.trace and rank1.trace, got: $(ls "$d")" || return
  "$B/trace_check" "$d/rank1.trace" --pageable 22 --complete --gpu-status 0 >&2 || return
  grep -Eq "^ *rank +host" "$d/err" || fail "no per-rank table in the report: $(cat "$d/err")" || return
  [ "$(grep -Ec '^ +[01] +[^ ]+ +[0-9]+ +42 ' "$d/err")" = 2 ] || fail "the per-rank table does not list both ranks with 42 copies: $(grep -A4 -E '^ *rank +host' "$d/err")"
}

# ---- rank names (issue 40, Ranks) ----
# %r is the launcher's rank, and a process with none (torchrun's or
# mpirun's own) gets "norank", never 0; a name taken gets its number
# before ".trace" (x.0.1.trace); `pagelock report DIR` reads them all.
case_rank_names() {
  local d="$T/rank" v n
  mkdir -p "$d"
  local clean="env -u RANK -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK -u MV2_COMM_WORLD_RANK -u SLURM_PROCID -u LOCAL_RANK"
  rn() { $clean "$@" LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/x.%r.trace" "$B/test_copies" >/dev/null 2>>"$d/err" || fail "$*: the program failed"; }
  rn || return
  rn RANK=0 || return
  rn RANK=0 LOCAL_RANK=0 || return
  rn OMPI_COMM_WORLD_RANK=3 || return
  rn PMIX_RANK=4 || return
  rn PMI_RANK=5 || return
  rn MV2_COMM_WORLD_RANK=6 || return
  rn SLURM_PROCID=7 || return
  rn LOCAL_RANK=1 || return
  rn RANK=abc || return
  [ ! -s "$d/err" ] || fail "the shim said: $(cat "$d/err")" || return
  [ "$(cd "$d" && ls *.trace | sort | tr '\n' ' ')" = "x.0.1.trace x.0.trace x.3.trace x.4.trace x.5.trace x.6.trace x.7.trace x.norank.1.trace x.norank.2.trace x.norank.trace " ] ||
    fail "trace names: $(cd "$d" && ls | tr '\n' ' ')" || return
  "$B/pagelock" report "$d" >"$d/report" 2>"$d/rerr" || fail "report DIR: $(cat "$d/rerr")" || return
  grep -q "== total over 10 processes ==" "$d/report" || fail "report DIR did not read the 10 traces: $(grep '^==' "$d/report" | head -3)" || return
  "$B/pagelock" report --format json "$d" >"$d/json" 2>/dev/null || fail "report --format json DIR" || return
  command -v python3 >/dev/null 2>&1 || return 0
  n=$(python3 -c 'import json, sys; print(sorted(-1 if p["rank"] is None else p["rank"] for p in json.load(sys.stdin)["processes"]))' <"$d/json")
  [ "$n" = "[-1, -1, -1, 0, 0, 3, 4, 5, 6, 7]" ] || fail "ranks in the traces (-1: none): $n"
}
