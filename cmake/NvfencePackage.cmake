# `cpack -G DEB` in the build directory: the Debian packages of this build
# tree, one per install component (cmake/NvfenceInstall.cmake,
# cmake/NvfenceDebian.cmake), in the directory cpack runs in (or -B DIR):
#   libnvfence0     (runtime) the shared library libnvfence.so.0 (SONAME);
#                   shlibs and the ldconfig trigger.
#   libnvfence-dev  (dev) headers, the libnvfence.so link, nvfence.pc and
#                   the CMake package nvfence::nvfence. Depends on
#                   libnvfence0 of exactly this version and on liburing-dev,
#                   which nvfence.pc requires (Requires.private: liburing;
#                   pkg-config reads it even for a shared link).
#   nvfence         (nvfence) the CLI, nvfenced, fence_nvfence (in /usr/sbin,
#                   where Pacemaker looks for fence agents), the udev rules,
#                   nvfenced@.service, man pages, bash completion, the docs.
#                   fence_nvfence stays in this package: it is one small
#                   binary on the same library, and the udev links
#                   (/dev/nvfence/*) and nvfenced's watcher it works with
#                   are here too.
# Each carries the DEP-5 copyright and changelog.Debian.gz
# (packaging/deb/). Why cpack and not a debian/ directory: the packages are
# the build tree's own output, so the unit tests pack and lintian-check
# exactly what they tested, in seconds and without a second build
# (dpkg-buildpackage would rebuild everything from a clean source tree);
# what dh would add comes from CMake here: multiarch libdir and
# dpkg-buildflags hardening (NvfenceDebian.cmake), compressed man pages and
# changelog, stripped binaries, shlibs and dpkg-shlibdeps Depends.
#
# The packages install under NVFENCE_PACKAGE_PREFIX (default /usr, whatever
# the build's CMAKE_INSTALL_PREFIX: Debian packages never install into
# /usr/local, and only under /usr do udev and systemd read the rules and the
# unit from /usr/lib/udev/rules.d and /usr/lib/systemd/system; the rules and
# the unit are configured for that prefix at install time,
# udev/install-units.cmake). The maintainer scripts (packaging/deb/) reload
# udev and systemd, and stop the agents on removal.
set(CPACK_PACKAGE_NAME nvfence)
set(CPACK_PACKAGE_VENDOR "nvfence")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# Each package's Description: CPACK_DEBIAN_<COMPONENT>_DESCRIPTION, its first
# line the synopsis (cpack indents the rest and turns empty lines into " .").
set(NVFENCE_PACKAGE_PREFIX /usr CACHE PATH "install prefix of the .deb made by cpack -G DEB")
set(CPACK_PACKAGING_INSTALL_PREFIX ${NVFENCE_PACKAGE_PREFIX})
# cpack installs with DESTDIR and CMAKE_INSTALL_PREFIX = CPACK_INSTALL_PREFIX,
# so the rules and the unit are configured for the package's prefix.
set(CPACK_INSTALL_PREFIX ${NVFENCE_PACKAGE_PREFIX})
set(CPACK_SET_DESTDIR ON)
# Debug info stays in the build tree; the packages ship stripped binaries.
set(CPACK_STRIP_FILES TRUE)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev nvfence)
set(CPACK_COMPONENTS_GROUPING IGNORE)
set(NVFENCE_LIB_PACKAGE libnvfence${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${NVFENCE_DEB_RELEASE})
set(NVFENCE_DEB_VERSION ${PROJECT_VERSION}-${NVFENCE_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "nvfence maintainers <nvfence@users.noreply.github.com>")
set(CPACK_DEBIAN_PACKAGE_SOURCE nvfence)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

# libnvfence0
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${NVFENCE_LIB_PACKAGE})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "storage-level fencing with NVMe reservations - shared library
libnvfence lets a storage engine on hosts that share one NVMe namespace
(AWS EBS io2 Multi-Attach, NVMe-oF, dual-ported SSDs) hold the namespace
with an NVMe reservation and write through it, so that a host that was
preempted is refused by the device itself (Reservation Conflict).

This package contains the shared library (C++20 and C API).")
# ldconfig runs by the trigger; the empty postinst and postrm only keep
# cpack from generating ones that call ldconfig (lintian:
# maintscript-calls-ldconfig).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/deb/lib/triggers
    ${PROJECT_SOURCE_DIR}/packaging/deb/lib/postinst ${PROJECT_SOURCE_DIR}/packaging/deb/lib/postrm)

# libnvfence-dev
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libnvfence-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${NVFENCE_LIB_PACKAGE} (= ${NVFENCE_DEB_VERSION}), liburing-dev (>= 2.3)")
set(CPACK_DEBIAN_DEV_DESCRIPTION "storage-level fencing with NVMe reservations - development files
libnvfence lets a storage engine on hosts that share one NVMe namespace
hold the namespace with an NVMe reservation and write through it, so that
a host that was preempted is refused by the device itself.

This package contains the C++20 headers, the C API header nvfence/nvfence.h,
nvfence.pc for pkg-config and the CMake package (nvfence::nvfence).")

# nvfence
set(CPACK_DEBIAN_NVFENCE_PACKAGE_NAME nvfence)
set(CPACK_DEBIAN_NVFENCE_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_NVFENCE_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps finds libnvfence.so.0 in the build tree (it has no shlibs
# there: cpack passes --ignore-missing-info) and the Depends on libnvfence0
# is stated here, exactly this version, as the binaries are built with it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_LIBRARY_OUTPUT_DIRECTORY})
set(CPACK_DEBIAN_NVFENCE_PACKAGE_DEPENDS "${NVFENCE_LIB_PACKAGE} (= ${NVFENCE_DEB_VERSION})")
# The etcd elector dlopen()s libcurl.so.4 (src/elector/curl_api.hpp): no
# binary links it, so dpkg-shlibdeps does not see it and the dependency is
# stated here. A Depends, not a Recommends: `elector = etcd` is a supported
# configuration of the packaged nvfenced and nvfence-elect.
if(NVFENCE_ETCD)
  string(APPEND CPACK_DEBIAN_NVFENCE_PACKAGE_DEPENDS ", libcurl4")
endif()
# nvme-cli is what an operator cross-checks with; udev runs our rules.
set(CPACK_DEBIAN_NVFENCE_PACKAGE_RECOMMENDS "udev, nvme-cli")
set(CPACK_DEBIAN_NVFENCE_PACKAGE_SUGGESTS "pacemaker")
set(CPACK_DEBIAN_NVFENCE_DESCRIPTION "storage-level fencing with NVMe reservations - tools and agent
nvfence fences hosts that share one NVMe namespace (AWS EBS io2
Multi-Attach, NVMe-oF, dual-ported SSDs) with NVMe reservations: a host
that was preempted is refused by the device itself (Reservation
Conflict), whatever it believes.

This package contains the nvfence command (the failover command
nvfence preempt), the nvfenced host agent with its udev rules and
systemd unit template, and fence_nvfence, a fence agent for Pacemaker.")
# The scripts are debian/'s too: their #DEBHELPER# line (dh's snippets) is
# dropped from the copies cpack ships (lintian:
# maintainer-script-has-unexpanded-debhelper-token).
set(CPACK_DEBIAN_NVFENCE_PACKAGE_CONTROL_EXTRA "")
foreach(script IN ITEMS postinst prerm postrm)
  file(READ ${PROJECT_SOURCE_DIR}/packaging/deb/${script} _nvf_script)
  string(REPLACE "#DEBHELPER#\n" "" _nvf_script "${_nvf_script}")
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/deb-scripts/${script} "${_nvf_script}")
  file(CHMOD ${CMAKE_CURRENT_BINARY_DIR}/deb-scripts/${script}
       PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  list(APPEND CPACK_DEBIAN_NVFENCE_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_BINARY_DIR}/deb-scripts/${script})
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${PROJECT_SOURCE_DIR}/packaging/deb/postinst ${PROJECT_SOURCE_DIR}/packaging/deb/prerm
             ${PROJECT_SOURCE_DIR}/packaging/deb/postrm)
include(CPack)
