# bmas_add_test(NAME SOURCES a_test.cc ... DEPS lib ... [LABELS unit|integration])
# Builds one GoogleTest executable and registers each of its tests with ctest.
include(GoogleTest)

# bmas_test_code(TARGET): test code compiles without optimisation, whatever the build type. The
# tests spend their time in the (optimised) libraries and in waiting on daemons, and an -O2
# GoogleTest file takes about 2.5 times as long to compile as an -O0 one: in CI's plain build
# the tests were a third of the compile time. (The last -O on the command line wins.)
function(bmas_test_code target)
  target_compile_options(${target} PRIVATE -O0)
endfunction()

function(bmas_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  bmas_test_code(${name})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${T_LABELS}" SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
    ENVIRONMENT "BMAS_BINARY=$<TARGET_FILE:bmas>"
    DISCOVERY_TIMEOUT 30)
endfunction()
