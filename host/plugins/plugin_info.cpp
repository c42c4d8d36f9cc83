// host/plugins/plugin_info.cpp: names for descriptor enums, used in listings and messages.
#include "host/plugins/plugin_info.hpp"

namespace zhost {

const char* kind_name(zhost_capability_kind kind) {
  switch (kind) {
    case ZHOST_KIND_PARTITION:
      return "partition";
    case ZHOST_KIND_OFFLOAD:
      return "offload";
    case ZHOST_KIND_COLLECTIVE:
      return "collective";
  }
  return "unknown";
}

const char* config_type_name(zhost_config_type type) {
  switch (type) {
    case ZHOST_CONFIG_BOOL:
      return "bool";
    case ZHOST_CONFIG_INT:
      return "int";
    case ZHOST_CONFIG_FLOAT:
      return "float";
    case ZHOST_CONFIG_STRING:
      return "string";
  }
  return "unknown";
}

std::string capability_area(const std::string& capability) { return capability.substr(0, capability.find(':')); }

}  // namespace zhost
