# zhost_add_plugin(NAME SOURCES ...): builds a zhost plugin as a MODULE library named zhost_<NAME>.so
# that exports only its entry symbol (hidden visibility), links the SDK, and lands in
# ZHOST_PLUGIN_OUTPUT_DIR when that is set. Used in-tree and by out-of-tree plugins alike.
function(zhost_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIR" "SOURCES" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE zhost::sdk)
  set_target_properties(${name} PROPERTIES
    PREFIX "" OUTPUT_NAME "zhost_${name}"
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  if(ARG_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR})
  elseif(ZHOST_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ZHOST_PLUGIN_OUTPUT_DIR})
  endif()
  # Refuse undefined symbols at link time: a plugin must not depend on symbols from the host binary.
  target_link_options(${name} PRIVATE "LINKER:--no-undefined")
endfunction()
