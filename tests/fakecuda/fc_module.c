/*
 * fc_module.c: modules, functions and kernel launches.
 *
 * There is no code to run.  Any image loads and any function name
 * resolves; a kernel occupies its stream for a while and completes.  The
 * function named "pagelock_spin" takes one uint64_t parameter, a duration in
 * nanoseconds, and keeps its stream busy that long: tests use it as the
 * compute that copies should overlap with.
 */
#include <stdlib.h>
#include <string.h>

#include "fc_internal.h"

#define FC_MODULE_MAGIC 0x444f4d46u /* "FMOD" */
#define FC_FUNC_MAGIC 0x434e5546u   /* "FUNC" */

typedef struct fc_function {
  uint32_t magic;
  struct fc_module *mod;
  char *name;
  int spin;
  struct fc_function *next;
} fc_function;

typedef struct fc_module {
  uint32_t magic;
  fc_function *funcs;
  struct fc_module *next, *prev;
} fc_module;

static pthread_mutex_t fc_mod_mu = PTHREAD_MUTEX_INITIALIZER;
static fc_module *fc_modules;

/*
 * Names of unloaded functions, kept until exit: a kernel op (a graph node
 * captured before the unload) still points at its name, which a tracing
 * tool reads when the graph is launched.
 */
struct fc_name_grave {
  char *name;
  struct fc_name_grave *next;
};
static struct fc_name_grave *fc_name_graves;

static void fc_name_bury_locked(char *name) {
  struct fc_name_grave *g = malloc(sizeof *g);
  if (g == NULL) {
    /* Losing the name beats freeing it under a queued op. */
    return;
  }
  g->name = name;
  g->next = fc_name_graves;
  fc_name_graves = g;
}

static void fc_module_free_locked(fc_module *m) {
  if (m->prev)
    m->prev->next = m->next;
  else if (fc_modules == m)
    fc_modules = m->next;
  if (m->next) m->next->prev = m->prev;
  for (fc_function *f = m->funcs; f;) {
    fc_function *n = f->next;
    f->magic = 0;
    fc_name_bury_locked(f->name);
    free(f);
    f = n;
  }
  m->magic = 0;
  free(m);
}

void fc_module_fini(void) {
  pthread_mutex_lock(&fc_mod_mu);
  while (fc_modules) fc_module_free_locked(fc_modules);
  while (fc_name_graves) {
    struct fc_name_grave *g = fc_name_graves;
    fc_name_graves = g->next;
    free(g->name);
    free(g);
  }
  pthread_mutex_unlock(&fc_mod_mu);
}

static CUresult fc_module_load(CUmodule *out, const void *image) {
  if (out == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
  fc_ctx *c;
  CUresult r = fc_ctx_require(&c);
  if (r != CUDA_SUCCESS) return r;
  fc_module *m = calloc(1, sizeof *m);
  if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  m->magic = FC_MODULE_MAGIC;
  pthread_mutex_lock(&fc_mod_mu);
  m->next = fc_modules;
  if (fc_modules) fc_modules->prev = m;
  fc_modules = m;
  pthread_mutex_unlock(&fc_mod_mu);
  *out = (CUmodule)m;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  FC_ENTER(cuModuleLoadData);
  FC_RETURN(fc_module_load(module, image));
}

FC_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                      CUjit_option *options, void **optionValues) {
  FC_ENTER(cuModuleLoadDataEx);
  (void)numOptions; /* JIT options have nothing to act on */
  (void)options;
  (void)optionValues;
  FC_RETURN(fc_module_load(module, image));
}

FC_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  FC_ENTER(cuModuleUnload);
  fc_module *m = (fc_module *)hmod;
  pthread_mutex_lock(&fc_mod_mu);
  if (m == NULL || m->magic != FC_MODULE_MAGIC) {
    pthread_mutex_unlock(&fc_mod_mu);
    FC_RETURN(CUDA_ERROR_INVALID_HANDLE);
  }
  fc_module_free_locked(m);
  pthread_mutex_unlock(&fc_mod_mu);
  FC_RETURN(CUDA_SUCCESS);
}

FC_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  FC_ENTER(cuModuleGetFunction);
  fc_module *m = (fc_module *)hmod;
  if (hfunc == NULL || name == NULL) FC_RETURN(CUDA_ERROR_INVALID_VALUE);
  pthread_mutex_lock(&fc_mod_mu);
  if (m == NULL || m->magic != FC_MODULE_MAGIC) {
    pthread_mutex_unlock(&fc_mod_mu);
    FC_RETURN(CUDA_ERROR_INVALID_HANDLE);
  }
  fc_function *f;
  for (f = m->funcs; f; f = f->next)
    if (strcmp(f->name, name) == 0) break;
  if (f == NULL) {
    f = calloc(1, sizeof *f);
    char *n = strdup(name);
    if (f == NULL || n == NULL) {
      free(f);
      free(n);
      pthread_mutex_unlock(&fc_mod_mu);
      FC_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    f->magic = FC_FUNC_MAGIC;
    f->mod = m;
    f->name = n;
    f->spin = strcmp(name, "pagelock_spin") == 0;
    f->next = m->funcs;
    m->funcs = f;
  }
  pthread_mutex_unlock(&fc_mod_mu);
  *hfunc = (CUfunction)f;
  FC_RETURN(CUDA_SUCCESS);
}

/* The spin duration, from kernelParams[0] or the packed `extra` buffer. */
static uint64_t fc_spin_arg(void **params, void **extra) {
  uint64_t ns = 0;
  if (params && params[0]) {
    memcpy(&ns, params[0], sizeof ns);
  } else if (extra) {
    void *buf = NULL;
    size_t *size = NULL;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
        buf = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = extra[i + 1];
    }
    if (buf && size && *size >= sizeof ns) memcpy(&ns, buf, sizeof ns);
  }
  return ns;
}

/* The kernel's name for CUpti_CallbackData::symbolName, if hf looks valid. */
static const char *fc_function_name(CUfunction hf) {
  fc_function *f = (fc_function *)hf;
  return f != NULL && f->magic == FC_FUNC_MAGIC ? f->name : NULL;
}

static CUresult fc_launch(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shmem, CUstream h, void **params,
                          void **extra, int pt) {
  fc_function *f = (fc_function *)hf;
  if (f == NULL || f->magic != FC_FUNC_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  fc_op *op = fc_op_new(FC_OP_KERNEL);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.kernel.spin_ns = f->spin ? fc_spin_arg(params, extra) : 0;
  op->u.kernel.name = f->name;
  op->u.kernel.grid[0] = gx;
  op->u.kernel.grid[1] = gy;
  op->u.kernel.grid[2] = gz;
  op->u.kernel.block[0] = bx;
  op->u.kernel.block[1] = by;
  op->u.kernel.block[2] = bz;
  op->u.kernel.shmem = shmem;
  int capturing = fc_stream_capturing(s);
  if (!capturing) FC_STAT_ADD(kernels_launched, 1);
  return fc_submit(s, op, 0, 0);
}

FC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                  unsigned int gridDimZ, unsigned int blockDimX,
                                  unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream,
                                  void **kernelParams, void **extra) {
  cuLaunchKernel_params p = {f,         gridDimX,     gridDimY,  gridDimZ,
                             blockDimX, blockDimY,    blockDimZ, sharedMemBytes,
                             hStream,   kernelParams, extra};
  FC_ENTER_X(cuLaunchKernel, &p, fc_function_name(f));
  FC_RETURN(fc_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                      sharedMemBytes, hStream, kernelParams, extra, 0));
}

FC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX,
                                       unsigned int blockDimY, unsigned int blockDimZ,
                                       unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra) {
  cuLaunchKernel_ptsz_params p = {f,         gridDimX,     gridDimY,  gridDimZ,
                                  blockDimX, blockDimY,    blockDimZ, sharedMemBytes,
                                  hStream,   kernelParams, extra};
  FC_ENTER_X(cuLaunchKernel_ptsz, &p, fc_function_name(f));
  FC_RETURN(fc_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                      sharedMemBytes, hStream, kernelParams, extra, 1));
}
