/* optdump.c - README's configuration table, written from
 * include/pagelock/options.def.
 *
 * cli_help_options compares its output with README's table byte for byte,
 * so the table is never edited by hand: change the list, then paste
 * `build/pl_optdump` over the table.  It also checks what the list itself
 * cannot: that the default a row shows is the one the shim uses.  A
 * mismatch is one line on stderr and exit status 1. */
#include <stdio.h>
#include <string.h>

#include "pagelock/trace_format.h"

enum { T_CHOICE, T_LONG, T_SIZE, T_STRING, T_CLI };

typedef struct opt {
  const char *id;
  int type;
  long def, min, max;
  const char *values, *shown, *help;
} opt;

static const opt opts[] = {
#define PAGELOCK_OPTION(id, type, def, min, max, values, shown, help) \
  {#id, T_##type, def, min, max, values, shown, help},
#include "pagelock/options.def"
#undef PAGELOCK_OPTION
};

/* 65536 -> "64K", as the list writes sizes. */
static void size_str(long v, char *buf, size_t len) {
  static const char units[] = "KMG";
  int u = -1;
  while (v >= 1024 && v % 1024 == 0 && u < 2) {
    v /= 1024;
    u++;
  }
  if (u < 0)
    snprintf(buf, len, "%ld", v);
  else
    snprintf(buf, len, "%ld%c", v, units[u]);
}

int main(void) {
  int bad = 0;
  printf("| variable | default | values | meaning |\n");
  printf("| --- | --- | --- | --- |\n");
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
    const opt *o = &opts[i];
    char def[64] = "", values[256] = "", a[32], b[32];
    switch (o->type) {
      case T_CHOICE: {
        const char *p = o->values;
        for (long k = 0; k < o->def && p; k++) {
          p = strchr(p, ',');
          if (p) p++;
        }
        if (p) snprintf(def, sizeof def, "%.*s", (int)strcspn(p, ","), p);
        for (p = o->values; *p;) {
          size_t w = strcspn(p, ",");
          size_t l = strlen(values);
          snprintf(values + l, sizeof values - l, "%s`%.*s`", l ? ", " : "", (int)w, p);
          p += w;
          if (*p == ',') p++;
        }
        break;
      }
      case T_LONG:
        snprintf(def, sizeof def, "%ld", o->def);
        snprintf(values, sizeof values, "%ld-%ld", o->min, o->max);
        break;
      case T_SIZE:
        size_str(o->def, def, sizeof def);
        size_str(o->min, a, sizeof a);
        size_str(o->max, b, sizeof b);
        if (o->max > 0)
          snprintf(values, sizeof values, "%s-%s", a, b);
        else if (o->min > 0)
          snprintf(values, sizeof values, "at least %s", a);
        else
          snprintf(values, sizeof values, "a size");
        break;
      default: snprintf(values, sizeof values, "%s", o->values); break;
    }
    if (def[0]) {
      char want[80];
      snprintf(want, sizeof want, "`%s`", def);
      if (strncmp(o->shown, want, strlen(want)) != 0 ||
          (o->shown[strlen(want)] != 0 && o->shown[strlen(want)] != ' ')) {
        fprintf(stderr, "optdump: PAGELOCK_%s shows the default %s, but it is %s\n", o->id,
                o->shown, want);
        bad = 1;
      }
    }
    printf("| `PAGELOCK_%s` | %s | %s | %s |\n", o->id, o->shown, values, o->help);
  }
  return bad;
}
