# bmas_add_test(NAME SOURCES a_test.cc ... DEPS lib ... [LABELS unit|integration])
# Builds one GoogleTest executable and registers each of its tests with ctest.
include(GoogleTest)
function(bmas_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${T_LABELS}" SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
    ENVIRONMENT "BMAS_BINARY=$<TARGET_FILE:bmas>"
    DISCOVERY_TIMEOUT 30)
endfunction()
