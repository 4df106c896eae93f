"""A CuPy program, for tests/gpu/corpus.sh: NumPy arrays uploaded with
ndarray.set (a pageable copy), doubled by a CuPy kernel, downloaded with
ndarray.get; every byte checked.  Prints "result verify=ok checksum=...
min_copies=N"."""
import hashlib

import cupy as cp
import numpy as np

STEPS, N = 8, 4 << 20


def make(s):
    return np.arange(N, dtype=np.float32) + 1000 * s  # SITE:alloc


def main():
    g = cp.empty(N, dtype=cp.float32)
    h = hashlib.sha256()
    ok = True
    for s in range(STEPS):
        a = make(s)
        g.set(a)  # SITE:upload
        b = (g * 2).get()  # SITE:download
        ok &= np.array_equal(b, a * 2)
        h.update(b.tobytes())
    print("result verify=%s checksum=%s min_copies=%d" % ("ok" if ok else "FAIL", h.hexdigest()[:16], 2 * STEPS),
          flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()  # SITE:main
