"""Copies and allocations made deep inside installed packages, as
accelerate's and Lightning's are, for tests/python/deep.sh.

The script writes a package, deeplib, under $DEEP_DIR/site-packages (and a
module laid out as a framework's, site-packages/cupy/_fakecopy.py), then
copies through the fake runtime by ctypes from below DEPTH of its frames:
from the main thread, a second thread, a forked child, a subinterpreter
and an object's __del__ at interpreter shutdown.  Before any of that it
allocates from thousands of distinct lines and code objects, as a large
program's imports and set-up do, so the copies' stacks come after those.
The user's lines end in "# SITE:<name>", the packages' in
"# LIBSITE:<name>"; check_pysites.py turns both into line numbers."""
import ctypes
import mmap
import os
import sys
import threading

rt = ctypes.CDLL(os.environ["PL_CUDART"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
N = 1 << 20


def device_buffer():
    dev = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(dev), N) != 0:
        sys.exit("cudaMalloc failed")
    return dev


def sub_upload():
    # Run by runpy inside a subinterpreter (in_subinterpreter below).
    buf = ctypes.create_string_buffer(N)
    if rt.cudaMemcpy(device_buffer(), buf, N, 1) != 0:  # SITE:sub
        raise RuntimeError("cudaMemcpy failed in the subinterpreter")


# Library frames between the user's line and the copy: more than the walk
# once looked at (128), each function a code object of its own.
DEPTH = 150
FLOOD_LINES, FLOOD_CODES = 3000, 4000


def install():
    """Writes the packages under $DEEP_DIR/site-packages and imports them."""
    global trainer, _fakecopy
    site = os.path.join(os.environ["DEEP_DIR"], "site-packages")
    os.makedirs(os.path.join(site, "deeplib"))
    os.makedirs(os.path.join(site, "cupy"))
    with open(os.path.join(site, "cupy", "_fakecopy.py"), "w") as f:
        f.write("def copy_to_device(rt, dev, buf, n):\n"
                "    return rt.cudaMemcpy(dev, buf, n, 1)  # LIBSITE:framework_copy\n")
    with open(os.path.join(site, "deeplib", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(site, "deeplib", "hooks.py"), "w") as f:
        f.write("import ctypes\n"
                "import _fakecopy\n"
                "\n"
                "\n"
                "def pre_forward(rt, dev, buf, n):\n"
                "    if rt.cudaMemcpy(dev, buf, n, 1) != 0:  # LIBSITE:pre_forward\n"
                "        raise RuntimeError('cudaMemcpy failed')\n"
                "\n"
                "\n"
                "def offload_buffer(n):\n"
                "    return ctypes.create_string_buffer(n)  # LIBSITE:offload_buffer\n"
                "\n"
                "\n"
                "def via_framework(rt, dev, buf, n):\n"
                "    if _fakecopy.copy_to_device(rt, dev, buf, n) != 0:  # LIBSITE:via_framework\n"
                "        raise RuntimeError('cudaMemcpy failed')\n")
    with open(os.path.join(site, "deeplib", "trainer.py"), "w") as f:
        # As a library's training step: the buffer made and copied far below.
        f.write("from deeplib import chain, hooks\n"
                "\n"
                "\n"
                "def fit(rt, dev, n):\n"
                "    buf = chain.level0(hooks.offload_buffer, n)\n"
                "    chain.level0(hooks.pre_forward, rt, dev, buf, n)\n"
                "    chain.level0(hooks.via_framework, rt, dev, buf, n)\n")
    with open(os.path.join(site, "deeplib", "chain.py"), "w") as f:
        for i in range(DEPTH):
            f.write("def level%d(fn, *args):\n    return level%d(fn, *args)\n\n\n" % (i, i + 1))
        f.write("def level%d(fn, *args):\n    return fn(*args)\n" % DEPTH)
    sys.path.insert(0, site)
    sys.path.insert(0, os.path.join(site, "cupy"))
    import _fakecopy
    from deeplib import trainer


def flood():
    # Thousands of allocation sites before the first copy.
    src = "def many():\n" + "".join("    bytearray(70000)\n" for _ in range(FLOOD_LINES))
    for i in range(FLOOD_CODES):
        src += "def one%d():\n    bytearray(70000)\n" % i
    ns = {}
    exec(compile(src, "<flood>", "exec"), ns)
    ns["many"]()
    for i in range(FLOOD_CODES):
        ns["one%d" % i]()


def train():
    dev = device_buffer()
    trainer.fit(rt, dev, N)  # SITE:main_fit
    buf = ctypes.create_string_buffer(N)
    if _fakecopy.copy_to_device(rt, dev, buf, N) != 0:  # SITE:direct
        sys.exit("cudaMemcpy failed")
    if rt.cudaMemcpy(dev, buf, N, 1) != 0:  # SITE:own
        sys.exit("cudaMemcpy failed")
    # Shared memory, as a DataLoader worker's batch arrives: the mapping's
    # site is a line too.
    shared = mmap.mmap(-1, N)  # SITE:mapped
    if rt.cudaMemcpy(dev, (ctypes.c_char * N).from_buffer(shared), N, 1) != 0:
        sys.exit("cudaMemcpy failed")


def worker():
    trainer.fit(rt, device_buffer(), N)  # SITE:thread_fit


def child():
    trainer.fit(rt, device_buffer(), N)  # SITE:child_fit


def in_subinterpreter():
    try:
        import _xxsubinterpreters as interpreters
    except ImportError:
        import _interpreters as interpreters
    # 3.12 isolates a new interpreter by default, and ctypes is not made
    # for that; 3.13's default is the legacy one.
    if sys.version_info[:2] == (3, 12):
        interp = interpreters.create(isolated=False)
    else:
        interp = interpreters.create()
    code = "import runpy; runpy.run_path(%r, run_name='__sub__')" % os.path.abspath(__file__)
    interpreters.run_string(interp, code)
    interpreters.destroy(interp)


class Holder:
    def __init__(self):
        self.rt, self.dev, self.buf = rt, device_buffer(), ctypes.create_string_buffer(N)

    def __del__(self):
        self.rt.cudaMemcpy(self.dev, self.buf, N, 1)  # SITE:del


def main():
    global holder
    install()
    flood()
    pid = os.fork()
    if pid == 0:
        child()
        # Not os._exit: the shim writes the child's trace at exit.
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit("the forked child failed: status %d" % status)
    train()  # SITE:call_train
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    in_subinterpreter()
    # Alive until the interpreter finalizes: its __del__ copies then.
    holder = Holder()


if __name__ == "__sub__":
    sub_upload()
elif __name__ == "__main__":
    main()  # SITE:call_main
