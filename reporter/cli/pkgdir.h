/* pkgdir.h - where the CLI finds the files it runs: the shim, the demo and
 * the fake CUDA, in a build tree or an installed tree. */
#ifndef PLR_PKGDIR_H
#define PLR_PKGDIR_H

#include <stddef.h>

/* The path of name (a file or directory the build puts beside the pagelock
 * executable: "libpagelock.so", "pagelock-demo", "fakecuda") into out.
 * Looks beside the executable (a build tree), then in the private library
 * directory of an installed tree (PLR_PKGLIBDIR_REL from the executable's
 * directory, e.g. bin/../lib/pagelock), both found from /proc/self/exe so
 * any working directory and any install prefix work.  Returns 0 when it
 * exists; else -1 with the installed-tree candidate in out (for the
 * message), or with out empty when /proc/self/exe cannot be read. */
int plr_pkg_path(const char *name, char *out, size_t len);

/* Directory holding the pagelock executable (from /proc/self/exe), into
 * buf; returns -1 when it cannot be found. */
int plr_self_dir(char *buf, size_t len);

#endif
