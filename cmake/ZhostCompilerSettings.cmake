# Compiler settings shared by every zhost target: warnings, ccache, visibility.
find_program(ZHOST_CCACHE ccache)
if(ZHOST_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${ZHOST_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${ZHOST_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${ZHOST_CCACHE})
endif()

add_library(zhost_warnings INTERFACE)
target_compile_options(zhost_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter>
  $<$<AND:$<BOOL:${ZHOST_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>)

# Plugins export only their entry symbol.
set(CMAKE_CXX_VISIBILITY_PRESET hidden)
set(CMAKE_C_VISIBILITY_PRESET hidden)
set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)

# Debug information: line tables only by default (-g1): backtraces and profilers keep file:line, and a
# fresh build takes about a third less time than with full -g (LibTorch's headers make full debug
# information large). ZHOST_DEBUG_INFO=full restores -g for stepping through code in a debugger.
set(ZHOST_DEBUG_INFO "lines" CACHE STRING "Debug information in RelWithDebInfo/Debug builds: lines (-g1) or full (-g)")
set_property(CACHE ZHOST_DEBUG_INFO PROPERTY STRINGS lines full)
if(NOT ZHOST_DEBUG_INFO MATCHES "^(lines|full)$")
  message(FATAL_ERROR "ZHOST_DEBUG_INFO = '${ZHOST_DEBUG_INFO}' is not one of: lines, full")
endif()
if(ZHOST_DEBUG_INFO STREQUAL "lines")
  add_compile_options($<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<CONFIG:RelWithDebInfo,Debug>>:-g1>)
endif()
