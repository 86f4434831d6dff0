# The build tree is the packaged build: `cpack -G DEB` packs what this tree
# built (cmake/NvfencePackage.cmake). So on Debian every build gets what a
# Debian package needs, before GNUInstallDirs and any target:
#   - multiarch libdir: lib/<triplet> (lib/x86_64-linux-gnu), whatever the
#     prefix (GNUInstallDirs picks it only for a /usr prefix, and the
#     package's prefix is /usr while the build's is /usr/local). Debian's
#     ld.so, pkg-config and find_package search lib/<triplet> under /usr and
#     /usr/local alike. -DNVFENCE_MULTIARCH_LIBDIR=OFF to choose
#     CMAKE_INSTALL_LIBDIR yourself.
#   - hardening flags from dpkg-buildflags (DEB_BUILD_MAINT_OPTIONS
#     hardening=+all: stack protector, fortify, format security, relro and
#     bindnow; PIE is gcc's default on Debian). The optimisation and debug
#     flags stay the build type's. Off under the sanitizers and the fuzzers
#     (_FORTIFY_SOURCE and ASan do not mix). -DNVFENCE_DPKG_BUILDFLAGS=OFF to
#     build without them.
#   - every install() without a COMPONENT belongs to the `nvfence` package
#     (tools, units, rules, man pages); the library's files name theirs
#     (runtime: libnvfence0, dev: libnvfence-dev; cmake/NvfenceInstall.cmake).
set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME nvfence)

set(_nvf_debian OFF)
if(EXISTS /etc/debian_version AND CMAKE_LIBRARY_ARCHITECTURE)
  set(_nvf_debian ON)
endif()

option(NVFENCE_MULTIARCH_LIBDIR "Debian: install libraries in lib/<multiarch triplet>" ${_nvf_debian})
# Not when it already is (dh_auto_configure passes it untyped on the command
# line: a forced PATH-typed set would turn it absolute, under the build dir).
if(NVFENCE_MULTIARCH_LIBDIR AND CMAKE_LIBRARY_ARCHITECTURE
   AND NOT CMAKE_INSTALL_LIBDIR STREQUAL "lib/${CMAKE_LIBRARY_ARCHITECTURE}")
  set(CMAKE_INSTALL_LIBDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}" CACHE PATH
      "Object code libraries (NVFENCE_MULTIARCH_LIBDIR: lib/<triplet>)" FORCE)
endif()

set(_nvf_flags_default OFF)
find_program(NVFENCE_DPKG_BUILDFLAGS_EXE dpkg-buildflags)
if(NVFENCE_DPKG_BUILDFLAGS_EXE AND NOT NVFENCE_SANITIZE AND NOT NVFENCE_FUZZ)
  set(_nvf_flags_default ON)
endif()
option(NVFENCE_DPKG_BUILDFLAGS "Build with the hardening flags of dpkg-buildflags (hardening=+all)" ${_nvf_flags_default})
if(NVFENCE_DPKG_BUILDFLAGS)
  if(NOT NVFENCE_DPKG_BUILDFLAGS_EXE)
    message(FATAL_ERROR "NVFENCE_DPKG_BUILDFLAGS=ON needs dpkg-buildflags (apt-get install dpkg-dev)")
  endif()
  if(NVFENCE_SANITIZE OR NVFENCE_FUZZ)
    message(FATAL_ERROR "NVFENCE_DPKG_BUILDFLAGS=ON does not mix with NVFENCE_SANITIZE or NVFENCE_FUZZ")
  endif()
  set(NVFENCE_HARDENING_FLAGS "")
  foreach(kind IN ITEMS CPPFLAGS CXXFLAGS CFLAGS LDFLAGS)
    execute_process(
      COMMAND ${CMAKE_COMMAND} -E env DEB_BUILD_MAINT_OPTIONS=hardening=+all
              ${NVFENCE_DPKG_BUILDFLAGS_EXE} --get ${kind}
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
      OUTPUT_VARIABLE _flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "dpkg-buildflags --get ${kind} failed (${_rc})")
    endif()
    separate_arguments(_flags UNIX_COMMAND "${_flags}")
    # Only the hardening: -O and -g are the build type's, and a file prefix
    # map would hide the sources from a debugger in the build tree.
    list(FILTER _flags EXCLUDE REGEX "^(-O.*|-g.*|-f(file|debug|macro)-prefix-map=.*)$")
    set(_nvf_${kind} ${_flags})
    list(APPEND NVFENCE_HARDENING_FLAGS ${_flags})
  endforeach()
  add_compile_options(${_nvf_CPPFLAGS})
  foreach(f IN LISTS _nvf_CXXFLAGS)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${f}>)
  endforeach()
  foreach(f IN LISTS _nvf_CFLAGS)
    add_compile_options($<$<COMPILE_LANGUAGE:C>:${f}>)
  endforeach()
  add_link_options(${_nvf_LDFLAGS})
  list(REMOVE_DUPLICATES NVFENCE_HARDENING_FLAGS)
  message(STATUS "dpkg-buildflags hardening: ${NVFENCE_HARDENING_FLAGS}")
endif()
