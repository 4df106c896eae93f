"""One rank of a data-parallel job, one GPU per rank (issue 23).

usage: torchrun --nproc_per_node=N tests/gpu/torchrun_ranks.py [STEPS] [--pinned]

Each step uploads one of four pageable 64 MiB CPU batches with
x.to(device, non_blocking=True) (a DataLoader without pin_memory),
multiplies a matrix on the GPU, and all-reduces a sum of the batch over
NCCL, as a training step's gradients are.  The sum is exact in float32, so
the all-reduce checks every rank's bytes.  --pinned pins the batches
(pin_memory(): the physical limit).  Prints one line per rank:
"rank R device=D world=W steps=S ms_per_step=M ok=1 pid=P".
NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0, set by the caller).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

args = [a for a in sys.argv[1:] if a != "--pinned"]
steps = int(args[0]) if args else 20
pinned = "--pinned" in sys.argv
rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
dist.init_process_group("nccl", device_id=dev)

n = 16 << 20  # float32: 64 MiB
batches = [torch.full((n,), float(100 * rank + j)) for j in range(4)]
if pinned:
    batches = [b.pin_memory() for b in batches]
w = torch.randn(2048, 2048, device=dev)
g = torch.empty(n, device=dev)
ok, times = True, []
for s in range(steps + 2):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.copy_(batches[s % 4], non_blocking=True)
    y = w @ w
    tot = g[:1024].sum().reshape(1) + 0 * y[0, :1].sum()
    dist.all_reduce(tot)
    torch.cuda.synchronize()
    if s >= 2:  # the first two steps set NCCL and the pool up
        times.append((time.perf_counter() - t0) * 1e3)
    want = sum(1024.0 * (100 * r + s % 4) for r in range(world))
    ok &= float(tot) == want and float(g[n - 1]) == float(100 * rank + s % 4)
dist.destroy_process_group()
print(f"rank {rank} device={local} world={world} steps={steps} "
      f"ms_per_step={statistics.median(times):.3f} ok={int(ok)} pid={os.getpid()}", flush=True)
raise SystemExit(0 if ok else 1)
