# What `cmake --install` lays out for engines that embed libnvfence:
#   <libdir>/libnvfence.so.N (SONAME) or libnvfence.a (NVFENCE_STATIC)
#   <includedir>/nvfence/*.hpp and nvfence/nvfence.h (the C API)
#   <libdir>/cmake/nvfence/  find_package(nvfence) -> nvfence::nvfence
#   <libdir>/pkgconfig/nvfence.pc
#   <docdir>/ (the unit's Documentation=), man pages (gzip; man3 in the dev
#   component), bash completion
#   <datadir>/doc/<package>/copyright and changelog.Debian.gz per package
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# nvfence.h states the version for C callers; it must be this project's.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/nvfence/nvfence.h _nvf_ver REGEX "^#define NVF_VERSION_STRING ")
if(NOT _nvf_ver MATCHES "\"${PROJECT_VERSION}\"")
  message(FATAL_ERROR "include/nvfence/nvfence.h: NVF_VERSION_STRING (${_nvf_ver}) is not ${PROJECT_VERSION}")
endif()

install(TARGETS nvfence EXPORT nvfenceTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS nvfence_testing EXPORT nvfenceTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY include/nvfence DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

set(NVFENCE_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/nvfence)
install(EXPORT nvfenceTargets NAMESPACE nvfence:: DESTINATION ${NVFENCE_CMAKEDIR} COMPONENT dev)
configure_package_config_file(cmake/nvfenceConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/nvfenceConfig.cmake INSTALL_DESTINATION ${NVFENCE_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/nvfenceConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/nvfenceConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/nvfenceConfigVersion.cmake
  DESTINATION ${NVFENCE_CMAKEDIR} COMPONENT dev)

# nvfence.pc finds its prefix from where it lies (${pcfiledir}), so a tree
# installed with DESTDIR or --prefix works as well as /usr.
file(RELATIVE_PATH NVFENCE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" NVFENCE_PC_TO_PREFIX "${NVFENCE_PC_TO_PREFIX}")
configure_file(cmake/nvfence.pc.in ${CMAKE_CURRENT_BINARY_DIR}/nvfence.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/nvfence.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# Documentation: nvfenced@.service names man:nvfenced(8) and AGENT.md here.
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# Not the pages about building and installing from source (INSTALL.md: lintian's
# package-contains-upstream-installation-documentation) nor the project's
# measurement log (LOG.md): they serve the source tree, not the installed system.
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md"
        PATTERN "INSTALL.md" EXCLUDE PATTERN "LOG.md" EXCLUDE)

# Man pages and the Debian changelog are installed compressed as Debian
# ships them (gzip -9n: no name, no timestamp, so the bytes are
# reproducible); man(1) reads them as they are.
set(_nvf_gz_dir ${CMAKE_CURRENT_BINARY_DIR}/gz)
set(_nvf_gz_outputs "")
function(_nvf_gzip src out)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_nvf_gz_dir}/man/man3
    COMMAND sh -c "gzip -9n -c \"$1\" > \"$2\"" _ ${src} ${out}
    DEPENDS ${src} VERBATIM)
  set(_nvf_gz_outputs ${_nvf_gz_outputs} ${out} PARENT_SCOPE)
endfunction()
foreach(page IN ITEMS nvfence.8 nvfenced.8 nvfenced.conf.5 fence_nvfence.8)
  if(EXISTS ${PROJECT_SOURCE_DIR}/man/${page})
    string(REGEX MATCH "[0-9]$" section ${page})
    _nvf_gzip(${PROJECT_SOURCE_DIR}/man/${page} ${_nvf_gz_dir}/man/${page}.gz)
    install(FILES ${_nvf_gz_dir}/man/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endif()
endforeach()
# The API reference (man/man3: a page per C function or family, .so links
# for the other names, a page per public C++ class, libnvfence(3)) is for
# programmers: the -dev package ships it.
file(GLOB _nvf_man3 RELATIVE ${PROJECT_SOURCE_DIR}/man/man3 CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/man/man3/*.3)
foreach(page IN LISTS _nvf_man3)
  _nvf_gzip(${PROJECT_SOURCE_DIR}/man/man3/${page} ${_nvf_gz_dir}/man/man3/${page}.gz)
  install(FILES ${_nvf_gz_dir}/man/man3/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man3 COMPONENT dev)
endforeach()
install(FILES completion/nvfence.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME nvfence)

# Every package (cpack component, cmake/NvfencePackage.cmake) carries the
# machine-readable copyright (DEP-5) and the Debian changelog in
# share/doc/<package>/, as Debian policy 12.5 and 12.7 ask; a plain
# `cmake --install` gets them too (MIT asks for the notice with every copy).
# The changelog's newest entry must be this version.
file(STRINGS ${PROJECT_SOURCE_DIR}/packaging/deb/changelog _nvf_chl LIMIT_COUNT 1)
set(NVFENCE_DEB_RELEASE 1)
if(NOT _nvf_chl MATCHES "^nvfence \\(${PROJECT_VERSION}-${NVFENCE_DEB_RELEASE}\\) ")
  message(FATAL_ERROR "packaging/deb/changelog: newest entry '${_nvf_chl}' is not ${PROJECT_VERSION}-${NVFENCE_DEB_RELEASE}")
endif()
_nvf_gzip(${PROJECT_SOURCE_DIR}/packaging/deb/changelog ${_nvf_gz_dir}/changelog.Debian.gz)
# The DEP-5 Format URI is taken from this machine's own dpkg copyright
# (always DEP-5 on Debian) rather than written into the repository.
set(NVFENCE_DEP5_FORMAT "")
if(EXISTS /usr/share/doc/dpkg/copyright)
  file(STRINGS /usr/share/doc/dpkg/copyright _nvf_fmt LIMIT_COUNT 1 REGEX "^Format: ")
  string(REGEX REPLACE "^Format: " "" NVFENCE_DEP5_FORMAT "${_nvf_fmt}")
endif()
if(NVFENCE_DEP5_FORMAT STREQUAL "")
  message(FATAL_ERROR "no DEP-5 Format line in /usr/share/doc/dpkg/copyright: cannot write the copyright file")
endif()
configure_file(${PROJECT_SOURCE_DIR}/packaging/deb/copyright.in ${_nvf_gz_dir}/copyright @ONLY)
add_custom_target(nvfence_gz_docs ALL DEPENDS ${_nvf_gz_outputs})
set(NVFENCE_DEB_PACKAGES "runtime:libnvfence${PROJECT_VERSION_MAJOR}" "dev:libnvfence-dev" "nvfence:nvfence")
foreach(comp_pkg IN LISTS NVFENCE_DEB_PACKAGES)
  string(REPLACE ":" ";" comp_pkg "${comp_pkg}")
  list(GET comp_pkg 0 comp)
  list(GET comp_pkg 1 pkg)
  install(FILES ${_nvf_gz_dir}/copyright ${_nvf_gz_dir}/changelog.Debian.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${pkg} COMPONENT ${comp})
  # lintian overrides, each with its reason (packaging/deb/lintian/).
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/deb/lintian/${pkg}
    DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides COMPONENT ${comp})
endforeach()
