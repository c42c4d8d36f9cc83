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
