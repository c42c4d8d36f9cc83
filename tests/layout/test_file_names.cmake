# tests/layout/test_file_names.cmake: one naming pattern for test sources. A C++ file under tests/ that defines
# GoogleTest cases (TEST, TEST_P, TEST_F at the start of a line) is named NAME_test.cpp, and a NAME_test.cpp
# defines some; support files (fixtures, rank programs, plugins) take any other name.
# Usage: cmake -DZHOST_SOURCE_DIR=... -P test_file_names.cmake
file(GLOB_RECURSE sources RELATIVE "${ZHOST_SOURCE_DIR}" "${ZHOST_SOURCE_DIR}/tests/*.cpp")
set(wrong "")
foreach(source IN LISTS sources)
  file(STRINGS "${ZHOST_SOURCE_DIR}/${source}" cases REGEX "^(TEST|TEST_P|TEST_F)\\(")
  if(cases AND NOT source MATCHES "_test\\.cpp$")
    list(APPEND wrong "${source} defines tests: name it NAME_test.cpp")
  elseif(NOT cases AND source MATCHES "_test\\.cpp$")
    list(APPEND wrong "${source} defines no tests: only test files are named NAME_test.cpp")
  endif()
endforeach()
if(wrong)
  list(JOIN wrong "\n" text)
  message(FATAL_ERROR "${text}")
endif()
