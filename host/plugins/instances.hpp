// host/plugins/instances.hpp: the live plugin instances of a job, created in dependency order and
// destroyed in reverse. Each instance gets its own host context (its name for logging, its config values).
#pragma once

#include <functional>
#include <list>
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

  // One more instance, created after the others (e.g. a tier swapped in while the job runs) but placed just
  // before `before`, so that destroy_all() destroys it after `before` (which may use it). Throws like
  // create_all(). References to other instances stay valid.
  const PluginInstance& create_one(const InstanceSpec& spec, const std::map<std::string, ConfigValue>& config,
                                   const PluginInstance& before);
  // Destroys one instance made by create_all() or create_one() (nothing may use it any more).
  void destroy_one(const PluginInstance& live);

  // The instance serving `kind`, or nullptr.
  const PluginInstance* of_kind(zhost_capability_kind kind) const;
  const std::list<PluginInstance>& all() const { return instances_; }

 private:
  PluginInstance create(const InstanceSpec& spec, const std::map<std::string, ConfigValue>& config);

  HostServices& services_;
  std::list<PluginInstance> instances_;  // creation order; a list, so that references survive create_one()
};

}  // namespace zhost
