/*
 * fc_fault.c: per-symbol call counting, fault injection and the common
 * entry check every exported driver function runs first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"

const char *const fc_sym_names[FC_SYM__COUNT] = {
#define FC_SYM(base, ver, sym) [FC_SYM_##sym] = #sym,
#define FC_SYM_PT(base, ver, sym, twin) [FC_SYM_##sym] = #sym, [FC_SYM_##twin] = #twin,
#define FC_LOOKUP(base, ver, sym)
#include "fc_procs.def"
#undef FC_SYM
#undef FC_SYM_PT
#undef FC_LOOKUP
};

static _Atomic unsigned long fc_calls[FC_SYM__COUNT];
/* Threads currently between FC_ENTER and FC_RETURN. */
static atomic_int fc_in_api;

struct fc_fault_rule {
  int armed;
  int every;          /* fire on every call */
  unsigned long left; /* calls until it fires (1 = the next one) */
  CUresult err;
};
static pthread_mutex_t fc_fault_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_fault_rule fc_rules[FC_SYM__COUNT];
/* Lets the common case (no rules) skip the mutex. */
static atomic_int fc_rules_armed;

int fc_sym_lookup(const char *name) {
  if (name == NULL) return -1;
  for (int i = 0; i < FC_SYM__COUNT; i++)
    if (strcmp(fc_sym_names[i], name) == 0) return i;
  return -1;
}

CUresult fc_fault_check(enum fc_sym_id id) {
  if (atomic_load_explicit(&fc_rules_armed, memory_order_acquire) == 0) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&fc_fault_mu);
  struct fc_fault_rule *rule = &fc_rules[id];
  if (rule->armed) {
    if (rule->every) {
      r = rule->err;
    } else if (--rule->left == 0) {
      r = rule->err;
      rule->armed = 0;
      atomic_fetch_sub(&fc_rules_armed, 1);
    }
  }
  pthread_mutex_unlock(&fc_fault_mu);
  return r;
}

/* Functions that are pure lookups work before cuInit, as in the driver. */
static int fc_preinit_ok(enum fc_sym_id id) {
  return id == FC_SYM_cuInit || id == FC_SYM_cuDriverGetVersion || id == FC_SYM_cuGetProcAddress ||
         id == FC_SYM_cuGetProcAddress_v2 || id == FC_SYM_cuGetErrorString ||
         id == FC_SYM_cuGetErrorName;
}

static int fc_pure(enum fc_sym_id id) {
  return id == FC_SYM_cuDriverGetVersion || id == FC_SYM_cuGetErrorString ||
         id == FC_SYM_cuGetErrorName;
}

CUresult fc_enter(enum fc_sym_id id, struct fc_tool_call *frame, struct fc_tool_call **call,
                  const void *params, const char *symbol) {
  atomic_fetch_add_explicit(&fc_calls[id], 1, memory_order_relaxed);
  atomic_fetch_add(&fc_in_api, 1);
  /* The tool hears of the call before any check, as CUPTI does: a call
   * that fails at once (injected fault, no cuInit, ...) still gets its
   * exit callback with the error. */
  const struct fc_tool_ops *t = atomic_load_explicit(&fc_tool, memory_order_acquire);
  if (t != NULL) *call = fc_tool_enter(t, frame, id, params, symbol);
  CUresult r = fc_fault_check(id);
  if (r == CUDA_SUCCESS && !fc_pure(id)) {
    if (atomic_load(&fc_forked_child))
      r = CUDA_ERROR_NOT_INITIALIZED;
    else if (atomic_load(&fc_shutdown))
      r = CUDA_ERROR_DEINITIALIZED;
    else if (fc_tls_in_callback)
      /* CUDA forbids API calls from host functions and callbacks. */
      r = CUDA_ERROR_NOT_PERMITTED;
    else if (!atomic_load(&fc_initialized) && !fc_preinit_ok(id))
      r = CUDA_ERROR_NOT_INITIALIZED;
  }
  if (r != CUDA_SUCCESS) {
    if (*call != NULL) fc_tool_leave(*call, r);
    atomic_fetch_sub(&fc_in_api, 1);
  }
  return r;
}

void fc_leave(struct fc_tool_call *call, CUresult r) {
  if (call != NULL) fc_tool_leave(call, r);
  atomic_fetch_sub(&fc_in_api, 1);
}

int fc_api_threads_inside(void) { return atomic_load(&fc_in_api); }

long fc_error_from_string(const char *s) {
  if (s == NULL || *s == '\0') return -1;
  char *end;
  long v = strtol(s, &end, 0);
  if (*end == '\0') return v;
  for (int e = 0; e < 1000; e++) {
    const char *n = fc_error_name((CUresult)e);
    if (n && strcmp(n, s) == 0) return e;
  }
  return -1;
}

static int fc_fail_set(int id, int nth, int cuerr) {
  pthread_mutex_lock(&fc_fault_mu);
  struct fc_fault_rule *rule = &fc_rules[id];
  if (rule->armed) atomic_fetch_sub(&fc_rules_armed, 1);
  rule->armed = 0;
  if (cuerr != 0 && nth >= 0) {
    rule->armed = 1;
    rule->every = (nth == 0);
    rule->left = (unsigned long)nth;
    rule->err = (CUresult)cuerr;
    atomic_fetch_add(&fc_rules_armed, 1);
  }
  pthread_mutex_unlock(&fc_fault_mu);
  return 0;
}

void fc_fault_parse_env(const char *spec) {
  if (spec == NULL || *spec == '\0') return;
  char *copy = strdup(spec);
  if (copy == NULL) return;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *c1 = strchr(item, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2) {
      fprintf(stderr, "fakecuda: FAKECUDA_FAIL: ignoring '%s' (want name:nth:err)\n", item);
      continue;
    }
    *c1 = '\0';
    *c2 = '\0';
    int id = fc_sym_lookup(item);
    long err = fc_error_from_string(c2 + 1);
    if (id < 0 || err < 0) {
      fprintf(stderr, "fakecuda: FAKECUDA_FAIL: unknown symbol or error in '%s'\n", item);
      continue;
    }
    fc_fail_set(id, atoi(c1 + 1), (int)err);
  }
  free(copy);
}

FC_EXPORT int fakecuda_fail(const char *driver_symbol_name, int nth, int cuerr) {
  int id = fc_sym_lookup(driver_symbol_name);
  if (id < 0 || nth < 0) return -1;
  return fc_fail_set(id, nth, cuerr);
}

FC_EXPORT void fakecuda_clear_faults(void) {
  pthread_mutex_lock(&fc_fault_mu);
  memset(fc_rules, 0, sizeof fc_rules);
  atomic_store(&fc_rules_armed, 0);
  pthread_mutex_unlock(&fc_fault_mu);
}

FC_EXPORT unsigned long fakecuda_call_count(const char *exact_symbol) {
  int id = fc_sym_lookup(exact_symbol);
  return id < 0 ? 0 : atomic_load_explicit(&fc_calls[id], memory_order_relaxed);
}

FC_EXPORT void fakecuda_reset_call_counts(void) {
  for (int i = 0; i < FC_SYM__COUNT; i++)
    atomic_store_explicit(&fc_calls[i], 0, memory_order_relaxed);
}
