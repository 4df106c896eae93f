"""The copy patterns real programs use, timed in one process each.

usage: patterns.py PATTERN [--pinned] [--register]
  cks       copy, kernel, copy on one stream: 32 MiB up, a 2 ms kernel,
            32 MiB down, 8 rounds (the demo's shape): ms per round, median
            of 5 passes after 1
  offload   prefetch of reused tensors: 16 x 64 MiB CPU "layer weights"
            uploaded every step on a copy stream, a matrix product per layer
            on the default stream waiting for its layer: ms per step,
            median of 10 steps after 2 (the CPU offload of DeepSpeed,
            accelerate and vLLM)
  reuse     one 256 MiB CPU tensor uploaded 20 times, a synchronize after
            each: GB/s over all 20, the first (registration) rounds included
  loader    a DataLoader (4 workers, pin_memory from --pinned) feeding
            154 MB batches of synthetic images, each made whole by a
            worker, to a small conv net: samples/s over 35 batches after 5
  small     many small copies among kernels: 4 KiB up, a short kernel, an
            8-byte read back (a loss value), 20000 times: us per iteration
  threads   two threads, each with its own stream, each uploading 32 MiB
            and running a 1 ms kernel 16 times: ms for both
  upload    one 256 MiB x.to("cuda", non_blocking=True), 10 times with a
            synchronize after each: GB/s, median (PyTorch's spinning OpenMP
            threads are left as they are: OMP_NUM_THREADS is not set)
  afterop   the same uploads, each after a parallel CPU operation (a
            torch.equal over 16 MiB, as a data pipeline's preparation is):
            PyTorch's OpenMP threads spin on every core when it ends
--pinned    the host memory is pinned (pin_memory()): the physical limit
--register  the same tensors registered by hand (cudaHostRegister)

Prints one line "result PATTERN value=... unit=... ok=1 pid=P windows=W";
exits 1 when any byte that reached the GPU or came back differs from what
was sent.  W lists the timed stretches as start-end pairs of
CLOCK_MONOTONIC nanoseconds, for tests/gpu/bound.py: what bound the copies
in them, read from the trace of process P."""
import os
import statistics
import sys
import threading
import time

import torch

dev = torch.device("cuda")
pattern = sys.argv[1]
pinned = "--pinned" in sys.argv
register = "--register" in sys.argv
ok = True
windows = []  # the timed stretches: (start, end), CLOCK_MONOTONIC ns


def host(t):
    """The tensor as the variant wants it: pageable, pinned or registered."""
    if pinned:
        return t.pin_memory()
    if register:
        cudart = torch.cuda.cudart()
        # cudaHostRegisterDefault: page-lock in place, as the shim does.
        assert cudart.cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0) == 0
    return t


def cycles_per_ms():
    """torch.cuda._sleep spins for clock cycles: calibrate them once."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    return 10_000_000 / a.elapsed_time(b)


def stat_fields(path):
    """The fields of a /proc stat file after the command's name, from 3."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def this_cpu():
    """The CPU this thread last ran on (field 39 of its stat)."""
    return int(stat_fields("/proc/thread-self/stat")[36])


def host_state():
    """What the host did besides this thread: the machine's steal time
    (a virtual machine's CPUs lent away, in clock ticks), the CPU time of
    this process's other threads (ticks) and the times this thread was
    preempted."""
    with open("/proc/stat") as f:
        steal = int(f.readline().split()[8])
    me, us = stat_fields("/proc/thread-self/stat"), stat_fields("/proc/self/stat")
    others = int(us[11]) + int(us[12]) - int(me[11]) - int(me[12])
    with open("/proc/thread-self/status") as f:
        pre = int(next(l for l in f if l.startswith("nonvoluntary_ctxt_switches")).split()[1])
    return steal, others, pre


extra = ""  # a pattern's own fields, after the common ones


def result(value, unit):
    w = ",".join(f"{a}-{b}" for a, b in windows)
    print(f"result {pattern} value={value:.3f} unit={unit} ok={int(ok)} pid={os.getpid()} windows={w}{extra}")


if pattern == "cks":
    n = 8 << 20  # float32: 32 MiB
    cyc = int(2 * cycles_per_ms())
    src = [host(torch.full((n,), float(r + 1))) for r in range(8)]
    dst = [host(torch.empty(n)) for _ in range(8)]
    g = torch.empty(n, device=dev)
    s = torch.cuda.Stream()
    times = []
    for p in range(6):
        for d in dst:
            d.zero_()
        torch.cuda.synchronize()
        t0, m0 = time.perf_counter(), time.monotonic_ns()
        with torch.cuda.stream(s):
            for r in range(8):
                g.copy_(src[r], non_blocking=True)
                torch.cuda._sleep(cyc)
                g.add_(1.0)
                dst[r].copy_(g, non_blocking=True)
        s.synchronize()
        if p:
            times.append((time.perf_counter() - t0) * 1e3 / 8)
            windows.append((m0, time.monotonic_ns()))
        ok &= all(bool(dst[r][::4099].eq(float(r + 2)).all()) for r in range(8))
    result(statistics.median(times), "ms/round")
elif pattern == "offload":
    layers = [host(torch.full((4096, 4096), float(i + 1), dtype=torch.float32)) for i in range(16)]
    side = torch.randn(4096, 4096, device=dev)
    copy = torch.cuda.Stream()
    times = []
    for step in range(12):
        torch.cuda.synchronize()
        t0, m0 = time.perf_counter(), time.monotonic_ns()
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
            windows.append((m0, time.monotonic_ns()))
    result(statistics.median(times), "ms/step")
elif pattern == "reuse":
    n = 64 << 20  # float32: 256 MiB
    x = host(torch.arange(n, dtype=torch.float32))
    torch.cuda.synchronize()
    t0, m0 = time.perf_counter(), time.monotonic_ns()
    for i in range(20):
        g = x.to(dev, non_blocking=True)
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    windows.append((m0, time.monotonic_ns()))
    ok &= bool(torch.equal(g[-1024:].cpu(), x[-1024:])) and bool(g[12345].item() == 12345.0)
    result(20 * n * 4 / dt / 1e9, "GB/s")
elif pattern in ("upload", "afterop"):
    n = 64 << 20
    x = host(torch.arange(n, dtype=torch.float32))
    y = torch.rand(4 << 20)
    torch.cuda.synchronize()
    rates = []
    for i in range(11):
        if pattern == "afterop":
            ok &= bool(torch.equal(y, y))
        t0, m0 = time.perf_counter(), time.monotonic_ns()
        g = x.to(dev, non_blocking=True)
        torch.cuda.synchronize()
        if i:
            rates.append(n * 4 / (time.perf_counter() - t0) / 1e9)
            windows.append((m0, time.monotonic_ns()))
    ok &= bool(torch.equal(g[-1024:].cpu(), x[-1024:])) and bool(g[54321].item() == 54321.0)
    result(statistics.median(rates), "GB/s")
elif pattern == "loader":
    from torch.utils.data import DataLoader, Dataset

    class Batches(Dataset):
        """Batches of 256 synthetic 224x224 images, made whole by each
        worker (one fill, no per-sample collation): the loop is bound by
        moving 154 MB batches to the GPU, as an input pipeline is when its
        decoding and augmentation keep up (issue 18: pin_memory=True
        1.6x faster than pageable on the H100 host)."""

        def __len__(self):
            return 40

        def __getitem__(self, k):
            return torch.full((256, 3, 224, 224), float(k % 251)), torch.arange(256) % 10

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 7, stride=8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(Batches(), batch_size=None, shuffle=False, num_workers=4,
                        pin_memory=pinned, prefetch_factor=2)
    seen = 0
    t0 = None
    for k, (xb, yb) in enumerate(loader):
        xg = xb.to(dev, non_blocking=True)
        yg = yb.to(dev, non_blocking=True)
        if k == 7:
            ok &= bool(torch.equal(xg[3].cpu(), xb[3])) and bool(xg[3, 0, 0, 0].item() == 7.0)
        loss = torch.nn.functional.cross_entropy(net(xg), yg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k == 4:
            torch.cuda.synchronize()
            t0, m0 = time.perf_counter(), time.monotonic_ns()
        elif k > 4:
            seen += xb.shape[0]
    torch.cuda.synchronize()
    windows.append((m0, time.monotonic_ns()))
    result(seen / (time.perf_counter() - t0), "samples/s")
elif pattern == "small":
    x = host(torch.arange(1024, dtype=torch.float32))  # 4 KiB
    out = host(torch.empty(2, dtype=torch.float32))     # 8 bytes
    g = torch.empty(1024, device=dev)
    acc = torch.zeros(2, device=dev)
    # 20000 timed iterations, 0.6-1.1 s: a program's steady state.  Its
    # first 25 ms or so are traced throughout; then GPU timing pauses and
    # CUPTI is detached, and the next window opens 4 s later, outside the
    # loop (one window costs at most ~33 ms: attaching 9-13 ms, detaching
    # 2-3, 25 ms traced at up to 1.68x; under 1% of 4 s).
    # Processes of one variant swing by up to 1.8x (30-57 us): each tenth
    # of the loop is timed, and the CPU its thread ran on read as it ends,
    # to tell a slow process (placement) from a slow stretch (the host).
    chunks, cpus = [], []
    for it in range(20200):
        if it == 200:
            torch.cuda.synchronize()
            t0, m0 = time.perf_counter(), time.monotonic_ns()
            tc, hs0 = t0, host_state()
        elif it > 200 and it % 2000 == 200:
            now = time.perf_counter()
            chunks.append((now - tc) / 2000 * 1e6)
            cpus.append(this_cpu())
            tc = now
        g.copy_(x, non_blocking=True)
        acc.add_(g[:2])
        out.copy_(acc, non_blocking=True)
        torch.cuda.current_stream().synchronize()  # the program reads it
    dt = time.perf_counter() - t0
    windows.append((m0, time.monotonic_ns()))
    chunks.append((t0 + dt - tc) / 2000 * 1e6)
    cpus.append(this_cpu())
    hs = [b - a for a, b in zip(hs0, host_state())]
    extra = (f" chunks={','.join(f'{c:.1f}' for c in chunks)} cpus={','.join(map(str, cpus))}"
             f" steal={hs[0]} others={hs[1]} preempted={hs[2]}")
    ok &= float(out[1]) == 20200.0 and float(out[0]) == 0.0
    result(dt / 20000 * 1e6, "us/iter")
elif pattern == "threads":
    n = 8 << 20
    cyc = int(1 * cycles_per_ms())
    bufs = [[host(torch.full((n,), float(10 * k + j))) for j in range(4)] for k in range(2)]
    res = [None, None]

    def work(k):
        s = torch.cuda.Stream()
        g = torch.empty(n, device=dev)
        tot = torch.zeros(1, device=dev)
        with torch.cuda.stream(s):
            for j in range(16):
                g.copy_(bufs[k][j % 4], non_blocking=True)
                torch.cuda._sleep(cyc)
                tot += g[n - 1]
        s.synchronize()
        res[k] = float(tot)

    times = []
    for p in range(4):
        torch.cuda.synchronize()
        t0, m0 = time.perf_counter(), time.monotonic_ns()
        th = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        if p:
            times.append((time.perf_counter() - t0) * 1e3)
            windows.append((m0, time.monotonic_ns()))
        ok &= res == [sum(float(10 * k + j % 4) for j in range(16)) for k in range(2)]
    result(statistics.median(times), "ms")
else:
    sys.exit(f"patterns.py: unknown pattern '{pattern}' "
             "(valid: cks, offload, reuse, upload, afterop, loader, small, threads)")
raise SystemExit(0 if ok else 1)
