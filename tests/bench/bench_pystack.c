/* bench_pystack.c - what a Python stack costs a pageable copy.
 *
 * Embeds CPython and links the shim's sources (pagelock_core), so the
 * constructor finds the interpreter as it does under LD_PRELOAD.  A script
 * calls bench.run() from DEPTH nested Python functions (plus the module
 * frame); run() releases the GIL, as ctypes and tensor.to() do, and times
 *   walk:    pl_py_capture, the walk alone (every frame, code and line
 *            cache lookups, page checks);
 *   capture: pl_stack_capture_at from the same place, what the copy path
 *            runs for a pageable copy (the walk, then the memo hit that
 *            skips the native unwind).
 * Prints "result nest=N depth=D walk_ns=.. capture_ns=.." (D: the frames
 * kept, at most 8) with medians over REPS runs of 200,000 calls each.
 *   bench_pystack [REPS]   (no timing in the test suite) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pl_internal.h"
#include "pystack.h"
#include "stack.h"

static int reps = 7;

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

enum { CALLS = 200000 };

/* Median ns per call over reps runs: the walk (which 0) or the capture. */
static double timed(int which, int *depth) {
  double t[100];
  pl_pystack s;
  volatile uint32_t sink = 0;
  for (int r = 0; r < reps; r++) {
    double a = now_ns();
    for (int i = 0; i < CALLS; i++) {
      if (which == 0) {
        pl_py_capture(&s);
        sink += s.depth;
      } else {
        sink += pl_stack_capture_at(1, __builtin_return_address(0), &s, NULL);
      }
    }
    t[r] = (now_ns() - a) / CALLS;
  }
  pl_py_capture(&s);
  *depth = s.depth;
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
  return t[reps / 2];
}

static PyObject *bench_run(PyObject *self, PyObject *args) {
  (void)self;
  int nest;
  if (!PyArg_ParseTuple(args, "i", &nest)) return NULL;
  int depth = 0;
  double walk, capture;
  Py_BEGIN_ALLOW_THREADS walk = timed(0, &depth);
  capture = timed(1, &depth);
  Py_END_ALLOW_THREADS printf("result nest=%d depth=%d walk_ns=%.1f capture_ns=%.1f\n", nest, depth,
                              walk, capture);
  Py_RETURN_NONE;
}

static PyMethodDef bench_methods[] = {{"run", bench_run, METH_VARARGS, NULL},
                                      {NULL, NULL, 0, NULL}};
static struct PyModuleDef bench_module = {
    PyModuleDef_HEAD_INIT, "bench", NULL, -1, bench_methods, NULL, NULL, NULL, NULL};
static PyObject *bench_init(void) { return PyModule_Create(&bench_module); }

int main(int argc, char **argv) {
  if (argc > 1) reps = atoi(argv[1]);
  if (reps < 1 || reps > 100) reps = 7;
  PyImport_AppendInittab("bench", bench_init);
  Py_Initialize();
  int rc = PyRun_SimpleString(
      "import bench\n"
      "def nest(n, k):\n"
      "    if n == 0:\n"
      "        return bench.run(k)\n"
      "    return nest(n - 1, k)\n"
      "for k in (1, 4, 12):\n"
      "    nest(k - 1, k)\n");
  Py_Finalize();
  return rc == 0 ? 0 : 1;
}
