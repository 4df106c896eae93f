/* format.h - the counters and direction lists as the text and HTML
 * reports write them. */
#ifndef PLR_FORMAT_H
#define PLR_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The staging engine's counters as one sentence without a leading capital
 * or final stop ("512.0 MiB staged, 0 B passed through, ... of 64.0 MiB"),
 * shared by the text and HTML reports. */
struct pagelock_rec_counters;
void plr_fmt_counters(const struct pagelock_rec_counters *c, char *buf, size_t len);
/* What finding call sites cost (COST), in one line: stacks, their time and
 * share of the run (span_ns, 0: unknown), unwinds, Python walks. */
struct pagelock_rec_cost;
void plr_fmt_cost(const struct pagelock_rec_cost *c, uint64_t span_ns, char *buf, size_t len);

/* Whether the counters show staging (bytes staged, fallbacks) and
 * registration (any count, time or byte figure of the registration
 * engine; its budget alone is configuration): their lines are printed
 * only then. */
int plr_counters_staging(const struct pagelock_rec_counters *c);
int plr_counters_registration(const struct pagelock_rec_counters *c);

/* The registration engine's counters as one sentence, as
 * plr_fmt_counters ("12 ranges registered (65.000 ms), 12 unregistered, 3
 * evicted, 0 failed; 0 B still registered at exit, high water 1.0 GiB of a
 * 32.0 GiB budget"; no budget part when the trace has none). */
void plr_fmt_register_counters(const struct pagelock_rec_counters *c, char *buf, size_t len);

/* Comma-separated direction names of a plr_site dirs mask ("H2D,D2H"). */
void plr_fmt_dirs(uint32_t dirs, char *buf, size_t len);

/* When some host time of b is an estimate (runs of repeated copies of
 * which only some were timed), says so without a leading capital or final
 * stop: "host time of 64 copies estimated from 8 timed: repeated small
 * copies, 1 in 8 timed"; returns 0 and writes "" when none is. */
struct plr_bucket;
int plr_fmt_estimated(const struct plr_bucket *b, char *buf, size_t len);

/* The width the text report wraps its sentences at: out's terminal's,
 * else COLUMNS, else 100 (a file, a pipe); never under 40. */
int plr_text_width(FILE *out);

/* label (lw columns wide on screen: it may hold colour escapes), then text
 * made safe for a terminal (escape.h) and wrapped at width between words,
 * continuation lines indented by hang columns; a word longer than a line
 * stands alone.  Ends the line. */
void plr_text_wrapped(FILE *out, int width, const char *label, int lw, int hang, const char *text);

#endif
