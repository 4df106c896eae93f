"""More distinct allocation stacks than the shim's table holds (32,767),
then copies, for tests/python/deep.sh: the run must complete and the
report must say how many copies and allocations went without a stack."""
import ctypes
import os
import sys

rt = ctypes.CDLL(os.environ["PL_CUDART"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
N = 1 << 20
FUNCS, LINES = 40, 850  # 34,000 lines that allocate, in functions of a usual length

src = "".join("def many%d():\n" % i + "    bytearray(70000)\n" * LINES for i in range(FUNCS))
ns = {}
exec(compile(src, "<flood>", "exec"), ns)
for i in range(FUNCS):
    ns["many%d" % i]()
dev = ctypes.c_void_p()
if rt.cudaMalloc(ctypes.byref(dev), N) != 0:
    sys.exit("cudaMalloc failed")
buf = ctypes.create_string_buffer(N)
for _ in range(3):
    if rt.cudaMemcpy(dev, buf, N, 1) != 0:
        sys.exit("cudaMemcpy failed")
