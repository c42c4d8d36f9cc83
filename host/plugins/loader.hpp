// host/plugins/loader.hpp: loads one plugin file and negotiates with it.
//
// Refuses, each with one error line naming the file and the cause: files that are world-writable or not
// owned by the user or root, files in a world-writable folder without the sticky bit, files that are not loadable
// shared objects, files without a zhost entry symbol, plugins of another ABI major, plugins needing a newer host minor,
// malformed descriptors or lifecycle tables, and plugins that refuse negotiation themselves. Loaded libraries are never
// unloaded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "host/plugins/plugin_info.hpp"
#include "host/services/host_services.hpp"

namespace zhost {

// A plugin compiled into the zhost executable (the host's own stage 0). It is negotiated and validated
// like a plugin file; its path reads "<built-in>".
struct BuiltinPlugin {
  std::string name;
  zhost_plugin_entry_v1_fn entry;
};

// Called once at start-up by the parts of the host that carry built-in plugins.
void register_builtin_plugin(const std::string& name, zhost_plugin_entry_v1_fn entry);
const std::vector<BuiltinPlugin>& builtin_plugins();

class PluginLoader {
 public:
  explicit PluginLoader(const HostServices& services) : services_(services) {}
  // Throws UsageError("plugin FILE: cause").
  LoadedPlugin load(const std::filesystem::path& file) const;
  LoadedPlugin load_builtin(const BuiltinPlugin& builtin) const;

 private:
  LoadedPlugin negotiate(zhost_plugin_entry_v1_fn entry, const std::filesystem::path& where) const;

  const HostServices& services_;
};

// Checks ownership and permissions; throws UsageError when the file must not be loaded.
void check_plugin_file_is_trusted(const std::filesystem::path& file);

}  // namespace zhost
