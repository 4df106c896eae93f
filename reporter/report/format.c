/* format.c - the sentences and lists the text and HTML reports share
 * (format.h). */
#include "format.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "escape.h"
#include "trace_model.h"
#include "units.h"

void plr_fmt_dirs(uint32_t dirs, char *buf, size_t len) {
  size_t used = 0;
  if (len) buf[0] = 0;
  /* Known directions first so "unknown" only trails when mixed in. */
  static const unsigned order[] = {PAGELOCK_DIR_H2D,  PAGELOCK_DIR_D2H, PAGELOCK_DIR_D2D,
                                   PAGELOCK_DIR_PEER, PAGELOCK_DIR_H2H, PAGELOCK_DIR_UNKNOWN};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    if (!(dirs & (1u << order[i]))) continue;
    int k = snprintf(buf + used, len > used ? len - used : 0, "%s%s", used ? "," : "",
                     plr_dir_name(order[i]));
    if (k < 0) return;
    used += (size_t)k;
  }
  if (used == 0) snprintf(buf, len, "-");
}

void plr_fmt_counters(const pagelock_rec_counters *c, char *buf, size_t len) {
  char staged[32], pass[32], hw[32], pool[32], ms[32];
  plr_fmt_bytes(c->bytes_staged, staged, sizeof staged);
  plr_fmt_bytes(c->bytes_passthrough, pass, sizeof pass);
  plr_fmt_bytes(c->pool_high_water, hw, sizeof hw);
  plr_fmt_bytes(c->pool_bytes, pool, sizeof pool);
  plr_fmt_ms(c->wait_ns, ms, sizeof ms);
  snprintf(buf, len,
           "%s staged, %s passed through, %" PRIu64 " fallbacks, %" PRIu64
           " waits for a pool slot (%s ms), pool high water %s of %s",
           staged, pass, c->fallbacks, c->waits, ms, hw, pool);
}

void plr_fmt_cost(const pagelock_rec_cost *c, uint64_t span_ns, char *buf, size_t len) {
  char ms[32], uw[32], py[32], share[48] = "";
  plr_fmt_ms(c->capture_ns, ms, sizeof ms);
  plr_fmt_ms(c->unwind_ns, uw, sizeof uw);
  if (span_ns > 0)
    snprintf(share, sizeof share, ", %.2f%% of the run",
             100.0 * (double)c->capture_ns / (double)span_ns);
  int n = snprintf(
      buf, len,
      "%" PRIu64 " call stacks, %s ms on the program's threads (%.1f us each%s): %" PRIu64
      " native unwinds (%s ms)",
      c->captures, ms, c->captures ? (double)c->capture_ns / 1e3 / (double)c->captures : 0.0, share,
      c->unwinds, uw);
  if (c->py_walks && n > 0 && (size_t)n < len) {
    plr_fmt_ms(c->py_walk_ns, py, sizeof py);
    snprintf(buf + n, len - (size_t)n,
             ", %" PRIu64 " Python walks (%s ms, %" PRIu64 " page probes)", c->py_walks, py,
             c->py_probes);
  }
}

int plr_counters_staging(const pagelock_rec_counters *c) { return c->bytes_staged || c->fallbacks; }

int plr_counters_registration(const pagelock_rec_counters *c) {
  /* The budget alone is configuration, not activity. */
  return c->registrations || c->unregistrations || c->evictions || c->register_failures ||
         c->register_ns || c->registered_bytes || c->registered_bytes_high_water;
}

void plr_fmt_register_counters(const pagelock_rec_counters *c, char *buf, size_t len) {
  char ms[32], now[32], hw[32], budget[32];
  plr_fmt_ms(c->register_ns, ms, sizeof ms);
  plr_fmt_bytes(c->registered_bytes, now, sizeof now);
  plr_fmt_bytes(c->registered_bytes_high_water, hw, sizeof hw);
  plr_fmt_bytes(c->register_budget, budget, sizeof budget);
  int n = snprintf(buf, len,
                   "%" PRIu64 " ranges registered (%s ms), %" PRIu64 " unregistered, %" PRIu64
                   " evicted, %" PRIu64 " failed; %s still registered at exit, high water %s",
                   c->registrations, ms, c->unregistrations, c->evictions, c->register_failures,
                   now, hw);
  if (c->register_budget && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, " of a %s budget", budget);
}

int plr_fmt_estimated(const plr_bucket *b, char *buf, size_t len) {
  if (len) buf[0] = 0;
  if (!b->est_count) return 0;
  if (!b->est_timed) {
    snprintf(buf, len,
             "host time of %" PRIu64 " copies estimated: repeated small copies, none timed",
             b->est_count);
    return 1;
  }
  /* The shim times one copy of a run in so many: the ratio, rounded. */
  uint64_t every = (b->est_count + b->est_timed / 2) / b->est_timed;
  snprintf(buf, len,
           "host time of %" PRIu64 " copies estimated from %" PRIu64
           " timed: repeated small copies, 1 in %" PRIu64 " timed",
           b->est_count, b->est_timed, every);
  return 1;
}

int plr_text_width(FILE *out) {
  struct winsize ws;
  int w = 0;
  if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    w = ws.ws_col;
  } else {
    const char *c = getenv("COLUMNS");
    char *end;
    long v = c && c[0] ? strtol(c, &end, 10) : 0;
    w = v > 0 && !*end && v < 100000 ? (int)v : 100;
  }
  return w < 40 ? 40 : w;
}

/* Columns a terminal gives the n bytes at s: UTF-8 continuation bytes take
 * none (what escaping leaves is ASCII or valid UTF-8). */
static int plr_cols(const char *s, size_t n) {
  int c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
  return c;
}

void plr_text_wrapped(FILE *out, int width, const char *label, int lw, int hang, const char *text) {
  size_t cap = 4 * strlen(text) + 1;
  char small[2048], *buf = cap <= sizeof small ? small : malloc(cap);
  fputs(label, out);
  if (!buf) {
    /* Out of memory: the sentence unwrapped beats none. */
    plr_text_puts(out, text);
    fputc('\n', out);
    return;
  }
  plr_text_escape(text, buf, cap);
  int col = lw, first = 1;
  for (const char *p = buf; *p;) {
    while (*p == ' ') p++;
    size_t n = strcspn(p, " ");
    if (!n) break;
    int w = plr_cols(p, n);
    if (!first && col + 1 + w > width) {
      fprintf(out, "\n%*s", hang, "");
      col = hang;
    } else if (!first) {
      fputc(' ', out);
      col++;
    }
    fwrite(p, 1, n, out);
    col += w;
    first = 0;
    p += n;
  }
  fputc('\n', out);
  if (buf != small) free(buf);
}
