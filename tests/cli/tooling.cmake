# pagelock as a tool (tests/cli/tooling.sh): installed into a temporary
# prefix, packaged and unpacked, the demo's choice of CUDA, doctor,
# --version, scripts/setup over a fake apt-get, README's commands.
foreach(c install package demo_choice demo_output_env version doctor setup readme)
  add_test(NAME tool_${c} COMMAND ${CMAKE_CURRENT_LIST_DIR}/tooling.sh ${CMAKE_BINARY_DIR} ${c})
  set_tests_properties(tool_${c} PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77 TIMEOUT 120)
endforeach()
# Both write into the build tree's install bookkeeping (install_manifest.txt,
# CPack's staging): one at a time.
set_tests_properties(tool_install tool_package PROPERTIES RESOURCE_LOCK pagelock_install)
