# What `cmake --install` lays out for engines that embed libnvfence:
#   <libdir>/libnvfence.so.N (SONAME) or libnvfence.a (NVFENCE_STATIC)
#   <includedir>/nvfence/*.hpp and nvfence/nvfence.h (the C API)
#   <libdir>/cmake/nvfence/  find_package(nvfence) -> nvfence::nvfence
#   <libdir>/pkgconfig/nvfence.pc
#   <docdir>/ (the unit's Documentation=), man pages, bash completion
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
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")
foreach(page IN ITEMS nvfence.8 nvfenced.8 nvfenced.conf.5 fence_nvfence.8)
  if(EXISTS ${PROJECT_SOURCE_DIR}/man/${page})
    string(REGEX MATCH "[0-9]$" section ${page})
    install(FILES man/${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endif()
endforeach()
install(FILES completion/nvfence.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME nvfence)
