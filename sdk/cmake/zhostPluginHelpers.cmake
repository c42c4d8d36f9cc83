# zhost_add_plugin(NAME SOURCES ...): builds a zhost plugin as a MODULE library named zhost_<NAME>.so
# that exports only its entry symbols zhost_plugin_v<major> (hidden visibility, and a linker version
# script that also keeps the C++ standard library's and LibTorch's template instantiations local, so
# plugins never interpose on each other or on the host), links the SDK, and lands in
# ZHOST_PLUGIN_OUTPUT_DIR when that is set. Used in-tree and by out-of-tree plugins alike.
function(zhost_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIR" "SOURCES" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE zhost::sdk)
  set_target_properties(${name} PROPERTIES
    PREFIX "" OUTPUT_NAME "zhost_${name}"
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  if(ARG_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR})
  elseif(ZHOST_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ZHOST_PLUGIN_OUTPUT_DIR})
  endif()
  # Refuse undefined symbols at link time: a plugin must not depend on symbols from the host binary.
  target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  set(exports "${CMAKE_BINARY_DIR}/zhost_plugin_exports.map")
  if(NOT EXISTS "${exports}")
    file(WRITE "${exports}" "{\n  global: zhost_plugin_v*;\n  local: *;\n};\n")
  endif()
  target_link_options(${name} PRIVATE "LINKER:--version-script=${exports}")
endfunction()
