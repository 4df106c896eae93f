"""Registration under fork, over real CUDA: run under `pagelock run --mode=auto`.

The parent uploads eight 32 MiB CPU tensors three times each, so the shim
registers them (auto: hot after one full copy), then a DataLoader with 4
workers, forked after the registrations, reads those tensors in the
children.  Checks, and prints as "result ..." lines:
  - every byte the workers read is the parent's (the child of a fork sees
    registered memory: on driver 580 registration does not set
    MADV_DONTFORK, which /proc/self/smaps shows as the VmFlag "dc");
  - the parent's tensors still upload right after the workers are gone;
  - tensor.is_pinned() stays False: the shim's registrations are invisible;
  - how many of the tensors the shim advised huge pages (printed only: a
    kernel without transparent huge pages ignores the advice).
Exits 1 on any wrong byte or answer."""
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

dev = torch.device("cuda")
N = 8 << 20  # float32: 32 MiB
weights = [torch.arange(N, dtype=torch.float32) * (i + 1) for i in range(8)]
for rep in range(3):
    for w in weights:
        g = w.to(dev, non_blocking=True)
    torch.cuda.synchronize()
    time.sleep(0.2)  # the shim's thread registers hot buffers meanwhile
ok = True


def vmflags(ptr):
    """The VmFlags of the mapping holding ptr, from /proc/self/smaps."""
    cur = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                cur = lo <= ptr < hi
            elif head == "VmFlags:" and cur:
                return line.split()[1:]
    return []


HUGE = 2 << 20
inner = [(w.data_ptr() + HUGE - 1) // HUGE * HUGE for w in weights]
flags = vmflags(inner[0])
# hg: the shim advised huge pages on the tensor's aligned interior
# (PAGELOCK_HUGEPAGES, register and auto modes).
huge = sum("hg" in vmflags(a) for a in inner)
print(f"result vmflags dontfork={int('dc' in flags)} hugepages={huge} of 8 flags={' '.join(flags)}")
pinned = [w.is_pinned() for w in weights]
ok &= not any(pinned)
print(f"result is_pinned any={int(any(pinned))}")


class Reads(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        w = weights[i % 8]
        k = (i * 7919) % N
        return torch.tensor([float(w[k]), float(w[-1]), float(w.sum(dtype=torch.float64))],
                            dtype=torch.float64)


expect_sum = [float(w.sum(dtype=torch.float64)) for w in weights]
bad = 0
for i, row in enumerate(DataLoader(Reads(), batch_size=1, num_workers=4)):
    w = weights[i % 8]
    k = (i * 7919) % N
    got = row[0].tolist()
    if got[0] != float(w[k]) or got[1] != float(w[-1]) or got[2] != expect_sum[i % 8]:
        bad += 1
print(f"result workers_read wrong={bad} of 32")
ok &= bad == 0
after = True
for i, w in enumerate(weights):
    g = w.to(dev, non_blocking=True)
    torch.cuda.synchronize()
    after &= bool(torch.equal(g.cpu(), w))
print(f"result parent_after ok={int(after)}")
ok &= after
sys.exit(0 if ok else 1)
