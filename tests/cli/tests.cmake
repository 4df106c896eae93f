# CLI tests of the pagelock executable; include()d from tests/CMakeLists.txt.
# mktrace writes synthetic traces; run.sh holds the cases.
add_executable(pl_mktrace ${CMAKE_CURRENT_LIST_DIR}/mktrace.c)
target_include_directories(pl_mktrace PRIVATE
  ${PAGELOCK_INCLUDE})

# docs/usage.md's configuration table, written from include/pagelock/options.def
# (cli_help_options compares the two).
# One description of the options (reporter/cli/optdoc.c) for both.
add_executable(pl_optdump ${CMAKE_CURRENT_LIST_DIR}/optdump.c
  ${CMAKE_SOURCE_DIR}/reporter/cli/optdoc.c)
target_include_directories(pl_optdump PRIVATE ${PAGELOCK_INCLUDE} ${CMAKE_SOURCE_DIR}/reporter/cli)

set(PL_CLI_CASES usage version exit_status signal not_found not_executable
    bad_mode no_program unwritable_output report_missing report_not_trace
    report_empty report_short_header report_future_version report_truncated
    report_corrupt_size report_no_end report_good report_json report_json_bytes report_format
    report_many_files report_million run_no_trace run_manifest demo_no_shim
    demo gpu_made_sync gpu_sampled gpu_same_stream gpu_one_engine gpu_idle gpu_busy
    gpu_staged gpu_v1 gpu_ranks report_dir help_options mode_env omp_spin output_ctl output_full
    run_lost_trace run_preload_order signal_terminal not_regular report_routes
    report_escaped_paths report_d2d_peer report_copy_runs command_help getopt gate_report gate_run
    man_page completion report_wrap)
foreach(c ${PL_CLI_CASES})
  add_test(NAME cli_${c}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/run.sh ${CMAKE_BINARY_DIR} ${c})
  # 77: the case needs something this build lacks (demo, shim)
  set_tests_properties(cli_${c} PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77)
endforeach()

# Views (html, chrome) and compare, over version-2 traces with GPU records.
add_executable(pl_mkgputrace ${CMAKE_CURRENT_LIST_DIR}/mkgputrace.c)
target_include_directories(pl_mkgputrace PRIVATE ${PAGELOCK_INCLUDE})
foreach(c chrome_basic chrome_staged chrome_multi chrome_no_gpu chrome_sampled html_basic
    html_stdout_multi html_no_gpu html_large html_sampled report_output_errors compare_text
    compare_json compare_sampled compare_runs compare_errors report_bad_header report_damaged
    report_stop_flags report_escapes html_routes compare_routes gpu_bound chrome_copy_runs
    compare_copy_runs chrome_run_lanes compare_verdict html_readable call_site_cost)
  add_test(NAME cli_${c} COMMAND ${CMAKE_CURRENT_LIST_DIR}/views.sh ${CMAKE_BINARY_DIR} ${c})
  # sanitize: run again in the ASan+UBSan build, the writers on real inputs
  set_tests_properties(cli_${c} PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77)
endforeach()
add_test(NAME cli_html_render COMMAND ${CMAKE_CURRENT_LIST_DIR}/html_render.sh ${CMAKE_BINARY_DIR})
set_tests_properties(cli_html_render PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77 TIMEOUT 180)

# Speed and memory of a report over one million COPY + GPU records: the
# numbers are printed (ctest -V / --output-on-failure), not judged beyond
# the generous timeout.
add_test(NAME perf_report_big_gpu
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/run.sh ${CMAKE_BINARY_DIR} report_big_gpu)
set_tests_properties(perf_report_big_gpu PROPERTIES LABELS "perf" TIMEOUT 60)

# Every writer over a million records that repeat correlation ids,
# devices, threads and names: each format within 20 s (times printed).
add_test(NAME perf_hostile_formats
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/views.sh ${CMAKE_BINARY_DIR} hostile_formats)
set_tests_properties(perf_hostile_formats PROPERTIES LABELS "perf" TIMEOUT 200
  SKIP_RETURN_CODE 77)

# Golden reports: every tests/golden/*.trace with a *.expected.txt (and
# optionally *.expected.json) must report exactly that.
add_test(NAME golden
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/../golden/run.sh ${CMAKE_BINARY_DIR})
set_tests_properties(golden PROPERTIES LABELS "golden" SKIP_RETURN_CODE 77)
