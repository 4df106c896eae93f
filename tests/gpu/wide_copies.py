#!/usr/bin/env python3
"""Staged copies larger than the pool, each right after a parallel CPU
operation, compared whole (tests/gpu/run.sh).

Such a copy starts with PyTorch's OpenMP threads still spinning, so it
starts with the base count of copy threads and takes more as CPUs become
idle, chunk by chunk (shim/engines/stage.c, pl_run_widen): the bytes must not
care. Uploads and downloads of 300 MiB and of 256 MiB + 48 KiB (an odd
tail), three times each. Prints "wide_copies ok=1" when every byte
arrived; exit 1 otherwise."""
import sys

import torch

ok = True
spin = torch.rand(4 << 20)
for n in (300 << 18, (256 << 18) + 12345):  # float32 elements
    x = torch.rand(n)
    for _ in range(3):
        torch.equal(spin, spin)  # leaves the OpenMP threads spinning
        g = x.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        ok &= bool(torch.equal(g.cpu(), x))
        back = torch.empty_like(x)
        back.copy_(g)
        ok &= bool(torch.equal(back, x))
print("wide_copies ok=%d" % ok)
sys.exit(0 if ok else 1)
