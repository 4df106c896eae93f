# The staging engine's unit tests, include()d from tests/CMakeLists.txt
# inside if(PAGELOCK_UNIT_TESTS), after PAGELOCK_CMOCKA/_INCLUDE are found.
# Both run over the fake driver in ${CMAKE_BINARY_DIR}/fakecuda.

set(PL_STAGE_TEST_ENV "LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/fakecuda")

add_executable(test_stage unit/test_stage.c)
target_link_libraries(test_stage PRIVATE pagelock_core pl_reader ${PAGELOCK_CMOCKA})
target_include_directories(test_stage PRIVATE ${PAGELOCK_CMOCKA_INCLUDE}
  ${CMAKE_CURRENT_SOURCE_DIR}/fakecuda)
add_test(NAME unit_stage COMMAND test_stage)
set_tests_properties(unit_stage PROPERTIES LABELS "unit;sanitize" TIMEOUT 120
  ENVIRONMENT "${PL_STAGE_TEST_ENV}")

# The same test under ThreadSanitizer.  pagelock_core is built without it,
# so its sources are compiled again here, instrumented.  TSan cannot share a
# build with ASan (PAGELOCK_SANITIZE), hence its own option and build tree:
#   cmake -B build-tsan -DPAGELOCK_TSAN=ON && ctest --test-dir build-tsan -L tsan
if(PAGELOCK_TSAN)
  if(PAGELOCK_SANITIZE)
    message(FATAL_ERROR "PAGELOCK_TSAN and PAGELOCK_SANITIZE need separate build trees")
  endif()
  get_target_property(_pl_core_src pagelock_core SOURCES)
  get_target_property(_pl_core_dir pagelock_core SOURCE_DIR)
  set(_pl_tsan_src)
  foreach(_s ${_pl_core_src})
    if(IS_ABSOLUTE ${_s})
      list(APPEND _pl_tsan_src ${_s})
    else()
      list(APPEND _pl_tsan_src ${_pl_core_dir}/${_s})
    endif()
  endforeach()
  add_executable(test_stage_tsan unit/test_stage.c ${_pl_tsan_src})
  # An executable that exports dlsym receives the sanitizer runtime's own
  # dlsym(RTLD_NEXT, ...) calls while the runtime initialises, before
  # instrumented code may run: keep the override out of this binary (the
  # engine never needs it; pl_real_dlsym stays).
  set_source_files_properties(${_pl_core_dir}/hook_dl.c TARGET_DIRECTORY test_stage_tsan
    PROPERTIES COMPILE_DEFINITIONS "dlsym=pl_dlsym_override_unused")
  target_include_directories(test_stage_tsan PRIVATE ${_pl_core_dir} ${PAGELOCK_CUDA_INCLUDE}
    ${PAGELOCK_UTHASH_INCLUDE} ${PAGELOCK_CMOCKA_INCLUDE} ${CMAKE_CURRENT_SOURCE_DIR}/fakecuda)
  target_compile_definitions(test_stage_tsan PRIVATE PL_UNIT_TEST=1)
  target_compile_options(test_stage_tsan PRIVATE -fsanitize=thread -fno-omit-frame-pointer -g -O1)
  target_link_options(test_stage_tsan PRIVATE -fsanitize=thread)
  target_link_libraries(test_stage_tsan PRIVATE pl_reader ${PAGELOCK_CMOCKA} ${CMAKE_DL_LIBS}
    Threads::Threads)
  add_test(NAME unit_stage_tsan COMMAND test_stage_tsan)
  set(_pl_tsan_opts "halt_on_error=1")
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/tsan.supp)
    set(_pl_tsan_opts "${_pl_tsan_opts} suppressions=${CMAKE_CURRENT_SOURCE_DIR}/unit/tsan.supp")
  endif()
  set_tests_properties(unit_stage_tsan PROPERTIES LABELS "tsan" TIMEOUT 300
    ENVIRONMENT "TSAN_OPTIONS=${_pl_tsan_opts};${PL_STAGE_TEST_ENV}")
endif()
