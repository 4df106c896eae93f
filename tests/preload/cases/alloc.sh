# shellcheck shell=bash
# Preload cases: the allocation hooks: another allocator next or first,
# allocation sites, malloc semantics, huge pages, 200 threads at once.
# Sourced by tests/preload/run.sh (B, SIM, LIB, SHIM, EXTRA, DEMO, T, fail).

# A next allocator other than glibc's, whose blocks have nothing readable
# below them: every hook must hand it every request and never look below a
# block.  It maps memory through the shim's mmap hook while holding its
# lock, as jemalloc does, and exits 86 when a hook allocates from there
# (which would deadlock jemalloc); 200 threads at once too.  Without the
# shim first, to tell its own faults from ours.
case_next_allocator() {
  [ -z "$EXTRA" ] || { echo "    (guard_alloc must be the allocator after the shim, not $EXTRA: skipped)" >&2; return 0; }
  LD_PRELOAD="$B/testlib/libguard_alloc.so" "$B/test_guard_main" >/dev/null 2>"$T/ga.err" ||
    fail "broken even without the shim: $(cat "$T/ga.err")" || return
  LD_PRELOAD="$SHIM:$B/testlib/libguard_alloc.so" PAGELOCK_OUTPUT="$T/ga.%p.trace" timeout 60 "$B/test_guard_main" \
    >"$T/ga.out" 2>&1 || fail "under the shim (status $?): $(cat "$T/ga.out")" || return
  LD_PRELOAD="$SHIM:$B/testlib/libguard_alloc.so" timeout 120 "$B/test_alloc_threads" 200 20 \
    >"$T/ga.out" 2>&1 || fail "200 threads under the shim (status $?): $(cat "$T/ga.out")"
}

case_alloc_sites() {
  local d="$T/as"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.%p.trace" -- "$B/test_copies" >/dev/null 2>&1 || fail "copies failed" || return
  "$B/pagelock" report "$d"/t.*.trace >"$d/report" || fail "report failed" || return
  grep -qi "alloc" "$d/report" || fail "no allocation-site table in the report" || return
  grep -q "main" "$d/report" || fail "the allocation site (main in copies.c) is not named: $(cat "$d/report")"
}

# A program without PIE that takes malloc's address (Debian's python3)
# holds a PLT stub for malloc of its own: the shim's malloc still serves
# it, so no note may say that the program defines malloc, and the buffer's
# allocation site is named.
case_nopie_malloc() {
  [ -z "$EXTRA" ] || { echo "    (an allocator is preloaded too: skipped)" >&2; return 0; }
  local d="$T/np"; mkdir -p "$d"
  "$B/pagelock" run -o "$d/t.trace" -- "$B/test_nopie_malloc" >"$d/out" 2>"$d/err" ||
    fail "the program failed: $(cat "$d/out" "$d/err")" || return
  "$B/pagelock" report "$d/t.trace" >"$d/report" 2>&1 || fail "report failed: $(cat "$d/report")" || return
  ! grep -q "defines malloc" "$d/report" || fail "false note: $(grep "defines malloc" "$d/report")" || return
  grep -A2 "by allocation site" "$d/report" | grep -q "make_buffer.*nopie_malloc.c" ||
    fail "the allocation site (make_buffer) is not named: $(cat "$d/report")"
}

# The malloc family under the shim behaves as without it (errno, realloc,
# alignment, failures, mmap/mremap/munmap); checked with and without.
# PAGELOCK_HUGEPAGES: in register and auto modes, under the kernel's
# `madvise` mode, malloc'd blocks of at least 4 MiB that are mappings of
# their own (glibc's mmap'd chunks) get MADV_HUGEPAGE on their 2 MiB-aligned
# interior and nothing outside it (a neighbour's memory); a heap block
# (its advice would outlive it), the program's own mappings (often sparse
# reservations), smaller blocks, observe and stage never; 0 turns it off,
# a larger threshold leaves the 16 MiB blocks be.  Under `always` or `never`
# nothing is advised, nor under another allocator (alloc_matrix.sh): its
# blocks are not glibc's, and the shim registers no mmap'd range then.
case_hugepages() {
  local sys=/sys/kernel/mm/transparent_hugepage/enabled
  [ -r $sys ] || { echo "    (no transparent huge pages in this kernel: skipped)" >&2; return 0; }
  local big="malloc64 malloc16 calloc16 memalign16 realloc32" big32="malloc64 realloc32" m n
  grep -q '\[madvise\]' $sys || { echo "    (THP mode is not madvise: nothing may be advised)" >&2; big= big32=; }
  [ -z "$EXTRA" ] || { echo "    (another allocator preloaded: nothing may be advised)" >&2; big= big32=; }
  hp_run() { # label, then the environment; prints the program's lines
    local label=$1; shift
    env "$@" LD_PRELOAD="$SHIM" PAGELOCK_OUTPUT="$T/hp.%p.trace" "$B/test_hugepages" >"$T/hp.$label" 2>&1 ||
      fail "$label: $(cat "$T/hp.$label")"
  }
  hp_expect() { # label, the names advised
    local label=$1 adv=" $2 " want got
    for n in malloc64 malloc16 calloc16 memalign16 realloc32 mmap16 malloc1 shared16 heap16; do
      want=0; case $adv in *" $n "*) want=1 ;; esac
      got=$(grep "^$n " "$T/hp.$label")
      [ "$got" = "$n inside=$want outside=0" ] || fail "$label: '$got', expected inside=$want outside=0" || return
    done
    grep -qx 'errno=55' "$T/hp.$label" || fail "$label: errno changed: $(grep errno "$T/hp.$label")"
  }
  for m in observe stage; do
    hp_run $m PAGELOCK_MODE=$m && hp_expect $m "" || return
  done
  for m in register auto; do
    hp_run $m PAGELOCK_MODE=$m && hp_expect $m "$big" || return
  done
  hp_run off PAGELOCK_MODE=auto PAGELOCK_HUGEPAGES=0 && hp_expect off "" || return
  hp_run 32M PAGELOCK_MODE=auto PAGELOCK_HUGEPAGES=32M && hp_expect 32M "$big32" || return
  hp_run 512K PAGELOCK_MODE=auto PAGELOCK_HUGEPAGES=512K && hp_expect 512K "$big" || return
}

case_alloc_semantics() {
  "$B/test_alloc_semantics" >/dev/null || fail "fails even without the shim" || return
  LD_PRELOAD="$SHIM" PAGELOCK_TRACK_MIN=4K "$B/test_alloc_semantics" >"$T/as.out" 2>&1 || fail "$(cat "$T/as.out")" || return
  LD_PRELOAD="$SHIM" "$B/test_alloc_semantics" >"$T/as.out" 2>&1 || fail "$(cat "$T/as.out")"
}

# ---- allocators --------------------------------------------------------------
# The allocator of these cases is alloc_matrix.sh's (jemalloc, tcmalloc,
# mimalloc), else guard_alloc.

# An allocator preloaded before the shim serves the program's malloc, so
# malloc'd buffers have no allocation site: the trace says why in a NOTE
# and the report shows it, with the way out.  With the shim first: sites,
# and no such note.
case_alloc_first() {
  local d="$T/af" a="${PL_TEST_PRELOAD_FIRST:-${PL_TEST_PRELOAD_LAST:-$B/testlib/libguard_alloc.so}}" name
  name=$(basename "$a"); mkdir -p "$d"
  LD_PRELOAD="$a:$LIB" PAGELOCK_OUTPUT="$d/f.%p.trace" timeout 60 "$B/test_copies" >"$d/out" 2>"$d/err" ||
    fail "copies failed with $name first (status $?): $(cat "$d/err")" || return
  [ ! -s "$d/err" ] || fail "stderr not empty: $(cat "$d/err")" || return
  eval "$(sed 's/ /;/g' "$d/out")"
  "$B/trace_check" "$d"/f.*.trace --pageable "$pageable" --pinned "$pinned" --failed 0 --complete >&2 || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/f.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  # tcmalloc defines mmap too: then mapped buffers are named as well
  grep -qxF "warning: allocation sites are missing for malloc'd buffers because $name is preloaded before libpagelock.so; put libpagelock.so first in LD_PRELOAD (\`pagelock run\` does this)" "$d/report" ||
    grep -qxF "warning: allocation sites are missing for malloc'd and mmap'd buffers because $name is preloaded before libpagelock.so; put libpagelock.so first in LD_PRELOAD (\`pagelock run\` does this)" "$d/report" ||
    fail "the report does not say why allocation sites are missing: $(head -5 "$d/report")" || return
  LD_PRELOAD="$LIB:$a" PAGELOCK_OUTPUT="$d/l.%p.trace" timeout 60 "$B/test_copies" >/dev/null 2>"$d/err" ||
    fail "copies failed with $name last (status $?): $(cat "$d/err")" || return
  PAGELOCK_NO_ADDR2LINE=1 "$B/pagelock" report "$d"/l.*.trace >"$d/report" 2>&1 || fail "report failed" || return
  ! grep -q "allocation sites are missing" "$d/report" || fail "a note about allocation sites with the shim first" || return
  grep -A3 "^pageable copies by allocation site" "$d/report" | grep -q " test_copies+0x" ||
    fail "no allocation site with the shim first: $(cat "$d/report")"
}

# 200 threads allocating at once, started together: every malloc-family
# call, mmap, mremap, munmap, a thread in dlopen/dlclose, forks.  No hang,
# every byte kept, the registry exact (alloc_threads.c says what it holds).
case_alloc_threads() {
  LD_PRELOAD="$SHIM" timeout 120 "$B/test_alloc_threads" 200 30 "$B/testlib/libnext_a.so" >"$T/at.out" 2>&1 ||
    fail "status $? (124: hung): $(cat "$T/at.out")" || return
  grep -q "^alloc_threads: ok .* registry=consistent" "$T/at.out" || fail "$(cat "$T/at.out")"
}
