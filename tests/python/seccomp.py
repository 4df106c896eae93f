"""A Python program under a seccomp filter of its own, copying through the
fake runtime by ctypes, for tests/python/seccomp.sh.

  seccomp.py FILTER      FILTER: kill-vm-readv, refuse-probe or none

kill-vm-readv: the process is killed on process_vm_readv (a profile that
forbids reading any process's memory that way): the shim must never make
that call, and its Python walk must still name the lines.
refuse-probe: rt_sigprocmask with an invalid `how` (what the walk's page
probe asks, and no program does) fails with EPERM: the walk turns itself
off and the program runs on.
The filter covers every thread (SECCOMP_FILTER_FLAG_TSYNC).  Lines the
report must name end in "# SITE:<name>"."""
import ctypes
import os
import platform
import sys
import threading

rt = ctypes.CDLL(os.environ["PL_CUDART"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc = ctypes.CDLL(None, use_errno=True)
N = 1 << 20

# (AUDIT_ARCH_*, process_vm_readv, rt_sigprocmask, seccomp)
ARCHES = {"x86_64": (0xC000003E, 310, 14, 317), "aarch64": (0xC00000B7, 270, 135, 277)}


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


LD_W_ABS, JEQ_K, JGT_K, RET_K = 0x20, 0x15, 0x25, 0x06
KILL_PROCESS, ERRNO, ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EPERM = 1


def install(kind):
    arch, vm_readv, sigprocmask, seccomp = ARCHES[platform.machine()]
    if kind == "kill-vm-readv":
        prog = [(LD_W_ABS, 0, 0, 4),            # 0: arch
                (JEQ_K, 0, 3, arch),            # 1: another arch: allow
                (LD_W_ABS, 0, 0, 0),            # 2: syscall number
                (JEQ_K, 0, 1, vm_readv),        # 3
                (RET_K, 0, 0, KILL_PROCESS),    # 4
                (RET_K, 0, 0, ALLOW)]           # 5
    else:
        prog = [(LD_W_ABS, 0, 0, 4),            # 0: arch
                (JEQ_K, 0, 4, arch),            # 1: another arch: allow
                (LD_W_ABS, 0, 0, 0),            # 2: syscall number
                (JEQ_K, 0, 2, sigprocmask),     # 3
                (LD_W_ABS, 0, 0, 16),           # 4: args[0], `how`, low word
                (JGT_K, 1, 0, 2),               # 5: not SIG_BLOCK/UNBLOCK/SETMASK
                (RET_K, 0, 0, ALLOW),           # 6
                (RET_K, 0, 0, ERRNO | EPERM)]   # 7
    insns = (SockFilter * len(prog))(*[SockFilter(*i) for i in prog])
    fprog = SockFprog(len(prog), insns)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit("PR_SET_NO_NEW_PRIVS failed: errno %d" % ctypes.get_errno())
    # SECCOMP_SET_MODE_FILTER with SECCOMP_FILTER_FLAG_TSYNC: every thread.
    if libc.syscall(seccomp, 1, 1, ctypes.byref(fprog)) != 0:
        sys.exit("seccomp failed: errno %d" % ctypes.get_errno())


def upload(dev):
    buf = ctypes.create_string_buffer(N)  # SITE:alloc
    if rt.cudaMemcpy(dev, buf, N, 1) != 0:  # SITE:copy
        sys.exit("cudaMemcpy failed")
    if rt.cudaMemcpy(buf, dev, N, 2) != 0:  # SITE:copyback
        sys.exit("cudaMemcpy failed")


def in_thread(dev):
    for _ in range(2):
        upload(dev)  # SITE:thread


def main():
    kind = sys.argv[1]
    dev = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(dev), N) != 0:
        sys.exit("cudaMalloc failed")
    if kind != "none":
        install(kind)
    upload(dev)  # SITE:main
    t = threading.Thread(target=in_thread, args=(dev,))
    t.start()
    t.join()
    print("survived")


if __name__ == "__main__":
    main()
