#!/usr/bin/env bash
# tests/bench/diag_h2d.sh BUILD [VARIANT...] - staged host-to-device copies
# of 16, 64 and 256 MiB and the overlap benchmark against pinned, side by
# side, alternating, ROUNDS rounds (default 5): BUILD's shim ("default",
# and with 16 MiB chunks), then each VARIANT, either LABEL=PATH/libpagelock.so
# (another build: a fixed store policy, an older engine) or LABEL="VAR=V ..."
# (BUILD's shim with other settings).  SIZES picks among 16 64 256 ov
# (default all four).  Prints every result, then per size and variant the
# median and its ratio to pinned (for overlap: the time ratio, lower is
# better).
set -u
B=$(cd "$1" && pwd); shift
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-16 64 256 ov}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
variants=("default=$B/libpagelock.so" "$@")
r() { printf '%-5s %-14s %s\n' "$1" "$2" "$(env PAGELOCK_OUTPUT="$T/d.%p" PAGELOCK_CUPTI=0 PAGELOCK_MODE=stage "${@:3}" 2>&1 | grep '^result' | cut -d' ' -f5)"; }
for round in $(seq "$ROUNDS"); do
  for size in $SIZES; do
    if [ $size = ov ]; then a=(overlap pageable $((16 << 20)) 7); p=(overlap pinned $((16 << 20)) 7)
    else a=(h2d pageable $((size << 20)) 7); p=(h2d pinned $((size << 20)) 7); fi
    r $size pinned X=1 "$B/bench_copy" "${p[@]}"
    for v in "${variants[@]}"; do
      spec=${v#*=}
      if [[ $spec == *.so ]]; then r $size "${v%%=*}" LD_PRELOAD="$spec" "$B/bench_copy" "${a[@]}"
      else r $size "${v%%=*}" LD_PRELOAD="$B/libpagelock.so" $spec "$B/bench_copy" "${a[@]}"; fi
    done
    r $size default.c16M LD_PRELOAD="$B/libpagelock.so" PAGELOCK_CHUNK_SIZE=16M "$B/bench_copy" "${a[@]}"
  done
done | tee "$T/all"
python3 - "$T/all" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 3 and "=" in p[2]:
        d[(p[0], p[1])].append(float(p[2].split("=")[1]))
print("size  variant        median   ratio  (each round)")
for size in ["16", "64", "256", "ov"]:
    if (size, "pinned") not in d: continue
    base = statistics.median(d[(size, "pinned")])
    for (s, v), xs in d.items():
        if s == size:
            m = statistics.median(xs)
            print("%-5s %-14s %7.2f  %.3f  (%s)" % (s, v, m, m / base, " ".join("%.1f" % x for x in xs)))
PY
