/* pystack.h - the calling thread's Python frames (pystack.c). */
#ifndef PL_PYSTACK_H
#define PL_PYSTACK_H

#include "pl_internal.h"

#define PL_PY_FRAMES PAGELOCK_MAX_PY_FRAMES
/* A stack's Python part: innermost user frames first (PAGELOCK_PY_*). */
typedef struct pl_pystack {
  uint16_t depth, flags;
  pagelock_py_frame f[PL_PY_FRAMES];
} pl_pystack;
/* Find the interpreter, if the process has one (at load: dlsym). */
void pl_py_init(void);
/* The calling thread's Python frames into *out (depth 0: none, or no
 * Python pagelock reads).  No lock, no allocation, every read checked:
 * safe inside the copy and allocation hooks, GIL held or not. */
bool pl_py_capture(pl_pystack *out);
/* pl_py_capture may find frames (Python is in the process and read). */
bool pl_py_walking(void);
/* A hash of *s for the stack table and memo; 0 when depth is 0. */
uint64_t pl_py_hash(const pl_pystack *s);
/* Under stack.c's emit lock: the PYCODE records s needs, then its
 * PYSTACK record for stack_id. */
void pl_py_emit(uint32_t stack_id, const pl_pystack *s);
/* Under the same lock, before each trace's first STACK record: the NOTE
 * saying why Python frames are missing, when a Python was found that the
 * walk cannot read (free-threaded, another version). */
void pl_py_note(void);
/* What the walks cost so far: how many, their time (in pl_span_now's
 * unit), and the pages they asked the kernel about. */
void pl_py_cost(uint64_t *walks, uint64_t *ns, uint64_t *probes);
/* The program unmaps, moves or replaces [p, p+n): the pages there that
 * were checked readable may be gone. */
void pl_py_unmapped(uintptr_t p, size_t n);
/* Tests: whether the page of p is readable (asking the kernel unless it
 * is known), and whether it is known readable without asking. */
bool pl_py_page_ok_for_test(uintptr_t p);
bool pl_py_page_known_for_test(uintptr_t p);
/* A forked child writes a new trace: every PYCODE record is due again. */
void pl_py_reset(void);

#endif
