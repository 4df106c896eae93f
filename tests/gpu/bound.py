#!/usr/bin/env python3
"""What bound a pattern's copies, from one trace's own timestamps.

usage: bound.py TRACE WINDOWS [--timeline K]
  WINDOWS  the timed stretches of the program, start-end[,start-end...] in
           CLOCK_MONOTONIC nanoseconds (tests/gpu/patterns.py prints them)
  --timeline K
           first list what happened in window K (0-based, in time order):
           one line per copy call, GPU copy and kernel overlapping it,
           "START END DURATION WHAT" in microseconds from the window's
           start, then the bound line for that window alone.  How the
           offload pattern's idle DMA between uploads was found
           (docs/bench/2026-11-27-what-bound-a-pattern.md).

Within the windows it measures, from the GPU's records (CUPTI, converted
with the trace's CLOCK pairs) and the program's copy calls (COPY records):
  dma      time a copy ran on the GPU (the union over engines and
           streams), and the bytes those copies moved per second of it
  staging  time inside staged copy calls while no copy ran: the copy
           threads filling pinned chunks (host memory bandwidth)
  driver   the same inside every other copy call (pass-through,
           registered): driver calls, registrations, waits on events
  program  time outside every copy call while no copy ran: the program's
           own work between copies, kernels it waits for included
  kernels  time a kernel ran (may overlap any of the above)
The four shares add up to 100%; the bound is the largest of them. Reads
the raw records, as gpu_records.py does, so a reporter bug cannot hide
anything.  Prints one line
  bound: LABEL dma=P% (R GB/s) staging=P% driver=P% program=P% kernels=P%
or, when GPU timing was paused inside the windows (GPU_SAMPLE records)
or absent, "bound: unmeasured (REASON)".  Exit 2 on bad input."""
import struct
import sys

COPY_STAGED = 1 << 2
COPY_GRAPH_NODE = 1 << 7  # a graph memcpy node, not a call
GPU_MEMCPY, GPU_KERNEL = 1, 4
LABELS = {"dma": "the DMA", "staging": "host memory (staging copies)",
          "driver": "driver calls and waits", "program": "the program between copies"}


def merge(iv):
    """Sorted, disjoint union of (start, end) pairs."""
    out = []
    for s, e in sorted(x for x in iv if x[1] > x[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def intersect(a, b):
    """Intersection of two sorted disjoint lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def minus(a, b):
    """a without b, both sorted and disjoint."""
    out, j = [], 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k, cur = j, s
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def total(iv):
    return sum(e - s for s, e in iv)


def read(path):
    """COPY calls, GPU copies and kernels (monotonic), pauses of GPU timing."""
    data = open(path, "rb").read()
    if data[:8] != b"PGLKTRC1":
        raise ValueError(f"{path}: not a pagelock trace")
    off = struct.unpack_from("<I", data, 12)[0]
    calls, copies, kernels, pauses = [], [], [], []
    delta, gpu_status = None, None
    paused_at = None
    while off + 8 <= len(data):
        typ, size = struct.unpack_from("<II", data, off)
        if size < 8 or off + size > len(data):
            break
        body = data[off:off + size]
        if typ == 2 and size >= 80:
            start, host_ns = struct.unpack_from("<QQ", body, 8)
            flags = struct.unpack_from("<I", body, 76)[0]
            if not flags & COPY_GRAPH_NODE:
                calls.append((start, start + host_ns, bool(flags & COPY_STAGED)))
        elif typ == 9 and size >= 64:
            s, e, nbytes = struct.unpack_from("<QQQ", body, 8)
            kind = body[56]
            if delta is not None and kind in (GPU_MEMCPY, GPU_KERNEL):
                iv = (s + delta, e + delta)
                if kind == GPU_MEMCPY:
                    copies.append((iv, nbytes))
                else:
                    kernels.append(iv)
        elif typ == 12 and size >= 24:
            cupti_ns, mono_ns = struct.unpack_from("<QQ", body, 8)
            delta = mono_ns - cupti_ns  # the last pair before a record converts it
        elif typ == 14 and size >= 12:
            gpu_status = struct.unpack_from("<I", body, 8)[0]
        elif typ == 18 and size >= 24:
            t, on = struct.unpack_from("<QI", body, 8)
            if not on and paused_at is None:
                paused_at = t
            elif on and paused_at is not None:
                pauses.append((paused_at, t))
                paused_at = None
        off += size
    if paused_at is not None:
        pauses.append((paused_at, 1 << 63))
    return calls, copies, kernels, merge(pauses), gpu_status


def parse_windows(text):
    out = []
    for part in text.split(","):
        s, _, e = part.partition("-")
        out.append((int(s), int(e)))
    if not out or any(e <= s for s, e in out):
        raise ValueError(f"bad windows '{text}': want start-end[,start-end...] with start < end")
    return merge(out)


def attribute(calls, copies, kernels, windows):
    """The four shares of the windows' time, the DMA's rate, kernel time."""
    w = total(windows)
    dma = intersect(merge(iv for iv, _ in copies), windows)
    moved = sum(n * total(intersect([iv], windows)) / (iv[1] - iv[0])
                for iv, n in copies if iv[1] > iv[0])
    staged = intersect(merge((s, e) for s, e, st in calls if st), windows)
    other = minus(intersect(merge((s, e) for s, e, st in calls if not st), windows), staged)
    staged_idle, other_idle = minus(staged, dma), minus(other, dma)
    program = minus(minus(minus(windows, dma), staged), other)
    share = {"dma": total(dma), "staging": total(staged_idle), "driver": total(other_idle),
             "program": total(program)}
    rate = moved / total(dma) if dma else 0.0  # bytes per ns = GB/s
    return w, share, rate, total(intersect(merge(kernels), windows))


def timeline(calls, copies, kernels, window):
    """The lines of --timeline: everything overlapping one window."""
    s0, e0 = window
    ev = [(s, e, "call, staged" if st else "call") for s, e, st in calls]
    ev += [(iv[0], iv[1], f"gpu copy {n} B") for iv, n in copies]
    ev += [(s, e, "kernel") for s, e in kernels]
    for s, e, what in sorted(x for x in ev if x[0] < e0 and x[1] > s0):
        print(f"{(s - s0) / 1e3:10.1f} {(e - s0) / 1e3:10.1f} {(e - s) / 1e3:9.1f}  {what}")


def main(argv):
    args = argv[1:]
    k = None
    if len(args) == 4 and args[2] == "--timeline":
        try:
            k = int(args[3])
        except ValueError:
            k = -1
        args = args[:2]
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        windows = parse_windows(args[1])
        calls, copies, kernels, pauses, status = read(args[0])
    except (OSError, ValueError) as e:
        print(f"bound.py: {e}", file=sys.stderr)
        return 2
    if k is not None:
        if not 0 <= k < len(windows):
            print(f"bound.py: bad --timeline '{argv[4]}': want a window number from 0 to "
                  f"{len(windows) - 1}", file=sys.stderr)
            return 2
        timeline(calls, copies, kernels, windows[k])
        windows = [windows[k]]
    if status not in (None, 0) or not copies:
        print("bound: unmeasured (no GPU timing in the trace)")
        return 0
    if intersect(pauses, windows):
        print("bound: unmeasured (GPU timing sampled inside the timed stretch)")
        return 0
    w, share, rate, kern = attribute(calls, copies, kernels, windows)
    top = max(share, key=share.get)
    pct = {k: 100.0 * v / w for k, v in share.items()}
    print(f"bound: {LABELS[top]} dma={pct['dma']:.1f}% ({rate:.1f} GB/s) staging={pct['staging']:.1f}% "
          f"driver={pct['driver']:.1f}% program={pct['program']:.1f}% kernels={100.0 * kern / w:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
