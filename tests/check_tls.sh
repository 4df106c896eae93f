#!/bin/sh
# The shim's static TLS stays within a budget.  Preloaded, it is laid out at
# start; loaded with dlopen (the CUDA_INJECTION64_PATH route) it must fit
# what glibc keeps spare for such libraries: a bare program on glibc 2.36
# dlopens 1.7 KiB of initial-exec TLS and refuses 1.8 KiB, and every other
# such library in the process shares that.  The budget leaves them room.
# usage: check_tls.sh LIBPAGELOCK [BUDGET_BYTES]
lib=${1:?usage: check_tls.sh LIBPAGELOCK [BUDGET_BYTES]}
budget=${2:-1536}
command -v readelf >/dev/null 2>&1 || { echo "check_tls: no readelf (binutils): skipped"; exit 77; }
hex=$(readelf -lW "$lib" | awk '$1 == "TLS" { print $6 }')
size=$(printf '%d' "${hex:-0}")
if [ "$size" -gt "$budget" ]; then
  echo "static TLS of $lib is $size bytes, over the budget of $budget: a dlopened shim (CUDA_INJECTION64_PATH) may not load"
  exit 1
fi
echo "static TLS $size bytes (budget $budget)"
