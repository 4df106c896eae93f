#!/usr/bin/env python3
"""Prints a trace's copies one per line, for finding where time went.

usage: copy_times.py TRACE [MIN_BYTES]
Each line: the call's start (CLOCK_MONOTONIC seconds, as PAGELOCK_LOG=debug
prints the engine's events, and ms after the first copy), the time the
caller spent in it (ms), bytes, direction, route (pass, stage, register)
and why a pageable copy was not registered.  Reads the raw records, as
gpu_records.py does, so a reporter bug cannot hide anything."""
import struct
import sys

WHY = {0: "", 1: "mode", 2: "small", 3: "shape", 4: "untracked", 5: "shared", 6: "cold",
       7: "pending", 8: "budget", 9: "failed", 10: "capture", 11: "edge"}
DIR = {1: "H2D", 2: "D2H", 3: "D2D", 4: "H2H"}


def main(argv):
    data = open(argv[1], "rb").read()
    least = int(argv[2]) if len(argv) > 2 else 1 << 20
    if data[:8] != b"PGLKTRC1":
        sys.exit(f"{argv[1]}: not a trace")
    off = struct.unpack_from("<I", data, 12)[0]
    t0 = None
    while off + 8 <= len(data):
        typ, size = struct.unpack_from("<II", data, off)
        if size < 8 or off + size > len(data):
            break
        if typ == 2 and size >= 101:
            start, host_ns, nbytes = struct.unpack_from("<QQQ", data, off + 8)
            flags = struct.unpack_from("<I", data, off + 76)[0]
            d = data[off + 90]
            why = data[off + 100]
            if nbytes >= least:
                t0 = start if t0 is None else t0
                route = "register" if flags & 64 else "stage" if flags & 4 else "pass"
                print(f"{start / 1e9:.6f} s {(start - t0) / 1e6:10.3f} ms  {host_ns / 1e6:8.3f} ms  {nbytes >> 20:6d} MiB  "
                      f"{DIR.get(d, d)}  {route:8s} {WHY.get(why, why)}")
        off += size


if __name__ == "__main__":
    main(sys.argv)
