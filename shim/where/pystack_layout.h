/* pystack_layout.h - where CPython keeps what pystack.c reads, per version.
 *
 * Offsets in bytes on LP64 (x86-64, aarch64), taken from each version's
 * headers: cpython/code.h (PyCodeObject), cpython/unicodeobject.h
 * (PyASCIIObject, PyCompactUnicodeObject), cpython/pystate.h
 * (PyThreadState, _PyCFrame), cpython/frameobject.h (3.10 PyFrameObject),
 * internal/pycore_frame.h (3.11+ _PyInterpreterFrame).  They change between
 * minor versions only (3.x.y keeps the layout of 3.x.0), so a row per
 * minor.  tests/unit/pyoffsets.c compiles against every installed
 * version's headers and checks its row field by field; a new row needs a
 * run of it.
 *
 * 3.13 and later also describe themselves: _PyRuntime starts with
 * _Py_DebugOffsets (cookie "xdebugpy", the version, free_threaded, then
 * offsets of the fields an out-of-process debugger needs).  pystack.c
 * takes the 3.13 offsets from there and keeps the row below only for the
 * sizes the table lacks (PyCompactUnicodeObject). */
#ifndef PL_PYSTACK_LAYOUT_H
#define PL_PYSTACK_LAYOUT_H

#include <stdint.h>

#define PL_PY_NONE 0xffffu /* a field this version does not have */

typedef struct pl_py_layout {
  unsigned minor; /* 3.minor */
  /* PyThreadState: 3.10 frame (PyFrameObject *), 3.11-3.12 cframe
   * (_PyCFrame *, whose current_frame is ts_cframe_frame), 3.13
   * current_frame (_PyInterpreterFrame *). */
  uint16_t ts_frame;
  uint16_t ts_cframe_frame;
  /* The frame: 3.10 PyFrameObject f_back, f_code, f_lasti (int, in code
   * units); 3.11+ _PyInterpreterFrame previous, f_code / f_executable,
   * prev_instr / instr_ptr (a _Py_CODEUNIT *), owner (one byte). */
  uint16_t fr_previous, fr_code, fr_instr, fr_owner;
  /* PyCodeObject.  co_name is co_qualname from 3.11 on (3.10 has none). */
  uint16_t co_filename, co_name, co_firstlineno, co_linetable;
  uint16_t co_code_adaptive; /* 3.11+: the instructions, inline */
  /* sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject): where a
   * compact string's characters start. */
  uint16_t str_ascii_size, str_compact_size;
  /* _PyInterpreterFrame.owner of an entry frame on the C stack (3.12+),
   * which has no code of its own; 0xff none. */
  uint8_t owner_cstack;
  uint8_t owner_max; /* larger owner values mean a bad read */
  /* 3.10-3.11 only, to find a subinterpreter's thread state (pystack.c):
   * _PyRuntime.interpreters.head and .gilstate.tstate_current;
   * PyInterpreterState next and its first thread state; PyThreadState
   * next, thread_id and cframe (the _PyCFrame on the C stack of the
   * evaluation loop running in it). */
  uint16_t rt_interp_head, rt_tstate_current, is_next, is_threads, ts_next, ts_thread_id, ts_cframe;
} pl_py_layout;

/* Fields every version shares: PyObject.ob_type, PyVarObject.ob_size (a
 * code object's count of code units from 3.11 on, a bytes object's
 * length), PyBytesObject.ob_sval, PyASCIIObject.length and .state (whose
 * bits interned:2, kind:3, compact:1, ascii:1 are the same in 3.10-3.13). */
#define PL_PY_OB_TYPE 8
#define PL_PY_OB_SIZE 16
#define PL_PY_BYTES_SVAL 32
#define PL_PY_STR_LENGTH 16
#define PL_PY_STR_STATE 32

static const pl_py_layout pl_py_layouts[] = {
#define PL_PY_NO_SUBS \
  PL_PY_NONE, PL_PY_NONE, PL_PY_NONE, PL_PY_NONE, PL_PY_NONE, PL_PY_NONE, PL_PY_NONE
    {10, 24, PL_PY_NONE, 24, 32, 96,  PL_PY_NONE, 104, 112, 40,  120, PL_PY_NONE,
     48, 72, 0xff,       0,  32, 568, 0,          8,   8,   176, 48},
    {11, 56, 8,    48, 32, 56,  69, 112, 128, 72,  136, 184,
     48, 72, 0xff, 2,  40, 576, 0,  16,  8,   152, 56},
    {12, 56, 0, 8, 0, 56, 70, 112, 128, 68, 136, 192, 40, 56, 3, 3, PL_PY_NO_SUBS},
    /* Checked against the headers, used only where _Py_DebugOffsets is
     * not what pystack.c expects it to be (never, so far). */
    {13, 72, PL_PY_NONE, 8, 0, 56, 70, 112, 128, 68, 136, 200, 40, 56, 3, 3, PL_PY_NO_SUBS},
#undef PL_PY_NO_SUBS
};

/* The start of 3.13's _Py_DebugOffsets, as far as pystack.c reads it
 * (internal/pycore_runtime.h); every field a uint64_t. */
typedef struct pl_py_debug_offsets_313 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk,
        status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  struct {
    uint64_t size, ob_item, ob_size;
  } tuple_object;
  struct {
    uint64_t size, ob_item, ob_size;
  } list_object;
  struct {
    uint64_t size, ma_keys, ma_values;
  } dict_object;
  struct {
    uint64_t size, ob_fval;
  } float_object;
  struct {
    uint64_t size, lv_tag, ob_digit;
  } long_object;
  struct {
    uint64_t size, ob_size, ob_sval;
  } bytes_object;
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
} pl_py_debug_offsets_313;

#endif
