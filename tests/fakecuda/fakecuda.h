/*
 * fakecuda.h: control interface of the fake libcuda.so.1 used by pagelock's
 * GPU-less tests.
 *
 * These functions exist only in the fake driver.  A test links against
 * fake_cuda (or looks them up with dlsym on the libcuda.so.1 handle) to
 * inject failures and to read what the "hardware" saw.  Nothing here is part
 * of the CUDA API; the real driver has no such symbols.
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FAKECUDA_API __attribute__((visibility("default")))
#else
#define FAKECUDA_API
#endif

/*
 * Counters since load or since the last fakecuda_reset_stats().  The *_live
 * fields are current state, not counters, and are not reset; the high-water
 * mark is reset to the current live value.
 *
 * Copies are counted when issued (or, for graphs, when launched), not when
 * their worker finishes, so a test can read them without synchronising.
 * A copy is "pinned" when its host side lies entirely inside a
 * cuMemHostAlloc/cuMemAllocHost/cuMemHostRegister range, "pageable"
 * otherwise; device-to-device and host-to-host copies count as neither.
 */
struct fakecuda_stats {
  unsigned long long copies_pageable;
  unsigned long long copies_pinned;
  unsigned long long copies_d2d;
  unsigned long long bytes_h2d;
  unsigned long long bytes_d2h;
  unsigned long long bytes_pageable; /* host<->device bytes, pageable host side */
  unsigned long long bytes_pinned;   /* host<->device bytes, pinned host side */
  unsigned long long memsets;
  unsigned long long host_allocs_live; /* cuMemHostAlloc/cuMemAllocHost */
  unsigned long long host_alloc_bytes_live;
  unsigned long long registered_ranges_live;
  unsigned long long registered_bytes_live;
  unsigned long long registered_bytes_high_water;
  unsigned long long device_allocs_live; /* cuMemAlloc + cuMemAllocManaged */
  unsigned long long device_bytes_live;
  unsigned long long kernels_launched; /* direct launches + kernel nodes of launched graphs */
  unsigned long long graph_launches;
  unsigned long long host_funcs_run;      /* cuLaunchHostFunc/cuStreamAddCallback bodies executed */
  unsigned long long host_register_calls; /* cuMemHostRegister and cuMemHostRegister_v2 */
  unsigned long long host_unregister_calls;
  unsigned long long legacy_calls; /* 32-bit era cuMemcpyHtoD/DtoH/DtoD[Async] */
  /* cuEventRecord* of an event on a stream of another context (the
   * legacy and per-thread streams are the current context's): refused
   * with CUDA_ERROR_INVALID_HANDLE, as CUDA refuses it.  A wait on an
   * event of another context (cuStreamWaitEvent) is allowed, as in CUDA,
   * and not counted. */
  unsigned long long event_ctx_mismatches;
  /* Pages of the ranges given to cuMemHostRegister* that were not resident
   * when the call came (mincore): the real driver faults those in inside
   * the call, holding a lock every other driver call of the process waits
   * behind. */
  unsigned long long host_register_nonresident_pages;
};

/*
 * Make the nth call (1-based, counted from now) of the exported driver
 * symbol `driver_symbol_name` (exact name, e.g. "cuMemcpyHtoDAsync_v2_ptsz")
 * return `cuerr` without doing anything.  nth == 0: every call until cleared.
 * cuerr == 0 clears the rule for that symbol.  Returns 0, or -1 for a name
 * the fake driver does not export.  FAKECUDA_FAIL="name:nth:err[,...]" in the
 * environment installs rules when the library loads.
 */
FAKECUDA_API int fakecuda_fail(const char *driver_symbol_name, int nth, int cuerr);
/* Drop every fault rule. */
FAKECUDA_API void fakecuda_clear_faults(void);

FAKECUDA_API void fakecuda_get_stats(struct fakecuda_stats *s);
FAKECUDA_API void fakecuda_reset_stats(void);

/* 1 if [p, p+n) lies inside one registered or CUDA-allocated host range. */
FAKECUDA_API int fakecuda_is_registered(const void *p, size_t n);

/*
 * Bytes of [p, p+n) that lie in live cuMemHostRegister registrations (the
 * program's or a shim's; cuMemHostAlloc memory is not counted), 0 when
 * none; the lowest such registration goes to *first and *first_len (either
 * may be NULL).  It takes only the fake's own range lock, which the fake
 * never holds across a call into the allocator, and never allocates: a
 * preloaded library may call it from inside free, munmap or madvise
 * (tests/preload/reg_guard.c).
 */
FAKECUDA_API size_t fakecuda_registered_bytes_in(const void *p, size_t n, const void **first,
                                                 size_t *first_len);

/*
 * Calls of one exact exported symbol since load (or the last
 * fakecuda_reset_call_counts()), failed and injected-failure calls included.
 * 0 for names the fake does not export.
 */
FAKECUDA_API unsigned long fakecuda_call_count(const char *exact_symbol);
FAKECUDA_API void fakecuda_reset_call_counts(void);

/*
 * Override the bandwidth model at run time (GB/s, 1e9 bytes).  A value <= 0
 * leaves that setting unchanged.  Defaults come from FAKECUDA_PINNED_GBPS
 * (24) and FAKECUDA_PAGEABLE_GBPS (6).
 */
FAKECUDA_API void fakecuda_set_bandwidth(double pinned_gbps, double pageable_gbps);
/* How fast cuMemHostRegister pins (GB/s; FAKECUDA_REGISTER_GBPS at load):
 * a slow one lets a test act while a registration is being made. */
FAKECUDA_API void fakecuda_set_register_bandwidth(double gbps);

#ifdef __cplusplus
}
#endif

#endif /* FAKECUDA_H */
