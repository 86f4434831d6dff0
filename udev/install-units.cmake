# Run by `cmake --install` (and cpack), not at configure time: configures
# 70-nvfence.rules and nvfenced@.service for the prefix of this install
# (CMAKE_INSTALL_PREFIX as the install sees it) and installs them. DESTDIR
# is applied by file(INSTALL). Inputs (set by udev/CMakeLists.txt):
# NVFENCE_SRC_DIR, NVFENCE_GEN_DIR, NVFENCE_UNIT_TEMPLATE and the
# NVFENCE_REL_* directories (relative to the prefix, or absolute).
set(_prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "(.)/+$" "\\1" _prefix "${_prefix}")

function(_nvf_full out rel)
  if(IS_ABSOLUTE "${rel}")
    set(${out} "${rel}" PARENT_SCOPE)
  elseif(_prefix STREQUAL "/")
    set(${out} "/${rel}" PARENT_SCOPE)
  else()
    set(${out} "${_prefix}/${rel}" PARENT_SCOPE)
  endif()
endfunction()

_nvf_full(NVFENCE_BINDIR "${NVFENCE_REL_BINDIR}")
_nvf_full(NVFENCE_SBINDIR "${NVFENCE_REL_SBINDIR}")
_nvf_full(NVFENCE_DOCDIR "${NVFENCE_REL_DOCDIR}")
_nvf_full(_rulesdir "${NVFENCE_REL_UDEVRULESDIR}")
_nvf_full(_unitdir "${NVFENCE_REL_SYSTEMDUNITDIR}")
# As GNUInstallDirs: a /usr (or /) install reads its configuration from /etc.
if(_prefix STREQUAL "/usr" OR _prefix STREQUAL "/")
  set(NVFENCE_SYSCONFDIR /etc)
else()
  _nvf_full(NVFENCE_SYSCONFDIR "${NVFENCE_REL_SYSCONFDIR}")
endif()

# One directory per prefix: installs with different prefixes never share
# (or rewrite) a generated file.
string(MAKE_C_IDENTIFIER "prefix${_prefix}" _tag)
set(_gen "${NVFENCE_GEN_DIR}/${_tag}")
configure_file("${NVFENCE_SRC_DIR}/70-nvfence.rules.in" "${_gen}/70-nvfence.rules" @ONLY)
file(INSTALL DESTINATION "${_rulesdir}" TYPE FILE FILES "${_gen}/70-nvfence.rules")
if(NVFENCE_UNIT_TEMPLATE)
  configure_file("${NVFENCE_UNIT_TEMPLATE}" "${_gen}/nvfenced@.service" @ONLY)
  file(INSTALL DESTINATION "${_unitdir}" TYPE FILE FILES "${_gen}/nvfenced@.service")
endif()
