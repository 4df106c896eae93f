/* units.h - numbers and paths for humans: the analysis writes them into
 * its verdict sentences, the writers into their tables. */
#ifndef PLR_UNITS_H
#define PLR_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* The part of path after the last '/'; path itself when there is none. */
const char *plr_basename(const char *path);

/* Bytes for humans: "512 B", "4.0 KiB", "32.0 MiB", "1.5 GiB". */
void plr_fmt_bytes(uint64_t bytes, char *buf, size_t len);

/* Nanoseconds as milliseconds with 3 decimals ("12.345"). */
void plr_fmt_ms(uint64_t ns, char *buf, size_t len);

/* bytes per host nanosecond = GB/s; "-" when no time was measured. */
void plr_fmt_gbps(uint64_t bytes, uint64_t ns, char *buf, size_t len);

#endif
