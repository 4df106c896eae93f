# tests/preload/cuda_env.sh - sourced by the preload test scripts: B, the
# build directory given as $1 (shifted off), and SIM, 1 when the fake CUDA
# of that build runs the cases (CI), 0 over the real driver
# (PL_TEST_REAL_CUDA=1, or a build without fakecuda: the GPU machine).
B=$(cd "$1" && pwd)
shift
SIM=1
if [ -f "$B/fakecuda/libcuda.so.1" ] && [ "${PL_TEST_REAL_CUDA:-0}" != 1 ]; then
  export LD_LIBRARY_PATH="$B/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  SIM=0
fi
