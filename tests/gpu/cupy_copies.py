"""CuPy under the shim: uploads and downloads of NumPy arrays, byte-exact.

CuPy stages one direction through its own pinned pool, so only the total
count and bytes are fixed; the report shows which were pageable."""
import cupy
import numpy

N = 3 << 20
pageable = pageable_bytes = 0
ok = True
for i in range(3):
    a = numpy.arange(N, dtype=numpy.uint8) ^ i             # pageable
    d = cupy.asarray(a)                                    # H2D
    b = cupy.asnumpy(d)                                    # D2H
    pageable += 2; pageable_bytes += 2 * a.nbytes
    ok &= bool((a == b).all())
print(f"copies={pageable} bytes={pageable_bytes}")
raise SystemExit(0 if ok else 1)
