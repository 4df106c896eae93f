/* reader_fixture.h - what the tests of the trace reader, the aggregation,
 * the call-site choice and the report writers share (pl_reader;
 * test_reader_*.c: one feature a file, each file its own program and
 * ctest).  Traces are built byte by byte with tests/cli/trace_builder.h,
 * including every kind of corruption the reader must survive. */
#ifndef PL_TEST_READER_FIXTURE_H
#define PL_TEST_READER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "analysis.h"
#include "callsite.h"
#include "compare.h"
#include "escape.h"
#include "report.h"
#include "trace_builder.h"
#include "trace_model.h"
#include "trace_read.h"
#include "walk.h"

#define APP 0x555555554000ull    /* main program load bias */
#define CUDART 0x7f1000000000ull /* libcudart.so.13 */
#define LIBC 0x7f2000000000ull   /* libc.so.6 */
#define SHIM 0x7f3000000000ull   /* libpagelock.so */

/* Loads the first len bytes of b through a real FILE, as the CLI does. */
int load_len(plr_trace *t, const tb *b, size_t len, char *msg, size_t msglen);
/* All of b, saying why on stderr when it cannot. */
int load(plr_trace *t, const tb *b);

/* Appends one COPY record. */
void copy(tb *b, uint8_t dir, uint8_t mem, uint32_t flags, uint64_t bytes, uint64_t host_ns,
          uint32_t stack, uint64_t callsite, uint32_t alloc_stack);

/* The reference trace: a program "app" with two user call sites reached
 * through libcudart, one of them from two different callers (two stacks),
 * a static-cudart frame inside the main program, pinned copies, a D2D, a
 * failed copy, allocation stacks, and the exit-time records. */
void build_reference(tb *b, int with_end);

void analyze(plr_process *p);
/* The text and JSON reports of n processes, in a string to free. */
char *report_text(const plr_process *p, size_t n);
char *report_json(const plr_process *p, size_t n);

/* Fails the test, showing both, when hay does not contain needle. */
void assert_contains(const char *hay, const char *needle);

#endif
