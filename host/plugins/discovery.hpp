// host/plugins/discovery.hpp: where plugins are looked for, and loading every plugin found there.
//
// Search path, in order: directories from the config (plugins.path), then ZHOST_PLUGIN_PATH (colon-
// separated), then the install directory next to the executable (<exe>/../lib/zhost/plugins). Plugin
// files are named zhost_<name>.so. When two files carry the same plugin name, the first one found wins
// and the other is reported as shadowed.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "host/plugins/loader.hpp"
#include "host/plugins/probe.hpp"

namespace zhost {

// Every folder in ZHOST_PLUGIN_PATH must exist, as --plugin-path's and plugins.path's must: UsageError naming
// the variable otherwise (a typo would silently leave its plugins out).
std::vector<std::filesystem::path> plugin_search_path(const std::vector<std::string>& config_dirs);

// Why `dir` cannot be searched for plugins ("does not exist", "is not a folder", ...), or nullopt.
std::optional<std::string> plugin_dir_problem(const std::filesystem::path& dir);

// The directory the zhost executable installs its plugins into (build tree or install prefix).
std::filesystem::path installed_plugin_dir();

struct Discovery {
  std::vector<std::filesystem::path> searched;  // directories, in order
  std::vector<LoadedPlugin> plugins;            // loaded and negotiated, in search order
  std::vector<std::string> failures;            // one line each: "plugin FILE: cause"
  std::vector<std::string> shadowed;            // one line each
};

// Each file is probed in a child process first (probe.hpp): one that crashes or hangs there is a failure
// line, and discovery goes on with the others.
Discovery discover_plugins(const std::vector<std::filesystem::path>& search_path, const PluginLoader& loader,
                           std::chrono::milliseconds probe_deadline = kPluginProbeDeadline);

// Throws UsageError naming the first failure (and how many more) when any plugin failed to load.
void require_no_failures(const Discovery& discovery);

}  // namespace zhost
