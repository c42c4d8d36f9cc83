// host/plugins/plugin_info.hpp: the host's C++ copy of what a plugin said about itself at negotiation
// (its descriptor), plus where it came from. Everything else in the host works from these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zhost/plugin.h"

namespace zhost {

struct ConfigKeyInfo {
  std::string key;  // dotted path, e.g. "zero.reduce_bucket_size"
  zhost_config_type type = ZHOST_CONFIG_STRING;
  std::optional<std::string> default_literal;  // TOML literal; nullopt = required
  std::string doc;
  std::optional<double> min_value, max_value;
  std::vector<std::string> choices;
};

struct PluginInfo {
  std::string name;
  std::string version;
  std::string summary;
  zhost_capability_kind kind = ZHOST_KIND_PARTITION;
  std::vector<std::string> provides;
  std::vector<std::string> requires_caps;
  std::vector<std::string> conflicts;
  std::vector<ConfigKeyInfo> config_keys;
  uint64_t flags = 0;
  std::vector<std::string> reads_keys;  // declared by the host or another plugin (Note [Each key declared once])
};

struct LoadedPlugin {
  std::filesystem::path path;
  PluginInfo info;
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;                 // minor of the SDK it was built with
  uint32_t min_host_minor = 0;            // oldest host minor it accepts
  const zhost_plugin_api* api = nullptr;  // static table inside the loaded library (never unloaded)
};

const char* kind_name(zhost_capability_kind kind);
const char* config_type_name(zhost_config_type type);
// "partition:stage2" -> "partition"
std::string capability_area(const std::string& capability);

}  // namespace zhost
