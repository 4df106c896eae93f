/* pysite.h - the Python frames of call and allocation sites (PYCODE and
 * PYSTACK records, docs/trace-format.md). */
#ifndef PLR_PYSITE_H
#define PLR_PYSITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagelock/trace_format.h"
#include "trace_read.h"

struct plr_trace;

/* One Python source location, interned per trace: equal locations are
 * the same pointer, so rows group by comparing pointers. */
typedef struct plr_pyloc {
  const char *file; /* co_filename as the program named it */
  const char *func; /* co_qualname (3.10: co_name) */
  uint32_t line;
  int library; /* a framework's or the standard library's */
} plr_pyloc;

/* The Python frames of one STACK, innermost first: f[0] is the line the
 * report groups by, the user's innermost (or, with PAGELOCK_PY_LIBRARY in
 * flags, the innermost of a stack that had none of the user's); lib, when
 * not NULL, the library line that made the call below the user's code
 * (PAGELOCK_PY_CALLER), which is not among f. */
typedef struct plr_pysite {
  uint32_t depth, flags; /* flags: pagelock_py_flags */
  const plr_pyloc *f[PAGELOCK_MAX_PY_FRAMES];
  const plr_pyloc *lib;
} plr_pysite;

/* Folds a PYCODE or PYSTACK record into t; -1 when out of memory. */
int plr_py_fold(struct plr_trace *t, const plr_record *rec);

/* The Python frames of STACK id, or NULL when it has none. */
const plr_pysite *plr_py_site(const struct plr_trace *t, uint32_t stack_id);

void plr_py_free(struct plr_trace *t);

/* "train.py:42 in main": the file's base name (the report's tables are
 * narrow; JSON has the whole path). */
void plr_pyloc_format(const plr_pyloc *l, char *buf, size_t len);

/* A library's line, its file named from the package down:
 * "accelerate/hooks.py:170 in AlignDevicesHook.pre_forward" (the part
 * after site-packages/, dist-packages/ or lib/python3.N/), else as
 * plr_pyloc_format. */
void plr_pyloc_format_lib(const plr_pyloc *l, char *buf, size_t len);

#endif
