# Unit tests of the trace reader / report library (pl_reader); include()d
# from tests/CMakeLists.txt inside if(PAGELOCK_UNIT_TESTS), which has found
# PAGELOCK_CMOCKA and PAGELOCK_CMOCKA_INCLUDE.

# The reader, the aggregation, the call-site choice and the writers, one
# feature a file (unit/reader_fixture.c), each its own program and ctest.
foreach(t report damage checksum routes)
  add_executable(test_reader_${t} ${CMAKE_CURRENT_LIST_DIR}/test_reader_${t}.c
    ${CMAKE_CURRENT_LIST_DIR}/reader_fixture.c)
  target_include_directories(test_reader_${t} PRIVATE
    ${PAGELOCK_CMOCKA_INCLUDE} ${CMAKE_CURRENT_LIST_DIR}/../cli)
  target_link_libraries(test_reader_${t} PRIVATE pl_reader ${PAGELOCK_CMOCKA})
  add_test(NAME unit_reader_${t} COMMAND test_reader_${t})
  set_tests_properties(unit_reader_${t} PROPERTIES LABELS "unit;sanitize")
endforeach()

# The GPU (CUPTI) side: reader validation of version-2 records, the join,
# brute-force checks of every interval measure, verdicts and output.
add_executable(test_gpu_analysis ${CMAKE_CURRENT_LIST_DIR}/test_gpu_analysis.c)
target_include_directories(test_gpu_analysis PRIVATE
  ${PAGELOCK_CMOCKA_INCLUDE} ${CMAKE_CURRENT_LIST_DIR}/../cli)
target_link_libraries(test_gpu_analysis PRIVATE pl_reader ${PAGELOCK_CMOCKA})
add_test(NAME unit_gpu_analysis COMMAND test_gpu_analysis)
set_tests_properties(unit_gpu_analysis PROPERTIES LABELS "unit;sanitize" TIMEOUT 300)

# Python sites: PYCODE/PYSTACK validation and the tables they key.
add_executable(test_pysite ${CMAKE_CURRENT_LIST_DIR}/test_pysite.c)
target_include_directories(test_pysite PRIVATE
  ${PAGELOCK_CMOCKA_INCLUDE} ${CMAKE_CURRENT_LIST_DIR}/../cli)
target_link_libraries(test_pysite PRIVATE pl_reader ${PAGELOCK_CMOCKA})
add_test(NAME unit_pysite COMMAND test_pysite)
set_tests_properties(unit_pysite PROPERTIES LABELS "unit;sanitize")
