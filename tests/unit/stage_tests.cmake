# The staging and registration engines' unit tests, include()d from
# tests/CMakeLists.txt inside if(PAGELOCK_UNIT_TESTS), after
# PAGELOCK_CMOCKA/_INCLUDE are found.  One feature a file, each file its
# own program and ctest, over the fake driver in ${CMAKE_BINARY_DIR}/fakecuda
# (unit/fake_driver.c); under PAGELOCK_TSAN each again under
# ThreadSanitizer (pl_add_tsan_test, tests/CMakeLists.txt), as NAME_tsan.

set(PL_STAGE_TEST_ENV "LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/fakecuda")

# pl_engine_test(FIXTURE NAME): unit/test_NAME.c with unit/FIXTURE.c, as
# the program test_NAME and the ctest unit_NAME.
function(pl_engine_test fixture name)
  set(srcs unit/test_${name}.c unit/${fixture}.c unit/fake_driver.c)
  add_executable(test_${name} ${srcs})
  target_link_libraries(test_${name} PRIVATE pagelock_core pl_reader ${PAGELOCK_CMOCKA})
  target_include_directories(test_${name} PRIVATE ${PAGELOCK_CMOCKA_INCLUDE}
    ${CMAKE_CURRENT_SOURCE_DIR}/fakecuda)
  add_test(NAME unit_${name} COMMAND test_${name})
  set_tests_properties(unit_${name} PROPERTIES LABELS "unit;sanitize" TIMEOUT 120
    ENVIRONMENT "${PL_STAGE_TEST_ENV}")
  if(PAGELOCK_TSAN)
    pl_add_tsan_test(test_${name}_tsan ${srcs})
  endif()
endfunction()

# The staging engine (PAGELOCK_MODE stage).  test_stage_concurrent
# --stress is the robustness suite's staged stress (tests/robust/run.sh).
foreach(t bytes concurrent pool d2h_async stores failures lifecycle cpus)
  pl_engine_test(stage_fixture stage_${t})
endforeach()

# The registration engine (PAGELOCK_MODE register and auto).
foreach(t register copy pieces memory process threads)
  pl_engine_test(autopin_fixture autopin_${t})
endforeach()
