"""CuPy copies and allocations from marked lines, for tests/gpu/pysites.sh."""
import cupy as cp
import numpy as np

N = 4 << 20


def make(i):
    return np.arange(N, dtype=np.float32) + i  # SITE:alloc


def upload(a):
    return cp.asarray(a)  # SITE:h2d


def download(g):
    return cp.asnumpy(g)  # SITE:d2h


for i in range(4):
    a = make(i)
    g = upload(a)
    b = download(g)
    if not np.array_equal(a, b):
        raise SystemExit("bytes differ")
print("ok")
