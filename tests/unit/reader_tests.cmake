# Unit tests of the trace reader / report library (pl_reader); include()d
# from tests/CMakeLists.txt inside if(PAGELOCK_UNIT_TESTS), which has found
# PAGELOCK_CMOCKA and PAGELOCK_CMOCKA_INCLUDE.
add_executable(test_reader ${CMAKE_CURRENT_LIST_DIR}/test_reader.c)
target_include_directories(test_reader PRIVATE
  ${PAGELOCK_CMOCKA_INCLUDE} ${CMAKE_CURRENT_LIST_DIR}/../cli)
target_link_libraries(test_reader PRIVATE pl_reader ${PAGELOCK_CMOCKA})
add_test(NAME unit_reader COMMAND test_reader)
set_tests_properties(unit_reader PROPERTIES LABELS "unit;sanitize")
