// host/plugins/instances.hpp: the live plugin instances of a job, created in dependency order and
// destroyed in reverse. Each instance gets its own host context (its name for logging, its config values).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/plugins/resolver.hpp"
#include "host/services/host_services.hpp"

namespace zhost {

struct PluginInstance {
  const LoadedPlugin* plugin = nullptr;
  zhost_host_context* ctx = nullptr;
  zhost_plugin_instance* instance = nullptr;
  uint32_t tier_role = 0;  // the one role it serves, or 0 (Note [One instance per storing role])
};

class PluginInstances {
 public:
  explicit PluginInstances(HostServices& services) : services_(services) {}
  ~PluginInstances();
  PluginInstances(const PluginInstances&) = delete;
  PluginInstances& operator=(const PluginInstances&) = delete;

  // Probes and creates every plugin of `resolution` in order; `config_for(plugin)` gives its values.
  // Throws Error naming the plugin when probe or create fails (instances made so far are destroyed).
  void create_all(const Resolution& resolution,
                  const std::function<std::map<std::string, ConfigValue>(const LoadedPlugin&)>& config_for);
  void destroy_all();

  // The instance serving `kind`, or nullptr.
  const PluginInstance* of_kind(zhost_capability_kind kind) const;
  const std::vector<PluginInstance>& all() const { return instances_; }

 private:
  HostServices& services_;
  std::vector<PluginInstance> instances_;
};

}  // namespace zhost
