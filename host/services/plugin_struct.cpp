// host/services/plugin_struct.cpp: the refusal of a plugin-written struct below its minimum size.
#include "host/services/plugin_struct.hpp"

#include <fmt/format.h>

#include "host/services/host_services.hpp"

namespace zhost {

std::optional<std::string> plugin_struct_problem(const void* ptr, size_t struct_size, size_t min_size,
                                                 const char* type) {
  if (ptr == nullptr) return fmt::format("no {} (NULL where the ABI requires one)", type);
  if (struct_size >= min_size) return std::nullopt;
  return fmt::format(
      "{} has struct_size {}, below its minimum of {} bytes (its size in the zhost ABI minor that introduced "
      "it): the plugin was built against headers older than any this host supports, or the struct is corrupt "
      "(struct_size not set); rebuild the plugin against the zhost SDK {}.x",
      type, struct_size, min_size, ZHOST_ABI_MAJOR);
}

zhost_status* refuse_plugin_struct_status(const char* call, const std::string& problem) {
  return HostServices::make_status(ZHOST_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", call, problem));
}

}  // namespace zhost
