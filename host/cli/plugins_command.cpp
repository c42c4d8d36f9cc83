// host/cli/plugins_command.cpp: `zhost plugins [--json]`: every plugin on the search path with its ABI,
// kind, capabilities and config keys; plugins that failed to load are reported one line each.
#include <spdlog/spdlog.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "host/cli/commands.hpp"
#include "host/core/error.hpp"
#include "host/core/text.hpp"

namespace zhost::cli {
namespace {

nlohmann::json key_json(const ConfigKeyInfo& key) {
  nlohmann::json j{{"key", key.key}, {"type", config_type_name(key.type)}, {"doc", key.doc}};
  j["default"] = key.default_literal ? nlohmann::json(*key.default_literal) : nlohmann::json(nullptr);
  if (key.min_value) j["min"] = *key.min_value;
  if (key.max_value) j["max"] = *key.max_value;
  if (!key.choices.empty()) j["choices"] = key.choices;
  return j;
}

nlohmann::json plugin_json(const LoadedPlugin& p) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& key : p.info.config_keys) keys.push_back(key_json(key));
  return {{"name", p.info.name},
          {"version", p.info.version},
          {"summary", p.info.summary},
          {"path", p.path.string()},
          {"abi", fmt::format("{}.{}", p.abi_major, p.abi_minor)},
          {"min_host_abi", fmt::format("{}.{}", p.abi_major, p.min_host_minor)},
          {"kind", kind_name(p.info.kind)},
          {"provides", p.info.provides},
          {"requires", p.info.requires_caps},
          {"conflicts", p.info.conflicts},
          {"hot_swappable", (p.info.flags & ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE) != 0},
          {"thread_safe", (p.info.flags & ZHOST_PLUGIN_FLAG_THREAD_SAFE) != 0},
          {"config_keys", keys},
          {"reads_keys", p.info.reads_keys}};
}

void print_text(const Discovery& discovery) {
  std::cout << "search path: ";
  std::vector<std::string> dirs;
  for (const auto& d : discovery.searched) dirs.push_back(d.string());
  std::cout << text::join(dirs, ":") << "\n";
  if (discovery.plugins.empty()) std::cout << "no plugins found\n";
  for (const auto& p : discovery.plugins) {
    std::cout << "\n"
              << p.info.name << " " << p.info.version << "  (" << kind_name(p.info.kind) << ", ABI " << p.abi_major
              << "." << p.abi_minor << ")"
              << ((p.info.flags & ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE) ? "  hot-swappable" : "") << "\n";
    if (!p.info.summary.empty()) std::cout << "  " << p.info.summary << "\n";
    std::cout << "  path:      " << p.path.string() << "\n";
    std::cout << "  provides:  " << text::join(p.info.provides) << "\n";
    if (!p.info.requires_caps.empty()) std::cout << "  requires:  " << text::join(p.info.requires_caps) << "\n";
    if (!p.info.conflicts.empty()) std::cout << "  conflicts: " << text::join(p.info.conflicts) << "\n";
    for (const auto& key : p.info.config_keys)
      std::cout << "  " << key.key << " : " << config_type_name(key.type) << " = "
                << key.default_literal.value_or("(required)") << "   # " << key.doc << "\n";
    if (!p.info.reads_keys.empty()) std::cout << "  reads:     " << text::join(p.info.reads_keys) << "\n";
  }
}

}  // namespace

int plugins_command(const PluginsOptions& options) {
  HostServices services;
  Discovery discovery = discover_plugins(plugin_search_path(options.plugin_dirs), PluginLoader(services));
  if (options.json) {
    nlohmann::json out{{"abi", fmt::format("{}.{}", ZHOST_ABI_MAJOR, ZHOST_ABI_MINOR)}};
    out["search_path"] = nlohmann::json::array();
    for (const auto& d : discovery.searched) out["search_path"].push_back(d.string());
    out["plugins"] = nlohmann::json::array();
    for (const auto& p : discovery.plugins) out["plugins"].push_back(plugin_json(p));
    out["failures"] = discovery.failures;
    std::cout << out.dump(2) << std::endl;
  } else {
    print_text(discovery);
  }
  for (const auto& line : discovery.shadowed) spdlog::warn("{}", line);
  for (const auto& line : discovery.failures) std::cerr << "zhost: error: " << line << "\n";
  return discovery.failures.empty() ? 0 : static_cast<int>(ExitCode::kUsage);
}

}  // namespace zhost::cli
