#!/usr/bin/env python3
"""Checks the CUPTI side of a trace written over real CUDA.

Reads the raw records (independently of the reporter, so a reporter bug
cannot hide a shim bug) and prints one line of facts:
  status, GPU records by kind, copies joined to their GPU op, links,
  GPU ops inside the host window.
Options assert: --min-gpu N (GPU memcpy records), --joined-frac F (share of
non-graph copies whose GPU op is in the trace), --status S,
--min-kernels N, --min-links N.  Exit 1 on a failed assertion.
"""
import struct
import sys

REC = {1: "PROCESS", 2: "COPY", 3: "STACK", 4: "MODULE", 5: "SYMBOL",
       6: "COUNTERS", 7: "NOTE", 8: "END", 9: "GPU", 10: "NAME", 11: "LINK",
       12: "CLOCK", 13: "DEVICE", 14: "GPU_STATUS"}
GPU_KIND = {1: "memcpy", 2: "p2p", 3: "memset", 4: "kernel", 5: "sync",
            6: "overhead"}


def main(argv):
    path = argv[1]
    want = {}
    i = 2
    while i < len(argv):
        want[argv[i].lstrip("-")] = argv[i + 1]
        i += 2
    data = open(path, "rb").read()
    if data[:8] != b"PGLKTRC1":
        print(f"{path}: not a trace")
        return 1
    off = struct.unpack_from("<I", data, 12)[0]
    counts, kinds, corr_gpu = {}, {}, {}
    copies, links, status, reason, devices = [], {}, None, "", []
    clock = None
    pageable_src = 0
    window = [None, None]
    gpu_times = []
    while off + 8 <= len(data):
        typ, size = struct.unpack_from("<II", data, off)
        if size < 8 or off + size > len(data):
            break
        name = REC.get(typ, str(typ))
        counts[name] = counts.get(name, 0) + 1
        body = data[off:off + size]
        if typ == 2:
            start, host_ns = struct.unpack_from("<QQ", body, 8)
            corr = struct.unpack_from("<Q", body, 56)[0]
            flags = struct.unpack_from("<I", body, 76)[0]
            gcorr = struct.unpack_from("<I", body, 96)[0] if size >= 104 else 0
            # version 4: one record may stand for a run of repeated copies
            n = struct.unpack_from("<I", body, 104)[0] if size >= 112 else 1
            if not flags & (1 << 7):
                copies.append((corr, gcorr, flags, max(n, 1)))
            window[0] = start if window[0] is None else min(window[0], start)
            window[1] = max(window[1] or 0, start + host_ns)
        elif typ == 9:
            s, e, nbytes, corr, stream, dev = struct.unpack_from("<QQQIII", body, 8)
            kind, ck, sk, dk = struct.unpack_from("<BBBB", body, 56)
            k = GPU_KIND.get(kind, str(kind))
            kinds[k] = kinds.get(k, 0) + 1
            if kind == 1:
                corr_gpu.setdefault(corr, 0)
                corr_gpu[corr] += 1
                if sk == 1 or dk == 1:
                    pageable_src += 1
                gpu_times.append((s, e))
        elif typ == 11:
            corr, _, seq = struct.unpack_from("<IIQ", body, 8)
            links.setdefault(seq, set()).add(corr)
        elif typ == 12:
            clock = struct.unpack_from("<QQ", body, 8)
        elif typ == 13:
            dev, ce, sm = struct.unpack_from("<III", body, 8)
            nm = body[32:].split(b"\0")[0].decode(errors="replace")
            devices.append(f"{dev}:{nm}:{ce}ce")
        elif typ == 14:
            status = struct.unpack_from("<I", body, 8)[0]
            reason = body[40:].split(b"\0")[0].decode(errors="replace")
        off += size
    joined = 0
    for corr, gcorr, flags, n in copies:
        if (gcorr and gcorr in corr_gpu) or any(c in corr_gpu for c in links.get(corr, ())):
            joined += n
    ncopies = sum(c[3] for c in copies)
    inside = 0
    if clock:
        delta = clock[1] - clock[0]
    else:
        delta = 0
    for s, e in gpu_times:
        if window[0] is not None and window[0] - 1e9 <= s + delta <= window[1] + 1e9:
            inside += 1
    frac = joined / ncopies if copies else 0.0
    print(f"status={status} reason='{reason}' devices={devices} records={counts} "
          f"gpu={kinds} pageable_memcpy={pageable_src} copies={ncopies} joined={joined} "
          f"({frac:.2f}) links={sum(len(v) for v in links.values())} in_window={inside}/{len(gpu_times)}")
    ok = True
    if "status" in want and str(status) != want["status"]:
        ok = False
    if int(want.get("min-gpu", 0)) > kinds.get("memcpy", 0):
        ok = False
    if int(want.get("min-kernels", 0)) > kinds.get("kernel", 0):
        ok = False
    if int(want.get("min-links", 0)) > sum(len(v) for v in links.values()):
        ok = False
    if float(want.get("joined-frac", 0)) > frac:
        ok = False
    # the window is that of the copy calls: without any (injection alone)
    # there is nothing to line GPU times up with
    if copies and gpu_times and inside != len(gpu_times):
        ok = False
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
