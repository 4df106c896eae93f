# The CUDA toolkit.  The shim and the CLI need only its headers (the shim
# dlopens libcuda and CUPTI at run time); the demo's real-GPU build also
# links its static runtime.  CUDA_HOME (CMake or environment) wins over
# /usr/local/cuda, as in scripts/setup, which says the same in one line.
if(NOT CUDA_HOME)
  if(DEFINED ENV{CUDA_HOME} AND NOT "$ENV{CUDA_HOME}" STREQUAL "")
    set(CUDA_HOME $ENV{CUDA_HOME})
  else()
    set(CUDA_HOME /usr/local/cuda)
  endif()
endif()
find_path(PAGELOCK_CUDA_INCLUDE cuda.h
  HINTS ${CUDA_HOME}/include ${CUDA_HOME}/targets/x86_64-linux/include)
find_path(PAGELOCK_CUPTI_INCLUDE cupti.h
  HINTS ${PAGELOCK_CUDA_INCLUDE} ${CUDA_HOME}/extras/CUPTI/include)
if(NOT PAGELOCK_CUDA_INCLUDE OR NOT PAGELOCK_CUPTI_INCLUDE)
  message(FATAL_ERROR "CUDA toolkit not found (no cuda.h and cupti.h under "
    "CUDA_HOME=${CUDA_HOME}): install NVIDIA's CUDA toolkit "
    "(https://developer.nvidia.com/cuda-downloads) or set CUDA_HOME to it")
endif()

# The static runtime, as a default nvcc build links it: the demo built
# against it needs no libcudart at run time, only the driver's libcuda.so.1.
find_library(PAGELOCK_CUDART_STATIC_LIBRARY NAMES libcudart_static.a
  HINTS ${CUDA_HOME}/lib64 ${CUDA_HOME}/lib ${CUDA_HOME}/targets/x86_64-linux/lib
  NO_DEFAULT_PATH)
