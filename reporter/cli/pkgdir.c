/* pkgdir.c - the files the CLI runs, relative to its own executable. */
#include "pkgdir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PLR_PKGLIBDIR_REL
#define PLR_PKGLIBDIR_REL "../lib/pagelock"
#endif

/* out made canonical in place (bin/../lib/pagelock/x -> lib/pagelock/x),
 * for the paths the CLI shows and puts in the environment. */
static void plr_canon(char *out, size_t len) {
  char real[PATH_MAX];
  if (realpath(out, real) && (size_t)snprintf(out, len, "%s", real) >= len) out[0] = 0;
}

int plr_self_dir(char *buf, size_t len) {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return -1;
  path[n] = 0;
  char *slash = strrchr(path, '/');
  if (!slash) return -1;
  *slash = 0;
  if ((size_t)snprintf(buf, len, "%s", path[0] ? path : "/") >= len) return -1;
  return 0;
}

int plr_pkg_path(const char *name, char *out, size_t len) {
  char dir[PATH_MAX];
  struct stat st;
  if (len) out[0] = 0;
  if (plr_self_dir(dir, sizeof dir) != 0) return -1;
  if ((size_t)snprintf(out, len, "%s/%s", dir, name) < len && stat(out, &st) == 0) {
    plr_canon(out, len);
    return out[0] ? 0 : -1;
  }
  if ((size_t)snprintf(out, len, "%s/%s/%s", dir, PLR_PKGLIBDIR_REL, name) >= len) {
    out[0] = 0;
    return -1;
  }
  if (stat(out, &st) != 0) return -1;
  plr_canon(out, len);
  return out[0] ? 0 : -1;
}
