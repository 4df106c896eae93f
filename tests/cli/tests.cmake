# CLI tests of the pagelock executable; include()d from tests/CMakeLists.txt.
# mktrace writes synthetic traces; run.sh holds the cases.
add_executable(pl_mktrace ${CMAKE_CURRENT_LIST_DIR}/mktrace.c)
target_include_directories(pl_mktrace PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/../../shim)

set(PL_CLI_CASES usage version exit_status signal not_found not_executable
    bad_mode no_program unwritable_output report_missing report_not_trace
    report_empty report_short_header report_future_version report_truncated
    report_corrupt_size report_no_end report_good report_json report_format
    report_many_files report_million run_no_trace run_manifest demo_no_shim
    demo)
foreach(c ${PL_CLI_CASES})
  add_test(NAME cli_${c}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/run.sh ${CMAKE_BINARY_DIR} ${c})
  # 77: the case needs something this build lacks (demo, shim)
  set_tests_properties(cli_${c} PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77)
endforeach()
