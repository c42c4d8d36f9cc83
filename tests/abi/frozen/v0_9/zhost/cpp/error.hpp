// zhost/cpp/error.hpp: the one exception type of SDK-side C++ code (the C++ helpers, the plugin kit and
// plugins written with them). It carries the zhost_status_code it becomes when it reaches the C ABI:
// zhost::sdk::guard() (zhost/cpp/plugin.hpp) turns it into a status there, and nothing else crosses.
#pragma once

#include <stdexcept>
#include <string>

#include "zhost/core.h"

namespace zhost::sdk {

class PluginError : public std::runtime_error {
 public:
  PluginError(zhost_status_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  zhost_status_code code() const { return code_; }

 private:
  zhost_status_code code_;
};

}  // namespace zhost::sdk
