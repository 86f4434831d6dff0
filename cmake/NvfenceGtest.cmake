# One GoogleTest binary's tests, registered the one way every test directory
# uses (label unit).
#
# A plain build registers each case as a CTest test of its own, found by
# running the binary with --gtest_list_tests after it is built.
#
# A sanitizer build (NVFENCE_SANITIZE) registers the binary as one CTest test,
# <target>.all (labels unit and gtest_process): every case in one process,
# its JUnit report in <build>/test-logs/gtest/<target>.xml. The same cases
# and assertions, without an ASan start-up for each of ~800 cases (~0.3 s of
# CPU each: the shadow memory and a 150 MB binary's relocations).
# tests/gtest_process_count.sh then checks that each report holds every case
# its binary lists, and prints the counts (scripts/test.sh's ASan phase).
#   nvf_gtest(TARGET [TEST_PREFIX prefix] [TIMEOUT seconds_per_case])
include(GoogleTest)
function(nvf_gtest target)
  cmake_parse_arguments(A "" "TEST_PREFIX;TIMEOUT" "" ${ARGN})
  if(A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "nvf_gtest(${target}): unknown arguments ${A_UNPARSED_ARGUMENTS}")
  endif()
  if(NVFENCE_SANITIZE)
    add_test(NAME ${target}.all
             COMMAND ${target} --gtest_output=xml:${CMAKE_BINARY_DIR}/test-logs/gtest/${target}.xml)
    set_tests_properties(${target}.all PROPERTIES LABELS "unit;gtest_process" TIMEOUT 900)
    return()
  endif()
  set(props LABELS unit)
  if(A_TIMEOUT)
    list(APPEND props TIMEOUT ${A_TIMEOUT})
  endif()
  gtest_discover_tests(${target} TEST_PREFIX "${A_TEST_PREFIX}" PROPERTIES ${props} DISCOVERY_TIMEOUT 60)
endfunction()
