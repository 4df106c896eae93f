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

# The same test under ThreadSanitizer (pl_add_tsan_test, tests/CMakeLists.txt).
if(PAGELOCK_TSAN)
  pl_add_tsan_test(test_stage_tsan unit/test_stage.c)
endif()

# The registration engine (PAGELOCK_MODE register and auto), over the same
# fake driver.
add_executable(test_autopin unit/test_autopin.c)
target_link_libraries(test_autopin PRIVATE pagelock_core pl_reader ${PAGELOCK_CMOCKA})
target_include_directories(test_autopin PRIVATE ${PAGELOCK_CMOCKA_INCLUDE}
  ${CMAKE_CURRENT_SOURCE_DIR}/fakecuda)
add_test(NAME unit_autopin COMMAND test_autopin)
set_tests_properties(unit_autopin PROPERTIES LABELS "unit;sanitize" TIMEOUT 120
  ENVIRONMENT "${PL_STAGE_TEST_ENV}")
if(PAGELOCK_TSAN)
  pl_add_tsan_test(test_autopin_tsan unit/test_autopin.c)
endif()
