/* operands.c - the trace operands of `report` and `compare`: a file, or a
 * directory holding a run's *.trace files (what `pagelock run -o DIR/`
 * leaves, one per process or rank). */
#define _GNU_SOURCE
#include "operands.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "escape.h"

/* Appends a copy of p (-1 when out of memory). */
static int plr_strv_push(plr_strv *s, const char *p) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    char **v = realloc(s->v, cap * sizeof *v);
    if (!v) return -1;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n] = strdup(p);
  if (!s->v[s->n]) return -1;
  s->n++;
  return 0;
}

void plr_strv_free(plr_strv *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

/* qsort order of file names, so output does not depend on readdir's. */
static int plr_strv_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int plr_trace_operand(plr_strv *files, const char *arg, const char *cmd) {
  struct stat st;
  if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (plr_strv_push(files, arg)) goto oom;
    return 0;
  }
  /* Operands and the names found in a directory are any bytes: every
   * line quoting one is escaped (escape.h). */
  char esc[PATH_MAX * 4];
  plr_text_escape(arg, esc, sizeof esc);
  DIR *d = opendir(arg);
  if (!d) {
    fprintf(stderr, "pagelock: cannot open '%s': %s\n", esc, strerror(errno));
    return PLR_EXIT_USAGE;
  }
  size_t before = files->n, skipped = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 7 || strcmp(e->d_name + len - 6, ".trace") != 0) continue;
    /* A FIFO named *.trace would hang the read: only regular files (or
     * links to them) are runs' traces.  One that cannot be stat'ed (a
     * dangling link) is kept, so the loader says why it cannot be read. */
    struct stat est;
    if (fstatat(dirfd(d), e->d_name, &est, 0) == 0 && !S_ISREG(est.st_mode)) {
      skipped++;
      continue;
    }
    size_t plen = strlen(arg) + 1 + len + 1;
    char *p = malloc(plen);
    if (!p) {
      closedir(d);
      goto oom;
    }
    snprintf(p, plen, "%s/%s", arg, e->d_name);
    int rc = plr_strv_push(files, p);
    free(p);
    if (rc) {
      closedir(d);
      goto oom;
    }
  }
  closedir(d);
  if (skipped)
    fprintf(stderr,
            "pagelock: %s: skipped %zu *.trace %s in '%s' "
            "that %s (FIFO, socket, device or directory)\n",
            cmd, skipped, skipped == 1 ? "entry" : "entries", esc,
            skipped == 1 ? "is not a regular file" : "are not regular files");
  if (files->n == before) {
    fprintf(stderr, "pagelock: %s: no *.trace file in '%s'\n", cmd, esc);
    return PLR_EXIT_USAGE;
  }
  qsort(files->v + before, files->n - before, sizeof *files->v, plr_strv_cmp);
  return 0;
oom:
  fprintf(stderr, "pagelock: out of memory\n");
  return PLR_EXIT_USAGE;
}
