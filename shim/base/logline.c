/* logline.c - one "pagelock: " line to stderr, whole, for log.c and for
 * config.c (which owns its messages, so config and log never call each
 * other).
 *
 * The host program owns stdout, so nothing ever goes there.  A line is
 * never cut (formatted into 512 bytes, a 5,000-character PAGELOCK_OUTPUT
 * pushed the reason it was refused off the end): the format is walked
 * here, its literal pieces and every %s string go out where they lie, as
 * entries of one writev, and only numbers are formatted, each into a few
 * bytes of a stack buffer.  Nothing is
 * allocated or copied, so logging stays safe inside malloc hooks and after
 * stdio is torn down at exit, and any length arrives whole.
 *
 * Only to the stderr the program started with.  A program that closes 2
 * and opens a file of its own there got our warnings in that file.  The
 * file at 2 is recorded at load (its type, st_dev, st_ino, st_rdev) and
 * checked with fstat before each line; a line for another file, or for a
 * 2 that was closed at load, is withheld, and the trace says so once
 * (trace.c).  Holding a duplicate of the starting stderr instead would
 * keep writing to the right place, but it would keep a pipe's write end
 * open: a reader waiting for EOF (a shell's $(...), a supervisor) would
 * wait for as long as the process lives after closing its own stderr.
 * What the check cannot see: 2 replaced between the fstat and the writev
 * (microseconds), and a new open of the very same file or terminal, where
 * the line goes where stderr went anyway. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "logline.h"

/* One line being put together: up to PL_LOG_IOV pieces, numbers in
 * scratch.  A message has a dozen pieces; more than PL_LOG_IOV (or more
 * scratch than a line of numbers needs) sends what is there first, so the
 * line still arrives whole, in two writes. */
#define PL_LOG_IOV 64
#define PL_LOG_SCRATCH 512
typedef struct pl_line {
  struct iovec iov[PL_LOG_IOV];
  int n;
  char scratch[PL_LOG_SCRATCH];
  size_t used;
  bool withhold; /* 2 is not the starting stderr: keep the line back */
  bool first;    /* ... and this is the first such line: kept for the trace */
} pl_line;

/* ---- the starting stderr --------------------------------------------- */

enum { PL_ERR_UNKNOWN, PL_ERR_OPEN, PL_ERR_CLOSED };
static _Atomic int pl_err_state; /* PL_ERR_* */
static struct stat pl_err_st;    /* written once, before the state */
/* Withheld lines: the first one's text (up to its first send), published
 * by pl_withheld_ready, taken once by the trace. */
static atomic_bool pl_withheld_claimed, pl_withheld_ready, pl_withheld_taken;
static char pl_withheld_text[384];
static size_t pl_withheld_len;

void pl_log_stderr_record(void) {
  struct stat st;
  if (fstat(STDERR_FILENO, &st) != 0) {
    atomic_store(&pl_err_state, PL_ERR_CLOSED);
    return;
  }
  pl_err_st = st;
  atomic_store(&pl_err_state, PL_ERR_OPEN);
}

/* Whether 2 is the stderr recorded at load (async-signal-safe). */
static bool pl_stderr_ours(void) {
  int state = atomic_load(&pl_err_state);
  if (state == PL_ERR_UNKNOWN) return true;
  struct stat st;
  return state == PL_ERR_OPEN && fstat(STDERR_FILENO, &st) == 0 &&
         (st.st_mode & S_IFMT) == (pl_err_st.st_mode & S_IFMT) && st.st_dev == pl_err_st.st_dev &&
         st.st_ino == pl_err_st.st_ino && st.st_rdev == pl_err_st.st_rdev;
}

bool pl_log_withheld_take(char *text, size_t len) {
  if (!atomic_load(&pl_withheld_ready) || atomic_exchange(&pl_withheld_taken, true)) return false;
  /* Without the "pagelock: " prefix and the newline. */
  size_t n = pl_withheld_len;
  const char *t = pl_withheld_text;
  if (n >= 10 && memcmp(t, "pagelock: ", 10) == 0) t += 10, n -= 10;
  if (n > 0 && t[n - 1] == '\n') n--;
  snprintf(text, len, "%s; the first withheld: %.*s",
           atomic_load(&pl_err_state) == PL_ERR_CLOSED
               ? "descriptor 2 was not open when the program started, so pagelock logged nothing"
               : "the program put another file at descriptor 2 (its stderr), so pagelock logged "
                 "nothing there from then on",
           (int)n, t);
  return true;
}

/* The first withheld line's text, as far as its first send reaches. */
static void pl_withheld_keep(const struct iovec *v, int n) {
  size_t o = 0;
  for (int i = 0; i < n && o < sizeof pl_withheld_text; i++) {
    size_t k =
        v[i].iov_len < sizeof pl_withheld_text - o ? v[i].iov_len : sizeof pl_withheld_text - o;
    memcpy(pl_withheld_text + o, v[i].iov_base, k);
    o += k;
  }
  pl_withheld_len = o;
  atomic_store(&pl_withheld_ready, true);
}

static void pl_line_send(pl_line *l) {
  struct iovec *v = l->iov;
  int n = l->n;
  if (l->withhold) {
    if (l->first) pl_withheld_keep(v, n);
    l->first = false;
    n = 0;
  }
  while (n > 0) {
    ssize_t w = writev(STDERR_FILENO, v, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break; /* stderr closed or broken: nothing to tell anyone */
    while (n > 0 && (size_t)w >= v->iov_len) {
      w -= (ssize_t)v->iov_len;
      v++;
      n--;
    }
    if (n > 0) {
      v->iov_base = (char *)v->iov_base + w;
      v->iov_len -= (size_t)w;
    }
  }
  l->n = 0;
  l->used = 0;
}

static void pl_line_add(pl_line *l, const void *p, size_t len) {
  if (len == 0) return;
  if (l->n == PL_LOG_IOV) pl_line_send(l);
  l->iov[l->n].iov_base = (void *)p;
  l->iov[l->n].iov_len = len;
  l->n++;
}

static void pl_line_pad(pl_line *l, size_t n) {
  static const char spaces[] = "                                ";
  while (n > 0) {
    size_t k = n < sizeof spaces - 1 ? n : sizeof spaces - 1;
    pl_line_add(l, spaces, k);
    n -= k;
  }
}

/* Room for one formatted number in scratch (sending the line so far when
 * it is full: the pieces already queued point into it). */
static char *pl_line_room(pl_line *l, size_t need) {
  if (l->used + need > PL_LOG_SCRATCH) pl_line_send(l);
  return l->scratch + l->used;
}

/* Format one conversion of a number with snprintf into scratch.  spec is
 * the conversion as written, with any '*' already replaced by numbers. */
#define PL_LOG_NUM(type)                  \
  do {                                    \
    type v_ = va_arg(*ap, type);          \
    char *o_ = pl_line_room(l, 128);      \
    int k_ = snprintf(o_, 128, spec, v_); \
    if (k_ < 0) k_ = 0;                   \
    if (k_ > 127) k_ = 127;               \
    l->used += (size_t)k_;                \
    pl_line_add(l, o_, (size_t)k_);       \
  } while (0)

/* Walk fmt: literal runs and %s point at their bytes, numbers go through
 * snprintf one conversion at a time.  Handles what printf does for the
 * conversions the shim uses (d i u o x X c s p f e g a, the length
 * modifiers hh h l ll j z t L, flags, width and precision, '*' too). */
static void pl_line_format(pl_line *l, const char *fmt, va_list *ap) {
  const char *p = fmt;
  while (*p) {
    const char *lit = p;
    while (*p && *p != '%') p++;
    pl_line_add(l, lit, (size_t)(p - lit));
    if (*p == 0) break;
    const char *start = p++;
    if (*p == '%') {
      pl_line_add(l, "%", 1);
      p++;
      continue;
    }
    char spec[32];
    size_t sn = 0;
    spec[sn++] = '%';
    bool left = false;
    while (*p && strchr("-+ #0'", *p)) {
      if (*p == '-') left = true;
      if (sn < 8) spec[sn++] = *p;
      p++;
    }
    long width = -1, prec = -1;
    if (*p == '*') {
      width = va_arg(*ap, int);
      if (width < 0) {
        left = true;
        width = -width;
        if (sn < 8) spec[sn++] = '-';
      }
      p++;
    } else if (*p >= '0' && *p <= '9') {
      width = 0;
      for (; *p >= '0' && *p <= '9'; p++)
        if (width < 100000) width = width * 10 + (*p - '0');
    }
    if (*p == '.') {
      p++;
      prec = 0;
      if (*p == '*') {
        prec = va_arg(*ap, int);
        p++;
      } else {
        for (; *p >= '0' && *p <= '9'; p++)
          if (prec < 100000) prec = prec * 10 + (*p - '0');
      }
    }
    /* Numbers never need more than the 128 bytes of their slot. */
    long nwidth = width > 100 ? 100 : width, nprec = prec > 100 ? 100 : prec;
    if (nwidth >= 0) sn += (size_t)snprintf(spec + sn, sizeof spec - sn, "%ld", nwidth);
    if (nprec >= 0) sn += (size_t)snprintf(spec + sn, sizeof spec - sn, ".%ld", nprec);
    int len = 0; /* 1 h, 2 hh, 3 l, 4 ll, 5 j, 6 z, 7 t, 8 L */
    const char *lm = p;
    if (*p == 'h') {
      len = 1;
      p++;
      if (*p == 'h') {
        len = 2;
        p++;
      }
    } else if (*p == 'l') {
      len = 3;
      p++;
      if (*p == 'l') {
        len = 4;
        p++;
      }
    } else if (*p == 'j') {
      len = 5;
      p++;
    } else if (*p == 'z') {
      len = 6;
      p++;
    } else if (*p == 't') {
      len = 7;
      p++;
    } else if (*p == 'L') {
      len = 8;
      p++;
    }
    memcpy(spec + sn, lm, (size_t)(p - lm));
    sn += (size_t)(p - lm);
    char conv = *p;
    if (conv == 0) { /* a lone % at the end: printed as written */
      pl_line_add(l, start, (size_t)(p - start));
      break;
    }
    p++;
    spec[sn++] = conv;
    spec[sn] = 0;
    switch (conv) {
      case 's': {
        const char *s = va_arg(*ap, const char *);
        if (s == NULL) s = "(null)";
        size_t n = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s);
        size_t w = width > 0 && (size_t)width > n ? (size_t)width - n : 0;
        if (!left) pl_line_pad(l, w);
        pl_line_add(l, s, n);
        if (left) pl_line_pad(l, w);
        break;
      }
      case 'd':
      case 'i':
        if (len == 3)
          PL_LOG_NUM(long);
        else if (len == 4)
          PL_LOG_NUM(long long);
        else if (len == 5)
          PL_LOG_NUM(intmax_t);
        else if (len == 6)
          PL_LOG_NUM(ssize_t);
        else if (len == 7)
          PL_LOG_NUM(ptrdiff_t);
        else
          PL_LOG_NUM(int); /* h and hh arrive promoted to int */
        break;
      case 'u':
      case 'o':
      case 'x':
      case 'X':
        if (len == 3)
          PL_LOG_NUM(unsigned long);
        else if (len == 4)
          PL_LOG_NUM(unsigned long long);
        else if (len == 5)
          PL_LOG_NUM(uintmax_t);
        else if (len == 6)
          PL_LOG_NUM(size_t);
        else if (len == 7)
          PL_LOG_NUM(ptrdiff_t);
        else
          PL_LOG_NUM(unsigned);
        break;
      case 'c': PL_LOG_NUM(int); break;
      case 'p': PL_LOG_NUM(void *); break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A':
        if (len == 8)
          PL_LOG_NUM(long double);
        else
          PL_LOG_NUM(double);
        break;
      default: /* %n and unknown conversions: printed as written */
        pl_line_add(l, start, (size_t)(p - start));
        break;
    }
  }
}

void pl_logline(const char *fmt, va_list *ap) {
  pl_line l;
  l.n = 0;
  l.used = 0;
  l.withhold = !pl_stderr_ours();
  l.first = l.withhold && !atomic_exchange(&pl_withheld_claimed, true);
  pl_line_add(&l, "pagelock: ", 10);
  pl_line_format(&l, fmt, ap);
  pl_line_add(&l, "\n", 1);
  pl_line_send(&l);
}
