#!/bin/sh
# static_names.sh NM OBJCOPY ARCHIVE - gives the fake static runtime the
# symbol names of the real libcudart_static.a: there every function and
# object but the API entry points (cuda*, __cuda*) is a local or hidden
# symbol named libcudart_static_ and 40 hex digits (nm on CUDA 13's
# archive: 1703 text symbols, none of another shape).  The report must look
# past them to the program's own code, so the fake must carry the same.
# Its debug information goes too, as the real archive has none.  Renames
# in place; running it twice changes nothing.
set -eu
nm=$1 objcopy=$2 a=$3
map="$a.names"
"$nm" "$a" 2>/dev/null |
  awk 'NF == 3 && $2 ~ /^[tTdDbBrR]$/ && $3 !~ /^(cuda|__cuda|\.L|libcudart_static_)/ { print $3 }' |
  sort -u |
  while read -r s; do
    printf '%s libcudart_static_%s\n' "$s" "$(printf '%s' "$s" | sha1sum | cut -c1-40)"
  done >"$map"
if [ -s "$map" ]; then
  "$objcopy" --strip-debug --redefine-syms="$map" "$a"
else
  "$objcopy" --strip-debug "$a"
fi
