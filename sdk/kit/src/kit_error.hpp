// sdk/kit/src/kit_error.hpp (private to the kit): throwing sdk::PluginError with a kit::format message.
#pragma once

#include <string>
#include <utility>

#include "zhost/cpp/error.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::kit::detail {

// Throws sdk::PluginError(code, kit::format(pattern, args...)).
template <typename... Args>
[[noreturn]] void fail(zhost_status_code code, std::string_view pattern, Args&&... args) {
  throw sdk::PluginError(code, kit::format(pattern, std::forward<Args>(args)...));
}

// "a, b, c"
template <typename Strings>
std::string join(const Strings& items) {
  std::string joined;
  for (const auto& item : items) joined += (joined.empty() ? "" : ", ") + std::string(item);
  return joined;
}

}  // namespace zhost::kit::detail
