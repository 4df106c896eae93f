# The demo workload, built twice from one source so that one build serves a
# GPU machine and a machine without one; `pagelock demo` asks libcuda for a
# device and picks (reporter/cli/cmd_demo.c):
#   pagelock-demo           the toolkit's static runtime: the real GPU.  It
#                           links no libcuda (it gets the driver API through
#                           cudaGetDriverEntryPointByVersion), so it builds
#                           on a machine with no driver and packages with no
#                           dependency on one.
#   fakecuda/pagelock-demo  the fake runtime of tests/fakecuda, run with the
#                           fake driver first in LD_LIBRARY_PATH.
set(PL_DEMO_SRC ${CMAKE_SOURCE_DIR}/demo/pagelock_demo.c)

add_executable(pagelock-demo-fake ${PL_DEMO_SRC})
set_target_properties(pagelock-demo-fake PROPERTIES OUTPUT_NAME pagelock-demo
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fakecuda)
target_include_directories(pagelock-demo-fake PRIVATE ${PAGELOCK_CUDA_INCLUDE})
target_link_libraries(pagelock-demo-fake PRIVATE fake_cudart)

if(PAGELOCK_CUDART_STATIC_LIBRARY)
  add_executable(pagelock-demo ${PL_DEMO_SRC})
  target_include_directories(pagelock-demo PRIVATE ${PAGELOCK_CUDA_INCLUDE})
  target_link_libraries(pagelock-demo PRIVATE ${PAGELOCK_CUDART_STATIC_LIBRARY}
    ${CMAKE_DL_LIBS} Threads::Threads rt)
else()
  message(STATUS "pagelock: no libcudart_static.a under CUDA_HOME=${CUDA_HOME}: "
    "`pagelock demo` will run over the fake CUDA only")
endif()
