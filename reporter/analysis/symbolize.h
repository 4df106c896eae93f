/* symbolize.h - turns code addresses of one traced process into names.
 *
 * Two phases so each module file is read once, not once per address:
 * plr_sym_want every address, plr_sym_resolve, then plr_sym_get.  A name
 * is the function whose symbol or DWARF covers the address, never the
 * nearest symbol before it; with none, the frame is module+offset. */
#ifndef PLR_SYMBOLIZE_H
#define PLR_SYMBOLIZE_H

#include <stdint.h>

#include <uthash.h>

#include "trace_model.h"

typedef struct plr_frame {
  uint64_t addr;
  const plr_module *mod; /* NULL when no MODULE record covers addr */
  char *module;          /* basename of the module file, NULL if unknown */
  char *func;            /* demangled function name, NULL if unknown */
  uint64_t func_off;     /* addr - function start, when have_func_off */
  int have_func_off;
  char *file;    /* source file, NULL if unknown */
  unsigned line; /* 0 if unknown */
  UT_hash_handle hh;
} plr_frame;

typedef struct plr_symbolizer {
  const plr_trace *t;
  plr_frame *frames;
  int use_tools; /* read module files, run c++filt */
} plr_symbolizer;

/* use_tools = 0 keeps symbolization to what the trace itself holds, which
 * makes reports deterministic (tests) and fast. */
void plr_sym_init(plr_symbolizer *s, const plr_trace *t, int use_tools);

/* Registers addr; module and SYMBOL-record names are filled at once.
 * Returns -1 only when out of memory. */
int plr_sym_want(plr_symbolizer *s, uint64_t addr);

/* Names the wanted addresses that lie in a module file that still exists
 * from its symbol table (.symtab, a debuglink or build-id debug file,
 * .dynsym) and DWARF, with elfutils' libdw (builds without it run
 * addr2line, whose names count only where DWARF backs them), then
 * demangles C++ names with c++filt.  Missing tools or files are not
 * errors: those frames keep what they have. */
void plr_sym_resolve(plr_symbolizer *s);

/* The frame registered for addr, or NULL. */
const plr_frame *plr_sym_get(const plr_symbolizer *s, uint64_t addr);

/* Module path as a file name: "" (the main program) becomes the exe. */
const char *plr_module_file(const plr_trace *t, const plr_module *m);

void plr_sym_free(plr_symbolizer *s);

#endif
