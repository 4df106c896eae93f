/*
 * cudart_errors.c: cudaGetErrorName / cudaGetErrorString and the
 * CUresult -> cudaError_t mapping of the fake runtime.
 *
 * The table holds every cudaError of the CUDA 13 driver_types.h.  Since
 * CUDA 10 the runtime's codes share their numbers with the driver's
 * (CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation == 2, ...), so a
 * driver code maps to the runtime code of the same value when there is one.
 */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cudart_internal.h"

struct rt_err_entry {
  cudaError_t code;
  const char *name;
  const char *text;
};

static const struct rt_err_entry rt_err_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorProfilerDisabled, "cudaErrorProfilerDisabled", "profiler disabled"},
    {cudaErrorProfilerNotInitialized, "cudaErrorProfilerNotInitialized",
     "profiler not initialized"},
    {cudaErrorProfilerAlreadyStarted, "cudaErrorProfilerAlreadyStarted",
     "profiler already started"},
    {cudaErrorProfilerAlreadyStopped, "cudaErrorProfilerAlreadyStopped",
     "profiler already stopped"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch value"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid symbol"},
    {cudaErrorInvalidHostPointer, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidTexture, "cudaErrorInvalidTexture", "invalid texture"},
    {cudaErrorInvalidTextureBinding, "cudaErrorInvalidTextureBinding", "invalid texture binding"},
    {cudaErrorInvalidChannelDescriptor, "cudaErrorInvalidChannelDescriptor",
     "invalid channel descriptor"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorAddressOfConstant, "cudaErrorAddressOfConstant", "address of constant"},
    {cudaErrorTextureFetchFailed, "cudaErrorTextureFetchFailed", "texture fetch failed"},
    {cudaErrorTextureNotBound, "cudaErrorTextureNotBound", "texture not bound"},
    {cudaErrorSynchronizationError, "cudaErrorSynchronizationError", "synchronization error"},
    {cudaErrorInvalidFilterSetting, "cudaErrorInvalidFilterSetting", "invalid filter setting"},
    {cudaErrorInvalidNormSetting, "cudaErrorInvalidNormSetting", "invalid norm setting"},
    {cudaErrorMixedDeviceExecution, "cudaErrorMixedDeviceExecution", "mixed device execution"},
    {cudaErrorNotYetImplemented, "cudaErrorNotYetImplemented", "not yet implemented"},
    {cudaErrorMemoryValueTooLarge, "cudaErrorMemoryValueTooLarge", "memory value too large"},
    {cudaErrorStubLibrary, "cudaErrorStubLibrary", "stub library"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorCallRequiresNewerDriver, "cudaErrorCallRequiresNewerDriver",
     "call requires newer driver"},
    {cudaErrorInvalidSurface, "cudaErrorInvalidSurface", "invalid surface"},
    {cudaErrorDuplicateVariableName, "cudaErrorDuplicateVariableName", "duplicate variable name"},
    {cudaErrorDuplicateTextureName, "cudaErrorDuplicateTextureName", "duplicate texture name"},
    {cudaErrorDuplicateSurfaceName, "cudaErrorDuplicateSurfaceName", "duplicate surface name"},
    {cudaErrorDevicesUnavailable, "cudaErrorDevicesUnavailable", "devices unavailable"},
    {cudaErrorIncompatibleDriverContext, "cudaErrorIncompatibleDriverContext",
     "incompatible driver context"},
    {cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration", "missing configuration"},
    {cudaErrorPriorLaunchFailure, "cudaErrorPriorLaunchFailure", "prior launch failure"},
    {cudaErrorLaunchMaxDepthExceeded, "cudaErrorLaunchMaxDepthExceeded",
     "launch max depth exceeded"},
    {cudaErrorLaunchFileScopedTex, "cudaErrorLaunchFileScopedTex", "launch file scoped tex"},
    {cudaErrorLaunchFileScopedSurf, "cudaErrorLaunchFileScopedSurf", "launch file scoped surf"},
    {cudaErrorSyncDepthExceeded, "cudaErrorSyncDepthExceeded", "sync depth exceeded"},
    {cudaErrorLaunchPendingCountExceeded, "cudaErrorLaunchPendingCountExceeded",
     "launch pending count exceeded"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceNotLicensed, "cudaErrorDeviceNotLicensed", "device not licensed"},
    {cudaErrorSoftwareValidityNotEstablished, "cudaErrorSoftwareValidityNotEstablished",
     "software validity not established"},
    {cudaErrorStartupFailure, "cudaErrorStartupFailure", "startup failure"},
    {cudaErrorInvalidKernelImage, "cudaErrorInvalidKernelImage", "invalid kernel image"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorMapBufferObjectFailed, "cudaErrorMapBufferObjectFailed", "map buffer object failed"},
    {cudaErrorUnmapBufferObjectFailed, "cudaErrorUnmapBufferObjectFailed",
     "unmap buffer object failed"},
    {cudaErrorArrayIsMapped, "cudaErrorArrayIsMapped", "array is mapped"},
    {cudaErrorAlreadyMapped, "cudaErrorAlreadyMapped", "already mapped"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image for device"},
    {cudaErrorAlreadyAcquired, "cudaErrorAlreadyAcquired", "already acquired"},
    {cudaErrorNotMapped, "cudaErrorNotMapped", "not mapped"},
    {cudaErrorNotMappedAsArray, "cudaErrorNotMappedAsArray", "not mapped as array"},
    {cudaErrorNotMappedAsPointer, "cudaErrorNotMappedAsPointer", "not mapped as pointer"},
    {cudaErrorECCUncorrectable, "cudaErrorECCUncorrectable", "e c c uncorrectable"},
    {cudaErrorUnsupportedLimit, "cudaErrorUnsupportedLimit", "unsupported limit"},
    {cudaErrorDeviceAlreadyInUse, "cudaErrorDeviceAlreadyInUse", "device already in use"},
    {cudaErrorPeerAccessUnsupported, "cudaErrorPeerAccessUnsupported", "peer access unsupported"},
    {cudaErrorInvalidPtx, "cudaErrorInvalidPtx", "invalid ptx"},
    {cudaErrorInvalidGraphicsContext, "cudaErrorInvalidGraphicsContext",
     "invalid graphics context"},
    {cudaErrorNvlinkUncorrectable, "cudaErrorNvlinkUncorrectable", "nvlink uncorrectable"},
    {cudaErrorJitCompilerNotFound, "cudaErrorJitCompilerNotFound", "jit compiler not found"},
    {cudaErrorUnsupportedPtxVersion, "cudaErrorUnsupportedPtxVersion", "unsupported ptx version"},
    {cudaErrorJitCompilationDisabled, "cudaErrorJitCompilationDisabled",
     "jit compilation disabled"},
    {cudaErrorUnsupportedExecAffinity, "cudaErrorUnsupportedExecAffinity",
     "unsupported exec affinity"},
    {cudaErrorUnsupportedDevSideSync, "cudaErrorUnsupportedDevSideSync",
     "unsupported dev side sync"},
    {cudaErrorContained, "cudaErrorContained", "contained"},
    {cudaErrorInvalidSource, "cudaErrorInvalidSource", "invalid source"},
    {cudaErrorFileNotFound, "cudaErrorFileNotFound", "file not found"},
    {cudaErrorSharedObjectSymbolNotFound, "cudaErrorSharedObjectSymbolNotFound",
     "shared object symbol not found"},
    {cudaErrorSharedObjectInitFailed, "cudaErrorSharedObjectInitFailed",
     "shared object init failed"},
    {cudaErrorOperatingSystem, "cudaErrorOperatingSystem", "operating system"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState",
     "the operation is not permitted in the current state"},
    {cudaErrorLossyQuery, "cudaErrorLossyQuery", "lossy query"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "illegal address"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "launch out of resources"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout", "launch timeout"},
    {cudaErrorLaunchIncompatibleTexturing, "cudaErrorLaunchIncompatibleTexturing",
     "launch incompatible texturing"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled",
     "peer access already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled", "peer access not enabled"},
    {cudaErrorSetOnActiveProcess, "cudaErrorSetOnActiveProcess", "set on active process"},
    {cudaErrorContextIsDestroyed, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {cudaErrorAssert, "cudaErrorAssert", "assert"},
    {cudaErrorTooManyPeers, "cudaErrorTooManyPeers", "too many peers"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorHardwareStackError, "cudaErrorHardwareStackError", "hardware stack error"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "illegal instruction"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorInvalidAddressSpace, "cudaErrorInvalidAddressSpace", "invalid address space"},
    {cudaErrorInvalidPc, "cudaErrorInvalidPc", "invalid pc"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "launch failure"},
    {cudaErrorCooperativeLaunchTooLarge, "cudaErrorCooperativeLaunchTooLarge",
     "cooperative launch too large"},
    {cudaErrorTensorMemoryLeak, "cudaErrorTensorMemoryLeak", "tensor memory leak"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorSystemNotReady, "cudaErrorSystemNotReady", "system not ready"},
    {cudaErrorSystemDriverMismatch, "cudaErrorSystemDriverMismatch", "system driver mismatch"},
    {cudaErrorCompatNotSupportedOnDevice, "cudaErrorCompatNotSupportedOnDevice",
     "compat not supported on device"},
    {cudaErrorMpsConnectionFailed, "cudaErrorMpsConnectionFailed", "mps connection failed"},
    {cudaErrorMpsRpcFailure, "cudaErrorMpsRpcFailure", "mps rpc failure"},
    {cudaErrorMpsServerNotReady, "cudaErrorMpsServerNotReady", "mps server not ready"},
    {cudaErrorMpsMaxClientsReached, "cudaErrorMpsMaxClientsReached", "mps max clients reached"},
    {cudaErrorMpsMaxConnectionsReached, "cudaErrorMpsMaxConnectionsReached",
     "mps max connections reached"},
    {cudaErrorMpsClientTerminated, "cudaErrorMpsClientTerminated", "mps client terminated"},
    {cudaErrorCdpNotSupported, "cudaErrorCdpNotSupported", "cdp not supported"},
    {cudaErrorCdpVersionMismatch, "cudaErrorCdpVersionMismatch", "cdp version mismatch"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge", "stream capture merge"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "stream capture unmatched"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "stream capture unjoined"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "stream capture isolation"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent", "captured event"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorTimeout, "cudaErrorTimeout", "timeout"},
    {cudaErrorGraphExecUpdateFailure, "cudaErrorGraphExecUpdateFailure",
     "graph exec update failure"},
    {cudaErrorExternalDevice, "cudaErrorExternalDevice", "external device"},
    {cudaErrorInvalidClusterSize, "cudaErrorInvalidClusterSize", "invalid cluster size"},
    {cudaErrorFunctionNotLoaded, "cudaErrorFunctionNotLoaded", "function not loaded"},
    {cudaErrorInvalidResourceType, "cudaErrorInvalidResourceType", "invalid resource type"},
    {cudaErrorInvalidResourceConfiguration, "cudaErrorInvalidResourceConfiguration",
     "invalid resource configuration"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
    {cudaErrorApiFailureBase, "cudaErrorApiFailureBase", "api failure base"},
};

static const struct rt_err_entry *rt_err_find(int e) {
  for (size_t i = 0; i < sizeof rt_err_table / sizeof rt_err_table[0]; i++)
    if ((int)rt_err_table[i].code == e) return &rt_err_table[i];
  return NULL;
}

cudaError_t rt_map_error(CUresult r) {
  if (r == CUDA_SUCCESS) return cudaSuccess;
  return rt_err_find((int)r) ? (cudaError_t)r : cudaErrorUnknown;
}

RT_API const char *CUDARTAPI cudaGetErrorName(cudaError_t error) {
  const struct rt_err_entry *e = rt_err_find((int)error);
  return e ? e->name : "unrecognized error code";
}

RT_API const char *CUDARTAPI cudaGetErrorString(cudaError_t error) {
  const struct rt_err_entry *e = rt_err_find((int)error);
  return e ? e->text : "unrecognized error code";
}
