set -u
export PATH=/usr/local/cuda/bin:$PATH
date -u
bash tests/gpu/run.sh $OUT/gpu > $OUT/run.txt 2>&1; echo "run.sh done $(date -u)"
grep -E "^(build|nvcc|preload|static|CUPTI|torch|cupy|stage|pagelock|report|bench)" $OUT/run.txt | grep -v " ok "
grep -A45 "== summary" $OUT/gpu/bench.log | grep -E "staged|async|overlap|malloc|256 B|classify"
ROUNDS=5 bash tests/bench/diag_h2d.sh /tmp/pagelock-gpu-build > $OUT/diag_h2d.txt 2>&1
grep -A40 "^size" $OUT/diag_h2d.txt
cp $OUT/gpu/all.tar.gz $OUT/ 2>/dev/null; rm -rf $OUT/gpu
