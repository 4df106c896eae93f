/* optdump.c - docs/usage.md's configuration table, written from
 * include/pagelock/options.def.
 *
 * cli_help_options compares its output with that table byte for byte,
 * so the table is never edited by hand: change the list, then paste
 * `build/pl_optdump` over the table.  It also checks what the list itself
 * cannot: that the default a row shows is the one the shim uses.  A
 * mismatch is one line on stderr and exit status 1. */
#include <stdio.h>
#include <string.h>

#include "optdoc.h"

int main(void) {
  int bad = 0;
  printf("| variable | default | values | meaning |\n");
  printf("| --- | --- | --- | --- |\n");
  for (size_t i = 0; i < plr_option_count; i++) {
    const plr_option_doc *o = &plr_option_docs[i];
    char def[64], values[256];
    plr_option_words(o, "`", "`", ", ", def, sizeof def, values, sizeof values);
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
