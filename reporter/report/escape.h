/* escape.h - writing untrusted trace strings (kernel names, paths, host
 * names) into HTML, JSON and the text report so that any bytes give
 * well-formed output.
 *
 * Trace strings are whatever bytes the traced process had: usually UTF-8,
 * but a path may hold any byte and a corrupt trace anything at all.  HTML
 * and JSON consumers (browsers, Perfetto, Python's json) want valid UTF-8,
 * so invalid sequences become U+FFFD rather than passing through.  A
 * terminal acts on control sequences, so the text report shows them as
 * visible escapes instead (plr_text_escape). */
#ifndef PLR_ESCAPE_H
#define PLR_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* No limit on the bytes written by the escapers below. */
#define PLR_ESC_UNLIMITED ((size_t)-1)

/* Writes s as HTML text or attribute content: & < > " ' become entities,
 * control characters and invalid UTF-8 become U+FFFD.  At most max_bytes
 * of s are used; a longer string ends in "..." so one huge kernel name
 * cannot bloat the page.  NULL writes nothing. */
void plr_html_text(FILE *out, const char *s, size_t max_bytes);

/* Writes s as a JSON string literal, quotes included: escapes per RFC 8259,
 * invalid UTF-8 as \ufffd, at most max_bytes of s (then "...").  NULL
 * writes null. */
void plr_json_string(FILE *out, const char *s, size_t max_bytes);

/* Length of the valid UTF-8 sequence at p (1 to 4), or 0 when the bytes at
 * p (up to the NUL) do not start one.  p must not point at the NUL. */
size_t plr_utf8_len(const unsigned char *p);

/* Writes s into buf (len bytes, NUL-terminated) for a terminal or a log:
 * what a terminal would act on or a reader could not see becomes a visible
 * escape, so a hostile program or symbol name can neither move the cursor,
 * recolour, retitle or clear the screen nor hide text.  Control bytes
 * (below 0x20, 0x7f) and bytes that are not valid UTF-8 become \xNN; the
 * C1 controls U+0080-U+009F (which xterm-style terminals obey like ESC) and
 * the bidirectional format characters (U+061C, U+200E, U+200F,
 * U+202A-U+202E, U+2066-U+2069, which can reorder what a line shows)
 * become \uNNNN; a backslash becomes \\ so that every escape is
 * unambiguous.  Everything else passes.  A string that does not fit is cut
 * between characters, never inside an escape.  Returns buf. */
char *plr_text_escape(const char *s, char *buf, size_t len);

/* plr_text_escape to a stream, with no length limit.  NULL writes
 * nothing. */
void plr_text_puts(FILE *out, const char *s);

#endif
