/* units.c - numbers and paths for humans (units.h). */
#include "units.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *plr_basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

void plr_fmt_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    return;
  }
  double v = (double)bytes / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, len, "%.1f %s", v, units[u]);
}

void plr_fmt_ms(uint64_t ns, char *buf, size_t len) {
  snprintf(buf, len, "%.3f", (double)ns / 1e6);
}

void plr_fmt_gbps(uint64_t bytes, uint64_t ns, char *buf, size_t len) {
  if (ns == 0) {
    snprintf(buf, len, "-");
    return;
  }
  snprintf(buf, len, "%.2f", (double)bytes / (double)ns);
}
