/* optdump.c - prints the shim's PAGELOCK_* option table, for the test that
 * `pagelock --help` and README's configuration table list every option
 * with its real default and valid values (cli_help_options).
 *
 * The table is static in shim/config.c: the source is compiled in here
 * rather than copied, so the test reads the very table the shim parses.
 *
 * One line per option, fields separated by '|':
 *   NAME|TYPE|DEFAULT|VALID
 * TYPE is choice, long, size, string or extra (a name the typo guard knows
 * but the shim does not read); DEFAULT is empty for strings and extras;
 * VALID is the space-separated words the help must show: each choice, the
 * "MIN-MAX" range of a number, or a size's bounds. */
#include "config.c"

/* 65536 -> "64K", as the help and README write sizes. */
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
  for (int i = 0; i < PL_OPT_COUNT; i++) {
    const pl_option *o = &pl_options[i];
    char def[64] = "", valid[256] = "", a[32], b[32];
    switch (o->type) {
    case PL_T_CHOICE: {
      const char *p = o->choices;
      for (long k = 0; k < o->def && p; k++) {
        p = strchr(p, ',');
        if (p) p++;
      }
      if (p) snprintf(def, sizeof def, "%.*s", (int)strcspn(p, ","), p);
      snprintf(valid, sizeof valid, "%s", o->choices);
      for (char *c = valid; *c; c++)
        if (*c == ',') *c = ' ';
      break;
    }
    case PL_T_LONG:
      snprintf(def, sizeof def, "%ld", o->def);
      snprintf(valid, sizeof valid, "%ld-%ld", o->min, o->max);
      break;
    case PL_T_SIZE:
      size_str(o->def, def, sizeof def);
      size_str(o->min, a, sizeof a);
      size_str(o->max, b, sizeof b);
      if (o->max > 0)
        snprintf(valid, sizeof valid, "%s-%s", a, b);
      else if (o->min > 0)
        snprintf(valid, sizeof valid, "%s", a);
      break;
    case PL_T_STRING:
      break;
    }
    static const char *const types[] = {"choice", "long", "size", "string"};
    printf("%s|%s|%s|%s\n", o->name, types[o->type], def, valid);
  }
  for (int i = 0; pl_known_extra[i]; i++)
    printf("%s|extra||\n", pl_known_extra[i]);
  return 0;
}
