"""Numba copies and allocations from marked lines, for tests/gpu/pysites.sh."""
import numpy as np
from numba import cuda

N = 4 << 20


def make(i):
    return np.arange(N, dtype=np.float32) + i  # SITE:alloc


def upload(a):
    return cuda.to_device(a)  # SITE:h2d


def download(d):
    return d.copy_to_host()  # SITE:d2h


for i in range(4):
    a = make(i)
    d = upload(a)
    b = download(d)
    if not np.array_equal(a, b):
        raise SystemExit("bytes differ")
print("ok")
