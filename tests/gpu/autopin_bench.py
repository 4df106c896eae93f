"""Reused-buffer patterns for PAGELOCK_MODE=auto, timed in one process.

usage: autopin_bench.py PATTERN [--pinned] [--register]
  reuse     one 256 MiB CPU tensor uploaded 20 times (x.to("cuda",
            non_blocking=True), a synchronize after each): GB/s over all 20,
            the first (registration) rounds included
  offload   16 x 64 MiB CPU "layer weights" uploaded every step on a
            prefetch stream, a matrix product per layer on the default
            stream waiting for its layer: ms per step, median of 10 steps
            after 2 warm-up steps
  loader    a DataLoader (4 workers, pin_memory from --pinned) feeding
            154 MB batches of synthetic images to a small conv net: samples
            per second over 35 batches after 5
--pinned    the host memory is pinned (pin_memory()): the physical limit
--register  the same tensors registered by hand (cudaHostRegister)

Prints one line "result PATTERN value=... unit=... ok=1" and exits 1 when
any byte that reached the GPU differs from its source."""
import statistics
import sys
import time

import torch

dev = torch.device("cuda")
pattern = sys.argv[1]
pinned = "--pinned" in sys.argv
register = "--register" in sys.argv
ok = True


def host(t):
    """The tensor as the variant wants it: pageable, pinned or registered."""
    if pinned:
        return t.pin_memory()
    if register:
        cudart = torch.cuda.cudart()
        # cudaHostRegisterDefault: page-lock in place, as the shim does.
        assert cudart.cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0) == 0
    return t


if pattern == "reuse":
    n = 64 << 20  # float32: 256 MiB
    x = host(torch.arange(n, dtype=torch.float32))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(20):
        g = x.to(dev, non_blocking=True)
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    ok &= bool(torch.equal(g[-1024:].cpu(), x[-1024:])) and bool(g[12345].item() == 12345.0)
    print(f"result reuse value={20 * n * 4 / dt / 1e9:.2f} unit=GB/s ok={int(ok)}")
elif pattern == "offload":
    layers = [host(torch.full((4096, 4096), float(i + 1), dtype=torch.float32)) for i in range(16)]
    side = torch.randn(4096, 4096, device=dev)
    copy = torch.cuda.Stream()
    times = []
    for step in range(12):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        acc = torch.zeros(4096, 4096, device=dev)
        for i, w in enumerate(layers):
            with torch.cuda.stream(copy):
                g = w.to(dev, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(copy)
            torch.cuda.current_stream().wait_event(ev)
            g.record_stream(torch.cuda.current_stream())
            acc += g * 0.5
            side = side @ side * 1e-3 if i % 4 == 0 else side
            if step == 11 and i in (0, 15):
                ok &= bool(torch.all(g == float(i + 1)).item())
        torch.cuda.synchronize()
        if step >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"result offload value={statistics.median(times):.2f} unit=ms/step ok={int(ok)}")
elif pattern == "loader":
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        """Synthetic 224x224 images, cheap to make: the loop is bound by
        moving 154 MB batches to the GPU, as an input pipeline is when its
        augmentations run elsewhere."""

        def __len__(self):
            return 256 * 40

        def __getitem__(self, i):
            return torch.full((3, 224, 224), float(i % 251)), i % 10

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 7, stride=8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(Images(), batch_size=256, num_workers=4, pin_memory=pinned,
                        prefetch_factor=2)
    seen = 0
    t0 = None
    for k, (xb, yb) in enumerate(loader):
        xg = xb.to(dev, non_blocking=True)
        yg = yb.to(dev, non_blocking=True)
        if k == 7:
            ok &= bool(torch.equal(xg[3].cpu(), xb[3])) and bool(xg[3, 0, 0, 0].item() == float((7 * 256 + 3) % 251))
        loss = torch.nn.functional.cross_entropy(net(xg), yg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k == 4:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        elif k > 4:
            seen += xb.shape[0]
    torch.cuda.synchronize()
    print(f"result loader value={seen / (time.perf_counter() - t0):.1f} unit=samples/s ok={int(ok)}")
else:
    sys.exit(f"autopin_bench.py: unknown pattern '{pattern}' (valid: reuse, offload, loader)")
raise SystemExit(0 if ok else 1)
