"""A Numba program, for tests/gpu/corpus.sh: NumPy arrays uploaded with
cuda.to_device, doubled by a @cuda.jit kernel, downloaded with
copy_to_host; every byte checked.  Numba's own Python frames lie between
the script's lines and the copies.  Prints "result verify=ok checksum=...
min_copies=N"."""
import hashlib

import numpy as np
from numba import cuda

STEPS, N = 8, 4 << 20


@cuda.jit
def double(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2


def make(s):
    return np.arange(N, dtype=np.float32) + 1000 * s  # SITE:alloc


def main():
    h = hashlib.sha256()
    ok = True
    for s in range(STEPS):
        a = make(s)
        d = cuda.to_device(a)  # SITE:upload
        double[(N + 255) // 256, 256](d)
        b = d.copy_to_host()  # SITE:download
        ok &= np.array_equal(b, a * 2)
        h.update(b.tobytes())
    print("result verify=%s checksum=%s min_copies=%d" % ("ok" if ok else "FAIL", h.hexdigest()[:16], 2 * STEPS),
          flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()  # SITE:main
