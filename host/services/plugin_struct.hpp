// host/services/plugin_struct.hpp: the one check the host makes before it reads a struct a plugin wrote
// (a descriptor, a table, call arguments): the struct's struct_size covers at least its minimum, the size it
// had in the minor that introduced it (ZHOST_<NAME>_MIN_SIZE). Fields appended later are read only under
// ZHOST_HAS_FIELD and count as absent when the plugin's struct ends before them. The rule is written down
// in docs/abi.md, "Versioning rule".
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "host/core/error.hpp"
#include "zhost/core.h"

namespace zhost {

// Why a plugin-written `type` at `ptr` whose struct_size is `struct_size` cannot be read, in one line, or
// nothing when it can (ptr is not NULL and struct_size >= min_size).
std::optional<std::string> plugin_struct_problem(const void* ptr, size_t struct_size, size_t min_size,
                                                 const char* type);

// Returns *ptr, or throws UsageError "<where>: <problem>" (host code reading plugin output).
template <typename T>
const T& accept_plugin_struct(const T* ptr, size_t min_size, const char* type, const std::string& where) {
  if (auto problem = plugin_struct_problem(ptr, ptr ? ptr->struct_size : 0, min_size, type))
    fail_usage("{}: {}", where, *problem);
  return *ptr;
}

// The same check for a host service called by a plugin: NULL when `ptr` may be read, else a
// ZHOST_ERR_INVALID_ARGUMENT status "<call>: <problem>" (nothing throws across the C ABI).
zhost_status* refuse_plugin_struct_status(const char* call, const std::string& problem);
template <typename T>
zhost_status* check_plugin_struct(const T* ptr, size_t min_size, const char* type, const char* call) {
  if (auto problem = plugin_struct_problem(ptr, ptr ? ptr->struct_size : 0, min_size, type))
    return refuse_plugin_struct_status(call, *problem);
  return nullptr;
}

}  // namespace zhost
