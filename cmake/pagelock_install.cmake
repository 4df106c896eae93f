# `cmake --install build --prefix P` and the Debian package (cpack -G DEB):
#   P/bin/pagelock                          the CLI
#   P/lib/pagelock/libpagelock.so           the shim
#   P/lib/pagelock/pagelock-demo            the demo for a real GPU
#   P/lib/pagelock/fakecuda/                the fake CUDA and its demo, for
#                                           `pagelock demo` without a GPU
#   P/share/doc/pagelock/                   README.md and docs/
#   P/share/man/man1/pagelock.1.gz          pagelock(1), written at build time
#   P/share/bash-completion/completions/pagelock   bash completion
# The CLI finds its files from its own path (reporter/cli/pkgdir.c), so the
# tree works under any prefix and from any working directory.
include(GNUInstallDirs)
set(PAGELOCK_MAINTAINER "pagelock maintainers <pagelock@localhost>" CACHE STRING
  "Maintainer of the Debian package (its control file and changelog)")
set(PAGELOCK_PKGLIBDIR ${CMAKE_INSTALL_LIBDIR}/pagelock)
file(RELATIVE_PATH PL_BIN_TO_PKGLIB /${CMAKE_INSTALL_BINDIR} /${PAGELOCK_PKGLIBDIR})
# Where the CLI looks for its files (reporter/cli/pkgdir.c).
target_compile_definitions(pagelock_cli PRIVATE PLR_PKGLIBDIR_REL="${PL_BIN_TO_PKGLIB}")
target_compile_definitions(plr_read PUBLIC PAGELOCK_VERSION="${PROJECT_VERSION}")

install(TARGETS pagelock_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS pagelock LIBRARY DESTINATION ${PAGELOCK_PKGLIBDIR})
if(TARGET pagelock-demo)
  install(TARGETS pagelock-demo RUNTIME DESTINATION ${PAGELOCK_PKGLIBDIR})
endif()
install(TARGETS pagelock-demo-fake RUNTIME DESTINATION ${PAGELOCK_PKGLIBDIR}/fakecuda)
# Only the runtime names (libcuda.so.1, libcudart.so.13, libcupti.so.13):
# nothing links against these, the demo finds them through LD_LIBRARY_PATH.
install(TARGETS fake_cuda fake_cudart fake_cupti
  LIBRARY DESTINATION ${PAGELOCK_PKGLIBDIR}/fakecuda NAMELINK_SKIP)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
  FILES_MATCHING PATTERN "*.md")

# pagelock(1), written by pl_mkman (reporter/CMakeLists.txt) from the same
# words as `pagelock --help` (reporter/cli/help.c, include/pagelock/options.def):
# the default build makes it with nothing but the compiler.  Its date is the
# build's, or SOURCE_DATE_EPOCH's for a reproducible package.
string(TIMESTAMP PL_MAN_DATE "%Y-%m-%d" UTC)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/pagelock.1 ${CMAKE_BINARY_DIR}/pagelock.1.gz
  COMMAND pl_mkman ${PROJECT_VERSION} ${PL_MAN_DATE} ${CMAKE_BINARY_DIR}/pagelock.1
  COMMAND gzip -n -9 -c ${CMAKE_BINARY_DIR}/pagelock.1 > ${CMAKE_BINARY_DIR}/pagelock.1.gz
  DEPENDS pl_mkman
  COMMENT "pagelock.1 from reporter/cli/help.c")
add_custom_target(pagelock_man ALL DEPENDS ${CMAKE_BINARY_DIR}/pagelock.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/pagelock.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# Bash completion, where bash-completion looks for it on demand.
install(FILES ${CMAKE_SOURCE_DIR}/completion/pagelock.bash
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME pagelock)

# Debian wants the changelog and the copyright beside the docs.  The
# changelog says only the version; the copyright file is the project's
# licence, installed once the project has one (docs/packaging.md).
string(TIMESTAMP PL_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${CMAKE_BINARY_DIR}/changelog
  "pagelock (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
  "  * pagelock ${PROJECT_VERSION}.\n\n"
  " -- ${PAGELOCK_MAINTAINER}  ${PL_DATE}\n")
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/changelog.gz
  COMMAND gzip -n -9 -c ${CMAKE_BINARY_DIR}/changelog > ${CMAKE_BINARY_DIR}/changelog.gz
  DEPENDS ${CMAKE_BINARY_DIR}/changelog)
add_custom_target(pagelock_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/changelog.gz)
install(FILES ${CMAKE_BINARY_DIR}/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
foreach(f LICENSE COPYING)
  if(EXISTS ${CMAKE_SOURCE_DIR}/${f})
    install(FILES ${CMAKE_SOURCE_DIR}/${f} DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)
    break()
  endif()
endforeach()

include(pagelock_package)
