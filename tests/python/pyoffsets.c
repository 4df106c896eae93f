/* pyoffsets.c - shim/where/pystack_layout.h against one CPython's own headers.
 * tests/python/pyoffsets.sh compiles it once per installed version (with
 * that version's include directory and Py_BUILD_CORE, for the internal
 * frame header) and runs it: every offset pystack.c reads must be the
 * header's.  Exits 1 naming each mismatch. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#else
#include "frameobject.h"
#endif
#if PY_VERSION_HEX >= 0x030d0000 || PY_VERSION_HEX < 0x030c0000
#include "internal/pycore_runtime.h"
#endif
#if PY_VERSION_HEX < 0x030c0000
#include "internal/pycore_interp.h"
#endif

#include "pystack_layout.h"

static int bad;
#define EQ(what, got, want)                                                                 \
  do {                                                                                      \
    if ((size_t)(got) != (size_t)(want)) {                                                  \
      printf("3.%d %s: pystack_layout.h has %zu, the header %zu\n", PY_MINOR_VERSION, what, \
             (size_t)(got), (size_t)(want));                                                \
      bad = 1;                                                                              \
    }                                                                                       \
  } while (0)

int main(void) {
  const pl_py_layout *L = NULL;
  for (size_t i = 0; i < sizeof pl_py_layouts / sizeof pl_py_layouts[0]; i++)
    if (pl_py_layouts[i].minor == PY_MINOR_VERSION) L = &pl_py_layouts[i];
  if (PY_MAJOR_VERSION != 3 || L == NULL) {
    printf("3.%d: no row in pystack_layout.h\n", PY_MINOR_VERSION);
    return 1;
  }
  EQ("ob_type", PL_PY_OB_TYPE, offsetof(PyObject, ob_type));
  EQ("ob_size", PL_PY_OB_SIZE, offsetof(PyVarObject, ob_size));
  EQ("bytes ob_sval", PL_PY_BYTES_SVAL, offsetof(PyBytesObject, ob_sval));
  EQ("str length", PL_PY_STR_LENGTH, offsetof(PyASCIIObject, length));
  EQ("str state", PL_PY_STR_STATE, offsetof(PyASCIIObject, state));
  EQ("sizeof PyASCIIObject", L->str_ascii_size, sizeof(PyASCIIObject));
  EQ("sizeof PyCompactUnicodeObject", L->str_compact_size, sizeof(PyCompactUnicodeObject));
  /* The bits pystack.c decodes: kind 2 at bit 2, compact at 5, ascii at 6. */
  PyASCIIObject s;
  memset(&s, 0, sizeof s);
  s.state.kind = 2;
  s.state.compact = 1;
  s.state.ascii = 1;
  uint32_t w;
  memcpy(&w, (char *)&s + PL_PY_STR_STATE, 4);
  EQ("str state bits", w, (2u << 2) | (1u << 5) | (1u << 6));
  EQ("co_filename", L->co_filename, offsetof(PyCodeObject, co_filename));
  EQ("co_firstlineno", L->co_firstlineno, offsetof(PyCodeObject, co_firstlineno));
  EQ("co_linetable", L->co_linetable, offsetof(PyCodeObject, co_linetable));
#if PY_VERSION_HEX >= 0x030b0000
  EQ("co_qualname", L->co_name, offsetof(PyCodeObject, co_qualname));
  EQ("co_code_adaptive", L->co_code_adaptive, offsetof(PyCodeObject, co_code_adaptive));
  EQ("frame previous", L->fr_previous, offsetof(_PyInterpreterFrame, previous));
  EQ("frame owner", L->fr_owner, offsetof(_PyInterpreterFrame, owner));
  EQ("owner generator", 1, FRAME_OWNED_BY_GENERATOR);
#if PY_VERSION_HEX >= 0x030d0000
  EQ("frame f_executable", L->fr_code, offsetof(_PyInterpreterFrame, f_executable));
  EQ("frame instr_ptr", L->fr_instr, offsetof(_PyInterpreterFrame, instr_ptr));
  EQ("tstate current_frame", L->ts_frame, offsetof(PyThreadState, current_frame));
  EQ("no cframe", L->ts_cframe_frame, PL_PY_NONE);
#else
  EQ("frame f_code", L->fr_code, offsetof(_PyInterpreterFrame, f_code));
  EQ("frame prev_instr", L->fr_instr, offsetof(_PyInterpreterFrame, prev_instr));
  EQ("tstate cframe", L->ts_frame, offsetof(PyThreadState, cframe));
  EQ("cframe current_frame", L->ts_cframe_frame, offsetof(_PyCFrame, current_frame));
#endif
#if PY_VERSION_HEX >= 0x030c0000
  EQ("owner cstack", L->owner_cstack, FRAME_OWNED_BY_CSTACK);
  EQ("owner max", L->owner_max, FRAME_OWNED_BY_CSTACK);
#else
  EQ("owner max", L->owner_max, FRAME_OWNED_BY_FRAME_OBJECT);
#endif
#else
  EQ("co_name", L->co_name, offsetof(PyCodeObject, co_name));
  EQ("frame f_back", L->fr_previous, offsetof(PyFrameObject, f_back));
  EQ("frame f_code", L->fr_code, offsetof(PyFrameObject, f_code));
  EQ("frame f_lasti", L->fr_instr, offsetof(PyFrameObject, f_lasti));
  EQ("tstate frame", L->ts_frame, offsetof(PyThreadState, frame));
#endif
#if PY_VERSION_HEX < 0x030c0000
  /* What finds a subinterpreter's thread state. */
  EQ("_PyRuntime.interpreters.head", L->rt_interp_head,
     offsetof(_PyRuntimeState, interpreters.head));
  EQ("_PyRuntime.gilstate.tstate_current", L->rt_tstate_current,
     offsetof(_PyRuntimeState, gilstate.tstate_current));
  EQ("interp next", L->is_next, offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX >= 0x030b0000
  EQ("interp threads.head", L->is_threads, offsetof(PyInterpreterState, threads.head));
#else
  EQ("interp tstate_head", L->is_threads, offsetof(PyInterpreterState, tstate_head));
#endif
  EQ("tstate next", L->ts_next, offsetof(PyThreadState, next));
  EQ("tstate thread_id", L->ts_thread_id, offsetof(PyThreadState, thread_id));
  EQ("tstate cframe", L->ts_cframe, offsetof(PyThreadState, cframe));
#endif
#if PY_VERSION_HEX >= 0x030d0000
  /* The mirror of _Py_DebugOffsets pystack.c reads 3.13 through. */
#define DO(f) \
  EQ("_Py_DebugOffsets." #f, offsetof(pl_py_debug_offsets_313, f), offsetof(_Py_DebugOffsets, f))
  DO(version);
  DO(free_threaded);
  DO(thread_state.current_frame);
  DO(interpreter_frame.previous);
  DO(interpreter_frame.executable);
  DO(interpreter_frame.instr_ptr);
  DO(interpreter_frame.owner);
  DO(code_object.filename);
  DO(code_object.qualname);
  DO(code_object.linetable);
  DO(code_object.firstlineno);
  DO(code_object.co_code_adaptive);
  DO(unicode_object.asciiobject_size);
  EQ("_PyRuntime.debug_offsets", 0, offsetof(_PyRuntimeState, debug_offsets));
#endif
  if (!bad) printf("3.%d: pystack_layout.h matches the headers\n", PY_MINOR_VERSION);
  return bad;
}
