# `cpack -G DEB` in the build directory: one nvfence package with the
# library, headers, CMake/pkg-config files, tools, udev rules, unit, docs and
# man pages, exactly what `cmake --install` lays out, under the package's
# prefix NVFENCE_PACKAGE_PREFIX (default /usr, whatever the build's
# CMAKE_INSTALL_PREFIX: Debian packages never install into /usr/local, and
# only under /usr do udev and systemd read the rules and the unit from
# /usr/lib/udev/rules.d and /usr/lib/systemd/system; the rules and the unit
# are configured for that prefix at install time, udev/install-units.cmake).
# Depends come from dpkg-shlibdeps; the maintainer scripts (packaging/deb/)
# reload udev and systemd, and stop the agents on removal.
set(CPACK_PACKAGE_NAME nvfence)
set(CPACK_PACKAGE_VENDOR "nvfence")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "storage-level fencing with NVMe reservations")
set(CPACK_PACKAGE_DESCRIPTION "libnvfence (C++20 and C API), the nvfence CLI, the nvfenced host agent,
 udev rules and the nvfenced@.service template: a host that was preempted is
 refused by the shared NVMe namespace itself (Reservation Conflict).")
set(NVFENCE_PACKAGE_PREFIX /usr CACHE PATH "install prefix of the .deb made by cpack -G DEB")
set(CPACK_PACKAGING_INSTALL_PREFIX ${NVFENCE_PACKAGE_PREFIX})
# cpack installs with DESTDIR and CMAKE_INSTALL_PREFIX = CPACK_INSTALL_PREFIX,
# so the rules and the unit are configured for the package's prefix.
set(CPACK_INSTALL_PREFIX ${NVFENCE_PACKAGE_PREFIX})
set(CPACK_SET_DESTDIR ON)
# Debug info stays in the build tree; the package ships stripped binaries.
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "nvfence maintainers <root@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# nvme-cli is what an operator cross-checks with; udev runs our rules.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "udev, nvme-cli")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/deb/postinst ${PROJECT_SOURCE_DIR}/packaging/deb/prerm
    ${PROJECT_SOURCE_DIR}/packaging/deb/postrm
    ${PROJECT_SOURCE_DIR}/packaging/deb/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
