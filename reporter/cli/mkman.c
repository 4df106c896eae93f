/* mkman.c - pl_mkman VERSION DATE FILE: writes the man page pagelock(1)
 * from help.c's words (plr_help_man); the build runs it, so the page needs
 * no tool beyond the compiler and says what `pagelock --help` says. */
#include <stdio.h>

#include "help.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pl_mkman VERSION DATE FILE\n");
    return 2;
  }
  FILE *f = fopen(argv[3], "w");
  if (!f) {
    perror(argv[3]);
    return 1;
  }
  plr_help_man(f, argv[1], argv[2]);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    perror(argv[3]);
    return 1;
  }
  return 0;
}
