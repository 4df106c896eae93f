/* fuzz_reader.c - libFuzzer harness: arbitrary bytes as a trace, through
 * everything `pagelock report` and `pagelock compare` do with a file.
 *
 * The reader must never crash, leak or hit undefined behaviour on any
 * input (a killed program leaves any prefix of a trace; a disk error or a
 * hostile file anything at all), and neither may the analysis or the
 * writers that read its results.  The bytes go through plr_open_stream
 * (fmemopen) and plr_trace_load_stream, the call-site and GPU analyses,
 * then the text, JSON, HTML and Chrome writers and compare.  The JSON
 * outputs are also checked for well-formedness (and, for the writers that
 * promise it, valid UTF-8): a document a parser rejects is a finding too;
 * so is a text report holding a byte a terminal would act on.  A
 * checksummed input is also read with its CHECK records made to match
 * (fz_fix_checks), so the fuzzer gets past them to the records.
 *
 * Build: cmake -B build-fuzz -DCMAKE_C_COMPILER=clang -DPAGELOCK_FUZZ=ON
 *        cmake --build build-fuzz --target fuzz_reader
 * Run:   tests/fuzz/run.sh build-fuzz 60 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "cli.h"
#include "compare.h"
#include "escape.h"
#include "gpu_analysis.h"
#include "report.h"

/* ---- a strict JSON syntax checker (RFC 8259) ----------------------------
 * Small on purpose: recursion depth is bounded by the writers' nesting. */

typedef struct fz_json {
  const unsigned char *p, *end;
  int utf8; /* also require valid UTF-8 inside strings */
} fz_json;

/* Skips JSON whitespace. */
static void fz_ws(fz_json *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

/* One value of any kind, nested at most 64 deep. */
static int fz_value(fz_json *j, int depth);

/* One string literal; 1 when well-formed. */
static int fz_string(fz_json *j) {
  if (j->p >= j->end || *j->p != '"') return 0;
  j->p++;
  while (j->p < j->end && *j->p != '"') {
    unsigned c = *j->p;
    if (c < 0x20) return 0;
    if (c == '\\') {
      j->p++;
      if (j->p >= j->end) return 0;
      c = *j->p;
      if (c == 'u') {
        for (int k = 1; k <= 4; k++) {
          if (j->p + k >= j->end) return 0;
          unsigned h = j->p[k];
          if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
            return 0;
        }
        j->p += 5;
        continue;
      }
      if (!strchr("\"\\/bfnrt", (int)c) || c == 0) return 0;
      j->p++;
      continue;
    }
    if (c >= 0x80 && j->utf8) {
      /* plr_utf8_len needs a NUL-terminated view: copy up to 4 bytes. */
      unsigned char tmp[5] = {0};
      size_t left = (size_t)(j->end - j->p);
      memcpy(tmp, j->p, left < 4 ? left : 4);
      size_t n = plr_utf8_len(tmp);
      if (!n) return 0;
      j->p += n;
      continue;
    }
    j->p++;
  }
  if (j->p >= j->end) return 0;
  j->p++;
  return 1;
}

/* One number (RFC 8259 grammar); 1 when well-formed. */
static int fz_number(fz_json *j) {
  const unsigned char *s = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p >= j->end) return 0;
  if (*j->p == '0') {
    j->p++;
  } else if (*j->p >= '1' && *j->p <= '9') {
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  } else {
    return 0;
  }
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    const unsigned char *d = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == d) return 0;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    const unsigned char *d = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == d) return 0;
  }
  return j->p > s;
}

/* The literal w (true, false, null). */
static int fz_lit(fz_json *j, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return 0;
  j->p += n;
  return 1;
}

/* One value of any kind, nested at most 64 deep. */
static int fz_value(fz_json *j, int depth) {
  if (depth > 64) return 0;
  fz_ws(j);
  if (j->p >= j->end) return 0;
  switch (*j->p) {
    case '{':
      j->p++;
      fz_ws(j);
      if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 1;
      }
      for (;;) {
        fz_ws(j);
        if (!fz_string(j)) return 0;
        fz_ws(j);
        if (j->p >= j->end || *j->p != ':') return 0;
        j->p++;
        if (!fz_value(j, depth + 1)) return 0;
        fz_ws(j);
        if (j->p < j->end && *j->p == ',') {
          j->p++;
          continue;
        }
        if (j->p < j->end && *j->p == '}') {
          j->p++;
          return 1;
        }
        return 0;
      }
    case '[':
      j->p++;
      fz_ws(j);
      if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 1;
      }
      for (;;) {
        if (!fz_value(j, depth + 1)) return 0;
        fz_ws(j);
        if (j->p < j->end && *j->p == ',') {
          j->p++;
          continue;
        }
        if (j->p < j->end && *j->p == ']') {
          j->p++;
          return 1;
        }
        return 0;
      }
    case '"': return fz_string(j);
    case 't': return fz_lit(j, "true");
    case 'f': return fz_lit(j, "false");
    case 'n': return fz_lit(j, "null");
    default: return fz_number(j);
  }
}

/* Aborts (a finding) unless buf is one well-formed JSON document. */
static void fz_check_json(const char *what, const char *buf, size_t len, int utf8) {
  fz_json j = {(const unsigned char *)buf, (const unsigned char *)buf + len, utf8};
  int ok = fz_value(&j, 0);
  fz_ws(&j);
  if (!ok || j.p != j.end) {
    size_t at = (size_t)((const char *)j.p - buf);
    fprintf(stderr, "fuzz_reader: %s wrote invalid JSON at byte %zu of %zu\n", what, at, len);
    fwrite(buf, 1, len < 4096 ? len : 4096, stderr);
    fputc('\n', stderr);
    abort();
  }
}

/* Runs a writer into memory and returns what it wrote (caller frees). */
#define FZ_CAPTURE(buf, len, call)               \
  do {                                           \
    FILE *out_ = open_memstream(&(buf), &(len)); \
    if (!out_) abort();                          \
    FILE *out = out_;                            \
    call;                                        \
    fclose(out_);                                \
  } while (0)

/* Aborts (a finding) when the text report holds a byte a terminal would
 * act on: controls but the newline, DEL, C1 controls, invalid UTF-8.  Trace
 * strings must reach it escaped (escape.h). */
static void fz_check_text(const char *buf, size_t len) {
  const unsigned char *p = (const unsigned char *)buf, *end = p + len;
  while (p < end) {
    size_t n = 1;
    if (*p >= 0x80) {
      unsigned char tmp[5] = {0};
      memcpy(tmp, p, (size_t)(end - p) < 4 ? (size_t)(end - p) : 4);
      n = plr_utf8_len(tmp);
      if (n == 2 && tmp[0] == 0xc2 && tmp[1] <= 0x9f) n = 0;
    } else if ((*p < 0x20 && *p != '\n') || *p == 0x7f) {
      n = 0;
    }
    if (!n) {
      fprintf(stderr,
              "fuzz_reader: the text report holds byte 0x%02x at %zu "
              "unescaped\n",
              *p, (size_t)(p - (const unsigned char *)buf));
      abort();
    }
    p += n;
  }
}

/* Everything `pagelock report` and `compare` do with one file's bytes. */
static void fz_one(const uint8_t *data, size_t size) {
  static FILE *null;
  if (!null) null = fopen("/dev/null", "w");
  if (!null) abort();
  plr_source src = {"fuzz.trace", data, size};
  FILE *f = plr_source_open(&src);
  if (!f) return;
  plr_process p;
  memset(&p, 0, sizeof p);
  char msg[4096];
  if (plr_trace_load_stream(&p.t, f, "fuzz.trace", msg, sizeof msg) != 0) return;
  plr_process_warnings(null, &p);
  if (plr_process_analyze(&p, 0) == 0) {
    char *buf = NULL;
    size_t len = 0;

    FZ_CAPTURE(buf, len, plr_report_text(out, &p, 1));
    fz_check_text(buf, len);
    free(buf);
    FZ_CAPTURE(buf, len, plr_report_json(out, &p, 1));
    fz_check_json("report_json", buf, len, 0);
    free(buf);
    plr_report_html(null, &p, &src, 1);
    FZ_CAPTURE(buf, len, plr_report_chrome(out, &p, &src, 1));
    fz_check_json("report_chrome", buf, len, 1);
    free(buf);

    plr_compare_side a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    plr_compare_add(&a, &p.t, &p.gpu, &src);
    plr_compare_add(&b, &p.t, NULL, NULL);
    plr_compare_write(null, 0, &a, &b);
    FZ_CAPTURE(buf, len, plr_compare_write(out, 1, &b, &a));
    fz_check_json("compare json", buf, len, 1);
    free(buf);
    plr_compare_side_free(&a);
    plr_compare_side_free(&b);
  }
  plr_process_free(&p);
}

/* A checksummed trace whose bytes the fuzzer changed mostly stops at its
 * first CHECK.  So that the records behind it get fuzzed too, each input
 * that is a checksummed trace is also read with every CHECK record that
 * frames made to match (start and crc32c recomputed).  Returns a malloc'd
 * copy, or NULL when the input is not such a trace. */
static uint8_t *fz_fix_checks(const uint8_t *data, size_t size) {
  pagelock_file_header h;
  if (size < sizeof h) return NULL;
  memcpy(&h, data, sizeof h);
  if (memcmp(h.magic, PAGELOCK_TRACE_MAGIC, 8) != 0 || h.version < 3 ||
      !(h.flags & PAGELOCK_FILE_CHECKSUMS))
    return NULL;
  uint8_t *m = malloc(size);
  if (!m) return NULL;
  memcpy(m, data, size);
  size_t off = sizeof h, start = off;
  int fixed = 0;
  while (off + sizeof(pagelock_rec_hdr) <= size) {
    pagelock_rec_hdr r;
    memcpy(&r, m + off, sizeof r);
    if (r.size < sizeof r || r.size % 8 || r.size > size - off) break;
    if (r.type == PAGELOCK_REC_CHECK && r.size == sizeof(pagelock_rec_check)) {
      pagelock_rec_check c;
      memcpy(&c, m + off, sizeof c);
      c.start = start;
      c.crc32c = pagelock_crc32c(0, m + start, off - start);
      memcpy(m + off, &c, sizeof c);
      start = off + r.size;
      fixed = 1;
    }
    off += r.size;
  }
  if (!fixed) {
    free(m);
    return NULL;
  }
  return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_one(data, size);
  uint8_t *fixed = fz_fix_checks(data, size);
  if (fixed) {
    fz_one(fixed, size);
    free(fixed);
  }
  return 0;
}
