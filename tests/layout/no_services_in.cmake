# tests/layout/no_services_in.cmake: fails, naming each file and line, when a source file under FOLDER (relative
# to ZHOST_SOURCE_DIR) implements part of the host-services table (zhost/host.h), which lives in host/services/.
# A part is implemented where a file
#   - defines a function taking a zhost_host_context* first, the shape of the table's callbacks,
#   - defines an object of a table's type (zhost_host_services, zhost_collectives, zhost_param_services,
#     zhost_copy_services), as every implementation must to hand its callbacks over,
#   - installs per-job state or a pinned allocator behind the table (HostServices::set_job_state,
#     set_collectives, set_param_services, set_copy_services, set_pinned_allocator), or
#   - implements the key-value store behind kv_set/kv_get (derives from KvStore).
# Holding a pointer to a table and calling it (a client, as activation checkpointing is) is allowed, and so is
# anything a // comment says.
# cmake -DZHOST_SOURCE_DIR=... -DFOLDER=host/engine -P no_services_in.cmake
file(GLOB_RECURSE sources LIST_DIRECTORIES false
     ${ZHOST_SOURCE_DIR}/${FOLDER}/*.cpp ${ZHOST_SOURCE_DIR}/${FOLDER}/*.hpp ${ZHOST_SOURCE_DIR}/${FOLDER}/*.h
     ${ZHOST_SOURCE_DIR}/${FOLDER}/*.c ${ZHOST_SOURCE_DIR}/${FOLDER}/*.cu)
if(NOT sources)
  message(FATAL_ERROR "no sources found under ${ZHOST_SOURCE_DIR}/${FOLDER}: the check would prove nothing")
endif()
set(id "[A-Za-z_][A-Za-z0-9_]*")
set(patterns
    "\\([ \t]*zhost_host_context[ \t]*\\*[ \t]*${id}[ \t]*[,)]"
    "zhost_(host_services|collectives|param_services|copy_services)[ \t]+${id}"
    "set_(job_state|collectives|param_services|copy_services|pinned_allocator)[ \t]*\\("
    ":[ \t]*public[ \t]+(zhost::)?KvStore")
set(offenders "")
foreach(source ${sources})
  file(RELATIVE_PATH relative ${ZHOST_SOURCE_DIR} ${source})
  foreach(pattern ${patterns})
    file(STRINGS ${source} lines REGEX "${pattern}")
    foreach(line ${lines})
      string(REGEX REPLACE "//.*$" "" code "${line}")  # what a comment says implements nothing
      if(code MATCHES "${pattern}")
        string(STRIP "${line}" line)
        string(APPEND offenders "\n  ${relative}: ${line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(offenders)
  message(FATAL_ERROR "${FOLDER} must not implement host services; move the implementation to host/services/ "
                      "and use it from there:${offenders}")
endif()
list(LENGTH sources count)
message(STATUS "${FOLDER}: ${count} files, none implements part of the host-services table")
