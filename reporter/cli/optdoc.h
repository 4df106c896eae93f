/* optdoc.h - the options of include/pagelock/options.def in words, for the
 * two places that show them: `pagelock --help` (cli.c) and docs/usage.md's
 * configuration table (tests/cli/optdump.c). */
#ifndef PLR_OPTDOC_H
#define PLR_OPTDOC_H

#include <stddef.h>

enum { PLR_OPT_CHOICE, PLR_OPT_LONG, PLR_OPT_SIZE, PLR_OPT_STRING, PLR_OPT_CLI };

typedef struct plr_option_doc {
  const char *id; /* without the PAGELOCK_ prefix */
  int type;
  long def, min, max;
  const char *values, *shown, *help;
} plr_option_doc;

extern const plr_option_doc plr_option_docs[];
extern const size_t plr_option_count;

/* o's default ("1M", "observe"; "" for strings) into def, and the values it
 * takes into range: "0-256", "64K-1G", "at least 1M", "a size", a choice's
 * names each between open and close and joined by sep, else the list's own
 * words for it. */
void plr_option_words(const plr_option_doc *o, const char *open, const char *close, const char *sep,
                      char *def, size_t dlen, char *range, size_t rlen);

#endif
