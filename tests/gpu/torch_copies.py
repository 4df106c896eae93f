"""PyTorch under the shim: pageable and pinned copies, byte-exact.

Prints the copies it made (pageable=N ... pinned=M ...) for trace_check.
x.to("cuda", non_blocking=True) from a pageable tensor is the classic hidden
stall; .cpu() into a fresh (pageable) tensor is its download twin."""
import torch

N = 4 << 20  # float32 elements: 16 MiB
REPS = 4
dev = torch.device("cuda")
torch.cuda.init()
pageable = pinned = pageable_bytes = pinned_bytes = 0
ok = True
for i in range(REPS):
    x = torch.arange(N, dtype=torch.float32) + i          # pageable
    g = x.to(dev, non_blocking=True)                      # H2D pageable
    pageable += 1; pageable_bytes += x.numel() * 4
    back = g.cpu()                                        # D2H pageable
    pageable += 1; pageable_bytes += x.numel() * 4
    ok &= torch.equal(back, x)
    p = x.pin_memory()                                    # host->host, no CUDA copy
    g2 = p.to(dev, non_blocking=True)                     # H2D pinned
    pinned += 1; pinned_bytes += p.numel() * 4
    out = torch.empty(N, dtype=torch.float32, pin_memory=True)
    out.copy_(g2, non_blocking=True)                      # D2H pinned
    pinned += 1; pinned_bytes += out.numel() * 4
    torch.cuda.synchronize()
    ok &= torch.equal(out, x)
print(f"pageable={pageable} pageable_bytes={pageable_bytes} pinned={pinned} pinned_bytes={pinned_bytes}")
raise SystemExit(0 if ok else 1)
