/* optdoc.c - the options of include/pagelock/options.def in words. */
#include "optdoc.h"

#include <stdio.h>
#include <string.h>

#include "pagelock/trace_format.h" /* PAGELOCK_MAX_FRAMES, in the list */

const plr_option_doc plr_option_docs[] = {
#define PAGELOCK_OPTION(id, type, def, min, max, values, shown, help) \
  {#id, PLR_OPT_##type, def, min, max, values, shown, help},
#include "pagelock/options.def"
#undef PAGELOCK_OPTION
};
const size_t plr_option_count = sizeof plr_option_docs / sizeof plr_option_docs[0];

/* 65536 -> "64K", as the option list writes sizes. */
static void plr_size_str(long v, char *buf, size_t len) {
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

void plr_option_words(const plr_option_doc *o, const char *open, const char *close, const char *sep,
                      char *def, size_t dlen, char *range, size_t rlen) {
  char a[32], b[32];
  def[0] = range[0] = 0;
  switch (o->type) {
    case PLR_OPT_CHOICE: {
      const char *p = o->values;
      for (long k = 0; k < o->def && p; k++) {
        p = strchr(p, ',');
        if (p) p++;
      }
      if (p) snprintf(def, dlen, "%.*s", (int)strcspn(p, ","), p);
      for (p = o->values; *p;) {
        size_t w = strcspn(p, ","), l = strlen(range);
        snprintf(range + l, rlen - l, "%s%s%.*s%s", l ? sep : "", open, (int)w, p, close);
        p += w;
        if (*p == ',') p++;
      }
      break;
    }
    case PLR_OPT_LONG:
      snprintf(def, dlen, "%ld", o->def);
      snprintf(range, rlen, "%ld-%ld", o->min, o->max);
      break;
    case PLR_OPT_SIZE:
      plr_size_str(o->def, def, dlen);
      plr_size_str(o->min, a, sizeof a);
      plr_size_str(o->max, b, sizeof b);
      if (o->max > 0)
        snprintf(range, rlen, "%s-%s", a, b);
      else if (o->min > 0)
        snprintf(range, rlen, "at least %s", a);
      else
        snprintf(range, rlen, "a size");
      break;
    default: snprintf(range, rlen, "%s", o->values); break;
  }
}
