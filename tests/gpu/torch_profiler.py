"""PyTorch's own profiler (Kineto, a CUPTI client) started midway under the
shim: it must work as without pagelock.

Copies first (pagelock's CUPTI session runs), then profiles more copies
with torch.profiler and counts the CUDA memcpy events it recorded; exits 1
when it saw none."""
import torch
from torch.profiler import ProfilerActivity, profile

N = 1 << 20
dev = torch.device("cuda")
x = torch.arange(N, dtype=torch.float32)
for _ in range(3):
    g = x.to(dev, non_blocking=True)
    torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(4):
        g = x.to(dev, non_blocking=True)
        back = g.cpu()
    torch.cuda.synchronize()
events = [e for e in prof.events() if "memcpy" in e.name.lower() and e.device_type == torch.autograd.DeviceType.CUDA]
ok = torch.equal(back, x)
print(f"profiler_cuda_memcpy_events={len(events)} bytes_ok={int(ok)}")
raise SystemExit(0 if events and ok else 1)
