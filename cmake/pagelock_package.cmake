# `cpack -G DEB` (run in the build directory): a Debian package of the
# installed tree (cmake/pagelock_install.cmake) under /usr.  Depends comes
# from dpkg-shlibdeps over the package's ELF files; the fake CUDA's
# libraries are private (/usr/lib/pagelock/fakecuda), so they satisfy the
# fake demo's own needs without a dependency.  The real GPU's libcuda.so.1
# is never a dependency: the shim and the demo find it at run time, from
# whichever driver install the machine has.  docs/packaging.md explains
# what lintian still says.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pagelock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# PAGELOCK_MAINTAINER (cmake/pagelock_install.cmake): give the real one
# at configure time; lintian calls the default bogus (docs/packaging.md).
set(CPACK_PACKAGE_CONTACT "${PAGELOCK_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "find and fix pageable host-device CUDA copies")
set(CPACK_PACKAGE_DESCRIPTION
  "pagelock preloads a shim into an unmodified CUDA program, records every\n"
  "host<->device copy with the kind of host memory it used, and reports the\n"
  "copies that pageable memory made slow or synchronous. It can also stage\n"
  "such copies through pinned memory, or page-lock their buffers in place.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
  .${CPACK_PACKAGING_INSTALL_PREFIX}/${PAGELOCK_PKGLIBDIR}/fakecuda)
# addr2line names the call sites in reports (binutils); without it reports
# show module+offset.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS binutils)
set(CPACK_STRIP_FILES ON)
include(CPack)
