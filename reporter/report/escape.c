/* escape.c - HTML and JSON string escaping that survives any input bytes. */
#include "escape.h"

#include <stdint.h>
#include <string.h>

size_t plr_utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  /* Ranges from RFC 3629 section 4: they exclude overlong forms,
   * surrogates and code points above U+10FFFF.  Reading p[1..3] is safe
   * because each check stops at the first byte outside 0x80-0xBF, and the
   * string's NUL is such a byte. */
  unsigned lo = 0x80, hi = 0xBF;
  size_t n;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return n;
}

/* The text escape of the character at p (n bytes, n from plr_utf8_len, 0
 * for an invalid byte) into e (room for 8), or "" when it passes as is. */
static void plr_text_char(const unsigned char *p, size_t n, char e[8]) {
  e[0] = 0;
  if (n == 0 || (n == 1 && (*p < 0x20 || *p == 0x7f))) {
    snprintf(e, 8, "\\x%02x", *p);
  } else if (n == 1 && *p == '\\') {
    snprintf(e, 8, "\\\\");
  } else if (n == 2) {
    unsigned cp = (p[0] & 0x1fu) << 6 | (p[1] & 0x3fu);
    if (cp <= 0x9f || cp == 0x61c) snprintf(e, 8, "\\u%04x", cp);
  } else if (n == 3) {
    unsigned cp = (p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
    if (cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
        (cp >= 0x2066 && cp <= 0x2069))
      snprintf(e, 8, "\\u%04x", cp);
  }
}

char *plr_text_escape(const char *s, char *buf, size_t len) {
  if (!len) return buf;
  size_t used = 0;
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  while (*p) {
    size_t n = plr_utf8_len(p);
    char e[8];
    plr_text_char(p, n, e);
    const char *out = e[0] ? e : (const char *)p;
    size_t k = e[0] ? strlen(e) : n;
    if (used + k >= len) break;
    memcpy(buf + used, out, k);
    used += k;
    p += n ? n : 1;
  }
  buf[used] = 0;
  return buf;
}

void plr_text_puts(FILE *out, const char *s) {
  if (!s) return;
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    size_t n = plr_utf8_len(p);
    char e[8];
    plr_text_char(p, n, e);
    if (e[0])
      fputs(e, out);
    else
      fwrite(p, 1, n, out);
    p += n ? n : 1;
  }
}

void plr_html_text(FILE *out, const char *s, size_t max_bytes) {
  if (!s) return;
  const unsigned char *p = (const unsigned char *)s;
  size_t used = 0;
  while (*p) {
    size_t n = plr_utf8_len(p);
    if (used + (n ? n : 1) > max_bytes) {
      fputs("...", out);
      return;
    }
    if (n == 0) {
      fputs("&#xfffd;", out);
      p++;
      used++;
      continue;
    }
    if (n == 1) {
      switch (*p) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default:
          /* Tabs and newlines would be harmless, but trace strings are
           * one-line names: anything below space is corruption. */
          if (*p < 0x20 || *p == 0x7f)
            fputs("&#xfffd;", out);
          else
            fputc(*p, out);
      }
    } else {
      fwrite(p, 1, n, out);
    }
    p += n;
    used += n;
  }
}

void plr_json_string(FILE *out, const char *s, size_t max_bytes) {
  if (!s) {
    fputs("null", out);
    return;
  }
  fputc('"', out);
  const unsigned char *p = (const unsigned char *)s;
  size_t used = 0;
  while (*p) {
    size_t n = plr_utf8_len(p);
    if (used + (n ? n : 1) > max_bytes) {
      fputs("...", out);
      break;
    }
    if (n == 0) {
      fputs("\\ufffd", out);
      p++;
      used++;
      continue;
    }
    if (n == 1) {
      switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\t': fputs("\\t", out); break;
        case '\r': fputs("\\r", out); break;
        default:
          if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
          else
            fputc(*p, out);
      }
    } else {
      fwrite(p, 1, n, out);
    }
    p += n;
    used += n;
  }
  fputc('"', out);
}
