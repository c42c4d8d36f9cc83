# cmake/ZhostPluginBoundary.cmake: Note [Plugins see the SDK only] enforced in the build.
#
# A zhost plugin (in tree or not) reaches the host only through the SDK: the C ABI headers, the C++
# helpers and the plugin kit. So no source or header of a plugin may include a file under host/, and no
# plugin target may link a library built from host/. zhost_check_plugin_boundary() fails the CMake
# configure step with the file, line and include when one does; zhost_check_plugin_links() does the same
# for a target's link libraries, transitively. Both run on plugins/ at configure time, and the test
# PluginBoundary.* runs the include check on a folder that breaks it, to show that it fails.

# Fails (FATAL_ERROR) when a C/C++ file under `dir` includes a header from host/.
function(zhost_check_plugin_boundary dir)
  file(GLOB_RECURSE plugin_files LIST_DIRECTORIES false
       "${dir}/*.c" "${dir}/*.cc" "${dir}/*.cpp" "${dir}/*.h" "${dir}/*.hpp")
  set(violations "")
  foreach(file ${plugin_files})
    file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]host/")
    foreach(line ${includes})
      string(STRIP "${line}" line)
      file(RELATIVE_PATH shown "${dir}" "${file}")
      string(APPEND violations "\n  ${shown}: ${line}")
    endforeach()
  endforeach()
  if(violations)
    message(FATAL_ERROR "a plugin includes the host's headers; plugins may use only the SDK (zhost/*.h, "
                        "zhost/cpp/*, zhost/kit/*): move what they need into sdk/ (Note [Plugins see the SDK "
                        "only] in cmake/ZhostPluginBoundary.cmake):${violations}")
  endif()
endfunction()

# The targets defined in `dir` and every folder below it.
function(zhost_targets_below dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    zhost_targets_below("${sub}" sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Fails when a target defined below `plugin_dir` links, directly or through other targets, a target
# defined below `host_dir`.
function(zhost_check_plugin_links plugin_dir host_dir)
  zhost_targets_below("${plugin_dir}" plugin_targets)
  zhost_targets_below("${host_dir}" host_targets)
  foreach(target ${plugin_targets})
    set(pending ${target})
    set(seen "")
    while(pending)
      list(POP_FRONT pending current)
      if(current IN_LIST seen OR NOT TARGET ${current})
        continue()
      endif()
      list(APPEND seen ${current})
      get_target_property(aliased ${current} ALIASED_TARGET)
      if(aliased)
        set(current ${aliased})
      endif()
      if(current IN_LIST host_targets)
        message(FATAL_ERROR "plugin target '${target}' links the host library '${current}'; plugins may link "
                            "only the SDK (zhost::sdk, zhost::kit) and third-party libraries (Note [Plugins "
                            "see the SDK only] in cmake/ZhostPluginBoundary.cmake)")
      endif()
      get_target_property(links ${current} LINK_LIBRARIES)
      get_target_property(interface_links ${current} INTERFACE_LINK_LIBRARIES)
      foreach(link ${links} ${interface_links})
        if(link AND NOT link MATCHES "NOTFOUND$")
          string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" link "${link}")
          string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
          list(APPEND pending ${link})
        endif()
      endforeach()
    endwhile()
  endforeach()
endfunction()

# Script mode (cmake -DZHOST_CHECK_DIR=... -P ZhostPluginBoundary.cmake): the include check alone.
if(CMAKE_SCRIPT_MODE_FILE AND ZHOST_CHECK_DIR)
  zhost_check_plugin_boundary("${ZHOST_CHECK_DIR}")
  message(STATUS "plugin boundary: no host include under ${ZHOST_CHECK_DIR}")
endif()
