/* spin_ptx.h - a hand-written PTX kernel, pagelock_spin(u64 ns), that
 * busy-waits ns nanoseconds of GPU time on %globaltimer.  It stands for
 * compute a program could overlap its copies with, and builds with a C
 * compiler alone (cuModuleLoadData JIT-compiles it); tests/fakecuda
 * simulates it by occupying the stream for ns. */
#ifndef PAGELOCK_SPIN_PTX_H
#define PAGELOCK_SPIN_PTX_H

static const char pagelock_spin_ptx[] =
    ".version 8.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry pagelock_spin(.param .u64 pagelock_spin_ns)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [pagelock_spin_ns];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "$L_spin:\n"
    "  mov.u64 %rd3, %globaltimer;\n"
    "  sub.u64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p1, %rd4, %rd1;\n"
    "  @%p1 bra $L_spin;\n"
    "  ret;\n"
    "}\n";

#endif
