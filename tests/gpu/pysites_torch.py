"""PyTorch copies and allocations from marked lines, for tests/gpu/pysites.sh:
each line the report must name ends in "# SITE:<name>"."""
import torch
from torch.utils.data import DataLoader, TensorDataset

dev = torch.device("cuda")
N = 4 << 20  # float32 elements: 16 MiB


def make_batch(i):
    return torch.arange(N, dtype=torch.float32) + i  # SITE:alloc


def upload(x):
    return x.to(dev, non_blocking=True)  # SITE:h2d


def download(g):
    return g.cpu()  # SITE:d2h


def step(i):
    x = make_batch(i)
    g = upload(x)  # SITE:step_upload
    back = download(g)
    if not torch.equal(back, x):
        raise SystemExit("bytes differ")


def train(loader):
    for (b,) in loader:  # SITE:loader_next
        b.to(dev, non_blocking=True)  # SITE:loader_h2d
    torch.cuda.synchronize()


torch.cuda.init()
for i in range(4):
    step(i)
# Batches collated in this process (num_workers=0): allocated inside torch,
# so the allocation's innermost user line is the loop's.
train(DataLoader(TensorDataset(torch.randn(64, 1 << 16)), batch_size=16, pin_memory=False))
print("ok")
