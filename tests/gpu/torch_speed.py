"""PyTorch upload/download speed, for the staged-vs-native table.

Times x.to("cuda", non_blocking=True) and g.cpu() of a 64 MiB float32 tensor
(pageable, or pinned with --pinned), each followed by a synchronize; prints
"result h2d_gbps=... d2h_gbps=..." (medians of 9 after 3 warm-ups) and checks
the bytes."""
import statistics
import sys
import time

import torch

N = 16 << 20  # float32 elements: 64 MiB
pinned = "--pinned" in sys.argv
dev = torch.device("cuda")
x = torch.arange(N, dtype=torch.float32)
if pinned:
    x = x.pin_memory()
h2d, d2h = [], []
ok = True
for i in range(12):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g = x.to(dev, non_blocking=True)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    back = g.cpu()
    t2 = time.perf_counter()
    if i >= 3:
        h2d.append(N * 4 / (t1 - t0) / 1e9)
        d2h.append(N * 4 / (t2 - t1) / 1e9)
    ok &= bool(torch.equal(back, x))
print(f"result h2d_gbps={statistics.median(h2d):.2f} d2h_gbps={statistics.median(d2h):.2f} ok={int(ok)}")
raise SystemExit(0 if ok else 1)
