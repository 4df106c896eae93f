/* config.c - the PAGELOCK_* option table, parsed once.
 *
 * One table (like mimalloc's options.c), built from
 * include/pagelock/options.def, the list `pagelock --help` and docs/usage.md's
 * configuration table come from too, so that none of them can disagree with
 * the parser or the typo guard.  Values are read
 * with getenv at load time; a bad value never stops the program: it is
 * reported once, naming the variable and the accepted values, and the safe
 * default is used. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "logline.h"

typedef enum { PL_T_CHOICE, PL_T_LONG, PL_T_SIZE, PL_T_STRING, PL_T_CLI } pl_opt_type;

typedef struct pl_option {
  const char *name; /* environment variable */
  pl_opt_type type;
  long def;            /* default (choice index or number) */
  long min, max;       /* range for numbers */
  const char *choices; /* comma-separated, for PL_T_CHOICE */
  long value;
  const char *str;
  bool init;
} pl_option;

/* The list's choice defaults are indexes: they must name the enums the shim
 * compares against. */
_Static_assert(PAGELOCK_MODE_OBSERVE == 0 && PL_LOG_WARN == 2 && PL_D2H_SYNC == 0 &&
                   PL_H2D_SYNC == 0,
               "include/pagelock/options.def: a choice default no longer matches its enum");

static pl_option pl_options[PL_OPT_COUNT] = {
#define PAGELOCK_OPTION(id, type, def, min, max, values, shown, help) \
  [PL_OPT_##id] = {"PAGELOCK_" #id, PL_T_##type, def, min, max, values, 0, NULL, false},
#include "pagelock/options.def"
#undef PAGELOCK_OPTION
};

static atomic_int pl_config_state; /* 0 none, 1 parsing, 2 done */

/* The table's own messages, as mimalloc's options.c owns its: the level is
 * the table's PAGELOCK_LOG (read first), so config.c never calls log.c,
 * which reads the level from here.  Every bad value is reported, not once
 * per kind: each names a different variable. */
static void pl_config_say(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pl_config_say(int level, const char *fmt, ...) {
  int saved = errno;
  if (level <= pl_options[PL_OPT_LOG].value) {
    va_list ap;
    va_start(ap, fmt);
    pl_logline(fmt, &ap);
    va_end(ap);
  }
  errno = saved;
}

bool pl_parse_size(const char *s, uint64_t *out) {
  if (s == NULL || !isdigit((unsigned char)*s)) return false;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0) return false;
  uint64_t mul = 1;
  switch (*end) {
    case '\0': break;
    case 'k':
    case 'K':
      mul = 1ull << 10;
      end++;
      break;
    case 'm':
    case 'M':
      mul = 1ull << 20;
      end++;
      break;
    case 'g':
    case 'G':
      mul = 1ull << 30;
      end++;
      break;
    case 't':
    case 'T':
      mul = 1ull << 40;
      end++;
      break;
    default: return false;
  }
  if (*end == 'i' || *end == 'I') end++; /* accept KiB/MiB spellings */
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return false;
  if (v > UINT64_MAX / mul) return false;
  *out = v * mul;
  return true;
}

/* Index of `v` in a comma-separated choice list, or -1.  Case-insensitive
 * because users type MODE=Stage. */
static int pl_choice_index(const char *choices, const char *v) {
  int idx = 0;
  const char *p = choices;
  size_t vl = strlen(v);
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == vl && strncasecmp(p, v, len) == 0) return idx;
    idx++;
    if (!comma) break;
    p = comma + 1;
  }
  return -1;
}

/* Parse one option from the environment into its slot. */
static void pl_option_load(pl_option *o) {
  const char *v = getenv(o->name);
  o->value = o->def;
  o->str = NULL;
  o->init = true;
  if (v == NULL) return;
  switch (o->type) {
    case PL_T_STRING: o->str = *v ? v : NULL; return;
    case PL_T_CLI: /* the pagelock CLI's: known to the typo guard only */ return;
    case PL_T_CHOICE: {
      int i = pl_choice_index(o->choices, v);
      if (i >= 0) {
        o->value = i;
        return;
      }
      char def[32] = "";
      /* name the default by its position in the list */
      const char *p = o->choices;
      for (long k = 0; k < o->def && p; k++) {
        p = strchr(p, ',');
        if (p) p++;
      }
      if (p) {
        size_t n = strcspn(p, ",");
        if (n >= sizeof def) n = sizeof def - 1;
        memcpy(def, p, n);
        def[n] = 0;
      }
      pl_config_say(PL_LOG_ERROR, "invalid %s='%s' (valid: %s); using '%s'", o->name, v, o->choices,
                    def);
      return;
    }
    case PL_T_LONG: {
      char *end;
      errno = 0;
      long n = strtol(v, &end, 10);
      if (errno == 0 && end != v && *end == '\0' && n >= o->min && n <= o->max) {
        o->value = n;
        return;
      }
      pl_config_say(PL_LOG_ERROR, "invalid %s='%s' (valid: an integer from %ld to %ld); using %ld",
                    o->name, v, o->min, o->max, o->def);
      return;
    }
    case PL_T_SIZE: {
      uint64_t n;
      if (pl_parse_size(v, &n) && (long long)n >= o->min &&
          (o->max == 0 || n <= (uint64_t)o->max)) {
        o->value = (long)n;
        return;
      }
      char range[96] = "";
      if (o->max > 0)
        snprintf(range, sizeof range, " from %ld to %ld bytes", o->min, o->max);
      else if (o->min > 0)
        snprintf(range, sizeof range, " of at least %ld bytes", o->min);
      pl_config_say(PL_LOG_ERROR,
                    "invalid %s='%s' (valid: a size%s, like 4096, 64K, 16M, 2G, 1T); using %ld",
                    o->name, v, range, o->def);
      return;
    }
  }
}

/* Warn about PAGELOCK_* variables no table entry knows (typo guard). */
static void pl_config_typo_guard(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "PAGELOCK_", 9) != 0) continue;
    size_t len = strcspn(*e, "=");
    bool known = false;
    for (int i = 0; i < PL_OPT_COUNT && !known; i++)
      known = strlen(pl_options[i].name) == len && strncmp(pl_options[i].name, *e, len) == 0;
    if (!known)
      pl_config_say(PL_LOG_WARN,
                    "unknown variable %.*s ignored (see 'pagelock --help' for the list)", (int)len,
                    *e);
  }
}

void pl_config_init(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&pl_config_state, &expected, 1)) {
    /* Another thread is parsing: the table is tiny, wait for it. */
    while (atomic_load(&pl_config_state) != 2) {}
    return;
  }
  /* The log level decides whether the others' errors print: read it first. */
  pl_option_load(&pl_options[PL_OPT_LOG]);
  for (int i = 0; i < PL_OPT_COUNT; i++)
    if (i != PL_OPT_LOG) pl_option_load(&pl_options[i]);
  pl_config_typo_guard();
  atomic_store(&pl_config_state, 2);
}

long pl_opt_long(pl_option_id id) {
  if (PL_UNLIKELY(atomic_load_explicit(&pl_config_state, memory_order_acquire) != 2)) {
    /* The log level is needed while the table itself is being parsed. */
    if (id == PL_OPT_LOG && pl_options[PL_OPT_LOG].init) return pl_options[PL_OPT_LOG].value;
    if (atomic_load(&pl_config_state) == 1) return pl_options[id].def;
    pl_config_init();
  }
  return pl_options[id].value;
}

const char *pl_opt_str(pl_option_id id) {
  if (PL_UNLIKELY(atomic_load_explicit(&pl_config_state, memory_order_acquire) != 2))
    pl_config_init();
  return pl_options[id].str;
}

void pl_config_reset_for_test(void) {
  for (int i = 0; i < PL_OPT_COUNT; i++) pl_options[i].init = false;
  atomic_store(&pl_config_state, 0);
  pl_config_init();
}
