# tests/layout/no_includes_from.cmake: fails, naming each file and line, when a source file under FOLDER
# (relative to ZHOST_SOURCE_DIR) includes a header whose path starts with FORBIDDEN.
# cmake -DZHOST_SOURCE_DIR=... -DFOLDER=host/engine -DFORBIDDEN=host/cli/ -P no_includes_from.cmake
file(GLOB_RECURSE sources LIST_DIRECTORIES false
     ${ZHOST_SOURCE_DIR}/${FOLDER}/*.cpp ${ZHOST_SOURCE_DIR}/${FOLDER}/*.hpp ${ZHOST_SOURCE_DIR}/${FOLDER}/*.h
     ${ZHOST_SOURCE_DIR}/${FOLDER}/*.c ${ZHOST_SOURCE_DIR}/${FOLDER}/*.cu)
if(NOT sources)
  message(FATAL_ERROR "no sources found under ${ZHOST_SOURCE_DIR}/${FOLDER}: the check would prove nothing")
endif()
set(offenders "")
foreach(source ${sources})
  file(STRINGS ${source} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]${FORBIDDEN}")
  foreach(line ${lines})
    file(RELATIVE_PATH relative ${ZHOST_SOURCE_DIR} ${source})
    string(APPEND offenders "\n  ${relative}: ${line}")
  endforeach()
endforeach()
if(offenders)
  message(FATAL_ERROR "${FOLDER} must not include headers from ${FORBIDDEN}; move what it needs out of "
                      "${FORBIDDEN} (e.g. into host/job/):${offenders}")
endif()
list(LENGTH sources count)
message(STATUS "${FOLDER}: ${count} files, none includes ${FORBIDDEN}")
