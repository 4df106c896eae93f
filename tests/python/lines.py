"""Twenty lines of one function copy through the same native path (ctypes
into the fake runtime's cudaMemcpy, at one stack depth), five rounds, for
the preload case site_cost_lines: the native unwind is spared for every
line once the path was seen from one of them."""
import ctypes
import os

rt = ctypes.CDLL(os.environ["PL_CUDART"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
N = 1 << 16
dev = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(dev), N)
buf = ctypes.create_string_buffer(N)
cp = rt.cudaMemcpy


def step():
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)
    cp(dev, buf, N, 1)


for _ in range(5):
    step()
