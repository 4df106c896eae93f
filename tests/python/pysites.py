"""Pageable copies and allocations through ctypes from known lines, for
tests/python/pysites.sh: each line the report must name ends in a marker
comment "# SITE:<name>", which the checker turns into a line number."""
import ctypes
import os
import sys
import tempfile
import threading

rt = ctypes.CDLL(os.environ["PL_CUDART"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
H2D, D2H = 1, 2
N = 1 << 20

dev = ctypes.c_void_p()
if rt.cudaMalloc(ctypes.byref(dev), N) != 0:
    sys.exit("cudaMalloc failed")


def check(r):
    if r != 0:
        sys.exit("cudaMemcpy returned %d" % r)


def new_buffer():
    return ctypes.create_string_buffer(N)  # SITE:alloc


top = ctypes.create_string_buffer(N)  # SITE:alloc_top
check(rt.cudaMemcpy(dev, top, N, H2D))  # SITE:top


def inner(buf):
    check(rt.cudaMemcpy(buf, dev, N, D2H))  # SITE:nested


def outer():
    buf = new_buffer()
    inner(buf)  # SITE:outer


def worker():
    buf = new_buffer()
    for _ in range(3):
        check(rt.cudaMemcpy(dev, buf, N, H2D))  # SITE:thread


def batches(n):
    buf = new_buffer()
    for i in range(n):
        check(rt.cudaMemcpy(dev, buf, N, H2D))  # SITE:generator
        yield i


outer()  # SITE:call_outer
t = threading.Thread(target=worker)
t.start()
t.join()
for _ in batches(2):
    pass
# A thread whose target is the foreign function itself: every Python frame
# is the standard library's (threading), and the report shows those.
lib = threading.Thread(target=rt.cudaMemcpy, args=(dev, top, N, H2D))
lib.start()
lib.join()

# A framework's own frames are looked past: a module laid out as Numba's
# CUDA target ships (site-packages/numba_cuda/numba/cuda/...) copies for
# its caller, and the report names the caller's line, with the framework's
# line that made the copy as the library line.
fw = os.path.join(tempfile.mkdtemp(), "site-packages")
os.makedirs(os.path.join(fw, "numba_cuda", "numba", "cuda"))
with open(os.path.join(fw, "numba_cuda", "numba", "cuda", "fakedrv.py"), "w") as f:
    f.write("def to_device(rt, dev, buf, n):\n    return rt.cudaMemcpy(dev, buf, n, 1)  # LIBSITE:fakedrv\n")
sys.path.insert(0, os.path.join(fw, "numba_cuda", "numba", "cuda"))
import fakedrv  # noqa: E402


def framework_upload():
    buf = new_buffer()
    check(fakedrv.to_device(rt, dev, buf, N))  # SITE:framework


framework_upload()

# The end as multiprocessing's children and scripts that skip their
# teardown take it: os._exit runs no destructor, and the trace is finished
# all the same (shim/hooks/hook_exit.c).
sys.stdout.flush()
os._exit(0)
