# shellcheck shell=bash
# Preload cases: the shim's threads and the program's signals.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# ---- the shim's threads and the program's signals (issue 39 item 4) ----
# Every thread but the program's own blocks every signal the program could
# receive, in each mode, with every thread the mode starts there to see:
# the trace writer, CUPTI's thread, the copy threads, the registration
# thread, and the thread CUPTI starts from the shim's calls (fake CUPTI
# made to inherit its creator's mask).  Over a real driver only the
# shim's own threads are judged.
case_sigmask_threads() {
  local d="$T/smt" m want only="" got
  mkdir -p "$d"
  [ "$SIM" = 1 ] || only=pagelock-
  for m in observe stage register auto; do
    case $m in
      observe) want="pagelock-cupti pagelock-trace" ;;
      stage) want="pagelock-copy pagelock-cupti pagelock-trace" ;;
      *) want="pagelock-cupti pagelock-pin pagelock-trace" ;;
    esac
    [ "$SIM" = 1 ] && want="$want fakecupti"
    FAKECUPTI_WORKER_SIGNALS=inherit PAGELOCK_COPY_THREADS=3 PAGELOCK_MODE=$m LD_PRELOAD="$SHIM" \
      PAGELOCK_OUTPUT="$d/$m.%p.trace" timeout 120 "$B/test_sigmask" threads $only >"$d/$m.out" 2>"$d/$m.err" ||
      fail "$m: a thread leaves signals unblocked (or the program failed): $(grep -v 'blocked=all' "$d/$m.out" | cut -c1-300) $(head -3 "$d/$m.err")" || return
    got=$(sed -n 's/^threads=//p' "$d/$m.out")
    echo "    $m: $got, $(grep -o 'bytes_checked=[0-9]*' "$d/$m.out")" >&2
    for t in $want; do
      case ",$got," in *",$t,"*) ;; *) fail "$m: no thread named $t among: $got" || return ;; esac
    done
  done
}

# The threads CUPTI starts again each time the shim attaches it for a
# window of GPU timing, from the shim's own CUPTI thread: fake CUPTI's
# thread keeps the mask of the thread that started it, and must find every
# signal blocked there.  Windows of 5 ms: one attach every 0.8 s.
case_sigmask_reattach() {
  [ "$SIM" = 1 ] || { echo "    (fake CUPTI only: skipped)" >&2; return 0; }
  local d="$T/smr" k
  mkdir -p "$d"
  FAKECUPTI_WORKER_SIGNALS=inherit FAKECUPTI_ATTACH_LOG=1 PAGELOCK_CUPTI_WINDOW_MS=5 LD_PRELOAD="$SHIM" \
    PAGELOCK_OUTPUT="$d/t.%p.trace" timeout 120 "$B/test_sigmask" reattach 2500 >"$d/out" 2>"$d/err" ||
    fail "$(cat "$d/out") $(grep -v '^fakecupti: attached' "$d/err" | head -3)" || return
  echo "    $(cat "$d/out"), $(grep -c '^fakecupti: attached' "$d/err") attaches" >&2
  k=$(sed -n 's/.* cupti_threads=\([0-9]*\) .*/\1/p' "$d/out")
  [ "${k:-0}" -ge 2 ] && [ "$(grep -c '^fakecupti: attached' "$d/err")" -ge 2 ] ||
    fail "CUPTI was not attached again (so nothing was tested): $(cat "$d/out")"
}

# A single-threaded program whose SIGALRM handler (128 KiB of stack)
# asserts it runs on the main thread, a 50 us timer firing while it
# copies: the handler ran on the shim's CUPTI thread (64 KiB, nothing
# blocked) and crashed the program 6 times in 7 under plain observe.
case_sigmask_alarm() {
  local d="$T/sma" m ms
  mkdir -p "$d"
  for m in observe auto; do
    ms=1500; [ $m = observe ] || ms=600
    PAGELOCK_MODE=$m LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$d/$m.%p.trace" timeout 120 \
      "$B/test_sigmask" alarm $ms >"$d/$m.out" 2>"$d/$m.err" ||
      fail "$m: $(cat "$d/$m.out") $(head -3 "$d/$m.err")" || return
    echo "    $m: $(cat "$d/$m.out")" >&2
  done
}
