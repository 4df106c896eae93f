/* driver_direct.c - a program that calls the driver API itself (-lcuda).
 *
 * Its copies reach the shim through the PLT, not through cudart.  Exercises
 * HtoD/DtoH sync and async, cuMemcpy (unified), 2D, 3D and a batch, all
 * from pageable memory, and checks the bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define CK(x)                                                          \
  do {                                                                 \
    CUresult r_ = (x);                                                 \
    if (r_ != CUDA_SUCCESS) {                                          \
      fprintf(stderr, "driver_direct: %s failed (%d)\n", #x, (int)r_); \
      exit(2);                                                         \
    }                                                                  \
  } while (0)

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const size_t n = 1 << 20;
  unsigned char *a = malloc(n), *b = malloc(n);
  for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + 3);
  CUdeviceptr d;
  CK(cuMemAlloc(&d, n));
  int bad = 0, copies = 0;

  CK(cuMemcpyHtoD(d, a, n));
  copies++;
  memset(b, 0, n);
  CK(cuMemcpyDtoH(b, d, n));
  copies++;
  bad |= memcmp(a, b, n) != 0;

  CK(cuMemcpyHtoDAsync(d, a, n, s));
  copies++;
  memset(b, 0, n);
  CK(cuMemcpyDtoHAsync(b, d, n, s));
  copies++;
  CK(cuStreamSynchronize(s));
  bad |= memcmp(a, b, n) != 0;

  CK(cuMemcpy(d, (CUdeviceptr)(uintptr_t)a, n));
  copies++;
  memset(b, 0, n);
  CK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)b, d, n, s));
  copies++;
  CK(cuStreamSynchronize(s));
  bad |= memcmp(a, b, n) != 0;

  /* 2D: 256 rows of 1000 bytes out of a 1024-byte pitch */
  CUDA_MEMCPY2D p2;
  memset(&p2, 0, sizeof p2);
  p2.srcMemoryType = CU_MEMORYTYPE_HOST;
  p2.srcHost = a;
  p2.srcPitch = 1024;
  p2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p2.dstDevice = d;
  p2.dstPitch = 1024;
  p2.WidthInBytes = 1000;
  p2.Height = 256;
  CK(cuMemcpy2D(&p2));
  copies++;
  CK(cuMemcpy2DAsync(&p2, s));
  copies++;
  CUDA_MEMCPY3D p3;
  memset(&p3, 0, sizeof p3);
  p3.dstMemoryType = CU_MEMORYTYPE_HOST;
  p3.dstHost = b;
  p3.dstPitch = 1024;
  p3.dstHeight = 16;
  p3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p3.srcDevice = d;
  p3.srcPitch = 1024;
  p3.srcHeight = 16;
  p3.WidthInBytes = 1024;
  p3.Height = 16;
  p3.Depth = 4;
  memset(b, 0, n);
  CK(cuMemcpy3D(&p3));
  copies++;
  for (size_t r = 0; r < 64; r++) bad |= memcmp(a + r * 1024, b + r * 1024, 1000) != 0;

  /* a batch of two uploads and one download */
  CUdeviceptr dsts[3] = {d, d + 4096, (CUdeviceptr)(uintptr_t)b};
  CUdeviceptr srcs[3] = {(CUdeviceptr)(uintptr_t)a, (CUdeviceptr)(uintptr_t)(a + 4096), d};
  size_t sizes[3] = {4096, 4096, 8192};
  CUmemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t idx = 0;
  CK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s));
  copies += 2;
  CK(cuStreamSynchronize(s));
  memset(b, 0, 8192);
  CK(cuMemcpyBatchAsync(dsts + 2, srcs + 2, sizes + 2, 1, &attr, &idx, 1, s));
  copies += 1;
  CK(cuStreamSynchronize(s));
  bad |= memcmp(a, b, 8192) != 0;

  /* Graph memcpy nodes: the shim logs them and leaves the graph alone; the
   * launch copies without passing through any copy entry point. */
  CUgraph g;
  CUgraphNode up, down;
  CUgraphExec ge;
  CK(cuGraphCreate(&g, 0));
  CUDA_MEMCPY3D gp;
  memset(&gp, 0, sizeof gp);
  gp.srcMemoryType = CU_MEMORYTYPE_HOST;
  gp.srcHost = a;
  gp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  gp.dstDevice = d;
  gp.WidthInBytes = 65536;
  gp.Height = 1;
  gp.Depth = 1;
  CK(cuGraphAddMemcpyNode(&up, g, NULL, 0, &gp, ctx));
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  np.memcpy.copyCtx = ctx;
  np.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  np.memcpy.copyParams.srcDevice = d;
  np.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_HOST;
  np.memcpy.copyParams.dstHost = b;
  np.memcpy.copyParams.WidthInBytes = 65536;
  np.memcpy.copyParams.Height = 1;
  np.memcpy.copyParams.Depth = 1;
  CK(cuGraphAddNode(&down, g, &up, NULL, 1, &np));
  for (size_t i = 0; i < 65536; i++) a[i] = (unsigned char)(i * 13 + 1);
  memset(b, 0, 65536);
  CK(cuGraphInstantiate(&ge, g, 0));
  CK(cuGraphLaunch(ge, s));
  CK(cuStreamSynchronize(s));
  if (memcmp(a, b, 65536) != 0) {
    fprintf(stderr, "driver_direct: graph copy bytes differ\n");
    bad = 1;
  }
  CK(cuGraphExecDestroy(ge));
  CK(cuGraphDestroy(g));

  CK(cuMemFree(d));
  CK(cuStreamDestroy(s));
  printf("pageable=%d\n", copies);
  if (bad) fprintf(stderr, "driver_direct: bytes differ\n");
  return bad;
}
