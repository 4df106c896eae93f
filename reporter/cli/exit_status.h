/* exit_status.h - the exit statuses of the CLI itself (the child's own
 * status passes through; help.c says them all). */
#ifndef PLR_EXIT_STATUS_H
#define PLR_EXIT_STATUS_H

#define PLR_EXIT_USAGE 2
#define PLR_EXIT_GATE 3 /* --max-blocked, --fail-if-worse */
#define PLR_EXIT_NOT_FOUND 127

#endif
